//! Capped, jittered exponential backoff between retries.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use crate::contract::error::BackoffError;

/// Delays between retries: exponential from `initial`, capped at `max`, with
/// "equal jitter" (each delay is uniform in the upper half of its step).
///
/// The floor of half a step keeps a retrying loop from hammering a failing
/// dependency; the random upper half keeps many instances that failed at
/// the same moment from retrying in lockstep.
///
/// ```
/// use std::time::Duration;
/// use ordo_core::contract::backoff::Backoff;
///
/// let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5)).unwrap();
/// assert_eq!(backoff.ceiling(1), Duration::from_millis(100));
/// assert_eq!(backoff.ceiling(3), Duration::from_millis(400));
/// assert_eq!(backoff.ceiling(30), Duration::from_secs(5));
/// let delay = backoff.delay(3);
/// assert!(delay >= Duration::from_millis(200) && delay <= Duration::from_millis(400));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff starting at `initial` and never exceeding `max`.
    pub fn new(initial: Duration, max: Duration) -> Result<Self, BackoffError> {
        if initial.is_zero() {
            return Err(BackoffError::ZeroInitial);
        }
        if max < initial {
            return Err(BackoffError::MaxBelowInitial { initial, max });
        }
        Ok(Self { initial, max })
    }

    /// The first step.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The cap.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The un-jittered step before retry number `attempt` (1 for the first
    /// retry; 0 is treated as 1): `initial * 2^(attempt - 1)`, capped.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The jittered delay before retry number `attempt`: uniform in
    /// `[ceiling / 2, ceiling]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let floor = ceiling / 2;
        let span = (ceiling - floor).as_nanos();
        let offset = u128::from(random_u64()) % (span + 1);
        // `offset <= span`, and `span` fits in u64 for any cap under 584 years.
        floor + Duration::from_nanos(u64::try_from(offset).unwrap_or(u64::MAX))
    }

    /// Sleeps for [`Backoff::delay`]`(attempt)`.
    pub async fn sleep(&self, attempt: u32) {
        tokio::time::sleep(self.delay(attempt)).await;
    }
}

/// A random number good enough for jitter, without a `rand` dependency:
/// every `RandomState` gets fresh SipHash keys.
fn random_u64() -> u64 {
    RandomState::new().hash_one(0u8)
}
