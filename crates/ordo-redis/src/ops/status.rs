//! Read-only views of the cluster state, for operators and tools (the
//! `ordo` command line): which categories, consumer groups and live
//! instances exist, who owns each partition at which generation, how far
//! behind each group is, and what waits in the dead-letter streams.
//!
//! Nothing here writes to Redis. The per-partition queries are pipelined,
//! [`CHUNK`] partitions per round trip, so a category of 10,000 partitions
//! costs a few dozen round trips. Finding categories and dead-letter streams
//! uses `SCAN`, which walks the keyspace incrementally without blocking the
//! server; pass a category where a command allows it to avoid that walk.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{ClientLike, KeysInterface, SetsInterface, SortedSetsInterface, StreamsInterface};
use fred::types::scan::ScanType;
use fred::types::{ClusterHash, CustomCommand, Value};
use ordo_core::contract::key::Lane;

use crate::error::{Error, Result};
use crate::ops::halts::{self, HaltedPartition};
use crate::owner::partition::{StreamEntry, parse_lane};
use crate::owner::pause::{self, PausedInstance};
use crate::store::keys::{
    BaseKeys, INDEX_DIRECTORY_PATTERN, LeaseKeys, PartitionKeys, REGISTRY_PATTERN, dlq_pattern,
    group_registry, index, index_directory, instances, parse_dlq, parse_index_directory, parse_registry,
};
use crate::store::scripts::{RawEntry, array, parse_entries};

/// Partitions queried per pipelined round trip.
const CHUNK: usize = 256;

/// When Redis cannot tell a group's lag (entries were deleted with `XDEL`,
/// or the group was created on a trimmed stream), it is counted with
/// `XRANGE`, up to this many entries.
pub const LAG_COUNT_LIMIT: u64 = 100_000;

/// Dead letters read per `XRANGE` call: a dead-letter stream is never read
/// whole in one call.
const DLQ_CHUNK: usize = 100;

/// The most entries of a hashed partition's dead-letter stream one page of
/// a key's dead letters looks at (the stream holds every key's letters of
/// the partition): a page that found fewer letters says where to go on.
const DLQ_SCAN: usize = 10_000;

/// Read-only queries of the cluster state.
#[derive(Debug, Clone)]
pub struct ClusterStatus {
    client: Pool,
    backfill_suffix: String,
    routing: crate::store::keys::Routing,
}

/// One page of a dead-letter stream (see [`ClusterStatus::dead_letters_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterPage {
    /// The dead letters, oldest first.
    pub letters: Vec<DeadLetter>,
    /// Where the next page starts (pass it as `after`), when more of the
    /// stream is left to read; `None` at its end.
    pub next: Option<String>,
}

/// Who holds a lease: `{instance}:{nonce}:{token}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    /// The owning instance's id.
    pub instance: String,
    /// The fencing token (generation) it holds the lease at.
    pub token: u64,
}

/// A live instance of a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The instance id (the first half of its lease values).
    pub id: String,
    /// How long its announcement lasts without another heartbeat.
    pub expires_in: Duration,
}

/// One existing lane stream of a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneStatus {
    /// Which lane.
    pub lane: Lane,
    /// Entries in the stream (acknowledged entries are trimmed, so this is
    /// roughly what is still to be handled by the slowest group).
    pub length: u64,
    /// The id of the last entry ever added.
    pub last_id: String,
}

/// How far one consumer group is on one partition (or base stream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPosition {
    /// The consumer group (handler name).
    pub group: String,
    /// The lease holder, when the partition is owned for this group (a
    /// `sequential_by` process manager's lease over the key counts too): a
    /// lease whose holder's member key is gone is not owned (the next
    /// instance to look takes it over).
    pub owner: Option<LeaseHolder>,
    /// Entries not delivered to the group yet, over every lane.
    pub lag: u64,
    /// Entries delivered and not acknowledged yet, over every lane: the one
    /// being handled, or a halted head.
    pub pending: u64,
    /// The halt record, when the partition is halted for this group.
    pub halt: Option<HaltedPartition>,
    /// Entries the group read and acknowledged, over every lane, as far
    /// as Redis counts them (`entries-read` minus pending): what it
    /// handled (or an operator resolved) of the streams as they are now.
    /// A reaped partition takes its count with it, so it only grows while
    /// the partition lives: a rate is what it is for.
    pub handled: u64,
}

