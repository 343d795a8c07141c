//! Counters and histograms, through the `metrics` facade (the application
//! installs the exporter). Labels: `group` (the handler) and `category`.

use std::time::Duration;

use metrics::{Counter, Histogram};

use crate::consumer::unit::Unit;

fn labels(unit: &Unit, category: &str) -> [(&'static str, String); 2] {
    [
        ("group", unit.group.to_string()),
        ("category", category.to_owned()),
    ]
}

/// A message handled successfully.
pub(crate) fn handled(unit: &Unit, category: &str) {
    metrics::counter!("ordo_messages_handled_total", &labels(unit, category)).increment(1);
}

/// The handles of the two metrics every message records, for each category
/// of one worker's unit, registered when the worker starts: a message then
/// records them without building labels or looking them up in the
/// exporter's registry (about half a microsecond per message).
pub(crate) struct MessageMetrics {
    categories: Vec<(String, Counter, Histogram)>,
}

impl MessageMetrics {
    /// The handles of `unit`'s categories, from the recorder installed now.
    pub(crate) fn of(unit: &Unit) -> Self {
        let mut categories: Vec<(String, Counter, Histogram)> = Vec::with_capacity(1);
        for partition in &unit.partitions {
            let category = partition.category();
            if categories.iter().all(|(known, ..)| known != category) {
                let labels = labels(unit, category);
                categories.push((
                    category.to_owned(),
                    metrics::counter!("ordo_messages_handled_total", &labels),
                    metrics::histogram!("ordo_handler_duration_seconds", &labels),
                ));
            }
        }
        Self { categories }
    }

    fn of_category(&self, category: &str) -> Option<&(String, Counter, Histogram)> {
        self.categories.iter().find(|(known, ..)| known == category)
    }

    /// A message of `category` handled successfully.
    pub(crate) fn handled(&self, unit: &Unit, category: &str) {
        match self.of_category(category) {
            Some((_, handled, _)) => handled.increment(1),
            None => handled(unit, category),
        }
    }

    /// How long one handler run on a message of `category` took.
    pub(crate) fn handler_duration(&self, unit: &Unit, category: &str, duration: Duration) {
        match self.of_category(category) {
            Some((_, _, durations)) => durations.record(duration.as_secs_f64()),
            None => handler_duration(unit, category, duration),
        }
    }
}

/// A handler attempt failed: counted (`ordo_messages_failed_total`), or
/// transient (`ordo_messages_transient_failures_total`, not counted as one
/// of the message's attempts); a timeout also counts in
/// `ordo_handler_timeouts_total`.
pub(crate) fn failed(unit: &Unit, category: &str, failed: &ordo_core::contract::retry::Failed) {
    attempt_failed(&labels(unit, category), failed);
}

/// [`failed`] with the labels given (the plain consumer's).
pub(crate) fn attempt_failed(
    labels: &[(&'static str, String); 2],
    failed: &ordo_core::contract::retry::Failed,
) {
    if failed.transient() {
        metrics::counter!("ordo_messages_transient_failures_total", labels).increment(1);
    } else {
        metrics::counter!("ordo_messages_failed_total", labels).increment(1);
    }
    if failed.timed_out() {
        metrics::counter!("ordo_handler_timeouts_total", labels).increment(1);
    }
}

/// Whether `group` (a handler) is paused in this process (1) or not (0).
pub(crate) fn paused(group: &str, paused: bool) {
    metrics::gauge!("ordo_handler_paused", "group" => group.to_owned()).set(if paused { 1.0 } else { 0.0 });
}

/// A failed message is retried.
pub(crate) fn retried(unit: &Unit, category: &str) {
    metrics::counter!("ordo_messages_retried_total", &labels(unit, category)).increment(1);
}

/// A partition halted on a poison message.
pub(crate) fn halted(unit: &Unit, category: &str) {
    metrics::counter!("ordo_partitions_halted_total", &labels(unit, category)).increment(1);
}

/// How long one handler run took.
pub(crate) fn handler_duration(unit: &Unit, category: &str, duration: Duration) {
    metrics::histogram!("ordo_handler_duration_seconds", &labels(unit, category))
        .record(duration.as_secs_f64());
}

/// A lease acquired.
pub(crate) fn lease_acquired(unit: &Unit) {
    metrics::counter!("ordo_leases_acquired_total", &labels(unit, &unit.label)).increment(1);
}

/// A lease lost (taken over, expired, reaped by another group).
pub(crate) fn lease_lost(unit: &Unit) {
    metrics::counter!("ordo_leases_lost_total", &labels(unit, &unit.label)).increment(1);
}

/// A lease released (rebalancing or shutdown).
pub(crate) fn lease_released(unit: &Unit) {
    metrics::counter!("ordo_leases_released_total", &labels(unit, &unit.label)).increment(1);
}

/// Pending entries a new owner found left by the previous one.
pub(crate) fn reclaimed(unit: &Unit, category: &str, count: usize) {
    metrics::counter!("ordo_entries_reclaimed_total", &labels(unit, category))
        .increment(u64::try_from(count).unwrap_or(u64::MAX));
}

/// A cold partition retired.
pub(crate) fn partition_reaped(unit: &Unit) {
    metrics::counter!("ordo_partitions_reaped_total", &labels(unit, &unit.label)).increment(1);
}

/// A discovery round found a lease held by another process with this
/// process's instance id.
pub(crate) fn duplicate_instance() {
    metrics::counter!("ordo_duplicate_instance_total").increment(1);
}
