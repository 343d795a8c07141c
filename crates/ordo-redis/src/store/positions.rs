//! Carrying each key's last published positions over when a category's
//! partitioning changes (`ordo repartition`).
//!
//! A publication from the PostgreSQL outbox carries its position, and the
//! publish script keeps each scope's last one under a name that depends on
//! the partitioning: `{order:c-1}:position` (a string) for a partition of
//! one key, a field `c-1` of `{order:__7__}:position` for a hashed
//! partition. A relay killed after publishing rows but before marking them
//! publishes them again later; if the category was repartitioned meanwhile,
//! the new name holds no position and they would be delivered again, after
//! the key's later events. So every position is copied to its new name
//! before the switch (the higher one kept when both exist), with
//! `carry_positions.lua`.

use std::collections::BTreeMap;

use fred::clients::Pool;
use fred::interfaces::{HashesInterface, KeysInterface};
use fred::types::Value;
use fred::types::scan::ScanType;
use ordo_core::Partitions;
use ordo_core::contract::key::Lane;

use crate::error::Result;
use crate::net::nodes;
use crate::store::keys::{PartitionId, PartitionKeys, Routing, glob_escape};
use crate::store::scripts::SCRIPTS;

/// Field/value pairs per script call.
const PAIRS_PER_CALL: usize = 512;

/// One key's last published position of one lane, as recorded.
#[derive(Debug)]
struct Recorded {
    key: String,
    lane: Lane,
    value: String,
}

/// Copies the last published position of every key of `category` from its
/// names under partitioning `from` to its names under `to` (keeping the
/// higher one where both exist); returns how many were raised.
pub(crate) async fn carry(
    client: &Pool,
    category: &str,
    from: Partitions,
    to: Partitions,
    backfill_suffix: &str,
) -> Result<u64> {
    if from == to {
        return Ok(0);
    }
    let recorded = match from {
        Partitions::PerKey => per_key(client, category, backfill_suffix).await?,
        Partitions::Hashed(n) => hashed(client, category, n.get(), backfill_suffix).await?,
    };
    let routing = Routing::new(&ordo_core::Config::default().with_partitions(category, to));
    // Per new name, its field/value pairs.
    let mut targets: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for one in recorded {
        let partition = PartitionKeys::of(routing.partition_of(category, &one.key), backfill_suffix);
        let field = if partition.id().is_hashed() {
            one.key
        } else {
            String::new()
        };
        targets
            .entry(partition.position(one.lane))
            .or_default()
            .push((field, one.value));
    }
    let mut raised = 0;
    for (name, pairs) in targets {
        for chunk in pairs.chunks(PAIRS_PER_CALL) {
            let args = chunk
                .iter()
                .flat_map(|(field, value)| [Value::from(field.as_str()), Value::from(value.as_str())])
                .collect();
            let reply = SCRIPTS
                .carry_positions
                .run(client, vec![name.clone()], args)
                .await?;
            raised += reply.as_u64().unwrap_or(0);
        }
    }
    Ok(raised)
}

/// The positions of `category`'s partitions of one key: the string keys
/// `{category:key}:position` and `{category:key}:{suffix}:position`.
async fn per_key(client: &Pool, category: &str, backfill_suffix: &str) -> Result<Vec<Recorded>> {
    let escaped = glob_escape(category);
    let mut recorded = Vec::new();
    for (lane, pattern) in [
        (Lane::Primary, format!("{{{escaped}:*}}:position")),
        (
            Lane::Backfill,
            format!("{{{escaped}:*}}:{}:position", glob_escape(backfill_suffix)),
        ),
    ] {
        for name in nodes::scan(client.next(), &pattern, ScanType::String).await? {
            let Some(key) = key_of(category, &name, lane, backfill_suffix) else {
                continue;
            };
            let value: Option<String> = client.get(name.as_str()).await?;
            if let Some(value) = value {
                recorded.push(Recorded { key, lane, value });
            }
        }
    }
    Ok(recorded)
}

/// The key of the position key `name` of a partition of one key of
/// `category` on `lane`, if `name` is one (a hashed partition's is not).
fn key_of(category: &str, name: &str, lane: Lane, backfill_suffix: &str) -> Option<String> {
    let tail = match lane {
        Lane::Primary => "}:position".to_owned(),
        Lane::Backfill => format!("}}:{backfill_suffix}:position"),
    };
    let member = name
        .strip_prefix('{')?
        .strip_prefix(category)?
        .strip_prefix(':')?
        .strip_suffix(tail.as_str())?;
    let id = PartitionId::from_member(category, member);
    (!member.is_empty() && !member.contains(['{', '}']) && !id.is_hashed()).then(|| member.to_owned())
}

/// The positions of `category`'s `n` hashed partitions: the hashes
/// `{category:__i__}:position` (and the backfill lane's), one field per key.
async fn hashed(client: &Pool, category: &str, n: u32, backfill_suffix: &str) -> Result<Vec<Recorded>> {
    let mut recorded = Vec::new();
    for index in 0..n {
        let partition = PartitionKeys::of(PartitionId::hashed(category, index), backfill_suffix);
        for lane in [Lane::Primary, Lane::Backfill] {
            let fields: std::collections::HashMap<String, String> =
                client.hgetall(partition.position(lane)).await?;
            recorded.extend(
                fields
                    .into_iter()
                    .map(|(key, value)| Recorded { key, lane, value }),
            );
        }
    }
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_position_keys_of_single_key_partitions_of_the_category_are_read() {
        let key = |name: &str, lane| key_of("order", name, lane, "backfill");
        assert_eq!(key("{order:c-1}:position", Lane::Primary).as_deref(), Some("c-1"));
        assert_eq!(
            key("{order:c-1}:backfill:position", Lane::Backfill).as_deref(),
            Some("c-1")
        );
        assert_eq!(key("{order:c-1}:backfill:position", Lane::Primary), None);
        assert_eq!(
            key("{order:__3__}:position", Lane::Primary),
            None,
            "a hashed partition's"
        );
        assert_eq!(
            key("{orders:c-1}:position", Lane::Primary),
            None,
            "another category's"
        );
        assert_eq!(key("{order}:position", Lane::Primary), None, "the base stream's");
    }
}
