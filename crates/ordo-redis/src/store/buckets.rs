//! Reading and listing the per-slot buckets of the structures shared by many
//! partitions (the category indexes, the halted set, the registry copies).
//!
//! A bucket lives in the slot of the partitions it lists (see
//! [`crate::store::keys::index`]); a directory set lists the slots whose bucket may
//! be non-empty. Directories only grow: a slot is added before the first
//! write to its bucket and never removed, so a reader that reads the
//! directory, then every listed bucket, cannot miss an entry that was there
//! before it started, whatever ran concurrently.

use std::collections::BTreeSet;

use fred::clients::{Client, Pool};
use fred::interfaces::{ClientLike, KeysInterface, SetsInterface};
use fred::types::Expiration;
use fred::types::Value;

use crate::error::{Error, Result};
use crate::store::keys::{self, SLOTS, group_registry, group_registry_copy, joining, joining_copy};
use crate::store::scripts::{SCRIPTS, array};

/// Buckets read per pipelined round trip.
const READ_CHUNK: usize = 512;

/// Registry copies written per pipelined round trip.
const WRITE_CHUNK: usize = 2048;

/// The slots listed in `directory`, sorted; a member that is not a slot
/// number is an error naming it.
pub(crate) async fn listed(client: &Pool, directory: &str) -> Result<Vec<u16>> {
    let members: Vec<String> = client.smembers(directory).await?;
    let mut slots = Vec::with_capacity(members.len());
    for member in members {
        match member.parse::<u16>() {
            Ok(slot) if slot < SLOTS => slots.push(slot),
            _ => {
                return Err(Error::protocol(
                    "SMEMBERS",
                    format!("`{directory}` lists `{member}`, which is not a hash slot (0..{SLOTS})"),
                ));
            }
        }
    }
    slots.sort_unstable();
    Ok(slots)
}

/// Adds `slots` to `directory` (idempotent); nothing when `slots` is empty.
pub(crate) async fn list(client: &Pool, directory: &str, slots: &[u16]) -> Result<()> {
    if slots.is_empty() {
        return Ok(());
    }
    let members: Vec<Value> = slots.iter().map(|slot| Value::from(i64::from(*slot))).collect();
    let _: Value = client.sadd(directory, members).await?;
    Ok(())
}

/// The members of every bucket `directory` lists, `bucket` naming the
/// bucket of a slot: one `SMEMBERS` for the directory, then on a single
/// Redis one `SUNION` of the buckets (per [`READ_CHUNK`] of them), on a
/// cluster one `SMEMBERS` per bucket in pipelined round trips (the client
/// sends each to the node serving it; a command cannot span slots there).
pub(crate) async fn members(
    client: &Pool,
    directory: &str,
    bucket: impl Fn(u16) -> String,
) -> Result<BTreeSet<String>> {
    let slots = listed(client, directory).await?;
    let mut members = BTreeSet::new();
    if !client.next().is_clustered() {
        for chunk in slots.chunks(READ_CHUNK) {
            let names: Vec<String> = chunk.iter().map(|slot| bucket(*slot)).collect();
            let union: Vec<String> = client.sunion(names).await?;
            members.extend(union);
        }
        return Ok(members);
    }
    for chunk in slots.chunks(READ_CHUNK) {
        let pipeline = client.next().pipeline();
        for slot in chunk {
            let _: Value = pipeline.smembers(bucket(*slot)).await?;
        }
        let replies: Vec<Vec<String>> = pipeline.all().await?;
        members.extend(replies.into_iter().flatten());
    }
    Ok(members)
}

/// Like [`members`], for the consumer's discovery, which runs every second:
/// on a cluster one script call per node reads every listed bucket that node
/// serves (instead of one `SMEMBERS` per bucket, which grows with the slots
/// in use, up to 16,384). When a slot moved since the client's view of the
/// cluster was read, the view is refreshed and the read tried once more.
pub(crate) async fn members_per_node(
    client: &Pool,
    directory: &str,
    bucket: impl Fn(u16) -> String,
) -> Result<BTreeSet<String>> {
    if !client.next().is_clustered() {
        return members(client, directory, bucket).await;
    }
    let slots = listed(client, directory).await?;
    let buckets: Vec<String> = slots.iter().map(|slot| bucket(*slot)).collect();
    // One client throughout: each client of a pool keeps its own view of the
    // cluster, and the retry must group by the view the refresh updated.
    let client = client.next();
    crate::net::nodes::once_more_if_moved(client, "discovery", || union_per_node(client, &buckets)).await
}

async fn union_per_node(client: &Client, buckets: &[String]) -> Result<BTreeSet<String>> {
    crate::net::nodes::nodes(client).await?;
    let groups = crate::net::nodes::group_by_node(client, buckets.iter().map(|name| (name, name)))?;
    let mut members = BTreeSet::new();
    for (_, names) in groups {
        let Some(first) = names.first() else {
            continue;
        };
        let args: Vec<Value> = names.iter().map(|name| Value::from(name.as_str())).collect();
        let reply = SCRIPTS.union.run(client, vec![(*first).clone()], args).await?;
        members.extend(array(reply).into_iter().filter_map(|member| member.as_string()));
    }
    Ok(members)
}

