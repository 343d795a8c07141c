//! Fenced partition operations: each one atomic script that first checks
//! "do I still hold the lease at this token?".
//!
//! [`Partitions`] is what the consumer's workers use; it is public so that
//! tests and tools can drive an owner step by step (and prove, for example,
//! that a stale owner's reclaim is refused).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::clients::Pool;
use fred::interfaces::{HashesInterface, KeysInterface};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;

use crate::error::{Error, Result};
use crate::owner::ack::{self, Ack};
use crate::owner::lease::{self, Lease};
use crate::owner::member::{Membership, Renewal};
use crate::store::calls;
pub(crate) use crate::store::calls::lane_name;
use crate::store::calls::partition::{Direct, Halt, Read, Reap};
use crate::store::keys::{LeaseKeys, PartitionKeys};
use crate::store::scripts::{ENTRY_FIELDS, RawEntry};

/// An entry of a partition lane, read under a lease.
///
/// Stream content is untrusted: an entry may lack an envelope, hold one
/// that is not JSON, not UTF-8 text at all, or one that names another key
/// or category than the stream it sits in. Such an entry is read like any
/// other; [`StreamEntry::decode_for`] says what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    /// The id and the text fields share the buffer of the reply they were
    /// read from.
    id: Str,
    lane: Lane,
    type_name: Option<Str>,
    key: Option<Str>,
    envelope: Option<Str>,
    /// Ordo's fields of the entry whose value is not UTF-8 text, as they
    /// are (empty for every entry Ordo wrote).
    binary: Vec<(&'static str, Vec<u8>)>,
}

impl StreamEntry {
    /// About how many bytes the entry holds in memory: its fields and
    /// their text, to bound what an owner keeps read ahead.
    pub(crate) fn size(&self) -> usize {
        let text = |value: &Option<Str>| value.as_ref().map_or(0, |text| text.len());
        std::mem::size_of::<Self>()
            + self.id.len()
            + text(&self.type_name)
            + text(&self.key)
            + text(&self.envelope)
            + self.binary.iter().map(|(_, value)| value.len()).sum::<usize>()
    }

    pub(crate) fn from_raw(mut raw: RawEntry, lane: Lane) -> Self {
        let binary = ENTRY_FIELDS
            .iter()
            .filter_map(|&name| raw.take_binary(name).map(|value| (name, value)))
            .collect();
        Self {
            type_name: raw.take_field("type"),
            key: raw.take_field("key"),
            envelope: raw.take_field("envelope"),
            binary,
            id: raw.id,
            lane,
        }
    }

