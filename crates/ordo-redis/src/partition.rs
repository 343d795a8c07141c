//! Fenced partition operations: each one atomic script that first checks
//! "do I still hold the lease at this token?".
//!
//! [`Partitions`] is what the consumer's workers use; it is public so that
//! tests and tools can drive an owner step by step (and prove, for example,
//! that a stale owner's reclaim is refused).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{HashesInterface, KeysInterface};
use fred::types::Value;
use ordo_core::key::Lane;
use ordo_core::message::Envelope;

use crate::ack::{self, Ack};
use crate::error::{Error, Result};
use crate::keys::{CONSUMER, LeaseKeys, PartitionKeys, halted_directory};
use crate::lease::{self, Lease, Owner, millis};
use crate::scripts::{RawEntry, Reply, SCRIPTS, parse_entries};

/// An entry of a partition lane, read under a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    id: String,
    lane: Lane,
    type_name: Option<String>,
    key: Option<String>,
    envelope: Option<String>,
}

impl StreamEntry {
    pub(crate) fn from_raw(raw: RawEntry, lane: Lane) -> Self {
        Self {
            type_name: raw.field("type").map(str::to_owned),
            key: raw.field("key").map(str::to_owned),
            envelope: raw.field("envelope").map(str::to_owned),
            id: raw.id,
            lane,
        }
    }

    /// The stream entry id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The lane it was read from.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// The message type name, as published.
    pub fn type_name(&self) -> Option<&str> {
        self.type_name.as_deref()
    }

    /// The partition key, written with the entry when its partition is
    /// hashed (holds many keys).
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The envelope as published (JSON), when the entry has one.
    pub fn envelope_json(&self) -> Option<&str> {
        self.envelope.as_deref()
    }

    /// Decodes the envelope.
    pub fn decode(&self) -> Result<Envelope, DecodeEntryError> {
        let Some(json) = &self.envelope else {
            return Err(DecodeEntryError {
                id: self.id.clone(),
                source: None,
            });
        };
        serde_json::from_str(json).map_err(|source| DecodeEntryError {
            id: self.id.clone(),
            source: Some(source),
        })
    }
}

/// A stream entry that does not hold a valid Ordo envelope.
#[derive(Debug, thiserror::Error)]
#[error("stream entry {id} does not hold a valid Ordo envelope")]
pub struct DecodeEntryError {
    id: String,
    #[source]
    source: Option<serde_json::Error>,
}

/// What a fenced read found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadOutcome {
    /// The next entries to handle, in order: the lane's pending entries
    /// (left by a previous owner or an interrupted batch) before new ones,
    /// and the primary lane before the backfill lane.
    Entries {
        /// The lane they come from.
        lane: Lane,
        /// The entries, in id order.
        entries: Vec<StreamEntry>,
        /// Whether they were pending: delivered before (to a previous owner,
        /// or in a batch that was interrupted) and not acknowledged.
        pending: bool,
    },
    /// The partition is halted on a poison message.
    Halted {
        /// The halted head's entry id.
        head: String,
    },
    /// Nothing to handle.
    Idle(Idle),
    /// Neither lane exists: the partition was reaped.
    Gone,
}

/// An idle partition's position, for waiting and reaping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    /// The last id of the primary lane (`0-0` when it does not exist).
    pub primary_last: String,
    /// The last id of the backfill lane (`0-0` when it does not exist).
    pub backfill_last: String,
    /// How long ago the newest entry was added (server clock).
    pub idle_for: Duration,
}

/// What a reap attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReapOutcome {
    /// The partition was retired.
    Reaped,
    /// The partition is not drained or not idle long enough yet.
    Busy {
        /// When to try again.
        retry_in: Duration,
    },
}

/// Why a partition halts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaltReason {
    /// The lane of the poison message.
    pub lane: Lane,
    /// The poison message's entry id.
    pub head: String,
    /// The last error, as text.
    pub error: String,
    /// How many times it was attempted.
    pub attempts: u32,
}

/// Fenced operations on partitions, for one instance.
#[derive(Debug, Clone)]
pub struct Partitions {
    client: Pool,
    owner: Owner,
    lease_ttl: Duration,
    /// The consumer groups seen on each category's lanes, so the reap
    /// script can be given their keys up front (it names them all in KEYS);
    /// learnt from the script's `groups` reply.
    groups: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
}

