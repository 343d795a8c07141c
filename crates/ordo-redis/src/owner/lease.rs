//! Ownership leases: acquire, renew and release, each one atomic script.
//!
//! A lease key holds `{instance}:{nonce}:{token}` with a TTL. The nonce is
//! drawn once per [`Partitions`](crate::internals::Partitions) (one per process start),
//! so two processes configured with the same instance id are two different
//! owners: neither can adopt or pass the fence of the other's lease, and the
//! second one is reported ([`Error::DuplicateInstance`]). The token (the fencing
//! token) is `max(previous + 1, server time in µs)`, so it grows at every
//! change of owner and stays monotonic even after the partition is reaped
//! and its generation counter deleted: a stalled owner from before a reap can
//! never match a lease taken after it.

use std::fmt;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::FunctionInterface;

use crate::error::{Error, Result};
use crate::net::nodes;
use crate::store::calls;
use crate::store::calls::Fence;
use crate::store::calls::lease::Acquired;
use crate::store::keys::LeaseKeys;

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

    /// The fence of an operation checked against this lease.
    pub(crate) fn fence(&self) -> Fence<'_> {
        Fence {
            lease: self.key(),
            value: self.value(),
        }
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
/// with one script call per Redis node (nodes in the order of their first
/// candidate). Returns, per candidate, the lease now held by `owner` (newly
/// acquired, or already its own, whose TTL is then renewed), or `None`. A
/// lease held by another process under the same instance id is
/// [`Error::DuplicateInstance`]. On a cluster whose view is out of date (a
/// slot moved), the view is refreshed and the acquisition tried once more
/// (leases the first try took are then adopted as this owner's own).
pub(crate) async fn acquire(
    client: &Client,
    owner: &Owner,
    ttl: Duration,
    candidates: &[LeaseKeys],
    limit: usize,
) -> Result<Vec<Option<Lease>>> {
    if candidates.is_empty() || limit == 0 {
        return Ok(vec![None; candidates.len()]);
    }
    nodes::once_more_if_moved(client, "acquire", || {
        acquire_per_node(client, owner, ttl, candidates, limit)
    })
    .await
}

async fn acquire_per_node(
    client: &Client,
    owner: &Owner,
    ttl: Duration,
    candidates: &[LeaseKeys],
    limit: usize,
) -> Result<Vec<Option<Lease>>> {
    nodes::nodes(client).await?;
    let mut groups = nodes::group_by_node(
        client,
        candidates.iter().enumerate().map(|(i, keys)| (&keys.lease, i)),
    )?;
    groups.sort_by_key(|(_, positions)| positions.first().copied());
    let mut leases = vec![None; candidates.len()];
    let mut remaining = limit;
    for (_, positions) in groups {
        if remaining == 0 {
            break;
        }
        let group: Vec<&LeaseKeys> = positions.iter().map(|&i| &candidates[i]).collect();
        let (acquired, held) = acquire_on(client, owner, ttl, &group, remaining).await?;
        remaining = remaining.saturating_sub(acquired);
        for (position, lease) in positions.into_iter().zip(held) {
            leases[position] = lease;
        }
    }
    Ok(leases)
}

/// One acquisition call for `candidates`, all served by one node; returns
/// how many leases it newly acquired, and the lease held per candidate.
async fn acquire_on(
    client: &Client,
    owner: &Owner,
    ttl: Duration,
    candidates: &[&LeaseKeys],
    limit: usize,
) -> Result<(usize, Vec<Option<Lease>>)> {
    let (acquired, answers) = calls::lease::acquire(
        client,
        owner.identity(),
        owner.instance(),
        ttl,
        ttl * GENERATION_TTL_FACTOR,
        candidates,
        limit,
    )
    .await?;
    let held = answers
        .into_iter()
        .zip(candidates)
        .map(|(answer, keys)| match answer {
            Acquired::NotHeld => Ok(None),
            Acquired::Duplicate => Err(Error::DuplicateInstance {
                instance: owner.instance().to_owned(),
                lease: keys.lease.clone(),
            }),
            Acquired::Token(token) => Ok(Some(Lease::new((*keys).clone(), owner.identity(), token))),
        })
        .collect::<Result<_>>()?;
    Ok((acquired, held))
}

