//! What happens after a handler attempt fails: the one decision every
//! broker's delivery loop asks for (the inline broker, the Redis per-key
//! worker and hashed partitions, the Redis plain consumer).
//!
//! A failed attempt is either
//!
//! - **counted**: an ordinary failure (an error, a panic, a timeout unless
//!   `timeout_is_transient`), which uses up one of the message's
//!   `max_retries + 1` attempts (see [what `max_retries` means](crate::contract::config#retries-what-max_retries--n-means));
//!   after the last one the key halts (or the message is dead-lettered);
//! - **transient**: the message is fine, a dependency is not
//!   ([`is_transient`]: the [`Transient`] marker, a connection-class I/O
//!   error). It is retried with the same capped, jittered backoff, growing
//!   with each consecutive transient failure, **without** using up an
//!   attempt; the key waits in order and the broker keeps its lease. Only
//!   an outage longer than `max_transient_ms` (default one hour; 0: no
//!   limit) gives up, with a reason that says so.
//!
//! Each handler also has a circuit breaker in each process
//! ([`breaker`]): when most of its keys fail transiently it stops starting
//! messages and probes with one at a time, resuming by itself when a probe
//! gets an answer.
//!
//! A delivery loop asks [`RetryPolicy::start`] for a message's
//! [`Retries`], then around each attempt (every broker runs this loop as
//! [`deliver`](crate::contract::delivery::deliver), filling in its hooks):
//!
//! ```
//! # async fn deliver(policy: ordo_core::contract::retry::RetryPolicy, run: impl Fn(u32) -> ordo_core::contract::attempt::Outcome) {
//! use ordo_core::contract::attempt::Outcome;
//! use ordo_core::contract::retry::Next;
//!
//! let mut retries = policy.start("c-1", 0);
//! loop {
//!     if let Err(give_up) = retries.admit().await {
//!         return eprintln!("halted: {}", give_up.reason()); // paused past max_transient_ms
//!     }
//!     match run(retries.attempt()) {
//!         Outcome::Succeeded => return retries.succeeded(),
//!         Outcome::Failed(failure) => {
//!             let failed = retries.failed(&failure);
//!             // A broker that counts attempts elsewhere (Redis) records a
//!             // counted failure there: `retries.counted_elsewhere(n)`.
//!             match retries.next() {
//!                 Next::Retry { delay } => retries.wait(delay).await,
//!                 Next::GiveUp(give_up) => return eprintln!("halted: {}", give_up.reason()),
//!             }
//!             # let _ = failed;
//!         }
//!         _ => return, // cancelled
//!     }
//! }
//! # }
//! ```

pub mod breaker;
mod transient;

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub use breaker::{Breaker, PauseStatus};
pub use transient::{Transient, is_transient, transient};

use crate::contract::attempt::Failure;
use crate::contract::backoff::Backoff;
use crate::contract::config::PartitioningConfig;
use crate::contract::handler::HandlerError;
use breaker::{Admission, Observed, Probe};

/// One handler's retry settings, its `[handlers.NAME]` overrides applied
/// over `[server.partitioning]`, and its circuit breaker.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    max_retries: u32,
    backoff: Backoff,
    max_transient: Option<Duration>,
    timeout: Option<Duration>,
    timeout_is_transient: bool,
    breaker: Arc<Breaker>,
}

impl RetryPolicy {
    /// A policy of these settings (see [`Subscription::retry_policy`](crate::contract::broker::Subscription::retry_policy)
    /// for a handler's).
    pub fn new(defaults: &PartitioningConfig, breaker: Arc<Breaker>) -> Self {
        Self {
            max_retries: defaults.max_retries(),
            backoff: defaults.backoff(),
            max_transient: defaults.max_transient(),
            timeout: defaults.handler_timeout(),
            timeout_is_transient: defaults.timeout_is_transient(),
            breaker,
        }
    }

    /// `self` with the handler's own `max_retries`.
    #[must_use]
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// `self` with the handler's own backoff.
    #[must_use]
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// `self` with the handler's own outage limit (`None`: none).
    #[must_use]
    pub fn with_max_transient(mut self, max_transient: Option<Duration>) -> Self {
        self.max_transient = max_transient;
        self
    }

