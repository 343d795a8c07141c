//! The scripts of a partition's owner: `read.lua`, `read_hashed.lua`,
//! `close.lua`, `halt.lua`, `reap.lua`.

use std::time::Duration;

use fred::interfaces::FunctionInterface;
use fred::types::Value;
use ordo_core::contract::key::Lane;

use super::{Fence, integer, lane_name, millis};
use crate::error::{Error, Result};
use crate::store::keys::{CONSUMER, PartitionKeys};
use crate::store::scripts::{RawEntry, Reply, SCRIPTS, parse_entries};

/// What a read script (`read.lua`, `read_hashed.lua`) answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Read {
    /// Entries of `lane`, in id order; `pending`: delivered before and not
    /// acknowledged.
    Entries {
        lane: Lane,
        entries: Vec<RawEntry>,
        pending: bool,
    },
    /// The partition is halted on entry `head`.
    Halted { head: String },
    /// Nothing to handle: the lanes' last ids, and how long ago the newest
    /// entry was added.
    Idle {
        primary_last: String,
        backfill_last: String,
        idle_for: Duration,
    },
    /// Neither lane exists.
    Gone,
}

/// `read.lua`: up to `count` entries of `partition` for `group`, pending
/// ones first, primary lane first; under the fence.
pub(crate) async fn read<C>(
    client: &C,
    fence: Fence<'_>,
    partition: &PartitionKeys,
    group: &str,
    count: usize,
) -> Result<Read>
where
    C: FunctionInterface + Send + Sync,
{
    let script = &SCRIPTS.read;
    let keys = vec![
        fence.lease.to_owned(),
        partition.halt(group),
        partition.primary().to_owned(),
        partition.backfill().to_owned(),
    ];
    let args = vec![
        Value::from(fence.value),
        Value::from(group),
        Value::from(CONSUMER),
        Value::from(i64::try_from(count).unwrap_or(i64::MAX)),
    ];
    let mut reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    read_reply(script.name(), &mut reply)
}

/// `read_hashed.lua`: up to `count` entries of hashed `partition` for
/// `group`: the pending ones after `after` (per lane), then new ones, the
/// primary lane first; under the fence.
pub(crate) async fn read_hashed<C>(
    client: &C,
    fence: Fence<'_>,
    partition: &PartitionKeys,
    group: &str,
    count: usize,
    after: &[String; 2],
) -> Result<Read>
where
    C: FunctionInterface + Send + Sync,
{
    let script = &SCRIPTS.read_hashed;
    let keys = vec![
        fence.lease.to_owned(),
        partition.primary().to_owned(),
        partition.backfill().to_owned(),
    ];
    let args = vec![
        Value::from(fence.value),
        Value::from(group),
        Value::from(CONSUMER),
        Value::from(i64::try_from(count).unwrap_or(i64::MAX)),
        Value::from(after[0].as_str()),
        Value::from(after[1].as_str()),
    ];
    let mut reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    read_reply(script.name(), &mut reply)
}

