//! The start-up checks of `init()` and the partitioning they establish.
//!
//! Every check runs and every problem is collected, so one failed start-up
//! lists all that must be fixed.

use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};

use crate::contract::broker::Capabilities;
use crate::contract::config::{Config, Partitions};
use crate::contract::error::CommitError;
use crate::contract::field::{KeyFieldError, KeyReadError, read_key};
use crate::contract::handler::{HandlerDescriptor, HandlerKind, RustType};
use crate::contract::key::KeyExtractor;
use crate::contract::message::{Envelope, MessageKind};
use crate::runtime::error::UsageProblem;

/// A registered aggregate type.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AggregateInfo {
    pub(crate) type_id: TypeId,
    pub(crate) type_name: &'static str,
    pub(crate) category: &'static str,
}

/// How the events of one partitioned category get their key.
#[derive(Debug, Clone)]
pub(crate) struct CategoryKey {
    field: &'static str,
    /// Typed extractors of handlers that handle the type, by type name.
    extractors: HashMap<&'static str, KeyExtractor>,
}

impl CategoryKey {
    /// The key field of the category.
    pub(crate) fn field(&self) -> &'static str {
        self.field
    }

    /// The key value of a raised event: from a handler's typed extractor
    /// when one handles the type, else from the payload's top-level field
    /// (integers keep their exact text; floats, booleans, arrays and objects
    /// are refused, as the macros refuse them at compile time).
    pub(crate) fn key_value(
        &self,
        envelope: &Envelope,
        typed: &dyn Any,
    ) -> Result<Option<String>, CommitError> {
        let extracted = self
            .extractors
            .get(envelope.type_name.as_str())
            .and_then(|extractor| extractor.extract(typed));
        if let Some(value) = extracted {
            return Ok(value);
        }
        read_key(&envelope.payload, self.field).map_err(|error| match error {
            KeyReadError::Field(KeyFieldError::Missing) => CommitError::MissingKeyField {
                message_id: envelope.id.clone(),
                type_name: envelope.type_name.clone(),
                field: self.field,
                category: envelope.category.clone(),
            },
            KeyReadError::Field(KeyFieldError::Unsupported(found)) => CommitError::UnsupportedKeyValue {
                message_id: envelope.id.clone(),
                type_name: envelope.type_name.clone(),
                field: self.field,
                found,
            },
            KeyReadError::NotAnObject(_) => CommitError::UnsupportedKeyValue {
                message_id: envelope.id.clone(),
                type_name: envelope.type_name.clone(),
                field: self.field,
                found: "a payload that is not a JSON object",
            },
        })
    }
}

/// The Rust type behind each handled (category, type name).
pub(crate) type MessageTypes = HashMap<(&'static str, &'static str), RustType>;

/// The handled message types whose Rust type is known.
pub(crate) fn message_types(descriptors: &[&HandlerDescriptor]) -> MessageTypes {
    descriptors
        .iter()
        .flat_map(|d| &d.handles)
        .filter_map(|h| Some(((h.category, h.type_name), h.rust_type?)))
        .collect()
}

/// Partitioned event categories and their keys.
pub(crate) type Partitioning = HashMap<&'static str, CategoryKey>;

/// One handler's request to partition a category by a field.
#[derive(Debug, Clone, Copy)]
struct Claim {
    handler: &'static str,
    kind: MessageKind,
    category: &'static str,
    field: &'static str,
    type_name: &'static str,
    extractor: Option<KeyExtractor>,
}

/// Runs every check; returns the event partitioning, or all problems found.
pub(crate) fn check(
    descriptors: &[&HandlerDescriptor],
    aggregates: &[AggregateInfo],
    broker_name: &str,
    capabilities: Capabilities,
) -> Result<Partitioning, Vec<UsageProblem>> {
    let mut problems = Vec::new();
    check_aggregates(aggregates, &mut problems);
    check_names(descriptors, &mut problems);
    check_type_names(descriptors, &mut problems);
    check_command_routes(descriptors, &mut problems);
    check_membership(descriptors, aggregates, &mut problems);
    check_process_manager_policies(descriptors, &mut problems);
    let claims = collect_claims(descriptors, &mut problems);
    check_key_agreement(&claims, &mut problems);
    check_broker(descriptors, broker_name, capabilities, &mut problems);
    if problems.is_empty() {
        Ok(partitioning(&claims))
    } else {
        Err(problems)
    }
}

