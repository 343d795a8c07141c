//! One consumer group's health, judged from the cluster state: what both
//! [`RedisBroker`](crate::RedisBroker)'s `Broker::health` (behind
//! `RunningDomain::health()`) and `ordo status --check` report, so that the
//! two always agree.
//!
//! - `halted`: a partition of the group is halted;
//! - `paused`: the group's handler is paused on an instance by its circuit
//!   breaker (most of its keys failed transiently: a dependency looks down);
//! - `lagging`: more entries not yet delivered to the group, over all its
//!   partitions (or base streams), than `[health] max_lag`; or an entry
//!   delivered and not acknowledged (outside halted partitions) for longer
//!   than `[health] max_pending_age_ms`;
//! - `unknown`: Redis does not answer (the broker adds: its lease renewals
//!   are failing).

use std::time::Duration;

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use ordo_core::contract::config::HealthConfig;
use ordo_core::contract::health::{HealthState, SubscriptionHealth};

use crate::error::{Error, Result};
use crate::ops::status::{ClusterStatus, PartitionStatus};
use crate::store::keys::PartitionKeys;
use crate::store::scripts::array;

/// The health of consumer group `group` (a handler's name) on `categories`.
///
/// # Errors
///
/// A Redis error when the state cannot be read; callers report the group
/// `unknown` with it ([`redis_unreachable`]).
pub async fn group_health(
    status: &ClusterStatus,
    group: &str,
    categories: &[String],
    thresholds: &HealthConfig,
) -> Result<SubscriptionHealth> {
    let groups = [group.to_owned()];
    let mut read = Vec::with_capacity(categories.len());
    for category in categories {
        let keys = status.partition_keys(category).await?;
        let partitions = if keys.is_empty() {
            None
        } else {
            Some(status.positions_of(category, &keys, &groups).await?)
        };
        read.push((category.as_str(), partitions));
    }
    let read: Vec<(&str, Option<&[PartitionStatus]>)> = read
        .iter()
        .map(|(category, partitions)| (*category, partitions.as_deref()))
        .collect();
    group_health_of(status, group, &read, thresholds).await
}

/// [`group_health`] from partitions already read: for each category
/// `group` consumes, its partitions (with `group`'s position among
/// others'), or `None` for a category that is not partitioned (its base
/// stream is read here). `ordo status` reads every partition once for
/// all its tables and judges each group from them.
///
/// # Errors
///
/// A Redis error when the rest of the state cannot be read.
pub async fn group_health_of(
    status: &ClusterStatus,
    group: &str,
    categories: &[(&str, Option<&[PartitionStatus]>)],
    thresholds: &HealthConfig,
) -> Result<SubscriptionHealth> {
    let mut health = SubscriptionHealth::ok(group);
    let groups = [group.to_owned()];
    let mut lag = 0u64;
    let mut oldest: Option<(Duration, String)> = None;
    for &(category, partitions) in categories {
        let Some(partitions) = partitions else {
            for position in status.base_stream(category, &groups).await? {
                lag = lag.saturating_add(position.lag);
                if position.pending > 0 {
                    older(
                        &mut oldest,
                        oldest_pending(status, category, group).await?,
                        category,
                    );
                }
            }
            continue;
        };
        for partition in partitions {
            for position in partition.groups.iter().filter(|position| position.group == group) {
                lag = lag.saturating_add(position.lag);
                if let Some(halt) = &position.halt {
                    health.degrade(
                        HealthState::Halted,
                        format!(
                            "partition `{category}:{}` halted on entry {} after {} attempts: {}",
                            halt.key, halt.head, halt.attempts, halt.error
                        ),
                    );
                } else if position.pending > 0 {
                    let keys = PartitionKeys::new(category, &partition.key, status.backfill_suffix());
                    for stream in [keys.primary(), keys.backfill()] {
                        older(&mut oldest, oldest_pending(status, stream, group).await?, stream);
                    }
                }
            }
        }
    }
    let now = status.server_time_ms().await?;
    for paused in status.paused(group).await? {
        health.degrade(HealthState::Paused, paused.describe(now));
    }
    if lag > thresholds.max_lag() {
        health.degrade(
            HealthState::Lagging,
            format!(
                "{lag} entries not yet delivered, over [health] max_lag = {}",
                thresholds.max_lag()
            ),
        );
    }
    if let Some((age, stream)) = oldest
        && age > thresholds.max_pending_age()
    {
        health.degrade(
            HealthState::Lagging,
            format!(
                "an entry of `{stream}` has been in flight for {} s, over [health] max_pending_age_ms = {}",
                age.as_secs(),
                thresholds.max_pending_age().as_millis()
            ),
        );
    }
    Ok(health)
}

/// `group` reported `unknown` because the cluster state could not be read.
pub fn redis_unreachable(group: &str, error: &Error) -> SubscriptionHealth {
    SubscriptionHealth::unknown(group, format!("Redis unreachable: {error}"))
}

fn older(oldest: &mut Option<(Duration, String)>, age: Option<Duration>, stream: &str) {
    if let Some(age) = age
        && oldest.as_ref().is_none_or(|(known, _)| age > *known)
    {
        *oldest = Some((age, stream.to_owned()));
    }
}

/// How long the entry of `stream` delivered longest ago to `group` and not
/// acknowledged has been waiting since its last delivery; `None` when none is.
async fn oldest_pending(status: &ClusterStatus, stream: &str, group: &str) -> Result<Option<Duration>> {
    // XPENDING stream group - + 1: [[id, consumer, idle-ms, deliveries]], oldest id first.
    let command = CustomCommand::new_static("XPENDING", ClusterHash::FirstKey, false);
    let args: Vec<Value> = vec![stream.into(), group.into(), "-".into(), "+".into(), 1.into()];
    let reply = match status.client().next().custom::<Value, _>(command, args).await {
        Ok(reply) => reply,
        // No such stream or group: nothing pending there.
        Err(error) if error.details().starts_with("NOGROUP") => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    let Some(entry) = array(reply).into_iter().next() else {
        return Ok(None);
    };
    let idle = array(entry)
        .get(2)
        .and_then(Value::as_u64)
        .ok_or_else(|| Error::protocol("XPENDING", "entry has no idle time"))?;
    Ok(Some(Duration::from_millis(idle)))
}
