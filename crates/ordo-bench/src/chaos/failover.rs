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
    disturbed: bool,
}

/// The failover windows of a run.
#[derive(Debug, Default)]
pub(crate) struct Failovers {
    open: Vec<Window>,
    measured: Vec<Duration>,
    disturbed: u64,
}

/// What the windows measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FailoverStats {
    /// Undisturbed failovers measured.
    pub(crate) measured: u64,
    /// The longest of them.
    pub(crate) max: Option<Duration>,
    /// The median of them.
    pub(crate) median: Option<Duration>,
    /// Failovers another fault overlapped (not in `max`).
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

    /// Opens a window for `key`, owned under `token` until the fault at `since`.
    /// `disturbed` when the fault lands during another (a Redis outage).
    pub(crate) fn open(&mut self, key: &str, token: u64, since: Instant, disturbed: bool) {
        // A key already failing over keeps its earlier window (the second
        // fault disturbs it).
        if self.open.iter().any(|w| w.key == key) {
            return;
        }
        self.open.push(Window {
            key: key.to_owned(),
            token,
            since,
            disturbed,
        });
    }

    /// A handler run of `key` under `token` started, seen at `at`.
    pub(crate) fn on_start(&mut self, key: &str, token: u64, at: Instant) {
        let Some(index) = self.open.iter().position(|w| w.key == key && token > w.token) else {
            return;
        };
        let window = self.open.swap_remove(index);
        if window.disturbed {
            self.disturbed += 1;
        } else {
            self.measured.push(at.saturating_duration_since(window.since));
        }
    }

    /// The figures.
    pub(crate) fn stats(&self) -> FailoverStats {
        let mut sorted = self.measured.clone();
        sorted.sort_unstable();
        FailoverStats {
            measured: sorted.len() as u64,
            max: sorted.last().copied(),
            median: sorted.get(sorted.len().saturating_sub(1) / 2).copied(),
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
        f.open("k1", 10, t0, false);
        f.open("k2", 11, t0, false);
        // The dead owner's own lines under its old token do not close it.
        f.on_start("k1", 10, t0 + 5 * MS);
        f.on_start("k3", 99, t0 + 6 * MS);
        f.on_start("k1", 12, t0 + 2_100 * MS);
        f.on_start("k1", 13, t0 + 2_500 * MS);
        let stats = f.stats();
        assert_eq!(stats.measured, 1);
        assert_eq!(stats.max, Some(2_100 * MS));
        assert_eq!(stats.open, 1, "k2 was never handled again");
    }

    #[test]
    fn disturbed_windows_are_counted_apart() {
        let t0 = Instant::now();
        let mut f = Failovers::default();
        f.open("k1", 1, t0, false);
        f.disturb();
        f.open("k2", 1, t0 + 100 * MS, false);
        f.open("k3", 1, t0 + 100 * MS, true);
        // k1 is already failing over: its first window stays.
        f.open("k1", 5, t0 + 100 * MS, false);
        for key in ["k1", "k2", "k3"] {
            f.on_start(key, 7, t0 + 3_000 * MS);
        }
        let stats = f.stats();
        assert_eq!((stats.measured, stats.disturbed, stats.open), (1, 2, 0));
        assert_eq!(stats.max, Some(2_900 * MS));
        assert_eq!(stats.median, Some(2_900 * MS));
    }

    #[test]
    fn the_median_and_max_of_several() {
        let t0 = Instant::now();
        let mut f = Failovers::default();
        for (i, ms) in [300_u64, 100, 200].into_iter().enumerate() {
            let key = format!("k{i}");
            f.open(&key, 1, t0, false);
            f.on_start(&key, 2, t0 + Duration::from_millis(ms));
        }
        let stats = f.stats();
        assert_eq!(stats.median, Some(200 * MS));
        assert_eq!(stats.max, Some(300 * MS));
        assert_eq!(Failovers::default().stats().max, None);
    }
}
