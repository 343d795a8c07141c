//! Publishing to partition streams: `publish.lua`.

use std::time::Duration;

use fred::interfaces::FunctionInterface;
use fred::types::Value;

use super::millis;
use crate::error::Error;
use crate::store::scripts::{Reply, SCRIPTS};

/// Script arguments per stream of a call (see `publish.lua`).
pub(crate) const ARGS_PER_STREAM: usize = 10;

/// Script arguments per publication (see `publish.lua`), besides the
/// number of its stream in the call.
pub(crate) const ARGS_PER_PUBLICATION: usize = 9;

/// Script arguments per publication of a call with one producer (see
/// `publish.lua`), besides the number of its stream in the call.
pub(crate) const ARGS_PER_PRODUCED: usize = 5;

/// The names one stream's publications are written under (all in one
/// slot), sent once per stream and call.
#[derive(Debug)]
pub(crate) struct StreamNames {
    pub(crate) stream: String,
    pub(crate) index: String,
    /// The copy of the group registry in the stream's slot (on a single
    /// Redis, the category's registry).
    pub(crate) registry: String,
    pub(crate) published: String,
    pub(crate) producers: String,
    /// The copy of the joining marker in the stream's slot (on a single
    /// Redis, the category's marker).
    pub(crate) joining: String,
    pub(crate) position: String,
    pub(crate) doorbell: String,
    /// The index member (empty for a base stream, which is not indexed).
    pub(crate) member: String,
    /// The doorbell channel of the stream's slot.
    pub(crate) channel: String,
}

impl StreamNames {
    /// Its [`ARGS_PER_STREAM`] arguments, in `publish.lua`'s order.
    pub(crate) fn into_args(self) -> Vec<Value> {
        let args = vec![
            Value::from(self.stream),
            Value::from(self.index),
            Value::from(self.registry),
            Value::from(self.published),
            Value::from(self.producers),
            Value::from(self.joining),
            Value::from(self.position),
            Value::from(self.doorbell),
            Value::from(self.member),
            Value::from(self.channel),
        ];
        debug_assert_eq!(args.len(), ARGS_PER_STREAM);
        args
    }
}

/// One publication as `publish.lua` takes it, besides its stream's names:
/// the message and how it is deduplicated.
#[derive(Debug)]
pub(crate) struct Publication<'a> {
    pub(crate) type_name: &'a str,
    /// The envelope, as JSON (UTF-8).
    pub(crate) json: Vec<u8>,
    pub(crate) id: &'a str,
    /// Its position in its scope, if any, and the history it belongs to.
    pub(crate) sequence: Option<u64>,
    /// The key, when its partition is hashed (else empty).
    pub(crate) hashed_key: &'a str,
    pub(crate) epoch: &'a str,
    /// Its producer, sequence and the sequence of the producer's
    /// publication before it to the same stream in a call not answered yet
    /// (0: none), if its source numbers what it publishes.
    pub(crate) producer: Option<(&'a str, u64, u64)>,
}

impl Publication<'_> {
    /// Appends its [`ARGS_PER_PUBLICATION`] arguments to `args`, in
    /// `publish.lua`'s order (the message moves in: no copy of it).
    pub(crate) fn push_args(self, args: &mut Vec<Value>) {
        let before = args.len();
        args.extend([
            Value::from(self.type_name),
            Value::Bytes(self.json.into()),
            Value::from(self.id),
            Value::from(self.sequence.map(|seq| seq.to_string()).unwrap_or_default()),
            Value::from(self.hashed_key),
            Value::from(self.epoch),
            Value::from(self.producer.map_or("", |(producer, _, _)| producer)),
            Value::from(self.producer.map_or(0, |(_, sequence, _)| sequence_arg(sequence))),
            Value::from(self.producer.map_or(0, |(_, _, previous)| sequence_arg(previous))),
        ]);
        debug_assert_eq!(args.len() - before, ARGS_PER_PUBLICATION);
    }

    /// Appends its [`ARGS_PER_PRODUCED`] arguments to `args`, for a call
    /// whose one producer is its own (named once in the call): it has no
    /// message id, position or epoch to send.
    pub(crate) fn push_produced_args(self, args: &mut Vec<Value>) {
        let before = args.len();
        let (_, sequence, previous) = self.producer.unwrap_or_default();
        args.extend([
            Value::from(self.type_name),
            Value::Bytes(self.json.into()),
            Value::from(self.hashed_key),
            Value::from(sequence_arg(sequence)),
            Value::from(sequence_arg(previous)),
        ]);
        debug_assert_eq!(args.len() - before, ARGS_PER_PRODUCED);
    }
}

