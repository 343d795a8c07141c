//! The core of Ordo: messages, partition keys, routing, the transactional
//! outbox, sequencing policies, the keyed executor and the inline broker.
//!
//! Most users depend on the `ordo` facade instead of this crate. It has two
//! wings:
//!
//! - [`contract`]: what an application declares (messages, keys, handlers,
//!   policies, configuration) and what a broker, an outbox or a process store
//!   implements. Brokers depend on it alone.
//! - [`runtime`]: the domain that runs the contract (its builder, units of
//!   work, the outbox processor, the command bus, the inline broker). It
//!   imports the contract; the contract never imports it.
//!
//! The types most code names are re-exported at the root, below.

pub mod contract;
pub mod runtime;

// The contract: messages and keys.
pub use contract::key::{InvalidKey, KeyExtractor, KeyRule, KeyRules, Lane, PartitionKey};
pub use contract::message::{
    Aggregate, Command, DecodeError, Envelope, Event, Message, MessageKind, Metadata, PartOf,
};

// The contract: handlers and process managers.
pub use contract::handler::{
    BoxFuture, CommandHandler, ContextParameter, DynHandler, EventHandler, EventSink, Extensions,
    HandledMessage, HandlerContext, HandlerDescriptor, HandlerError, HandlerKind, HandlerResult,
    IntoCommandResult, IntoHandlerResult, ProcessManager, RaisedEvent, RustType,
};
pub use contract::process::{CorrelationPolicy, InMemoryProcessStore, ProcessStore};
pub use contract::retry::{Transient, transient};

// The contract: sequencing policies.
pub use contract::policy::{
    ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
    PerAggregatePolicy, ProcessingContext, PropertyPolicy, RoutingKeyPolicy, SEQUENTIAL_SEQUENCE_ID,
    SequenceId, SequenceText, SequencingPolicy, SequentialPolicy, default_command_policy,
    default_event_policy,
};

// The contract: configuration, health and errors.
pub use contract::backoff::Backoff;
pub use contract::config::{
    CommandsConfig, Config, ConfigError, HandlerConfig, HealthConfig, OutboxConfig, PartitioningConfig,
    Partitions, PriorityLanesConfig,
};
pub use contract::error::{BackoffError, CommitError, OutboxError, ProcessStoreError};
pub use contract::health::{HealthReport, HealthState, SubscriptionHealth};

// The contract: what brokers and outboxes implement.
pub use contract::broker::{
    Broker, BrokerError, Capabilities, HandlerSettings, Publication, PublishError, Subscription,
};
pub use contract::outbox::{InMemoryOutbox, NewOutboxRow, Outbox, OutboxRow, OutboxStatus};

// The runtime.
pub use runtime::builder::DomainBuilder;
pub use runtime::dispatch::SendOptions;
pub use runtime::domain::{Domain, RunningDomain};
pub use runtime::error::{
    DispatchError, IncorrectUsageError, RemoteHandlerError, SettleError, ShutdownError, UsageProblem,
};
pub use runtime::executor::{KeyedExecutor, Permits};
pub use runtime::inline::{HandlerFailure, InlineBroker, InlineDeadLetter, InlineHalt, ResolveError};
pub use runtime::outbox::{OutboxProcessor, PublishReport};
pub use runtime::uow::{CommitReceipt, UnitOfWork};
