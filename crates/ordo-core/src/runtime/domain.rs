//! The domain: a checked, ready domain (built by
//! [`DomainBuilder::init`](crate::DomainBuilder::init)) and the runtime that
//! publishes and consumes for it.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::contract::broker::{Broker, BrokerError, Subscription};
use crate::contract::command::CommandRouter;
use crate::contract::config::Config;
use crate::contract::error::OutboxError;
use crate::contract::health::{HealthReport, HealthState};
use crate::contract::outbox::Outbox;
use crate::contract::process::ProcessStore;
use crate::runtime::bus::CommandBus;
use crate::runtime::error::{SettleError, ShutdownError};
use crate::runtime::inline::InlineBroker;
use crate::runtime::outbox::{OutboxProcessor, PublishReport};
use crate::runtime::registry::{MessageTypes, Partitioning};

/// The domain, for handlers built before it (process managers raise events
/// in its units of work). Weak: the domain owns its handlers.
#[derive(Clone, Default)]
pub(crate) struct DomainRef(Arc<std::sync::OnceLock<std::sync::Weak<Inner>>>);

impl DomainRef {
    /// The domain, while it exists.
    pub(crate) fn get(&self) -> Option<Domain> {
        let inner = self.0.get()?.upgrade()?;
        Some(Domain { inner })
    }

    /// Points at `domain`; only its `init()` sets it, once.
    pub(crate) fn set(&self, domain: &Domain) {
        let _ = self.0.set(Arc::downgrade(&domain.inner));
    }
}

/// A checked, ready domain. Cheap to clone: clones share everything.
#[derive(Clone)]
pub struct Domain {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) inline: Option<InlineBroker>,
    pub(crate) outbox: Arc<dyn Outbox>,
    pub(crate) process_store: Arc<dyn ProcessStore>,
    pub(crate) subscriptions: Arc<[Subscription]>,
    pub(crate) command_handlers: Arc<[Subscription]>,
    /// The command handlers as a routing broker consumes them (empty on
    /// other brokers): see [`Broker::command_router`].
    pub(crate) routed_commands: Arc<[Subscription]>,
    /// The broker's routing of commands, when it has one.
    pub(crate) router: Option<Arc<dyn CommandRouter>>,
    pub(crate) partitioning: Partitioning,
    /// The Rust type of each handled (category, type name).
    pub(crate) message_types: MessageTypes,
    /// The categories of the registered aggregates (empty: none registered).
    pub(crate) aggregate_categories: HashSet<&'static str>,
    pub(crate) processor: Arc<OutboxProcessor>,
    pub(crate) bus: CommandBus,
}

