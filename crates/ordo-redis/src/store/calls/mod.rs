//! One typed function per script: the only callers of the scripts in
//! `lua/`. Each takes typed values (key names from [`keys`](super::keys),
//! ids, tokens, durations), builds the script's `KEYS` and `ARGV`, runs it
//! through [`scripts`](super::scripts) and reads its reply into a typed
//! result; the wings above call these and never a script.
//!
//! One file per group of scripts, beside their Lua: [`lease`] (`acquire`,
//! `renew`, `release`), [`partition`] (`read`, `read_hashed`,
//! `close`, `halt`, `reap`), [`parking`] (`park`, `hold`, `held`,
//! `ack_held`), [`ack`] (`ack`: many acknowledgements in one call),
//! [`fence`] (`commit`: a handler's fenced writes), [`consumer`]
//! (`announce`, `arm`, `recheck`, `pause`), [`plain`] (`ack_plain`,
//! `claim_plain`), [`admin`] (`resolve`, `resolve_parked`), [`publish`]
//! (`publish`). The two scripts of records shared by many partitions,
//! `union` and `carry_positions`, are called by their own store modules,
//! [`buckets`](super::buckets) and [`positions`](super::positions).

pub(crate) mod ack;
pub(crate) mod admin;
pub(crate) mod consumer;
pub(crate) mod fence;
pub(crate) mod lease;
pub(crate) mod parking;
pub(crate) mod partition;
pub(crate) mod plain;
pub(crate) mod publish;

use std::time::Duration;

use fred::types::Value;
use ordo_core::contract::key::Lane;

/// Whether one command of a script `client` calls may name keys of many
/// slots, as a script argument: `1` on a single Redis (or one Sentinel
/// manages), `0` on a Redis Cluster, where a script that touches many slots
/// (`allow-cross-slot-keys`) must still keep each command to one.
pub(crate) fn whole(client: &impl fred::interfaces::ClientLike) -> Value {
    Value::from(if client.is_clustered() { "0" } else { "1" })
}

/// A duration in whole milliseconds (at least 1), as a script argument.
pub(crate) fn millis(duration: Duration) -> Value {
    Value::from(whole_millis(duration))
}

/// A duration in whole milliseconds (at least 1), as a command's argument.
pub(crate) fn whole_millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The lease an operation is fenced by: its key and the value its holder
/// expects it to hold. A script that finds another value answers
/// `{'fenced', holder}`, which becomes [`Error::Fenced`](crate::Error::Fenced).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fence<'a> {
    /// The lease key.
    pub(crate) lease: &'a str,
    /// The value its holder expects.
    pub(crate) value: &'a str,
}

/// A count or an attempt number as a script argument (saturated).
pub(crate) fn integer(n: u64) -> Value {
    Value::from(i64::try_from(n).unwrap_or(i64::MAX))
}

/// How a lane is written in halt records, held messages and script
/// arguments.
pub(crate) fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Primary => "primary",
        Lane::Backfill => "backfill",
    }
}