fn check_aggregates(aggregates: &[AggregateInfo], problems: &mut Vec<UsageProblem>) {
    let mut owners: HashMap<&str, &AggregateInfo> = HashMap::new();
    for aggregate in aggregates {
        if let Some(reason) = category_problem(aggregate.category)
            && !owners.contains_key(aggregate.category)
        {
            problems.push(UsageProblem::InvalidCategory {
                aggregate: aggregate.type_name,
                category: aggregate.category,
                reason,
            });
        }
        match owners.get(aggregate.category) {
            Some(first) if first.type_id != aggregate.type_id => {
                problems.push(UsageProblem::DuplicateCategory {
                    category: aggregate.category,
                    first: first.type_name,
                    second: aggregate.type_name,
                })
            }
            Some(_) => {}
            None => {
                owners.insert(aggregate.category, aggregate);
            }
        }
    }
}

/// Why `category` cannot name streams (`{category}:{key}`), if it cannot;
/// the rules `#[derive(Aggregate)]` checks at compile time.
fn category_problem(category: &str) -> Option<&'static str> {
    if category.is_empty() {
        Some("is empty")
    } else if category.contains(':') {
        Some("contains `:` (the stream-name separator)")
    } else if category.chars().any(char::is_control) {
        Some("contains control characters")
    } else if category == crate::contract::key::DLQ_TOKEN {
        Some("is the reserved dead-letter lane token `dlq`")
    } else if category.len() > 4 && category.starts_with("__") && category.ends_with("__") {
        Some("has the reserved sentinel form `__name__`")
    } else {
        None
    }
}

fn check_names(descriptors: &[&HandlerDescriptor], problems: &mut Vec<UsageProblem>) {
    let mut seen = HashSet::new();
    for descriptor in descriptors {
        if !seen.insert(descriptor.name) {
            problems.push(UsageProblem::DuplicateHandler {
                handler: descriptor.name,
                handler_kind: descriptor.kind,
            });
        }
    }
}

/// A type name identifies one Rust type within its category: the payload is
/// decoded by name, so two types sharing one would be confused. The same name
/// in two categories is fine (delivery matches category and name).
fn check_type_names(descriptors: &[&HandlerDescriptor], problems: &mut Vec<UsageProblem>) {
    let mut known: HashMap<(&str, &str), RustType> = HashMap::new();
    let mut reported = HashSet::new();
    for handled in descriptors.iter().flat_map(|d| &d.handles) {
        let Some(this) = handled.rust_type else { continue };
        let first = *known.entry((handled.category, handled.type_name)).or_insert(this);
        if first.id != this.id && reported.insert((handled.category, handled.type_name, this.id)) {
            problems.push(UsageProblem::DuplicateTypeName {
                type_name: handled.type_name,
                category: handled.category,
                first: first.path,
                second: this.path,
            });
        }
    }
}

fn check_command_routes(descriptors: &[&HandlerDescriptor], problems: &mut Vec<UsageProblem>) {
    let mut routes: HashMap<(&str, &str), &str> = HashMap::new();
    let command_handlers = descriptors.iter().filter(|d| d.kind == HandlerKind::Command);
    for descriptor in command_handlers {
        for handled in &descriptor.handles {
            match routes.get(&(handled.category, handled.type_name)) {
                Some(&first) if first != descriptor.name => {
                    problems.push(UsageProblem::DuplicateCommandHandler {
                        type_name: handled.type_name,
                        first_handler: first,
                        second_handler: descriptor.name,
                    })
                }
                Some(_) => {}
                None => {
                    routes.insert((handled.category, handled.type_name), descriptor.name);
                }
            }
        }
    }
}

/// Handled messages belong to the handler's `part_of` aggregate, and, once
/// any aggregate is registered, every consumed category has one.
fn check_membership(
    descriptors: &[&HandlerDescriptor],
    aggregates: &[AggregateInfo],
    problems: &mut Vec<UsageProblem>,
) {
    let known: HashSet<&str> = aggregates.iter().map(|a| a.category).collect();
    for descriptor in descriptors {
        if let Some(part_of) = descriptor.part_of {
            let foreign = descriptor.handles.iter().filter(|h| h.category != part_of);
            problems.extend(foreign.map(|handled| UsageProblem::ForeignMessage {
                handler: descriptor.name,
                handler_kind: descriptor.kind,
                part_of,
                type_name: handled.type_name,
                category: handled.category,
            }));
        }
        if known.is_empty() {
            continue;
        }
        let mut categories = descriptor.categories();
        if let Some(part_of) = descriptor.part_of
            && !categories.contains(&part_of)
        {
            categories.push(part_of);
        }
        let unknown = categories.into_iter().filter(|c| !known.contains(c));
        problems.extend(unknown.map(|category| UsageProblem::UnknownCategory {
            handler: descriptor.name,
            handler_kind: descriptor.kind,
            category,
        }));
    }
}

fn check_process_manager_policies(descriptors: &[&HandlerDescriptor], problems: &mut Vec<UsageProblem>) {
    let with_policy = descriptors.iter().filter(|d| {
        d.kind == HandlerKind::ProcessManager
            && (d.policy.is_some() || d.handles.iter().any(|h| h.policy.is_some()))
    });
    problems.extend(with_policy.map(|d| UsageProblem::ProcessManagerPolicy { handler: d.name }));
}

