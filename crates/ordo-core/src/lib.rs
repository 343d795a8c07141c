//! The core of Ordo: messages, partition keys, routing, the transactional
//! outbox, sequencing policies, the keyed executor and the inline broker.
//!
//! Most users depend on the `ordo` facade instead of this crate.

pub mod attempt;
pub mod backoff;
pub mod broker;
pub mod bus;
pub mod config;
mod context;
pub mod domain;
pub mod error;
pub mod executor;
mod field;
pub mod handler;
pub mod health;
pub mod inline;
pub mod key;
pub mod log_events;
pub mod message;
pub mod outbox;
pub mod policy;
pub mod process;
pub mod uow;

pub use broker::{
    Broker, BrokerError, Capabilities, DynHandler, HandlerSettings, Publication, PublishError, Subscription,
};
pub use handler::{
    BoxFuture, CommandHandler, ContextParameter, EventHandler, Extensions, HandledMessage, HandlerContext,
    HandlerDescriptor, HandlerError, HandlerKind, HandlerResult, IntoHandlerResult, KeyExtractor,
    ProcessManager, RustType,
};
pub use key::{InvalidKey, KeyRule, KeyRules, Lane, PartitionKey};
pub use message::{Aggregate, Command, DecodeError, Envelope, Event, Message, MessageKind, Metadata, PartOf};
pub use policy::{ProcessingContext, SequenceId, SequenceText, SequencingPolicy};

// Re-exports of the runtime modules (domain, outbox, executor, policies, ...)
// are added below by the modules' authors.
pub use backoff::Backoff;
pub use config::{Config, HandlerConfig, HealthConfig, PartitioningConfig, PriorityLanesConfig, ReapPolicy};
pub use domain::{Domain, DomainBuilder, RunningDomain};
pub use error::{
    BackoffError, CommitError, ConfigError, DispatchError, IncorrectUsageError, OutboxError,
    ProcessStoreError, SettleError, ShutdownError, UsageProblem,
};
pub use executor::{KeyedExecutor, Permits};
pub use health::{HealthReport, HealthState, SubscriptionHealth};
pub use inline::{HandlerFailure, InlineBroker, InlineDeadLetter, InlineHalt, ResolveError};
pub use outbox::{
    InMemoryOutbox, NewOutboxRow, Outbox, OutboxProcessor, OutboxRow, OutboxStatus, PublishReport,
};
pub use policy::{
    ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
    PerAggregatePolicy, PropertyPolicy, RoutingKeyPolicy, SEQUENTIAL_SEQUENCE_ID, SequentialPolicy,
    default_command_policy, default_event_policy,
};
pub use process::{CorrelationPolicy, InMemoryProcessStore, ProcessStore};
pub use uow::{CommitReceipt, UnitOfWork};
