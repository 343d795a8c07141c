//! The inline broker: runs handlers in this process, no server needed.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::attempt::{Attempt, Outcome};

use crate::backoff::Backoff;
use crate::broker::{Broker, BrokerError, Capabilities, Publication, PublishError, Subscription};
use crate::config::Config;
use crate::error::error_chain;
use crate::executor::KeyedExecutor;
use crate::handler::{BoxFuture, HandlerContext, HandlerError, HandlerKind};
use crate::message::Envelope;
use crate::policy::{ProcessingContext, SequenceId};

/// How many recent failures [`InlineBroker::failures`] keeps.
const FAILURE_LOG_LEN: usize = 1024;

/// A broker that hands each published message straight to the handlers of
/// this process.
///
/// `publish` submits every publication, in order, to one shared
/// [`KeyedExecutor`] for each subscribed event handler and process manager,
/// with the sequence identifier of the subscription's policy. The outbox
/// processor publishes in commit order, so messages with one sequence
/// identifier are handled in commit order, one at a time; other identifiers
/// run in parallel up to `max_concurrency`. Identifiers are scoped to their
/// handler: two handlers never wait for each other.
///
/// The broker advertises in-process ordering, so `sequential_by` is accepted
/// and means "sequence by the partition key" here. A failing handler is
/// retried `max_retries` times with the configured backoff (its sequence
/// waits meanwhile), then logged, counted and skipped: unlike a partitioned
/// Redis consumer, the inline broker does not halt a sequence on poison.
///
/// Commands never pass through here; the domain's command bus runs them.
#[derive(Clone)]
pub struct InlineBroker {
    inner: Arc<Inner>,
}

struct Inner {
    executor: KeyedExecutor,
    max_retries: u32,
    backoff: Backoff,
    subscriptions: RwLock<Option<Arc<[Subscription]>>>,
    failures: Mutex<FailureLog>,
}

#[derive(Default)]
struct FailureLog {
    recent: VecDeque<HandlerFailure>,
    total: u64,
}

/// A message a handler failed on after all its attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerFailure {
    /// The handler's name.
    pub handler: &'static str,
    /// The message id.
    pub message_id: String,
    /// The message type.
    pub type_name: String,
    /// How many attempts were made.
    pub attempts: u32,
    /// The last error, with its sources.
    pub error: String,
}

impl fmt::Debug for InlineBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InlineBroker")
            .field("executor", &self.inner.executor)
            .field("max_retries", &self.inner.max_retries)
            .field("backoff", &self.inner.backoff)
            .field("failures", &self.failure_count())
            .finish_non_exhaustive()
    }
}

impl Default for InlineBroker {
    fn default() -> Self {
        Self::new()
    }
}

impl InlineBroker {
    /// An inline broker with the default configuration.
    pub fn new() -> Self {
        Self::with_config(&Config::default())
    }

    /// An inline broker with `config`'s `max_concurrency`, `max_retries` and
    /// retry backoff.
    pub fn with_config(config: &Config) -> Self {
        let partitioning = config.partitioning();
        Self {
            inner: Arc::new(Inner {
                executor: KeyedExecutor::new(partitioning.max_concurrency()),
                max_retries: partitioning.max_retries(),
                backoff: partitioning.backoff(),
                subscriptions: RwLock::new(None),
                failures: Mutex::new(FailureLog::default()),
            }),
        }
    }

    /// Sets the subscriptions published messages are delivered to.
    ///
    /// `Domain::init()` does this, so the domain's messages are handled
    /// whether or not it was started; [`Broker::run`] does it too. One
    /// inline broker serves one domain: attaching replaces the subscriptions.
    pub fn attach(&self, subscriptions: Arc<[Subscription]>) {
        *self
            .inner
            .subscriptions
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(subscriptions);
    }

    /// Resolves once no handler run is queued or running.
    pub async fn idle(&self) {
        self.inner.executor.idle().await;
    }

    /// The most recent failures (up to 1024), oldest first.
    pub fn failures(&self) -> Vec<HandlerFailure> {
        self.inner.failures().recent.iter().cloned().collect()
    }

    /// How many failures happened in total.
    pub fn failure_count(&self) -> u64 {
        self.inner.failures().total
    }

