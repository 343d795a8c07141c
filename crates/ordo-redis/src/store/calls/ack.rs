//! The batched acknowledgement script: `ack.lua`.

use std::time::Duration;

use fred::bytes_utils::Str;
use fred::interfaces::FunctionInterface;
use fred::types::Value;

use super::{integer, millis};
use crate::error::{Error, Result};
use crate::store::scripts::{SCRIPTS, array};

/// One acknowledgement of `ack.lua`: `ids` of one partition lane, under
/// the lease `lease` holding `lease_value`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ack<'a> {
    pub(crate) lease: &'a Str,
    pub(crate) lease_value: &'a Str,
    /// The lane's stream, and the partition's primary lane.
    pub(crate) lane: &'a Str,
    pub(crate) primary: &'a Str,
    /// The attempt sequence the attempt is closed in.
    pub(crate) sequence: &'a Str,
    /// The commit marker, and the message whose applied commits it takes
    /// out of it (empty: none).
    pub(crate) marker: &'a Str,
    pub(crate) message: &'a Str,
    /// The hash of failed attempts per entry.
    pub(crate) failures: &'a Str,
    pub(crate) group: &'a Str,
    /// The attempt it closes (0: none).
    pub(crate) attempt: u64,
    /// Whether the ids may have failed attempts on record (to clear).
    pub(crate) had_failures: bool,
    /// Whether to trim what every group has acknowledged from the lane.
    pub(crate) trim: bool,
    pub(crate) ids: &'a [Str],
}

impl Ack<'_> {
    /// Its arguments, in the short form when it closes no attempt, forgets
    /// no commit and clears no failed attempts (most acknowledgements):
    /// six names fewer for Redis to take in.
    fn push_args(&self, args: &mut Vec<Value>) {
        let short = self.attempt == 0 && self.message.is_empty() && !self.had_failures;
        let form = match (short, self.trim) {
            (true, false) => "s0",
            (true, true) => "s1",
            (false, false) => "f0",
            (false, true) => "f1",
        };
        args.extend([
            Value::from_static_str(form),
            Value::from(self.lease.clone()),
            Value::from(self.lease_value.clone()),
            Value::from(self.lane.clone()),
            Value::from(self.primary.clone()),
        ]);
        if !short {
            args.extend([
                Value::from(self.sequence.clone()),
                Value::from(self.marker.clone()),
                Value::from(self.message.clone()),
                Value::from(self.failures.clone()),
            ]);
        }
        args.push(Value::from(self.group.clone()));
        if !short {
            args.extend([integer(self.attempt), Value::from(i64::from(self.had_failures))]);
        }
        args.push(Value::from(i64::try_from(self.ids.len()).unwrap_or(i64::MAX)));
        args.extend(self.ids.iter().cloned().map(Value::from));
    }

    fn fenced(&self, holder: String) -> Error {
        Error::Fenced {
            lease: self.lease.to_string(),
            expected: self.lease_value.to_string(),
            holder: Some(holder).filter(|h| !h.is_empty()),
        }
    }
}

/// `ack.lua`: `acks` (all served by the node `client` reaches) in one
/// call, attempt sequences kept for `sequence_ttl`. Returns each one's
/// outcome, in order: whether its partition's primary lane has entries
/// waiting, or [`Error::Fenced`] when its lease is no longer held.
pub(crate) async fn ack<C>(client: &C, sequence_ttl: Duration, acks: &[Ack<'_>]) -> Result<Vec<Result<bool>>>
where
    C: FunctionInterface + Send + Sync,
{
    let Some(routing) = acks.first().map(|ack| ack.lease.to_string()) else {
        return Ok(Vec::new());
    };
    let call = || {
        let mut args = Vec::with_capacity(1 + acks.len() * 14);
        args.push(millis(sequence_ttl));
        for ack in acks {
            ack.push_args(&mut args);
        }
        (vec![routing.clone()], args)
    };
    let script = &SCRIPTS.ack;
    let reply = array(script.run_with(client, call).await?);
    if reply.len() != 2 * acks.len() {
        return Err(Error::protocol(
            script.name(),
            format!("{} values for {} acknowledgements", reply.len(), acks.len()),
        ));
    }
    let mut outcomes = Vec::with_capacity(acks.len());
    for (pair, ack) in reply.chunks_exact(2).zip(acks) {
        let outcome = match pair[0].as_str().as_deref() {
            Some("ok") => Ok(pair[1].as_i64() == Some(1)),
            Some("fenced") => Err(ack.fenced(pair[1].as_string().unwrap_or_default())),
            _ => {
                return Err(Error::protocol(
                    script.name(),
                    format!("unknown outcome {:?} for lease `{}`", pair[0], ack.lease),
                ));
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// The error of an acknowledgement call that answered nothing for it.
pub(crate) fn no_outcome() -> Error {
    Error::protocol(SCRIPTS.ack.name(), "no outcome")
}
