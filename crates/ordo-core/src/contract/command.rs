//! Commands across instances: what a broker that routes commands implements
//! ([`CommandRouter`]), the outcome it carries back to the sender
//! ([`CommandOutcome`]), and the slot a command handler's reply is written
//! into ([`ReplySlot`]).
//!
//! A command of a routing key travels to the instance that owns the key's
//! partition of the command stream category ([`command_category`]), apart
//! from the aggregate's event partitions (so a command never waits behind
//! events), and runs there in order with every other command of that key.
//! The owner records the outcome under the command id (a resend with the
//! same id within the deduplication window gets it without a second run) and
//! sends it to the sender's reply address ([`REPLY_TO_METADATA`]).

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::contract::message::Envelope;

/// Metadata entry of a command sent across instances: where its outcome
/// goes (the sending instance's reply address, broker-specific).
pub const REPLY_TO_METADATA: &str = "ordo.reply.to";

/// What a command stream category's name adds to the aggregate category
/// (`order` → `order.commands`).
pub const COMMAND_CATEGORY_SUFFIX: &str = ".commands";

/// The stream category of `category`'s commands: partitions of their own,
/// beside the aggregate's event partitions.
pub fn command_category(category: &str) -> String {
    format!("{category}{COMMAND_CATEGORY_SUFFIX}")
}

/// The aggregate category of a command stream category (`order.commands` →
/// `order`); `None` for an event category.
pub fn aggregate_of_command_category(stream_category: &str) -> Option<&str> {
    stream_category.strip_suffix(COMMAND_CATEGORY_SUFFIX)
}

/// How a command ended, as its owner records it and its sender receives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum CommandOutcome {
    /// The handler succeeded and the events it raised are committed; its
    /// return value, serialised (`null` for `()`).
    Succeeded {
        /// The handler's return value.
        value: serde_json::Value,
    },
    /// The command failed; nothing it raised was committed.
    Failed(CommandFailure),
}

/// Why a command failed, with the handler's message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandFailure {
    /// What kind of failure.
    pub kind: FailureKind,
    /// The handler that was to run it.
    pub handler: String,
    /// The error and its sources, as text.
    pub message: String,
}

/// The kinds of [`CommandFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureKind {
    /// The handler returned an error.
    Handler,
    /// The handler succeeded but its raised events could not be committed
    /// (an invalid key, an oversized payload).
    Commit,
    /// The handler panicked.
    Panicked,
    /// The owner has no handler for the command's type (two versions of the
    /// service deployed side by side).
    UnknownType,
    /// The command's payload does not decode into the owner's type.
    Undecodable,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Handler => "the handler failed",
            Self::Commit => "its events could not be committed",
            Self::Panicked => "the handler panicked",
            Self::UnknownType => "the owner has no handler for this command type",
            Self::Undecodable => "its payload does not decode",
        })
    }
}

impl CommandOutcome {
    /// A failure of `kind` in `handler`, with `message`.
    pub fn failed(kind: FailureKind, handler: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Failed(CommandFailure {
            kind,
            handler: handler.into(),
            message: message.into(),
        })
    }
}

/// Where a command handler's outcome is written during its run: the
/// handler macro stores the method's return value, the runtime's command
/// run replaces it with a failure when the run or its commit fails, and the
/// broker (or the in-process bus) reads it once the run is over. Cheap to
/// clone: clones share the slot.
///
/// A failure keeps the handler's error beside it ([`ReplySlot::fail`]): a
/// broker recognises its own refusals there (its fence refusing a stale
/// owner's commit), which are not the command's outcome but the end of
/// this owner's run: the next owner runs the command.
#[derive(Clone, Default)]
pub struct ReplySlot(Arc<Mutex<Slot>>);

#[derive(Default)]
struct Slot {
    outcome: Option<CommandOutcome>,
    error: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl ReplySlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the outcome, replacing an earlier one (and its error).
    pub fn set(&self, outcome: CommandOutcome) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.outcome = Some(outcome);
        slot.error = None;
    }

    /// Sets a failure `outcome` caused by `error`.
    pub fn fail(&self, outcome: CommandOutcome, error: Box<dyn std::error::Error + Send + Sync + 'static>) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        slot.outcome = Some(outcome);
        slot.error = Some(error);
    }

    /// Takes the outcome out.
    pub fn take(&self) -> Option<CommandOutcome> {
        self.take_with_error().0
    }

    /// Takes the outcome out, with the error that caused a failure.
    #[allow(clippy::type_complexity)]
    pub fn take_with_error(
        &self,
    ) -> (
        Option<CommandOutcome>,
        Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) {
        let mut slot = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        (slot.outcome.take(), slot.error.take())
    }

    /// Whether an outcome is set.
    pub fn is_set(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .outcome
            .is_some()
    }
}

impl fmt::Debug for ReplySlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReplySlot").field(&self.is_set()).finish()
    }
}

/// One command on its way to the owner of its key.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CommandRequest {
    /// The command stream category ([`command_category`]); also the
    /// envelope's category.
    pub category: String,
    /// The routing key: the partition the command runs in.
    pub key: String,
    /// The command; its id is the command id.
    pub envelope: Envelope,
    /// The handler meant to run it (for messages).
    pub handler: &'static str,
    /// How long to wait for the outcome.
    pub timeout: Duration,
    /// How long the outcome is kept for a resend with the same id.
    pub dedup_window: Duration,
    /// Whether the id is the caller's own (a resend may find the outcome
    /// of an earlier send recorded): the router looks for it first.
    pub caller_id: bool,
}

impl CommandRequest {
    /// A request for `envelope` (whose category is the command stream
    /// category) to partition `key`, meant for `handler`, waiting at most
    /// `timeout` for the outcome, which the owner keeps for `dedup_window`.
    pub fn new(
        envelope: Envelope,
        key: impl Into<String>,
        handler: &'static str,
        timeout: Duration,
        dedup_window: Duration,
    ) -> Self {
        Self {
            category: envelope.category.clone(),
            key: key.into(),
            envelope,
            handler,
            timeout,
            dedup_window,
            caller_id: false,
        }
    }

    /// Marks the id as the caller's own.
    #[must_use]
    pub fn with_caller_id(mut self, caller_id: bool) -> Self {
        self.caller_id = caller_id;
        self
    }
}

/// Why a [`CommandRouter`] returned no outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SendFailure {
    /// No outcome arrived in time: the command may still run (or have run).
    #[error("no outcome within {0:?}")]
    TimedOut(Duration),
    /// The broker failed before the command was known to be sent.
    #[error("the broker failed")]
    Broker(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The outcome arrived but cannot be read.
    #[error("the outcome cannot be read")]
    Unreadable(#[source] serde_json::Error),
}

/// What [`CommandRouter::send`] returns.
pub type SendFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<CommandOutcome, SendFailure>> + Send + 'a>>;

/// A broker's routing of commands to the owner of their key, across
/// instances (the Redis broker's). See the module documentation.
pub trait CommandRouter: Send + Sync + fmt::Debug {
    /// Sends `request` to the owner of its key and waits for the outcome.
    fn send(&self, request: CommandRequest) -> SendFuture<'_>;
}
