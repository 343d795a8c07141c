//! Publishing: each message is added to its stream and its partition to the
//! category index in one atomic script step, so a publish can never race a
//! reap and leave a message on an unindexed stream.
//!
//! Every name one publication's script step touches is in the partition's
//! slot (its index bucket and registry copies are the slot's, see
//! [`crate::keys::index`]), so on Redis Cluster a script call takes the
//! publications of one slot: a batch is cut into runs of consecutive
//! publications with the same slot, published in order.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::ClientLike;
use fred::types::Value;
use ordo_core::broker::{POSITION_METADATA, POSITION_SCOPE_METADATA, Publication, PublishError};

use crate::buckets;
use crate::error::Error;
use crate::keys::{BaseKeys, PartitionKeys, group_registry, index_directory, joining, slot_of};
use crate::scripts::{Reply, SCRIPTS};

/// Publications per script call: large enough to amortise the round trip,
/// small enough to keep each script short.
const CHUNK: usize = 128;

/// How publishes are deduplicated: a message id appended to a stream is not
/// appended again within `window` (zero: off); at most `cap` ids are kept
/// per stream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dedup {
    pub(crate) window: Duration,
    pub(crate) cap: usize,
}

/// The (category, slot) index buckets this process has listed in their
/// category's directory, so steady-state publishing does not list them
/// again. Directories are never shrunk, so what was listed stays listed.
#[derive(Debug, Default)]
pub(crate) struct ListedSlots(Mutex<HashSet<(String, u16)>>);

impl ListedSlots {
    fn contains(&self, category: &str, slot: u16) -> bool {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&(category.to_owned(), slot))
    }

    fn insert(&self, category: &str, slot: u16) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((category.to_owned(), slot));
    }
}

/// Publishes `publications` in order, [`CHUNK`] per script call (on a
/// cluster, at most a run of one slot per call).
pub(crate) async fn publish(
    client: &Pool,
    dedup: Dedup,
    backfill_suffix: &str,
    listed: &ListedSlots,
    publications: &[Publication],
) -> Result<(), PublishError> {
    let clustered = client.next().is_clustered();
    let mut published = 0;
    for chunk in calls(publications, backfill_suffix, clustered) {
        let written = match list_slots(client, listed, backfill_suffix, chunk).await {
            Ok(()) => publish_chunk(client, dedup, backfill_suffix, chunk).await,
            Err(error) => Err((0, error)),
        };
        match written {
            Ok(()) => published += chunk.len(),
            Err((written, error)) => {
                return Err(PublishError {
                    published: published + written,
                    source: Box::new(error),
                });
            }
        }
    }
    Ok(())
}

/// `publications` cut into the script calls that publish them, in order:
/// at most [`CHUNK`] each, and on a cluster only consecutive publications
/// of one slot (a script's keys must share one).
fn calls<'a>(
    publications: &'a [Publication],
    backfill_suffix: &str,
    clustered: bool,
) -> Vec<&'a [Publication]> {
    let mut calls = Vec::new();
    for chunk in publications.chunks(CHUNK) {
        if !clustered {
            calls.push(chunk);
            continue;
        }
        let mut start = 0;
        let slots: Vec<u16> = chunk.iter().map(|p| Names::of(p, backfill_suffix).slot).collect();
        for end in 1..=chunk.len() {
            if end == chunk.len() || slots[end] != slots[start] {
                calls.push(&chunk[start..end]);
                start = end;
            }
        }
    }
    calls
}

