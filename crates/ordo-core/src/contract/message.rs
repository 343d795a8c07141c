//! Messages: aggregates, events, commands and the envelope they travel in.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// An aggregate: the owner of a stream category.
///
/// Derive it with `#[derive(Aggregate)]`; the category defaults to the type's
/// name in snake case (`OrderLine` → `order_line`) and can be overridden with
/// `#[aggregate(category = "...")]`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an aggregate",
    label = "not an aggregate",
    note = "derive it with `#[derive(Aggregate)]`"
)]
pub trait Aggregate: 'static {
    /// The stream category of this aggregate's messages.
    const CATEGORY: &'static str;
}

/// What every event and command has in common.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a message",
    label = "not an event or a command",
    note = "derive it with `#[derive(Event)]` or `#[derive(Command)]`, with `part_of = SomeAggregate`"
)]
pub trait Message: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The stable type name written into every envelope (`OrderPlaced`).
    const TYPE_NAME: &'static str;
    /// Whether this is an event or a command.
    const KIND: MessageKind;
    /// The stream category of the aggregate this message is part of.
    const CATEGORY: &'static str;

    /// The identifier of the aggregate instance this message is about, read
    /// from the field marked `#[aggregate_id]`, if any.
    fn aggregate_id(&self) -> Option<String> {
        None
    }
}

/// An event: a fact that happened to an aggregate.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an event",
    label = "not an event",
    note = "derive it with `#[derive(Event)]` and `#[event(part_of = SomeAggregate)]`"
)]
pub trait Event: Message {
    /// The aggregate this event is part of.
    type Aggregate: Aggregate;
}

/// A command: a request to change an aggregate.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a command",
    label = "not a command",
    note = "derive it with `#[derive(Command)]` and `#[command(part_of = SomeAggregate)]`"
)]
pub trait Command: Message {
    /// The aggregate this command targets.
    type Aggregate: Aggregate;

    /// The routing key: the field marked `#[routing_key]`, or else the
    /// aggregate identifier. Commands with the same routing key are handled
    /// one after another by default.
    fn routing_key(&self) -> Option<String> {
        self.aggregate_id()
    }
}

/// Proof that a message belongs to aggregate `A`.
///
/// Implemented by `#[derive(Event)]` / `#[derive(Command)]` for the aggregate
/// named in `part_of`; a handler declared `part_of = A` can only handle
/// messages that implement `PartOf<A>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not part of aggregate `{A}`",
    label = "handled here, but part of another aggregate",
    note = "a handler declared `part_of = {A}` can only handle messages declared `part_of = {A}`"
)]
pub trait PartOf<A> {
    /// Names the proof in the macros' compile-time check
    /// (`<M as PartOf<A>>::PROOF`), which rustc reports at the handled type
    /// without pointing into Ordo's source. Not meant to be set.
    #[doc(hidden)]
    const PROOF: std::marker::PhantomData<A> = std::marker::PhantomData;
}

/// Whether a message is an event or a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    /// A fact.
    Event,
    /// A request.
    Command,
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Event => "event",
            Self::Command => "command",
        })
    }
}

/// Free-form string metadata carried with a message.
///
/// Keys starting with [`RESERVED_METADATA_PREFIX`] (`ordo.`) are Ordo's
/// own: the PostgreSQL outbox's position of a message in its scope
/// (`ordo.position`, `ordo.position.scope`, see
/// [`crate::contract::broker::POSITION_METADATA`]) and any entry Ordo sets in the
/// future. A unit of work refuses them ([`crate::contract::error::CommitError::ReservedMetadata`]);
/// [`user_metadata`] is what an application may copy from a handled message.
pub type Metadata = BTreeMap<String, String>;

/// The prefix of the metadata keys Ordo owns (see [`Metadata`]).
pub const RESERVED_METADATA_PREFIX: &str = "ordo.";

/// Whether metadata key `key` is one of Ordo's own (starts with
/// [`RESERVED_METADATA_PREFIX`]).
pub fn is_reserved_metadata(key: &str) -> bool {
    key.starts_with(RESERVED_METADATA_PREFIX)
}

