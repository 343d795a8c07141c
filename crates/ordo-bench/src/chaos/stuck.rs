//! What Redis holds for partitions that did not drain: the evidence a
//! report needs when events are still unapplied at the deadline.

use std::collections::HashMap;

use anyhow::Result;
use fred::clients::Pool;
use fred::interfaces::{KeysInterface as _, StreamsInterface as _};
use fred::types::Value;
use ordo_core::key::DEFAULT_BACKFILL_SUFFIX;
use ordo_harness::keys;
use ordo_harness::worker::GROUP;
use ordo_redis::PartitionAdmin;

/// One line per key of `keys`: its lease (holder, token, time left), its
/// stream's length, and the handler's consumer group (pending entries, last
/// delivered id, lag); then one line per halted partition.
pub(crate) async fn describe(client: &Pool, keys: &[String]) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for key in keys {
        let lease_key = keys::lease(key);
        let lease: Option<String> = client.get(&lease_key).await?;
        let ttl: i64 = client.pttl(&lease_key).await?;
        let partition = keys::partition(key);
        let stream = partition.primary();
        let length: u64 = client.xlen(stream).await?;
        let groups: Vec<HashMap<String, Value>> = client.xinfo_groups(stream).await.unwrap_or_default();
        let group = groups
            .iter()
            .find(|g| g.get("name").and_then(Value::as_string).as_deref() == Some(GROUP))
            .map_or_else(|| "no consumer group".to_owned(), describe_group);
        lines.push(format!(
            "{key}: lease {} (pttl {ttl} ms); stream {stream} length {length}; group {GROUP}: {group}",
            lease.as_deref().unwrap_or("none"),
        ));
    }
    let admin = PartitionAdmin::new(client.clone(), DEFAULT_BACKFILL_SUFFIX);
    for halted in admin.halted().await? {
        lines.push(format!("halted: {halted:?}"));
    }
    Ok(lines)
}

/// `pending`, `last-delivered-id`, `entries-read` and `lag` of one group.
fn describe_group(group: &HashMap<String, Value>) -> String {
    ["pending", "last-delivered-id", "entries-read", "lag"]
        .iter()
        .map(|field| {
            let value = group
                .get(*field)
                .and_then(Value::as_string)
                .unwrap_or_else(|| "-".to_owned());
            format!("{field} {value}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}