/// One partition of a category, for every group that consumes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// The partition key.
    pub key: String,
    /// The lanes that exist, primary first.
    pub lanes: Vec<LaneStatus>,
    /// How long ago its newest entry was added (server clock); `None` when
    /// no lane exists (the partition is indexed but has no stream yet, or it
    /// is being reaped).
    pub idle_for: Option<Duration>,
    /// Each group's position, in the order the groups were asked for.
    pub groups: Vec<GroupPosition>,
}

/// An entry of a partition's dead-letter stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The entry id in the dead-letter stream.
    pub id: String,
    /// The group whose handler gave up on it.
    pub group: String,
    /// The last error.
    pub error: String,
    /// How many times it was attempted before it halted the partition.
    pub attempts: u32,
    /// The message as it was in its lane: its original entry id, lane, type
    /// and envelope.
    pub message: StreamEntry,
}

impl ClusterStatus {
    /// Queries through `client`; `backfill_suffix` is the configured
    /// backfill lane suffix.
    pub fn new(client: Pool, backfill_suffix: &str) -> Self {
        Self {
            client,
            backfill_suffix: backfill_suffix.to_owned(),
            routing: crate::store::keys::Routing::default(),
        }
    }

    /// The queries of categories partitioned as `routing` says: a key of a
    /// hashed category has its dead letters in its partition's dead-letter
    /// stream, with the other keys' ([`RedisBroker::status`](crate::RedisBroker::status)
    /// sets it).
    #[must_use]
    pub fn with_routing(mut self, routing: crate::store::keys::Routing) -> Self {
        self.routing = routing;
        self
    }

    /// The connection pool the queries use.
    pub(crate) fn client(&self) -> &Pool {
        &self.client
    }

    /// The configured backfill lane suffix.
    pub(crate) fn backfill_suffix(&self) -> &str {
        &self.backfill_suffix
    }

    /// Every category that has a partition index or a registered consumer
    /// group, sorted (walks the keyspace with `SCAN`).
    pub async fn categories(&self) -> Result<Vec<String>> {
        let mut categories = BTreeSet::new();
        for key in self.scan(INDEX_DIRECTORY_PATTERN, ScanType::Set).await? {
            if let Some(category) = parse_index_directory(&key) {
                categories.insert(category.to_owned());
            }
        }
        for key in self.scan(REGISTRY_PATTERN, ScanType::Set).await? {
            if let Some(category) = parse_registry(&key) {
                categories.insert(category.to_owned());
            }
        }
        Ok(categories.into_iter().collect())
    }

    /// The consumer groups registered on `category`, sorted.
    pub async fn groups(&self, category: &str) -> Result<Vec<String>> {
        let groups: BTreeSet<String> = self.client.smembers(group_registry(category)).await?;
        Ok(groups.into_iter().collect())
    }

    /// The live instances of `group` (announced, not expired), sorted by id.
    pub async fn instances(&self, group: &str) -> Result<Vec<Instance>> {
        let now = self.server_time_ms().await?;
        let members: Value = self
            .client
            .zrangebyscore(instances(group), format!("({now}"), "+inf", true, None)
            .await?;
        let mut live = Vec::new();
        let scored = if members.is_null() {
            Vec::new()
        } else {
            members.into_zset_result()?
        };
        for (id, expiry_ms) in scored {
            let id = text(id).ok_or_else(|| Error::protocol("ZRANGEBYSCORE", "instance id is not text"))?;
            // Scores are whole milliseconds, well within f64's exact range.
            let left_ms = (expiry_ms - now as f64).max(0.0) as u64;
            live.push(Instance {
                id,
                expires_in: Duration::from_millis(left_ms),
            });
        }
        live.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(live)
    }

    /// The partition keys in `category`'s index, sorted.
    pub async fn partition_keys(&self, category: &str) -> Result<Vec<String>> {
        let keys = crate::store::buckets::members(&self.client, &index_directory(category), |slot| {
            index(category, slot)
        })
        .await?;
        Ok(keys.into_iter().collect())
    }

