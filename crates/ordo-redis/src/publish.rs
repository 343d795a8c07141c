//! Publishing: each message is added to its stream and its partition to the
//! category index in one atomic script step, so a publish can never race a
//! reap and leave a message on an unindexed stream.
//!
//! Every name one publication's script step touches is in the partition's
//! slot (its index bucket and registry copies are the slot's, see
//! [`crate::store::keys::index`]). A batch is published with one script call per
//! Redis node and chunk of at most [`CHUNK`] publications and
//! [`Limits::call_bytes`] bytes of messages (a bigger message alone): on a
//! single Redis the batch in order, one chunk per call; on a Redis Cluster
//! the batch grouped by the primary serving each publication's slot, in
//! batch order within each group, the groups' calls at once. A batch
//! deduplicated by producer sequence goes with each stream's publications
//! together instead, the streams in order of their first publication
//! (fewer streams per call). A stream lives on one node, so each stream's
//! publications keep their batch order.
//!
//! The script takes every name in `ARGV`, with the first stream of the call
//! in `KEYS[1]` (a cluster routes the call by it), and carries the
//! `allow-cross-slot-keys` flag: a cluster refuses declared keys of several
//! slots in one call, even with the flag. Like the lease scripts, it then
//! touches every slot of its node it is given; a slot the node no longer
//! serves fails the call (see [`publish`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::ClientLike as _;
use fred::types::Value;
use futures_util::stream::{FuturesOrdered, StreamExt};
use ordo_core::contract::broker::{
    POSITION_EPOCH_METADATA, POSITION_METADATA, POSITION_SCOPE_METADATA, Publication, PublishError, Refusal,
    RefusedExtent,
};
use ordo_core::contract::key::Lane;

use crate::error::Error;
use crate::net::nodes;
use crate::store::buckets;
use crate::store::calls;
use crate::store::calls::publish::Published;
use crate::store::keys::{
    BaseKeys, PartitionKeys, Routing, group_registry, index_directory, joining, slot_of,
};

/// Publications per script call: large enough to amortise the round trip,
/// small enough to keep each script short.
const CHUNK: usize = 128;

/// Calls one node's group of a batch has out at once when every
/// publication of the batch is deduplicated by producer sequence: two, so
/// Redis runs one while the next one is on its way and the engine prepares
/// the one after. Otherwise one: only the producer sequence lets the script
/// refuse a publication whose earlier one of its stream failed in the call
/// before (`gap`); a position would take the earlier one, sent again, for a
/// duplicate, and a message id would let it land after the later one.
const CALLS_IN_FLIGHT: usize = 2;

/// How much one script call carries at most, besides [`CHUNK`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bytes of messages (envelope JSON) per call; a message bigger than
    /// this goes in a call of its own.
    pub(crate) call_bytes: usize,
}

/// How publishes are deduplicated within `window` (zero: off): by producer
/// sequence, or else by message id. At most `cap` ids per stream are kept,
/// and producers beyond `cap` per stream go once idle for the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dedup {
    pub(crate) window: Duration,
    pub(crate) cap: usize,
}

/// What this process keeps of the category indexes it publishes to: the
/// (category, slot) buckets it listed in their category's directory, so
/// steady-state publishing does not list them again (directories are never
/// shrunk, so what was listed stays listed); and the categories whose
/// index a publish grew while the increment of their index version (which
/// makes discovery read the index again) failed: tried again at the next
/// publish.
#[derive(Debug, Default)]
pub(crate) struct IndexNotes {
    listed: Mutex<HashSet<(String, u16)>>,
    unannounced: Mutex<BTreeSet<String>>,
}

