//! Polling a condition with a deadline: what tests do instead of sleeping.

use std::future::Future;
use std::time::{Duration, Instant};

use crate::error::{ConditionError, Result, TestkitError};

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

/// Awaits `condition` every 20 ms until it returns `Ok(true)`, or fails
/// after `deadline` with [`TestkitError::Timeout`] naming `what`. A
/// condition that fails stops the wait with [`TestkitError::Condition`].
///
/// The async counterpart of [`wait_until`], for conditions that query a
/// server (a Redis stream's length, a table's rows) and for async tests,
/// where blocking the thread would stop the tasks the test waits on. The
/// condition is checked once more at the deadline.
///
/// ```
/// use std::time::Duration;
///
/// use ordo_testkit::eventually;
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let mut polls = 0;
/// eventually(Duration::from_secs(1), "the third poll", || {
///     polls += 1;
///     let done = polls >= 3;
///     async move { Ok(done) }
/// })
/// .await?;
///
/// let error = eventually(Duration::from_millis(30), "pigs to fly", || async { Ok(false) })
///     .await
///     .unwrap_err();
/// assert!(error.to_string().contains("waiting for pigs to fly"));
///
/// let error = eventually(Duration::from_secs(1), "a parse", || async { Ok("x".parse::<u8>()? > 0) })
///     .await
///     .unwrap_err();
/// assert!(error.to_string().contains("checking for a parse failed"));
/// # Ok::<(), ordo_testkit::TestkitError>(())
/// # }).unwrap();
/// ```
pub async fn eventually<F, Fut>(deadline: Duration, what: &str, mut condition: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, ConditionError>>,
{
    let started = Instant::now();
    loop {
        match condition().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(source) => {
                return Err(TestkitError::Condition {
                    what: what.to_owned(),
                    source,
                });
            }
        }
        let waited = started.elapsed();
        if waited >= deadline {
            return Err(TestkitError::Timeout {
                what: what.to_owned(),
                waited,
            });
        }
        tokio::time::sleep(ASYNC_POLL_INTERVAL.min(deadline - waited)).await;
    }
}

/// How often [`eventually`] re-checks: its conditions are round trips to a
/// server, so less often than [`wait_until`]'s.
const ASYNC_POLL_INTERVAL: Duration = Duration::from_millis(20);
