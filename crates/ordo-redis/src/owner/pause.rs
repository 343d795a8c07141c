//! Paused handlers, as recorded in Redis for operators: an instance whose
//! circuit breaker paused a handler ([`ordo_core::contract::retry::breaker`]) writes
//! a record in the handler's [`paused`](crate::store::keys::paused) hash, and
//! refreshes it while the pause lasts; `ordo status` and health read it.

use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

use fred::clients::Pool;
use fred::interfaces::HashesInterface;
use ordo_core::contract::retry::PauseStatus;

use crate::error::Result;
use crate::store::calls;
use crate::store::keys::paused;

/// A handler paused on one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PausedInstance {
    /// The consumer group (handler name).
    pub group: String,
    /// The instance it is paused on.
    pub instance: String,
    /// When it paused (ms since the Unix epoch, the instance's clock).
    pub since_ms: u64,
    /// How many probes failed since.
    pub probes: u32,
    /// Why: how many keys failed transiently, and the last error.
    pub reason: String,
}

impl PausedInstance {
    /// One line for people: where, since when (relative to `now_ms`), why.
    pub fn describe(&self, now_ms: u64) -> String {
        format!(
            "paused on instance `{}` for {} s ({} probes failed): {}",
            self.instance,
            now_ms.saturating_sub(self.since_ms) / 1000,
            self.probes,
            self.reason
        )
    }
}

/// Records `pause` of `group` on `instance` (`None`: clears it), valid for
/// `ttl` unless refreshed.
pub(crate) async fn record(
    client: &Pool,
    group: &str,
    instance: &str,
    pause: Option<&PauseStatus>,
    ttl: Duration,
) -> Result<()> {
    let record = pause.map_or_else(String::new, |pause| {
        let since = pause
            .since
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        // One line: the reason is the record's last field.
        let reason = pause.reason.replace(['\n', '\r'], " ");
        format!("{since} {} {reason}", pause.probes)
    });
    calls::consumer::pause(client, group, instance, &record, ttl).await
}

/// The instances on which `group` is paused at `now` (the Redis server
/// clock), by instance id (records past their expiry, left by an instance
/// that stopped, are left out).
pub(crate) async fn read(client: &Pool, group: &str, now: u64) -> Result<Vec<PausedInstance>> {
    let fields: HashMap<String, String> = client.hgetall(paused(group)).await?;
    let mut paused: Vec<PausedInstance> = fields
        .into_iter()
        .filter_map(|(instance, record)| parse(group, instance, &record, now))
        .collect();
    paused.sort_by(|a, b| a.instance.cmp(&b.instance));
    Ok(paused)
}

/// A record `<expiry ms> <since ms> <probes> <reason>`, unless expired at
/// `now` or unreadable.
fn parse(group: &str, instance: String, record: &str, now: u64) -> Option<PausedInstance> {
    let mut fields = record.splitn(4, ' ');
    let expiry: u64 = fields.next()?.parse().ok()?;
    let since_ms = fields.next()?.parse().ok()?;
    let probes = fields.next()?.parse().ok()?;
    let reason = fields.next().unwrap_or_default().to_owned();
    (expiry > now).then(|| PausedInstance {
        group: group.to_owned(),
        instance,
        since_ms,
        probes,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_record_is_read_until_it_expires() {
        let record = "2000 1000 3 5 keys failed transiently: pool timed out";
        let paused = parse("G", "w1".to_owned(), record, 1500).expect("not expired");
        assert_eq!((paused.since_ms, paused.probes), (1000, 3));
        assert_eq!(paused.reason, "5 keys failed transiently: pool timed out");
        assert_eq!(
            paused.describe(4000),
            "paused on instance `w1` for 3 s (3 probes failed): 5 keys failed transiently: pool timed out"
        );
        assert!(parse("G", "w1".to_owned(), record, 2000).is_none());
        assert!(parse("G", "w1".to_owned(), "garbage", 0).is_none());
    }
}
