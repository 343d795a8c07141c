//! The halt records as Redis holds them: a halted partition's record and
//! the parked keys of a hashed partition, read for the operator's list
//! ([`PartitionAdmin`](crate::PartitionAdmin)) and the cluster status alike.

use std::collections::HashMap;

use fred::clients::Pool;
use fred::interfaces::HashesInterface;
use ordo_core::contract::key::Lane;

use crate::error::{Error, Result};
use crate::owner::partition::parse_lane;
use crate::store::buckets;
use crate::store::keys::{PartitionId, halted, halted_directory};

/// A halted partition, as recorded when it halted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaltedPartition {
    /// The consumer group (handler name) that halted.
    pub group: String,
    /// The stream category.
    pub category: String,
    /// The partition key.
    pub key: String,
    /// The lane of the poison message.
    pub lane: Lane,
    /// The poison message's entry id (the pending head).
    pub head: String,
    /// The last error.
    pub error: String,
    /// How many times it was attempted.
    pub attempts: u32,
    /// The instance that halted it.
    pub owner: String,
    /// When it halted (Redis server clock, ms since the Unix epoch).
    pub halted_at_ms: u64,
    /// Whether this is a parked key of a hashed partition (its messages
    /// held aside, the partition's other keys flowing) rather than a halted
    /// partition of its own; `head` is then the id of its first held
    /// message.
    pub parked: bool,
}

/// Every halted partition (and parked key) of `category`, of every
/// group, sorted by group and key: its halted set reads nothing of any
/// other category.
pub(crate) async fn halted_in(client: &Pool, category: &str) -> Result<Vec<HaltedPartition>> {
    let keys = buckets::members(client, &halted_directory(category), |slot| halted(category, slot)).await?;
    let mut halted = Vec::with_capacity(keys.len());
    for key in keys {
        if let Some((category, group)) = parse_parked(&key) {
            halted.extend(parked_records(client, &key, category, group).await?);
        // A record cleared between the two reads is simply not halted.
        } else if let Some(record) = record(client, &key).await? {
            halted.push(record);
        }
    }
    halted.sort_by(|a, b| (&a.group, &a.key).cmp(&(&b.group, &b.key)));
    Ok(halted)
}

/// The parked keys of one hashed partition (`name`: its parked hash).
async fn parked_records(
    client: &Pool,
    name: &str,
    category: &str,
    group: &str,
) -> Result<Vec<HaltedPartition>> {
    let records: HashMap<String, String> = client.hgetall(name).await?;
    records
        .into_iter()
        .map(|(key, record)| parse_parked_record(name, category, group, key, &record))
        .collect()
}

/// The halt record at `halt_key` (`None`: not halted).
pub(crate) async fn record(client: &Pool, halt_key: &str) -> Result<Option<HaltedPartition>> {
    let fields: HashMap<String, String> = client.hgetall(halt_key).await?;
    if fields.is_empty() {
        return Ok(None);
    }
    let field = |name: &str| {
        fields
            .get(name)
            .cloned()
            .ok_or_else(|| Error::protocol("halt record", format!("`{halt_key}` has no `{name}`")))
    };
    let number = |name: &str| -> Result<u64> {
        field(name)?.parse().map_err(|_| {
            Error::protocol(
                "halt record",
                format!("`{halt_key}` field `{name}` is not a number"),
            )
        })
    };
    Ok(Some(HaltedPartition {
        group: field("group")?,
        category: field("category")?,
        key: field("key")?,
        lane: parse_lane(&field("lane")?)?,
        head: field("head")?,
        // Records written before errors were capped may hold megabytes.
        error: ordo_core::contract::text::cap_error(field("error")?),
        attempts: u32::try_from(number("attempts")?).unwrap_or(u32::MAX),
        owner: field("owner")?,
        halted_at_ms: number("at")?,
        parked: false,
    }))
}

/// The (category, group) of a hashed partition's parked hash name
/// (`{order:__7__}:parked:G`), if `name` is one.
fn parse_parked(name: &str) -> Option<(&str, &str)> {
    let (tag, group) = name.strip_prefix('{')?.split_once("}:parked:")?;
    let (category, member) = tag.rsplit_once(':')?;
    PartitionId::from_member(category, member)
        .is_hashed()
        .then_some((category, group))
}

/// A parked key's record (JSON, written by `park.lua`).
pub(crate) fn parse_parked_record(
    name: &str,
    category: &str,
    group: &str,
    key: String,
    record: &str,
) -> Result<HaltedPartition> {
    #[derive(serde::Deserialize)]
    struct Record {
        head: String,
        lane: String,
        error: String,
        attempts: u32,
        owner: String,
        at: u64,
    }
    let record: Record = serde_json::from_str(record)
        .map_err(|error| Error::protocol("park record", format!("`{name}` field `{key}`: {error}")))?;
    Ok(HaltedPartition {
        group: group.to_owned(),
        category: category.to_owned(),
        key,
        lane: parse_lane(&record.lane)?,
        head: record.head,
        error: ordo_core::contract::text::cap_error(record.error),
        attempts: record.attempts,
        owner: record.owner,
        halted_at_ms: record.at,
        parked: true,
    })
}
