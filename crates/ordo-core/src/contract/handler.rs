//! Handlers: what the macros generate, and the context a handler receives.

use std::any::{Any, TypeId};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::contract::command::{CommandOutcome, ReplySlot};
use crate::contract::error::CommitError;
use crate::contract::key::{KeyExtractor, Lane};
use crate::contract::message::{Envelope, Event, MessageKind, Metadata, Timestamp};
use crate::contract::policy::SequencingPolicy;

/// A boxed, sendable future (what object-safe async traits return).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The error a handler returns: anything that converts into a boxed error,
/// `anyhow::Error` included.
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a handler invocation yields.
pub type HandlerResult = Result<(), HandlerError>;

/// Which of the three handler macros produced a handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandlerKind {
    /// `#[event_handler]`.
    Event,
    /// `#[command_handler]`.
    Command,
    /// `#[process_manager]`.
    ProcessManager,
}

impl fmt::Display for HandlerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Event => "event handler",
            Self::Command => "command handler",
            Self::ProcessManager => "process manager",
        })
    }
}

/// The Rust type behind a message type name, to tell two types that share
/// one name apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RustType {
    /// The type's identity.
    pub id: TypeId,
    /// The type's path, for messages (`my_app::v1::OrderPlaced`).
    pub path: &'static str,
}

impl RustType {
    /// The Rust type `T`.
    pub fn of<T: ?Sized + 'static>() -> Self {
        Self {
            id: TypeId::of::<T>(),
            path: std::any::type_name::<T>(),
        }
    }
}

/// One message type a handler handles, as the macros describe it.
///
/// Non-exhaustive so that it can grow: the macros build it through hidden
/// constructors.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HandledMessage {
    /// The message's `TYPE_NAME`.
    pub type_name: &'static str,
    /// Event or command.
    pub kind: MessageKind,
    /// The stream category the message belongs to.
    pub category: &'static str,
    /// The Rust type handled (`None` in hand-written descriptors, which are
    /// then not checked for two types sharing one name).
    pub rust_type: Option<RustType>,
    /// The handler method's name.
    pub method: &'static str,
    /// The partition key (`sequential_by`) or, for a process manager, the
    /// correlation field (`correlate`).
    pub key: Option<KeyExtractor>,
    /// Process managers: whether this message may start a new instance.
    pub start: bool,
    /// A `#[sequencing_policy]` on the method (wins over the impl's).
    pub policy: Option<Arc<dyn SequencingPolicy>>,
}

/// Everything the registry needs to know about a handler.
///
/// Non-exhaustive so that it can grow: the macros build it through hidden
/// constructors.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HandlerDescriptor {
    /// The handler type's name.
    pub name: &'static str,
    /// Which macro produced it.
    pub kind: HandlerKind,
    /// The category of the `part_of` aggregate (`None` for process managers).
    pub part_of: Option<&'static str>,
    /// The `sequential_by` field, or for a process manager `Some("")` is never
    /// used: see [`HandlerDescriptor::partitioned`].
    pub sequential_by: Option<&'static str>,
    /// Whether the handler partitions its categories: `sequential_by = "f"`
    /// on a handler, the bare `sequential_by` flag on a process manager.
    pub partitioned: bool,
    /// A `#[sequencing_policy]` on the impl block.
    pub policy: Option<Arc<dyn SequencingPolicy>>,
    /// The handled message types, in declaration order.
    pub handles: Vec<HandledMessage>,
}