    /// Every indexed partition of `category`, sorted by key, with the
    /// position of each group in `groups`.
    pub async fn partitions(&self, category: &str, groups: &[String]) -> Result<Vec<PartitionStatus>> {
        let keys = self.partition_keys(category).await?;
        self.partitions_of(category, &keys, groups).await
    }

    /// The partitions `keys` of `category` (indexed or not), in the given
    /// order, with the position of each group in `groups`.
    pub async fn partitions_of(
        &self,
        category: &str,
        keys: &[String],
        groups: &[String],
    ) -> Result<Vec<PartitionStatus>> {
        self.read_partitions(category, keys, groups, Detail::Lanes).await
    }

    /// [`partitions_of`](Self::partitions_of) for the groups' positions
    /// only, at a fraction of the cost (each lane's `XLEN` instead of its
    /// `XINFO STREAM`, which carries its first and last entries): each
    /// lane's `last_id` is empty and `idle_for` is `None`. What `ordo
    /// status` and the health reports sum over every partition.
    pub async fn positions_of(
        &self,
        category: &str,
        keys: &[String],
        groups: &[String],
    ) -> Result<Vec<PartitionStatus>> {
        self.read_partitions(category, keys, groups, Detail::Positions)
            .await
    }

    async fn read_partitions(
        &self,
        category: &str,
        keys: &[String],
        groups: &[String],
        detail: Detail,
    ) -> Result<Vec<PartitionStatus>> {
        let now = self.server_time_ms().await?;
        let halted = self.halted_by_partition(category).await?;
        let mut statuses = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(CHUNK) {
            let partitions: Vec<PartitionKeys> = chunk
                .iter()
                .map(|key| PartitionKeys::new(category, key, &self.backfill_suffix))
                .collect();
            for raw in self.query_chunk(&partitions, groups, detail).await? {
                statuses.push(self.assemble(raw, groups, now, &halted).await?);
            }
        }
        Ok(statuses)
    }

    /// The position of each group in `groups` on `category`'s base stream
    /// (where a category that no handler partitions is published).
    pub async fn base_stream(&self, category: &str, groups: &[String]) -> Result<Vec<GroupPosition>> {
        let base = BaseKeys::new(category);
        let info: Option<Value> = optional(self.client.xinfo_groups(base.stream()).await)?;
        let mut positions = Vec::with_capacity(groups.len());
        for group in groups {
            let lane = match &info {
                Some(info) => lane_position(info, group, 0)?,
                None => LanePosition::default(),
            };
            let lag = self.resolve_lag(base.stream(), &lane).await?;
            positions.push(GroupPosition {
                group: group.clone(),
                owner: None,
                lag,
                pending: lane.pending,
                halt: None,
                handled: lane.handled(),
            });
        }
        Ok(positions)
    }

    /// The entry `group` handles next on partition `category:key`: its
    /// first pending (delivered, unacknowledged) entry, else its first
    /// undelivered one; the primary lane before the backfill lane. `None`
    /// when the group is caught up.
    pub async fn next_entry(&self, group: &str, category: &str, key: &str) -> Result<Option<StreamEntry>> {
        let partition = PartitionKeys::new(category, key, &self.backfill_suffix);
        for lane in [Lane::Primary, Lane::Backfill] {
            let name = partition.lane(lane);
            let Some(info) = optional::<Value>(self.client.xinfo_groups(name).await)? else {
                continue;
            };
            let position = lane_position(&info, group, 0)?;
            let from = if position.pending > 0 {
                let pending: Value = self.client.xpending(name, group, ("-", "+", 1)).await?;
                let first = array(pending).into_iter().next().map(array).unwrap_or_default();
                match first.into_iter().next().and_then(text) {
                    Some(id) => id,
                    None => continue,
                }
            } else {
                match &position.last_delivered {
                    Some(last) => format!("({last}"),
                    None => "-".to_owned(),
                }
            };
            let entries: Value = self.client.xrange(name, from.as_str(), "+", Some(1)).await?;
            if let Some(raw) = parse_entries("XRANGE", entries)?.into_iter().next() {
                return Ok(Some(StreamEntry::from_raw(raw, lane)));
            }
        }
        Ok(None)
    }

