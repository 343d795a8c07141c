//! Sequencing policies: which messages must be handled one after another.
//!
//! A policy maps a message to an optional sequence identifier. Messages with
//! the same identifier are handled sequentially, in submission order; a
//! message with none has no ordering constraint.

use std::any::Any;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::contract::field::read_field;
use crate::contract::key::KeyExtractor;
use crate::contract::key::PartitionKey;
use crate::contract::message::Envelope;

/// A sequence identifier: messages sharing one are handled one at a time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceId(Arc<str>);

impl SequenceId {
    /// A sequence identifier from any string.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The identifier's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SequenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SequenceId {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for SequenceId {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

/// What a policy may consult besides the message itself.
#[derive(Debug, Clone, Copy)]
pub struct ProcessingContext<'a> {
    handler: &'a str,
    typed: Option<&'a (dyn Any + Send + Sync)>,
}

impl<'a> ProcessingContext<'a> {
    /// A context for `handler`.
    pub fn new(handler: &'a str) -> Self {
        Self { handler, typed: None }
    }

    /// Attaches the decoded message, when the caller already has it.
    #[must_use]
    pub fn with_typed(mut self, typed: &'a (dyn Any + Send + Sync)) -> Self {
        self.typed = Some(typed);
        self
    }

    /// The handler the message is being sequenced for.
    pub fn handler(&self) -> &str {
        self.handler
    }

    /// The decoded message, if the caller attached it.
    pub fn typed(&self) -> Option<&'a (dyn Any + Send + Sync)> {
        self.typed
    }
}

/// Maps a message to its optional sequence identifier.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sequencing policy",
    note = "implement `ordo::SequencingPolicy`, or use a built-in such as `PropertyPolicy` or `ExtractionPolicy`"
)]
pub trait SequencingPolicy: Send + Sync + fmt::Debug + 'static {
    /// The sequence identifier of `message`, or `None` when it may be handled
    /// concurrently with anything.
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId>;
}

impl<P: SequencingPolicy + ?Sized> SequencingPolicy for Arc<P> {
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId> {
        (**self).sequence_identifier(message, context)
    }
}

/// The identifier [`SequentialPolicy`] gives every message.
///
/// It has the reserved `__name__` sentinel form, which
/// [`KeyRules::validate`](crate::contract::key::KeyRules::validate) rejects as a
/// partition key, so no validated key can share the global sequence by
/// accident.
pub const SEQUENTIAL_SEQUENCE_ID: &str = "__sequential__";

/// Sequences messages per aggregate instance: the identifier is
/// [`Envelope::aggregate_id`]; messages without one get `None`.
///
/// ```
/// # use ordo_core::contract::policy::{PerAggregatePolicy, ProcessingContext, SequencingPolicy};
/// # let mut envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{}"}"#).unwrap();
/// envelope.aggregate_id = Some("order-7".into());
/// let id = PerAggregatePolicy.sequence_identifier(&envelope, &ProcessingContext::new("projector"));
/// assert_eq!(id.unwrap().as_str(), "order-7");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PerAggregatePolicy;

impl SequencingPolicy for PerAggregatePolicy {
    fn sequence_identifier(&self, message: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        message.aggregate_id.as_deref().map(SequenceId::from)
    }
}

/// Sequences messages by one top-level field of their JSON payload: what
/// `sequential_by = "field"` means in process.
///
/// A string, number or boolean field yields its text (`"42"`, `"1.5"`,
/// `"true"`); a missing or null field, an object or array value, or a payload
/// that is not a JSON object yields `None`. Nested paths are not supported.
///
/// ```
/// # use ordo_core::contract::policy::{PropertyPolicy, ProcessingContext, SequencingPolicy};
/// # let mut envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{}"}"#).unwrap();
/// envelope.payload = r#"{"client_id": 42, "amount": 10}"#.into();
/// let policy = PropertyPolicy::new("client_id");
/// let id = policy.sequence_identifier(&envelope, &ProcessingContext::new("projector"));
/// assert_eq!(id.unwrap().as_str(), "42");
/// ```
#[derive(Debug, Clone)]
pub struct PropertyPolicy {
    field: Arc<str>,
    /// Typed readers of the field, by message type (what the macros give).
    typed: Vec<KeyExtractor>,
}

