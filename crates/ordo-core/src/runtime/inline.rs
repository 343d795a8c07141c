//! The inline broker: runs handlers in this process, no server needed.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use crate::contract::attempt::{Attempt, Failure, Outcome};
use crate::contract::broker::{Broker, BrokerError, Capabilities, Publication, PublishError, Subscription};
use crate::contract::config::{Config, HealthConfig, PartitioningConfig};
use crate::contract::delivery::{DeliveryHooks, deliver};
use crate::contract::handler::{BoxFuture, HandlerContext, HandlerKind};
use crate::contract::health::{HealthState, SubscriptionHealth};
use crate::contract::message::Envelope;
use crate::contract::policy::{ProcessingContext, SequenceId};
use crate::contract::retry::{Failed, GiveUp, RetryPolicy};
use crate::contract::trace;
use crate::runtime::executor::{KeyedExecutor, Permits};

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
/// waits meanwhile; see [what `max_retries` means](crate::contract::config#retries-what-max_retries--n-means),
/// and `[handlers.NAME]` for one handler's own); a transient failure is
/// retried without using one up, and a handler most of whose keys fail
/// transiently pauses (see [`crate::contract::retry`]). What happens next is what the Redis broker does:
///
/// - a partitioned handler (`sequential_by`) **halts the key**: the message
///   stays the key's head, later messages of the key wait behind it (other
///   keys go on), the halt is logged at error level and listed by
///   [`InlineBroker::halted`], and an operator resolves it with
///   [`InlineBroker::skip`], [`InlineBroker::retry`] or
///   [`InlineBroker::dead_letter`]. `Domain::settle()` does not wait for
///   halted keys. Halts live in memory: they end with the process.
/// - any other handler dead-letters the message (logged at error level,
///   listed by [`InlineBroker::dead_letters`]) and goes on.
///
/// Commands never pass through here; the domain's command bus runs them.
#[derive(Clone)]
pub struct InlineBroker {
    inner: Arc<Inner>,
}

struct Inner {
    executor: KeyedExecutor,
    /// `[server.partitioning]`: the retry defaults.
    partitioning: PartitioningConfig,
    subscriptions: RwLock<Option<Arc<[Subscription]>>>,
    failures: Mutex<FailureLog>,
    halts: Mutex<HashMap<SequenceId, Halt>>,
    dead_letters: Mutex<Vec<InlineDeadLetter>>,
}

/// A halted key: its poison head, and the messages parked behind it.
struct Halt {
    subscription: Subscription,
    key: String,
    head: Arc<Envelope>,
    error: String,
    attempts: u32,
    halted_at: SystemTime,
    parked: VecDeque<Arc<Envelope>>,
    /// A resolution is replaying the parked messages.
    draining: bool,
}

/// A key of a partitioned handler halted on a message that failed every
/// attempt (see [`InlineBroker::halted`]).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InlineHalt {
    /// The handler's name.
    pub handler: &'static str,
    /// The key (the handler's sequence identifier, by default the partition key).
    pub key: String,
    /// The category of the head message.
    pub category: String,
    /// The head message: the one that failed.
    pub head: Envelope,
    /// The last error, with its sources.
    pub error: String,
    /// How many attempts were made.
    pub attempts: u32,
    /// When the key halted.
    pub halted_at: SystemTime,
    /// How many later messages of the key wait behind the head.
    pub waiting: usize,
}

/// A message given up on: failed by a handler without a key, or moved aside
/// from a halted key with [`InlineBroker::dead_letter`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct InlineDeadLetter {
    /// The handler's name.
    pub handler: &'static str,
    /// The message.
    pub message: Envelope,
    /// The last error, with its sources.
    pub error: String,
    /// How many attempts were made.
    pub attempts: u32,
}

/// Why a halt could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The key is not halted for the handler (never was, or already resolved).
    #[error("key `{key}` of handler `{handler}` is not halted")]
    NotHalted {
        /// The handler asked for.
        handler: String,
        /// The key asked for.
        key: String,
    },
}

