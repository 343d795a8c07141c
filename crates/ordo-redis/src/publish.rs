//! Publishing: each message is added to its stream and its partition to the
//! category index in one atomic script step, so a publish can never race a
//! reap and leave a message on an unindexed stream.

use std::time::Duration;

use fred::clients::Pool;
use fred::types::Value;
use ordo_core::broker::{POSITION_METADATA, POSITION_SCOPE_METADATA, Publication, PublishError};
use ordo_core::key::stream;

use crate::error::Error;
use crate::keys::{group_registry, joining, position, recently_published};
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
    publications: &[Publication],
) -> Result<(), PublishError> {
    let mut published = 0;
    for chunk in publications.chunks(CHUNK) {
        let written = publish_chunk(client, dedup, chunk).await;
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
async fn publish_chunk(client: &Pool, dedup: Dedup, chunk: &[Publication]) -> Result<(), (usize, Error)> {
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
        keys.push(publication.stream.clone());
        keys.push(stream::partitions_index(&envelope.category));
        keys.push(group_registry(&envelope.category));
        keys.push(recently_published(&publication.stream));
        keys.push(joining(&envelope.category));
        args.push(Value::from(index_member(publication).unwrap_or_default()));
        args.push(Value::from(envelope.type_name.as_str()));
        args.push(Value::from(json));
        args.push(Value::from(envelope.id.as_str()));
        let (scope, seq) = scoped_position(publication);
        keys.push(position(scope));
        args.push(Value::from(seq.map(|seq| seq.to_string()).unwrap_or_default()));
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

/// The position scope and position a publication carries (from the
/// PostgreSQL outbox's relay), or its stream and `None`. A malformed
/// position is ignored: the message is published as one without.
fn scoped_position(publication: &Publication) -> (&str, Option<u64>) {
    let metadata = &publication.envelope.metadata;
    match (
        metadata.get(POSITION_SCOPE_METADATA),
        metadata
            .get(POSITION_METADATA)
            .and_then(|p| p.parse::<u64>().ok()),
    ) {
        (Some(scope), Some(seq)) if seq > 0 => (scope, Some(seq)),
        _ => (&publication.stream, None),
    }
}

/// The index member of a partitioned publication (its key), or `None` for
/// one routed to the base category stream.
fn index_member(publication: &Publication) -> Option<&str> {
    let envelope = &publication.envelope;
    if publication.stream == envelope.category {
        return None;
    }
    envelope.partition_key.as_deref()
}
