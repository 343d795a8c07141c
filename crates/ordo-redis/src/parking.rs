//! Parking the keys of a hashed partition: the fenced operations the owner
//! of a hashed partition uses when a message of one of its keys is poison.
//!
//! A parked key's poison message, and every later message of the key, move
//! out of the partition's lanes into the key's held stream
//! ([`PartitionKeys::held`]), in order; the other keys keep flowing and the
//! lanes can be trimmed past the parked key. An operator resolves the key
//! ([`PartitionAdmin::resolve_parked`](crate::PartitionAdmin::resolve_parked));
//! the owner then runs the held messages first, in order, before any newer
//! message of the key, and the key flows again once its held stream is
//! empty.

use fred::interfaces::{HashesInterface, SetsInterface};
use fred::types::Value;
use ordo_core::key::Lane;

use crate::error::{Error, Result};
use crate::fence::KeyNames;
use crate::keys::PartitionKeys;
use crate::lease::{Lease, millis};
use crate::partition::{HaltReason, Partitions, StreamEntry, lane_name, parse_lane};
use crate::scripts::{RawEntry, Reply, SCRIPTS, parse_entries};

/// What the owner of a hashed partition finds of its parked keys when it
/// takes the partition over.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Parking {
    /// The keys parked on a poison message.
    pub(crate) parked: Vec<String>,
    /// The keys whose messages are held aside: the parked keys, and the
    /// resolved ones whose held messages have not all run yet.
    pub(crate) holding: Vec<String>,
}

/// The next held message of a resolved key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HeldNext {
    /// The key is parked (again): nothing to run.
    Parked,
    /// Its next held message.
    Entry(StreamEntry),
    /// It holds nothing any more: it flows again.
    Done,
}

/// The fields of `entry` as published (text or bytes, as they were), to
/// be written again elsewhere: name, value, ...
fn fields(entry: &StreamEntry) -> Vec<Value> {
    field_pairs(entry)
        .into_iter()
        .flat_map(|(name, value)| [Value::from(name), value])
        .collect()
}

/// The fields of `entry` as published (text or bytes, as they were), to
/// be written again elsewhere.
pub(crate) fn field_pairs(entry: &StreamEntry) -> Vec<(&'static str, Value)> {
    ["type", "key", "envelope"]
        .into_iter()
        .filter_map(|name| entry.raw_field(name).map(|value| (name, value)))
        .collect()
}

/// A held message: read from a key's held stream, with the lane it came
/// from (its `lane` field).
pub(crate) fn held_entry(raw: RawEntry) -> Result<StreamEntry> {
    let lane = raw.field("lane").map_or(Ok(Lane::Primary), parse_lane)?;
    Ok(StreamEntry::from_raw(raw, lane))
}

impl Partitions {
    /// The parked and holding keys of `partition` for `group`.
    pub(crate) async fn parking(&self, group: &str, partition: &PartitionKeys) -> Result<Parking> {
        let parked: Vec<String> = self.client().hkeys(partition.parked(group)).await?;
        let holding: Vec<String> = self.client().smembers(partition.holding(group)).await?;
        Ok(Parking { parked, holding })
    }

