//! A fenced commit is applied once even when the client sends it twice.
//!
//! fred resends the commands in flight when a connection drops: it cannot
//! know whether they ran. When the commit script ran and only its reply was
//! lost, the resend used to apply the writes a second time. Here a TCP proxy
//! between the client and Redis forwards the commit to Redis, then swallows
//! its reply and drops the connection, exactly that failure.

use crate::common;

use std::time::Duration;

use common::pool;
use common::proxy::Proxy;
use fred::interfaces::{ClientLike, KeysInterface, ListInterface};
use ordo_redis::internals::Partitions;
use ordo_redis::{FencedWrite, PartitionKeys, RedisFence};
use ordo_testkit::Redis;
use ordo_testkit::eventually;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_resent_after_a_lost_reply_is_applied_once() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let proxy = Proxy::start(redis.port()).await?;
    let direct = pool(&redis.url()).await?;
    let category = common::category("commit");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let owner = Partitions::new(direct.clone(), "a", Duration::from_secs(30));
    let lease = owner.acquire("G", &partition).await?.expect("free");
    let fence = RedisFence::new(&lease);
    let effects = format!("{category}:effects");
    let counter = format!("{category}:counter");

    // A client that reconnects and resends in-flight commands, through the
    // proxy.
    let client = proxy.resending_client(20).await?;
    // Loads the script through the proxy, so the call whose reply is lost
    // is the commit itself.
    fence
        .commit(&client, &FencedWrite::new().rpush(&effects, "first"))
        .await?;

    proxy.lose_next_reply();
    let replies = fence
        .commit(
            &client,
            &FencedWrite::new()
                .rpush(&effects, "second")
                .incr_by(&counter, 5)
                .set(format!("{category}:flag"), "on"),
        )
        .await?;
    assert!(proxy.reply_lost());

    let list: Vec<String> = direct.lrange(&effects, 0, -1).await?;
    assert_eq!(list, ["first", "second"], "the resent commit was applied again");
    assert_eq!(direct.get::<i64, _>(&counter).await?, 5);
    // The resent call answers what the first run did.
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0].as_i64(), Some(2), "RPUSH: the list's length then");
    assert_eq!(replies[1].as_i64(), Some(5), "INCRBY: the counter then");
    assert_eq!(replies[2].as_str().as_deref(), Some("OK"), "SET");

    // A new call with the same writes is a new commit.
    fence
        .commit(&direct, &FencedWrite::new().incr_by(&counter, 5))
        .await?;
    assert_eq!(direct.get::<i64, _>(&counter).await?, 10);
    client.quit().await?;
    Ok(())
}

/// The marker is checked before the fence: a commit that ran under the
/// lease answers the same when resent after the lease moved on, and a new
/// commit of the stale owner is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_commit_answers_the_same_after_the_lease_moved_on() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let proxy = Proxy::start(redis.port()).await?;
    let direct = pool(&redis.url()).await?;
    let category = common::category("commit");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let ttl = Duration::from_millis(500);
    let a = Partitions::new(direct.clone(), "a", ttl);
    let b = Partitions::new(direct.clone(), "b", ttl);
    let lease = a.acquire("G", &partition).await?.expect("free");
    let fence = RedisFence::new(&lease);
    let effects = format!("{category}:effects");

    // The client's reconnection is slow enough for the lease to expire and
    // be taken over before the commit is resent.
    let client = proxy.resending_client(1_500).await?;
    fence
        .commit(&client, &FencedWrite::new().rpush(&effects, "warm-up"))
        .await?;
    let _: i64 = direct.del(&effects).await?;

    proxy.lose_next_reply();
    let takeover = async {
        eventually(Duration::from_secs(5), "the lease's member to expire", || async {
            Ok(!direct.exists::<bool, _>(lease.member_key()).await?)
        })
        .await?;
        b.acquire("G", &partition)
            .await?
            .ok_or_else(|| anyhow::anyhow!("b cannot take the expired lease"))
    };
    let writes = FencedWrite::new().rpush(&effects, "a1");
    let (resent, taken) = tokio::join!(fence.commit(&client, &writes), takeover);
    let taken = taken?;
    assert!(taken.token() > lease.token());
    let replies = resent?;
    assert_eq!(replies.first().and_then(|r| r.as_i64()), Some(1));
    let list: Vec<String> = direct.lrange(&effects, 0, -1).await?;
    assert_eq!(list, ["a1"], "applied once");

    let stale = fence
        .commit(&direct, &FencedWrite::new().rpush(&effects, "a2"))
        .await;
    assert!(
        matches!(stale, Err(ordo_redis::Error::Fenced { .. })),
        "{stale:?}"
    );
    client.quit().await?;
    Ok(())
}

/// A caller retrying a commit whose reply it never got (its own retry, not
/// the client's resend) passes the same commit id: applied once.
#[tokio::test]
async fn a_commit_retried_under_its_id_is_applied_once() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let direct = pool(&redis.url()).await?;
    let category = common::category("commit");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let owner = Partitions::new(direct.clone(), "a", Duration::from_secs(30));
    let lease = owner.acquire("G", &partition).await?.expect("free");
    let fence = RedisFence::new(&lease);
    let counter = format!("{category}:counter");
    let writes = FencedWrite::new().incr_by(&counter, 5);
    let first = fence.commit_as(&direct, &writes, "order-1-effects").await?;
    let retried = fence.commit_as(&direct, &writes, "order-1-effects").await?;
    assert_eq!(
        direct.get::<i64, _>(&counter).await?,
        5,
        "the retry applied again"
    );
    assert_eq!(first, retried, "the retry answers what the first run did");
    fence.commit_as(&direct, &writes, "order-2-effects").await?;
    assert_eq!(direct.get::<i64, _>(&counter).await?, 10);
    assert!(fence.commit_as(&direct, &writes, "").await.is_err());
    Ok(())
}