// The constructors below are for the macros' generated code and for
// hand-written test descriptors, not public API: hidden, so that a field
// added later is a default here rather than a breaking change.
impl HandledMessage {
    #[doc(hidden)]
    pub fn new(
        type_name: &'static str,
        kind: MessageKind,
        category: &'static str,
        method: &'static str,
    ) -> Self {
        Self {
            type_name,
            kind,
            category,
            rust_type: None,
            method,
            key: None,
            start: false,
            policy: None,
        }
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_rust_type(mut self, rust_type: RustType) -> Self {
        self.rust_type = Some(rust_type);
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_key(mut self, key: Option<KeyExtractor>) -> Self {
        self.key = key;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_start(mut self, start: bool) -> Self {
        self.start = start;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_policy(mut self, policy: Option<Arc<dyn SequencingPolicy>>) -> Self {
        self.policy = policy;
        self
    }
}

impl HandlerDescriptor {
    #[doc(hidden)]
    pub fn new(name: &'static str, kind: HandlerKind, handles: Vec<HandledMessage>) -> Self {
        Self {
            name,
            kind,
            part_of: None,
            sequential_by: None,
            partitioned: false,
            policy: None,
            handles,
        }
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_part_of(mut self, part_of: Option<&'static str>) -> Self {
        self.part_of = part_of;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_sequential_by(mut self, sequential_by: Option<&'static str>) -> Self {
        self.sequential_by = sequential_by;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_partitioned(mut self, partitioned: bool) -> Self {
        self.partitioned = partitioned;
        self
    }

    #[doc(hidden)]
    #[must_use]
    pub fn with_policy(mut self, policy: Option<Arc<dyn SequencingPolicy>>) -> Self {
        self.policy = policy;
        self
    }

    /// The handled message of type `type_name` in `category`, if any. A
    /// type is identified by both: two aggregates may each have a `Placed`.
    pub fn handled(&self, category: &str, type_name: &str) -> Option<&HandledMessage> {
        self.handles
            .iter()
            .find(|h| h.type_name == type_name && h.category == category)
    }

    /// The handled message that `envelope` holds, if any.
    pub fn handled_envelope(&self, envelope: &Envelope) -> Option<&HandledMessage> {
        self.handled(&envelope.category, &envelope.type_name)
    }

    /// The distinct categories this handler consumes, in declaration order.
    pub fn categories(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for h in &self.handles {
            if !out.contains(&h.category) {
                out.push(h.category);
            }
        }
        out
    }
}

/// An event handler; implemented by `#[event_handler]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an event handler",
    note = "annotate its `impl` block with `#[event_handler(part_of = ...)]`"
)]
pub trait EventHandler: Send + Sync + 'static {
    /// The handler's static description.
    fn descriptor() -> HandlerDescriptor
    where
        Self: Sized;

    /// Handles one message (ignored when of a type it does not handle).
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult>;
}

/// A command handler; implemented by `#[command_handler]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a command handler",
    note = "annotate its `impl` block with `#[command_handler(part_of = ...)]`"
)]
pub trait CommandHandler: Send + Sync + 'static {
    /// The handler's static description.
    fn descriptor() -> HandlerDescriptor
    where
        Self: Sized;

    /// Handles one command.
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult>;
}

/// A process manager; implemented by `#[process_manager]`.
///
/// One instance exists per correlation value; its state is the type itself,
/// serialised between messages. A new instance starts as `Default::default()`
/// when a `start` handler receives a message with an unseen correlation value.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a process manager",
    note = "annotate its `impl` block with `#[process_manager]` and derive `Default`, `Serialize` and `Deserialize`"
)]
pub trait ProcessManager: Default + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The manager's static description.
    fn descriptor() -> HandlerDescriptor;

    /// Handles one message for this instance.
    fn handle<'a>(
        &'a mut self,
        message: &'a Envelope,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, HandlerResult>;
}

/// The object-safe form of every handler kind, as brokers call it.
pub trait DynHandler: Send + Sync + 'static {
    /// Handles one message. For a process manager this loads the instance
    /// for the message's correlation value, runs the handler and saves it.
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult>;
}

/// Type-keyed values a broker attaches to a handler context (the Redis
/// broker attaches its lease fence there).
#[derive(Clone, Default)]
pub struct Extensions(Vec<Arc<dyn Any + Send + Sync>>);

impl Extensions {
    /// Adds `value`, replacing any value of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        self.0.retain(|v| !v.is::<T>());
        self.0.push(Arc::new(value));
    }

    /// The value of type `T`, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.iter().find_map(|v| v.downcast_ref::<T>())
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions").field("len", &self.0.len()).finish()
    }
}

/// The type of a `#[handle]` method's context parameter: only
/// [`HandlerContext`] (or an alias of it). The handler macros use it to
/// report any other type at the parameter.
#[diagnostic::on_unimplemented(
    message = "the context parameter is `ctx: &HandlerContext`, not `&{Self}`",
    label = "expected `HandlerContext` here",
    note = "a `#[handle]` method is `async fn name(&self, event: &SomeEvent, ctx: &HandlerContext)`; `ctx` is optional"
)]
pub trait ContextParameter {
    /// The handler context, as the method's parameter type.
    fn from_context(ctx: &HandlerContext) -> &Self;
}

