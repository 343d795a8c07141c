//! A handler's fenced writes: `commit.lua`.

use std::time::Duration;

use fred::interfaces::FunctionInterface;
use fred::types::Value;

use super::{Fence, integer, millis};
use crate::error::{Error, Result};
use crate::store::scripts::{Reply, SCRIPTS};

/// One write of a fenced commit: `command key args...`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write<'a> {
    pub(crate) command: &'a str,
    pub(crate) key: &'a str,
    pub(crate) args: &'a [String],
}

/// The arguments of `commit.lua`: `writes`, applied together under the
/// fence as commit `id` of attempt `attempt` (closed in `sequence`), at
/// most once: the commit's `marker` remembers it for `marker_ttl`, or,
/// for commit `number` of a run of `message` (not empty), until the
/// message's acknowledgement, so that no run of it again applies it twice.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Commit<'a> {
    pub(crate) fence: Fence<'a>,
    pub(crate) marker: &'a str,
    pub(crate) sequence: &'a str,
    pub(crate) id: &'a str,
    pub(crate) marker_ttl: Duration,
    pub(crate) attempt: u64,
    pub(crate) message: &'a str,
    pub(crate) number: u64,
    pub(crate) writes: &'a [Write<'a>],
}

/// `commit.lua`. Returns the writes' replies; a commit of an attempt closed
/// already is [`Error::Stale`]. An error of the call itself is classified
/// ([`Error::classified`]): a lost connection or a timeout is transient.
pub(crate) async fn commit<C>(client: &C, commit: Commit<'_>) -> Result<Vec<Value>>
where
    C: FunctionInterface + Send + Sync,
{
    let Commit {
        fence,
        marker,
        sequence,
        id,
        marker_ttl,
        attempt,
        message,
        number,
        writes,
    } = commit;
    let mut keys = vec![fence.lease.to_owned(), marker.to_owned(), sequence.to_owned()];
    keys.extend(writes.iter().map(|write| write.key.to_owned()));
    let mut args = vec![
        Value::from(fence.value),
        Value::from(id),
        millis(marker_ttl),
        integer(attempt),
        Value::from(message),
        integer(number),
        Value::from(i64::try_from(writes.len()).unwrap_or(i64::MAX)),
    ];
    for write in writes {
        args.push(Value::from(write.command));
        args.push(Value::from(
            i64::try_from(write.args.len() + 1).unwrap_or(i64::MAX),
        ));
        args.push(Value::from(write.key));
        args.extend(write.args.iter().map(|a| Value::from(a.as_str())));
    }
    let script = &SCRIPTS.commit;
    let ran = script.run(client, keys, args).await.map_err(Error::classified)?;
    let reply = Reply::parse(script, ran)?.unfenced(fence.lease, fence.value)?;
    match reply.tag() {
        "ok" => Ok(reply.into_rest()),
        "stale" => Err(Error::Stale {
            lease: fence.lease.to_owned(),
            attempt,
        }),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}
