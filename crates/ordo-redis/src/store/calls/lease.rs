//! The lease scripts: `acquire.lua`, `take.lua`, `lost.lua`,
//! `release.lua`; and the member key's plain commands (register, renew,
//! ask, leave).

use std::time::Duration;

use fred::interfaces::{FunctionInterface, KeysInterface};
use fred::types::{Expiration, SetOptions, Value};

use super::millis;
use crate::error::{Error, Result};
use crate::store::keys::LeaseKeys;
use crate::store::scripts::{SCRIPTS, Script, array};

/// What `acquire` answered for one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Held by an earlier release's instance (or over the limit): not
    /// acquired.
    NotHeld,
    /// Held under this instance id by an earlier release's process.
    Duplicate,
    /// Held by this owner, with this fencing token.
    Token(u64),
    /// Held by another member, as this value (`identity:token`): taken
    /// over by [`take`] once that member's key is found gone.
    HeldBy(String),
}

/// `acquire.lua`: tries to take the free leases of `candidates` (all
/// served by the node `client` reaches) for `identity`, at most `limit`
/// new ones. Returns how many it newly acquired, and the answer per
/// candidate, in order.
pub(crate) async fn acquire<C>(
    client: &C,
    identity: &str,
    instance: &str,
    candidates: &[&LeaseKeys],
    limit: usize,
) -> Result<(usize, Vec<Acquired>)>
where
    C: FunctionInterface + Send + Sync,
{
    let Some(first) = candidates.first() else {
        return Ok((0, Vec::new()));
    };
    let mut args = vec![Value::from(identity), Value::from(instance), count(limit)];
    for keys in candidates {
        args.push(Value::from(keys.lease.as_str()));
        args.push(Value::from(keys.generation.as_str()));
    }
    let script = &SCRIPTS.acquire;
    let reply = script.run(client, vec![first.lease.clone()], args).await?;
    let (acquired, answers) = counted(script, reply, candidates.len())?;
    let answers = answers
        .into_iter()
        .map(|answer| match answer {
            Value::String(holder) => Ok(Acquired::HeldBy(holder.to_string())),
            Value::Bytes(holder) => Ok(Acquired::HeldBy(String::from_utf8_lossy(&holder).into_owned())),
            answer => match token(script, &answer)? {
                None => Ok(Acquired::NotHeld),
                Some(-1) => Ok(Acquired::Duplicate),
                Some(token) => u64::try_from(token)
                    .map(Acquired::Token)
                    .map_err(|_| Error::protocol(script.name(), "token is negative")),
            },
        })
        .collect::<Result<_>>()?;
    Ok((acquired, answers))
}

/// `take.lua`: takes over each of `leases` (its keys and the value
/// `acquire` read in it; all served by the node `client` reaches) that
/// still holds that value, for `identity`, at most `limit` of them: their
/// holders' member keys were found gone. Returns how many it took, and the
/// new token per lease (`None`: not taken).
pub(crate) async fn take<C>(
    client: &C,
    identity: &str,
    leases: &[(&LeaseKeys, &str)],
    limit: usize,
) -> Result<(usize, Vec<Option<u64>>)>
where
    C: FunctionInterface + Send + Sync,
{
    let Some((first, _)) = leases.first() else {
        return Ok((0, Vec::new()));
    };
    let mut args = vec![Value::from(identity), count(limit)];
    for (keys, read) in leases {
        args.push(Value::from(keys.lease.as_str()));
        args.push(Value::from(keys.generation.as_str()));
        args.push(Value::from(*read));
    }
    let script = &SCRIPTS.take;
    let reply = script.run(client, vec![first.lease.clone()], args).await?;
    let (taken, tokens) = counted(script, reply, leases.len())?;
    let tokens = tokens
        .iter()
        .map(|answer| {
            token(script, answer)?
                .map(|token| {
                    u64::try_from(token).map_err(|_| Error::protocol(script.name(), "token is negative"))
                })
                .transpose()
        })
        .collect::<Result<_>>()?;
    Ok((taken, tokens))
}

/// A limit as a script argument.
fn count(limit: usize) -> Value {
    Value::from(i64::try_from(limit).unwrap_or(i64::MAX))
}