impl Partitions {
    /// Operations on `client` for the instance `instance`, whose leases live
    /// `lease_ttl` without renewal. Each call draws a fresh nonce: its
    /// leases (and those of its clones) are `{instance}:{nonce}:{token}`, so
    /// two `Partitions` built with one instance id are two owners (two
    /// processes), and each reports the other's leases as
    /// [`Error::DuplicateInstance`].
    pub fn new(client: Pool, instance: impl Into<String>, lease_ttl: Duration) -> Self {
        Self {
            client,
            owner: Owner::new(&instance.into()),
            lease_ttl,
            groups: Arc::default(),
        }
    }

    /// The instance id (the first part of every lease value it holds).
    pub fn instance(&self) -> &str {
        self.owner.instance()
    }

    /// `{instance}:{nonce}`: every lease value this owner holds, without
    /// its token.
    pub fn identity(&self) -> &str {
        self.owner.identity()
    }

    /// The client.
    pub fn client(&self) -> &Pool {
        &self.client
    }

    /// The lease time-to-live.
    pub fn lease_ttl(&self) -> Duration {
        self.lease_ttl
    }

    /// How long a lease's attempt sequence is kept after its last change.
    pub(crate) fn sequence_ttl(&self) -> Duration {
        self.lease_ttl * crate::lease::SEQUENCE_TTL_FACTOR
    }

    /// Acquires `group`'s lease on `partition` if it is free (or renews it
    /// when this owner holds it already).
    pub async fn acquire(&self, group: &str, partition: &PartitionKeys) -> Result<Option<Lease>> {
        self.acquire_keys(&partition.lease(group)).await
    }

    /// Acquires the lease `keys` if it is free.
    pub async fn acquire_keys(&self, keys: &LeaseKeys) -> Result<Option<Lease>> {
        let mut leases = lease::acquire(
            self.client.next(),
            &self.owner,
            self.lease_ttl,
            std::slice::from_ref(keys),
            1,
        )
        .await?;
        Ok(leases.pop().flatten())
    }

    /// Acquires up to `limit` free leases among `candidates`, in order, with
    /// one call per Redis node.
    pub async fn acquire_many(&self, candidates: &[LeaseKeys], limit: usize) -> Result<Vec<Option<Lease>>> {
        lease::acquire(self.client.next(), &self.owner, self.lease_ttl, candidates, limit).await
    }