/// Renews `leases` (key and expected value) with one script call per Redis
/// node, the nodes' calls at once; returns the positions of those no longer
/// held. A single Redis is one node; on a cluster the calls are grouped by
/// the client's view of which primary serves which slot, and when a call
/// fails because that view is out of date (a failover or a resharding moved
/// a slot), the view is refreshed and the renewal tried once more.
pub(crate) async fn renew(client: &Client, ttl: Duration, leases: &[(String, String)]) -> Result<Vec<usize>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let lost = nodes::once_more_if_moved(client, "renew", || {
        nodes::per_node(
            client,
            leases,
            |(key, _)| key.as_str(),
            |node, group| async move {
                let mut lost = vec![false; group.len()];
                for position in renew_on(node, ttl, group).await? {
                    lost[position] = true;
                }
                Ok(lost)
            },
        )
    })
    .await?;
    Ok(lost
        .into_iter()
        .enumerate()
        .filter_map(|(position, lost)| lost.then_some(position))
        .collect())
}

/// Leases per renewal call: a node's leases go in calls of at most this
/// many, one after the other, so no call grows with the partitions (a
/// connection keeps a buffer the size of the largest call it ever sent,
/// and the heartbeat's calls take turns on every connection of the pool).
const RENEW_CHUNK: usize = 1000;

/// Renews `leases`, all served by the node `client` reaches, in calls of
/// [`RENEW_CHUNK`]; returns the positions of those no longer held.
async fn renew_on<C>(client: C, ttl: Duration, leases: Vec<(String, String)>) -> Result<Vec<usize>>
where
    C: FunctionInterface + Send + Sync,
{
    let mut lost = Vec::new();
    for (n, chunk) in leases.chunks(RENEW_CHUNK).enumerate() {
        let first = n * RENEW_CHUNK;
        let positions = calls::lease::renew(&client, ttl, chunk).await?;
        lost.extend(positions.into_iter().map(|position| first + position));
    }
    Ok(lost)
}

/// Releases `lease` if it is still held; returns whether it was.
pub(crate) async fn release<C>(client: &C, lease: &Lease) -> Result<bool>
where
    C: FunctionInterface + Send + Sync,
{
    calls::lease::release(client, lease.key(), lease.value()).await
}

#[cfg(test)]
mod tests {
    use fred::clients::Pool;
    use fred::interfaces::KeysInterface;
    use fred::types::Expiration;
    use ordo_testkit::{Redis, RedisCluster};

    use super::*;
    use crate::net::connection::test_pool;

    /// 2,500 leases, renewed in three calls of at most 1,000 (one `MGET`
    /// each on a single Redis): lost ones (gone, or held by another) on
    /// either side of each call's end are reported, exactly, and every
    /// other one is renewed. Every lease sits in one slot, so the calls go
    /// to one node on a Redis Cluster too (a lease per `MGET` there).
    async fn renewal_reports_exactly_the_lost_leases_among_thousands(client: &Pool) {
        let key = |i: usize| format!("{{renew-chunks}}:lease:{i}");
        let leases: Vec<(String, String)> = (0..2500).map(|i| (key(i), format!("me:{i}"))).collect();
        for (key, value) in &leases {
            let _: () = client
                .set(key, value, Some(Expiration::PX(20_000)), None, false)
                .await
                .unwrap();
        }
        let gone = [0usize, 999, 1000, 2499];
        let taken = [1001usize, 1999];
        for &i in &gone {
            let _: () = client.del(key(i)).await.unwrap();
        }
        for &i in &taken {
            let _: () = client.set(key(i), "other:1", None, None, false).await.unwrap();
        }
        let lost = renew(client.next(), Duration::from_secs(60), &leases)
            .await
            .unwrap();
        let mut expected: Vec<usize> = gone.iter().chain(&taken).copied().collect();
        expected.sort_unstable();
        assert_eq!(lost, expected);
        for i in [1usize, 998, 1002, 2000, 2498] {
            let ttl: i64 = client.pttl(key(i)).await.unwrap();
            assert!(ttl > 30_000, "lease {i} renewed: {ttl} ms left");
        }
        let ttl: i64 = client.pttl(key(1001)).await.unwrap();
        assert_eq!(ttl, -1, "another's lease is left alone");
    }

    #[tokio::test]
    async fn renewal_reports_exactly_the_lost_leases_among_thousands_on_a_single_redis() {
        let redis = Redis::start().unwrap();
        renewal_reports_exactly_the_lost_leases_among_thousands(&test_pool(&redis.url(), 1).await).await;
    }

    #[tokio::test]
    async fn renewal_reports_exactly_the_lost_leases_among_thousands_on_a_cluster() {
        let cluster = RedisCluster::start_local().unwrap();
        renewal_reports_exactly_the_lost_leases_among_thousands(&test_pool(&cluster.url(), 1).await).await;
    }
}