/// The version of `category`'s index (see
/// [`crate::store::keys::index_version`]): none before its first change.
pub(crate) async fn index_version(client: &Pool, category: &str) -> Result<Option<i64>> {
    Ok(client.get(keys::index_version(category)).await?)
}

/// Says that `category`'s index changed (a partition added or removed), so
/// discovery reads it again: to be called after the change.
pub(crate) async fn index_changed(client: &Pool, category: &str) -> Result<()> {
    let _: i64 = client.incr(keys::index_version(category)).await?;
    Ok(())
}

/// Adds `member` to every slot's copy of a per-slot set (`name` naming the
/// copy of a slot), in pipelined round trips.
pub(crate) async fn add_in_every_slot(
    client: &Pool,
    name: impl Fn(u16) -> String,
    member: &str,
) -> Result<()> {
    for chunk in (0..SLOTS).collect::<Vec<_>>().chunks(WRITE_CHUNK) {
        let pipeline = client.next().pipeline();
        for slot in chunk {
            let _: Value = pipeline.sadd(name(*slot), member).await?;
        }
        for reply in pipeline.try_all::<Value>().await {
            reply?;
        }
    }
    Ok(())
}

/// Sets every slot's copy of a per-slot marker (`name` naming the copy of a
/// slot) to `value` for `ttl_ms`, in pipelined round trips.
pub(crate) async fn set_in_every_slot(
    client: &Pool,
    name: impl Fn(u16) -> String,
    value: &str,
    ttl_ms: i64,
) -> Result<()> {
    for chunk in (0..SLOTS).collect::<Vec<_>>().chunks(WRITE_CHUNK) {
        let pipeline = client.next().pipeline();
        for slot in chunk {
            let _: Value = pipeline
                .set(name(*slot), value, Some(Expiration::PX(ttl_ms)), None, false)
                .await?;
        }
        for reply in pipeline.try_all::<Value>().await {
            reply?;
        }
    }
    Ok(())
}

/// Registers `group` as a consumer of partitioned `category`: on a Redis
/// Cluster in every slot's copy of the registry (which the publish script
/// of that slot's partitions reads), then in the category's own (which
/// tools, the start-up check and, on a single Redis, the publish script
/// read). On a Redis Cluster that is rare (once per group and category) and
/// 16,384 `SADD`s in pipelined round trips; on a single Redis (or a
/// Sentinel-managed one) one `SADD`: a script there may read any key, so
/// one copy serves every slot.
///
/// Only the registry: the consumer also joins the existing partitions (see
/// the supervisor); tests and tools call this for what they set up by hand.
pub async fn register_group(client: &Pool, category: &str, group: &str) -> Result<()> {
    if client.next().is_clustered() {
        add_in_every_slot(client, |slot| group_registry_copy(category, slot), group).await?;
    }
    let _: Value = client.sadd(group_registry(category), group).await?;
    Ok(())
}

/// Marks partitioned `category` as being joined by `group` for `ttl_ms`: on
/// a Redis Cluster every slot's copy of the joining marker (which the
/// publish script reads), then the category's own; on a single Redis the
/// category's own only (see [`register_group`]).
pub async fn mark_joining(client: &Pool, category: &str, group: &str, ttl_ms: i64) -> Result<()> {
    if client.next().is_clustered() {
        set_in_every_slot(client, |slot| joining_copy(category, slot), group, ttl_ms).await?;
    }
    let _: Value = client
        .set(
            joining(category),
            group,
            Some(Expiration::PX(ttl_ms)),
            None,
            false,
        )
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use fred::types::cluster::ClusterRouting;
    use ordo_testkit::RedisCluster;

    use super::*;
    use crate::store::keys::{index, index_directory};

    /// Discovery after a resharding moved a listed slot: the call grouped by
    /// the stale view fails, and the retry groups by the refreshed one. (It
    /// failed again when the retry took another client of the pool, whose
    /// view was never refreshed.)
    #[tokio::test]
    async fn discovery_after_a_slot_moved_groups_by_the_refreshed_view() {
        let cluster = RedisCluster::start_local().unwrap();
        let client = crate::net::connection::test_pool(&cluster.url(), 4).await;
        let category = "moved_discovery";
        let directory = index_directory(category);
        // Two listed buckets: one holding a partition, one empty (its slot can
        // be moved without migrating keys), neither in the directory's slot.
        let directory_slot = ClusterRouting::hash_key(directory.as_bytes());
        let (kept, moved) = (100, 200);
        assert!(![kept, moved].contains(&directory_slot));
        list(&client, &directory, &[kept, moved]).await.unwrap();
        let _: i64 = client.sadd(index(category, kept), "k").await.unwrap();
        let expected = BTreeSet::from(["k".to_owned()]);
        let found = members_per_node(&client, &directory, |slot| index(category, slot))
            .await
            .unwrap();
        assert_eq!(found, expected);

        let from = cluster.node_for_key(&index(category, moved)).unwrap();
        let to = cluster
            .primaries()
            .unwrap()
            .into_iter()
            .find(|&node| node != from)
            .unwrap();
        cluster.move_empty_slot(moved, to).unwrap();

        let found = members_per_node(&client, &directory, |slot| index(category, slot))
            .await
            .unwrap();
        assert_eq!(found, expected);
    }
}