#[diagnostic::do_not_recommend]
impl ContextParameter for HandlerContext {
    fn from_context(ctx: &HandlerContext) -> &Self {
        ctx
    }
}

/// What a `#[handle]` method may return: `Result<(), E>` where `E` converts
/// into [`HandlerError`] (as `anyhow::Error` does).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a handler result",
    label = "a `#[handle]` method returns `Result<(), E>` here",
    note = "`E` must convert into `Box<dyn std::error::Error + Send + Sync>`, as `anyhow::Error` does"
)]
pub trait IntoHandlerResult {
    /// Converts the method's result.
    fn into_handler_result(self) -> HandlerResult;
}

#[diagnostic::do_not_recommend]
impl<E: Into<HandlerError>> IntoHandlerResult for Result<(), E> {
    fn into_handler_result(self) -> HandlerResult {
        self.map_err(Into::into)
    }
}

/// What a command handler's `#[handle]` method may return: `Result<R, E>`
/// where `R` is the reply the sender gets from `Domain::send` (`()` for
/// none) and `E` converts into [`HandlerError`]. The reply is serialised
/// into the context's [`ReplySlot`] (a reply that cannot be serialised
/// fails the command).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a command handler result",
    label = "a command handler's `#[handle]` method returns `Result<R, E>` here",
    note = "`R: Serialize` is the reply (`()` for none); `E` must convert into `Box<dyn std::error::Error + Send + Sync>`, as `anyhow::Error` does"
)]
pub trait IntoCommandResult {
    /// Converts the method's result, writing its reply into `ctx`'s slot.
    fn into_command_result(self, ctx: &HandlerContext) -> HandlerResult;
}

#[diagnostic::do_not_recommend]
impl<R: Serialize, E: Into<HandlerError>> IntoCommandResult for Result<R, E> {
    fn into_command_result(self, ctx: &HandlerContext) -> HandlerResult {
        let reply = self.map_err(Into::into)?;
        if let Some(slot) = ctx.reply_slot() {
            let value = serde_json::to_value(&reply)
                .map_err(|error| format!("the command handler's reply cannot be serialised: {error}"))?;
            slot.set(CommandOutcome::Succeeded { value });
        }
        Ok(())
    }
}

/// What a handler knows about the message it is handling.
#[derive(Clone)]
pub struct HandlerContext {
    /// The message handled: its id, type, routing facts, lineage and
    /// metadata, shared with the broker's delivery rather than copied.
    message: Arc<Envelope>,
    process_correlation: Option<String>,
    attempt: u32,
    fencing_token: u64,
    extensions: Extensions,
    unit_of_work: Option<Arc<dyn EventSink>>,
    reply: Option<ReplySlot>,
}

impl fmt::Debug for HandlerContext {
    /// What it knows of the message, without the payload.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerContext")
            .field("message_id", &self.message.id)
            .field("type_name", &self.message.type_name)
            .field("category", &self.message.category)
            .field("partition_key", &self.message.partition_key)
            .field("occurred_at", &self.message.occurred_at)
            .field("correlation_id", &self.message.correlation())
            .field("causation_id", &self.message.causation_id)
            .field("process_correlation", &self.process_correlation)
            .field("attempt", &self.attempt)
            .field("fencing_token", &self.fencing_token)
            .field("metadata", &self.message.metadata)
            .field("extensions", &self.extensions)
            .field("unit_of_work", &self.unit_of_work.is_some())
            .field("reply", &self.reply)
            .finish()
    }
}

impl HandlerContext {
    /// A context for the first delivery of `message`, with fencing token 0
    /// (what the inline broker uses).
    pub fn new(message: &Envelope) -> Self {
        Self::shared(Arc::new(message.clone()))
    }

    /// [`HandlerContext::new`] for a message the caller already shares
    /// (a broker hands the same envelope to the handler): nothing of it is
    /// copied.
    pub fn shared(message: Arc<Envelope>) -> Self {
        Self {
            message,
            process_correlation: None,
            attempt: 1,
            fencing_token: 0,
            extensions: Extensions::default(),
            unit_of_work: None,
            reply: None,
        }
    }

    /// Sets the delivery attempt (1 for the first delivery).
    #[must_use]
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Sets the fencing token of the lease the message is handled under.
    #[must_use]
    pub fn with_fencing_token(mut self, token: u64) -> Self {
        self.fencing_token = token;
        self
    }

    /// Sets the process-manager correlation value.
    #[must_use]
    pub fn with_process_correlation(mut self, value: Option<String>) -> Self {
        self.process_correlation = value;
        self
    }

