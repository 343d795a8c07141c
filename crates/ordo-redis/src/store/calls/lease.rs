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

#[cfg(test)]
mod tests {
    use fred::clients::Pool;
    use fred::interfaces::KeysInterface;
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
                .set(key, value, Some(fred::types::Expiration::PX(20_000)), None, false)
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
        let lost = crate::owner::lease::renew(client.next(), Duration::from_secs(60), &leases)
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