impl PartialEq for PropertyPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.field == other.field
    }
}

impl Eq for PropertyPolicy {}

impl PropertyPolicy {
    /// A policy reading the payload field `field`.
    pub fn new(field: impl Into<Arc<str>>) -> Self {
        Self {
            field: field.into(),
            typed: Vec::new(),
        }
    }

    /// Reads the field through the typed message for the types `extractor`
    /// knows (the macros add one per handled type), so that a serde rename
    /// of the field, or a number beyond 2^53, does not change the sequence.
    #[must_use]
    pub fn with_typed(mut self, extractor: KeyExtractor) -> Self {
        self.typed.push(extractor);
        self
    }

    /// The payload field this policy reads.
    pub fn field(&self) -> &str {
        &self.field
    }
}

impl SequencingPolicy for PropertyPolicy {
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId> {
        for extractor in &self.typed {
            let typed = context.typed().and_then(|typed| extractor.extract(typed));
            if let Some(value) = typed.or_else(|| extractor.decode(message)) {
                return value.map(SequenceId::from);
            }
        }
        read_field(&message.payload, &self.field)
            .ok()?
            .into_text()
            .map(SequenceId::from)
    }
}

/// A field type a `#[sequencing_policy(property = "..")]` can read: every
/// [`PartitionKey`] type, and floats, `bool` and `char`. Used by the macros.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot give a sequence identifier",
    label = "a `property` policy reads this field",
    note = "a `property` field is a string, an integer, a `uuid::Uuid`, a float, a `bool`, a `char`, or an \
            `Option` of a string, integer or `Uuid`; for another type implement `ordo::PartitionKey` for it"
)]
pub trait SequenceText {
    /// The value's text, or `None` for a null value.
    fn sequence_text(&self) -> Option<Cow<'_, str>>;
}

impl<K: PartitionKey + ?Sized> SequenceText for K {
    fn sequence_text(&self) -> Option<Cow<'_, str>> {
        self.key_value()
    }
}

macro_rules! display_sequence_text {
    ($($t:ty),*) => {$(
        impl SequenceText for $t {
            fn sequence_text(&self) -> Option<Cow<'_, str>> {
                Some(Cow::Owned(self.to_string()))
            }
        }
    )*};
}
display_sequence_text!(f32, f64, bool, char);

/// Sequences messages by one entry of their [`Envelope::metadata`]; messages
/// without that entry get `None`.
///
/// ```
/// # use ordo_core::contract::policy::{MetadataPolicy, ProcessingContext, SequencingPolicy};
/// # let mut envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{}"}"#).unwrap();
/// envelope.metadata.insert("tenant".into(), "acme".into());
/// let id = MetadataPolicy::new("tenant").sequence_identifier(&envelope, &ProcessingContext::new("h"));
/// assert_eq!(id.unwrap().as_str(), "acme");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataPolicy {
    key: Arc<str>,
}

impl MetadataPolicy {
    /// A policy reading the metadata entry `key`.
    pub fn new(key: impl Into<Arc<str>>) -> Self {
        Self { key: key.into() }
    }

    /// The metadata entry this policy reads.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl SequencingPolicy for MetadataPolicy {
    fn sequence_identifier(&self, message: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        message
            .metadata
            .get(&*self.key)
            .map(|value| SequenceId::from(value.as_str()))
    }
}