/// The key claims of partitioned handlers, in registration order: the
/// `sequential_by` field of event and command handlers, the `correlate`
/// field of each message of a process manager.
fn collect_claims(descriptors: &[&HandlerDescriptor], problems: &mut Vec<UsageProblem>) -> Vec<Claim> {
    let mut claims = Vec::new();
    for descriptor in descriptors.iter().filter(|d| d.partitioned) {
        for handled in &descriptor.handles {
            let extractor_field = handled.key.map(|k| k.field());
            let field = match descriptor.kind {
                HandlerKind::ProcessManager => extractor_field,
                HandlerKind::Event | HandlerKind::Command => descriptor.sequential_by.or(extractor_field),
            };
            let Some(field) = field else {
                problems.push(UsageProblem::MissingKey {
                    handler: descriptor.name,
                    handler_kind: descriptor.kind,
                    type_name: handled.type_name,
                });
                continue;
            };
            claims.push(Claim {
                handler: descriptor.name,
                kind: handled.kind,
                category: handled.category,
                field,
                type_name: handled.type_name,
                extractor: handled.key.filter(|k| k.field() == field),
            });
        }
    }
    claims
}

/// One key per category (events and commands apart): every claim must
/// agree with the category's first claim.
fn check_key_agreement(claims: &[Claim], problems: &mut Vec<UsageProblem>) {
    let mut first: HashMap<(MessageKind, &str), &Claim> = HashMap::new();
    let mut reported = HashSet::new();
    for claim in claims {
        let reference = *first.entry((claim.kind, claim.category)).or_insert(claim);
        if reference.field != claim.field
            && reported.insert((claim.kind, claim.category, claim.handler, claim.field))
        {
            problems.push(UsageProblem::ConflictingKeys {
                category: claim.category,
                kind: claim.kind,
                first_handler: reference.handler,
                first_key: reference.field,
                second_handler: claim.handler,
                second_key: claim.field,
            });
        }
    }
}

/// A partitioned handler needs a broker that partitions streams or runs
/// handlers in process in order.
fn check_broker(
    descriptors: &[&HandlerDescriptor],
    broker_name: &str,
    capabilities: Capabilities,
    problems: &mut Vec<UsageProblem>,
) {
    if capabilities.stream_partitioning || capabilities.ordered_in_process {
        return;
    }
    let partitioned = descriptors.iter().filter(|d| d.partitioned);
    problems.extend(partitioned.map(|d| UsageProblem::BrokerCannotPartition {
        handler: d.name,
        handler_kind: d.kind,
        broker: broker_name.to_owned(),
    }));
}

/// The key of each partitioned event category, with the typed extractors
/// of the handlers that handle its types.
fn partitioning(claims: &[Claim]) -> Partitioning {
    let mut partitioning = Partitioning::new();
    for claim in claims.iter().filter(|c| c.kind == MessageKind::Event) {
        let key = partitioning.entry(claim.category).or_insert_with(|| CategoryKey {
            field: claim.field,
            extractors: HashMap::new(),
        });
        if let Some(extractor) = claim.extractor {
            key.extractors.entry(claim.type_name).or_insert(extractor);
        }
    }
    partitioning
}

/// The `[categories.NAME] partitions` settings: a hashed category must be a
/// partitioned event category, consumed by no `sequential_by` process
/// manager, on a broker that runs hashed partitions (the inline broker
/// orders every key in process, so the setting changes nothing there).
pub(crate) fn check_partitions(
    config: &Config,
    partitioning: &Partitioning,
    descriptors: &[&HandlerDescriptor],
    broker_name: &str,
    capabilities: Capabilities,
) -> Vec<UsageProblem> {
    let mut problems = Vec::new();
    for (category, &partitions) in config.categories() {
        let Partitions::Hashed(_) = partitions else {
            continue;
        };
        if !partitioning.contains_key(category.as_str()) {
            problems.push(UsageProblem::PartitionsOfUnpartitionedCategory {
                category: category.clone(),
                partitions,
            });
            continue;
        }
        let managers = descriptors.iter().filter(|d| {
            d.kind == HandlerKind::ProcessManager
                && d.partitioned
                && d.handles.iter().any(|h| h.category == category.as_str())
        });
        problems.extend(managers.map(|d| UsageProblem::HashedProcessManager {
            handler: d.name,
            category: category.clone(),
            partitions,
        }));
        if !capabilities.hashed_partitions && !capabilities.ordered_in_process {
            problems.push(UsageProblem::BrokerCannotHash {
                category: category.clone(),
                partitions,
                broker: broker_name.to_owned(),
            });
        }
    }
    problems
}
