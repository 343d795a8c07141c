//! The errors of the domain runtime: start-up checks, commits, dispatch,
//! configuration, the outbox and the process store.
//!
//! Each error names what was wrong (the handler, category, key, field or
//! configuration key). Wrapped causes are exposed through
//! [`std::error::Error::source`], never repeated in the outer message.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::broker::BrokerError;
use crate::handler::{HandlerError, HandlerKind};
use crate::key::InvalidKey;
use crate::message::MessageKind;

/// A boxed error from a storage backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything `DomainBuilder::init()` found wrong, reported at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncorrectUsageError {
    problems: Vec<UsageProblem>,
}

impl IncorrectUsageError {
    /// An error listing `problems` (at least one).
    pub fn new(problems: Vec<UsageProblem>) -> Self {
        Self { problems }
    }

    /// Every problem found, in the order the checks ran.
    pub fn problems(&self) -> &[UsageProblem] {
        &self.problems
    }
}

impl fmt::Display for IncorrectUsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.problems.len();
        let noun = if count == 1 { "problem" } else { "problems" };
        write!(f, "the domain cannot start: {count} {noun} found")?;
        for problem in &self.problems {
            write!(f, "\n  - {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for IncorrectUsageError {}

/// One problem found by `init()`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UsageProblem {
    /// Two handlers partition one category by different keys.
    #[error(
        "`{first_handler}` (key `{first_key}`) and `{second_handler}` (key `{second_key}`) partition \
         {kind} category `{category}` by different keys; the key belongs to the category, so every \
         handler of it must use the same key or not partition it"
    )]
    ConflictingKeys {
        /// The stream category.
        category: &'static str,
        /// Whether the conflict is among event consumers or command handlers.
        kind: MessageKind,
        /// The handler that first claimed the category.
        first_handler: &'static str,
        /// The key it claimed.
        first_key: &'static str,
        /// The handler asking for another key.
        second_handler: &'static str,
        /// The other key.
        second_key: &'static str,
    },
    /// A handler declares `sequential_by` but the broker cannot honour it.
    #[error(
        "{handler_kind} `{handler}` declares `sequential_by`, but broker `{broker}` supports neither \
         stream partitioning nor in-process ordering"
    )]
    BrokerCannotPartition {
        /// The partitioned handler.
        handler: &'static str,
        /// Its kind.
        handler_kind: HandlerKind,
        /// The broker's name.
        broker: String,
    },
    /// A partitioned handler has no key field for one of its message types.
    #[error(
        "{handler_kind} `{handler}` is partitioned but declares no key field for `{type_name}` \
         (a `sequential_by` field, or a `correlate` field for a process manager)"
    )]
    MissingKey {
        /// The handler.
        handler: &'static str,
        /// Its kind.
        handler_kind: HandlerKind,
        /// The message type without a key.
        type_name: &'static str,
    },
    /// Two different Rust types share one type name in one category.
    #[error(
        "`{first}` and `{second}` are both called `{type_name}` in category `{category}`; a type \
         name must identify one type within its category (payloads of one would be decoded as the \
         other): rename one with `#[event(name = \"...\")]` (or `#[command(name = \"...\")]`)"
    )]
    DuplicateTypeName {
        /// The shared type name.
        type_name: &'static str,
        /// The category both types belong to.
        category: &'static str,
        /// The first type's Rust path.
        first: &'static str,
        /// The second type's Rust path.
        second: &'static str,
    },
    /// One handler name registered twice.
    #[error(
        "{handler_kind} `{handler}`: the name `{handler}` is registered more than once (handler names \
         must be unique: they name consumer groups and process state); a name defaults to the type's \
         last path segment, so if these are two types such as `Projector<A>` and `Projector<B>`, or \
         `billing::Projector` and `shipping::Projector`, give each its own with `name = \"...\"` on \
         its handler attribute (`#[event_handler(name = \"billing_projector\")]`)"
    )]
    DuplicateHandler {
        /// The handler.
        handler: &'static str,
        /// Its kind.
        handler_kind: HandlerKind,
    },
    /// Two command handlers handle one command type.
    #[error(
        "command `{type_name}` is handled by both `{first_handler}` and `{second_handler}`; a command \
         has exactly one handler"
    )]
    DuplicateCommandHandler {
        /// The command type.
        type_name: &'static str,
        /// The first handler.
        first_handler: &'static str,
        /// The second handler.
        second_handler: &'static str,
    },
    /// A handler handles a message of an aggregate other than its `part_of`.
    #[error(
        "{handler_kind} `{handler}` is part of `{part_of}` but handles `{type_name}` of category \
         `{category}`"
    )]
    ForeignMessage {
        /// The handler.
        handler: &'static str,
        /// Its kind.
        handler_kind: HandlerKind,
        /// The handler's `part_of` category.
        part_of: &'static str,
        /// The message type.
        type_name: &'static str,
        /// The message's category.
        category: &'static str,
    },
    /// Aggregates were registered, but not the one a handler consumes.
    #[error(
        "{handler_kind} `{handler}` consumes category `{category}`, but no registered aggregate owns \
         it (register it with `.aggregate::<...>()`)"
    )]
    UnknownCategory {
        /// The handler.
        handler: &'static str,
        /// Its kind.
        handler_kind: HandlerKind,
        /// The unregistered category.
        category: &'static str,
    },
    /// Two different aggregate types claim one category.
    #[error(
        "aggregates `{first}` and `{second}` both claim category `{category}` (two types with one name \
         get one default category); give one of them its own with `#[aggregate(category = \"...\")]`"
    )]
    DuplicateCategory {
        /// The category.
        category: &'static str,
        /// The first aggregate's Rust type name.
        first: &'static str,
        /// The second aggregate's Rust type name.
        second: &'static str,
    },
    /// An aggregate's category cannot name streams (hand-written `Aggregate`
    /// impls; the derive checks at compile time).
    #[error("aggregate `{aggregate}` has category {category:?}, which {reason}")]
    InvalidCategory {
        /// The aggregate's Rust type name.
        aggregate: &'static str,
        /// The category.
        category: &'static str,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// The domain was given a configuration that differs from the one its
    /// broker was built with.
    #[error(
        "the domain's Config differs from the one broker `{broker}` was built with; the broker's \
         leases and the domain's outbox and key rules must agree: pass the Config to the broker's \
         builder only (the domain then uses the broker's), or the same one to both"
    )]
    ConfigMismatch {
        /// The broker's name.
        broker: String,
    },
    /// `[server.partitioning]` has a key that neither ordo-core nor the
    /// domain's broker reads ([`Broker::partitioning_keys`](crate::broker::Broker::partitioning_keys)):
    /// a typo, or a key of another broker (the inline broker reads none).
    #[error(
        "unknown key `{key}` in the domain configuration; valid keys in [server.partitioning] with \
         broker `{broker}`: {}",
        valid.join(", ")
    )]
    UnknownConfigKey {
        /// The full dotted key, like `server.partitioning.max_retry`.
        key: String,
        /// The broker's name.
        broker: String,
        /// The keys ordo-core and the broker read.
        valid: Vec<&'static str>,
    },
    /// `[categories.NAME] partitions` names a category no event handler
    /// partitions (`sequential_by`), so it has no partitions to set.
    #[error(
        "`[categories.{category}] partitions = {partitions}`: no registered event handler partitions \
         category `{category}` with `sequential_by`, so it has no partitions to configure"
    )]
    PartitionsOfUnpartitionedCategory {
        /// The category named in `domain.toml`.
        category: String,
        /// The setting.
        partitions: crate::config::Partitions,
    },
    /// A `sequential_by` process manager consumes a category configured
    /// with hashed partitions: its unit of ownership is one correlation
    /// value across its categories, which holds only per key.
    #[error(
        "process manager `{handler}` is `sequential_by` on category `{category}`, which \
         `[categories.{category}] partitions = {partitions}` splits into hashed partitions; a process \
         manager owns one correlation value across its categories, so they must stay `per_key`"
    )]
    HashedProcessManager {
        /// The process manager.
        handler: &'static str,
        /// The hashed category.
        category: String,
        /// The setting.
        partitions: crate::config::Partitions,
    },
    /// A category is configured with hashed partitions on a broker that
    /// cannot run them.
    #[error(
        "`[categories.{category}] partitions = {partitions}`, but broker `{broker}` does not support \
         hashed partitions"
    )]
    BrokerCannotHash {
        /// The category.
        category: String,
        /// The setting.
        partitions: crate::config::Partitions,
        /// The broker's name.
        broker: String,
    },
    /// A process manager carries a `#[sequencing_policy]`.
    #[error(
        "process manager `{handler}` declares a sequencing policy; process managers are always \
         sequenced by their correlation value, so that one instance never runs twice at once"
    )]
    ProcessManagerPolicy {
        /// The process manager.
        handler: &'static str,
    },
    /// `[handlers.NAME]` (or `DomainBuilder::handler_settings`) names a
    /// handler that is not registered.
    #[error(
        "handler settings name `{name}`, but no event handler or process manager of that name is          registered (registered: {})",
        if registered.is_empty() { "none".to_owned() } else { registered.join(", ") }
    )]
    UnknownHandlerSettings {
        /// The name in the settings.
        name: String,
        /// The names of the registered event handlers and process managers.
        registered: Vec<&'static str>,
    },
    /// Handler settings name a command handler: commands run once, on the
    /// caller's behalf, so retries and backoff do not apply to them.
    #[error(
        "handler settings name command handler `{handler}`; retries, backoff and concurrency          apply to event handlers and process managers only (a command's failure is returned to          its caller)"
    )]
    CommandHandlerSettings {
        /// The command handler.
        handler: &'static str,
    },
}