/// Puts every message in one sequence: nothing runs concurrently.
///
/// The identifier is [`SEQUENTIAL_SEQUENCE_ID`]. The safe fallback of
/// [`default_event_policy`], at the price of all parallelism.
///
/// ```
/// # use ordo_core::contract::policy::{SequentialPolicy, ProcessingContext, SequencingPolicy, SEQUENTIAL_SEQUENCE_ID};
/// # let envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{}"}"#).unwrap();
/// let id = SequentialPolicy.sequence_identifier(&envelope, &ProcessingContext::new("h"));
/// assert_eq!(id.unwrap().as_str(), SEQUENTIAL_SEQUENCE_ID);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequentialPolicy;

impl SequencingPolicy for SequentialPolicy {
    fn sequence_identifier(&self, _: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        Some(SequenceId::from(SEQUENTIAL_SEQUENCE_ID))
    }
}

/// No ordering at all: every message gets `None` and may run concurrently
/// with any other.
///
/// ```
/// # use ordo_core::contract::policy::{FullConcurrencyPolicy, ProcessingContext, SequencingPolicy};
/// # let envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{}"}"#).unwrap();
/// assert!(FullConcurrencyPolicy.sequence_identifier(&envelope, &ProcessingContext::new("h")).is_none());
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FullConcurrencyPolicy;

impl SequencingPolicy for FullConcurrencyPolicy {
    fn sequence_identifier(&self, _: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        None
    }
}

/// Asks `primary` first and `fallback` only when the primary yields `None`.
///
/// ```
/// # use ordo_core::contract::policy::*;
/// # let envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"Tick","category":"clock","payload":"{}"}"#).unwrap();
/// // No aggregate id: the fallback puts the message in the global sequence.
/// let policy = HierarchicalPolicy::new(PerAggregatePolicy, SequentialPolicy);
/// let id = policy.sequence_identifier(&envelope, &ProcessingContext::new("h"));
/// assert_eq!(id.unwrap().as_str(), SEQUENTIAL_SEQUENCE_ID);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HierarchicalPolicy<P, F> {
    primary: P,
    fallback: F,
}

impl<P: SequencingPolicy, F: SequencingPolicy> HierarchicalPolicy<P, F> {
    /// `primary`, falling back to `fallback`.
    pub fn new(primary: P, fallback: F) -> Self {
        Self { primary, fallback }
    }

    /// The policy asked first.
    pub fn primary(&self) -> &P {
        &self.primary
    }

    /// The policy asked when the primary yields `None`.
    pub fn fallback(&self) -> &F {
        &self.fallback
    }
}

impl<P: SequencingPolicy, F: SequencingPolicy> SequencingPolicy for HierarchicalPolicy<P, F> {
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId> {
        self.primary
            .sequence_identifier(message, context)
            .or_else(|| self.fallback.sequence_identifier(message, context))
    }
}

type Extract = dyn Fn(&Envelope, &ProcessingContext<'_>) -> Option<SequenceId> + Send + Sync;

/// Sequences messages of type `M` by what a closure computes from them.
///
/// The closure sees the typed message: the one attached to the context with
/// [`ProcessingContext::with_typed`] when it is an `M`, else the payload
/// decoded as `M` when [`Envelope::type_name`] is `M::TYPE_NAME`. Messages of
/// other types, and payloads that do not decode (the handler will report
/// those), get `None`. The key is turned into an identifier with its
/// `Display` text.
///
/// ```
/// # use ordo_core::contract::policy::{ExtractionPolicy, ProcessingContext, SequencingPolicy};
/// # use ordo_core::{Message, MessageKind};
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Transfer { from: u64, to: u64 }
/// impl Message for Transfer {
///     const TYPE_NAME: &'static str = "Transfer";
///     const KIND: MessageKind = MessageKind::Event;
///     const CATEGORY: &'static str = "account";
/// }
///
/// let policy = ExtractionPolicy::new(|t: &Transfer| Some(t.from.min(t.to)));
/// let envelope = ordo_core::Envelope::new(&Transfer { from: 9, to: 3 }).unwrap();
/// let id = policy.sequence_identifier(&envelope, &ProcessingContext::new("ledger"));
/// assert_eq!(id.unwrap().as_str(), "3");
/// ```
#[derive(Clone)]
pub struct ExtractionPolicy {
    type_name: &'static str,
    extract: Arc<Extract>,
}

impl ExtractionPolicy {
    /// A policy applying `extract` to messages of type `M`.
    pub fn new<M, K>(extract: impl Fn(&M) -> Option<K> + Send + Sync + 'static) -> Self
    where
        M: crate::contract::message::Message,
        K: fmt::Display,
    {
        let extract = move |message: &Envelope, context: &ProcessingContext<'_>| {
            let key = match context.typed().and_then(|typed| typed.downcast_ref::<M>()) {
                Some(typed) => extract(typed),
                None if message.type_name == M::TYPE_NAME => extract(&message.decode::<M>().ok()?),
                None => None,
            };
            key.map(|key| SequenceId::from(key.to_string()))
        };
        Self {
            type_name: M::TYPE_NAME,
            extract: Arc::new(extract),
        }
    }

    /// The `TYPE_NAME` of the messages this policy applies to.
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}

impl fmt::Debug for ExtractionPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtractionPolicy")
            .field("type_name", &self.type_name)
            .finish_non_exhaustive()
    }
}