    /// The entry with its text in buffers of its own. An entry shares the
    /// buffer of the reply it was read from, so one kept a while (queued
    /// to a key of a hashed partition, behind a slow key) would otherwise
    /// keep the whole reply.
    pub(crate) fn detached(self) -> Self {
        let own = |text: Str| Str::from(&*text);
        Self {
            id: own(self.id),
            lane: self.lane,
            type_name: self.type_name.map(own),
            key: self.key.map(own),
            envelope: self.envelope.map(own),
            binary: self.binary,
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

    /// The message type name, as published (`None` when the entry has no
    /// `type` field or it is not text).
    pub fn type_name(&self) -> Option<&str> {
        self.type_name.as_deref()
    }

    /// The partition key, written with the entry when its partition is
    /// hashed (holds many keys); `None` when it has none or it is not text.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The envelope as published (JSON), when the entry has one that is
    /// text.
    pub fn envelope_json(&self) -> Option<&str> {
        self.envelope.as_deref()
    }

    /// The fields of the entry (`type`, `key`, `envelope`) whose value is
    /// not UTF-8 text, as they are: an entry no Ordo publisher wrote.
    pub fn binary_fields(&self) -> impl Iterator<Item = (&'static str, &[u8])> {
        self.binary.iter().map(|(name, value)| (*name, value.as_slice()))
    }

    /// The value of field `name` (`type`, `key` or `envelope`) to write
    /// again elsewhere, text or bytes as it was.
    pub(crate) fn raw_field(&self, name: &str) -> Option<fred::types::Value> {
        let text = match name {
            "type" => self.type_name(),
            "key" => self.key(),
            "envelope" => self.envelope_json(),
            _ => None,
        };
        match text {
            Some(text) => Some(fred::types::Value::from(text)),
            None => self
                .binary
                .iter()
                .find(|(field, _)| *field == name)
                .map(|(_, value)| fred::types::Value::Bytes(value.clone().into())),
        }
    }

    /// Decodes the envelope.
    pub fn decode(&self) -> Result<Envelope, DecodeEntryError> {
        let error = |why| DecodeEntryError {
            id: self.id.to_string(),
            why,
            source: None,
        };
        if let Some((field, value)) = self.binary.first() {
            return Err(error(Why::NotText {
                field,
                bytes: value.len(),
            }));
        }
        let Some(json) = &self.envelope else {
            return Err(error(Why::NoEnvelope));
        };
        serde_json::from_str(json).map_err(|source| DecodeEntryError {
            id: self.id.to_string(),
            why: Why::NotAnEnvelope,
            source: Some(source),
        })
    }

    /// Decodes the envelope of an entry read from the stream of `category`
    /// and `key` (a key's own partition, or a key of a hashed partition;
    /// `None`: the category's base stream, of no key): [`StreamEntry::decode`],
    /// refused also when the envelope names another category or key, or
    /// the entry's `key` field another key. A message is handled only in
    /// its own key's stream, under that key's lease and order: an entry
    /// written by hand into another key's stream never runs there.
    pub fn decode_for(&self, category: &str, key: Option<&str>) -> Result<Envelope, DecodeEntryError> {
        let envelope = self.decode()?;
        let misplaced = envelope.category != category
            || key.is_some_and(|key| {
                envelope.partition_key.as_deref() != Some(key) || self.key().is_some_and(|field| field != key)
            });
        if misplaced {
            return Err(DecodeEntryError {
                id: self.id.to_string(),
                why: Why::Misplaced(Box::new(Misplaced {
                    category: envelope.category,
                    key: envelope
                        .partition_key
                        .or_else(|| self.key.as_deref().map(str::to_owned)),
                    expected_category: category.to_owned(),
                    expected_key: key.map(str::to_owned),
                })),
                source: None,
            });
        }
        Ok(envelope)
    }
}

/// A stream entry that does not hold a valid Ordo envelope (of the stream
/// it sits in): it can never be handled, so it halts (or parks) its key at
/// once, or, on a base stream, is dead-lettered.
#[derive(Debug, thiserror::Error)]
#[error("stream entry {id} {why}")]
pub struct DecodeEntryError {
    id: String,
    why: Why,
    #[source]
    source: Option<serde_json::Error>,
}

impl DecodeEntryError {
    /// The entry id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// What is wrong with an entry.
#[derive(Debug)]
enum Why {
    NoEnvelope,
    NotText { field: &'static str, bytes: usize },
    NotAnEnvelope,
    Misplaced(Box<Misplaced>),
}

/// Where an entry's envelope says it belongs, and where it sits.
#[derive(Debug)]
struct Misplaced {
    category: String,
    key: Option<String>,
    expected_category: String,
    expected_key: Option<String>,
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoEnvelope => f.write_str("has no envelope: it holds no Ordo message"),
            Self::NotText { field, bytes } => write!(
                f,
                "has a field `{field}` that is not UTF-8 text ({bytes} bytes): it holds no readable Ordo message"
            ),
            Self::NotAnEnvelope => f.write_str("does not hold a valid Ordo envelope"),
            Self::Misplaced(misplaced) => {
                let Misplaced {
                    category,
                    key,
                    expected_category,
                    expected_key,
                } = &**misplaced;
                let named = |key: &Option<String>| {
                    key.as_deref().map_or_else(
                        || "no key".to_owned(),
                        |key| format!("key `{}`", ordo_core::contract::text::escaped(key)),
                    )
                };
                write!(
                    f,
                    "holds a message of category `{}` and {} but sits in the stream of category `{}`",
                    ordo_core::contract::text::escaped(category),
                    named(key),
                    ordo_core::contract::text::escaped(expected_category),
                )?;
                match expected_key {
                    Some(_) => write!(
                        f,
                        " and {}: a message runs only in its own key's stream, under that key's lease and order",
                        named(expected_key)
                    ),
                    None => f.write_str(": a message runs only from its own category's stream"),
                }
            }
        }
    }
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
    /// The last error, as text (stored capped at
    /// [`MAX_ERROR_TEXT`](ordo_core::contract::text::MAX_ERROR_TEXT) bytes).
    pub error: String,
    /// How many times it was attempted.
    pub attempts: u32,
}

/// Fenced operations on partitions, for one instance.
#[derive(Debug, Clone)]
pub struct Partitions {
    client: Pool,
    instance: String,
    /// This process start's member, shared by every clone: whose name the
    /// leases carry, and whether it lives.
    membership: Arc<Membership>,
    lease_ttl: Duration,
    /// The consumer groups seen on each category's lanes, so the reap
    /// script can be given their keys up front (it names them all in KEYS);
    /// learnt from the script's `groups` reply.
    groups: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
    /// Whether a read tries the primary lane in a transaction before the
    /// script (see [`calls::partition::read_primary`]): cleared, for every
    /// clone, when the ACL user may not run one.
    direct_reads: Arc<AtomicBool>,
}

/// One partition as its owner holds it: the lease, the consumer group and
/// the partition's names that every fenced operation runs under, carried
/// once (see [`Partitions::held`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Held<'a> {
    pub(crate) partitions: &'a Partitions,
    pub(crate) lease: &'a Lease,
    pub(crate) group: &'a str,
    pub(crate) partition: &'a PartitionKeys,
}

impl Partitions {
    /// Operations on `client` for the instance `instance`, whose member key
    /// (on which every lease it holds depends) lives `lease_ttl` without
    /// renewal. Each call draws a fresh nonce: its leases (and those of its
    /// clones) are `{instance}:{nonce}:{token}`, so two `Partitions` built
    /// with one instance id are two owners (two processes), and each
    /// reports the other's leases as [`Error::DuplicateInstance`] while the
    /// other's member lives. The member key is registered by the first
    /// acquisition.
    pub fn new(client: Pool, instance: impl Into<String>, lease_ttl: Duration) -> Self {
        let instance = instance.into();
        Self {
            client,
            membership: Arc::new(Membership::new(&instance, lease_ttl)),
            instance,
            lease_ttl,
            groups: Arc::default(),
            direct_reads: Arc::new(AtomicBool::new(true)),
        }
    }