/// What a read script's reply says.
fn read_reply(script: &'static str, reply: &mut Reply) -> Result<Read> {
    match reply.tag() {
        "entries" => {
            let lane = match reply.integer(0)? {
                1 => Lane::Primary,
                2 => Lane::Backfill,
                other => return Err(reply.unexpected(format!("unknown lane {other}"))),
            };
            let entries = parse_entries(script, reply.take(1)?)?;
            let pending = reply.integer(2)? == 1;
            Ok(Read::Entries {
                lane,
                entries,
                pending,
            })
        }
        "halted" => Ok(Read::Halted {
            head: reply.string(0)?,
        }),
        "idle" => Ok(Read::Idle {
            primary_last: reply.string(0)?,
            backfill_last: reply.string(1)?,
            idle_for: Duration::from_millis(reply.integer(2)?.max(0).unsigned_abs()),
        }),
        "gone" => Ok(Read::Gone),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// `close.lua`: closes attempt `attempt` in the attempt sequence
/// `sequence` (kept for `sequence_ttl`) under the fence, and counts a
/// failed attempt on entry `id` in the hash `counts` when given. Returns
/// the entry's failed attempts (0 without one).
pub(crate) async fn close<C>(
    client: &C,
    fence: Fence<'_>,
    sequence: &str,
    attempt: u64,
    sequence_ttl: Duration,
    entry: Option<(String, &str)>,
) -> Result<u32>
where
    C: FunctionInterface + Send + Sync,
{
    let script = &SCRIPTS.close;
    // Without an entry the sequence key stands in (same slot, unused).
    let (counts, id) = entry.unwrap_or_else(|| (sequence.to_owned(), ""));
    let keys = vec![fence.lease.to_owned(), sequence.to_owned(), counts];
    let args = vec![
        Value::from(fence.value),
        integer(attempt),
        millis(sequence_ttl),
        Value::from(id),
    ];
    let reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    match reply.tag() {
        "ok" => Ok(u32::try_from(reply.integer(0)?).unwrap_or(u32::MAX)),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// The arguments of `halt.lua`: halt `partition` for `group` on entry
/// `head` of `lane`, closing attempt `attempt` in `sequence`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Halt<'a> {
    pub(crate) fence: Fence<'a>,
    pub(crate) partition: &'a PartitionKeys,
    pub(crate) group: &'a str,
    /// The lease holder's attempt sequence.
    pub(crate) sequence: &'a str,
    pub(crate) lane: Lane,
    pub(crate) head: &'a str,
    /// The error (capped already) and how many attempts failed.
    pub(crate) error: &'a str,
    pub(crate) attempts: u32,
    pub(crate) instance: &'a str,
    pub(crate) attempt: u64,
    pub(crate) sequence_ttl: Duration,
}

/// `halt.lua`. A call of an attempt closed already is [`Error::Stale`].
pub(crate) async fn halt<C>(client: &C, halt: Halt<'_>) -> Result<()>
where
    C: FunctionInterface + Send + Sync,
{
    let Halt {
        fence,
        partition,
        group,
        sequence,
        lane,
        head,
        error,
        attempts,
        instance,
        attempt,
        sequence_ttl,
    } = halt;
    let script = &SCRIPTS.halt;
    let halt_key = partition.halt(group);
    let keys = vec![
        fence.lease.to_owned(),
        halt_key.clone(),
        partition.halted(),
        sequence.to_owned(),
    ];
    let args = vec![
        Value::from(fence.value),
        Value::from(halt_key),
        Value::from(group),
        Value::from(partition.category()),
        Value::from(partition.key()),
        Value::from(lane_name(lane)),
        Value::from(head),
        Value::from(error),
        Value::from(attempts),
        Value::from(instance),
        integer(attempt),
        millis(sequence_ttl),
    ];
    let reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    match reply.tag() {
        "ok" => Ok(()),
        "stale" => Err(Error::Stale {
            lease: fence.lease.to_owned(),
            attempt,
        }),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// What `reap.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reap {
    /// The partition was retired.
    Reaped,
    /// Not drained or not idle long enough: try again after this long.
    Busy(Duration),
    /// The lanes have groups the call did not name: these.
    Groups(Vec<String>),
}

/// `reap.lua`: retires `partition` under the fence if every group of
/// `groups` has drained it and no entry was added for `idle`.
pub(crate) async fn reap<C>(
    client: &C,
    fence: Fence<'_>,
    partition: &PartitionKeys,
    idle: Duration,
    groups: &[String],
) -> Result<Reap>
where
    C: FunctionInterface + Send + Sync,
{
    let script = &SCRIPTS.reap;
    let mut keys = vec![
        fence.lease.to_owned(),
        partition.primary().to_owned(),
        partition.backfill().to_owned(),
        partition.index(),
        partition.published(Lane::Primary),
        partition.published(Lane::Backfill),
        partition.doorbell(),
    ];
    let mut args = vec![
        Value::from(fence.value),
        Value::from(partition.key()),
        millis(idle),
    ];
    for group in groups {
        let leased = partition.lease(group);
        keys.extend([
            partition.halt(group),
            leased.lease,
            leased.generation,
            leased.commit,
            leased.sequence,
            partition.attempts(group),
            partition.holding(group),
        ]);
        args.push(Value::from(group.as_str()));
    }
    let reply =
        Reply::parse(script, script.run(client, keys, args).await?)?.unfenced(fence.lease, fence.value)?;
    match reply.tag() {
        "reaped" => Ok(Reap::Reaped),
        "busy" => Ok(Reap::Busy(Duration::from_millis(
            reply.integer(0)?.max(1).unsigned_abs(),
        ))),
        "groups" => Ok(Reap::Groups(
            reply
                .into_rest()
                .into_iter()
                .filter_map(|v| v.as_str().map(|s| s.into_owned()))
                .collect(),
        )),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}
