//! Ownership leases: acquire (free ones, and those of dead members),
//! release, and finding the lost ones.
//!
//! A lease key holds `{instance}:{nonce}:{token}` without a TTL: it is held
//! for as long as its holder's member key lives (see [`member`](super::member)).
//! The nonce is drawn per process start (and again after its member key
//! expired), so two processes configured with the same instance id are two
//! different owners: neither can adopt or pass the fence of the other's
//! lease, and the second one is reported ([`Error::DuplicateInstance`])
//! while the first one's member lives. The token (the fencing token) is
//! `max(previous + 1, server time in µs)`, so it grows at every change of
//! owner and stays monotonic even after the partition is reaped and its
//! generation key deleted: a stalled owner from before a reap can never
//! match a lease taken after it.

use std::fmt;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::FunctionInterface;

use crate::error::{Error, Result};
use crate::net::nodes;
use crate::store::calls;
use crate::store::calls::Fence;
use crate::store::calls::lease::Acquired;
use crate::store::keys::{self, LeaseKeys};

/// How much longer than the member's TTL a released lease's token is kept
/// in its generation key. While it exists the next token is above it; after
/// it expires the server clock alone keeps tokens increasing.
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

    /// The member key of its holder: the lease is held while it exists.
    pub fn member_key(&self) -> String {
        keys::lease_member(&self.value).unwrap_or_default()
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

/// Acquires up to `limit` of the leases among `candidates` that are free
/// or held by a dead member, in order, for `owner` (whose member key the
/// caller made sure lives). Returns, per candidate, the lease now held by
/// `owner` (newly acquired, or already its own), or `None`. A lease held by
/// another live process under the same instance id is
/// [`Error::DuplicateInstance`]. On a cluster whose view is out of date (a
/// slot moved), the view is refreshed and the acquisition tried once more
/// (leases the first try took are then adopted as this owner's own).
///
/// Three calls, as the member model checks them (a Redis Cluster cannot
/// make them one: member keys and leases sit in different slots): per node,
/// `acquire.lua` takes the free leases and names the holders of the others;
/// one `MGET` asks which of those holders' member keys are gone; per node,
/// `take.lua` takes over each of their leases still holding the value read.
/// A member key is never re-created once gone, so "dead" still holds at the
/// third call, and its compare makes sure nobody took the lease meanwhile.
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
    let leases = nodes::once_more_if_moved(client, "acquire", || {
        acquire_per_node(client, owner, candidates, limit)
    })
    .await?;
    let duplicate = leases.iter().position(|lease| matches!(lease, Err(Duplicate)));
    let Some(duplicate) = duplicate else {
        return Ok(leases.into_iter().map(|lease| lease.ok().flatten()).collect());
    };
    // Nothing taken here runs: let it go, for the other process (or
    // whoever comes next) to take.
    for lease in leases
        .iter()
        .filter_map(|lease| lease.as_ref().ok().and_then(Option::as_ref))
    {
        if let Err(error) = release(client, lease, ttl).await {
            tracing::warn!(error = %ordo_core::contract::error::error_chain(&error), lease = %lease.key(), "releasing a lease taken beside another process's with this instance id failed; it is taken over once this member's key expires");
        }
    }
    Err(Error::DuplicateInstance {
        instance: owner.instance().to_owned(),
        lease: candidates[duplicate].lease.clone(),
    })
}

/// A lease held by another live process with this instance id.
#[derive(Debug)]
struct Duplicate;

