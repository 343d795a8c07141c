//! Failover times: from the moment an owner dies or stalls to the first
//! handler run of one of its keys under a newer lease.
//!
//! At a kill or a stall the controller opens one window per key the
//! instance owned (its lease, read from Redis just before the fault, or its
//! last `start` lines when Redis cannot answer) with the lease's fencing
//! token. The window closes at the first `start` line of that key whose
//! token is higher, timed when the controller received the line. A window
//! that another fault disturbed (any fault starting while it is open, or a
//! Redis outage) measures the faults' sum, not one failover: it is counted
//! apart and left out of the maximum.

use std::time::{Duration, Instant};

/// One open window.
#[derive(Debug, Clone)]
struct Window {
    key: String,
    token: u64,
    since: Instant,
    cause: String,
    disturbed: bool,
}

/// One failover measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Measured {
    /// The key taken over.
    pub(crate) key: String,
    /// From the fault to the new owner's first `start`.
    pub(crate) took: Duration,
    /// The fault, as given to [`Failovers::open`].
    pub(crate) cause: String,
}

/// The failover windows of a run.
#[derive(Debug, Default)]
pub(crate) struct Failovers {
    open: Vec<Window>,
    measured: Vec<Measured>,
    disturbed: u64,
}

/// What the windows measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FailoverStats {
    /// Undisturbed failovers measured.
    pub(crate) measured: u64,
    /// The longest of them.
    pub(crate) slowest: Option<Measured>,
    /// The median time.
    pub(crate) median: Option<Duration>,
    /// Failovers another fault overlapped (not in `slowest`).
    pub(crate) disturbed: u64,
    /// Windows still open at the end: keys nobody handled again under a
    /// newer lease.
    pub(crate) open: u64,
}

impl Failovers {
    /// Every open window is disturbed from now on: call it when a fault
    /// starts, before opening that fault's windows.
    pub(crate) fn disturb(&mut self) {
        for window in &mut self.open {
            window.disturbed = true;
        }
    }

    /// Opens a window for `key`, owned under `token` until the fault
    /// `cause` at `since`.
    pub(crate) fn open(&mut self, key: &str, token: u64, since: Instant, cause: &str) {
        // A key already failing over keeps its earlier window (the second
        // fault disturbed it).
        if self.open.iter().any(|w| w.key == key) {
            return;
        }
        self.open.push(Window {
            key: key.to_owned(),
            token,
            since,
            cause: cause.to_owned(),
            disturbed: false,
        });
    }

    /// A handler run of `key` under `token` started, seen at `at`; returns
    /// the failover it ends, if it ends an undisturbed one.
    pub(crate) fn on_start(&mut self, key: &str, token: u64, at: Instant) -> Option<&Measured> {
        let index = self.open.iter().position(|w| w.key == key && token > w.token)?;
        let window = self.open.swap_remove(index);
        if window.disturbed {
            self.disturbed += 1;
            return None;
        }
        self.measured.push(Measured {
            key: window.key,
            took: at.saturating_duration_since(window.since),
            cause: window.cause,
        });
        self.measured.last()
    }

    /// The figures.
    pub(crate) fn stats(&self) -> FailoverStats {
        let mut times: Vec<Duration> = self.measured.iter().map(|m| m.took).collect();
        times.sort_unstable();
        FailoverStats {
            measured: times.len() as u64,
            slowest: self.measured.iter().max_by_key(|m| m.took).cloned(),
            median: times.get(times.len().saturating_sub(1) / 2).copied(),
            disturbed: self.disturbed,
            open: self.open.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_window_closes_at_the_first_start_under_a_newer_token() {
        let t0 = Instant::now();
        let mut f = Failovers::default();
        f.open("k1", 10, t0, "kill w1");
        f.open("k2", 11, t0, "kill w1");
        // The dead owner's own lines under its old token do not close it.
        f.on_start("k1", 10, t0 + 5 * MS);
        f.on_start("k3", 99, t0 + 6 * MS);
        let measured = f.on_start("k1", 12, t0 + 2_100 * MS).cloned();
        assert_eq!(
            measured,
            Some(Measured {
                key: "k1".to_owned(),
                took: 2_100 * MS,
                cause: "kill w1".to_owned()
            })
        );
        assert_eq!(f.on_start("k1", 13, t0 + 2_500 * MS), None);
        let stats = f.stats();
        assert_eq!(stats.measured, 1);
        assert_eq!(stats.slowest, measured);
        assert_eq!(stats.open, 1, "k2 was never handled again");
    }

    #[test]
    fn disturbed_windows_are_counted_apart() {
        let t0 = Instant::now();
        let mut f = Failovers::default();
        f.open("k1", 1, t0, "stop w1");
        f.disturb();
        f.open("k2", 1, t0 + 100 * MS, "kill w2");
        // k1 is already failing over: its first window stays.
        f.open("k1", 5, t0 + 100 * MS, "kill w2");
        for key in ["k1", "k2"] {
            f.on_start(key, 7, t0 + 3_000 * MS);
        }
        let stats = f.stats();
        assert_eq!((stats.measured, stats.disturbed, stats.open), (1, 1, 0));
        assert_eq!(
            stats.slowest.map(|m| (m.key, m.took)),
            Some(("k2".to_owned(), 2_900 * MS))
        );
        assert_eq!(stats.median, Some(2_900 * MS));
    }

    #[test]
    fn the_median_and_max_of_several() {
        let t0 = Instant::now();
        let mut f = Failovers::default();
        for (i, ms) in [300_u64, 100, 200].into_iter().enumerate() {
            let key = format!("k{i}");
            f.open(&key, 1, t0, "kill w1");
            f.on_start(&key, 2, t0 + Duration::from_millis(ms));
        }
        let stats = f.stats();
        assert_eq!(stats.median, Some(200 * MS));
        assert_eq!(stats.slowest.map(|m| m.took), Some(300 * MS));
        assert_eq!(Failovers::default().stats().slowest, None);
    }
}