/// The entries of `metadata` an application may copy onto new messages:
/// every entry except Ordo's own ([`is_reserved_metadata`]) and the trace
/// context of the message's own publication
/// ([`crate::contract::trace::is_trace_context`]: a new message carries its
/// own).
///
/// ```
/// use ordo_core::contract::message::{Metadata, user_metadata};
///
/// let handled: Metadata = [("tenant", "acme"), ("ordo.position", "7")]
///     .into_iter()
///     .map(|(k, v)| (k.to_owned(), v.to_owned()))
///     .collect();
/// let copied: Vec<_> = user_metadata(&handled).collect();
/// assert_eq!(copied, [(&"tenant".to_owned(), &"acme".to_owned())]);
/// ```
pub fn user_metadata(metadata: &Metadata) -> impl Iterator<Item = (&String, &String)> {
    metadata
        .iter()
        .filter(|(key, _)| !is_reserved_metadata(key) && !crate::contract::trace::is_trace_context(key))
}

/// When a message happened, to the millisecond: in an envelope's JSON the
/// milliseconds since the Unix epoch (a number, cheap to write and read on
/// every message, as Kafka's record timestamps); for people RFC 3339 in
/// UTC (`2026-12-03T20:30:00.123Z`, its `Display` and `FromStr`).
///
/// ```
/// use ordo_core::contract::message::Timestamp;
///
/// let at: Timestamp = "2026-12-03T20:30:00.123Z".parse().unwrap();
/// assert_eq!(at.to_string(), "2026-12-03T20:30:00.123Z");
/// assert_eq!(at.unix_millis(), 1_796_329_800_123);
/// assert_eq!(Timestamp::from_unix_millis(1_796_329_800_123), at);
/// assert_eq!(serde_json::to_string(&at).unwrap(), "1796329800123");
/// assert!("yesterday".parse::<Timestamp>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(SystemTime);

impl Timestamp {
    /// Now, to the millisecond.
    pub fn now() -> Self {
        Self::from(SystemTime::now())
    }

    /// The point in time.
    pub fn system_time(self) -> SystemTime {
        self.0
    }

    /// `millis` milliseconds after the Unix epoch.
    pub fn from_unix_millis(millis: u64) -> Self {
        Self(UNIX_EPOCH + Duration::from_millis(millis))
    }

    /// The milliseconds since the Unix epoch.
    pub fn unix_millis(self) -> u64 {
        let since = self.0.duration_since(UNIX_EPOCH).unwrap_or_default();
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    }
}

impl From<SystemTime> for Timestamp {
    /// `at`, to the millisecond (what the text keeps; a time before 1970 is 1970).
    fn from(at: SystemTime) -> Self {
        Self::from_unix_millis(Self(at).unix_millis())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&humantime::format_rfc3339_millis(self.0), f)
    }
}

/// Text that is not an RFC 3339 time in UTC (`2026-12-03T20:30:00.123Z`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a time in RFC 3339 form in UTC (like `2026-12-03T20:30:00.123Z`): {reason}")]
pub struct BadTimestamp {
    text: String,
    reason: String,
}

impl FromStr for Timestamp {
    type Err = BadTimestamp;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        humantime::parse_rfc3339(text)
            .map(Self::from)
            .map_err(|error| BadTimestamp {
                text: crate::contract::text::capped(&crate::contract::text::escaped(text), 64).into_owned(),
                reason: error.to_string(),
            })
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.unix_millis())
    }
}

/// The most milliseconds a timestamp may have: the year 9999 (what RFC 3339
/// can write), so that any accepted value can be shown.
const MAX_UNIX_MILLIS: u64 = 253_402_300_799_999;

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Millis;

        impl serde::de::Visitor<'_> for Millis {
            type Value = Timestamp;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "milliseconds since the Unix epoch (0 to {MAX_UNIX_MILLIS})")
            }

            fn visit_u64<E: serde::de::Error>(self, millis: u64) -> Result<Timestamp, E> {
                if millis > MAX_UNIX_MILLIS {
                    return Err(E::invalid_value(serde::de::Unexpected::Unsigned(millis), &self));
                }
                Ok(Timestamp::from_unix_millis(millis))
            }
        }

        deserializer.deserialize_u64(Millis)
    }
}