async fn acquire_per_node(
    client: &Client,
    owner: &Owner,
    candidates: &[LeaseKeys],
    limit: usize,
) -> Result<Vec<std::result::Result<Option<Lease>, Duplicate>>> {
    nodes::nodes(client).await?;
    let mut groups = nodes::group_by_node(
        client,
        candidates.iter().enumerate().map(|(i, keys)| (&keys.lease, i)),
    )?;
    groups.sort_by_key(|(_, positions)| positions.first().copied());
    let mut leases: Vec<std::result::Result<Option<Lease>, Duplicate>> =
        (0..candidates.len()).map(|_| Ok(None)).collect();
    let mut remaining = limit;
    let mut held_by: Vec<(usize, String)> = Vec::new();
    for (_, positions) in &groups {
        let group: Vec<&LeaseKeys> = positions.iter().map(|&i| &candidates[i]).collect();
        let (acquired, answers) =
            calls::lease::acquire(client, owner.identity(), owner.instance(), &group, remaining).await?;
        remaining = remaining.saturating_sub(acquired);
        for (&position, answer) in positions.iter().zip(answers) {
            leases[position] = match answer {
                Acquired::NotHeld => Ok(None),
                Acquired::Duplicate => Err(Duplicate),
                Acquired::Token(token) => Ok(Some(Lease::new(
                    candidates[position].clone(),
                    owner.identity(),
                    token,
                ))),
                Acquired::HeldBy(value) => {
                    held_by.push((position, value));
                    Ok(None)
                }
            };
        }
    }
    // Which holders are gone (one `MGET`: every member key sits in one
    // slot); a live one with this instance id is another process's. A
    // value that names no member (not written by Ordo) is left alone.
    let held_by: Vec<(usize, String, String)> = held_by
        .into_iter()
        .filter_map(|(position, value)| {
            let identity = keys::lease_holder(&value)?.to_owned();
            Some((position, value, identity))
        })
        .collect();
    let members: Vec<String> = held_by
        .iter()
        .map(|(_, _, identity)| keys::member(identity))
        .collect();
    let alive = calls::lease::alive(client, &members).await?;
    let mut dead: Vec<(usize, String)> = Vec::new();
    for ((position, value, identity), alive) in held_by.into_iter().zip(alive) {
        if !alive {
            dead.push((position, value));
        } else if same_instance(&identity, owner.instance()) {
            leases[position] = Err(Duplicate);
        }
    }
    if remaining == 0 || dead.is_empty() {
        return Ok(leases);
    }
    let groups = nodes::group_by_node(
        client,
        dead.iter()
            .map(|(position, value)| (&candidates[*position].lease, (*position, value.as_str()))),
    )?;
    for (_, group) in groups {
        if remaining == 0 {
            break;
        }
        let taking: Vec<(&LeaseKeys, &str)> = group
            .iter()
            .map(|&(position, value)| (&candidates[position], value))
            .collect();
        let (taken, tokens) = calls::lease::take(client, owner.identity(), &taking, remaining).await?;
        remaining = remaining.saturating_sub(taken);
        for ((position, _), token) in group.into_iter().zip(tokens) {
            if let Some(token) = token {
                leases[position] = Ok(Some(Lease::new(
                    candidates[position].clone(),
                    owner.identity(),
                    token,
                )));
            }
        }
    }
    Ok(leases)
}

/// Whether `identity` (`instance:nonce`) is a start of `instance`.
fn same_instance(identity: &str, instance: &str) -> bool {
    identity.rsplit_once(':').is_some_and(|(of, _)| of == instance)
}