    /// `self` with the handler's own timeout (`None`: none).
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<Duration>, is_transient: bool) -> Self {
        self.timeout = timeout;
        self.timeout_is_transient = is_transient;
        self
    }

    /// Retries after the first failed attempt (`max_retries`).
    pub fn max_retries(&self) -> u32 {
        self.max_retries
    }

    /// The backoff between attempts.
    pub fn backoff(&self) -> Backoff {
        self.backoff
    }

    /// How long a message may fail transiently before it gives up
    /// (`max_transient_ms`; `None`: for ever).
    pub fn max_transient(&self) -> Option<Duration> {
        self.max_transient
    }

    /// How long one attempt may run before it is cancelled (`None`: no limit).
    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether a timed-out attempt is transient rather than counted.
    pub fn timeout_is_transient(&self) -> bool {
        self.timeout_is_transient
    }

    /// The handler's circuit breaker in this process.
    pub fn breaker(&self) -> &Arc<Breaker> {
        &self.breaker
    }

    /// The retries of one message of `key` (its sequence, or for a message
    /// without one its id: the breaker counts keys), with `failed_before`
    /// counted failures already on record (a previous owner's).
    pub fn start(&self, key: &str, failed_before: u32) -> Retries<'_> {
        Retries {
            policy: self,
            key: BuildHasherDefault::<DefaultHasher>::default().hash_one(key),
            failed: failed_before,
            streak: 0,
            outage_since: None,
            last: None,
            probe: None,
        }
    }

    /// Whether `failure` is transient under this policy.
    pub fn is_transient(&self, failure: &Failure) -> bool {
        if failure.timed_out() {
            self.timeout_is_transient
        } else {
            !failure.panicked() && is_transient(&**failure.error())
        }
    }
}

/// The attempts of one message, as they go (see the [module](self) example).
#[derive(Debug)]
pub struct Retries<'p> {
    policy: &'p RetryPolicy,
    key: u64,
    /// Counted failures, including those on record before.
    failed: u32,
    /// Consecutive transient failures.
    streak: u32,
    /// When the current run of transient failures began.
    outage_since: Option<Instant>,
    /// The last failure.
    last: Option<Failed>,
    probe: Option<Probe>,
}

/// A failed attempt, as [`Retries::failed`] judged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    transient: bool,
    timed_out: bool,
    text: String,
}

impl Failed {
    /// Whether it was transient (retried without using up an attempt).
    pub fn transient(&self) -> bool {
        self.transient
    }

    /// Whether it counts as one of the message's attempts (the opposite):
    /// a broker keeping the count (Redis) records it.
    pub fn counted(&self) -> bool {
        !self.transient
    }

    /// Whether the attempt ran past the handler's timeout.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }

    /// The error and its sources, on one line.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Logs the failed attempt number `attempt` of message `message_id`,
    /// to be retried, with the stable event of its kind
    /// ([`HANDLER_FAILED`](crate::contract::log_events::HANDLER_FAILED),
    /// [`HANDLER_TRANSIENT_FAILURE`](crate::contract::log_events::HANDLER_TRANSIENT_FAILURE)
    /// or [`HANDLER_TIMED_OUT`](crate::contract::log_events::HANDLER_TIMED_OUT)):
    /// every broker logs them alike.
    pub fn log(&self, handler: &str, message_id: &str, attempt: u32) {
        let error = crate::contract::text::log_text(&self.text);
        if self.timed_out {
            tracing::warn!(event = crate::contract::log_events::HANDLER_TIMED_OUT, handler, message_id, attempt,
                transient = self.transient, error = %error, "handler attempt timed out and was cancelled; retrying");
        } else if self.transient {
            tracing::warn!(event = crate::contract::log_events::HANDLER_TRANSIENT_FAILURE, handler, message_id, attempt,
                error = %error, "handler failed transiently (a dependency is down); retrying without using up an attempt");
        } else {
            tracing::warn!(event = crate::contract::log_events::HANDLER_FAILED, handler, message_id, attempt,
                error = %error, "handler failed; retrying");
        }
    }
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Wait `delay` (see [`Retries::wait`]), then attempt again.
    Retry {
        /// The backoff.
        delay: Duration,
    },
    /// Stop: halt the key, or dead-letter the message.
    GiveUp(GiveUp),
}

/// Why a message is given up on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GiveUp {
    attempts: u32,
    reason: String,
    outage: bool,
}

impl GiveUp {
    /// How many attempts were made: counted ones, and transient ones since
    /// the last counted failure.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Why, on one line: the last error, preceded for an outage by how long
    /// it lasted and the limit.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// Whether transient failures lasted past `max_transient_ms` (rather
    /// than every attempt failing).
    pub fn outage(&self) -> bool {
        self.outage
    }