    /// The dead letters of `category:key`, oldest first: its partition's
    /// dead-letter stream, or, for a key of a hashed category, that key's
    /// letters in its partition's stream (`key` of the reserved `__n__`
    /// form, as [`ClusterStatus::dead_letter_keys`] lists a hashed
    /// partition: every letter of that partition). Read in chunks, never
    /// the whole stream in one call; for a page at a time, see
    /// [`ClusterStatus::dead_letters_page`].
    pub async fn dead_letters(&self, category: &str, key: &str) -> Result<Vec<DeadLetter>> {
        let (dlq, only) = self.dead_letter_stream(category, key);
        self.all_dead_letters(&dlq, only).await
    }

    /// At most `limit` (at least 1) dead letters of `category:key` (see
    /// [`ClusterStatus::dead_letters`]) after the entry id `after` (from
    /// the start when `None`), oldest first, and where the next page starts.
    pub async fn dead_letters_page(
        &self,
        category: &str,
        key: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage> {
        let (dlq, only) = self.dead_letter_stream(category, key);
        self.dead_letter_page(&dlq, only, after, limit).await
    }

    /// The dead letter `id` of `category:key` (see
    /// [`ClusterStatus::dead_letters`]), if there is one.
    pub async fn dead_letter(&self, category: &str, key: &str, id: &str) -> Result<Option<DeadLetter>> {
        let (dlq, only) = self.dead_letter_stream(category, key);
        self.dead_letter_by_id(&dlq, only, id).await
    }

    /// The entries of `category`'s own dead-letter stream `{category}:dlq`,
    /// where the plain (non-partitioned) consumer groups put the messages
    /// that failed every attempt; oldest first, read in chunks.
    pub async fn plain_dead_letters(&self, category: &str) -> Result<Vec<DeadLetter>> {
        self.all_dead_letters(&plain_dlq(category), None).await
    }

    /// A page of [`ClusterStatus::plain_dead_letters`]: at most `limit`
    /// after the entry id `after`.
    pub async fn plain_dead_letters_page(
        &self,
        category: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage> {
        self.dead_letter_page(&plain_dlq(category), None, after, limit)
            .await
    }

    /// The plain dead letter `id` of `category`, if there is one.
    pub async fn plain_dead_letter(&self, category: &str, id: &str) -> Result<Option<DeadLetter>> {
        self.dead_letter_by_id(&plain_dlq(category), None, id).await
    }

    /// The dead-letter stream that holds `category:key`'s letters, and the
    /// key to keep only the letters of (a key of a hashed partition).
    fn dead_letter_stream<'k>(&self, category: &str, key: &'k str) -> (String, Option<&'k str>) {
        let own = PartitionKeys::new(category, key, &self.backfill_suffix);
        // A hashed partition named by its member: all its letters.
        if own.id().is_hashed() {
            return (own.dlq(), None);
        }
        let partition = PartitionKeys::of(self.routing.partition_of(category, key), &self.backfill_suffix);
        let only = partition.id().is_hashed().then_some(key);
        (partition.dlq(), only)
    }

    /// Every letter of `dlq` (of key `only`), in chunks.
    async fn all_dead_letters(&self, dlq: &str, only: Option<&str>) -> Result<Vec<DeadLetter>> {
        let mut letters = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .dead_letter_page(dlq, only, after.as_deref(), DLQ_CHUNK)
                .await?;
            letters.extend(page.letters);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(letters),
            }
        }
    }

    /// At most `limit` letters of `dlq` (of key `only`) after `after`,
    /// reading [`DLQ_CHUNK`] entries per call and looking at no more than
    /// [`DLQ_SCAN`] of them.
    async fn dead_letter_page(
        &self,
        dlq: &str,
        only: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage> {
        let limit = limit.max(1);
        let mut letters = Vec::new();
        let mut from = after.map_or_else(|| "-".to_owned(), |after| format!("({after}"));
        let mut scanned = 0;
        loop {
            // One more than the page holds: whether anything follows it.
            let count = if only.is_some() {
                DLQ_CHUNK
            } else {
                (limit + 1 - letters.len()).min(DLQ_CHUNK)
            };
            let entries: Value = self
                .client
                .xrange(dlq, from.as_str(), "+", Some(count as u64))
                .await?;
            let raws = parse_entries("XRANGE", entries)?;
            let read = raws.len();
            scanned += read;
            for raw in raws {
                from = format!("({}", raw.id);
                if only.is_some_and(|key| raw.field("key") != Some(key)) {
                    continue;
                }
                if letters.len() == limit {
                    let next = letters.last().map(|letter: &DeadLetter| letter.id.clone());
                    return Ok(DeadLetterPage { letters, next });
                }
                letters.push(dead_letter(dlq, raw)?);
            }
            if read < count {
                return Ok(DeadLetterPage { letters, next: None });
            }
            if only.is_some() && scanned >= DLQ_SCAN {
                let next = Some(from.trim_start_matches('(').to_owned());
                return Ok(DeadLetterPage { letters, next });
            }
        }
    }

    /// The letter `id` of `dlq` (of key `only`).
    async fn dead_letter_by_id(&self, dlq: &str, only: Option<&str>, id: &str) -> Result<Option<DeadLetter>> {
        // Not a stream entry id (`ms-seq`): no such letter (Redis would
        // refuse the read).
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        if ms.parse::<u64>().is_err() || seq.parse::<u64>().is_err() {
            return Ok(None);
        }
        let entries: Value = self.client.xrange(dlq, id, id, Some(1)).await?;
        parse_entries("XRANGE", entries)?
            .into_iter()
            .find(|raw| raw.id == id && only.is_none_or(|key| raw.field("key") == Some(key)))
            .map(|raw| dead_letter(dlq, raw))
            .transpose()
    }

    /// The keys of `category` that have a dead-letter stream, sorted (walks
    /// the keyspace with `SCAN`); a hashed partition's stream is listed by
    /// its member (`__n__`), which [`ClusterStatus::dead_letters`] takes.
    pub async fn dead_letter_keys(&self, category: &str) -> Result<Vec<String>> {
        let mut keys: Vec<String> = self
            .scan(&dlq_pattern(category), ScanType::Stream)
            .await?
            .iter()
            .filter_map(|name| parse_dlq(category, name).map(str::to_owned))
            .collect();
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// The instances on which `group` is paused, by instance id (records
    /// past their expiry, left by an instance that stopped, are left out).
    pub async fn paused(&self, group: &str) -> Result<Vec<PausedInstance>> {
        let now = self.server_time_ms().await?;
        pause::read(&self.client, group, now).await
    }

    /// The Redis server clock, in ms since the Unix epoch (stream ids,
    /// halt times and instance expiries all use it).
    pub async fn server_time_ms(&self) -> Result<u64> {
        let command = CustomCommand::new_static("TIME", ClusterHash::Random, false);
        let reply: Value = self.client.next().custom(command, Vec::<Value>::new()).await?;
        let parts = array(reply);
        let number = |index: usize| {
            parts
                .get(index)
                .and_then(Value::as_u64)
                .ok_or_else(|| Error::protocol("TIME", "reply is not two numbers"))
        };
        Ok(number(0)? * 1_000 + number(1)? / 1_000)
    }

    /// Every key matching `pattern` of type `kind`, on every node.
    pub(crate) async fn scan(&self, pattern: &str, kind: ScanType) -> Result<Vec<String>> {
        crate::net::nodes::scan(self.client.next(), pattern, kind).await
    }

    /// The halt records of `category`, by (key, group).
    async fn halted_by_partition(
        &self,
        category: &str,
    ) -> Result<HashMap<(String, String), HaltedPartition>> {
        Ok(halts::halted_in(&self.client, category)
            .await?
            .into_iter()
            .map(|h| ((h.key.clone(), h.group.clone()), h))
            .collect())
    }

    /// One pipelined round trip for `partitions`: per lane `XINFO STREAM`
    /// (`XLEN` for [`Detail::Positions`]) and `XINFO GROUPS`, per group the
    /// partition lease and the process manager lease over the key.
    async fn query_chunk(
        &self,
        partitions: &[PartitionKeys],
        groups: &[String],
        detail: Detail,
    ) -> Result<Vec<RawPartition>> {
        let pipeline = self.client.next().pipeline();
        for partition in partitions {
            for lane in [Lane::Primary, Lane::Backfill] {
                match detail {
                    Detail::Lanes => {
                        let _: () = pipeline.xinfo_stream(partition.lane(lane), false, None).await?;
                    }
                    Detail::Positions => {
                        let _: () = pipeline.xlen(partition.lane(lane)).await?;
                    }
                }
                let _: () = pipeline.xinfo_groups(partition.lane(lane)).await?;
            }
            for group in groups {
                for lease in [
                    partition.lease(group).lease,
                    LeaseKeys::process(group, partition.key()).lease,
                ] {
                    let _: () = pipeline.get(&lease).await?;
                    let _: () = pipeline.pttl(&lease).await?;
                }
            }
        }
        let mut replies = pipeline.try_all::<Value>().await.into_iter();
        let mut next = move || replies.next().unwrap_or(Ok(Value::Null));
        let mut raws = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let mut lanes = Vec::with_capacity(2);
            for lane in [Lane::Primary, Lane::Backfill] {
                let info = optional(next())?;
                let groups = optional(next())?;
                lanes.push((lane, info, groups));
            }
            let mut leases = Vec::with_capacity(groups.len());
            for _ in groups {
                let partition_lease = (next()?, next()?);
                let process_lease = (next()?, next()?);
                leases.push(holder(partition_lease).or_else(|| holder(process_lease)));
            }
            raws.push(RawPartition {
                partition: partition.clone(),
                lanes,
                leases,
            });
        }
        self.alive_only(&mut raws).await?;
        Ok(raws)
    }

    /// Keeps the holders of `raws` whose leases are held: those whose
    /// member key exists (one `MGET`: every member key sits in one slot),
    /// and those of an earlier release's instance (a lease with a TTL).
    async fn alive_only(&self, raws: &mut [RawPartition]) -> Result<()> {
        let mut members: Vec<String> = raws
            .iter()
            .flat_map(|raw| raw.leases.iter().flatten())
            .filter_map(|held| held.member.clone())
            .collect();
        members.sort_unstable();
        members.dedup();
        if members.is_empty() {
            return Ok(());
        }
        let found: Vec<Option<String>> = self.client.mget(members.clone()).await?;
        let gone: HashSet<&str> = members
            .iter()
            .zip(&found)
            .filter(|(_, value)| value.is_none())
            .map(|(member, _)| member.as_str())
            .collect();
        for raw in raws {
            for lease in &mut raw.leases {
                if lease
                    .as_ref()
                    .and_then(|held| held.member.as_deref())
                    .is_some_and(|member| gone.contains(member))
                {
                    *lease = None;
                }
            }
        }
        Ok(())
    }

    /// Turns one partition's raw replies into its status.
    async fn assemble(
        &self,
        raw: RawPartition,
        groups: &[String],
        now_ms: u64,
        halted: &HashMap<(String, String), HaltedPartition>,
    ) -> Result<PartitionStatus> {
        let mut lanes = Vec::new();
        let mut newest_ms = None;
        let mut positions: Vec<GroupPosition> = groups
            .iter()
            .zip(raw.leases)
            .map(|(group, owner)| GroupPosition {
                group: group.clone(),
                owner: owner.map(|held| held.holder),
                lag: 0,
                pending: 0,
                handled: 0,
                halt: halted
                    .get(&(raw.partition.key().to_owned(), group.clone()))
                    .cloned(),
            })
            .collect();
        for (lane, info, group_info) in raw.lanes {
            let Some(info) = info else { continue };
            let (length, last_id) = match info {
                // `XLEN` (positions only): 0 for a stream that does not
                // exist, which has no groups either.
                Value::Integer(length) => {
                    if length == 0 && group_info.is_none() {
                        continue;
                    }
                    (u64::try_from(length).unwrap_or(0), String::new())
                }
                info => {
                    let info = flat_map(info);
                    let length = info.get("length").and_then(Value::as_u64).unwrap_or(0);
                    let last_id = info
                        .get("last-generated-id")
                        .and_then(|v| text(v.clone()))
                        .unwrap_or_default();
                    newest_ms = newest_ms.max(Some(id_ms(&last_id)));
                    (length, last_id)
                }
            };
            let name = raw.partition.lane(lane);
            for position in &mut positions {
                let lane_position = match &group_info {
                    Some(group_info) => lane_position(group_info, &position.group, length)?,
                    // Not read by any group yet: the group starts at the beginning.
                    None => LanePosition::unread(length),
                };
                position.lag += self.resolve_lag(name, &lane_position).await?;
                position.pending += lane_position.pending;
                position.handled += lane_position.handled();
            }
            lanes.push(LaneStatus {
                lane,
                length,
                last_id,
            });
        }
        Ok(PartitionStatus {
            key: raw.partition.key().to_owned(),
            lanes,
            idle_for: newest_ms.map(|ms| Duration::from_millis(now_ms.saturating_sub(ms))),
            groups: positions,
        })
    }

    /// The lag Redis reported, or (when it could not tell) the entries after
    /// the last delivered one, counted up to [`LAG_COUNT_LIMIT`].
    async fn resolve_lag(&self, stream: &str, position: &LanePosition) -> Result<u64> {
        if let Some(lag) = position.lag {
            return Ok(lag);
        }
        let from = match &position.last_delivered {
            Some(last) => format!("({last}"),
            None => "-".to_owned(),
        };
        let mut counted = 0;
        let mut from = from;
        while counted < LAG_COUNT_LIMIT {
            let page: Value = self
                .client
                .xrange(stream, from.as_str(), "+", Some(1_000))
                .await?;
            let ids: Vec<String> = array(page)
                .into_iter()
                .filter_map(|entry| array(entry).into_iter().next().and_then(text))
                .collect();
            let Some(last) = ids.last() else { break };
            counted += ids.len() as u64;
            from = format!("({last}");
        }
        Ok(counted.min(LAG_COUNT_LIMIT))
    }
}

