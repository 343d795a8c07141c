//! Ownership leases: acquire, renew and release, each one atomic script.
//!
//! A lease key holds `{instance}:{nonce}:{token}` with a TTL. The nonce is
//! drawn once per [`Partitions`](crate::Partitions) (one per process start),
//! so two processes configured with the same instance id are two different
//! owners: neither can adopt or pass the fence of the other's lease, and the
//! second one is reported ([`Error::DuplicateInstance`]). The token (the fencing
//! token) is `max(previous + 1, server time in µs)`, so it grows at every
//! change of owner and stays monotonic even after the partition is reaped
//! and its generation counter deleted: a stalled owner from before a reap can
//! never match a lease taken after it.

use std::fmt;
use std::time::Duration;

use fred::interfaces::LuaInterface;
use fred::types::Value;

use crate::error::{Error, Result};
use crate::keys::LeaseKeys;
use crate::scripts::{SCRIPTS, array};

/// How much longer than the lease the generation counter is kept. While it
/// exists the next token is `previous + 1`; after it expires the server
/// clock alone keeps tokens increasing.
const GENERATION_TTL_FACTOR: u32 = 10;

/// How much longer than the lease a lease's attempt sequence is kept after
/// its last change: far longer than any command stays in flight (commands
/// time out after a third of the TTL, reconnections resend within seconds).
pub(crate) const SEQUENCE_TTL_FACTOR: u32 = 10;

/// A lease this instance holds.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    keys: LeaseKeys,
    value: String,
    token: u64,
}

impl Lease {
    pub(crate) fn new(keys: LeaseKeys, owner: &str, token: u64) -> Self {
        Self {
            value: format!("{owner}:{token}"),
            keys,
            token,
        }
    }

    /// The lease key.
    pub fn key(&self) -> &str {
        &self.keys.lease
    }

    /// The value the lease key holds while this lease is valid:
    /// `{instance}:{nonce}:{token}`.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The fencing token: larger tokens belong to newer owners.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lease and generation keys.
    pub fn keys(&self) -> &LeaseKeys {
        &self.keys
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.keys.lease)
            .field("value", &self.value)
            .finish()
    }
}

/// Who takes leases: the configured instance id and this process's nonce.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Owner {
    instance: String,
    /// `{instance}:{nonce}`: a lease value without its token.
    identity: String,
}

impl Owner {
    /// `instance`, with a fresh nonce.
    pub(crate) fn new(instance: &str) -> Self {
        let nonce = &uuid::Uuid::new_v4().simple().to_string()[..16];
        Self {
            instance: instance.to_owned(),
            identity: format!("{instance}:{nonce}"),
        }
    }

    /// The configured instance id.
    pub(crate) fn instance(&self) -> &str {
        &self.instance
    }

    /// `{instance}:{nonce}`.
    pub(crate) fn identity(&self) -> &str {
        &self.identity
    }
}

/// Acquires up to `limit` of the free leases among `candidates`, in order,
/// in one script call. Returns, per candidate, the lease now held by
/// `owner` (newly acquired, or already its own, whose TTL is then renewed),
/// or `None`. A lease held by another process under the same instance id is
/// [`Error::DuplicateInstance`].
pub(crate) async fn acquire<C>(
    client: &C,
    owner: &Owner,
    ttl: Duration,
    candidates: &[LeaseKeys],
    limit: usize,
) -> Result<Vec<Option<Lease>>>
where
    C: LuaInterface + Send + Sync,
{
    if candidates.is_empty() || limit == 0 {
        return Ok(vec![None; candidates.len()]);
    }
    let script = &SCRIPTS.acquire;
    let keys = candidates
        .iter()
        .flat_map(|k| [k.lease.clone(), k.generation.clone()])
        .collect();
    let args = vec![
        Value::from(owner.identity()),
        Value::from(owner.instance()),
        millis(ttl),
        millis(ttl * GENERATION_TTL_FACTOR),
        Value::from(i64::try_from(limit).unwrap_or(i64::MAX)),
    ];
    let tokens = array(script.run(client, keys, args).await?);
    if tokens.len() != candidates.len() {
        return Err(Error::protocol(script.name(), "one token per candidate expected"));
    }
    tokens
        .iter()
        .zip(candidates)
        .map(|(token, keys)| match token.as_i64() {
            Some(0) => Ok(None),
            Some(-1) => Err(Error::DuplicateInstance {
                instance: owner.instance().to_owned(),
                lease: keys.lease.clone(),
            }),
            Some(token) => u64::try_from(token)
                .map(|token| Some(Lease::new(keys.clone(), owner.identity(), token)))
                .map_err(|_| Error::protocol(script.name(), "token is negative")),
            None => Err(Error::protocol(script.name(), "token is not an integer")),
        })
        .collect()
}

/// Renews `leases` in one script call; returns the positions of those no
/// longer held.
pub(crate) async fn renew<'a, C>(
    client: &C,
    ttl: Duration,
    leases: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<Vec<usize>>
where
    C: LuaInterface + Send + Sync,
{
    let mut keys = Vec::new();
    let mut args = vec![millis(ttl)];
    for (key, value) in leases {
        keys.push(key.to_owned());
        args.push(Value::from(value));
    }
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let script = &SCRIPTS.renew;
    array(script.run(client, keys, args).await?)
        .iter()
        .map(|position| {
            position
                .as_u64()
                .and_then(|p| usize::try_from(p).ok())
                .and_then(|p| p.checked_sub(1))
                .ok_or_else(|| Error::protocol(script.name(), "lost position is not a positive integer"))
        })
        .collect()
}

/// Releases `lease` if it is still held; returns whether it was.
pub(crate) async fn release<C>(client: &C, lease: &Lease) -> Result<bool>
where
    C: LuaInterface + Send + Sync,
{
    let script = &SCRIPTS.release;
    let released = script
        .run(
            client,
            vec![lease.key().to_owned()],
            vec![Value::from(lease.value())],
        )
        .await?;
    Ok(released.as_i64() == Some(1))
}

/// A duration in whole milliseconds (at least 1), as a script argument.
pub(crate) fn millis(duration: Duration) -> Value {
    Value::from(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX).max(1))
}