    /// The reason, as a handler error.
    pub fn into_error(self) -> HandlerError {
        self.reason.into()
    }
}

impl Retries<'_> {
    /// The number of the next attempt, for `HandlerContext::attempt`:
    /// counted failures so far plus one (a transient retry repeats it).
    pub fn attempt(&self) -> u32 {
        self.failed.saturating_add(1)
    }

    /// Counted failures so far.
    pub fn failures(&self) -> u32 {
        self.failed
    }

    /// Whether the message has no attempt left (failures on record before
    /// it started may have used them up).
    pub fn exhausted(&self) -> bool {
        self.failed > self.policy.max_retries
    }

    /// Waits until the attempt may start: at once, unless the handler is
    /// paused (see [`breaker`]); then until this attempt is the probe, or
    /// the handler resumes. `Err` when this message's outage passed
    /// `max_transient_ms` meanwhile.
    pub async fn admit(&mut self) -> Result<(), GiveUp> {
        let deadline = self
            .outage_since
            .zip(self.policy.max_transient)
            .map(|(since, limit)| since + limit);
        match self.policy.breaker.admit(deadline).await {
            Admission::Go(probe) => {
                self.probe = probe;
                Ok(())
            }
            Admission::Expired => Err(self.outage_over()),
        }
    }

    /// The attempt succeeded.
    pub fn succeeded(&mut self) {
        self.policy
            .breaker
            .record(self.key, Observed::Succeeded, self.probe.take(), None);
    }

    /// The attempt failed with `failure`: judges it (transient or counted),
    /// counts it, and returns the judgement.
    pub fn failed(&mut self, failure: &Failure) -> Failed {
        let failed = Failed {
            transient: self.policy.is_transient(failure),
            timed_out: failure.timed_out(),
            // Stored (halts, parked keys, dead letters) and logged capped.
            text: crate::contract::text::cap_error(failure.text()),
        };
        let observed = if failed.transient {
            self.streak = self.streak.saturating_add(1);
            self.outage_since.get_or_insert_with(Instant::now);
            Observed::Transient
        } else {
            self.failed = self.failed.saturating_add(1);
            self.streak = 0;
            self.outage_since = None;
            Observed::Failed
        };
        self.policy
            .breaker
            .record(self.key, observed, self.probe.take(), Some(&failed.text));
        self.last = Some(failed.clone());
        failed
    }

    /// The counted failures on record elsewhere (Redis counts them with the
    /// pending entry), when more than counted here.
    pub fn counted_elsewhere(&mut self, failed: u32) {
        self.failed = self.failed.max(failed);
    }

    /// What to do after the last failure.
    pub fn next(&self) -> Next {
        let Some(last) = &self.last else {
            return Next::Retry {
                delay: Duration::ZERO,
            };
        };
        if last.transient {
            let since = self.outage_since.unwrap_or_else(Instant::now);
            if self
                .policy
                .max_transient
                .is_some_and(|limit| since.elapsed() >= limit)
            {
                return Next::GiveUp(self.outage_over());
            }
            return Next::Retry {
                delay: self.policy.backoff.delay(self.streak),
            };
        }
        if self.exhausted() {
            return Next::GiveUp(GiveUp {
                attempts: self.failed,
                reason: last.text.clone(),
                outage: false,
            });
        }
        Next::Retry {
            delay: self.policy.backoff.delay(self.failed),
        }
    }

    /// Waits `delay` before the next attempt; after a transient failure the
    /// wait ends early when the handler resumes from a pause (a probe got
    /// an answer: the dependency is back).
    pub async fn wait(&self, delay: Duration) {
        let transient = self.last.as_ref().is_some_and(|last| last.transient);
        let breaker = &self.policy.breaker;
        if transient && breaker.status().is_some() {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = breaker.resumed() => {}
            }
        } else {
            tokio::time::sleep(delay).await;
        }
    }

    fn outage_over(&self) -> GiveUp {
        let lasted = self.outage_since.map(|since| since.elapsed()).unwrap_or_default();
        let limit = self.policy.max_transient.unwrap_or_default();
        let last = self.last.as_ref().map_or("unknown", |last| last.text.as_str());
        GiveUp {
            attempts: self.failed.saturating_add(self.streak),
            reason: format!(
                "transient failures for {} s, past max_transient_ms = {} ({} transient attempts); \
                 the dependency may still be down; last error: {last}",
                lasted.as_secs(),
                limit.as_millis(),
                self.streak
            ),
            outage: true,
        }
    }
}

#[cfg(test)]
mod tests;