/// A message in transit: its identity, routing facts and JSON payload.
///
/// Cheap to clone: the payload is shared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Unique message id (a UUID v4 in text form).
    pub id: String,
    /// Event or command.
    pub kind: MessageKind,
    /// The message's `TYPE_NAME`.
    pub type_name: String,
    /// The stream category (of the aggregate the message is part of).
    pub category: String,
    /// The aggregate instance identifier, when the message carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_id: Option<String>,
    /// A command's routing key ([`Command::routing_key`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_key: Option<String>,
    /// The validated partition key, when its category is partitioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_key: Option<String>,
    /// Metadata entries (read by the metadata sequencing policy).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: Metadata,
    /// When the message was raised or sent: set once, when its envelope is
    /// made (`None` in an envelope written before Ordo carried it). In the
    /// JSON: milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<Timestamp>,
    /// The conversation the message belongs to: the correlation id of the
    /// message whose handler raised or sent it. `None` when it starts one:
    /// its own id is then its correlation id ([`Envelope::correlation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The id of the message whose handler raised or sent this one; `None`
    /// when it was raised or sent outside a handler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// The payload, as JSON text.
    #[serde(deserialize_with = "shared_text")]
    pub payload: Arc<str>,
}

/// Reads a string into an `Arc<str>` with one allocation: serde's own
/// reads a `String`, shrinks it into a `Box<str>` and copies that into the
/// `Arc`.
fn shared_text<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
    struct Text;
    impl serde::de::Visitor<'_> for Text {
        type Value = Arc<str>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Arc<str>, E> {
            Ok(Arc::from(text))
        }
    }
    deserializer.deserialize_str(Text)
}

impl Envelope {
    /// Serialises `message` into a new envelope with a fresh id, occurring
    /// now.
    ///
    /// Made while a handler runs (within the handler's run), the envelope
    /// descends from the message being handled: it takes that message's
    /// correlation id, and that message's id as its causation id. Made
    /// elsewhere, it starts a conversation of its own.
    pub fn new<M: Message>(message: &M) -> Result<Self, serde_json::Error> {
        let (correlation_id, causation_id) = match crate::contract::context::handled() {
            Some(handled) => (Some(handled.correlation().to_owned()), Some(handled.id.clone())),
            None => (None, None),
        };
        Ok(Self {
            id: uuid::Uuid::new_v4().to_string(),
            kind: M::KIND,
            type_name: M::TYPE_NAME.to_owned(),
            category: M::CATEGORY.to_owned(),
            aggregate_id: message.aggregate_id(),
            routing_key: None,
            partition_key: None,
            metadata: Metadata::new(),
            occurred_at: Some(Timestamp::now()),
            correlation_id,
            causation_id,
            payload: serde_json::to_string(message)?.into(),
        })
    }

    /// The conversation the message belongs to: its correlation id, or its
    /// own id when it starts the conversation.
    pub fn correlation(&self) -> &str {
        self.correlation_id.as_deref().unwrap_or(&self.id)
    }

    /// Serialises a command into a new envelope carrying its routing key.
    pub fn command<C: Command>(command: &C) -> Result<Self, serde_json::Error> {
        let mut envelope = Self::new(command)?;
        envelope.routing_key = command.routing_key();
        Ok(envelope)
    }

    /// Decodes the payload as `M`.
    pub fn decode<M: DeserializeOwned>(&self) -> Result<M, DecodeError> {
        serde_json::from_str(&self.payload).map_err(|source| DecodeError {
            type_name: self.type_name.clone(),
            message_id: self.id.clone(),
            source,
        })
    }

    /// Whether this envelope holds a `M`: the same type name, category and
    /// kind (two aggregates may each have a message called `Placed`).
    pub fn is<M: Message>(&self) -> bool {
        self.type_name == M::TYPE_NAME && self.category == M::CATEGORY && self.kind == M::KIND
    }
}

/// A payload that could not be decoded into the handler's type.
#[derive(Debug, thiserror::Error)]
#[error("cannot decode message {message_id} as `{type_name}`")]
pub struct DecodeError {
    type_name: String,
    message_id: String,
    #[source]
    source: serde_json::Error,
}