/// What to do with a halted key's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    Skip,
    Retry,
    DeadLetter,
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
            .field("max_retries", &self.inner.partitioning.max_retries())
            .field("backoff", &self.inner.partitioning.backoff())
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

    /// An inline broker with `config`'s `max_concurrency`, retries, backoff,
    /// timeouts and pausing.
    pub fn with_config(config: &Config) -> Self {
        let partitioning = config.partitioning();
        Self {
            inner: Arc::new(Inner {
                executor: KeyedExecutor::new(partitioning.max_concurrency()),
                partitioning: partitioning.clone(),
                subscriptions: RwLock::new(None),
                failures: Mutex::new(FailureLog::default()),
                halts: Mutex::new(HashMap::new()),
                dead_letters: Mutex::new(Vec::new()),
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

    /// The halted keys, by handler then key.
    pub fn halted(&self) -> Vec<InlineHalt> {
        let halts = self.inner.halts();
        let mut halted: Vec<InlineHalt> = halts
            .values()
            .filter(|halt| !halt.draining)
            .map(|halt| InlineHalt {
                handler: halt.subscription.name(),
                key: halt.key.clone(),
                category: halt.head.category.clone(),
                head: Envelope::clone(&halt.head),
                error: halt.error.clone(),
                attempts: halt.attempts,
                halted_at: halt.halted_at,
                waiting: halt.parked.len(),
            })
            .collect();
        halted.sort_by(|a, b| (a.handler, &a.key).cmp(&(b.handler, &b.key)));
        halted
    }

    /// Every dead-lettered message, oldest first (kept until the process ends).
    pub fn dead_letters(&self) -> Vec<InlineDeadLetter> {
        self.inner.dead_letters().clone()
    }

    /// Drops the head of `handler`'s halted `key` without handling it; the
    /// key resumes with the next message. Returns the dropped message's id.
    pub fn skip(&self, handler: &str, key: &str) -> Result<String, ResolveError> {
        self.resolve(handler, key, Resolution::Skip)
    }

    /// Runs the head of `handler`'s halted `key` again, with a fresh set of
    /// attempts, then the messages behind it. Returns the head's id.
    pub fn retry(&self, handler: &str, key: &str) -> Result<String, ResolveError> {
        self.resolve(handler, key, Resolution::Retry)
    }

    /// Moves the head of `handler`'s halted `key` to the dead letters
    /// ([`InlineBroker::dead_letters`]); the key resumes with the next
    /// message. Returns the head's id.
    pub fn dead_letter(&self, handler: &str, key: &str) -> Result<String, ResolveError> {
        self.resolve(handler, key, Resolution::DeadLetter)
    }

    fn resolve(&self, handler: &str, key: &str, resolution: Resolution) -> Result<String, ResolveError> {
        let sequence = scoped(handler, key);
        let head = {
            let mut halts = self.inner.halts();
            let Some(halt) = halts.get_mut(&sequence).filter(|halt| !halt.draining) else {
                return Err(ResolveError::NotHalted {
                    handler: handler.to_owned(),
                    key: key.to_owned(),
                });
            };
            let head = Arc::clone(&halt.head);
            match resolution {
                Resolution::Skip => {}
                Resolution::Retry => halt.parked.push_front(Arc::clone(&head)),
                Resolution::DeadLetter => self.inner.dead_letters().push(InlineDeadLetter {
                    handler: halt.subscription.name(),
                    message: Envelope::clone(&head),
                    error: halt.error.clone(),
                    attempts: halt.attempts,
                }),
            }
            halt.draining = true;
            head
        };
        tracing::info!(event = crate::contract::log_events::PARTITION_RESUMED, handler, key, message_id = %head.id, ?resolution, "halted key resolved; resuming");
        let inner = Arc::clone(&self.inner);
        let key = sequence.clone();
        // The drain runs in the key's turn: after what is queued for it already.
        drop(
            self.inner
                .executor
                .submit_with_permits(Some(sequence), |permits| inner.drain(key, permits)),
        );
        Ok(head.id.clone())
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
                .filter(|s| s.kind() != HandlerKind::Command && s.handles(envelope));
            for subscription in consumers {
                let sequence = sequence_id(subscription, envelope);
                let inner = Arc::clone(&self.inner);
                let (subscription, envelope, key) =
                    (subscription.clone(), envelope.clone(), sequence.clone());
                // Each attempt takes a permit; the backoff between attempts holds none,
                // while the sequence still waits for the delivery as a whole.
                let delivery = self.inner.executor.submit_with_permits(sequence, |permits| {
                    inner.deliver(subscription, envelope, key, permits)
                });
                // The executor runs the delivery even though its result is not awaited.
                drop(delivery);
            }
        }
        Ok(())
    }
}

/// The sequence id of `envelope` for `subscription`, scoped to the handler.
impl InlineBroker {
    /// The inline broker `broker` is, when it is one: itself, an `Arc` of
    /// one, or an `Arc<dyn Broker>` of one. The domain attaches its
    /// subscriptions to it and waits on it to be idle.
    pub(crate) fn behind(broker: &dyn Any) -> Option<Self> {
        if let Some(inline) = broker.downcast_ref::<Self>() {
            return Some(inline.clone());
        }
        if let Some(inline) = broker.downcast_ref::<Arc<Self>>() {
            return Some(Self::clone(inline));
        }
        if let Some(dynamic) = broker.downcast_ref::<Arc<dyn Broker>>() {
            let inner: &dyn Any = &**dynamic;
            return Self::behind(inner);
        }
        None
    }
}

fn sequence_id(subscription: &Subscription, envelope: &Envelope) -> Option<SequenceId> {
    let context = ProcessingContext::new(subscription.name());
    let id = subscription
        .policy_for(&envelope.category, &envelope.type_name)
        .sequence_identifier(envelope, &context)?;
    Some(scoped(subscription.name(), id.as_str()))
}

/// The executor's sequence id of `handler`'s sequence `key`.
fn scoped(handler: &str, key: &str) -> SequenceId {
    SequenceId::new(format!("{handler}{SCOPE}{key}"))
}

/// Separates the handler from its sequence id in the executor's ids.
const SCOPE: char = '\u{1f}';

impl Inner {
    fn failures(&self) -> MutexGuard<'_, FailureLog> {
        // The log is updated in one step, so a poisoned lock still holds a consistent log.
        self.failures.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn halts(&self) -> MutexGuard<'_, HashMap<SequenceId, Halt>> {
        // Every update completes under the lock, so a poisoned map is consistent.
        self.halts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn dead_letters(&self) -> MutexGuard<'_, Vec<InlineDeadLetter>> {
        self.dead_letters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Handles `envelope` in its sequence's turn: parks it behind the head
    /// when the key is halted, else runs it, halting the key (or
    /// dead-lettering the message) when every attempt fails.
    async fn deliver(
        self: Arc<Self>,
        subscription: Subscription,
        envelope: Envelope,
        sequence: Option<SequenceId>,
        permits: Permits,
    ) {
        let envelope = Arc::new(envelope);
        if let Some(sequence) = &sequence
            && let Some(halt) = self.halts().get_mut(sequence)
        {
            halt.parked.push_back(envelope);
            return;
        }
        let key = sequence
            .as_ref()
            .map_or(envelope.id.as_str(), SequenceId::as_str)
            .to_owned();
        if let Err(give_up) = self.attempts(&subscription, &envelope, &key, &permits).await {
            self.poisoned(subscription, envelope, sequence, give_up);
        }
    }

    /// After a resolution: runs the halted key's parked messages in order,
    /// halting it again on the next poison message.
    async fn drain(self: Arc<Self>, sequence: SequenceId, permits: Permits) {
        loop {
            let (subscription, next) = {
                let mut halts = self.halts();
                let Some(halt) = halts.get_mut(&sequence) else {
                    return;
                };
                match halt.parked.pop_front() {
                    Some(next) => (halt.subscription.clone(), next),
                    None => {
                        halts.remove(&sequence);
                        return;
                    }
                }
            };
            if let Err(give_up) = self
                .attempts(&subscription, &next, sequence.as_str(), &permits)
                .await
            {
                self.poisoned(subscription, next, Some(sequence), give_up);
                return;
            }
        }
    }

    /// A message failed every attempt: a partitioned handler halts its key,
    /// another handler dead-letters the message.
    fn poisoned(
        &self,
        subscription: Subscription,
        envelope: Arc<Envelope>,
        sequence: Option<SequenceId>,
        give_up: GiveUp,
    ) {
        let (attempts, error) = (give_up.attempts(), give_up.reason().to_owned());
        self.record(HandlerFailure {
            handler: subscription.name(),
            message_id: envelope.id.clone(),
            type_name: envelope.type_name.clone(),
            attempts,
            error: error.clone(),
        });
        let Some(sequence) = sequence.filter(|_| subscription.partitioned()) else {
            tracing::error!(event = crate::contract::log_events::MESSAGE_DEAD_LETTERED, handler = subscription.name(), message_id = %envelope.id,
                type_name = %envelope.type_name, attempts, error = %crate::contract::text::log_text(&error),
                "handler failed after all retries; message dead-lettered (InlineBroker::dead_letters)");
            self.dead_letters().push(InlineDeadLetter {
                handler: subscription.name(),
                message: Envelope::clone(&envelope),
                error,
                attempts,
            });
            return;
        };
        let key = sequence
            .as_str()
            .split_once(SCOPE)
            .map_or(sequence.as_str(), |(_, key)| key)
            .to_owned();
        tracing::error!(event = crate::contract::log_events::PARTITION_HALTED, handler = subscription.name(), key = %key, message_id = %envelope.id,
            type_name = %envelope.type_name, attempts, error = %crate::contract::text::log_text(&error),
            "handler failed after all retries; key halted until resolved \
             (InlineBroker::halted, then skip, retry or dead_letter)");
        let mut halts = self.halts();
        let halt = halts.entry(sequence).or_insert_with(|| Halt {
            subscription: subscription.clone(),
            key,
            head: Arc::clone(&envelope),
            error: String::new(),
            attempts: 0,
            halted_at: SystemTime::now(),
            parked: VecDeque::new(),
            draining: false,
        });
        halt.head = envelope;
        halt.error = error;
        halt.attempts = attempts;
        halt.halted_at = SystemTime::now();
        halt.draining = false;
    }

    /// Runs the handler until it succeeds or the retry policy gives up
    /// (every attempt failed, or transient failures lasted too long).
    #[tracing::instrument(skip_all, fields(handler = subscription.name(), message_id = %envelope.id))]
    async fn attempts(
        &self,
        subscription: &Subscription,
        envelope: &Arc<Envelope>,
        key: &str,
        permits: &Permits,
    ) -> Result<(), GiveUp> {
        let policy = subscription.retry_policy(&self.partitioning);
        let mut hooks = Inline {
            subscription,
            envelope,
            permits,
            policy: &policy,
        };
        trace::process(envelope, "inline", subscription.name(), 0)
            .run(deliver(policy.start(key, 0), &mut hooks))
            .await
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

/// The inline broker's part in the [delivery loop](deliver): not
/// cancellable (shutdown waits for every delivery to end); a failure is
/// only logged, the give-up is returned (`Inner::poisoned` acts on it).
struct Inline<'a> {
    subscription: &'a Subscription,
    envelope: &'a Arc<Envelope>,
    permits: &'a Permits,
    policy: &'a RetryPolicy,
}

impl DeliveryHooks for Inline<'_> {
    type Output = Result<(), GiveUp>;

    async fn attempt(&mut self, attempt: u32) -> Result<Result<(), Failure>, Self::Output> {
        // The handler's own slot first: waiting for it holds no process-wide permit.
        let own = self.subscription.settings.acquire().await;
        let permit = self.permits.acquire().await;
        let outcome = run_attempt(self.subscription, self.envelope, attempt, self.policy).await;
        drop((permit, own));
        Ok(outcome)
    }

    fn retrying(&mut self, failed: &Failed, attempt: u32) {
        failed.log(self.subscription.name(), &self.envelope.id, attempt);
    }

    async fn succeeded(&mut self) -> Self::Output {
        Ok(())
    }

    async fn exhausted(&mut self, give_up: GiveUp) -> Self::Output {
        Err(give_up)
    }
}

/// One attempt: a panicking handler counts as a failed attempt instead of
/// ending the delivery.
async fn run_attempt(
    subscription: &Subscription,
    envelope: &Arc<Envelope>,
    attempt: u32,
    policy: &RetryPolicy,
) -> Result<(), Failure> {
    let ctx = HandlerContext::shared(Arc::clone(envelope)).with_attempt(attempt);
    let run = Attempt::new(Arc::clone(&subscription.handler), Arc::clone(envelope), ctx)
        .in_handler(subscription.name())
        .with_timeout(policy.timeout());
    match run.run((), &CancellationToken::new(), Duration::ZERO).await {
        Outcome::Succeeded => Ok(()),
        Outcome::Failed(failure) => Err(failure),
        Outcome::Cancelled(_) => Err(Failure::new("the handler run was cancelled".into())),
    }
}

impl Broker for InlineBroker {
    fn name(&self) -> &str {
        "inline"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ORDERED_IN_PROCESS
    }

    /// In process there is no lag to measure and nothing to reach: a
    /// subscription is `halted` while one of its keys is, else `ok`.
    fn health<'a>(
        &'a self,
        subscriptions: &'a [Subscription],
        _thresholds: &'a HealthConfig,
    ) -> BoxFuture<'a, Vec<SubscriptionHealth>> {
        let halted = self.halted();
        let report = subscriptions
            .iter()
            .map(|subscription| {
                let mut health = SubscriptionHealth::ok(subscription.name());
                if let Some(pause) = subscription.paused() {
                    health.degrade(HealthState::Paused, pause.to_string());
                }
                for halt in halted.iter().filter(|h| h.handler == subscription.name()) {
                    health.degrade(
                        HealthState::Halted,
                        format!(
                            "key `{}` halted on message {} after {} attempts: {}",
                            halt.key, halt.head.id, halt.attempts, halt.error
                        ),
                    );
                }
                health
            })
            .collect();
        Box::pin(async move { report })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inline_broker_is_recognised_behind_its_handles() {
        let inline = InlineBroker::new();
        let same =
            |found: Option<InlineBroker>| found.is_some_and(|found| Arc::ptr_eq(&found.inner, &inline.inner));
        assert!(same(InlineBroker::behind(&inline.clone())));
        assert!(same(InlineBroker::behind(&Arc::new(inline.clone()))));
        let dynamic: Arc<dyn Broker> = Arc::new(inline.clone());
        assert!(same(InlineBroker::behind(&dynamic)));
        let nested: Arc<dyn Broker> = Arc::new(Arc::clone(&dynamic));
        assert!(same(InlineBroker::behind(&nested)));
    }

    #[test]
    fn another_broker_is_not_the_inline_one() {
        #[derive(Debug)]
        struct Elsewhere;
        impl Broker for Elsewhere {
            fn name(&self) -> &str {
                "elsewhere"
            }
            fn capabilities(&self) -> Capabilities {
                Capabilities::default()
            }
            fn publish<'a>(&'a self, _: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
                Box::pin(async { Ok(()) })
            }
            fn run(
                &self,
                _: Arc<[Subscription]>,
                _: CancellationToken,
            ) -> BoxFuture<'static, Result<(), BrokerError>> {
                Box::pin(async { Ok(()) })
            }
        }
        assert!(InlineBroker::behind(&Elsewhere).is_none());
        let dynamic: Arc<dyn Broker> = Arc::new(Elsewhere);
        assert!(InlineBroker::behind(&dynamic).is_none());
    }
}