impl IndexNotes {
    fn contains(&self, category: &str, slot: u16) -> bool {
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&(category.to_owned(), slot))
    }

    fn insert(&self, category: &str, slot: u16) {
        self.listed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((category.to_owned(), slot));
    }

    /// Increments the index version of `grown` and of the categories whose
    /// increment failed before; keeps those that fail now for the next
    /// publish. The publications are written whatever this does: a failure
    /// only delays their partitions' discovery, at most until its next full
    /// read of the index.
    async fn announce(&self, client: &Pool, grown: BTreeSet<String>) {
        let mut due = std::mem::take(&mut *self.unannounced.lock().unwrap_or_else(PoisonError::into_inner));
        if due.is_empty() && grown.is_empty() {
            return;
        }
        due.extend(grown);
        let mut failed = BTreeSet::new();
        for category in due {
            if let Err(error) = buckets::index_changed(client, &category).await {
                tracing::warn!(error = %ordo_core::contract::error::error_chain(&error), %category,
                    "saying that the index grew failed; trying again at the next publish");
                failed.insert(category);
            }
        }
        self.unannounced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(failed);
    }
}

/// Publishes `publications`, each stream's in batch order, with one script
/// call per node and [`CHUNK`] publications (see the module documentation);
/// on failure, says how many from the start of the batch were published.
///
/// On a cluster the nodes' calls run at once, so when one fails, later
/// publications of the batch may be written on other nodes already (the
/// first failure stops the other nodes before their next call: at most one
/// chunk each goes on); and a batch deduplicated by producer sequence sends
/// each stream's publications together, so later publications of other
/// streams may be written before an earlier one that failed.
/// [`PublishError::published`] counts the publications
/// up to the first one not known to be written, never more: a conservative
/// prefix, as after a call whose reply was lost. A caller that publishes
/// again from there (the outbox processor, the PostgreSQL relay) re-sends
/// what was written beyond the prefix, and the script drops it: a
/// publication with an outbox position by the position check (its scope's
/// last position is not below it), one with a producer by its sequence
/// (not above its producer's last one in the stream), any other by the
/// message-id window ([`Dedup`]). With the window off (`publish_dedup_window(0)`, or
/// [`RedisBroker::republish`](crate::RedisBroker::republish)) such a
/// publication is appended again after its first copy: at-least-once, each
/// stream still in batch order.
///
/// When a call fails because a slot moved since the client's view of the
/// cluster was read (a failover, a resharding), the view is refreshed and
/// what is not written yet is grouped by node again and published once more.
/// The script reads every stream of its call before it writes anything, so a
/// call refused for a moved slot wrote nothing and the retry sends only
/// what was not written. Only a slot moving *during* a call (a resharding
/// migrating the slot's keys one by one) can fail a call part-way, which
/// then counts as not written and is re-sent: idempotence drops its
/// written part, as above.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn publish(
    client: &Pool,
    dedup: Dedup,
    limits: Limits,
    backfill_suffix: &str,
    routing: &Routing,
    notes: &IndexNotes,
    publications: &[Publication],
) -> Result<(), PublishError> {
    let mut prepared = Vec::with_capacity(publications.len());
    let clustered = client.next().is_clustered();
    // Each destination's names are built once per batch, with the number
    // of its stream in the batch (the keys of a hashed partition share one).
    let mut targets: HashMap<Destination<'_>, (Arc<Target>, usize)> = HashMap::new();
    let mut streams: HashMap<String, usize> = HashMap::new();
    // Each stream's last publication of each producer so far in the batch:
    // the next one names it (`previous`), so the batch's calls can go out
    // without waiting for each other's replies.
    let mut chained: HashMap<(usize, Arc<str>), u64> = HashMap::new();
    for publication in publications {
        let (target, stream) = targets
            .entry((
                publication.category.as_str(),
                publication.key.as_deref(),
                publication.lane,
            ))
            .or_insert_with(|| {
                let target = Target::of(publication, backfill_suffix, routing, clustered);
                let count = streams.len();
                let stream = *streams.entry(target.stream.clone()).or_insert(count);
                (Arc::new(target), stream)
            });
        // The one before it is the later of the batch's last one there and
        // the one the caller names (in a call of its own still out).
        let previous = publication.producer.as_ref().map(|p| {
            let last = chained.entry((*stream, Arc::clone(&p.producer))).or_insert(0);
            std::mem::replace(last, p.sequence).max(p.previous)
        });
        prepared.push(Prepared {
            target: Arc::clone(target),
            stream: *stream,
            previous: previous.unwrap_or(0),
        });
    }
    let batch = Batch::new(publications, prepared, limits, by_producer(dedup, publications));
    // One client of the pool routes, groups and sends the whole batch, so
    // the cluster view the retry refreshes is the one it groups by (each
    // client has its own). Calls to different nodes go over different
    // connections: one client is enough for one call per node at a time.
    let router = client.next();
    let result = match list_slots(client, notes, &batch.prepared).await {
        Ok(()) => {
            nodes::once_more_if_moved(router, "publish", || publish_unwritten(router, dedup, &batch)).await
        }
        Err(error) => Err(error),
    };
    let grown = std::mem::take(&mut *batch.grown.lock().unwrap_or_else(PoisonError::into_inner));
    notes.announce(client, grown).await;
    match result.err() {
        None => Ok(()),
        Some(error @ Error::HistoryConflict { .. }) => {
            let (index, recorded) = batch.refused().unwrap_or_default();
            Err(PublishError {
                published: batch.published(),
                source: Box::new(
                    Refusal::new(index, RefusedExtent::Scope, error).with_broker_position(recorded),
                ),
            })
        }
        Some(error) => Err(PublishError {
            published: batch.published(),
            source: Box::new(error),
        }),
    }
}

