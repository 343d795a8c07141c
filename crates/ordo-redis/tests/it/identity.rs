//! Lease ownership is per process, not per configured instance id.
//!
//! A lease value used to be `{instance}:{token}`, and `acquire` handed a held
//! lease to any caller whose id matched by prefix, with the same token and
//! no TTL refresh: two processes started with one fixed id (a rolling
//! deploy) both owned the partition and both passed every fence, and ids
//! containing `:` matched each other's leases.

use crate::common;

use std::time::Duration;

use fred::interfaces::KeysInterface;
use ordo_redis::internals::Partitions;
use ordo_redis::{Error, FencedWrite, PartitionKeys, RedisFence};
use ordo_testkit::Redis;

use common::pool;
use ordo_testkit::eventually;

const TTL: Duration = Duration::from_millis(1_500);

#[tokio::test]
async fn two_processes_with_one_instance_id_never_share_a_lease() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let partition = PartitionKeys::new(&common::category("identity"), "k", "backfill");
    // Two process starts configured with the same id.
    let first = Partitions::new(client.clone(), "web-1", TTL);
    let second = Partitions::new(client.clone(), "web-1", TTL);

    let lease = first.acquire("G", &partition).await?.expect("free");
    let taken = second.acquire("G", &partition).await;
    match taken {
        Err(Error::DuplicateInstance { instance, lease: key }) => {
            assert_eq!(instance, "web-1");
            assert_eq!(key, lease.key());
        }
        other => panic!("the second process got {other:?}, not a duplicate-id error"),
    }
    // Nothing the second process builds passes the first one's fence.
    assert_ne!(first.identity(), second.identity());
    let holder: Option<String> = client.get(lease.key()).await?;
    assert_eq!(holder.as_deref(), Some(lease.value()));
    assert!(lease.value().starts_with(first.identity()));
    let _ = RedisFence::new(&lease)
        .commit(&client, &FencedWrite::new().set("x", "1"))
        .await?;
    Ok(())
}

#[tokio::test]
async fn re_adopting_a_lease_renews_its_ttl() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let partition = PartitionKeys::new(&common::category("identity"), "k", "backfill");
    let owner = Partitions::new(client.clone(), "a", TTL);
    let lease = owner.acquire("G", &partition).await?.expect("free");
    eventually(Duration::from_secs(5), "the lease to age", || async {
        Ok(client.pttl::<i64, _>(lease.key()).await? < 1_000)
    })
    .await?;
    let again = owner.acquire("G", &partition).await?.expect("its own lease");
    assert_eq!(again, lease);
    let ttl: i64 = client.pttl(lease.key()).await?;
    assert!(ttl > 1_200, "re-adopted lease kept its old TTL: {ttl} ms left");
    Ok(())
}

#[tokio::test]
async fn instance_ids_with_colons_or_common_prefixes_stay_apart() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let category = common::category("identity");
    let short = Partitions::new(client.clone(), "a", TTL);
    let long = Partitions::new(client.clone(), "a:b", TTL);

    let one = PartitionKeys::new(&category, "one", "backfill");
    let held = long.acquire("G", &one).await?.expect("free");
    assert_eq!(
        short.acquire("G", &one).await?,
        None,
        "`a` took the lease of `a:b`"
    );
    assert_eq!(long.acquire("G", &one).await?, Some(held));

    let two = PartitionKeys::new(&category, "two", "backfill");
    let held = short.acquire("G", &two).await?.expect("free");
    assert_eq!(
        long.acquire("G", &two).await?,
        None,
        "`a:b` took the lease of `a`"
    );
    // Several candidates in one call: a foreign lease among them does not
    // disturb the others.
    let three = PartitionKeys::new(&category, "three", "backfill");
    let many = short
        .acquire_many(&[one.lease("G"), two.lease("G"), three.lease("G")], 5)
        .await?;
    assert_eq!(many[0], None);
    assert_eq!(many[1].as_ref(), Some(&held));
    assert!(many[2].is_some());
    Ok(())
}
