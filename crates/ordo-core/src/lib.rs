//! The core of Ordo: messages, partition keys, routing, the transactional
//! outbox, sequencing policies, the keyed executor and the inline broker.
//!
//! Most users depend on the `ordo` facade instead of this crate. Its
//! modules, from what an application declares to what runs it:
//!
//! - Declaring: [`message`] (aggregates, events, commands, the envelope),
//!   [`key`] (partition keys and their rules), [`handler`] (what the macros
//!   generate, the handler context), [`policy`] (sequencing policies),
//!   [`process`] (process managers and their state).
//! - Assembling: [`domain`] (the registry, checked at `init()`), [`config`]
//!   (domain.toml), [`error`] (every error of the runtime).
//! - Publishing: [`uow`] (the unit of work), [`outbox`] (the transactional
//!   outbox and its processor), [`bus`] (command dispatch).
//! - Running: [`broker`] (the broker contract), [`inline`] (the in-process
//!   broker), [`executor`] (per-key ordering with bounded concurrency),
//!   [`attempt`] (one handler run), [`retry`] (what follows a failed
//!   attempt: transient failures, halts, pausing a handler), [`backoff`].
//! - Operating: [`health`] (health and readiness as data), [`log_events`]
//!   (the stable names of important log lines), [`text`] (untrusted text
//!   escaped for logs and terminals, capped for records).

// Declaring messages and handlers.
pub mod handler;
pub mod key;
pub mod message;
pub mod policy;
pub mod process;
mod process_manager;

// Assembling a domain.
pub mod builder;
pub mod config;
pub mod domain;
pub mod error;
mod registry;
pub mod runtime_error;

// Publishing.
mod bus;
mod dispatch;
pub mod outbox;
pub mod uow;

// Running.
pub mod attempt;
pub mod backoff;
pub mod broker;
pub mod executor;
pub mod health;
pub mod inline;
pub mod log_events;
pub mod retry;
pub mod text;

// Internal.
mod context;
mod field;

// Messages and keys.
pub use key::{InvalidKey, KeyExtractor, KeyRule, KeyRules, Lane, PartitionKey};
pub use message::{Aggregate, Command, DecodeError, Envelope, Event, Message, MessageKind, Metadata, PartOf};

// Handlers.
pub use handler::{
    BoxFuture, CommandHandler, ContextParameter, DynHandler, EventHandler, EventSink, Extensions,
    HandledMessage, HandlerContext, HandlerDescriptor, HandlerError, HandlerKind, HandlerResult,
    IntoHandlerResult, ProcessManager, RaisedEvent, RustType,
};
pub use process::{CorrelationPolicy, InMemoryProcessStore, ProcessStore};

// Sequencing policies.
pub use policy::{
    ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
    PerAggregatePolicy, ProcessingContext, PropertyPolicy, RoutingKeyPolicy, SEQUENTIAL_SEQUENCE_ID,
    SequenceId, SequenceText, SequencingPolicy, SequentialPolicy, default_command_policy,
    default_event_policy,
};

// The domain and its configuration.
pub use builder::DomainBuilder;
pub use config::{
    Config, ConfigError, HandlerConfig, HealthConfig, OutboxConfig, PartitioningConfig, Partitions,
    PriorityLanesConfig,
};
pub use domain::{Domain, RunningDomain};
pub use error::{BackoffError, CommitError, OutboxError, ProcessStoreError};
pub use health::{HealthReport, HealthState, SubscriptionHealth};
pub use runtime_error::{DispatchError, IncorrectUsageError, SettleError, ShutdownError, UsageProblem};

// Publishing.
pub use outbox::{
    InMemoryOutbox, NewOutboxRow, Outbox, OutboxProcessor, OutboxRow, OutboxStatus, PublishReport,
};
pub use uow::{CommitReceipt, UnitOfWork};

// Brokers and execution.
pub use backoff::Backoff;
pub use broker::{
    Broker, BrokerError, Capabilities, HandlerSettings, Publication, PublishError, Subscription,
};
pub use executor::{KeyedExecutor, Permits};
pub use inline::{HandlerFailure, InlineBroker, InlineDeadLetter, InlineHalt, ResolveError};
pub use retry::{Transient, transient};