/// Whether every one of `publications` is deduplicated by producer
/// sequence (the window on, a producer, no position): then the batch has
/// [`CALLS_IN_FLIGHT`] calls out at once per node, and its calls take
/// each stream's publications together.
fn by_producer(dedup: Dedup, publications: &[Publication]) -> bool {
    !dedup.window.is_zero()
        && publications
            .iter()
            .all(|p| p.producer.is_some() && position(p).is_none())
}

/// The one producer of every one of `publications`, when they are
/// deduplicated [`by_producer`] and share it (an outbox's batch): its calls
/// name it once and send five arguments per publication instead of nine.
fn one_producer(by_producer: bool, publications: &[Publication]) -> Option<Arc<str>> {
    let first = publications.first()?.producer.as_ref()?;
    let shared = by_producer
        && publications
            .iter()
            .all(|p| p.producer.as_ref().is_some_and(|p| p.producer == first.producer));
    shared.then(|| Arc::clone(&first.producer))
}

/// Where a publication goes: its category, key (none: the base stream) and
/// lane.
type Destination<'a> = (&'a str, Option<&'a str>, Lane);

/// A batch on its way: its publications, where each goes, and which of
/// them are written.
struct Batch<'a> {
    publications: &'a [Publication],
    /// By position: where each publication goes.
    prepared: Vec<Prepared>,
    limits: Limits,
    /// Every publication is deduplicated by producer sequence (see
    /// [`by_producer`]).
    by_producer: bool,
    /// The one producer of every publication, named once per call (see
    /// [`one_producer`]).
    producer: Option<Arc<str>>,
    /// Calls out at once per node (see [`CALLS_IN_FLIGHT`]).
    in_flight: usize,
    written: Mutex<Vec<bool>>,
    /// The categories whose index a call may have grown (see
    /// [`IndexNotes::announce`]).
    grown: Mutex<BTreeSet<String>>,
    /// The publication refused for a position of another history, and the
    /// scope's last position in Redis.
    refused: Mutex<Option<(usize, u64)>>,
}

