//! `Domain::send` and `Domain::dispatch`: a command's handler run in its
//! sequence, with the unit of work its context raises events into,
//! committed when it succeeds, and its reply returned to the sender.
//!
//! On a broker that routes commands ([`Broker::command_router`](crate::contract::broker::Broker::command_router),
//! the Redis broker) a command with a sequence travels to the instance that
//! owns the sequence's partition and runs there (`CommandRun`, the
//! aggregate's command handlers as that broker's consumer runs them);
//! otherwise it runs in this process, sequenced by the command bus.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{DeserializeOwned, IgnoredAny};

use crate::contract::attempt::{catch_panic, panic_message};
use crate::contract::command::{
    CommandOutcome, CommandRequest, FailureKind, ReplySlot, SendFailure, aggregate_of_command_category,
    command_category,
};
use crate::contract::context::{self, Running};
use crate::contract::error::{CommitError, error_chain};
use crate::contract::handler::{
    BoxFuture, DynHandler, HandlerContext, HandlerDescriptor, HandlerError, HandlerResult,
};
use crate::contract::message::{Command, DecodeError, Envelope};
use crate::contract::policy::SequenceId;
use crate::contract::trace;
use crate::runtime::domain::{Domain, DomainRef};
use crate::runtime::error::{DispatchError, RemoteHandlerError};
use crate::runtime::uow::ContextUnitOfWork;

/// The longest command id [`SendOptions::id`] accepts, in bytes.
pub const MAX_COMMAND_ID_BYTES: usize = 200;

/// How one command is sent: its id (for a safe retry) and how long to wait
/// for its outcome.
///
/// ```
/// # use std::time::Duration;
/// use ordo_core::runtime::dispatch::SendOptions;
/// let options = SendOptions::new()
///     .id("order-42-cancel")
///     .timeout(Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendOptions {
    id: Option<String>,
    timeout: Option<Duration>,
}

impl SendOptions {
    /// No id of the caller's (one is generated), the configured timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The command id: a resend with the same id within `[commands]
    /// dedup_window_ms` returns the first outcome without running the
    /// command again (on a broker that routes commands). At most
    /// [`MAX_COMMAND_ID_BYTES`] bytes, not empty, no control characters.
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// How long to wait for the outcome (over `[commands] timeout_ms`).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Why a command's run in this process failed.
enum Failed {
    Handler(HandlerError),
    Commit(CommitError),
}

impl Domain {
    /// Handles `command` with its handler and returns the outcome, without
    /// the handler's reply (see [`Domain::send`]). Commands with the same
    /// sequence id (by default the routing key) are handled one after
    /// another, in dispatch order, on one instance at a time.
    ///
    /// The events the handler raised with [`HandlerContext::raise`] are
    /// committed to the outbox together when it succeeds (before the next
    /// command of its sequence runs) and discarded when it fails.
    pub async fn dispatch<C: Command>(&self, command: C) -> Result<(), DispatchError> {
        self.send_with::<C, IgnoredAny>(command, SendOptions::new())
            .await
            .map(drop)
    }

    /// Handles `command` and returns its handler's reply, decoded as `R`
    /// (the `Ok` value of the handler method; `()` when it returns none).
    ///
    /// On a broker that routes commands (Redis) a command with a sequence
    /// runs on the instance that owns its sequence's partition, in order
    /// with every other command of that sequence whichever instance sent
    /// it; the call waits for its outcome up to `[commands] timeout_ms`
    /// ([`DispatchError::Timeout`]: it may still run). Otherwise it runs in
    /// this process, as [`Domain::dispatch`] describes.
    pub async fn send<C: Command, R: DeserializeOwned>(&self, command: C) -> Result<R, DispatchError> {
        self.send_with(command, SendOptions::new()).await
    }

