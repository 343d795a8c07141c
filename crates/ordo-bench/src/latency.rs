//! [`LatencyRecorder`]: durations in, nearest-rank percentiles out.
//!
//! Every sample is kept (a `Vec<Duration>` is 16 bytes a sample: a million
//! samples is 16 MB), so percentiles are exact rather than bucketed.

use std::time::Duration;

use crate::report::Report;

/// Recorded durations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyRecorder {
    samples: Vec<Duration>,
}

impl LatencyRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty recorder with room for `capacity` samples.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            samples: Vec::with_capacity(capacity),
        }
    }

    /// Records one duration.
    pub fn record(&mut self, sample: Duration) {
        self.samples.push(sample);
    }

    /// Adds the samples of `other` (e.g. one recorder per task, merged at the end).
    pub fn merge(&mut self, other: LatencyRecorder) {
        self.samples.extend(other.samples);
    }

    /// How many samples were recorded.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// p50, p99 and max of the samples; `None` when there are none.
    pub fn summary(&mut self) -> Option<LatencySummary> {
        self.samples.sort_unstable();
        Some(LatencySummary {
            count: self.samples.len(),
            p50: percentile(&self.samples, 50.0)?,
            p99: percentile(&self.samples, 99.0)?,
            max: *self.samples.last()?,
        })
    }
}

/// The usual figures of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencySummary {
    /// How many samples.
    pub count: usize,
    /// The median.
    pub p50: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The largest sample.
    pub max: Duration,
}

impl LatencySummary {
    /// Adds `{prefix}_p50_ms`, `{prefix}_p99_ms`, `{prefix}_max_ms` and
    /// `{prefix}_samples` to `report`.
    pub fn add_to(&self, report: &mut Report, prefix: &str) {
        report
            .millis(format!("{prefix}_p50_ms"), self.p50)
            .millis(format!("{prefix}_p99_ms"), self.p99)
            .millis(format!("{prefix}_max_ms"), self.max)
            .count(format!("{prefix}_samples"), self.count as u64);
    }
}

/// The nearest-rank `p`th percentile (0 < p <= 100) of `sorted` (ascending):
/// the smallest sample such that at least `p`% of the samples are at most it.
/// `None` when `sorted` is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let n = sorted.len();
    let rank = (p / 100.0 * n as f64).ceil() as usize;
    sorted.get(rank.clamp(1, n.max(1)) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nearest_rank_percentiles() {
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 50.0), Some(ms(50)));
        assert_eq!(percentile(&sorted, 99.0), Some(ms(99)));
        assert_eq!(percentile(&sorted, 100.0), Some(ms(100)));
        assert_eq!(percentile(&sorted, 0.5), Some(ms(1)));
        let five = [ms(15), ms(20), ms(35), ms(40), ms(50)];
        // The textbook example: p30 is the 2nd of 5 (rank ceil(1.5)), p40 too, p50 the 3rd.
        assert_eq!(percentile(&five, 30.0), Some(ms(20)));
        assert_eq!(percentile(&five, 40.0), Some(ms(20)));
        assert_eq!(percentile(&five, 50.0), Some(ms(35)));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn a_summary_sorts_merged_samples() {
        let mut first = LatencyRecorder::new();
        let mut second = LatencyRecorder::with_capacity(100);
        for n in (1..=100).rev() {
            if n % 2 == 0 { &mut first } else { &mut second }.record(ms(n));
        }
        first.merge(second);
        assert_eq!(first.len(), 100);
        let summary = first.summary().unwrap();
        assert_eq!(
            summary,
            LatencySummary {
                count: 100,
                p50: ms(50),
                p99: ms(99),
                max: ms(100)
            }
        );
        let mut report = Report::new();
        summary.add_to(&mut report, "latency");
        assert_eq!(
            report.to_text(),
            "latency_p50_ms: 50.00\nlatency_p99_ms: 99.00\nlatency_max_ms: 100.00\nlatency_samples: 100\n"
        );
    }

    #[test]
    fn no_samples_no_summary() {
        assert!(LatencyRecorder::new().is_empty());
        assert_eq!(LatencyRecorder::new().summary(), None);
    }
}
