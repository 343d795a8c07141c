//! An operator's decisions on a halted head: `resolve.lua` (a halted
//! partition) and `resolve_parked.lua` (a parked key of a hashed one).

use fred::interfaces::FunctionInterface;
use fred::types::Value;

use crate::error::Result;
use crate::store::keys::PartitionKeys;
use crate::store::scripts::{Reply, SCRIPTS};

/// What a resolve script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resolved {
    /// Done: the script's answer (the head it acted on).
    Ok(String),
    /// The partition (or key) is not halted.
    NotHalted,
    /// It is halted on another head than expected: this one.
    HeadChanged(String),
}

/// What a resolve script's reply says.
fn resolved(reply: &Reply) -> Result<Resolved> {
    match reply.tag() {
        "ok" => Ok(Resolved::Ok(reply.string(0)?)),
        "not_halted" => Ok(Resolved::NotHalted),
        "head_changed" => Ok(Resolved::HeadChanged(reply.string(0)?)),
        _ => Err(reply.unexpected("unknown outcome")),
    }
}

/// `resolve.lua`: applies `action` (by name) to the head `partition` is
/// halted on for `group`, if it is `expected` (empty: any).
pub(crate) async fn resolve<C>(
    client: &C,
    partition: &PartitionKeys,
    group: &str,
    action: &str,
    expected: &str,
) -> Result<Resolved>
where
    C: FunctionInterface + Send + Sync,
{
    let halt_key = partition.halt(group);
    let keys = vec![
        halt_key.clone(),
        partition.halted(),
        partition.log(group),
        partition.primary().to_owned(),
        partition.backfill().to_owned(),
        partition.dlq(),
        partition.attempts(group),
    ];
    let args = vec![
        Value::from(halt_key),
        Value::from(group),
        Value::from(action),
        Value::from(""),
        Value::from(expected),
    ];
    let script = &SCRIPTS.resolve;
    resolved(&Reply::parse(script, script.run(client, keys, args).await?)?)
}

/// `resolve_parked.lua`: applies `action` (by name) to the head `key` of
/// hashed `partition` is parked on for `group`, if it is `expected`
/// (empty: any).
pub(crate) async fn resolve_parked<C>(
    client: &C,
    partition: &PartitionKeys,
    group: &str,
    key: &str,
    action: &str,
    expected: &str,
) -> Result<Resolved>
where
    C: FunctionInterface + Send + Sync,
{
    let name = partition.parked(group);
    let keys = vec![
        name.clone(),
        partition.halted(),
        partition.log(group),
        partition.held(group, key),
        partition.dlq(),
        partition.attempts(group),
    ];
    let args = vec![
        Value::from(name),
        Value::from(group),
        Value::from(action),
        Value::from(""),
        Value::from(expected),
        Value::from(key),
    ];
    let script = &SCRIPTS.resolve_parked;
    resolved(&Reply::parse(script, script.run(client, keys, args).await?)?)
}