/// How much of each partition [`ClusterStatus`] reads.
#[derive(Debug, Clone, Copy)]
enum Detail {
    /// Each lane's length, last id and age, and the groups' positions.
    Lanes,
    /// The groups' positions (and each lane's length) only.
    Positions,
}

/// The raw replies of one partition's queries.
#[derive(Debug)]
struct RawPartition {
    partition: PartitionKeys,
    /// Per lane: `XINFO STREAM` (or `XLEN`) and `XINFO GROUPS` (`None`: no
    /// such stream).
    lanes: Vec<(Lane, Option<Value>, Option<Value>)>,
    /// Per group: the lease holder.
    leases: Vec<Option<Held>>,
}

/// A lease holder as read, and the member key it is held by (`None`: an
/// earlier release's lease, with a TTL of its own).
#[derive(Debug)]
struct Held {
    holder: LeaseHolder,
    member: Option<String>,
}

/// One group's position on one stream, as `XINFO GROUPS` reports it.
#[derive(Debug, Default)]
struct LanePosition {
    /// `None` when Redis cannot tell it.
    lag: Option<u64>,
    pending: u64,
    /// `None` when nothing was delivered yet.
    last_delivered: Option<String>,
    /// Entries the group read (`entries-read`; `None` when Redis cannot tell).
    entries_read: Option<u64>,
}

