//! Publishing: each message is added to its stream and its partition to the
//! category index in one atomic script step, so a publish can never race a
//! reap and leave a message on an unindexed stream.

use std::time::Duration;

use fred::clients::Pool;
use fred::types::Value;
use ordo_core::broker::{POSITION_METADATA, POSITION_SCOPE_METADATA, Publication, PublishError};

use crate::error::Error;
use crate::keys::{BaseKeys, PartitionKeys, group_registry, joining};
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

/// Publishes `publications` in order, [`CHUNK`] per script call.
pub(crate) async fn publish(
    client: &Pool,
    dedup: Dedup,
    backfill_suffix: &str,
    publications: &[Publication],
) -> Result<(), PublishError> {
    let mut published = 0;
    for chunk in publications.chunks(CHUNK) {
        let written = publish_chunk(client, dedup, backfill_suffix, chunk).await;
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

/// Publishes one chunk; on failure says how many of it were published.
async fn publish_chunk(
    client: &Pool,
    dedup: Dedup,
    backfill_suffix: &str,
    chunk: &[Publication],
) -> Result<(), (usize, Error)> {
    let mut keys = Vec::with_capacity(chunk.len() * 6);
    let mut args = Vec::with_capacity(chunk.len() * 5 + 2);
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
        keys.push(group_registry(&publication.category));
        keys.push(names.published);
        keys.push(joining(&publication.category));
        keys.push(names.position);
        args.push(Value::from(names.member.unwrap_or_default()));
        args.push(Value::from(envelope.type_name.as_str()));
        args.push(Value::from(json));
        args.push(Value::from(envelope.id.as_str()));
        args.push(Value::from(
            position(publication)
                .map(|seq| seq.to_string())
                .unwrap_or_default(),
        ));
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
    published: String,
    position: String,
    /// The index member (`None` for the base stream, which is not indexed).
    member: Option<String>,
}

impl Names {
    fn of(publication: &Publication, backfill_suffix: &str) -> Self {
        match &publication.key {
            Some(key) => {
                let partition = PartitionKeys::new(&publication.category, key, backfill_suffix);
                Self {
                    stream: partition.lane(publication.lane).to_owned(),
                    index: partition.index(),
                    published: partition.published(publication.lane),
                    position: partition.position(publication.lane),
                    member: Some(partition.key().to_owned()),
                }
            }
            None => {
                let base = BaseKeys::new(&publication.category);
                Self {
                    stream: base.stream().to_owned(),
                    // Not written (no member), but a KEYS entry all the same;
                    // the registry's slot, not a partition's.
                    index: group_registry(&publication.category),
                    published: base.published(),
                    position: base.position(),
                    member: None,
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
