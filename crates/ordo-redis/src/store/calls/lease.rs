//! The lease scripts: `acquire.lua`, `renew.lua`, `release.lua`.

use std::time::Duration;

use fred::interfaces::FunctionInterface;
use fred::types::Value;

use super::millis;
use crate::error::{Error, Result};
use crate::store::keys::LeaseKeys;
use crate::store::scripts::{SCRIPTS, array};

/// What `acquire` answered for one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Held by another owner (or over the limit): not acquired.
    NotHeld,
    /// Held under this instance id by another process (another nonce).
    Duplicate,
    /// Held by this owner, with this fencing token.
    Token(u64),
}

/// `acquire.lua`: tries to take the leases of `candidates` (all served by
/// the node `client` reaches) for `identity`, at most `limit` new ones,
/// each for `ttl` (its generation counter for `generation_ttl`). Returns
/// how many it newly acquired, and the answer per candidate, in order.
pub(crate) async fn acquire<C>(
    client: &C,
    identity: &str,
    instance: &str,
    ttl: Duration,
    generation_ttl: Duration,
    candidates: &[&LeaseKeys],
    limit: usize,
) -> Result<(usize, Vec<Acquired>)>
where
    C: FunctionInterface + Send + Sync,
{
    let script = &SCRIPTS.acquire;
    let Some(first) = candidates.first() else {
        return Ok((0, Vec::new()));
    };
    let mut args = vec![
        Value::from(identity),
        Value::from(instance),
        millis(ttl),
        millis(generation_ttl),
        Value::from(i64::try_from(limit).unwrap_or(i64::MAX)),
    ];
    for keys in candidates {
        args.push(Value::from(keys.lease.as_str()));
        args.push(Value::from(keys.generation.as_str()));
    }
    let mut reply = array(script.run(client, vec![first.lease.clone()], args).await?).into_iter();
    let acquired = reply
        .next()
        .and_then(|count| count.as_u64())
        .and_then(|count| usize::try_from(count).ok())
        .ok_or_else(|| Error::protocol(script.name(), "the acquired count is not a number"))?;
    let tokens: Vec<Value> = reply.collect();
    if tokens.len() != candidates.len() {
        return Err(Error::protocol(script.name(), "one token per candidate expected"));
    }
    let held = tokens
        .iter()
        .map(|token| match token.as_i64() {
            Some(0) => Ok(Acquired::NotHeld),
            Some(-1) => Ok(Acquired::Duplicate),
            Some(token) => u64::try_from(token)
                .map(Acquired::Token)
                .map_err(|_| Error::protocol(script.name(), "token is negative")),
            None => Err(Error::protocol(script.name(), "token is not an integer")),
        })
        .collect::<Result<_>>()?;
    Ok((acquired, held))
}

/// `renew.lua`: renews `leases` (key and expected value, all served by the
/// node `client` reaches) for `ttl`; returns the positions of those no
/// longer held.
pub(crate) async fn renew<C>(client: &C, ttl: Duration, leases: &[(String, String)]) -> Result<Vec<usize>>
where
    C: FunctionInterface + Send + Sync,
{
    let Some((routing, _)) = leases.first() else {
        return Ok(Vec::new());
    };
    let keys = vec![routing.clone()];
    let mut args = Vec::with_capacity(2 + 2 * leases.len());
    args.push(millis(ttl));
    args.push(super::whole(client));
    for (key, value) in leases {
        args.push(Value::from(key.as_str()));
        args.push(Value::from(value.as_str()));
    }
    let script = &SCRIPTS.renew;
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

/// `release.lua`: deletes the lease `key` if it still holds `value`;
/// returns whether it did.
pub(crate) async fn release<C>(client: &C, key: &str, value: &str) -> Result<bool>
where
    C: FunctionInterface + Send + Sync,
{
    let released = SCRIPTS
        .release
        .run(client, vec![key.to_owned()], vec![Value::from(value)])
        .await?;
    Ok(released.as_i64() == Some(1))
}