/// A unit of work that could not be committed; nothing of it was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitError {
    /// A raised event's partition key is invalid.
    #[error("cannot commit event `{type_name}` (message {message_id}): {key}")]
    InvalidKey {
        /// The message id of the offending event.
        message_id: String,
        /// Its type name.
        type_name: String,
        /// The field, value and rule.
        key: InvalidKey,
    },
    /// A key field holds a JSON value that cannot be a key (an object,
    /// array, floating-point number or boolean).
    #[error(
        "cannot commit event `{type_name}` (message {message_id}): key field `{field}` holds {found}, \
         which cannot be a partition key"
    )]
    UnsupportedKeyValue {
        /// The message id of the offending event.
        message_id: String,
        /// Its type name.
        type_name: String,
        /// The key field.
        field: &'static str,
        /// What the field holds (`a JSON object`, `a boolean`, ...).
        found: &'static str,
    },
    /// An event of a partitioned category has no key field at all.
    #[error(
        "cannot commit event `{type_name}` (message {message_id}): it has no field `{field}`, the \
         partition key of category `{category}`"
    )]
    MissingKeyField {
        /// The message id of the offending event.
        message_id: String,
        /// Its type name.
        type_name: String,
        /// The category's key field.
        field: &'static str,
        /// The partitioned category.
        category: String,
    },
    /// An event serialises to more bytes than `[outbox] max_payload_bytes`
    /// allows: it is refused before anything is written, rather than
    /// stored in the outbox and in Redis.
    #[error(
        "cannot commit event `{type_name}` (message {message_id}): its payload is {size} bytes, more than \
         the {limit} bytes `[outbox] max_payload_bytes` allows"
    )]
    PayloadTooLarge {
        /// The message id of the offending event.
        message_id: String,
        /// Its type name.
        type_name: String,
        /// The serialised payload's size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// An event's JSON does not decode back into its type, so no handler
    /// could ever receive it (for example, nested deeper than the decoder's
    /// recursion limit of 128).
    #[error("cannot commit event `{type_name}`: its serialised form cannot be decoded back into it")]
    Undecodable {
        /// The event type.
        type_name: &'static str,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The unit of work was given a metadata entry whose key is Ordo's own
    /// (starts with `ordo.`, [`crate::message::RESERVED_METADATA_PREFIX`]):
    /// copied from a handled message, its outbox position would make the
    /// broker drop the new events as already published.
    #[error(
        "cannot commit: metadata key `{key}` is reserved for Ordo (keys starting with `ordo.`, such \
         as a handled message's outbox position, which would make the broker drop the new events \
         as already published); copy a handled message's metadata with \
         `UnitOfWork::with_user_metadata`, which leaves them out"
    )]
    ReservedMetadata {
        /// The reserved key given.
        key: String,
    },
    /// Aggregates are registered, but not the one this event is part of.
    #[error(
        "cannot commit event `{type_name}`: its category `{category}` belongs to no registered \
         aggregate (register it with `.aggregate::<...>()`)"
    )]
    UnknownCategory {
        /// The event type.
        type_name: &'static str,
        /// Its category.
        category: &'static str,
    },
    /// The event shares its type name and category with another Rust type
    /// that the domain's handlers handle.
    #[error(
        "cannot commit event `{raised}`: handlers of category `{category}` expect `{handled}` under \
         the type name `{type_name}`; rename one with `#[event(name = \"...\")]`"
    )]
    AmbiguousTypeName {
        /// The shared type name.
        type_name: &'static str,
        /// The category.
        category: &'static str,
        /// The raised type's Rust path.
        raised: &'static str,
        /// The handled type's Rust path.
        handled: &'static str,
    },
    /// An event could not be serialised.
    #[error("cannot serialize event `{type_name}`")]
    Serialization {
        /// The event type.
        type_name: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The outbox refused the rows.
    #[error("the outbox refused the commit")]
    Outbox(#[source] OutboxError),
    /// `HandlerContext::raise` on a context without an open unit of work:
    /// an event handler's, or after the handler returned.
    #[error(
        "this handler context has no open unit of work: command handlers and process managers raise \
         events through their context while they run; an event handler opens one with \
         `Domain::unit_of_work()`"
    )]
    NoUnitOfWork,
}