    /// Renews `leases` with one call per Redis node; returns those that were lost.
    pub async fn renew<'l>(&self, leases: &'l [Lease]) -> Result<Vec<&'l Lease>> {
        let held: Vec<(String, String)> = leases
            .iter()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let lost = lease::renew(self.client.next(), self.lease_ttl, &held).await?;
        Ok(lost.into_iter().filter_map(|i| leases.get(i)).collect())
    }

    /// Releases `lease`; returns whether it was still held.
    pub async fn release(&self, lease: &Lease) -> Result<bool> {
        lease::release(&self.client, lease).await
    }

    /// Checks that `lease` is still held, without touching anything:
    /// [`Error::Fenced`] when another instance holds it or it expired. A
    /// worker asks before running a handler again after a failure, so a
    /// stale owner never re-runs a message the new owner may be running.
    pub async fn check(&self, lease: &Lease) -> Result<()> {
        let holder: Option<String> = self.client.get(lease.key()).await?;
        if holder.as_deref() == Some(lease.value()) {
            return Ok(());
        }
        Err(Error::Fenced {
            lease: lease.key().to_owned(),
            expected: lease.value().to_owned(),
            holder,
        })
    }

    /// The fenced read: up to `count` entries of `partition` for `group`,
    /// pending ones first (this is where a new owner reclaims what the
    /// previous owner left unacknowledged), primary lane first.
    pub async fn read(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        count: usize,
    ) -> Result<ReadOutcome> {
        let script = &SCRIPTS.read;
        let keys = vec![
            lease.key().to_owned(),
            partition.halt(group),
            partition.primary().to_owned(),
            partition.backfill().to_owned(),
        ];
        let args = vec![
            Value::from(lease.value()),
            Value::from(group),
            Value::from(CONSUMER),
            Value::from(i64::try_from(count).unwrap_or(i64::MAX)),
        ];
        let mut reply = Reply::parse(script, script.run(&self.client, keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        read_outcome(script.name(), &mut reply)
    }

    /// The fenced read of a hashed partition: the pending entries after
    /// `after` (per lane: the last entry this owner got from it, `0` when
    /// none yet), then new ones; the primary lane before the backfill lane.
    /// Never [`ReadOutcome::Halted`]: a hashed partition parks keys, not
    /// itself.
    pub async fn read_hashed(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        count: usize,
        after: &[String; 2],
    ) -> Result<ReadOutcome> {
        let script = &SCRIPTS.read_hashed;
        let keys = vec![
            lease.key().to_owned(),
            partition.primary().to_owned(),
            partition.backfill().to_owned(),
        ];
        let args = vec![
            Value::from(lease.value()),
            Value::from(group),
            Value::from(CONSUMER),
            Value::from(i64::try_from(count).unwrap_or(i64::MAX)),
            Value::from(after[0].as_str()),
            Value::from(after[1].as_str()),
        ];
        let mut reply = Reply::parse(script, script.run(&self.client, keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        read_outcome(script.name(), &mut reply)
    }

    /// The fenced read-back of `key`'s entries of `partition`'s `lane` with
    /// ids in `(after, up_to]` (delivered, pending, and not kept in memory
    /// by the owner of the hashed partition): at most `count` of them,
    /// looking at no more than `scan` entries of the lane. Returns them and
    /// the id looked at last, or `None` when the read reached `up_to`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn refill(
        &self,
        lease: &Lease,
        partition: &PartitionKeys,
        lane: Lane,
        key: &str,
        (after, up_to): (&str, &str),
        count: usize,
        scan: usize,
    ) -> Result<(Vec<StreamEntry>, Option<String>)> {
        let script = &SCRIPTS.refill;
        let keys = vec![lease.key().to_owned(), partition.lane(lane).to_owned()];
        let args = vec![
            Value::from(lease.value()),
            Value::from(key),
            Value::from(after),
            Value::from(up_to),
            Value::from(i64::try_from(count).unwrap_or(i64::MAX)),
            Value::from(i64::try_from(scan).unwrap_or(i64::MAX)),
        ];
        let mut reply = Reply::parse(script, script.run(&self.client, keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        let entries = parse_entries(script.name(), reply.take(0)?)?
            .into_iter()
            .map(|raw| StreamEntry::from_raw(raw, lane))
            .collect();
        let last = reply.string(1)?;
        Ok((entries, (!last.is_empty()).then_some(last)))
    }

    /// The fenced acknowledgement of handled entries of one lane (which also
    /// trims what every group has acknowledged). Returns whether the primary
    /// lane has entries waiting, so a backfill batch can yield to it.
    pub async fn ack(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        lane: Lane,
        ids: &[&str],
    ) -> Result<bool> {
        self.ack_attempt(lease, group, partition, lane, ids, 0).await
    }

    /// [`Partitions::ack`] that also closes every attempt up to `attempt`
    /// (numbered per lease, from 1, by its holder; 0 closes nothing): a
    /// [`RedisFence`](crate::RedisFence) commit of a closed attempt that
    /// reaches Redis late is refused ([`Error::Stale`]).
    pub async fn ack_attempt(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        lane: Lane,
        ids: &[&str],
        attempt: u64,
    ) -> Result<bool> {
        self.ack_handled(lease, group, partition, lane, ids, attempt, true)
            .await
    }

    /// [`Partitions::ack_attempt`]; `had_failures`: whether the ids may have
    /// failed attempts on record (to clear).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn ack_handled(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        lane: Lane,
        ids: &[&str],
        attempt: u64,
        had_failures: bool,
    ) -> Result<bool> {
        let one = Ack::new(lease, group, partition, lane, &[]).of(ids, attempt, had_failures);
        let mut acked = self.acknowledge(std::slice::from_ref(&one)).await?;
        acked
            .pop()
            .ok_or_else(|| Error::protocol(SCRIPTS.ack.name(), "no outcome"))?
    }

    /// Acknowledges `acks` (of any partitions, under any leases) with one
    /// script call per Redis node, calls to different nodes at once, and
    /// returns each one's outcome in order: each is checked against its own
    /// lease and done or refused ([`Error::Fenced`]) on its own. The error
    /// of a failed call (`Err` outside) leaves its acknowledgements done or
    /// not; sending them again is harmless.
    pub async fn acknowledge(&self, acks: &[Ack]) -> Result<Vec<ack::Acked>> {
        ack::acknowledge(self.client.next(), self.sequence_ttl(), acks).await
    }

    /// Closes every attempt up to `attempt` of `lease`'s holder, under the
    /// fence ([`Error::Fenced`] when the lease is no longer held): a
    /// [`RedisFence`](crate::RedisFence) commit of a closed attempt that
    /// reaches Redis late is refused.
    pub async fn close_attempt(&self, lease: &Lease, attempt: u64) -> Result<()> {
        self.close(lease, &lease.keys().sequence, attempt, None)
            .await
            .map(|_| ())
    }

    /// Records that attempt `attempt` (numbered per lease) on the entry
    /// `id` of `partition` failed: closes it like
    /// [`Partitions::close_attempt`] and counts the failure with the
    /// pending entry, so the next owner (or this one after a restart) goes
    /// on with the retry budget left. Returns how many attempts on the
    /// entry failed so far.
    pub async fn attempt_failed(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        id: &str,
        attempt: u64,
    ) -> Result<u32> {
        self.attempt_failed_in(lease, &lease.keys().sequence, group, partition, Some(id), attempt)
            .await
    }

    /// [`Partitions::attempt_failed`] closing the attempt in `sequence` (a
    /// key's own, in a hashed partition); with no entry `id` (a transient
    /// failure, which uses up no attempt) the attempt is closed and
    /// nothing counted, and the reply is 0.
    pub(crate) async fn attempt_failed_in(
        &self,
        lease: &Lease,
        sequence: &str,
        group: &str,
        partition: &PartitionKeys,
        id: Option<&str>,
        attempt: u64,
    ) -> Result<u32> {
        let counts = id.map(|id| (partition.attempts(group), id));
        self.close(lease, sequence, attempt, counts).await
    }

    /// How many attempts on the pending entry `id` of `partition` failed
    /// (recorded by [`Partitions::attempt_failed`], cleared by the
    /// acknowledgement and by an operator's decision on a halted head).
    pub async fn failed_attempts(&self, group: &str, partition: &PartitionKeys, id: &str) -> Result<u32> {
        let count: Option<u32> = self.client.hget(partition.attempts(group), id).await?;
        Ok(count.unwrap_or(0))
    }

    async fn close(
        &self,
        lease: &Lease,
        sequence: &str,
        attempt: u64,
        entry: Option<(String, &str)>,
    ) -> Result<u32> {
        let script = &SCRIPTS.close;
        // Without an entry the sequence key stands in (same slot, unused).
        let (counts, id) = entry.unwrap_or_else(|| (sequence.to_owned(), ""));
        let keys = vec![lease.key().to_owned(), sequence.to_owned(), counts];
        let args = vec![
            Value::from(lease.value()),
            attempt_value(attempt),
            millis(self.sequence_ttl()),
            Value::from(id),
        ];
        let reply = Reply::parse(script, script.run(&self.client, keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        match reply.tag() {
            "ok" => Ok(u32::try_from(reply.integer(0)?).unwrap_or(u32::MAX)),
            _ => Err(reply.unexpected("unknown outcome")),
        }
    }

    /// Halts `partition` for `group` under the fence, recording why.
    pub async fn halt(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        reason: &HaltReason,
    ) -> Result<()> {
        self.halt_attempt(lease, group, partition, reason, 0).await
    }

    /// [`Partitions::halt`] by attempt `attempt` of the lease's holder (the
    /// one that failed last), which it closes: the same halt arriving again
    /// later (resent, or delayed on its connection) is refused with
    /// [`Error::Stale`] and cannot halt a partition an operator resolved
    /// meanwhile.
    pub async fn halt_attempt(
        &self,
        lease: &Lease,
        group: &str,
        partition: &PartitionKeys,
        reason: &HaltReason,
        attempt: u64,
    ) -> Result<()> {
        // The halted set's bucket is listed before it can be written to,
        // so an operator reading the directory never misses a halt.
        crate::buckets::list(&self.client, &halted_directory(), &[partition.slot()]).await?;
        let script = &SCRIPTS.halt;
        let halt_key = partition.halt(group);
        let keys = vec![
            lease.key().to_owned(),
            halt_key.clone(),
            partition.halted(),
            lease.keys().sequence.clone(),
        ];
        let args = vec![
            Value::from(lease.value()),
            Value::from(halt_key),
            Value::from(group),
            Value::from(partition.category()),
            Value::from(partition.key()),
            Value::from(lane_name(reason.lane)),
            Value::from(reason.head.as_str()),
            Value::from(reason.error.as_str()),
            Value::from(reason.attempts),
            Value::from(self.owner.instance()),
            attempt_value(attempt),
            millis(self.sequence_ttl()),
        ];
        let reply = Reply::parse(script, script.run(&self.client, keys, args).await?)?
            .unfenced(lease.key(), lease.value())?;
        match reply.tag() {
            "ok" => Ok(()),
            "stale" => Err(Error::Stale {
                lease: lease.key().to_owned(),
                attempt,
            }),
            _ => Err(reply.unexpected("unknown outcome")),
        }
    }

    /// Retires `partition` if every group has drained it and no entry was
    /// added for `idle`; fenced by `lease`.
    pub async fn reap(
        &self,
        lease: &Lease,
        partition: &PartitionKeys,
        idle: Duration,
    ) -> Result<ReapOutcome> {
        // Two tries: the second with the groups the first one reported.
        for _ in 0..2 {
            let groups = self.known_groups(partition.category());
            let script = &SCRIPTS.reap;
            let mut keys = vec![
                lease.key().to_owned(),
                partition.primary().to_owned(),
                partition.backfill().to_owned(),
                partition.index(),
                partition.published(Lane::Primary),
                partition.published(Lane::Backfill),
                partition.doorbell(),
            ];
            let mut args = vec![
                Value::from(lease.value()),
                Value::from(partition.key()),
                millis(idle),
            ];
            for group in &groups {
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
            let reply = Reply::parse(script, script.run(&self.client, keys, args).await?)?
                .unfenced(lease.key(), lease.value())?;
            match reply.tag() {
                "reaped" => return Ok(ReapOutcome::Reaped),
                "busy" => {
                    return Ok(ReapOutcome::Busy {
                        retry_in: Duration::from_millis(reply.integer(0)?.max(1).unsigned_abs()),
                    });
                }
                "groups" => {
                    let found = reply
                        .into_rest()
                        .into_iter()
                        .filter_map(|v| v.as_str().map(|s| s.into_owned()));
                    self.learn_groups(partition.category(), found);
                }
                _ => return Err(reply.unexpected("unknown outcome")),
            }
        }
        // A group was created between the two tries: the next attempt has it.
        Ok(ReapOutcome::Busy {
            retry_in: Duration::from_millis(1),
        })
    }

    /// The groups seen on `category`'s lanes so far.
    fn known_groups(&self, category: &str) -> Vec<String> {
        let groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups
            .get(category)
            .map(|g| g.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn learn_groups(&self, category: &str, found: impl Iterator<Item = String>) {
        let mut groups = self.groups.lock().unwrap_or_else(PoisonError::into_inner);
        groups.entry(category.to_owned()).or_default().extend(found);
    }
}

/// An attempt number as a script argument.
fn attempt_value(attempt: u64) -> Value {
    Value::from(i64::try_from(attempt).unwrap_or(i64::MAX))
}

/// What a read script's reply (`read.lua`, `read_hashed.lua`) says.
fn read_outcome(script: &'static str, reply: &mut Reply) -> Result<ReadOutcome> {
    match reply.tag() {
        "entries" => {
            let lane = match reply.integer(0)? {
                1 => Lane::Primary,
                2 => Lane::Backfill,
                other => return Err(reply.unexpected(format!("unknown lane {other}"))),
            };
            let entries = parse_entries(script, reply.take(1)?)?
                .into_iter()
                .map(|raw| StreamEntry::from_raw(raw, lane))
                .collect();
            let pending = reply.integer(2)? == 1;
            Ok(ReadOutcome::Entries {
                lane,
                entries,
                pending,
            })
        }
        "halted" => Ok(ReadOutcome::Halted {
            head: reply.string(0)?,
        }),
        "idle" => Ok(ReadOutcome::Idle(Idle {
            primary_last: reply.string(0)?,
            backfill_last: reply.string(1)?,
            idle_for: Duration::from_millis(reply.integer(2)?.max(0).unsigned_abs()),
        })),
        "gone" => Ok(ReadOutcome::Gone),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// How a lane is written in halt records.
pub(crate) fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Primary => "primary",
        Lane::Backfill => "backfill",
    }
}

/// The lane named `name` in a halt record.
pub(crate) fn parse_lane(name: &str) -> Result<Lane> {
    match name {
        "primary" => Ok(Lane::Primary),
        "backfill" => Ok(Lane::Backfill),
        other => Err(Error::protocol("halt record", format!("unknown lane `{other}`"))),
    }
}