/// A sequence as a script argument: Lua numbers are doubles, exact up to
/// 2^53 (an outbox row id never comes near).
fn sequence_arg(sequence: u64) -> i64 {
    i64::try_from(sequence.min(1 << 53)).unwrap_or(1 << 53)
}

/// What `publish.lua` answered (after writing the first `written` of its
/// publications, when it stopped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Published {
    /// Every publication is written; `new_partitions`: some went to a
    /// partition that was not in its category's index (now it is).
    Ok { new_partitions: bool },
    /// `XADD` failed on publication `written`, with this message.
    Failed { written: usize, message: String },
    /// Publication `written`'s position conflicts with the one recorded
    /// (`position` or `position/epoch`).
    Conflict { written: usize, recorded: String },
    /// The producer's publication before publication `written` (its
    /// `previous`) is not in the stream: nothing of it or after it written.
    Gap { written: usize },
}

/// `publish.lua`: the publications whose arguments are `publications`,
/// each with the number of its stream in `streams` (the names of every
/// stream of the call, in order), all served by the node `stream` (the
/// first one's) routes to, in one call; deduplicated within `window`
/// (zero: off) by producer sequence, or by message id (at most `cap` ids
/// kept per stream). With `producer`, every publication is that
/// producer's, laid out by [`Publication::push_produced_args`]; else by
/// [`Publication::push_args`]. An error says how many were written before
/// it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn publish<'a, C>(
    client: &C,
    stream: &str,
    window: Duration,
    cap: usize,
    producer: Option<&str>,
    streams: &[&[Value]],
    publications: impl ExactSizeIterator<Item = (usize, Publication<'a>)>,
) -> Result<Published, (usize, Error)>
where
    C: FunctionInterface + Send + Sync,
{
    let keys = vec![stream.to_owned()];
    let per_publication = if producer.is_some() {
        ARGS_PER_PRODUCED
    } else {
        ARGS_PER_PUBLICATION
    };
    let mut args =
        Vec::with_capacity(4 + streams.len() * ARGS_PER_STREAM + publications.len() * (1 + per_publication));
    args.push(if window.is_zero() {
        Value::from(0)
    } else {
        millis(window)
    });
    args.push(Value::from(i64::try_from(cap).unwrap_or(i64::MAX)));
    args.push(Value::from(i64::try_from(streams.len()).unwrap_or(i64::MAX)));
    args.push(Value::from(producer.unwrap_or_default()));
    // Cheap clones: text values share their bytes.
    for names in streams {
        args.extend(names.iter().cloned());
    }
    for (number, one) in publications {
        args.push(Value::from(i64::try_from(number + 1).unwrap_or(i64::MAX)));
        if producer.is_some() {
            one.push_produced_args(&mut args);
        } else {
            one.push_args(&mut args);
        }
    }
    let script = &SCRIPTS.publish;
    let value = script.run(client, keys, args).await.map_err(|e| (0, e))?;
    let reply = Reply::parse(script, value).map_err(|e| (0, e))?;
    match reply.tag() {
        // A library older than the count (loaded by an older `ordo
        // setup`) answers without it: the partitions may be new.
        "ok" => Ok(Published::Ok {
            new_partitions: reply.integer(2).map_or(true, |added| added > 0),
        }),
        "error" => {
            let written = reply.integer(0).map_err(|e| (0, e))?;
            let message = reply.string(1).unwrap_or_default();
            Ok(Published::Failed {
                written: usize::try_from(written).unwrap_or(0),
                message,
            })
        }
        "gap" => {
            let written = reply.integer(0).map_err(|e| (0, e))?;
            Ok(Published::Gap {
                written: usize::try_from(written).unwrap_or(0),
            })
        }
        "conflict" => {
            let written = usize::try_from(reply.integer(0).map_err(|e| (0, e))?).unwrap_or(0);
            let recorded = reply.string(1).map_err(|e| (written, e))?;
            Ok(Published::Conflict { written, recorded })
        }
        _ => Err((0, reply.unexpected("unknown outcome"))),
    }
}

/// An error of a publish call that is not Redis's: `detail`.
pub(crate) fn protocol(detail: impl Into<String>) -> Error {
    Error::protocol(SCRIPTS.publish.name(), detail)
}