/// A command that was not handled successfully.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// No command handler handles this type.
    #[error("no command handler is registered for `{type_name}`")]
    NoHandler {
        /// The command type.
        type_name: &'static str,
    },
    /// The command could not be serialised.
    #[error("cannot serialize command `{type_name}`")]
    Serialization {
        /// The command type.
        type_name: &'static str,
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
    /// The command's partition key (`sequential_by`) is invalid.
    #[error("cannot dispatch command `{type_name}` to `{handler}`: {key}")]
    InvalidKey {
        /// The command type.
        type_name: &'static str,
        /// The handler it was meant for.
        handler: &'static str,
        /// The field, value and rule.
        key: InvalidKey,
    },
    /// The handler returned an error. The message includes the error and
    /// its sources (a caller printing `{error}` sees why), so the error is
    /// not also exposed as [`std::error::Error::source`].
    #[error("command handler `{handler}` failed on `{type_name}`: {}", error_chain(&**error))]
    Handler {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
        /// The handler's error.
        error: HandlerError,
    },
    /// The handler succeeded, but the events it raised through its context
    /// could not be committed (nothing of them was written). The message
    /// includes why.
    #[error(
        "command handler `{handler}` succeeded on `{type_name}` but its events were not committed: {}",
        error_chain(&**error)
    )]
    Commit {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
        /// Why the commit failed.
        error: Box<CommitError>,
    },
    /// A command handler dispatched, and awaited, a command of a sequence
    /// it is itself holding: the inner command would wait for the outer
    /// one forever.
    #[error(
        "cannot dispatch command `{type_name}` from inside a handler of sequence `{sequence}`: it \
         belongs to the same sequence and would wait for the handler that awaits it; dispatch it \
         after the handler returns"
    )]
    Reentrant {
        /// The command type.
        type_name: &'static str,
        /// The sequence identifier both share.
        sequence: String,
    },
    /// The handler task ended without a result (it panicked).
    #[error("command handler `{handler}` stopped without a result on `{type_name}` (it panicked)")]
    Aborted {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
    },
}

