//! The delivery loop every broker runs on a message: attempt, retry with
//! backoff, stop when cancelled, give up — with hooks the broker fills.
//!
//! [`deliver`] drives the [`Retries`] of one message (what follows a failed
//! attempt is [`crate::contract::retry`]'s decision) and asks its
//! [`DeliveryHooks`] for what only the broker knows:
//!
//! - [`attempt`](DeliveryHooks::attempt): run the handler once (with its
//!   permits, through [`Attempt`](crate::contract::attempt::Attempt));
//! - [`failed`](DeliveryHooks::failed): a failed attempt was judged
//!   (metrics, Redis records a counted failure with the pending entry);
//! - [`retrying`](DeliveryHooks::retrying): it will be retried (the log line);
//! - [`before_retry`](DeliveryHooks::before_retry): the backoff is over
//!   (Redis confirms its lease);
//! - [`succeeded`](DeliveryHooks::succeeded): acknowledge;
//! - [`exhausted`](DeliveryHooks::exhausted): the retry policy gave up
//!   (halt the key, park it, or dead-letter the message);
//! - [`cancelled`](DeliveryHooks::cancelled): resolves when the delivery
//!   must stop while it waits (for admission or for the backoff).
//!
//! Each hook that may end the delivery early returns `Err` with the
//! delivery's output.
//!
//! ```
//! # async fn run(policy: ordo_core::contract::retry::RetryPolicy) {
//! use ordo_core::contract::attempt::Failure;
//! use ordo_core::contract::delivery::{DeliveryHooks, deliver};
//! use ordo_core::contract::retry::{Failed, GiveUp};
//!
//! struct Once;
//!
//! impl DeliveryHooks for Once {
//!     type Output = Result<(), GiveUp>;
//!
//!     async fn attempt(&mut self, attempt: u32) -> Result<Result<(), Failure>, Self::Output> {
//!         Ok(Err(Failure::new(format!("attempt {attempt} failed").into())))
//!     }
//!
//!     fn retrying(&mut self, failed: &Failed, attempt: u32) {
//!         failed.log("handler", "m-1", attempt);
//!     }
//!
//!     async fn succeeded(&mut self) -> Self::Output {
//!         Ok(())
//!     }
//!
//!     async fn exhausted(&mut self, give_up: GiveUp) -> Self::Output {
//!         Err(give_up)
//!     }
//! }
//!
//! let result = deliver(policy.start("c-1", 0), &mut Once).await;
//! # let _ = result;
//! # }
//! ```

use std::future::Future;

use crate::contract::attempt::Failure;
use crate::contract::retry::{Failed, GiveUp, Next, Retries};
use crate::contract::trace;

/// What a broker does at each step of [`deliver`].
pub trait DeliveryHooks: Send {
    /// What a delivery comes to (returned by [`deliver`]).
    type Output: Send;

    /// Runs the handler once, as attempt number `attempt` (a transient
    /// retry repeats the number). `Err` ends the delivery without judging
    /// the run (the run must not go on here: a lease was lost, ...).
    fn attempt(
        &mut self,
        attempt: u32,
    ) -> impl Future<Output = Result<Result<(), Failure>, Self::Output>> + Send;

    /// Attempt number `attempt` failed, and `retries` judged it `failed`
    /// (before deciding what comes next). A broker that counts attempts
    /// elsewhere records it and tells `retries`
    /// ([`Retries::counted_elsewhere`]). `Err` ends the delivery.
    fn failed(
        &mut self,
        failed: &Failed,
        attempt: u32,
        retries: &mut Retries<'_>,
    ) -> impl Future<Output = Result<(), Self::Output>> + Send {
        let _ = (failed, attempt, retries);
        std::future::ready(Ok(()))
    }

    /// The failed attempt number `attempt` will be retried, after the backoff.
    fn retrying(&mut self, failed: &Failed, attempt: u32) {
        let _ = (failed, attempt);
    }

    /// The backoff is over; the next attempt starts unless this returns
    /// `Err`, which ends the delivery.
    fn before_retry(&mut self) -> impl Future<Output = Result<(), Self::Output>> + Send {
        std::future::ready(Ok(()))
    }

    /// The attempt succeeded (the retry policy was told).
    fn succeeded(&mut self) -> impl Future<Output = Self::Output> + Send;

    /// The retry policy gave up on the message.
    fn exhausted(&mut self, give_up: GiveUp) -> impl Future<Output = Self::Output> + Send;

    /// Resolves, with the delivery's output, when the delivery must stop
    /// while it waits to be admitted or waits out a backoff (never, by
    /// default).
    fn cancelled(&self) -> impl Future<Output = Self::Output> + Send {
        std::future::pending()
    }
}

/// Delivers one message with `retries` (see [`RetryPolicy::start`](crate::contract::retry::RetryPolicy::start)):
/// attempts until one succeeds, the retry policy gives up, or a hook ends it.
pub async fn deliver<H: DeliveryHooks>(mut retries: Retries<'_>, hooks: &mut H) -> H::Output {
    loop {
        // A paused handler starts nothing but its probe.
        let admitted = tokio::select! {
            admitted = retries.admit() => admitted,
            stopped = hooks.cancelled() => return stopped,
        };
        if let Err(give_up) = admitted {
            trace::failed(give_up.reason());
            return hooks.exhausted(give_up).await;
        }
        let attempt = retries.attempt();
        let attempted = trace::attempt(attempt);
        let failure = match hooks.attempt(attempt).await {
            Ok(Ok(())) => {
                attempted.ended(None);
                retries.succeeded();
                return hooks.succeeded().await;
            }
            Ok(Err(failure)) => {
                attempted.ended(Some(&failure));
                failure
            }
            Err(stopped) => return stopped,
        };
        let failed = retries.failed(&failure);
        if let Err(stopped) = hooks.failed(&failed, attempt, &mut retries).await {
            return stopped;
        }
        match retries.next() {
            Next::Retry { delay } => {
                hooks.retrying(&failed, attempt);
                tokio::select! {
                    () = retries.wait(delay) => {}
                    stopped = hooks.cancelled() => return stopped,
                }
                if let Err(stopped) = hooks.before_retry().await {
                    return stopped;
                }
            }
            Next::GiveUp(give_up) => {
                trace::failed(give_up.reason());
                return hooks.exhausted(give_up).await;
            }
        }
    }
}