    /// [`Domain::send`] with `options`: the command's id (a resend with the
    /// same id gets the first outcome) and its timeout.
    pub async fn send_with<C: Command, R: DeserializeOwned>(
        &self,
        command: C,
        options: SendOptions,
    ) -> Result<R, DispatchError> {
        let type_name = C::TYPE_NAME;
        let mut routed = self.bus().route(&command)?;
        let caller_id = options.id.is_some();
        if let Some(id) = options.id {
            check_id(&id).map_err(|reason| DispatchError::InvalidId { type_name, reason })?;
            routed.envelope.id = id;
        }
        let handler = routed.name;
        let value = match (self.command_router(), routed.sequence.clone()) {
            (Some(router), Some(sequence)) => {
                let key = sequence.to_string();
                self.bus().validate_sequence(type_name, handler, &key)?;
                let mut envelope = routed.envelope;
                envelope.category = command_category(&envelope.category);
                envelope.partition_key = Some(key.clone());
                trace::publish(&mut envelope);
                let command_id = envelope.id.clone();
                let commands = self.config().commands();
                let timeout = options.timeout.unwrap_or(commands.timeout());
                let request = CommandRequest::new(envelope, key, handler, timeout, commands.dedup_window())
                    .with_caller_id(caller_id);
                match router.send(request).await {
                    Ok(outcome) => outcome_value(outcome, handler, type_name, command_id)?,
                    Err(SendFailure::TimedOut(after)) => {
                        return Err(DispatchError::Timeout {
                            handler,
                            type_name,
                            command_id,
                            after,
                        });
                    }
                    Err(SendFailure::Broker(source)) => {
                        return Err(DispatchError::Broker {
                            handler,
                            type_name,
                            command_id,
                            source,
                        });
                    }
                    Err(SendFailure::Unreadable(source)) => {
                        return Err(DispatchError::Broker {
                            handler,
                            type_name,
                            command_id,
                            source: Box::new(source),
                        });
                    }
                }
            }
            (_, sequence) => {
                let Some(local) = routed.handler else {
                    return Err(DispatchError::NoHandler { type_name });
                };
                let mut envelope = routed.envelope;
                trace::publish(&mut envelope);
                self.run_here(local, handler, type_name, envelope, sequence)
                    .await?
            }
        };
        serde_json::from_value(value).map_err(|source| DispatchError::Reply {
            handler,
            type_name,
            source,
        })
    }