/// Why [`Domain::settle`](crate::Domain::settle) cannot wait.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// `settle()` was called from inside a handler: it would wait for the
    /// handler that is waiting for it.
    #[error(
        "`settle()` was called from inside handler `{handler}`; it waits until every handler has \
         run, this one included, so it would never return: call it outside handlers"
    )]
    InsideHandler {
        /// The handler that called it.
        handler: &'static str,
    },
}

/// An invalid or unreadable configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML or has a value of the wrong type (the
    /// parser's message names it, quoting the line with its secrets masked).
    #[error("cannot parse the domain configuration")]
    Parse(#[source] TomlError),
    /// A key that `domain.toml` does not have, at any level.
    #[error("unknown key `{key}` in the domain configuration; valid keys {}: {}", unknown_key_place(key), valid.join(", "))]
    UnknownKey {
        /// The full dotted key, like `server.partioning`.
        key: String,
        /// The valid keys at that level.
        valid: Vec<&'static str>,
    },
    /// A table where a value belongs, or a value where a table belongs.
    #[error("`{key}` in the domain configuration must be {expected}, got {found}")]
    WrongType {
        /// The full dotted key.
        key: String,
        /// What belongs there (`a table`, `a value`).
        expected: &'static str,
        /// The TOML type found, with its article (`an integer`).
        found: &'static str,
    },
    /// A `[handlers.NAME]` value is out of range.
    #[error("handlers.{handler}.{key} {reason}")]
    InvalidHandlerSetting {
        /// The handler name (the table's name).
        handler: String,
        /// The key in the table, like `max_retries`.
        key: &'static str,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A `[categories.NAME]` value is out of range.
    #[error("categories.{category}.{key} {reason}")]
    InvalidCategorySetting {
        /// The category (the table's name).
        category: String,
        /// The key in the table, like `partitions`.
        key: &'static str,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A value is out of range.
    #[error("{key} {reason}")]
    Invalid {
        /// The full key, like `server.partitioning.max_retries`.
        key: &'static str,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A setting that is wrong (`error`), and where it was set: a file's
    /// line or an environment variable (see `Config::load`).
    #[error("bad setting in {origin}")]
    At {
        /// Where the setting came from.
        origin: crate::config::Origin,
        /// What is wrong with it.
        #[source]
        error: Box<ConfigError>,
    },
    /// An `ORDO_` environment variable under a table of the configuration
    /// (`ORDO_SERVER_...`, `ORDO_HEALTH_...`) that names no setting: a typo
    /// is never silently ignored.
    #[error("environment variable {var} names no setting of the domain configuration; the names there: {}", valid.join(", "))]
    UnknownEnvVar {
        /// The variable.
        var: String,
        /// The valid names under the same table.
        valid: Vec<String>,
    },
}

/// Where the valid keys of an unknown key's level are: `at the top level`
/// or `in [server]`.
fn unknown_key_place(key: &str) -> String {
    match key.rsplit_once('.') {
        Some((table, _)) => format!("in [{table}]"),
        None => "at the top level".to_owned(),
    }
}

/// A TOML parse error, as the parser words it (where, the line it quotes,
/// what was expected) with the passwords of the URLs in it masked
/// ([`redact_secrets`](crate::text::redact_secrets)): a malformed
/// `url = ...` line is quoted without its password. Neither its `Display`
/// nor its `Debug` holds the configuration text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TomlError {
    message: String,
}

impl TomlError {
    /// The parser's message, secrets masked.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<toml::de::Error> for TomlError {
    fn from(error: toml::de::Error) -> Self {
        Self {
            message: crate::text::redact_secrets(error.to_string().trim_end()),
        }
    }
}

impl ConfigError {
    /// The configuration key at fault, for [`ConfigError::Invalid`] (also
    /// when it is wrapped in [`ConfigError::At`]).
    pub fn key(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { key, .. } => Some(key),
            Self::At { error, .. } => error.key(),
            _ => None,
        }
    }

    /// Where the setting at fault came from, for [`ConfigError::At`].
    pub fn origin(&self) -> Option<&crate::config::Origin> {
        match self {
            Self::At { origin, .. } => Some(origin),
            _ => None,
        }
    }

    /// The error itself, without where it was set ([`ConfigError::At`]).
    pub fn innermost(&self) -> &ConfigError {
        match self {
            Self::At { error, .. } => error.innermost(),
            other => other,
        }
    }

    /// The dotted key this error is about, if it names one.
    pub(crate) fn dotted_key(&self) -> Option<String> {
        match self {
            Self::UnknownKey { key, .. } | Self::WrongType { key, .. } => Some(key.clone()),
            Self::Invalid { key, .. } => Some((*key).to_owned()),
            Self::InvalidHandlerSetting { handler, key, .. } => Some(format!("handlers.{handler}.{key}")),
            Self::InvalidCategorySetting { category, key, .. } => {
                Some(format!("categories.{category}.{key}"))
            }
            // A type error found while reading a merged table ends with
            // "in `server.partitioning.max_retries`".
            Self::Parse(error) => {
                let text = error.to_string();
                let (_, after) = text.rsplit_once("in `")?;
                let (key, _) = after.split_once('`')?;
                Some(key.to_owned())
            }
            Self::Io { .. } | Self::At { .. } | Self::UnknownEnvVar { .. } => None,
        }
    }
}

/// Invalid [`Backoff`](crate::backoff::Backoff) bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffError {
    /// The initial delay is zero.
    #[error("the initial backoff delay must be greater than zero")]
    ZeroInitial,
    /// The cap is below the initial delay.
    #[error("the maximum backoff delay ({max:?}) must be at least the initial delay ({initial:?})")]
    MaxBelowInitial {
        /// The initial delay.
        initial: Duration,
        /// The cap.
        max: Duration,
    },
}

