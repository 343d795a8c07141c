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
    assert!(lease.value().starts_with(&first.identity()));
    let _ = RedisFence::new(&lease)
        .commit(&client, &FencedWrite::new().set("x", "1"))
        .await?;
    Ok(())
}

/// Acquiring renews the member key (a lease has no TTL of its own): a
/// process that takes leases now and then keeps them without a heartbeat.
#[tokio::test]
async fn re_adopting_a_lease_renews_its_member() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let partition = PartitionKeys::new(&common::category("identity"), "k", "backfill");
    let owner = Partitions::new(client.clone(), "a", TTL);
    let lease = owner.acquire("G", &partition).await?.expect("free");
    assert_eq!(
        client.pttl::<i64, _>(lease.key()).await?,
        -1,
        "a lease has no TTL"
    );
    eventually(Duration::from_secs(5), "the member to age", || async {
        Ok(client.pttl::<i64, _>(lease.member_key()).await? < 1_000)
    })
    .await?;
    let again = owner.acquire("G", &partition).await?.expect("its own lease");
    assert_eq!(again, lease);
    let ttl: i64 = client.pttl(lease.member_key()).await?;
    assert!(ttl > 1_200, "re-adopting did not renew the member: {ttl} ms left");
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

/// A process restarted under the same instance id (its previous start
/// crashed) is told of a duplicate while the previous start's member key
/// lives, then takes its leases over once that key has expired, at a
/// greater token; the previous start's fence no longer passes.
#[tokio::test]
async fn a_restart_takes_over_the_previous_starts_leases_once_its_member_is_gone() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let partition = PartitionKeys::new(&common::category("identity"), "k", "backfill");
    let crashed = Partitions::new(client.clone(), "web-1", TTL);
    let restarted = Partitions::new(client.clone(), "web-1", TTL);
    let old = crashed.acquire("G", &partition).await?.expect("free");
    assert!(matches!(
        restarted.acquire("G", &partition).await,
        Err(Error::DuplicateInstance { .. })
    ));
    eventually(
        Duration::from_secs(5),
        "the crashed start's member to expire",
        || async { Ok(!client.exists::<bool, _>(old.member_key()).await?) },
    )
    .await?;
    let new = restarted
        .acquire("G", &partition)
        .await?
        .expect("the lease of a dead member is taken over");
    assert!(new.token() > old.token());
    assert!(matches!(
        RedisFence::new(&old)
            .commit(&client, &FencedWrite::new().set("x", "1"))
            .await,
        Err(Error::Fenced { .. })
    ));
    Ok(())
}

/// An instance of an earlier release renews a TTL on each lease and has no
/// member key: its lease is held until it expires, never taken over as a
/// dead member's (it would be while that instance runs); under this
/// instance id it is a duplicate, as before.
#[tokio::test]
async fn a_lease_of_an_earlier_release_is_held_until_it_expires() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let category = common::category("identity");
    let owner = Partitions::new(client.clone(), "new", TTL);
    let theirs = PartitionKeys::new(&category, "theirs", "backfill").lease("G");
    let ours = PartitionKeys::new(&category, "ours", "backfill").lease("G");
    let px = fred::types::Expiration::PX(1_000);
    let _: () = client
        .set(&theirs.lease, "old:0123abcd:5", Some(px.clone()), None, false)
        .await?;
    let _: () = client
        .set(&ours.lease, "new:0123abcd:5", Some(px), None, false)
        .await?;
    assert_eq!(owner.acquire_keys(&theirs).await?, None);
    assert!(matches!(
        owner.acquire_keys(&ours).await,
        Err(Error::DuplicateInstance { .. })
    ));
    eventually(
        Duration::from_secs(5),
        "the earlier release's lease to expire",
        || async { Ok(owner.acquire_keys(&theirs).await?.is_some()) },
    )
    .await?;
    Ok(())
}

/// Leases taken in a call that met another live process with this instance
/// id are let go at once, for the other process (or whoever comes next):
/// nothing here runs them.
#[tokio::test]
async fn a_duplicate_lets_go_of_what_its_call_took() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let category = common::category("identity");
    let first = Partitions::new(client.clone(), "web-1", TTL);
    let second = Partitions::new(client.clone(), "web-1", TTL);
    let held = PartitionKeys::new(&category, "held", "backfill").lease("G");
    let free = PartitionKeys::new(&category, "free", "backfill").lease("G");
    first.acquire_keys(&held).await?.expect("free");
    assert!(matches!(
        second.acquire_many(&[free.clone(), held], 5).await,
        Err(Error::DuplicateInstance { .. })
    ));
    assert!(
        !client.exists::<bool, _>(&free.lease).await?,
        "the free lease was let go"
    );
    Ok(())
}

/// Two acquisitions at once by one process register its member once: both
/// leases name the same, live member (before, the second one's `SET NX`
/// failed on the first's key and drew another nonce, which the first then
/// found and did the same: neither ever ended).
#[tokio::test]
async fn acquisitions_at_once_register_one_member() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let client = pool(&redis.url()).await?;
    let category = common::category("identity");
    let owner = Partitions::new(client.clone(), "web-1", TTL);
    let one = PartitionKeys::new(&category, "one", "backfill").lease("G");
    let two = PartitionKeys::new(&category, "two", "backfill").lease("G");
    let (first, second) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(owner.acquire_keys(&one), owner.acquire_keys(&two))
    })
    .await
    .map_err(|_| anyhow::anyhow!("two acquisitions at once never ended (each kept drawing a new nonce)"))?;
    let (first, second) = (first?.expect("free"), second?.expect("free"));
    assert_eq!(first.member_key(), second.member_key());
    assert_eq!(first.member_key(), owner.member_key());
    assert!(client.exists::<bool, _>(owner.member_key()).await?);
    Ok(())
}