/// Lists the index buckets of `chunk`'s partitions in their categories'
/// directories, unless this process did before. Before the script: a
/// partition is never indexed in a bucket discovery does not read.
async fn list_slots(
    client: &Pool,
    listed: &ListedSlots,
    backfill_suffix: &str,
    chunk: &[Publication],
) -> Result<(), Error> {
    let mut missing: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    for publication in chunk {
        if publication.key.is_none() {
            continue;
        }
        let slot = Names::of(publication, backfill_suffix).slot;
        if !listed.contains(&publication.category, slot) {
            let slots = missing.entry(&publication.category).or_default();
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
    }
    for (category, slots) in missing {
        buckets::list(client, &index_directory(category), &slots).await?;
        for slot in slots {
            listed.insert(category, slot);
        }
    }
    Ok(())
}

/// Publishes one chunk; on failure says how many of it were published.
async fn publish_chunk(
    client: &Pool,
    dedup: Dedup,
    backfill_suffix: &str,
    chunk: &[Publication],
) -> Result<(), (usize, Error)> {
    let mut keys = Vec::with_capacity(chunk.len() * 7);
    let mut args = Vec::with_capacity(chunk.len() * 6 + 2);
    args.push(crate::lease::millis(dedup.window));
    if dedup.window.is_zero() {
        args[0] = Value::from(0);
    }
    args.push(Value::from(i64::try_from(dedup.cap).unwrap_or(i64::MAX)));
    for publication in chunk {
        let envelope = &publication.envelope;
        let json = serde_json::to_string(envelope).map_err(|source| {
            (
                0,
                Error::Encode {
                    message_id: envelope.id.clone(),
                    source,
                },
            )
        })?;
        let names = Names::of(publication, backfill_suffix);
        keys.push(names.stream);
        keys.push(names.index);
        keys.push(names.registry);
        keys.push(names.published);
        keys.push(names.joining);
        keys.push(names.position);
        keys.push(names.doorbell);
        args.push(Value::from(names.member.unwrap_or_default()));
        args.push(Value::from(envelope.type_name.as_str()));
        args.push(Value::from(json));
        args.push(Value::from(envelope.id.as_str()));
        args.push(Value::from(
            position(publication)
                .map(|seq| seq.to_string())
                .unwrap_or_default(),
        ));
        args.push(Value::from(names.channel));
    }
    let script = &SCRIPTS.publish;
    let value = script.run(client, keys, args).await.map_err(|e| (0, e))?;
    let reply = Reply::parse(script, value).map_err(|e| (0, e))?;
    match reply.tag() {
        "ok" => Ok(()),
        "error" => {
            let written = reply.integer(0).map_err(|e| (0, e))?;
            let message = reply.string(1).unwrap_or_default();
            Err((
                usize::try_from(written).unwrap_or(0),
                Error::protocol(script.name(), format!("XADD failed: {message}")),
            ))
        }
        _ => Err((0, reply.unexpected("unknown outcome"))),
    }
}

/// The names a publication is written under, from its (category, key, lane).
struct Names {
    stream: String,
    index: String,
    /// The copy of the group registry in the stream's slot.
    registry: String,
    /// The copy of the joining marker in the stream's slot.
    joining: String,
    published: String,
    position: String,
    doorbell: String,
    /// The doorbell channel of the stream's slot.
    channel: String,
    /// The index member (`None` for the base stream, which is not indexed).
    member: Option<String>,
    /// The slot of every name above.
    slot: u16,
}

impl Names {
    fn of(publication: &Publication, backfill_suffix: &str) -> Self {
        match &publication.key {
            Some(key) => {
                let partition = PartitionKeys::new(&publication.category, key, backfill_suffix);
                Self {
                    stream: partition.lane(publication.lane).to_owned(),
                    index: partition.index(),
                    registry: partition.registry(),
                    joining: partition.joining(),
                    published: partition.published(publication.lane),
                    position: partition.position(publication.lane),
                    doorbell: partition.doorbell(),
                    channel: partition.doorbell_channel(),
                    member: Some(partition.key().to_owned()),
                    slot: partition.slot(),
                }
            }
            None => {
                let base = BaseKeys::new(&publication.category);
                // The base stream hashes like `{<category>}`: the category's
                // own registry and joining marker share its slot.
                Self {
                    stream: base.stream().to_owned(),
                    // Not written (no member), but a KEYS entry all the same.
                    index: group_registry(&publication.category),
                    registry: group_registry(&publication.category),
                    joining: joining(&publication.category),
                    published: base.published(),
                    position: base.position(),
                    doorbell: base.doorbell(),
                    channel: base.doorbell_channel(),
                    member: None,
                    slot: slot_of(base.stream()),
                }
            }
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
