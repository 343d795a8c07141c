//! The runtime's errors: start-up checks, dispatch, settling and shutdown.
//!
//! Each error names what was wrong (the handler, category, key or
//! configuration key). Wrapped causes are exposed through
//! [`std::error::Error::source`], never repeated in the outer message.

use std::fmt;
use std::time::Duration;

use crate::contract::broker::BrokerError;
use crate::contract::command::FailureKind;
use crate::contract::config::Partitions;
use crate::contract::error::{CommitError, error_chain};
use crate::contract::handler::{HandlerError, HandlerKind};
use crate::contract::key::InvalidKey;
use crate::contract::message::MessageKind;

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
    /// domain's broker reads ([`Broker::partitioning_keys`](crate::contract::broker::Broker::partitioning_keys)):
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
        partitions: Partitions,
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
        partitions: Partitions,
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
        partitions: Partitions,
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
    /// `ack_window` is set where it cannot apply: on a handler that is not
    /// a `sequential_by` event handler, on one consuming a category of
    /// hashed partitions, or above the largest window.
    #[error("handler `{handler}` sets `ack_window = {window}`, but {reason}")]
    AckWindow {
        /// The handler.
        handler: String,
        /// The window set.
        window: u32,
        /// Why it cannot apply.
        reason: String,
    },
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
    /// The instance that owns the command's key refused it or could not
    /// complete it: it has no handler for the type (another version is
    /// deployed there), the payload does not decode into its type, the
    /// handler panicked, or its events could not be committed. Nothing the
    /// handler raised was committed.
    #[error("command `{type_name}` ({command_id}) failed in `{handler}`: {kind}: {message}")]
    Rejected {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
        /// The command id.
        command_id: String,
        /// What went wrong.
        kind: FailureKind,
        /// The owner's message.
        message: String,
    },
    /// No outcome arrived within the timeout. The command may still run, or
    /// have run: resend it with the same id ([`SendOptions::id`](crate::runtime::dispatch::SendOptions::id)) to get its
    /// outcome without running it twice.
    #[error(
        "no outcome of command `{type_name}` ({command_id}) from `{handler}` within {after:?}: it may \
         still run; resend it with the same id to get its outcome (is an instance running `{handler}`?)"
    )]
    Timeout {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
        /// The command id.
        command_id: String,
        /// How long the sender waited.
        after: Duration,
    },
    /// The broker failed while sending the command: it may or may not have
    /// been sent. Resend it with the same id.
    #[error(
        "cannot send command `{type_name}` ({command_id}) to `{handler}`: it may or may not have been sent"
    )]
    Broker {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
        /// The command id.
        command_id: String,
        /// The broker's error.
        #[source]
        source: BrokerError,
    },
    /// The handler's reply does not decode into the type the caller asked
    /// for: the command ran and its events are committed.
    #[error("the reply of `{handler}` to `{type_name}` is not the type asked for (the command did run)")]
    Reply {
        /// The handler.
        handler: &'static str,
        /// The command type.
        type_name: &'static str,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The command id given with [`SendOptions::id`](crate::runtime::dispatch::SendOptions::id) cannot be used.
    #[error("invalid command id for `{type_name}`: {reason}")]
    InvalidId {
        /// The command type.
        type_name: &'static str,
        /// Why.
        reason: String,
    },
}

/// A command handler's error as its sender sees it when the command ran on
/// another instance: the message of the error and its sources.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RemoteHandlerError {
    /// The error and its sources, as text.
    pub message: String,
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
