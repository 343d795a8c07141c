//! The contract's errors: commits, the outbox, the process store and
//! backoff bounds, and how an error chain is written on one line.
//!
//! Each error names what was wrong (the handler, category, key, field or
//! configuration key). Wrapped causes are exposed through
//! [`std::error::Error::source`], never repeated in the outer message.

use std::time::Duration;

use crate::contract::key::InvalidKey;

/// A boxed error from a storage backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
    /// (starts with `ordo.`, [`crate::contract::message::RESERVED_METADATA_PREFIX`]):
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

/// Invalid [`Backoff`](crate::contract::backoff::Backoff) bounds.
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
