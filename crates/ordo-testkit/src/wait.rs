//! Polling a condition with a deadline: what tests do instead of sleeping.

use std::time::{Duration, Instant};

use crate::error::{Result, TestkitError};

/// How often conditions are re-checked.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Polls `condition` every 10 ms until it returns `true`, or fails after `deadline`.
///
/// The condition is checked once more at the deadline, so a condition that is
/// already true never fails however short the deadline. The error names `what`,
/// e.g. `"worker 2 to own a partition"`, so a failing test says what never happened.
///
/// This blocks the calling thread. In an async test on a current-thread runtime
/// the condition must not depend on tasks of that runtime making progress; use
/// an async poll loop (`tokio::time::sleep`) there instead.
///
/// ```
/// use std::time::{Duration, Instant};
///
/// let start = Instant::now();
/// ordo_testkit::wait_until(Duration::from_secs(1), "50 ms to pass", || {
///     start.elapsed() >= Duration::from_millis(50)
/// })?;
///
/// let error = ordo_testkit::wait_until(Duration::from_millis(30), "pigs to fly", || false).unwrap_err();
/// assert!(error.to_string().contains("waiting for pigs to fly"));
/// # Ok::<(), ordo_testkit::TestkitError>(())
/// ```
pub fn wait_until(deadline: Duration, what: &str, mut condition: impl FnMut() -> bool) -> Result<()> {
    let started = Instant::now();
    loop {
        if condition() {
            return Ok(());
        }
        let waited = started.elapsed();
        if waited >= deadline {
            return Err(TestkitError::Timeout {
                what: what.to_owned(),
                waited,
            });
        }
        std::thread::sleep(POLL_INTERVAL.min(deadline - waited));
    }
}