    /// The instance id (the first part of every lease value it holds).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// `{instance}:{nonce}`: every lease value this owner holds now,
    /// without its token (the nonce changes when the member key expired).
    pub fn identity(&self) -> String {
        self.membership.owner().identity().to_owned()
    }

    /// The member key of [`Partitions::identity`]:
    /// `{ordo}:member:{instance}:{nonce}`.
    pub fn member_key(&self) -> String {
        self.membership.key()
    }

    /// The membership every clone shares.
    pub(crate) fn membership(&self) -> &Arc<Membership> {
        &self.membership
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
        self.lease_ttl * crate::owner::lease::SEQUENCE_TTL_FACTOR
    }

    /// Acquires `group`'s lease on `partition` if it is free or its
    /// holder's member is gone (or returns it when this owner holds it
    /// already).
    pub async fn acquire(&self, group: &str, partition: &PartitionKeys) -> Result<Option<Lease>> {
        self.acquire_keys(&partition.lease(group)).await
    }

    /// Acquires the lease `keys` if it is free or its holder's member is
    /// gone.
    pub async fn acquire_keys(&self, keys: &LeaseKeys) -> Result<Option<Lease>> {
        let mut leases = self.acquire_many(std::slice::from_ref(keys), 1).await?;
        Ok(leases.pop().flatten())
    }

    /// Acquires up to `limit` leases among `candidates` that are free or
    /// held by a dead member, in order, with a few calls per Redis node.
    pub async fn acquire_many(&self, candidates: &[LeaseKeys], limit: usize) -> Result<Vec<Option<Lease>>> {
        Ok(self.acquire_until(candidates, limit).await?.0)
    }

    /// [`Partitions::acquire_many`], and until when the leases are surely
    /// held: the member, renewed (or registered) before they were taken,
    /// lives at least until then.
    pub(crate) async fn acquire_until(
        &self,
        candidates: &[LeaseKeys],
        limit: usize,
    ) -> Result<(Vec<Option<Lease>>, std::time::Instant)> {
        let (owner, valid_until) = self.membership.ensure(&self.client).await?;
        let leases = lease::acquire(self.client.next(), &owner, self.lease_ttl, candidates, limit).await?;
        Ok((leases, valid_until))
    }