impl<'a> Batch<'a> {
    fn new(
        publications: &'a [Publication],
        prepared: Vec<Prepared>,
        limits: Limits,
        by_producer: bool,
    ) -> Self {
        let written = Mutex::new(vec![false; prepared.len()]);
        Self {
            publications,
            prepared,
            limits,
            by_producer,
            producer: one_producer(by_producer, publications),
            in_flight: if by_producer { CALLS_IN_FLIGHT } else { 1 },
            written,
            grown: Mutex::new(BTreeSet::new()),
            refused: Mutex::new(None),
        }
    }

    fn refuse(&self, position: usize, recorded: u64) {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner) = Some((position, recorded));
    }

    fn refused(&self) -> Option<(usize, u64)> {
        *self.refused.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next chunk of `positions` from `cursor` on, for one script
    /// call: at most [`CHUNK`] publications and [`Limits::call_bytes`] of
    /// messages, or one bigger message alone; empty when none is left.
    /// Each message is encoded here, as its call is formed, so the first
    /// calls go out while the rest of the batch is still to encode, and
    /// moves into its call (a call sent again encodes it again). A
    /// publication that cannot be encoded ends the chunk before it, and
    /// comes back as the error beside it.
    fn next_chunk<'p>(&self, positions: &'p [usize], cursor: &mut Cursor) -> (Chunk<'p>, Option<Error>) {
        let start = cursor.next;
        let (mut bytes, mut messages, mut unencodable) = (0, Vec::new(), None);
        while let Some(&position) = positions.get(cursor.next) {
            let json = match cursor
                .carried
                .take()
                .map_or_else(|| json_of(&self.publications[position]), Ok)
            {
                Ok(json) => json,
                Err(error) => {
                    unencodable = Some(error);
                    break;
                }
            };
            let taken = cursor.next - start;
            if taken > 0 && (taken == CHUNK || bytes + json.len() > self.limits.call_bytes) {
                // The first of the next chunk.
                cursor.carried = Some(json);
                break;
            }
            bytes += json.len();
            messages.push(json);
            cursor.next += 1;
        }
        let chunk = Chunk {
            positions: &positions[start..cursor.next],
            messages,
        };
        (chunk, unencodable)
    }

    /// Publication `position` with its message `json`, as its call takes it.
    fn arguments(&self, position: usize, json: Vec<u8>) -> calls::publish::Publication<'_> {
        let publication = &self.publications[position];
        let prepared = &self.prepared[position];
        let envelope = &publication.envelope;
        let sequence = self::position(publication);
        calls::publish::Publication {
            type_name: &envelope.type_name,
            json,
            id: &envelope.id,
            sequence,
            hashed_key: match &publication.key {
                Some(key) if prepared.target.hashed => key,
                _ => "",
            },
            epoch: epoch_of(publication),
            producer: publication
                .producer
                .as_ref()
                .map(|p| (&*p.producer, p.sequence, prepared.previous)),
        }
    }

    /// The positions not written yet, in batch order.
    fn unwritten(&self) -> Vec<usize> {
        let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        (0..written.len()).filter(|&i| !written[i]).collect()
    }

    /// The order `positions` (of one node, in batch order) are sent in:
    /// batch order, or, when every publication is deduplicated by producer
    /// sequence, each stream's publications together (in batch order, the
    /// streams in order of their first publication), so a call names
    /// fewer streams and the script's steps per stream and call (existence,
    /// producer record, index entry, doorbell) run fewer times. What a
    /// failure leaves written is then not a prefix of the batch: the
    /// prefix reported is the conservative one, and what was written
    /// beyond it, sent again, is dropped by its sequence (see [`publish`]).
    fn send_order(&self, mut positions: Vec<usize>) -> Vec<usize> {
        if self.by_producer {
            // Stable: each stream's publications keep their batch order.
            positions.sort_by_key(|&i| self.prepared[i].stream);
        }
        positions
    }

    /// Notes that the call of `positions` may have added partitions to
    /// their categories' indexes.
    fn mark_grown(&self, positions: &[usize]) {
        let mut grown = self.grown.lock().unwrap_or_else(PoisonError::into_inner);
        for &position in positions {
            let target = &self.prepared[position].target;
            if target.indexed && !grown.contains(&target.category) {
                grown.insert(target.category.clone());
            }
        }
    }

    fn mark_written(&self, positions: &[usize]) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        for &position in positions {
            written[position] = true;
        }
    }

    /// How many from the start of the batch are written.
    fn published(&self) -> usize {
        let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        written.iter().take_while(|written| **written).count()
    }
}