impl SequencingPolicy for ExtractionPolicy {
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId> {
        (self.extract)(message, context)
    }
}

/// Sequences commands by their routing key ([`Envelope::routing_key`]): the
/// default for commands, so commands for one entity never race each other.
///
/// ```
/// # use ordo_core::contract::policy::{RoutingKeyPolicy, ProcessingContext, SequencingPolicy};
/// # let mut envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"command","type_name":"PlaceOrder","category":"order","payload":"{}"}"#).unwrap();
/// envelope.routing_key = Some("order-7".into());
/// let id = RoutingKeyPolicy.sequence_identifier(&envelope, &ProcessingContext::new("h"));
/// assert_eq!(id.unwrap().as_str(), "order-7");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoutingKeyPolicy;

impl SequencingPolicy for RoutingKeyPolicy {
    fn sequence_identifier(&self, message: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        message.routing_key.as_deref().map(SequenceId::from)
    }
}

/// Sequences messages by their validated partition key
/// ([`Envelope::partition_key`]): what `sequential_by` means in process once
/// the unit of work has extracted and validated the key.
///
/// ```
/// # use ordo_core::contract::policy::{PartitionKeyPolicy, ProcessingContext, SequencingPolicy};
/// # let mut envelope: ordo_core::Envelope = serde_json::from_str(
/// #     r#"{"id":"1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{}"}"#).unwrap();
/// envelope.partition_key = Some("client-1".into());
/// let id = PartitionKeyPolicy.sequence_identifier(&envelope, &ProcessingContext::new("h"));
/// assert_eq!(id.unwrap().as_str(), "client-1");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartitionKeyPolicy;

impl SequencingPolicy for PartitionKeyPolicy {
    fn sequence_identifier(&self, message: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        message.partition_key.as_deref().map(SequenceId::from)
    }
}

/// The default policy of event handlers: per aggregate, and one global
/// sequence for events without an aggregate identifier
/// (`HierarchicalPolicy::new(PerAggregatePolicy, SequentialPolicy)`).
///
/// Returned as a shared trait object, ready for
/// [`Subscription::policy`](crate::contract::broker::Subscription::policy); build the
/// `HierarchicalPolicy` yourself for the concrete type.
pub fn default_event_policy() -> Arc<dyn SequencingPolicy> {
    Arc::new(HierarchicalPolicy::new(PerAggregatePolicy, SequentialPolicy))
}

/// The default policy of command handlers: [`RoutingKeyPolicy`], as a shared
/// trait object like [`default_event_policy`].
pub fn default_command_policy() -> Arc<dyn SequencingPolicy> {
    Arc::new(RoutingKeyPolicy)
}