    /// Renews this owner's member key, and returns those of `leases` that
    /// are no longer held (every one when the member key had expired: the
    /// next acquisition registers a new member).
    pub async fn renew<'l>(&self, leases: &'l [Lease]) -> Result<Vec<&'l Lease>> {
        let identity = match self.membership.renew(&self.client).await? {
            Renewal::Renewed(owner, _) => owner.identity().to_owned(),
            Renewal::Unregistered | Renewal::Expired(_) => return Ok(leases.iter().collect()),
        };
        let held: Vec<(String, String)> = leases
            .iter()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let lost = lease::lost(self.client.next(), &held).await?;
        let mine = format!("{identity}:");
        Ok(leases
            .iter()
            .enumerate()
            .filter(|(i, l)| lost.contains(i) || !l.value().starts_with(&mine))
            .map(|(_, l)| l)
            .collect())
    }

    /// Releases `lease`; returns whether it was still held.
    pub async fn release(&self, lease: &Lease) -> Result<bool> {
        lease::release(&self.client, lease, self.lease_ttl).await
    }

    /// Deletes this owner's member key, once every lease it held was
    /// released (a clean stop): anything it still holds is taken over at
    /// once by the next acquisition elsewhere.
    pub async fn leave(&self) -> Result<()> {
        self.membership.leave(&self.client).await
    }

    /// Checks that `lease` is still held, without touching anything:
    /// [`Error::Fenced`] when another instance holds it, or its holder's
    /// member key is gone. A worker asks before running a handler again
    /// after a failure, so a stale owner never re-runs a message the new
    /// owner may be running.
    pub async fn check(&self, lease: &Lease) -> Result<()> {
        // Two slots on a Redis Cluster: two commands, sent together.
        let member = lease.member_key();
        let (alive, holder) = tokio::try_join!(
            self.client.exists::<i64, _>(&member),
            self.client.get::<Option<String>, _>(lease.key()),
        )?;
        let alive = alive == 1;
        if alive && holder.as_deref() == Some(lease.value()) {
            return Ok(());
        }
        Err(Error::Fenced {
            lease: lease.key().to_owned(),
            expected: lease.value().to_owned(),
            holder: holder.filter(|_| alive),
        })
    }

    /// `partition` as held for `group` under `lease`: the handle its
    /// fenced operations run on.
    pub(crate) fn held<'a>(
        &'a self,
        lease: &'a Lease,
        group: &'a str,
        partition: &'a PartitionKeys,
    ) -> Held<'a> {
        Held {
            partitions: self,
            lease,
            group,
            partition,
        }
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
        self.held(lease, group, partition).read(count, true).await
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
        self.held(lease, group, partition).read_hashed(count, after).await
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
        self.held(lease, group, partition)
            .ack_handled(lane, ids, attempt, true)
            .await
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
        self.held(lease, group, partition)
            .attempt_failed_in(&lease.keys().sequence, Some(id), attempt)
            .await
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
        calls::partition::close(
            &self.client,
            lease.fence(),
            sequence,
            attempt,
            self.sequence_ttl(),
            entry,
        )
        .await
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
        self.held(lease, group, partition)
            .halt_attempt(reason, attempt)
            .await
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
            match calls::partition::reap(&self.client, lease.fence(), partition, idle, &groups).await? {
                Reap::Reaped => {
                    // Discovery reads the index again (a lost increment is
                    // caught up by its periodic full read).
                    if let Err(error) =
                        crate::store::buckets::index_changed(&self.client, partition.category()).await
                    {
                        tracing::warn!(error = %ordo_core::contract::error::error_chain(&error), partition = %partition.key(), "saying that the index changed after a reap failed");
                    }
                    return Ok(ReapOutcome::Reaped);
                }
                Reap::Busy(retry_in) => return Ok(ReapOutcome::Busy { retry_in }),
                Reap::Groups(found) => self.learn_groups(partition.category(), found.into_iter()),
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

impl Held<'_> {
    /// Lists the partition's bucket of the halted set before a halt or a
    /// parked key is written to it, so an operator reading the directory
    /// never misses one.
    pub(crate) async fn list_halted_bucket(&self) -> Result<()> {
        crate::store::buckets::list(
            self.partitions.client(),
            &self.partition.halted_directory(),
            &[self.partition.slot()],
        )
        .await
    }

    /// The fenced read: up to `count` entries of `partition` for `group`,
    /// pending ones first (this is where a new owner reclaims what the
    /// previous owner left unacknowledged), primary lane first.
    /// `more_likely`: whether the primary lane probably has entries (the
    /// last read filled its batch), so that the read is tried as a
    /// transaction first ([`calls::partition::read_primary`]); otherwise the
    /// script answers at once, and an idle partition's read stays one round
    /// trip.
    pub(crate) async fn read(self, count: usize, more_likely: bool) -> Result<ReadOutcome> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        if more_likely && partitions.direct_reads.load(Ordering::Relaxed) {
            let client = partitions.client.next();
            match calls::partition::read_primary(client, lease.fence(), partition, group, count).await? {
                Direct::Read(read) => return Ok(read_outcome(read)),
                Direct::Script => {}
                Direct::Refused => {
                    if partitions.direct_reads.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            "the Redis user may not run MULTI/EXEC: partitions are read by script \
                             from now on, which costs Redis more per message; \
                             the worker role's ACL rules grant both (docs/OPERATIONS.md, \"ACL users\")"
                        );
                    }
                }
            }
        }
        let read = calls::partition::read(&partitions.client, lease.fence(), partition, group, count).await?;
        Ok(read_outcome(read))
    }

    /// The fenced read of a hashed partition: the pending entries after
    /// `after` (per lane: the last entry this owner got from it, `0` when
    /// none yet), then new ones; the primary lane before the backfill lane.
    /// Never [`ReadOutcome::Halted`]: a hashed partition parks keys, not
    /// itself.
    pub(crate) async fn read_hashed(self, count: usize, after: &[String; 2]) -> Result<ReadOutcome> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        let read =
            calls::partition::read_hashed(&partitions.client, lease.fence(), partition, group, count, after)
                .await?;
        Ok(read_outcome(read))
    }

    /// [`Partitions::ack_attempt`]; `had_failures`: whether the ids may have
    /// failed attempts on record (to clear).
    pub(crate) async fn ack_handled(
        self,
        lane: Lane,
        ids: &[&str],
        attempt: u64,
        had_failures: bool,
    ) -> Result<bool> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        let one = Ack::new(lease, group, partition, lane, &[]).of(ids, attempt, had_failures);
        let mut acked = partitions.acknowledge(std::slice::from_ref(&one)).await?;
        acked.pop().ok_or_else(calls::ack::no_outcome)?
    }

    /// [`Partitions::attempt_failed`] closing the attempt in `sequence` (a
    /// key's own, in a hashed partition); with no entry `id` (a transient
    /// failure, which uses up no attempt) the attempt is closed and
    /// nothing counted, and the reply is 0.
    pub(crate) async fn attempt_failed_in(
        self,
        sequence: &str,
        id: Option<&str>,
        attempt: u64,
    ) -> Result<u32> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        let counts = id.map(|id| (partition.attempts(group), id));
        partitions.close(lease, sequence, attempt, counts).await
    }

    /// [`Partitions::halt`] by attempt `attempt` of the lease's holder (the
    /// one that failed last), which it closes: the same halt arriving again
    /// later (resent, or delayed on its connection) is refused with
    /// [`Error::Stale`] and cannot halt a partition an operator resolved
    /// meanwhile.
    pub(crate) async fn halt_attempt(self, reason: &HaltReason, attempt: u64) -> Result<()> {
        let Held {
            partitions,
            lease,
            group,
            partition,
        } = self;
        self.list_halted_bucket().await?;
        let halt = Halt {
            fence: lease.fence(),
            partition,
            group,
            sequence: &lease.keys().sequence,
            lane: reason.lane,
            head: &reason.head,
            // Stored capped: a handler's error text may be megabytes.
            error: &ordo_core::contract::text::capped(
                &reason.error,
                ordo_core::contract::text::MAX_ERROR_TEXT,
            ),
            attempts: reason.attempts,
            instance: partitions.instance(),
            attempt,
            sequence_ttl: partitions.sequence_ttl(),
        };
        calls::partition::halt(&partitions.client, halt).await
    }

    /// How many attempts on the pending entry `id` failed (see
    /// [`Partitions::failed_attempts`]).
    pub(crate) async fn failed_attempts(self, id: &str) -> Result<u32> {
        self.partitions
            .failed_attempts(self.group, self.partition, id)
            .await
    }

    /// Retires the partition if every group has drained it and no entry was
    /// added for `idle` (see [`Partitions::reap`]).
    pub(crate) async fn reap(self, idle: Duration) -> Result<ReapOutcome> {
        self.partitions.reap(self.lease, self.partition, idle).await
    }
}