    /// Attaches a broker-specific value (see [`HandlerContext::extension`]).
    #[must_use]
    pub fn with_extension<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The message id: stable across redeliveries, use it for idempotency.
    pub fn message_id(&self) -> &str {
        &self.message.id
    }

    /// The message's type name.
    pub fn type_name(&self) -> &str {
        &self.message.type_name
    }

    /// The stream category.
    pub fn category(&self) -> &str {
        &self.message.category
    }

    /// The partition key, when the category is partitioned.
    pub fn partition_key(&self) -> Option<&str> {
        self.message.partition_key.as_deref()
    }

    /// When the message was raised or sent (`None` for a message written
    /// before Ordo carried it).
    pub fn occurred_at(&self) -> Option<Timestamp> {
        self.message.occurred_at
    }

    /// The conversation the message belongs to: the id of the message that
    /// started it, inherited from handler to handler (the message's own id
    /// when it started one). The messages this handler raises or sends carry
    /// it on.
    pub fn correlation_id(&self) -> &str {
        self.message.correlation()
    }

    /// The id of the message whose handler raised or sent this one (`None`
    /// when it came from outside a handler). The messages this handler
    /// raises or sends carry [`HandlerContext::message_id`] here.
    pub fn causation_id(&self) -> Option<&str> {
        self.message.causation_id.as_deref()
    }

    /// The process-manager correlation value, for process managers: the
    /// value of the field that finds the manager's instance.
    pub fn process_correlation(&self) -> Option<&str> {
        self.process_correlation.as_deref()
    }

    /// The attempt of this run by the current owner, starting at 1 and
    /// growing with each retry (up to `max_retries + 1`).
    ///
    /// It is not a count of every delivery: a message redelivered to a new
    /// owner after a failover, a restart or an operator's `retry` starts at 1
    /// again. To recognise a redelivery use [`HandlerContext::message_id`]
    /// (the same on every delivery) and [`HandlerContext::fencing_token`]
    /// (larger under a new owner).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The fencing token (lease generation) the message is handled under; 0
    /// on the inline broker. Larger tokens are newer owners.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The message metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.message.metadata
    }

    /// A broker-specific value of type `T`, such as the Redis lease fence.
    pub fn extension<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// Raises `event` in the handler's unit of work (command handlers and
    /// process managers). The events are committed to the outbox together
    /// when the handler succeeds (for a process manager, before its state is
    /// saved), and discarded when it fails; a bad partition key fails the
    /// command or the process manager's message.
    ///
    /// Fails with [`CommitError::NoUnitOfWork`] in an event handler (open
    /// one with `Domain::unit_of_work()`), or after the handler returned.
    pub fn raise<E: Event>(&self, event: E) -> Result<(), CommitError> {
        self.open_unit_of_work()?
            .raise(RaisedEvent::new(event), Lane::Primary)
    }

    /// Like [`HandlerContext::raise`], on the backfill lane (see
    /// `UnitOfWork::raise_backfill`).
    pub fn raise_backfill<E: Event>(&self, event: E) -> Result<(), CommitError> {
        self.open_unit_of_work()?
            .raise(RaisedEvent::new(event), Lane::Backfill)
    }

    fn open_unit_of_work(&self) -> Result<&dyn EventSink, CommitError> {
        self.unit_of_work.as_deref().ok_or(CommitError::NoUnitOfWork)
    }

    /// Gives a command handler's context the slot its outcome is written
    /// into (see [`ReplySlot`]).
    #[must_use]
    pub fn with_reply(mut self, slot: ReplySlot) -> Self {
        self.reply = Some(slot);
        self
    }

    /// The slot a command handler's outcome is written into, when the
    /// context has one.
    pub fn reply_slot(&self) -> Option<&ReplySlot> {
        self.reply.as_ref()
    }

    /// Gives the context the unit of work its handler raises events into.
    pub(crate) fn with_unit_of_work(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.unit_of_work = Some(sink);
        self
    }
}

/// Where a handler context's raised events go: the unit of work the runtime
/// opens for a command handler or a process manager. The contract raises
/// into it; the runtime's unit of work implements it.
pub trait EventSink: Send + Sync + fmt::Debug {
    /// Adds `event` to the unit of work, on `lane` (the backfill lane is the
    /// primary one when priority lanes are disabled). Fails with
    /// [`CommitError::NoUnitOfWork`] once the unit of work was taken for its
    /// commit.
    fn raise(&self, event: RaisedEvent, lane: Lane) -> Result<(), CommitError>;
}

