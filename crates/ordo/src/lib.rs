//! Ordo: per-key ordered processing of events and commands.
//!
//! Messages with the same key are handled one after another, in publish
//! order, on one instance or across many; messages with different keys are
//! handled in parallel. You declare the key where you declare the handler,
//! and the macros check at compile time that every handled message has that
//! field and that its type can be a key.
//!
//! ```
//! use ordo::prelude::*;
//!
//! #[derive(Aggregate)]
//! struct Order; // stream category "order"
//!
//! #[derive(Debug, Clone, Serialize, Deserialize, Event)]
//! #[event(part_of = Order)]
//! struct OrderPlaced {
//!     #[aggregate_id]
//!     order_id: String,
//!     client_id: String,
//!     amount: u64,
//! }
//!
//! struct OrderProjector;
//!
//! // One client's orders are projected one at a time, in order.
//! #[event_handler(part_of = Order, sequential_by = "client_id")]
//! impl OrderProjector {
//!     #[handle]
//!     async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
//!         println!("{} ordered {} (attempt {})", event.client_id, event.amount, ctx.attempt());
//!         Ok(())
//!     }
//! }
//!
//! let descriptor = OrderProjector::descriptor();
//! assert_eq!(descriptor.part_of, Some("order"));
//! assert_eq!(descriptor.sequential_by, Some("client_id"));
//! assert_eq!(descriptor.handles[0].type_name, "OrderPlaced");
//! ```
//!
//! Handlers are registered explicitly when the domain is built; see
//! [`DomainBuilder`].
//!
//! # What is where
//!
//! The root holds the macros, the builders ([`Domain::builder`],
//! [`Config`]) and the [`prelude`]. The rest is reached through the core's
//! two wings: [`contract`] (messages, keys, handlers, policies,
//! configuration, and what a broker or an outbox implements) and
//! [`runtime`] (the domain, units of work, the outbox processor, the inline
//! broker). With the `redis` and `postgres` features, `ordo::redis` and
//! `ordo::postgres` are the backends (`ordo_redis`, `ordo_postgres`).
//!
//! # Depending on Ordo
//!
//! Messages travel as JSON, so they derive serde's `Serialize` and
//! `Deserialize` (re-exported by the [`prelude`]). serde's derives expand to
//! code that names the `serde` crate, so add `serde` to your own
//! dependencies next to `ordo`.
//!
//! # The macros
//!
//! - [`#[derive(Aggregate)]`](macro@Aggregate): a stream category;
//! - [`#[derive(Event)]`](macro@Event) and [`#[derive(Command)]`](macro@Command):
//!   messages, part of an aggregate, with their key fields;
//! - [`#[event_handler]`](macro@event_handler) and
//!   [`#[command_handler]`](macro@command_handler), with [`#[handle]`](macro@handle)
//!   on each handler method: handlers, partitioned by `sequential_by`;
//! - [`#[process_manager]`](macro@process_manager): one stateful instance per
//!   correlation value;
//! - [`#[sequencing_policy(...)]`](macro@sequencing_policy): which messages are
//!   handled one after another.
//!
//! Each is documented on its own page. Every one takes `crate = "..."` when
//! Ordo is reachable under another path than `::ordo` (a renamed
//! dependency, or a crate re-exporting it), as serde's `crate` does.

// One list of re-exports, not globbed: the root holds the macros (with the
// traits of the same names, as serde's derives), the builders and what a
// program keeps hold of; handlers need the `prelude`; everything else is
// reached through the core's two wings.

pub use ordo_core::{
    Aggregate, Command, Config, Domain, DomainBuilder, Event, InlineBroker, PartitionKey, RunningDomain,
    SendOptions, SequencingPolicy, Transient, UnitOfWork, transient,
};
pub use ordo_core::{contract, runtime};
pub use ordo_macros::{
    Aggregate, Command, Event, command_handler, event_handler, handle, process_manager, sequencing_policy,
};

/// The Redis broker (the `redis` feature): `ordo_redis` under `ordo::redis`.
#[cfg(feature = "redis")]
pub use ordo_redis as redis;

/// The PostgreSQL outbox and relay (the `postgres` feature): `ordo_postgres`
/// under `ordo::postgres`.
#[cfg(feature = "postgres")]
pub use ordo_postgres as postgres;

#[cfg(feature = "otel")]
pub mod otel;

/// Everything a module declaring messages and handlers needs:
/// `use ordo::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Aggregate, Command, Config, Domain, Event, InlineBroker, SendOptions, SequencingPolicy, UnitOfWork,
        command_handler, event_handler, handle, process_manager, sequencing_policy,
    };
    pub use ordo_core::{
        CommandHandler, CommitError, DispatchError, EventHandler, ExtractionPolicy, FullConcurrencyPolicy,
        HandlerContext, HandlerError, HandlerResult, HierarchicalPolicy, IncorrectUsageError, Message,
        MetadataPolicy, PartitionKeyPolicy, PerAggregatePolicy, ProcessManager, PropertyPolicy,
        RoutingKeyPolicy, SequentialPolicy,
    };
    pub use serde::{Deserialize, Serialize};
}

/// What the macros' generated code names. Not public API: it may change in
/// any release.
#[doc(hidden)]
pub mod __private {
    use std::borrow::Cow;
    use std::sync::Arc;

    pub use ordo_core::{
        Aggregate, BoxFuture, Command, CommandHandler, ContextParameter, Envelope, Event, EventHandler,
        FullConcurrencyPolicy, HandledMessage, HandlerContext, HandlerDescriptor, HandlerError, HandlerKind,
        HandlerResult, IntoCommandResult, IntoHandlerResult, KeyExtractor, Message, MessageKind,
        MetadataPolicy, PartOf, PartitionKey, PartitionKeyPolicy, PerAggregatePolicy, ProcessManager,
        PropertyPolicy, RoutingKeyPolicy, RustType, SequenceText, SequencingPolicy, SequentialPolicy,
    };
    pub use serde;

    /// The text of a key field; `None` for a null key. The generated code
    /// calls it as `key_text(<_ as PartitionKey>::key_value(&field))`: a
    /// field type that is not a key is then reported at the attribute by
    /// `PartitionKey`'s own message, with no note pointing here.
    pub fn key_text(key: Option<Cow<'_, str>>) -> Option<String> {
        key.map(Cow::into_owned)
    }

    /// Whether two categories are the same (`==` for `&str` in constants).
    pub const fn same_category(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The message `envelope` holds, when it holds an `M` that decodes.
    pub fn decode_as<M: Message>(envelope: &Envelope) -> Option<M> {
        if envelope.is::<M>() {
            envelope.decode().ok()
        } else {
            None
        }
    }

    /// Decodes an envelope's payload for a handler.
    pub fn decode<M: Message>(envelope: &Envelope) -> Result<M, HandlerError> {
        envelope.decode().map_err(HandlerError::from)
    }

    /// A sequencing policy as the descriptors store it.
    pub fn policy<P: SequencingPolicy>(policy: P) -> Option<Arc<dyn SequencingPolicy>> {
        Some(Arc::new(policy))
    }
}