/// What a read script's answer means to the owner.
fn read_outcome(read: Read) -> ReadOutcome {
    match read {
        Read::Entries {
            lane,
            entries,
            pending,
        } => ReadOutcome::Entries {
            lane,
            entries: entries
                .into_iter()
                .map(|raw| StreamEntry::from_raw(raw, lane))
                .collect(),
            pending,
        },
        Read::Halted { head } => ReadOutcome::Halted { head },
        Read::Idle {
            primary_last,
            backfill_last,
            idle_for,
        } => ReadOutcome::Idle(Idle {
            primary_last,
            backfill_last,
            idle_for,
        }),
        Read::Gone => ReadOutcome::Gone,
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

/// Stream content is untrusted input: whatever a raw `XADD` wrote, reading
/// an entry and decoding it for the stream it sits in yields an envelope
/// of that stream's key or an error naming the entry; it never panics, it
/// never fails the read it came with, and the entry's fields are kept
/// byte for byte for wherever it is moved (held, dead-lettered).
///
/// Bounded property tests (proptest's default of 256 cases each), run by
/// the normal test suite.
#[cfg(test)]
mod hostile_input {
    use fred::types::Value;
    use ordo_core::contract::message::{Envelope, MessageKind, Metadata};
    use proptest::prelude::*;

    use super::*;
    use crate::store::scripts::parse_entries;

    fn envelope(category: &str, key: Option<&str>) -> String {
        serde_json::to_string(&Envelope {
            id: "m-1".into(),
            kind: MessageKind::Event,
            type_name: "Placed".into(),
            category: category.into(),
            aggregate_id: None,
            routing_key: None,
            partition_key: key.map(str::to_owned),
            metadata: Metadata::new(),
            occurred_at: None,
            correlation_id: None,
            causation_id: None,
            payload: "{}".into(),
        })
        .expect("serialisable")
    }

    /// A field value as Redis returns it: text when it is UTF-8, else bytes.
    fn value(bytes: &[u8]) -> Value {
        match std::str::from_utf8(bytes) {
            Ok(text) => Value::from(text),
            Err(_) => Value::Bytes(bytes.to_vec().into()),
        }
    }

    /// Any reply value: text, bytes, numbers, nil, nested arrays.
    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(|b| value(&b)),
            any::<i64>().prop_map(Value::Integer),
            Just(Value::Null),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            proptest::collection::vec(inner, 0..6).prop_map(Value::Array)
        })
    }

    fn entry_of(id: &str, fields: Vec<(&str, Vec<u8>)>) -> StreamEntry {
        let flat = fields
            .into_iter()
            .flat_map(|(name, bytes)| [Value::from(name), value(&bytes)])
            .collect();
        let reply = Value::Array(vec![Value::Array(vec![Value::from(id), Value::Array(flat)])]);
        let raw = parse_entries("test", reply)
            .expect("an entry with an id parses")
            .pop()
            .expect("one entry");
        StreamEntry::from_raw(raw, Lane::Primary)
    }

    /// Decodes `entry` for the stream of `order:alice`: an envelope of
    /// exactly that key, or an error naming the entry.
    fn check(entry: &StreamEntry) -> Result<(), TestCaseError> {
        match entry.decode_for("order", Some("alice")) {
            Ok(envelope) => {
                prop_assert_eq!(envelope.category.as_str(), "order");
                prop_assert_eq!(envelope.partition_key.as_deref(), Some("alice"));
                prop_assert!(entry.key().is_none_or(|key| key == "alice"));
            }
            Err(error) => prop_assert!(error.to_string().contains(entry.id()), "{error}"),
        }
        // Whatever it decodes to elsewhere, decoding never panics either.
        let _ = entry.decode_for("order", None);
        let _ = entry.decode();
        Ok(())
    }

    proptest! {
        #[test]
        fn any_reply_parses_or_fails_without_panicking(reply in any_value()) {
            // Only an entry without a text id fails the read.
            let _ = parse_entries("test", reply);
        }

        #[test]
        fn any_field_bytes_decode_or_fail_naming_the_entry(
            type_name in proptest::collection::vec(any::<u8>(), 0..16),
            key in proptest::collection::vec(any::<u8>(), 0..16),
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let entry = entry_of("7-1", vec![("type", type_name.clone()), ("key", key.clone()), ("envelope", body.clone())]);
            check(&entry)?;
            // The fields are kept as they were, text or not.
            for (name, bytes) in [("type", &type_name), ("key", &key), ("envelope", &body)] {
                let kept = entry.raw_field(name).expect("the field is kept");
                prop_assert_eq!(kept.as_bytes(), Some(bytes.as_slice()));
            }
        }

        #[test]
        fn a_mangled_envelope_decodes_or_fails_naming_the_entry(
            key in prop_oneof![Just(None), Just(Some("alice")), Just(Some("bob"))],
            category in prop_oneof![Just("order"), Just("other")],
            at in 0usize..400, byte in any::<u8>(), cut in 1usize..400,
        ) {
            let mut bytes = envelope(category, key).into_bytes();
            let at = at % bytes.len();
            bytes[at] = byte;
            bytes.truncate(cut);
            check(&entry_of("7-2", vec![("envelope", bytes)]))?;
        }

        #[test]
        fn an_envelope_of_another_key_or_category_is_refused(
            key in prop_oneof![Just(None), Just(Some("alice")), Just(Some("bob")), Just(Some(""))],
            category in prop_oneof![Just("order"), Just("other")],
            key_field in prop_oneof![Just(None), Just(Some("alice")), Just(Some("bob"))],
        ) {
            let mut fields = vec![("envelope", envelope(category, key).into_bytes())];
            if let Some(field) = key_field {
                fields.push(("key", field.as_bytes().to_vec()));
            }
            let entry = entry_of("7-3", fields);
            let accepted = entry.decode_for("order", Some("alice")).is_ok();
            let belongs = category == "order" && key == Some("alice") && key_field.is_none_or(|k| k == "alice");
            prop_assert_eq!(accepted, belongs);
        }
    }

    #[test]
    fn the_reasons_name_the_entry_and_what_is_wrong() {
        let not_text = entry_of("1-0", vec![("envelope", b"\xff\xfe".to_vec())]);
        let error = not_text.decode().unwrap_err().to_string();
        assert!(
            error.contains("1-0") && error.contains("`envelope`") && error.contains("UTF-8"),
            "{error}"
        );
        let none = entry_of("1-1", vec![("type", b"T".to_vec())]);
        assert!(none.decode().unwrap_err().to_string().contains("no envelope"));
        let elsewhere = entry_of(
            "1-2",
            vec![("envelope", envelope("order", Some("bob")).into_bytes())],
        );
        let error = elsewhere
            .decode_for("order", Some("alice"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("key `bob`") && error.contains("key `alice`"),
            "{error}"
        );
        let forged = entry_of(
            "1-3",
            vec![("envelope", envelope("order\u{1b}[2J", Some("a\nb")).into_bytes())],
        );
        let error = forged.decode_for("order", Some("alice")).unwrap_err().to_string();
        assert!(!error.contains('\u{1b}') && !error.contains('\n'), "{error}");
    }
}

