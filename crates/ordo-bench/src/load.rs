//! [`OfferedLoad`]: send events at a fixed rate, bounded in count and time.
//!
//! Event `n` is due at `start + n / rate`; the ticker sleeps until it is due,
//! then awaits `send`. When sending falls behind, the next events go out at
//! once until the schedule is caught up, so the offered rate holds on
//! average; [`LoadOutcome::max_lag`] says how far behind it ever was, which
//! is how a reader knows the load was really offered.

use std::future::Future;
use std::num::NonZeroUsize;
use std::time::Duration;

use anyhow::{Result, ensure};
use tokio::time::Instant;

use crate::workload::BenchEvent;

/// A fixed offered load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OfferedLoad {
    /// Events per second.
    pub rate_per_s: f64,
    /// Keys, taken round-robin.
    pub keys: NonZeroUsize,
    /// Stop after this many events...
    pub max_events: u64,
    /// ...or once the next event would be due after this long, whichever comes first.
    pub max_duration: Duration,
}

/// One event of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// The event's number in the run, from 0.
    pub seq: u64,
    /// When it was due.
    pub due: Instant,
    keys: NonZeroUsize,
}

impl Tick {
    /// The event to send (its key and its number within the key).
    pub fn event(&self) -> BenchEvent {
        BenchEvent::nth(self.seq, self.keys.get())
    }
}

/// What a run of the ticker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOutcome {
    /// Events sent.
    pub sent: u64,
    /// From the first event's due time to the end of the last send.
    pub elapsed: Duration,
    /// The most any event was sent after it was due.
    pub max_lag: Duration,
}

impl LoadOutcome {
    /// The rate actually achieved.
    pub fn achieved_per_s(&self) -> f64 {
        crate::report::rate(self.sent, self.elapsed)
    }
}

impl OfferedLoad {
    /// Runs the schedule, awaiting `send` for each event in turn; the first
    /// error stops the run and is returned.
    pub async fn run<F, Fut>(&self, mut send: F) -> Result<LoadOutcome>
    where
        F: FnMut(Tick) -> Fut,
        Fut: Future<Output = Result<()>>,
    {
        ensure!(
            self.rate_per_s.is_finite() && self.rate_per_s > 0.0,
            "the offered load must be a positive rate, not {}",
            self.rate_per_s
        );
        let start = Instant::now();
        let mut max_lag = Duration::ZERO;
        let mut seq = 0;
        while seq < self.max_events {
            let offset = Duration::from_secs_f64(seq as f64 / self.rate_per_s);
            if offset > self.max_duration {
                break;
            }
            let due = start + offset;
            tokio::time::sleep_until(due).await;
            max_lag = max_lag.max(Instant::now().saturating_duration_since(due));
            send(Tick {
                seq,
                due,
                keys: self.keys,
            })
            .await?;
            seq += 1;
        }
        Ok(LoadOutcome {
            sent: seq,
            elapsed: start.elapsed(),
            max_lag,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(rate_per_s: f64, max_events: u64, max_duration: Duration) -> OfferedLoad {
        OfferedLoad {
            rate_per_s,
            keys: NonZeroUsize::new(4).unwrap(),
            max_events,
            max_duration,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn sends_on_schedule_until_the_count_is_reached() {
        let start = Instant::now();
        let mut sent = Vec::new();
        let outcome = load(100.0, 6, Duration::from_secs(60))
            .run(|tick| {
                sent.push((tick.seq, tick.event().key, tick.event().seq, tick.due - start));
                async { Ok(()) }
            })
            .await
            .unwrap();
        assert_eq!(outcome.sent, 6);
        assert_eq!(outcome.elapsed, Duration::from_millis(50));
        assert_eq!(outcome.max_lag, Duration::ZERO);
        let ms = Duration::from_millis;
        assert_eq!(
            sent,
            [
                (0, "k0".to_owned(), 0, ms(0)),
                (1, "k1".to_owned(), 0, ms(10)),
                (2, "k2".to_owned(), 0, ms(20)),
                (3, "k3".to_owned(), 0, ms(30)),
                (4, "k0".to_owned(), 1, ms(40)),
                (5, "k1".to_owned(), 1, ms(50)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stops_at_the_time_bound() {
        let outcome = load(10.0, u64::MAX, Duration::from_secs(1))
            .run(|_| async { Ok(()) })
            .await
            .unwrap();
        // Due at 0.0, 0.1, ..., 1.0 s.
        assert_eq!(outcome.sent, 11);
        assert_eq!(outcome.achieved_per_s(), 11.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_send_is_caught_up_and_reported_as_lag() {
        let outcome = load(100.0, 5, Duration::from_secs(60))
            .run(|tick| async move {
                if tick.seq == 0 {
                    tokio::time::sleep(Duration::from_millis(35)).await;
                }
                Ok(())
            })
            .await
            .unwrap();
        // Events 1..=3 were due during the slow send and go out at 35 ms; event 4 at 40 ms.
        assert_eq!(outcome.max_lag, Duration::from_millis(25));
        assert_eq!(outcome.elapsed, Duration::from_millis(40));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_error_stops_the_run() {
        let error = load(100.0, 10, Duration::from_secs(60))
            .run(|tick| async move {
                ensure!(tick.seq < 2, "send {} failed", tick.seq);
                Ok(())
            })
            .await
            .unwrap_err();
        assert_eq!(error.to_string(), "send 2 failed");
        let error = load(0.0, 10, Duration::from_secs(1))
            .run(|_| async { Ok(()) })
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "the offered load must be a positive rate, not 0"
        );
    }
}