    /// Which of `keys` are still parked.
    pub(crate) async fn still_parked(
        &self,
        group: &str,
        partition: &PartitionKeys,
        keys: &[String],
    ) -> Result<Vec<bool>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let records: Vec<Option<String>> = self
            .client()
            .hmget(partition.parked(group), keys.to_vec())
            .await?;
        Ok(records.iter().map(Option::is_some).collect())
    }

    /// Parks `key` of hashed `partition` on `entry` (poison: `reason`)
    /// under the fence, closing attempt `attempt` in the key's sequence.
    /// `held`: the entry is one of the key's held messages already (a
    /// resolved key's message failed again). Returns the held id of the
    /// parked head.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn park(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        key: &str,
        own: &KeyNames,
        entry: &StreamEntry,
        held: bool,
        reason: &HaltReason,
        attempt: u64,
    ) -> Result<String> {
        // The halted set's bucket is listed before it can be written to,
        // so an operator reading the directory never misses a parked key.
        crate::buckets::list(self.client(), &partition.halted_directory(), &[partition.slot()]).await?;
        let script = &SCRIPTS.park;
        let parked = partition.parked(group);
        let keys = vec![
            lease.key().to_owned(),
            parked.clone(),
            partition.holding(group),
            partition.held(group, key),
            partition.halted(),
            own.sequence.clone(),
            partition.lane(entry.lane()).to_owned(),
            partition.attempts(group),
        ];
        let mut args = vec![
            Value::from(lease.value()),
            Value::from(key),
            Value::from(group),
            Value::from(entry.id()),
            // Stored capped: a handler's error text may be megabytes.
            Value::from(ordo_core::text::capped(&reason.error, ordo_core::text::MAX_ERROR_TEXT).as_ref()),
            Value::from(reason.attempts),
            Value::from(self.instance()),
            Value::from(parked),
            Value::from(i64::try_from(attempt).unwrap_or(i64::MAX)),
            millis(self.sequence_ttl()),
            Value::from(if held { "1" } else { "0" }),
            Value::from(lane_name(entry.lane())),
        ];
        args.extend(fields(entry));
        let reply = Reply::parse(script, script.run(self.client(), keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        match reply.tag() {
            "ok" => reply.string(0),
            "stale" => Err(Error::Stale {
                lease: lease.key().to_owned(),
                attempt,
            }),
            _ => Err(reply.unexpected("unknown outcome")),
        }
    }

    /// Moves `entries` of `key` (all of one lane) into the key's held
    /// stream, behind what it holds, under the fence.
    pub(crate) async fn hold(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        key: &str,
        lane: Lane,
        entries: &[&StreamEntry],
    ) -> Result<()> {
        let script = &SCRIPTS.hold;
        let keys = vec![
            lease.key().to_owned(),
            partition.held(group, key),
            partition.lane(lane).to_owned(),
        ];
        let mut args = vec![
            Value::from(lease.value()),
            Value::from(group),
            Value::from(lane_name(lane)),
        ];
        for entry in entries {
            let fields = fields(entry);
            args.push(Value::from(entry.id()));
            args.push(Value::from(i64::try_from(fields.len()).unwrap_or(i64::MAX)));
            args.extend(fields);
        }
        Reply::parse(script, script.run(self.client(), keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        Ok(())
    }

    /// The next held message of resolved `key`, under the fence (when it
    /// holds none any more, it stops holding, in the same step).
    pub(crate) async fn held_next(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        key: &str,
    ) -> Result<HeldNext> {
        let script = &SCRIPTS.held;
        let keys = vec![
            lease.key().to_owned(),
            partition.held(group, key),
            partition.holding(group),
            partition.parked(group),
        ];
        let args = vec![Value::from(lease.value()), Value::from(key)];
        let mut reply = Reply::parse(script, script.run(self.client(), keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        match reply.tag() {
            "parked" => Ok(HeldNext::Parked),
            "done" => Ok(HeldNext::Done),
            "entry" => {
                let entry = reply.take(0)?;
                let raw = parse_entries(script.name(), Value::Array(vec![entry]))?
                    .pop()
                    .ok_or_else(|| reply.unexpected("no entry"))?;
                Ok(HeldNext::Entry(held_entry(raw)?))
            }
            _ => Err(reply.unexpected("unknown outcome")),
        }
    }

    /// The fenced acknowledgement of held message `id` of resolved `key`,
    /// closing attempt `attempt` (0: none) in the key's sequence.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn ack_held(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        key: &str,
        own: &KeyNames,
        id: &str,
        attempt: u64,
    ) -> Result<()> {
        let script = &SCRIPTS.ack_held;
        let keys = vec![
            lease.key().to_owned(),
            partition.held(group, key),
            own.sequence.clone(),
            partition.attempts(group),
        ];
        let args = vec![
            Value::from(lease.value()),
            Value::from(id),
            Value::from(i64::try_from(attempt).unwrap_or(i64::MAX)),
            millis(self.sequence_ttl()),
        ];
        Reply::parse(script, script.run(self.client(), keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        Ok(())
    }
}