#[cfg(test)]
mod shared_buffers {
    use fred::bytes::Bytes;
    use fred::types::Value;

    use super::*;
    use crate::store::scripts::parse_entries;

    /// `range` of `buffer` as fred's decoder leaves a bulk string: a slice
    /// of the buffer it read the reply into.
    fn text(buffer: &Bytes, range: std::ops::Range<usize>) -> Value {
        Value::String(Str::from_inner(buffer.slice(range)).expect("UTF-8"))
    }

    #[test]
    fn an_entry_shares_the_reply_s_buffer_and_a_detached_one_keeps_its_own() {
        let buffer = Bytes::from(b"1-0typePlacedenvelope{\"id\":\"m-1\"}".to_vec());
        let reply = Value::Array(vec![Value::Array(vec![
            text(&buffer, 0..3),
            Value::Array(vec![
                text(&buffer, 3..7),
                text(&buffer, 7..13),
                text(&buffer, 13..21),
                text(&buffer, 21..buffer.len()),
            ]),
        ])]);
        let raw = parse_entries("test", reply)
            .expect("parses")
            .pop()
            .expect("one entry");
        let entry = StreamEntry::from_raw(raw, Lane::Primary);
        let within = |text: &str| buffer.as_ptr_range().contains(&text.as_ptr());
        assert!(within(entry.id()) && within(entry.envelope_json().expect("an envelope")));

        let detached = entry.clone().detached();
        assert_eq!(detached, entry, "the same entry");
        assert!(!within(detached.id()));
        assert!(!within(detached.type_name().expect("a type")));
        assert!(!within(detached.envelope_json().expect("an envelope")));
    }
}