/// An event on its way into a unit of work, its type erased: what a handler
/// context hands an [`EventSink`].
pub struct RaisedEvent {
    type_name: &'static str,
    category: &'static str,
    rust_type: RustType,
    value: Box<dyn Any + Send + Sync>,
    encode: fn(&(dyn Any + Send + Sync)) -> Result<Envelope, CommitError>,
}

impl RaisedEvent {
    /// `event`, not yet serialised.
    pub fn new<E: Event>(event: E) -> Self {
        Self {
            type_name: E::TYPE_NAME,
            category: E::CATEGORY,
            rust_type: RustType::of::<E>(),
            value: Box::new(event),
            encode: encode::<E>,
        }
    }

    /// The event's type name.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }

    /// The event's category.
    pub fn category(&self) -> &'static str {
        self.category
    }

    /// The event's Rust type.
    pub fn rust_type(&self) -> RustType {
        self.rust_type
    }

    /// The event's envelope: its serialised form, refused when it does not
    /// decode back into its type (no handler could ever receive it).
    pub fn envelope(&self) -> Result<Envelope, CommitError> {
        (self.encode)(&*self.value)
    }

    /// The typed event, for key extraction.
    pub fn into_value(self) -> Box<dyn Any + Send + Sync> {
        self.value
    }
}

impl fmt::Debug for RaisedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaisedEvent")
            .field("type_name", &self.type_name)
            .field("category", &self.category)
            .finish_non_exhaustive()
    }
}

/// Serialises the `E` in `value` and checks that it decodes back.
fn encode<E: Event>(value: &(dyn Any + Send + Sync)) -> Result<Envelope, CommitError> {
    let event = value
        .downcast_ref::<E>()
        .expect("a raised event's value is of its own type");
    let envelope = Envelope::new(event).map_err(|source| CommitError::Serialization {
        type_name: E::TYPE_NAME,
        source,
    })?;
    // What cannot be decoded could never be handled: refuse it now, with the decoder's reason.
    if let Err(source) = serde_json::from_str::<E>(&envelope.payload) {
        return Err(CommitError::Undecodable {
            type_name: E::TYPE_NAME,
            source,
        });
    }
    Ok(envelope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope() -> Envelope {
        let mut metadata = Metadata::new();
        metadata.insert("tenant".to_owned(), "t-1".to_owned());
        Envelope {
            id: "m-2".into(),
            kind: MessageKind::Event,
            type_name: "Placed".into(),
            category: "order".into(),
            aggregate_id: Some("o-1".into()),
            routing_key: None,
            partition_key: Some("c-1".into()),
            metadata,
            occurred_at: Some(Timestamp::from_unix_millis(1_700_000_000_000)),
            correlation_id: Some("m-1".into()),
            causation_id: Some("m-1".into()),
            payload: r#"{"secret":"s-1"}"#.into(),
        }
    }

    #[test]
    fn a_shared_message_s_context_tells_what_a_copied_one_tells() {
        let message = Arc::new(envelope());
        let shared = HandlerContext::shared(Arc::clone(&message)).with_attempt(2);
        let copied = HandlerContext::new(&message).with_attempt(2);
        for ctx in [&shared, &copied] {
            assert_eq!(ctx.message_id(), "m-2");
            assert_eq!(ctx.type_name(), "Placed");
            assert_eq!(ctx.category(), "order");
            assert_eq!(ctx.partition_key(), Some("c-1"));
            assert_eq!(ctx.occurred_at(), message.occurred_at);
            assert_eq!(ctx.correlation_id(), "m-1");
            assert_eq!(ctx.causation_id(), Some("m-1"));
            assert_eq!(ctx.metadata().get("tenant").map(String::as_str), Some("t-1"));
            assert_eq!(ctx.attempt(), 2);
        }
        assert_eq!(format!("{shared:?}"), format!("{copied:?}"));
        // The context is shown without the payload.
        assert!(!format!("{shared:?}").contains("s-1"), "{shared:?}");
        // A message that starts its conversation is its own correlation.
        let first = Envelope {
            correlation_id: None,
            ..envelope()
        };
        assert_eq!(HandlerContext::shared(Arc::new(first)).correlation_id(), "m-2");
    }
}