impl Domain {
    /// The domain of `inner` (what `DomainBuilder::init` built).
    pub(crate) fn new(inner: Inner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Publishes every pending outbox row now (what the background loop of
    /// [`Domain::start`] does after each commit).
    pub async fn publish_pending(&self) -> Result<PublishReport, OutboxError> {
        self.inner.processor.publish_pending().await
    }

    /// Starts the outbox processor and the broker's consumer in the
    /// background. Must be called inside a tokio runtime.
    ///
    /// A process that only publishes (commits events, handles nothing) calls
    /// [`Domain::start_publisher`] instead, so it never joins the consumer
    /// groups of the handlers it registered for their keys.
    pub fn start(&self) -> RunningDomain {
        self.start_with(true)
    }

    /// Starts only the outbox processor: committed events are published, and
    /// no handler of this process consumes anything from the broker.
    ///
    /// For a publishing-only process on a distributing broker (Redis): it
    /// registers the same handlers as the workers (the registrations give
    /// each category its partition key) but must not consume. On the inline
    /// broker handlers run in this process whatever is started, since that
    /// is where published events are delivered.
    /// [`RunningDomain::shutdown`] publishes what is still pending.
    pub fn start_publisher(&self) -> RunningDomain {
        self.start_with(false)
    }

    fn start_with(&self, consume: bool) -> RunningDomain {
        let shutdown = CancellationToken::new();
        let consumer_shutdown = shutdown.child_token();
        let tracker = TaskTracker::new();
        let processor = Arc::clone(&self.inner.processor);
        let token = shutdown.child_token();
        let processor = tracker.spawn(async move { processor.run(token).await });
        let broker = consume.then(|| {
            let broker = Arc::clone(&self.inner.broker);
            let subscriptions: Arc<[Subscription]> = if self.inner.routed_commands.is_empty() {
                Arc::clone(&self.inner.subscriptions)
            } else {
                self.inner
                    .subscriptions
                    .iter()
                    .chain(self.inner.routed_commands.iter())
                    .cloned()
                    .collect()
            };
            let consumer = broker.run(subscriptions, consumer_shutdown.clone());
            tracker.spawn(async move {
                let result = consumer.await;
                if let Err(error) = &result {
                    tracing::error!(event = crate::contract::log_events::CONSUMER_FAILED, broker = broker.name(), error = %error, "the broker's consumer stopped with an error");
                }
                result
            })
        });
        tracker.close();
        RunningDomain {
            domain: self.clone(),
            shutdown,
            consumer_shutdown,
            tracker,
            processor: Some(processor),
            broker,
        }
    }

    /// Waits until the outbox has no pending rows and, on the inline broker,
    /// no handler is queued or running, publishing pending rows itself (the
    /// domain need not be started). Events that handlers commit meanwhile are
    /// waited for too. Messages waiting behind a halted key are not waited
    /// for (see [`InlineBroker::halted`]).
    ///
    /// With another broker this waits for the outbox only. It does not return
    /// while rows keep failing to publish: bound it with a timeout.
    ///
    /// # Errors
    ///
    /// [`SettleError::InsideHandler`] when called from inside a handler (it
    /// would wait for that handler, which waits for it).
    pub async fn settle(&self) -> Result<(), SettleError> {
        if let Some(handler) = crate::contract::context::current_handler() {
            return Err(SettleError::InsideHandler { handler });
        }
        let retry_wait = self.inner.config.partitioning().poll_interval();
        loop {
            match self.publish_pending().await {
                Ok(report) if report.failed == 0 => {}
                Ok(_) | Err(_) => {
                    tokio::time::sleep(retry_wait).await;
                    continue;
                }
            }
            if let Some(inline) = &self.inner.inline {
                inline.idle().await;
            }
            if matches!(self.inner.outbox.pending(1).await, Ok(rows) if rows.is_empty()) {
                return Ok(());
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The subscriptions the broker consumes for: event handlers and process
    /// managers, in registration order.
    pub fn subscriptions(&self) -> &Arc<[Subscription]> {
        &self.inner.subscriptions
    }

    /// The command handlers, in registration order.
    pub fn command_handlers(&self) -> &Arc<[Subscription]> {
        &self.inner.command_handlers
    }

    /// The broker.
    pub fn broker(&self) -> &Arc<dyn Broker> {
        &self.inner.broker
    }

    /// The inline broker, when it is the domain's broker (for its failures,
    /// halted keys and dead letters).
    pub fn inline_broker(&self) -> Option<&InlineBroker> {
        self.inner.inline.as_ref()
    }

    /// The outbox.
    pub fn outbox(&self) -> &Arc<dyn Outbox> {
        &self.inner.outbox
    }

    /// The process store.
    pub fn process_store(&self) -> &Arc<dyn ProcessStore> {
        &self.inner.process_store
    }

    /// The key field of a partitioned event category.
    pub fn partition_key_field(&self, category: &str) -> Option<&'static str> {
        self.inner.partitioning.get(category).map(|key| key.field())
    }

    /// Every partitioned event category and its key field, whether its
    /// handlers run here or were registered by type
    /// ([`DomainBuilder::event_handler_type`](crate::DomainBuilder::event_handler_type)); sorted by category.
    pub fn partitioned_categories(&self) -> Vec<(&'static str, &'static str)> {
        let mut categories: Vec<_> = self
            .inner
            .partitioning
            .iter()
            .map(|(category, key)| (*category, key.field()))
            .collect();
        categories.sort_unstable();
        categories
    }

    pub(crate) fn partitioning(&self) -> &Partitioning {
        &self.inner.partitioning
    }

    pub(crate) fn message_types(&self) -> &MessageTypes {
        &self.inner.message_types
    }

    /// Whether events of `category` may be raised: any category when no
    /// aggregate is registered, else only registered aggregates' ones.
    pub(crate) fn owns_category(&self, category: &str) -> bool {
        self.inner.aggregate_categories.is_empty() || self.inner.aggregate_categories.contains(category)
    }

    /// The command bus.
    /// The broker's routing of commands across instances, when it has one.
    pub(crate) fn command_router(&self) -> Option<&Arc<dyn CommandRouter>> {
        self.inner.router.as_ref()
    }

    pub(crate) fn bus(&self) -> &CommandBus {
        &self.inner.bus
    }

    /// Wakes the outbox processor after a commit.
    pub(crate) fn notify_committed(&self) {
        self.inner.processor.notify();
    }
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = |subs: &[Subscription]| subs.iter().map(Subscription::name).collect::<Vec<_>>();
        f.debug_struct("Domain")
            .field("broker", &self.inner.broker.name())
            .field("subscriptions", &names(&self.inner.subscriptions))
            .field("command_handlers", &names(&self.inner.command_handlers))
            .field("outbox", &self.inner.outbox)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How long [`RunningDomain::shutdown`] keeps publishing pending outbox rows.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// A started domain: the outbox processor and the broker's consumer run in
/// the background until [`RunningDomain::shutdown`]. Dropping it cancels
/// them without waiting, and without publishing what is still pending.
#[derive(Debug)]
pub struct RunningDomain {
    domain: Domain,
    shutdown: CancellationToken,
    consumer_shutdown: CancellationToken,
    tracker: TaskTracker,
    processor: Option<JoinHandle<()>>,
    broker: Option<JoinHandle<Result<(), BrokerError>>>,
}

impl RunningDomain {
    /// The running domain.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The health of every subscription, judged against `[health]` (see
    /// [`crate::contract::health`] for the states and what the probes make of them).
    /// A subscription is `unknown` once the broker's consumer has stopped.
    pub async fn health(&self) -> HealthReport {
        let domain = &self.domain;
        let broker = domain.broker();
        let subscriptions = domain.subscriptions();
        let consumer_stopped = self.broker.as_ref().is_some_and(JoinHandle::is_finished);
        let mut report = broker.health(subscriptions, domain.config().health()).await;
        if consumer_stopped {
            for health in &mut report {
                health.degrade(
                    HealthState::Unknown,
                    format!("the consumer of broker `{}` has stopped", broker.name()),
                );
            }
        }
        HealthReport {
            broker: broker.name().to_owned(),
            consumer_stopped,
            subscriptions: report,
        }
    }

    /// A token cancelled when the domain shuts down.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.child_token()
    }

    /// [`RunningDomain::shutdown_within`] [`DEFAULT_DRAIN_TIMEOUT`].
    pub async fn shutdown(self) -> Result<(), ShutdownError> {
        self.shutdown_within(DEFAULT_DRAIN_TIMEOUT).await
    }

    /// Stops the broker's consumer (in-flight handlers finish), then
    /// publishes every outbox row still pending, including the events those
    /// handlers committed, for up to `drain_timeout`, then stops the outbox
    /// processor.
    ///
    /// Returns [`ShutdownError::Unpublished`] with the number of rows left
    /// pending when the outbox could not be drained in time (the broker kept
    /// refusing them): with an in-memory outbox those events are lost when
    /// the process exits. With a shared outbox the count includes rows other
    /// processes committed meanwhile.
    pub async fn shutdown_within(mut self, drain_timeout: Duration) -> Result<(), ShutdownError> {
        self.consumer_shutdown.cancel();
        let broker_result = match self.broker.take() {
            Some(handle) => match handle.await {
                Ok(result) => result.map_err(|source| ShutdownError::Broker {
                    broker: self.domain.broker().name().to_owned(),
                    source,
                }),
                Err(_) => Err(ShutdownError::Panicked { task: "broker" }),
            },
            None => Ok(()),
        };
        let drained = self.drain(drain_timeout).await;
        self.shutdown.cancel();
        let processor = self.processor.take();
        self.tracker.wait().await;
        let processor_result = match processor {
            Some(handle) => handle.await.map_err(|_| ShutdownError::Panicked {
                task: "outbox processor",
            }),
            None => Ok(()),
        };
        drained.and(broker_result).and(processor_result)
    }

    /// Publishes pending rows (and, inline, waits for the handlers they
    /// start, which may commit more) until none is left or `timeout` passes.
    async fn drain(&self, timeout: Duration) -> Result<(), ShutdownError> {
        let domain = &self.domain;
        let drained = tokio::time::timeout(timeout, domain.settle()).await;
        if drained.is_ok() {
            return Ok(());
        }
        let rows = match domain.outbox().pending(usize::MAX).await {
            Ok(rows) => rows.len(),
            Err(error) => {
                tracing::error!(error = %crate::contract::error::error_chain(&error),
                    "cannot count the outbox rows left pending at shutdown");
                return Err(ShutdownError::Unpublished { rows: None, timeout });
            }
        };
        let last_error = match domain.outbox().pending(1).await {
            Ok(rows) => rows.into_iter().next().and_then(|row| row.last_error),
            Err(_) => None,
        };
        tracing::error!(
            event = crate::contract::log_events::OUTBOX_UNPUBLISHED_AT_SHUTDOWN,
            rows,
            last_error,
            ?timeout,
            "outbox rows left unpublished at shutdown"
        );
        Err(ShutdownError::Unpublished {
            rows: Some(rows),
            timeout,
        })
    }
}

impl Drop for RunningDomain {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