/// Publishes what of `batch` is not written yet: grouped by node (one group
/// on a single Redis), each group's chunks in order, the groups at once.
/// Returns the first failure; the first failure stops every group before its
/// next call.
async fn publish_unwritten(router: &Client, dedup: Dedup, batch: &Batch<'_>) -> Result<(), Error> {
    let unwritten = batch.unwritten();
    if unwritten.is_empty() {
        return Ok(());
    }
    nodes::nodes(router).await?;
    let groups = nodes::group_by_node(
        router,
        unwritten
            .into_iter()
            .map(|i| (batch.prepared[i].target.stream.as_bytes(), i)),
    )?;
    let failure = Mutex::new(None);
    // The nodes' calls at once, from this task: each group's calls are
    // I/O, and its encoding is done as they go.
    let groups: Vec<Vec<usize>> = groups
        .into_iter()
        .map(|(_, positions)| batch.send_order(positions))
        .collect();
    futures_util::future::join_all(
        groups
            .iter()
            .map(|positions| publish_group(router, dedup, batch, positions, &failure)),
    )
    .await;
    let first = failure.lock().unwrap_or_else(PoisonError::into_inner).take();
    first.map_or(Ok(()), Err)
}

/// Publishes `positions` of `batch`, all on one node, [`CHUNK`] per call in
/// order, [`Batch::in_flight`] calls out at once on the node's one
/// connection (Redis runs one call while the next one is on its way); marks
/// what is written. Sends no further call after its own failure (recorded
/// in `failure` unless another group's came first) or once another group
/// failed; the calls already out end as they may: a publication whose
/// earlier publication of its stream failed is refused by the script
/// (`gap`), so none passes one before it.
async fn publish_group(
    client: &Client,
    dedup: Dedup,
    batch: &Batch<'_>,
    positions: &[usize],
    failure: &Mutex<Option<Error>>,
) {
    let fail = |error| {
        failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(error);
    };
    let failed = || failure.lock().unwrap_or_else(PoisonError::into_inner).is_some();
    let mut cursor = Cursor::default();
    let mut out = FuturesOrdered::new();
    loop {
        while out.len() < batch.in_flight && !failed() {
            // With an error, what precedes it goes; it and what follows do not.
            let (chunk, unencodable) = batch.next_chunk(positions, &mut cursor);
            let empty = chunk.positions.is_empty();
            if !empty {
                out.push_back(async move {
                    let positions = chunk.positions;
                    (positions, publish_chunk(client, dedup, batch, chunk).await)
                });
            }
            match unencodable {
                Some(error) => fail(error),
                None if empty => break,
                None => {}
            }
        }
        let Some((chunk, result)) = out.next().await else {
            return;
        };
        match result {
            Ok(()) => batch.mark_written(chunk),
            Err((written, error)) => {
                batch.mark_written(&chunk[..written.min(chunk.len())]);
                fail(error);
            }
        }
    }
}

/// Lists the index buckets of `prepared`'s partitions in their categories'
/// directories, unless this process did before. Before the script: a
/// partition is never indexed in a bucket discovery does not read.
async fn list_slots(client: &Pool, notes: &IndexNotes, prepared: &[Prepared]) -> Result<(), Error> {
    let mut missing: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    for one in prepared {
        let one = &*one.target;
        if !one.indexed {
            continue;
        }
        if !notes.contains(&one.category, one.slot) {
            let slots = missing.entry(&one.category).or_default();
            if !slots.contains(&one.slot) {
                slots.push(one.slot);
            }
        }
    }
    for (category, slots) in missing {
        buckets::list(client, &index_directory(category), &slots).await?;
        for slot in slots {
            notes.insert(category, slot);
        }
    }
    Ok(())
}