/// Finds which of `leases` (key and expected value) are no longer held,
/// with one script call per Redis node, the nodes' calls at once; returns
/// their positions. A single Redis is one node; on a cluster the calls are
/// grouped by the client's view of which primary serves which slot, and
/// when a call fails because that view is out of date (a failover or a
/// resharding moved a slot), the view is refreshed and the call tried once
/// more.
pub(crate) async fn lost(client: &Client, leases: &[(String, String)]) -> Result<Vec<usize>> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let lost = nodes::once_more_if_moved(client, "lost", || {
        nodes::per_node(
            client,
            leases,
            |(key, _)| key.as_str(),
            |node, group| async move {
                let mut lost = vec![false; group.len()];
                for position in lost_on(node, group).await? {
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

/// Leases per call of [`lost`]: a node's leases go in calls of at most
/// this many, one after the other, so no call grows with the partitions (a
/// connection keeps a buffer the size of the largest call it ever sent).
const LOST_CHUNK: usize = 1000;

/// [`lost`] for `leases` all served by the node `client` reaches, in calls
/// of [`LOST_CHUNK`].
async fn lost_on<C>(client: C, leases: Vec<(String, String)>) -> Result<Vec<usize>>
where
    C: FunctionInterface + Send + Sync,
{
    let mut lost = Vec::new();
    for (n, chunk) in leases.chunks(LOST_CHUNK).enumerate() {
        let first = n * LOST_CHUNK;
        let positions = calls::lease::lost(&client, chunk).await?;
        lost.extend(positions.into_iter().map(|position| first + position));
    }
    Ok(lost)
}

/// Releases `lease` if it is still held (keeping its token for a while,
/// `ttl` being the member's); returns whether it was.
pub(crate) async fn release<C>(client: &C, lease: &Lease, ttl: Duration) -> Result<bool>
where
    C: FunctionInterface + Send + Sync,
{
    calls::lease::release(client, lease.keys(), lease.value(), ttl * GENERATION_TTL_FACTOR).await
}

#[cfg(test)]
mod tests {
    use fred::clients::Pool;
    use fred::interfaces::KeysInterface;
    use ordo_testkit::{Redis, RedisCluster};

    use super::*;
    use crate::net::connection::test_pool;

    /// 2,500 leases, checked in three calls of at most 1,000 (one `MGET`
    /// each on a single Redis): lost ones (gone, or held by another) on
    /// either side of each call's end are reported, exactly. Every lease
    /// sits in one slot, so the calls go to one node on a Redis Cluster too
    /// (a lease per `MGET` there).
    async fn the_lost_leases_are_found_exactly_among_thousands(client: &Pool) {
        let key = |i: usize| format!("{{lost-chunks}}:lease:{i}");
        let leases: Vec<(String, String)> = (0..2500).map(|i| (key(i), format!("me:{i}"))).collect();
        for (key, value) in &leases {
            let _: () = client.set(key, value, None, None, false).await.unwrap();
        }
        let gone = [0usize, 999, 1000, 2499];
        let taken = [1001usize, 1999];
        for &i in &gone {
            let _: () = client.del(key(i)).await.unwrap();
        }
        for &i in &taken {
            let _: () = client.set(key(i), "other:1", None, None, false).await.unwrap();
        }
        let lost = lost(client.next(), &leases).await.unwrap();
        let mut expected: Vec<usize> = gone.iter().chain(&taken).copied().collect();
        expected.sort_unstable();
        assert_eq!(lost, expected);
    }

    /// A lease value names its holder's member only when it is
    /// `instance:nonce:token` (an instance id may hold `:`); a start's
    /// instance is the identity less its nonce, compared whole.
    #[test]
    fn lease_values_name_their_member() {
        assert_eq!(
            keys::lease_holder("web-1:9e2d41c0:1764438000000123"),
            Some("web-1:9e2d41c0")
        );
        assert_eq!(keys::lease_holder("a:b:9e2d41c0:17"), Some("a:b:9e2d41c0"));
        assert_eq!(
            keys::lease_member("a:b:9e2d41c0:17").as_deref(),
            Some("{ordo}:member:a:b:9e2d41c0")
        );
        for foreign in ["", "17", "web-1:17", "web-1:9e2d:", "web-1:9e2d:x7", ":17"] {
            assert_eq!(keys::lease_holder(foreign), None, "{foreign:?}");
        }
        assert!(same_instance("web-1:9e2d41c0", "web-1"));
        assert!(same_instance("a:b:9e2d41c0", "a:b"));
        assert!(!same_instance("a:b:9e2d41c0", "a"));
        assert!(!same_instance("web-10:9e2d41c0", "web-1"));
    }

    /// The takeover compares the value `acquire` read: a lease that changed
    /// hands since (or was released), or has a TTL (an earlier release's
    /// instance's), is not taken; one still holding it is, above its token.
    #[tokio::test]
    async fn a_takeover_takes_only_the_value_read_without_a_ttl() {
        let redis = Redis::start().unwrap();
        let client = test_pool(&redis.url(), 1).await;
        let keys = |name: &str| LeaseKeys::process("G", name);
        let (moved, legacy, dead, gone) = (keys("moved"), keys("legacy"), keys("dead"), keys("gone"));
        let _: () = client
            .set(&moved.lease, "c:n:7", None, None, false)
            .await
            .unwrap();
        let _: () = client
            .set(
                &legacy.lease,
                "d:n:5",
                Some(fred::types::Expiration::PX(60_000)),
                None,
                false,
            )
            .await
            .unwrap();
        let _: () = client.set(&dead.lease, "d:n:5", None, None, false).await.unwrap();
        let read = [
            (&moved, "d:n:5"),
            (&legacy, "d:n:5"),
            (&dead, "d:n:5"),
            (&gone, "d:n:5"),
        ];
        for (keys, _) in &read[..3] {
            let (taken, tokens) = calls::lease::take(client.next(), "me:n", &[(keys, "d:n:5")], 5)
                .await
                .unwrap();
            let value: String = client.get(&keys.lease).await.unwrap();
            if keys.lease == dead.lease {
                let token = tokens[0].expect("the dead member's lease is taken");
                assert_eq!(taken, 1);
                assert!(token > 5);
                assert_eq!(value, format!("me:n:{token}"));
                assert_eq!(client.pttl::<i64, _>(&keys.lease).await.unwrap(), -1);
            } else {
                assert_eq!((taken, tokens), (0, vec![None]), "{}", keys.lease);
                assert!(!value.starts_with("me:n:"), "{value}");
            }
        }
        let (taken, _) = calls::lease::take(client.next(), "me:n", &read[3..], 5)
            .await
            .unwrap();
        assert_eq!(
            taken, 0,
            "a released lease is acquired as a free one, not taken over"
        );
    }

    #[tokio::test]
    async fn the_lost_leases_are_found_exactly_among_thousands_on_a_single_redis() {
        let redis = Redis::start().unwrap();
        the_lost_leases_are_found_exactly_among_thousands(&test_pool(&redis.url(), 1).await).await;
    }

    #[tokio::test]
    async fn the_lost_leases_are_found_exactly_among_thousands_on_a_cluster() {
        let cluster = RedisCluster::start_local().unwrap();
        the_lost_leases_are_found_exactly_among_thousands(&test_pool(&cluster.url(), 1).await).await;
    }
}