    fn subscriptions(&self) -> Option<Arc<[Subscription]>> {
        self.inner
            .subscriptions
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Submits each publication to every subscription handling it.
    fn submit_all(&self, publications: &[Publication]) -> Result<(), PublishError> {
        let Some(subscriptions) = self.subscriptions() else {
            return Err(PublishError {
                published: 0,
                source: "the inline broker has no subscriptions yet (init or start the domain first)".into(),
            });
        };
        for publication in publications {
            let envelope = &publication.envelope;
            let consumers = subscriptions
                .iter()
                .filter(|s| s.kind() != HandlerKind::Command && s.handles(&envelope.type_name));
            for subscription in consumers {
                let sequence = sequence_id(subscription, envelope);
                let delivery = Arc::clone(&self.inner).deliver(subscription.clone(), envelope.clone());
                // The executor runs the delivery even though its result is not awaited.
                drop(self.inner.executor.submit(sequence, delivery));
            }
        }
        Ok(())
    }
}

/// The sequence id of `envelope` for `subscription`, scoped to the handler.
fn sequence_id(subscription: &Subscription, envelope: &Envelope) -> Option<SequenceId> {
    let context = ProcessingContext::new(subscription.name());
    let id = subscription
        .policy_for(&envelope.type_name)
        .sequence_identifier(envelope, &context)?;
    Some(SequenceId::new(format!("{}\u{1f}{id}", subscription.name())))
}

impl Inner {
    fn failures(&self) -> MutexGuard<'_, FailureLog> {
        // The log is updated in one step, so a poisoned lock still holds a consistent log.
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the handler until it succeeds or its retries are spent.
    #[tracing::instrument(skip_all, fields(handler = subscription.name(), message_id = %envelope.id))]
    async fn deliver(self: Arc<Self>, subscription: Subscription, envelope: Envelope) {
        let envelope = Arc::new(envelope);
        let mut attempt = 1;
        loop {
            let Err(error) = run_attempt(&subscription, &envelope, attempt).await else {
                return;
            };
            let error = error_chain(&*error);
            if attempt > self.max_retries {
                tracing::error!(handler = subscription.name(), message_id = %envelope.id,
                    type_name = %envelope.type_name, attempts = attempt, error = %error,
                    "handler failed after all retries; message skipped");
                self.record(HandlerFailure {
                    handler: subscription.name(),
                    message_id: envelope.id.clone(),
                    type_name: envelope.type_name.clone(),
                    attempts: attempt,
                    error,
                });
                return;
            }
            tracing::warn!(handler = subscription.name(), message_id = %envelope.id, attempt,
                error = %error, "handler failed; retrying");
            self.backoff.sleep(attempt).await;
            attempt += 1;
        }
    }

    fn record(&self, failure: HandlerFailure) {
        let mut log = self.failures();
        if log.recent.len() == FAILURE_LOG_LEN {
            log.recent.pop_front();
        }
        log.recent.push_back(failure);
        log.total += 1;
    }
}

/// One attempt, on its own task so that a panicking handler counts as a
/// failed attempt instead of ending the delivery.
async fn run_attempt(
    subscription: &Subscription,
    envelope: &Arc<Envelope>,
    attempt: u32,
) -> Result<(), HandlerError> {
    let ctx = HandlerContext::new(envelope).with_attempt(attempt);
    let run = Attempt::new(Arc::clone(&subscription.handler), Arc::clone(envelope), ctx);
    match run.run((), &CancellationToken::new(), Duration::ZERO).await {
        Outcome::Succeeded => Ok(()),
        Outcome::Failed(failure) => Err(failure.into_error()),
        Outcome::Cancelled(_) => Err("the handler run was cancelled".into()),
    }
}

impl Broker for InlineBroker {
    fn name(&self) -> &str {
        "inline"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ORDERED_IN_PROCESS
    }

    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        // Submitted before the future is returned: submission order is publish order.
        let result = self.submit_all(publications);
        Box::pin(async move { result })
    }

    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        self.attach(subscriptions);
        let broker = self.clone();
        Box::pin(async move {
            shutdown.cancelled().await;
            broker.idle().await;
            Ok(())
        })
    }
}