/// Publishes `chunk` (positions of `batch`, all served by the node `client`
/// sends the call to, and their messages) in one script call; on failure
/// says how many of it were written.
async fn publish_chunk(
    client: &Client,
    dedup: Dedup,
    batch: &Batch<'_>,
    chunk: Chunk<'_>,
) -> Result<(), (usize, Error)> {
    let Chunk { positions, messages } = chunk;
    let Some(&first) = positions.first() else {
        return Ok(());
    };
    // The call's streams, each named once, numbered in order of appearance.
    let mut numbers: HashMap<&str, usize> = HashMap::new();
    let mut streams: Vec<&[Value]> = Vec::new();
    let mut publications = Vec::with_capacity(positions.len());
    for (&position, json) in positions.iter().zip(messages) {
        let target = &batch.prepared[position].target;
        let number = *numbers.entry(&target.stream).or_insert_with(|| {
            streams.push(&target.args);
            streams.len() - 1
        });
        publications.push((number, batch.arguments(position, json)));
    }
    let published = calls::publish::publish(
        client,
        &batch.prepared[first].target.stream,
        dedup.window,
        dedup.cap,
        batch.producer.as_deref(),
        &streams,
        publications.into_iter(),
    )
    .await;
    // Discovery learns of new partitions from the index version: whatever
    // may have indexed one (a call that failed part-way, or whose reply
    // was lost, may have) is said.
    if !matches!(
        published,
        Ok(Published::Ok {
            new_partitions: false
        })
    ) {
        batch.mark_grown(positions);
    }
    match published? {
        Published::Ok { .. } => Ok(()),
        Published::Failed { written, message } => Err((
            written,
            calls::publish::protocol(format!("XADD failed: {message}")),
        )),
        // The call before failed (its failure is the one reported), or the
        // caller named a publication that never came.
        Published::Gap { written } => Err((
            written,
            calls::publish::protocol(
                "a publication's previous one of its producer is not in the stream (tag `gap`)",
            ),
        )),
        Published::Conflict { written, recorded } => {
            let Some(&position) = positions.get(written) else {
                return Err((
                    written,
                    calls::publish::protocol("conflict past the end of the call (tag `conflict`)"),
                ));
            };
            let publication = &batch.publications[position];
            let (recorded_position, recorded_epoch) = match recorded.split_once('/') {
                Some((seq, epoch)) => (seq.parse().unwrap_or(0), epoch.to_owned()),
                None => (recorded.parse().unwrap_or(0), String::new()),
            };
            batch.refuse(position, recorded_position);
            Err((
                written,
                Error::HistoryConflict {
                    scope: scope_of(publication),
                    position: self::position(publication).unwrap_or(0),
                    epoch: epoch_of(publication).to_owned(),
                    recorded_position,
                    recorded_epoch,
                },
            ))
        }
    }
}

/// A publication of a batch: where it goes, and after which of its
/// producer's publications.
struct Prepared {
    /// Its stream, shared with the batch's other publications there.
    target: Arc<Target>,
    /// The number of its stream in the batch (in order of first use).
    stream: usize,
    /// The producer's publication before it in its stream, in a call not
    /// answered yet (0: none).
    previous: u64,
}

/// Where a group's next call starts: the position in the group, and the
/// message of that publication when encoded already (it did not fit in
/// the call before).
#[derive(Default)]
struct Cursor {
    next: usize,
    carried: Option<Vec<u8>>,
}

/// The publications of one script call (positions of the batch) and their
/// messages, encoded.
struct Chunk<'p> {
    positions: &'p [usize],
    messages: Vec<Vec<u8>>,
}