/// A reply of a count, then one answer per candidate.
fn counted(script: &Script, reply: Value, candidates: usize) -> Result<(usize, Vec<Value>)> {
    let mut reply = array(reply).into_iter();
    let count = reply
        .next()
        .and_then(|count| count.as_u64())
        .and_then(|count| usize::try_from(count).ok())
        .ok_or_else(|| Error::protocol(script.name(), "the count is not a number"))?;
    let answers: Vec<Value> = reply.collect();
    if answers.len() != candidates {
        return Err(Error::protocol(
            script.name(),
            "one answer per candidate expected",
        ));
    }
    Ok((count, answers))
}

/// A token answer: `None` for 0 (not held).
fn token(script: &Script, answer: &Value) -> Result<Option<i64>> {
    match answer.as_i64() {
        Some(0) => Ok(None),
        Some(token) => Ok(Some(token)),
        None => Err(Error::protocol(script.name(), "token is not an integer")),
    }
}

/// `lost.lua`: which of `leases` (key and expected value, all served by
/// the node `client` reaches) are no longer held; their positions.
pub(crate) async fn lost<C>(client: &C, leases: &[(String, String)]) -> Result<Vec<usize>>
where
    C: FunctionInterface + Send + Sync,
{
    let Some((routing, _)) = leases.first() else {
        return Ok(Vec::new());
    };
    let keys = vec![routing.clone()];
    let mut args = Vec::with_capacity(1 + 2 * leases.len());
    args.push(super::whole(client));
    for (key, value) in leases {
        args.push(Value::from(key.as_str()));
        args.push(Value::from(value.as_str()));
    }
    let script = &SCRIPTS.lost;
    array(script.run(client, keys, args).await?)
        .iter()
        .map(|position| {
            position
                .as_u64()
                .and_then(|p| usize::try_from(p).ok())
                .and_then(|p| p.checked_sub(1))
                .filter(|&p| p < leases.len())
                .ok_or_else(|| Error::protocol(script.name(), "lost position is not a position in the call"))
        })
        .collect()
}

/// `release.lua`: deletes the lease `keys` if it still holds `value`,
/// keeping its token in the generation key for `generation_ttl`; returns
/// whether it did.
pub(crate) async fn release<C>(
    client: &C,
    keys: &LeaseKeys,
    value: &str,
    generation_ttl: Duration,
) -> Result<bool>
where
    C: FunctionInterface + Send + Sync,
{
    let released = SCRIPTS
        .release
        .run(
            client,
            vec![keys.lease.clone(), keys.generation.clone()],
            vec![Value::from(value), millis(generation_ttl)],
        )
        .await?;
    Ok(released.as_i64() == Some(1))
}

/// Registers the member key `key` for `ttl` if it does not exist; returns
/// whether it did (`false`: another process start drew the same nonce).
pub(crate) async fn register<C>(client: &C, key: &str, value: &str, ttl: Duration) -> Result<bool>
where
    C: KeysInterface + Send + Sync,
{
    let set: Option<String> = client
        .set(
            key,
            value,
            Some(Expiration::PX(super::whole_millis(ttl))),
            Some(SetOptions::NX),
            false,
        )
        .await?;
    Ok(set.is_some())
}

/// Renews the member key `key` for `ttl` (`PEXPIRE`, which never creates
/// it); returns whether it still existed.
pub(crate) async fn renew<C>(client: &C, key: &str, ttl: Duration) -> Result<bool>
where
    C: KeysInterface + Send + Sync,
{
    Ok(client
        .pexpire::<i64, _>(key, super::whole_millis(ttl), None)
        .await?
        == 1)
}

/// Which of the member keys `keys` (all in one slot) exist, in order.
pub(crate) async fn alive<C>(client: &C, keys: &[String]) -> Result<Vec<bool>>
where
    C: KeysInterface + Send + Sync,
{
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<Option<String>> = client.mget(keys.to_vec()).await?;
    Ok(values.iter().map(Option::is_some).collect())
}

/// Deletes the member key `key` (a clean stop, after every lease was let go).
pub(crate) async fn leave<C>(client: &C, key: &str) -> Result<()>
where
    C: KeysInterface + Send + Sync,
{
    let _: i64 = client.del(key).await?;
    Ok(())
}