impl LanePosition {
    /// A group that has not read a stream of `length` entries yet.
    fn unread(length: u64) -> Self {
        Self {
            lag: Some(length),
            pending: 0,
            last_delivered: None,
            entries_read: Some(0),
        }
    }

    /// Entries read and acknowledged.
    fn handled(&self) -> u64 {
        self.entries_read.unwrap_or(0).saturating_sub(self.pending)
    }
}

/// `group`'s position in an `XINFO GROUPS` reply; a group missing from it
/// has not read the stream yet (its first read creates it at the start).
fn lane_position(info: &Value, group: &str, length: u64) -> Result<LanePosition> {
    for entry in array(info.clone()) {
        let fields = flat_map(entry);
        if fields.get("name").and_then(|v| text(v.clone())).as_deref() != Some(group) {
            continue;
        }
        let pending = fields.get("pending").and_then(Value::as_u64).unwrap_or(0);
        let last_delivered = fields
            .get("last-delivered-id")
            .and_then(|v| text(v.clone()))
            .filter(|id| id != "0-0");
        let lag = fields.get("lag").and_then(Value::as_u64);
        let entries_read = fields.get("entries-read").and_then(Value::as_u64);
        return Ok(LanePosition {
            lag,
            pending,
            last_delivered,
            entries_read,
        });
    }
    Ok(LanePosition::unread(length))
}

