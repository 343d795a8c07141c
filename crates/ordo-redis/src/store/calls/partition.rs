//! The scripts of a partition's owner: `read.lua`, `read_hashed.lua`,
//! `close.lua`, `halt.lua`, `reap.lua`.

use std::time::Duration;

use fred::clients::Client;
use fred::error::ErrorKind;
use fred::interfaces::{ClientLike, FunctionInterface, HashesInterface, KeysInterface, StreamsInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
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

/// The fenced read of the primary lane without a script, when it finds
/// entries there: one transaction (`MULTI`/`EXEC`, sent as a pipeline) of
/// the lease's `GET`, the halt record's `HGET`, and the lane's pending
/// entries then new ones (`XREADGROUP` from `0`, then from `>`). A script
/// would copy every entry it read into Lua and back, which costs Redis more
/// than the read itself.
///
/// What the transaction does is what `read.lua` does when the primary lane
/// has entries, with one difference: its reads run whatever the lease and
/// the halt say, and the caller drops what they return when either refuses
/// it. Entries that a refused read (or a read whose pending entries came
/// first) took from `>` stay pending in the group, whose one consumer every
/// owner reads as; every read, of either kind, takes pending entries first,
/// so the holder gets them next, in order, as delivered before. Nothing is
/// lost or reordered.
///
/// [`Direct::Script`] when the script must answer: the lane has nothing
/// (the script tells idle from gone and reads the backfill lane), a pending
/// entry was deleted from the stream (the script acknowledges it), or Redis
/// refused a command (a lane without the group, which the script creates).
/// [`Direct::Refused`] when the connection's ACL user may not run a
/// transaction (a role set up by an earlier release): the caller then reads
/// by script from then on.
pub(crate) async fn read_primary(
    client: &Client,
    fence: Fence<'_>,
    partition: &PartitionKeys,
    group: &str,
    count: usize,
) -> Result<Direct> {
    let lane = partition.primary();
    let count = u64::try_from(count).unwrap_or(u64::MAX);
    // A pipeline rather than fred's transaction, which first waits for every
    // reply its connection has in flight: the router writes a pipeline's
    // commands one after the other, so nothing else comes between `MULTI`
    // and `EXEC`. Both go to the lane's slot on a Redis Cluster. Should the
    // connection break midway, fred sends the unanswered rest again on a
    // new one, outside the transaction: its `EXEC` then fails, and its reads
    // have only taken entries in as pending, as a refused read does.
    let slot = ClusterHash::Custom(fred::util::redis_keyslot(lane.as_bytes()));
    let pipeline = client.pipeline();
    let () = pipeline
        .custom(
            CustomCommand::new_static("MULTI", slot.clone(), false),
            Vec::<Value>::new(),
        )
        .await?;
    let () = pipeline.get(fence.lease).await?;
    let () = pipeline.hget(partition.halt(group), "head").await?;
    let () = pipeline
        .xreadgroup(group, CONSUMER, Some(count), None, false, lane, "0")
        .await?;
    let () = pipeline
        .xreadgroup(group, CONSUMER, Some(count), None, false, lane, ">")
        .await?;
    let () = pipeline
        .custom(
            CustomCommand::new_static("EXEC", slot, false),
            Vec::<Value>::new(),
        )
        .await?;
    let mut answers: Vec<fred::prelude::FredResult<Value>> = pipeline.try_all().await;
    if let Some(refused) = answers.iter().find_map(|answer| {
        answer
            .as_ref()
            .err()
            .filter(|error| error.details().contains("NOPERM"))
    }) {
        tracing::debug!(error = %refused, "a partition read in a transaction was refused");
        return Ok(Direct::Refused);
    }
    let replies = match answers.pop() {
        Some(Ok(replies)) if answers.len() == 5 => replies.into_array(),
        // An error reply of Redis's own (a lane without the group): the
        // script's path handles it, or says what it is.
        Some(Err(error)) if matches!(error.kind(), ErrorKind::Unknown | ErrorKind::InvalidArgument) => {
            return Ok(Direct::Script);
        }
        Some(Err(error)) => return Err(error.into()),
        _ => {
            return Err(Error::protocol(
                "read",
                format!("{} replies to 6 commands", answers.len() + 1),
            ));
        }
    };
    let [holder, head, pending, fresh]: [Value; 4] = replies.try_into().map_err(|replies: Vec<Value>| {
        Error::protocol("read", format!("{} replies to 4 commands", replies.len()))
    })?;
    let holder = holder.as_str().map(|holder| holder.into_owned());
    if holder.as_deref() != Some(fence.value) {
        return Err(Error::Fenced {
            lease: fence.lease.to_owned(),
            expected: fence.value.to_owned(),
            holder: holder.filter(|holder| !holder.is_empty()),
        });
    }
    if let Some(head) = head.as_str() {
        return Ok(Direct::Read(Read::Halted {
            head: head.into_owned(),
        }));
    }
    let (entries, pending) = match lane_entries(pending) {
        entries if !entries.is_empty() => (entries, true),
        _ => (lane_entries(fresh), false),
    };
    // A pending entry deleted from the stream comes without fields.
    let deleted = |entry: &Value| match entry {
        Value::Array(parts) => !matches!(parts.get(1), Some(Value::Array(_) | Value::Map(_))),
        _ => true,
    };
    if entries.is_empty() || entries.iter().any(deleted) {
        return Ok(Direct::Script);
    }
    Ok(Direct::Read(Read::Entries {
        lane: Lane::Primary,
        entries: parse_entries("read", Value::Array(entries))?,
        pending,
    }))
}

/// What [`read_primary`] came to.
#[derive(Debug)]
pub(crate) enum Direct {
    /// The read's outcome.
    Read(Read),
    /// The script must answer.
    Script,
    /// The ACL user may not run a transaction: the script must answer,
    /// this time and every other.
    Refused,
}

/// The entries of an `XREADGROUP` reply of one stream: nil, or the stream
/// with its entries (an array of one pair in RESP2, a map in RESP3).
fn lane_entries(reply: Value) -> Vec<Value> {
    match reply {
        Value::Array(streams) => streams
            .into_iter()
            .next()
            .map(|stream| match stream {
                Value::Array(mut pair) if pair.len() == 2 => {
                    pair.pop().map(Value::into_array).unwrap_or_default()
                }
                _ => Vec::new(),
            })
            .unwrap_or_default(),
        Value::Map(streams) => streams
            .inner()
            .into_iter()
            .next()
            .map(|(_, entries)| entries.into_array())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
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
