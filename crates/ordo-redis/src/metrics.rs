//! Counters and histograms, through the `metrics` facade (the application
//! installs the exporter). Labels: `group` (the handler) and `category`.

use std::time::Duration;

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

/// A handler attempt failed.
pub(crate) fn failed(unit: &Unit, category: &str) {
    metrics::counter!("ordo_messages_failed_total", &labels(unit, category)).increment(1);
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
