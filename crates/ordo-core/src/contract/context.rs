//! What the current task is running: which handler, and which command
//! sequences its chain of nested dispatches holds.
//!
//! Brokers and the command bus run each handler attempt inside [`scope`], so
//! that calls that would wait for the running handler itself (`settle()`
//! from a handler, a nested dispatch of a command of a held sequence) are
//! refused instead of hanging, and so that a nested dispatch knows it may run
//! on its caller's concurrency slot.
//!
//! Every handler run also runs inside [`handling`] its message, so that
//! the events and commands made on its task descend from it (their
//! correlation and causation ids, see
//! [`Envelope::new`](crate::contract::message::Envelope::new)).

use std::future::Future;
use std::sync::Arc;

use crate::contract::message::Envelope;
use crate::contract::policy::SequenceId;

tokio::task_local! {
    static RUNNING: Running;
    /// The message the task's handler run is handling.
    static HANDLED: Arc<Envelope>;
}

/// Runs `future`, a handler run, as the handling of `message`: the
/// envelopes made meanwhile on this task descend from it (see
/// [`Envelope::new`]).
pub(crate) async fn handling<F: Future>(message: Arc<Envelope>, future: F) -> F::Output {
    HANDLED.scope(message, future).await
}

/// The message the current task's handler run is handling, if any.
pub(crate) fn handled() -> Option<Arc<Envelope>> {
    HANDLED.try_with(Arc::clone).ok()
}

/// The handler a task is running.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    handler: &'static str,
    /// The command-bus sequences held by this dispatch and the ones it is
    /// nested in, outermost first. Empty outside the command bus.
    held: Arc<[SequenceId]>,
    /// Whether the handler runs on the command bus (a dispatch from it is
    /// nested: the caller's slot is waiting for it).
    on_bus: bool,
}

impl Running {
    /// An event handler or process manager run by a broker.
    pub(crate) fn handler(handler: &'static str) -> Self {
        Self {
            handler,
            held: Arc::from([]),
            on_bus: false,
        }
    }

    /// A command handler run by a broker (sent from another instance, or
    /// from this one across the broker), holding `sequence`: a command it
    /// sends to its own sequence would wait for itself, and is refused.
    pub(crate) fn routed_command(handler: &'static str, sequence: Option<SequenceId>) -> Self {
        Self {
            handler,
            held: sequence.into_iter().collect::<Vec<_>>().into(),
            on_bus: false,
        }
    }

    /// A command handler run by the bus, holding `sequence` on top of what
    /// the calling handler (if any) holds.
    pub(crate) fn command(handler: &'static str, sequence: Option<SequenceId>) -> Self {
        let mut held: Vec<SequenceId> = RUNNING
            .try_with(|running| running.held.to_vec())
            .unwrap_or_default();
        held.extend(sequence);
        Self {
            handler,
            held: held.into(),
            on_bus: true,
        }
    }
}

/// Runs `future` as `running`.
pub(crate) async fn scope<F: Future>(running: Running, future: F) -> F::Output {
    RUNNING.scope(running, future).await
}

/// The handler the current task is running, if any.
pub(crate) fn current_handler() -> Option<&'static str> {
    RUNNING.try_with(|running| running.handler).ok()
}

/// Whether the current task runs a command handler of the bus.
pub(crate) fn on_bus() -> bool {
    RUNNING.try_with(|running| running.on_bus).unwrap_or(false)
}

/// Whether the current chain of dispatches holds `sequence`.
pub(crate) fn holds(sequence: &SequenceId) -> bool {
    RUNNING
        .try_with(|running| running.held.contains(sequence))
        .unwrap_or(false)
}