/// `publication`'s envelope as JSON, its message in the stream: written
/// into one allocation sized for it (the payload, with room for escaping
/// its quotes, and the envelope's other fields), not grown from a small one.
fn json_of(publication: &Publication) -> Result<Vec<u8>, Error> {
    let envelope = &publication.envelope;
    let estimate = envelope.payload.len() + envelope.payload.len() / 4 + 256;
    let mut json = Vec::with_capacity(estimate);
    serde_json::to_writer(&mut json, envelope).map_err(|source| Error::Encode {
        message_id: envelope.id.clone(),
        source,
    })?;
    Ok(json)
}

/// The identity of the history `publication`'s position belongs to (empty
/// without a position, or when its source names none).
fn epoch_of(publication: &Publication) -> &str {
    position(publication)
        .and(publication.envelope.metadata.get(POSITION_EPOCH_METADATA))
        .map_or("", String::as_str)
}

/// `publication`'s position scope, for people (`order:c-1`,
/// `order:c-1 (backfill)`, `order`).
fn scope_of(publication: &Publication) -> String {
    match (&publication.key, publication.lane) {
        (Some(key), Lane::Primary) => format!("{}:{key}", publication.category),
        (Some(key), Lane::Backfill) => format!("{}:{key} (backfill)", publication.category),
        (None, _) => publication.category.clone(),
    }
}

/// Where publications go: their stream and everything of it the script
/// touches, built once per destination and batch.
struct Target {
    /// Its stream: the call's routing key, and what it is grouped by.
    stream: String,
    category: String,
    /// The slot of every name it touches.
    slot: u16,
    /// Whether it goes to a partition (listed in an index bucket).
    indexed: bool,
    /// Whether its partition is hashed (each entry carries its key).
    hashed: bool,
    /// Its [`ARGS_PER_STREAM`](calls::publish::ARGS_PER_STREAM) script arguments.
    args: Vec<Value>,
}

impl Target {
    /// The destination of `publication`, from its (category, key, lane). On
    /// a single Redis (`clustered` false) the category's own group registry
    /// and joining marker stand for every slot's copy (see
    /// [`crate::store::buckets::register_group`]).
    fn of(publication: &Publication, backfill_suffix: &str, routing: &Routing, clustered: bool) -> Self {
        let category = &publication.category;
        let (names, slot, hashed) = match &publication.key {
            Some(key) => {
                let id = routing.partition_of(category, key);
                let hashed = id.is_hashed();
                let partition = PartitionKeys::of(id, backfill_suffix);
                let names = calls::publish::StreamNames {
                    stream: partition.lane(publication.lane).to_owned(),
                    index: partition.index(),
                    registry: if clustered {
                        partition.registry()
                    } else {
                        group_registry(category)
                    },
                    published: partition.published(publication.lane),
                    producers: partition.producers(publication.lane),
                    joining: if clustered {
                        partition.joining()
                    } else {
                        joining(category)
                    },
                    position: partition.position(publication.lane),
                    doorbell: partition.doorbell(),
                    member: partition.key().to_owned(),
                    channel: partition.doorbell_channel(),
                };
                (names, partition.slot(), hashed)
            }
            None => {
                let base = BaseKeys::new(category);
                // The base stream hashes like `{<category>}`: the category's
                // own registry and joining marker share its slot.
                let names = calls::publish::StreamNames {
                    stream: base.stream().to_owned(),
                    // Not written (no member), but an argument all the same.
                    index: group_registry(category),
                    registry: group_registry(category),
                    published: base.published(),
                    producers: base.producers(),
                    joining: joining(category),
                    position: base.position(),
                    doorbell: base.doorbell(),
                    member: String::new(),
                    channel: base.doorbell_channel(),
                };
                (names, slot_of(base.stream()), false)
            }
        };
        Self {
            stream: names.stream.clone(),
            category: category.clone(),
            slot,
            indexed: !names.member.is_empty(),
            hashed,
            args: names.into_args(),
        }
    }
}