/// The holder in a lease value `{instance}:{nonce}:{token}` and its `PTTL`.
fn holder((value, ttl): (Value, Value)) -> Option<Held> {
    let value = text(value)?;
    let (owner, token) = value.rsplit_once(':')?;
    let (instance, _nonce) = owner.rsplit_once(':')?;
    Some(Held {
        holder: LeaseHolder {
            instance: instance.to_owned(),
            token: token.parse().ok()?,
        },
        member: (ttl.as_i64() == Some(-1)).then(|| crate::store::keys::member(owner)),
    })
}

/// The dead-letter stream of `category`'s plain consumer groups.
pub fn plain_dlq(category: &str) -> String {
    crate::store::keys::BaseKeys::new(category).dlq()
}

/// A dead-letter entry as `resolve.lua` (a partition's) or the plain
/// consumer writes it. Plain entries written before they carried a lane and
/// attempts are read as primary, with 0 attempts (unknown).
fn dead_letter(dlq: &str, raw: RawEntry) -> Result<DeadLetter> {
    let field = |name: &str| {
        raw.field(name).map(str::to_owned).ok_or_else(|| {
            Error::protocol(
                "dead letter",
                format!("entry {} of `{dlq}` has no `{name}`", raw.id),
            )
        })
    };
    let lane = raw.field("lane").map_or(Ok(Lane::Primary), parse_lane)?;
    let source_id = field("source_id")?;
    let group = field("group")?;
    // Letters written before errors were capped may hold megabytes.
    let error = ordo_core::contract::text::cap_error(field("error")?);
    let attempts = raw.field("attempts").map_or(0, |a| a.parse().unwrap_or(u32::MAX));
    let id = raw.id.to_string();
    let message = StreamEntry::from_raw(
        RawEntry {
            id: fred::bytes_utils::Str::from(source_id),
            fields: raw.fields,
            binary: raw.binary,
        },
        lane,
    );
    Ok(DeadLetter {
        id,
        group,
        error,
        attempts,
        message,
    })
}