/// An outbox storage failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// No row has this id (never written, or pruned after publishing).
    #[error("outbox row {id} does not exist")]
    UnknownRow {
        /// The row id.
        id: u64,
    },
    /// The storage backend failed.
    #[error("outbox storage failed")]
    Storage(#[source] BoxError),
}

/// A process store failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessStoreError {
    /// The storage backend failed.
    #[error("process store failed for `{manager}` instance `{correlation}`")]
    Storage {
        /// The process manager.
        manager: String,
        /// The correlation value.
        correlation: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// The write was refused because the lease it was fenced by moved on.
    #[error(
        "state of `{manager}` instance `{correlation}` not saved: fencing token {fencing_token} is stale"
    )]
    Fenced {
        /// The process manager.
        manager: String,
        /// The correlation value.
        correlation: String,
        /// The stale token the write carried.
        fencing_token: u64,
    },
}

/// A running domain that did not stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShutdownError {
    /// The broker's consumer returned an error.
    #[error("broker `{broker}` stopped with an error")]
    Broker {
        /// The broker's name.
        broker: String,
        /// Its error.
        #[source]
        source: BrokerError,
    },
    /// Outbox rows were still pending when the drain timeout ran out (the
    /// broker kept refusing them). With an in-memory outbox they are lost
    /// when the process exits.
    #[error(
        "{} left unpublished in the outbox after draining for {timeout:?}",
        match rows { Some(1) => "1 row".to_owned(), Some(n) => format!("{n} rows"), None => "rows (how many is unknown: the outbox cannot be read)".to_owned() }
    )]
    Unpublished {
        /// How many rows were left pending (`None` when the outbox could not be read).
        rows: Option<usize>,
        /// How long the drain tried.
        timeout: Duration,
    },
    /// A background task panicked.
    #[error("the {task} task panicked")]
    Panicked {
        /// Which task (`outbox processor`, `broker`).
        task: &'static str,
    },
}

/// An error and its sources on one line, joined with `: ` (for logs and
/// halt records, where a source chain would otherwise be lost).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
