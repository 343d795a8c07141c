//! The scripts of a hashed partition's parked keys: `park.lua`,
//! `hold.lua`, `held.lua`, `ack_held.lua`.

use std::time::Duration;

use fred::interfaces::FunctionInterface;
use fred::types::Value;
use ordo_core::contract::key::Lane;

use super::{Fence, integer, lane_name, millis};
use crate::error::{Error, Result};
use crate::store::keys::{KeyNames, PartitionKeys};
use crate::store::scripts::{RawEntry, Reply, SCRIPTS, parse_entries};

/// A message to park or hold: its id, lane and fields as published (name,
/// value, ...).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    pub(crate) id: &'a str,
    pub(crate) lane: Lane,
    pub(crate) fields: &'a [Value],
}

/// The arguments of `park.lua`: park `key` of hashed `partition` for
/// `group` on `message`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Park<'a> {
    pub(crate) fence: Fence<'a>,
    pub(crate) partition: &'a PartitionKeys,
    pub(crate) group: &'a str,
    pub(crate) key: &'a str,
    /// The key's names (its attempt sequence).
    pub(crate) own: &'a KeyNames,
    pub(crate) message: Message<'a>,
    /// The error (capped already) and how many attempts failed.
    pub(crate) error: &'a str,
    pub(crate) attempts: u32,
    pub(crate) instance: &'a str,
    /// The attempt it closes in the key's sequence.
    pub(crate) attempt: u64,
    pub(crate) sequence_ttl: Duration,
    /// The message is one of the key's held messages already.
    pub(crate) held: bool,
}

/// `park.lua`. Returns the held id of the parked head; a call of an
/// attempt closed already is [`Error::Stale`].
pub(crate) async fn park<C>(client: &C, park: Park<'_>) -> Result<String>
where
    C: FunctionInterface + Send + Sync,
{
    let Park {
        fence,
        partition,
        group,
        key,
        own,
        message,
        error,
        attempts,
        instance,
        attempt,
        sequence_ttl,
        held,
    } = park;
    let script = &SCRIPTS.park;
    let parked = partition.parked(group);
    let keys = vec![
        fence.lease.to_owned(),
        parked.clone(),
        partition.holding(group),
        partition.held(group, key),
        partition.halted(),
        own.sequence.clone(),
        partition.lane(message.lane).to_owned(),
        partition.attempts(group),
    ];
    let mut args = vec![
        Value::from(fence.value),
        Value::from(key),
        Value::from(group),
        Value::from(message.id),
        Value::from(error),
        Value::from(attempts),
        Value::from(instance),
        Value::from(parked),
        integer(attempt),
        millis(sequence_ttl),
        Value::from(if held { "1" } else { "0" }),
        Value::from(lane_name(message.lane)),
    ];
    args.extend_from_slice(message.fields);
    let reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    match reply.tag() {
        "ok" => reply.string(0),
        "stale" => Err(Error::Stale {
            lease: fence.lease.to_owned(),
            attempt,
        }),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// `hold.lua`: moves `messages` of `key` (all of lane `lane`) into the
/// key's held stream, behind what it holds, under the fence.
pub(crate) async fn hold<C>(
    client: &C,
    fence: Fence<'_>,
    partition: &PartitionKeys,
    group: &str,
    key: &str,
    lane: Lane,
    messages: &[(&str, Vec<Value>)],
) -> Result<()>
where
    C: FunctionInterface + Send + Sync,
{
    let script = &SCRIPTS.hold;
    let keys = vec![
        fence.lease.to_owned(),
        partition.held(group, key),
        partition.lane(lane).to_owned(),
    ];
    let mut args = vec![
        Value::from(fence.value),
        Value::from(group),
        Value::from(lane_name(lane)),
    ];
    for (id, fields) in messages {
        args.push(Value::from(*id));
        args.push(Value::from(i64::try_from(fields.len()).unwrap_or(i64::MAX)));
        args.extend(fields.iter().cloned());
    }
    Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    Ok(())
}

/// What `held.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Held {
    /// The key is parked (again).
    Parked,
    /// The key's next held message.
    Entry(RawEntry),
    /// It holds nothing any more (or the attempt was closed already).
    Done,
}

/// A resolved key whose held messages run, under the fence: the key of
/// hashed `partition` for `group`, its names `own` (its attempt sequence,
/// kept for `sequence_ttl`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved<'a> {
    pub(crate) fence: Fence<'a>,
    pub(crate) partition: &'a PartitionKeys,
    pub(crate) group: &'a str,
    pub(crate) key: &'a str,
    pub(crate) own: &'a KeyNames,
    pub(crate) sequence_ttl: Duration,
}

/// `held.lua`: the next held message of resolved key `of`, as attempt
/// `attempt` of the key.
pub(crate) async fn held<C>(client: &C, of: Resolved<'_>, attempt: u64) -> Result<Held>
where
    C: FunctionInterface + Send + Sync,
{
    let Resolved {
        fence,
        partition,
        group,
        key,
        own,
        sequence_ttl,
    } = of;
    let script = &SCRIPTS.held;
    let keys = vec![
        fence.lease.to_owned(),
        partition.held(group, key),
        partition.holding(group),
        partition.parked(group),
        own.sequence.clone(),
    ];
    let args = vec![
        Value::from(fence.value),
        Value::from(key),
        integer(attempt),
        millis(sequence_ttl),
    ];
    let mut reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    match reply.tag() {
        "parked" => Ok(Held::Parked),
        "done" | "stale" => Ok(Held::Done),
        "entry" => {
            let entry = reply.take(0)?;
            let raw = parse_entries(script.name(), Value::Array(vec![entry]))?
                .pop()
                .ok_or_else(|| reply.unexpected("no entry"))?;
            Ok(Held::Entry(raw))
        }
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// `ack_held.lua`: the fenced acknowledgement of held message `id` of
/// resolved key `of`, closing attempt `attempt` (0: none) in the key's
/// sequence, and taking what message `message_id` applied out of the key's
/// commit marker.
pub(crate) async fn ack_held<C>(
    client: &C,
    of: Resolved<'_>,
    id: &str,
    attempt: u64,
    message_id: Option<&str>,
) -> Result<()>
where
    C: FunctionInterface + Send + Sync,
{
    let Resolved {
        fence,
        partition,
        group,
        key,
        own,
        sequence_ttl,
    } = of;
    let script = &SCRIPTS.ack_held;
    let keys = vec![
        fence.lease.to_owned(),
        partition.held(group, key),
        own.sequence.clone(),
        partition.attempts(group),
        own.commit.clone(),
    ];
    let args = vec![
        Value::from(fence.value),
        Value::from(id),
        integer(attempt),
        millis(sequence_ttl),
        Value::from(message_id.unwrap_or("")),
    ];
    Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    Ok(())
}