/// `Ok(None)` for the error Redis gives about a stream that does not exist.
fn optional<T>(result: std::result::Result<T, fred::error::Error>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(error) if error.details().contains("no such key") => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// A flat `name, value, ...` reply (or a RESP3 map, which [`array`]
/// flattens) as a map.
fn flat_map(value: Value) -> HashMap<String, Value> {
    let mut map = HashMap::new();
    let mut flat = array(value).into_iter();
    while let (Some(name), Some(value)) = (flat.next(), flat.next()) {
        if let Some(name) = text(name) {
            map.insert(name, value);
        }
    }
    map
}

fn text(value: Value) -> Option<String> {
    value.as_str().map(|s| s.into_owned())
}

/// The millisecond part of a stream id.
fn id_ms(id: &str) -> u64 {
    id.split('-').next().and_then(|ms| ms.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_values_name_instance_token_and_member() {
        let value = || Value::from("3f1c:ab:9e2d41c07a5b6f18:1764438000000123");
        let parsed = holder((value(), Value::from(-1))).expect("a holder");
        assert_eq!(
            parsed.holder,
            LeaseHolder {
                instance: "3f1c:ab".to_owned(),
                token: 1_764_438_000_000_123,
            }
        );
        assert_eq!(
            parsed.member.as_deref(),
            Some("{ordo}:member:3f1c:ab:9e2d41c07a5b6f18")
        );
        let earlier = holder((value(), Value::from(5_000))).expect("a holder");
        assert_eq!(
            earlier.member, None,
            "an earlier release's lease has a TTL and no member"
        );
        assert!(holder((Value::Null, Value::from(-2))).is_none());
        assert!(holder((Value::from("no-token"), Value::from(-1))).is_none());
    }

    #[test]
    fn stream_ids_give_their_milliseconds() {
        assert_eq!(id_ms("1795977929844-3"), 1_795_977_929_844);
        assert_eq!(id_ms("0-0"), 0);
    }
}
