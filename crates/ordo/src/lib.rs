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
//! Handlers are registered explicitly when the domain is built; see the
//! [`domain`](mod@domain) module.
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

// The re-exports are listed, not globbed, so that what `ordo` offers is
// decided here, grouped as the documentation presents it.

// Messages and keys.
pub use ordo_core::{
    Aggregate, Command, DecodeError, Envelope, Event, InvalidKey, KeyRule, KeyRules, Lane, Message,
    MessageKind, Metadata, PartOf, PartitionKey,
};

// Handlers and process managers.
pub use ordo_core::{
    BoxFuture, CommandHandler, ContextParameter, CorrelationPolicy, EventHandler, Extensions, HandledMessage,
    HandlerContext, HandlerDescriptor, HandlerError, HandlerKind, HandlerResult, InMemoryProcessStore,
    IntoHandlerResult, KeyExtractor, ProcessManager, ProcessStore, RustType,
};

// Failures: marking one transient (a dependency outage, retried without
// using up the message's attempts).
pub use ordo_core::{Transient, transient};

// Sequencing policies.
pub use ordo_core::{
    ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
    PerAggregatePolicy, ProcessingContext, PropertyPolicy, RoutingKeyPolicy, SEQUENTIAL_SEQUENCE_ID,
    SequenceId, SequenceText, SequencingPolicy, SequentialPolicy, default_command_policy,
    default_event_policy,
};

// The domain, its configuration and its errors.
pub use ordo_core::{
    BackoffError, CommitError, Config, ConfigError, DispatchError, Domain, DomainBuilder, HandlerConfig,
    HealthConfig, IncorrectUsageError, OutboxError, PartitioningConfig, Partitions, PriorityLanesConfig,
    ProcessStoreError, RunningDomain, SettleError, ShutdownError, UsageProblem,
};

// Health and readiness, for probes.
pub use ordo_core::{HealthReport, HealthState, SubscriptionHealth};

// Publishing: the unit of work and the outbox.
pub use ordo_core::{
    CommitReceipt, InMemoryOutbox, NewOutboxRow, Outbox, OutboxProcessor, OutboxRow, OutboxStatus,
    PublishReport, UnitOfWork,
};

// Brokers and execution.
pub use ordo_core::{
    Backoff, Broker, BrokerError, Capabilities, DynHandler, HandlerFailure, HandlerSettings, InlineBroker,
    InlineDeadLetter, InlineHalt, KeyedExecutor, Permits, Publication, PublishError, ResolveError,
    Subscription,
};

// The modules, for what is not re-exported above (`error::error_chain`,
// `key::stream`, ...).
pub use ordo_core::{
    attempt, backoff, broker, builder, config, domain, error, executor, handler, health, inline, key,
    log_events, message, outbox, policy, process, retry, uow,
};

// The macros; each is documented on its own item.
pub use ordo_macros::{
    Aggregate, Command, Event, command_handler, event_handler, handle, process_manager, sequencing_policy,
};

/// Everything a module declaring messages and handlers needs:
/// `use ordo::prelude::*;`.
pub mod prelude {
    pub use crate::{
        Aggregate, Command, CommandHandler, Event, EventHandler, HandlerContext, HandlerError, HandlerResult,
        Message, ProcessManager, SequencingPolicy, command_handler, event_handler, handle, process_manager,
        sequencing_policy,
    };
    pub use crate::{
        ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
        PerAggregatePolicy, PropertyPolicy, RoutingKeyPolicy, SequentialPolicy,
    };
    pub use ordo_core::{
        CommitError, Config, DispatchError, Domain, IncorrectUsageError, InlineBroker, UnitOfWork,
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
        HandlerResult, IntoHandlerResult, KeyExtractor, Message, MessageKind, MetadataPolicy, PartOf,
        PartitionKey, PartitionKeyPolicy, PerAggregatePolicy, ProcessManager, PropertyPolicy,
        RoutingKeyPolicy, RustType, SequenceText, SequencingPolicy, SequentialPolicy,
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