    /// Runs a routed command in this process, in its sequence; its reply.
    async fn run_here(
        &self,
        dyn_handler: Arc<dyn DynHandler>,
        handler: &'static str,
        type_name: &'static str,
        envelope: Envelope,
        sequence: Option<SequenceId>,
    ) -> Result<serde_json::Value, DispatchError> {
        let uow = ContextUnitOfWork::new(self.unit_of_work());
        let reply = ReplySlot::new();
        let slot = reply.clone();
        let envelope = Arc::new(envelope);
        let traced = trace::process(&envelope, "ordo", handler, 0);
        let run = context::handling(Arc::clone(&envelope), async move {
            let ctx = HandlerContext::shared(Arc::clone(&envelope))
                .with_unit_of_work(Arc::new(uow.clone()))
                .with_reply(slot);
            let handled = dyn_handler.handle(&envelope, &ctx).await;
            drop(ctx);
            match (handled, uow.take()) {
                (Ok(()), Some(uow)) => uow.commit().await.map(drop).map_err(Failed::Commit),
                (Ok(()), None) => Ok(()),
                (Err(error), _) => Err(Failed::Handler(error)),
            }
        });
        let task = traced.run(run);
        match self.bus().run(handler, sequence, task).await {
            Some(Ok(())) => Ok(match reply.take() {
                Some(CommandOutcome::Succeeded { value }) => value,
                _ => serde_json::Value::Null,
            }),
            Some(Err(Failed::Handler(error))) => Err(DispatchError::Handler {
                handler,
                type_name,
                error,
            }),
            Some(Err(Failed::Commit(error))) => Err(DispatchError::Commit {
                handler,
                type_name,
                error: Box::new(error),
            }),
            None => Err(DispatchError::Aborted { handler, type_name }),
        }
    }
}

/// The reply of a command's outcome, or its failure as a [`DispatchError`].
fn outcome_value(
    outcome: CommandOutcome,
    handler: &'static str,
    type_name: &'static str,
    command_id: String,
) -> Result<serde_json::Value, DispatchError> {
    match outcome {
        CommandOutcome::Succeeded { value } => Ok(value),
        CommandOutcome::Failed(failure) if failure.kind == FailureKind::Handler => {
            Err(DispatchError::Handler {
                handler,
                type_name,
                error: Box::new(RemoteHandlerError {
                    message: failure.message,
                }),
            })
        }
        CommandOutcome::Failed(failure) => Err(DispatchError::Rejected {
            handler,
            type_name,
            command_id,
            kind: failure.kind,
            message: failure.message,
        }),
    }
}

/// Why `id` cannot be a command id, if it cannot.
fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("it is empty".to_owned());
    }
    if id.len() > MAX_COMMAND_ID_BYTES {
        return Err(format!(
            "it is {} bytes long, more than {MAX_COMMAND_ID_BYTES}",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Err("it contains a control character".to_owned());
    }
    Ok(())
}

/// A command handler and its description.
pub(crate) type CommandHandlerRef = (Arc<dyn DynHandler>, Arc<HandlerDescriptor>);

/// The command handlers of one aggregate as a routing broker runs them,
/// as one consumer (so that commands of one key run one at a time whichever
/// handler handles them), for commands sent from any instance: it restores
/// the command's aggregate category, runs the handler of its type with a
/// unit of work, commits what it raised, and writes the outcome into the
/// context's [`ReplySlot`]. Every failure of the command itself (a type no
/// handler here handles, an undecodable payload, the handler's error or
/// panic, events that cannot be committed) is an outcome and the run
/// succeeds, so a bad command never halts its key; only an outbox that
/// cannot take the events now fails the run, to be retried by the broker.
pub(crate) struct CommandRun {
    /// Each handled (category, type name): its handler and description.
    routes: HashMap<(&'static str, &'static str), CommandHandlerRef>,
    /// Names the consumer in messages about a type nobody handles.
    name: &'static str,
    domain: DomainRef,
}

impl CommandRun {
    /// The run of `handlers` (each with its own description), named `name`.
    pub(crate) fn new(name: &'static str, handlers: &[CommandHandlerRef], domain: DomainRef) -> Self {
        let routes = handlers
            .iter()
            .flat_map(|(handler, descriptor)| {
                descriptor.handles.iter().map(move |handled| {
                    (
                        (handled.category, handled.type_name),
                        (Arc::clone(handler), Arc::clone(descriptor)),
                    )
                })
            })
            .collect();
        Self { routes, name, domain }
    }

    async fn run(&self, envelope: &Envelope, ctx: &HandlerContext) -> HandlerResult {
        let slot = ctx.reply_slot().cloned().unwrap_or_default();
        let mut envelope = envelope.clone();
        if let Some(category) = aggregate_of_command_category(&envelope.category) {
            envelope.category = category.to_owned();
        }
        let route = self
            .routes
            .get(&(envelope.category.as_str(), envelope.type_name.as_str()))
            .filter(|(_, descriptor)| descriptor.handled_envelope(&envelope).is_some());
        let Some((handler, descriptor)) = route else {
            slot.set(CommandOutcome::failed(
                FailureKind::UnknownType,
                self.name,
                format!(
                    "no command handler on this instance handles command `{}` of `{}` (is another version \
                     deployed here?)",
                    envelope.type_name, envelope.category
                ),
            ));
            return Ok(());
        };
        let name = descriptor.name;
        // The delivery's span names the command partitions' group: the handler is this one.
        trace::handler(name);
        let Some(domain) = self.domain.get() else {
            return Err(format!("the domain of `{name}` is gone (shutting down)").into());
        };
        // The events of a run again (after a failover) carry the first
        // run's ids: the broker's deduplication drops what it published.
        let uow = ContextUnitOfWork::new(domain.unit_of_work().with_ids_from(&envelope.id));
        let ctx = ctx
            .clone()
            .with_unit_of_work(Arc::new(uow.clone()))
            .with_reply(slot.clone());
        let sequence = envelope.partition_key.clone().map(SequenceId::new);
        let handler = Arc::clone(handler);
        let message = Arc::new(envelope.clone());
        // A panic is this command's outcome, not the attempt's; the run is
        // this attempt's own (a broker that loses the lease aborts both).
        let run = context::scope(
            Running::routed_command(name, sequence),
            context::handling(Arc::clone(&message), async move {
                handler.handle(&message, &ctx).await
            }),
        );
        let handled = match catch_panic(run).await {
            Ok(handled) => handled,
            Err(payload) => {
                slot.set(CommandOutcome::failed(
                    FailureKind::Panicked,
                    name,
                    format!("`{name}` panicked: {}", panic_message(&*payload)),
                ));
                return Ok(());
            }
        };
        if let Err(error) = handled {
            let kind = if error.downcast_ref::<DecodeError>().is_some() {
                FailureKind::Undecodable
            } else {
                FailureKind::Handler
            };
            let outcome = CommandOutcome::failed(kind, name, error_chain(&*error));
            slot.fail(outcome, error);
            return Ok(());
        }
        if let Some(uow) = uow.take() {
            match uow.commit().await {
                Ok(_) => {}
                // The outbox cannot take the events now: the broker retries
                // the command (a transient failure), the key waits.
                Err(error @ CommitError::Outbox(_)) => return Err(Box::new(error)),
                Err(error) => {
                    let outcome = CommandOutcome::failed(FailureKind::Commit, name, error_chain(&error));
                    slot.fail(outcome, Box::new(error));
                    return Ok(());
                }
            }
        }
        if !slot.is_set() {
            slot.set(CommandOutcome::Succeeded {
                value: serde_json::Value::Null,
            });
        }
        Ok(())
    }
}

impl DynHandler for CommandRun {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(self.run(message, ctx))
    }
}
