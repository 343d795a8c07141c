//! The command bus behind `Domain::dispatch`: one handler per command type,
//! sequenced in process by the handler's policy.

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use crate::contract::broker::Subscription;
use crate::contract::context::{self, Running};
use crate::contract::handler::DynHandler;
use crate::contract::key::KeyRules;
use crate::contract::message::{Command, Envelope, Message};
use crate::contract::policy::{ProcessingContext, SequenceId};
use crate::runtime::error::DispatchError;
use crate::runtime::executor::KeyedExecutor;

/// A command routed to its handler, ready to run.
pub(crate) struct Routed {
    /// The handler, when it runs in this process (`None`: registered by
    /// type, run by other instances).
    pub(crate) handler: Option<Arc<dyn DynHandler>>,
    /// Its name.
    pub(crate) name: &'static str,
    /// The command, with its validated partition key.
    pub(crate) envelope: Envelope,
    /// The sequence it runs in.
    pub(crate) sequence: Option<SequenceId>,
}

/// Routes each command to its one handler through a [`KeyedExecutor`].
///
/// The handler's policy (by default the routing key) gives the sequence id:
/// commands with the same id are handled one after another in dispatch
/// order, others in parallel. Sequence ids are not scoped to the handler,
/// so two handlers of one aggregate's commands also take turns per routing
/// key.
///
/// A command dispatched from inside a command handler is nested: it still
/// waits for its turn in its sequence, but runs on the slot of the handler
/// that awaits it (so handlers dispatching sub-commands cannot take every
/// slot and wait for each other). A nested command of a sequence its chain
/// of callers holds would wait for itself: it is refused with
/// [`DispatchError::Reentrant`].
#[derive(Debug)]
pub(crate) struct CommandBus {
    executor: KeyedExecutor,
    /// Each command type's handler, and whether it runs in this process.
    routes: HashMap<(&'static str, &'static str), (Subscription, bool)>,
    rules: KeyRules,
}

impl CommandBus {
    /// A bus over the command handlers in `subscriptions` (run here) and
    /// `elsewhere` (registered by type: run by other instances); `init()`
    /// has checked that each command type has at most one.
    pub(crate) fn new(
        subscriptions: &[Subscription],
        elsewhere: &[Subscription],
        rules: KeyRules,
        max_concurrency: usize,
    ) -> Self {
        let local = subscriptions.iter().map(|s| (s, true));
        let remote = elsewhere.iter().map(|s| (s, false));
        let routes = local
            .chain(remote)
            .flat_map(|(s, here)| {
                s.descriptor
                    .handles
                    .iter()
                    .map(move |h| ((h.category, h.type_name), (s.clone(), here)))
            })
            .collect();
        Self {
            executor: KeyedExecutor::new(max_concurrency),
            routes,
            rules,
        }
    }

    /// Routes `command` to its handler: its envelope (with its validated
    /// partition key) and its sequence. Refuses a nested dispatch of a
    /// sequence the calling chain holds.
    pub(crate) fn route<C: Command>(&self, command: &C) -> Result<Routed, DispatchError> {
        let type_name = C::TYPE_NAME;
        let (route, here) = self
            .routes
            .get(&(C::CATEGORY, type_name))
            .ok_or(DispatchError::NoHandler { type_name })?;
        let handler = route.name();
        let mut envelope = Envelope::command(command)
            .map_err(|source| DispatchError::Serialization { type_name, source })?;
        envelope.partition_key = self.partition_key(route, command)?;
        let context = ProcessingContext::new(handler).with_typed(command);
        let sequence = route
            .policy_for(C::CATEGORY, type_name)
            .sequence_identifier(&envelope, &context);
        // A routing key used as the sequence key obeys the partition-key rules.
        if let Some(routing_key) = envelope.routing_key.as_deref()
            && sequence.as_ref().map(SequenceId::as_str) == Some(routing_key)
        {
            self.rules
                .validate("routing_key", Some(routing_key))
                .map_err(|key| DispatchError::InvalidKey {
                    type_name,
                    handler,
                    key,
                })?;
        }
        if let Some(sequence) = sequence.as_ref().filter(|s| context::holds(s)) {
            return Err(DispatchError::Reentrant {
                type_name,
                sequence: sequence.to_string(),
            });
        }
        Ok(Routed {
            handler: here.then(|| route.handler.clone()),
            name: handler,
            envelope,
            sequence,
        })
    }

    /// Checks that `sequence`, the sequence of a command sent to the owner
    /// of its partition, can be a partition key.
    pub(crate) fn validate_sequence(
        &self,
        type_name: &'static str,
        handler: &'static str,
        sequence: &str,
    ) -> Result<(), DispatchError> {
        self.rules
            .validate("sequence", Some(sequence))
            .map(drop)
            .map_err(|key| DispatchError::InvalidKey {
                type_name,
                handler,
                key,
            })
    }

    /// Runs `task`, the handler run of a routed command, in its sequence,
    /// as the command handler `handler`: on the caller's slot when the
    /// dispatch is nested in a command handler. `None` when the task
    /// stopped without a result (it panicked).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        handler: &'static str,
        sequence: Option<SequenceId>,
        task: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let running = Running::command(handler, sequence.clone());
        let task = context::scope(running, task);
        let outcome = if context::on_bus() {
            self.executor.submit_nested(sequence, task)
        } else {
            self.executor.submit(sequence, task)
        };
        outcome.await.ok()
    }

    /// The validated `sequential_by` key of a partitioned handler's command.
    fn partition_key<C: Message>(
        &self,
        route: &Subscription,
        command: &C,
    ) -> Result<Option<String>, DispatchError> {
        if !route.partitioned() {
            return Ok(None);
        }
        let Some(extractor) = route
            .descriptor
            .handled(C::CATEGORY, C::TYPE_NAME)
            .and_then(|h| h.key)
        else {
            return Ok(None);
        };
        let value = extractor.extract(command as &dyn Any).flatten();
        self.rules
            .validate(extractor.field(), value.as_deref())
            .map(Some)
            .map_err(|key| DispatchError::InvalidKey {
                type_name: C::TYPE_NAME,
                handler: route.name(),
                key,
            })
    }
}