/// The position a publication carries (from the PostgreSQL outbox's relay),
/// in the scope of its own lane: the broker derives the scope from the
/// publication's (category, key, lane); the scope text in the metadata
/// ([`POSITION_SCOPE_METADATA`]) only says that the source numbers its
/// scopes. A malformed position is ignored: the message is published as one
/// without.
fn position(publication: &Publication) -> Option<u64> {
    let metadata = &publication.envelope.metadata;
    if !metadata.contains_key(POSITION_SCOPE_METADATA) {
        return None;
    }
    metadata
        .get(POSITION_METADATA)
        .and_then(|p| p.parse::<u64>().ok())
        .filter(|seq| *seq > 0)
}

#[cfg(test)]
mod tests {
    use ordo_core::contract::message::{Envelope, MessageKind, Metadata};

    use super::*;

    fn publication() -> Publication {
        let envelope = Envelope {
            id: "m-1".to_owned(),
            kind: MessageKind::Event,
            type_name: "Happened".to_owned(),
            category: "order".to_owned(),
            aggregate_id: None,
            routing_key: None,
            partition_key: Some("c-1".to_owned()),
            metadata: Metadata::new(),
            occurred_at: None,
            correlation_id: None,
            causation_id: None,
            payload: "{}".into(),
        };
        Publication::to_partition("c-1", Lane::Primary, envelope)
    }

    fn dedup(window_s: u64) -> Dedup {
        Dedup {
            window: Duration::from_secs(window_s),
            cap: 10,
        }
    }

    /// A batch's calls name its producer once only when every publication
    /// is deduplicated by that one producer's sequence.
    #[test]
    fn only_a_batch_of_one_producer_names_it_once_per_call() {
        let (one, other): (Arc<str>, Arc<str>) = (Arc::from("p-1"), Arc::from("p-2"));
        let of = |producer: &Arc<str>| publication().with_producer(Arc::clone(producer), 1);
        let named = |dedup, publications: &[Publication]| {
            one_producer(by_producer(dedup, publications), publications).map(|p| p.to_string())
        };
        assert_eq!(named(dedup(60), &[of(&one), of(&one)]), Some("p-1".to_owned()));
        assert_eq!(named(dedup(60), &[of(&one), of(&other)]), None, "two producers");
        assert_eq!(named(dedup(60), &[of(&one), publication()]), None, "one without");
        assert_eq!(named(dedup(0), &[of(&one)]), None, "the window off");
        assert_eq!(named(dedup(60), &[]), None);
    }

    /// Only a batch every publication of which the script can refuse at a
    /// gap goes out more than one call at a time: with a message id or a
    /// position, an earlier publication sent again after its call failed
    /// would land behind a later one, or be taken for a duplicate.
    #[test]
    fn only_a_batch_deduplicated_by_producer_sequence_has_calls_out_at_once() {
        let producer: Arc<str> = Arc::from("p-1");
        let produced = || publication().with_producer(Arc::clone(&producer), 1);
        let calls_in_flight = |dedup, publications: &[Publication]| {
            Batch::new(
                &[],
                Vec::new(),
                Limits { call_bytes: 1 },
                by_producer(dedup, publications),
            )
            .in_flight
        };
        assert_eq!(
            calls_in_flight(dedup(60), &[produced(), produced()]),
            CALLS_IN_FLIGHT
        );
        assert_eq!(calls_in_flight(dedup(60), &[produced(), publication()]), 1);
        assert_eq!(calls_in_flight(dedup(0), &[produced()]), 1, "the window off");
        let mut positioned = produced();
        positioned
            .envelope
            .metadata
            .insert(POSITION_SCOPE_METADATA.to_owned(), "order:c-1".to_owned());
        positioned
            .envelope
            .metadata
            .insert(POSITION_METADATA.to_owned(), "7".to_owned());
        assert_eq!(calls_in_flight(dedup(60), &[produced(), positioned]), 1);
    }
}
