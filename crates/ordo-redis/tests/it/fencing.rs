//! Leases and the fence, against a real Redis: every partition operation of a
//! stale owner is refused, and nothing is skipped or reordered.

use crate::common;

use std::time::Duration;

use fred::interfaces::{KeysInterface, StreamsInterface};
use fred::types::Value;
use ordo_core::contract::broker::Broker;
use ordo_core::contract::key::Lane;
use ordo_redis::internals::{Ack, Lease, Partitions, ReadOutcome, ReapOutcome};
use ordo_redis::{AclRole, AclScope, Error, FencedWrite, PartitionKeys, RedisFence};
use ordo_testkit::Redis;

use common::topology::TestRedis;
use common::{broker, config, pool, publication, seq_of};
use ordo_testkit::eventually;

const TTL: Duration = Duration::from_millis(600);

async fn owner(url: &str, name: &str) -> anyhow::Result<Partitions> {
    Ok(Partitions::new(pool(url).await?, name, TTL))
}

/// Waits until `lease` has expired on its own: its holder's member key,
/// not renewed, is gone (no key is deleted by the test).
async fn wait_expired(owner: &Partitions, lease: &Lease) -> anyhow::Result<()> {
    let client = owner.client().clone();
    let key = lease.member_key();
    eventually(Duration::from_secs(5), "the lease's member to expire", || {
        let client = client.clone();
        let key = key.clone();
        async move { Ok(!client.exists::<bool, _>(&key).await?) }
    })
    .await?;
    Ok(())
}

async fn entries(outcome: ReadOutcome) -> anyhow::Result<Vec<(String, u64)>> {
    match outcome {
        ReadOutcome::Entries { entries, .. } => entries
            .into_iter()
            .map(|e| Ok((e.id().to_owned(), seq_of(&e.decode()?))))
            .collect(),
        other => anyhow::bail!("expected entries, got {other:?}"),
    }
}

async fn publish(url: &str, category: &str, key: &str, seqs: std::ops::Range<u64>) -> anyhow::Result<()> {
    let broker = broker(url, config(15_000, 3_600_000, 0)).await?;
    let publications: Vec<_> = seqs
        .map(|seq| publication(category, key, seq, Lane::Primary))
        .collect();
    broker.publish(&publications).await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_lease_is_exclusive_and_tokens_grow_with_every_owner
);

async fn a_lease_is_exclusive_and_tokens_grow_with_every_owner(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let partition = PartitionKeys::new(&common::category("lease"), "k", "backfill");
    let a = owner(&url, "a").await?;
    let b = owner(&url, "b").await?;

    let first = a
        .acquire("G", &partition)
        .await?
        .expect("a free lease is acquired");
    assert!(
        b.acquire("G", &partition).await?.is_none(),
        "a held lease is not acquired"
    );
    assert_eq!(
        a.acquire("G", &partition).await?.as_ref(),
        Some(&first),
        "the holder re-acquiring gets its own lease back"
    );
    assert!(a.release(&first).await?);
    let second = b
        .acquire("G", &partition)
        .await?
        .expect("a released lease is free");
    assert!(second.token() > first.token());
    assert!(!a.release(&first).await?, "a stale release does nothing");
    assert!(b.acquire("G", &partition).await?.is_some(), "b still holds it");
    Ok(())
}

/// LESSONS.md item 2, step by step: owner A stalls before its reclaim, B takes
/// over and reclaims the pending entries, A wakes and tries its reclaim. In
/// the old design A's unfenced XAUTOCLAIM moved the entries to A, B acked
/// seq0 and its next head was seq2 (seq1 skipped). Here A is refused and B
/// handles seq0, seq1, seq2, seq3 in order.
#[tokio::test]
async fn a_stale_owners_reclaim_is_refused_and_nothing_is_skipped() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("reclaim");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    publish(&url, &category, "k", 0..4).await?;

    // A first owner reads seq0 and seq1 and dies: they stay pending.
    let dead = owner(&url, "dead").await?;
    let lease0 = dead.acquire("G", &partition).await?.expect("free");
    let read = entries(dead.read(&lease0, "G", &partition, 2).await?).await?;
    assert_eq!(read.iter().map(|e| e.1).collect::<Vec<_>>(), [0, 1]);
    wait_expired(&dead, &lease0).await?;

    // A takes over, then stalls before its reclaim until its lease expires.
    let a = owner(&url, "a").await?;
    let lease_a = a.acquire("G", &partition).await?.expect("expired lease is free");
    wait_expired(&a, &lease_a).await?;

    // B takes over at a higher token and reclaims seq0, seq1.
    let b = owner(&url, "b").await?;
    let lease_b = b.acquire("G", &partition).await?.expect("expired lease is free");
    assert!(lease_b.token() > lease_a.token() && lease_a.token() > lease0.token());
    let reclaimed = entries(b.read(&lease_b, "G", &partition, 10).await?).await?;
    assert_eq!(
        reclaimed.iter().map(|e| e.1).collect::<Vec<_>>(),
        [0, 1],
        "B reclaims the pending entries first"
    );

    // A wakes up: its reclaim, read and ack are all refused.
    let before: Value = b
        .client()
        .xpending(partition.primary(), "G", ("-", "+", 10))
        .await?;
    let stale_reclaim = a.read(&lease_a, "G", &partition, 10).await;
    assert!(
        matches!(stale_reclaim, Err(Error::Fenced { .. })),
        "{stale_reclaim:?}"
    );
    let stale_ack = a
        .ack(&lease_a, "G", &partition, Lane::Primary, &[&reclaimed[0].0])
        .await;
    assert!(matches!(stale_ack, Err(Error::Fenced { .. })), "{stale_ack:?}");

    // Nothing moved: the entries pending before are pending still, seq1
    // among them (B's read may have taken seq2 and seq3 in as pending too:
    // its read takes new entries in the same step as the pending ones).
    let pending: Value = b
        .client()
        .xpending(partition.primary(), "G", ("-", "+", 10))
        .await?;
    let pending = common_ids(pending);
    assert_eq!(pending, common_ids(before));
    assert_eq!(pending[..2], [reclaimed[0].0.clone(), reclaimed[1].0.clone()]);

    // B acks seq0; its next head is seq1, not seq2.
    b.ack(&lease_b, "G", &partition, Lane::Primary, &[&reclaimed[0].0])
        .await?;
    let next = entries(b.read(&lease_b, "G", &partition, 1).await?).await?;
    assert_eq!(next[0].1, 1, "seq1 is not skipped");
    b.ack(&lease_b, "G", &partition, Lane::Primary, &[&next[0].0])
        .await?;
    let rest = entries(b.read(&lease_b, "G", &partition, 10).await?).await?;
    assert_eq!(rest.iter().map(|e| e.1).collect::<Vec<_>>(), [2, 3]);
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    what_a_refused_read_took_in_the_holder_reads_next_in_order
);

/// A stale owner's read is refused, but it runs in one transaction with
/// the lease check: what it took in from the lane stays pending in the
/// group, and the holder reads it next, in order, as delivered before;
/// then new entries as new. Nothing is skipped or read twice.
async fn what_a_refused_read_took_in_the_holder_reads_next_in_order(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("refused");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    publish(&url, &category, "k", 0..4).await?;

    let a = owner(&url, "a").await?;
    let lease_a = a.acquire("G", &partition).await?.expect("free");
    wait_expired(&a, &lease_a).await?;
    let b = owner(&url, "b").await?;
    let lease_b = b.acquire("G", &partition).await?.expect("expired lease is free");

    let first = b.read(&lease_b, "G", &partition, 2).await?;
    assert!(
        matches!(first, ReadOutcome::Entries { pending: false, .. }),
        "{first:?}"
    );
    let first = entries(first).await?;
    assert_eq!(first.iter().map(|e| e.1).collect::<Vec<_>>(), [0, 1]);
    let ids: Vec<&str> = first.iter().map(|e| e.0.as_str()).collect();
    b.ack(&lease_b, "G", &partition, Lane::Primary, &ids).await?;

    // A, stale, reads: refused, naming B.
    let stale = a.read(&lease_a, "G", &partition, 10).await;
    match &stale {
        Err(Error::Fenced { holder, .. }) => assert_eq!(holder.as_deref(), Some(lease_b.value())),
        other => panic!("expected the stale read refused, got {other:?}"),
    }

    // B reads seq2 and seq3 next, as delivered before (A's read took them in).
    let next = b.read(&lease_b, "G", &partition, 10).await?;
    assert!(
        matches!(next, ReadOutcome::Entries { pending: true, .. }),
        "{next:?}"
    );
    let next = entries(next).await?;
    assert_eq!(next.iter().map(|e| e.1).collect::<Vec<_>>(), [2, 3]);
    let ids: Vec<&str> = next.iter().map(|e| e.0.as_str()).collect();
    b.ack(&lease_b, "G", &partition, Lane::Primary, &ids).await?;

    publish(&url, &category, "k", 4..6).await?;
    let last = b.read(&lease_b, "G", &partition, 10).await?;
    assert!(
        matches!(last, ReadOutcome::Entries { pending: false, .. }),
        "{last:?}"
    );
    assert_eq!(
        entries(last).await?.iter().map(|e| e.1).collect::<Vec<_>>(),
        [4, 5]
    );
    let pending: Value = b
        .client()
        .xpending(partition.primary(), "G", ("-", "+", 10))
        .await?;
    assert_eq!(common_ids(pending).len(), 2, "only seq4 and seq5 are pending");
    Ok(())
}

/// A worker whose ACL user may not run `MULTI` (a role of an earlier
/// release) reads by script instead, and tries the transaction once only.
#[tokio::test]
async fn a_user_without_multi_reads_by_script_and_asks_once() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let category = common::category("old-role");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    publish(&redis.url(), &category, "k", 0..4).await?;
    let scope = AclScope::new().categories([category.as_str()]).groups(["G"]);
    let rules: Vec<String> = AclRole::Worker
        .rules(&scope)
        .into_iter()
        .filter(|rule| rule != "+multi" && rule != "+exec")
        .collect();
    redis.create_user_with_rules("old-worker", "secret", &rules)?;
    let address = redis.url().trim_start_matches("redis://").to_owned();
    let worker = owner(&format!("redis://old-worker:secret@{address}"), "w").await?;
    let lease = worker.acquire("G", &partition).await?.expect("free");

    let first = entries(worker.read(&lease, "G", &partition, 2).await?).await?;
    assert_eq!(first.iter().map(|e| e.1).collect::<Vec<_>>(), [0, 1]);
    let refused = redis.acl_log()?;
    assert!(
        refused.iter().any(|denial| denial.object == "multi"),
        "the transaction was tried: {refused:#?}"
    );
    let ids: Vec<&str> = first.iter().map(|e| e.0.as_str()).collect();
    worker.ack(&lease, "G", &partition, Lane::Primary, &ids).await?;
    let rest = entries(worker.read(&lease, "G", &partition, 10).await?).await?;
    assert_eq!(rest.iter().map(|e| e.1).collect::<Vec<_>>(), [2, 3]);
    let admin = pool(&redis.url()).await?;
    assert_eq!(
        common::command_stat(&admin, "multi", "rejected_calls").await?,
        1,
        "no second transaction after the first was refused"
    );
    Ok(())
}

fn common_ids(pending: Value) -> Vec<String> {
    pending
        .into_array()
        .into_iter()
        .filter_map(|entry| entry.into_array().into_iter().next())
        .filter_map(|id| id.as_str().map(|s| s.into_owned()))
        .collect()
}

crate::on_both_topologies!(
    #[tokio::test]
    renewal_reports_exactly_the_leases_taken_over
);

/// A renewal renews the member and reports the leases no longer held: one
/// deleted (as another group's reap does) and taken by another instance
/// while the member lives, alone; every one once the member key expired,
/// and the owner goes on as a new member.
async fn renewal_reports_exactly_the_leases_taken_over(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("renew");
    let kept = PartitionKeys::new(&category, "kept", "backfill");
    let lost = PartitionKeys::new(&category, "lost", "backfill");
    let a = owner(&url, "a").await?;
    let b = owner(&url, "b").await?;
    let kept_lease = a.acquire("G", &kept).await?.expect("free");
    let lost_lease = a.acquire("G", &lost).await?.expect("free");
    assert!(
        b.acquire("G", &lost).await?.is_none(),
        "held while a's member lives"
    );
    let _: i64 = a.client().del(lost_lease.key()).await?;
    let taken = b.acquire("G", &lost).await?.expect("a deleted lease is free");

    let leases = [kept_lease.clone(), lost_lease.clone()];
    let reported: Vec<Lease> = a.renew(&leases).await?.into_iter().cloned().collect();
    assert_eq!(
        reported,
        vec![lost_lease],
        "only the lease taken is reported lost"
    );
    assert!(b.renew(std::slice::from_ref(&taken)).await?.is_empty());

    // A stops renewing: its member expires, B takes `kept` over, and A's
    // next renewal reports it lost, as a member that died.
    let before = a.identity();
    let mut over = None;
    for _ in 0..100 {
        b.renew(std::slice::from_ref(&taken)).await?;
        if let Some(lease) = b.acquire("G", &kept).await? {
            over = Some(lease);
            break;
        }
        tokio::time::sleep(TTL / 6).await;
    }
    let over = over.expect("b takes over the lease of a's expired member");
    assert!(over.token() > kept_lease.token());
    let reported: Vec<Lease> = a
        .renew(std::slice::from_ref(&kept_lease))
        .await?
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(reported, vec![kept_lease.clone()]);
    assert!(
        !a.client().exists::<bool, _>(kept_lease.member_key()).await?,
        "a renewal never brings an expired member back"
    );
    let again = a.acquire("G", &kept).await?;
    assert!(again.is_none(), "b holds it, alive");
    assert_ne!(a.identity(), before, "a acquires as a new member");
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_stale_acknowledgement_never_fails_the_others_of_its_call
);

/// Group commit: acknowledgements of many partitions travel in one call (one
/// per node on a cluster), each checked against its own lease. One of them
/// under a lease taken over since is refused, alone: the others are done.
async fn a_stale_acknowledgement_never_fails_the_others_of_its_call(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("groupack");
    let keys: Vec<String> = (0..8).map(|n| format!("k{n}")).collect();
    let partitions: Vec<PartitionKeys> = keys
        .iter()
        .map(|key| PartitionKeys::new(&category, key, "backfill"))
        .collect();
    for key in &keys {
        publish(&url, &category, key, 0..2).await?;
    }
    // `a` holds every partition but the stale one for long; `s` holds that
    // one with a short lease, which lapses and `b` takes over.
    let a = Partitions::new(pool(&url).await?, "a", Duration::from_secs(60));
    let s = owner(&url, "s").await?;
    let b = owner(&url, "b").await?;
    let stale = 3;
    let mut leases = Vec::new();
    let mut heads = Vec::new();
    for (n, partition) in partitions.iter().enumerate() {
        let holder = if n == stale { &s } else { &a };
        let lease = holder.acquire("G", partition).await?.expect("free");
        let read = entries(holder.read(&lease, "G", partition, 1).await?).await?;
        heads.push(read[0].0.clone());
        leases.push(lease);
    }
    wait_expired(&s, &leases[stale]).await?;
    let taken = b
        .acquire("G", &partitions[stale])
        .await?
        .expect("expired lease is free");

    let acks: Vec<Ack> = partitions
        .iter()
        .zip(&leases)
        .zip(&heads)
        .map(|((partition, lease), head)| Ack::new(lease, "G", partition, Lane::Primary, &[head.as_str()]))
        .collect();
    let outcomes = a.acknowledge(&acks).await?;
    assert_eq!(outcomes.len(), partitions.len());
    for (n, outcome) in outcomes.iter().enumerate() {
        if n == stale {
            match outcome {
                Err(Error::Fenced { holder, .. }) => {
                    assert_eq!(
                        holder.as_deref(),
                        Some(taken.value()),
                        "the refusal names the new holder"
                    );
                }
                other => panic!("the stale acknowledgement is refused, got {other:?}"),
            }
        } else {
            assert!(matches!(outcome, Ok(false)), "acknowledgement {n}: {outcome:?}");
        }
    }
    for (n, partition) in partitions.iter().enumerate() {
        let pending: Value = a
            .client()
            .xpending(partition.primary(), "G", ("-", "+", 10))
            .await?;
        let expected = if n == stale {
            vec![heads[n].clone()]
        } else {
            Vec::new()
        };
        assert_eq!(common_ids(pending), expected, "partition {n}'s pending entries");
    }
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_fenced_commit_lands_only_under_the_lease
);

async fn a_fenced_commit_lands_only_under_the_lease(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("commit");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let a = owner(&url, "a").await?;
    let b = owner(&url, "b").await?;
    let client = a.client().clone();
    // The effects share the partition's hash tag: on Redis Cluster a fenced
    // commit is one script, so its writes must be in the lease's slot.
    let effects = format!("{}:effects", partition.primary());
    let other = format!("{}:x", partition.primary());

    let lease_a = a.acquire("G", &partition).await?.expect("free");
    let fence_a = RedisFence::new(&lease_a);
    fence_a
        .commit(&client, &FencedWrite::new().rpush(&effects, "a1"))
        .await?;

    wait_expired(&a, &lease_a).await?;
    let lease_b = b.acquire("G", &partition).await?.expect("free");
    let stale = fence_a
        .commit(
            &client,
            &FencedWrite::new().rpush(&effects, "a2").set(&other, "a"),
        )
        .await;
    assert!(matches!(stale, Err(Error::Fenced { .. })), "{stale:?}");
    RedisFence::new(&lease_b)
        .commit(&client, &FencedWrite::new().rpush(&effects, "b1"))
        .await?;

    let list: Vec<String> = fred::interfaces::ListInterface::lrange(&client, &effects, 0, -1).await?;
    assert_eq!(list, ["a1", "b1"], "the stale owner's writes are not applied");
    assert!(!client.exists::<bool, _>(&other).await?);

    let refused = RedisFence::new(&lease_b)
        .commit(
            &client,
            &FencedWrite::new().command("FLUSHALL", "x", Vec::<String>::new()),
        )
        .await;
    assert!(
        matches!(refused, Err(Error::CommandNotAllowed { .. })),
        "{refused:?}"
    );
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_message_run_again_by_the_next_owner_applies_none_of_its_commits_again
);

/// A run's fence applies each of its commits once per message: the owner
/// crashed after committing and before acknowledging, the next owner runs
/// the message again, and its commits that the first run applied apply
/// nothing and answer what the first ones did (before, they applied again:
/// the counter went to 10). A commit the first run did not get to applies.
async fn a_message_run_again_by_the_next_owner_applies_none_of_its_commits_again(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("once");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    let a = owner(&url, "a").await?;
    let b = owner(&url, "b").await?;
    let client = a.client().clone();
    let counter = format!("{}:counter", partition.primary());
    let effects = format!("{}:effects", partition.primary());

    let lease_a = a.acquire("G", &partition).await?.expect("free");
    let run_a = RedisFence::for_attempt(&lease_a, 1).handling("m-1");
    let first = run_a
        .commit(&client, &FencedWrite::new().incr_by(&counter, 5))
        .await?;
    run_a
        .commit(&client, &FencedWrite::new().rpush(&effects, "a"))
        .await?;

    wait_expired(&a, &lease_a).await?;
    let lease_b = b.acquire("G", &partition).await?.expect("free");
    let run_b = RedisFence::for_attempt(&lease_b, 1).handling("m-1");
    let again = run_b
        .commit(&client, &FencedWrite::new().incr_by(&counter, 5))
        .await?;
    assert_eq!(again, first, "the first run's replies");
    run_b
        .commit(&client, &FencedWrite::new().rpush(&effects, "b"))
        .await?;
    let third = run_b
        .commit(&client, &FencedWrite::new().rpush(&effects, "b3"))
        .await?;
    assert_eq!(
        third.first().and_then(fred::types::Value::as_i64),
        Some(2),
        "{third:?}"
    );

    assert_eq!(client.get::<i64, _>(&counter).await?, 5, "applied once");
    let list: Vec<String> = fred::interfaces::ListInterface::lrange(&client, &effects, 0, -1).await?;
    assert_eq!(list, ["a", "b3"]);

    // The stale owner is still refused, and another message applies.
    let stale = run_a
        .commit(&client, &FencedWrite::new().incr_by(&counter, 1))
        .await;
    assert!(matches!(stale, Err(Error::Fenced { .. })), "{stale:?}");
    RedisFence::for_attempt(&lease_b, 2)
        .handling("m-2")
        .commit(&client, &FencedWrite::new().incr_by(&counter, 5))
        .await?;
    assert_eq!(client.get::<i64, _>(&counter).await?, 10);
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_message_acknowledgement_forgets_what_it_applied_and_only_that
);

/// What a message's commits applied is kept until its acknowledgement
/// takes it out (then the message never runs again), whatever else the
/// marker holds: a late copy of an acknowledgement keeps the next
/// message's; two messages' commits in the marker at once (a worker that
/// ran the next message before the first one's acknowledgement landed)
/// are each applied once and each forgotten by their own acknowledgement.
async fn a_message_acknowledgement_forgets_what_it_applied_and_only_that(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("once");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    publish(&url, &category, "k", 0..2).await?;
    let a = owner(&url, "a").await?;
    let client = a.client().clone();
    let counter = format!("{}:counter", partition.primary());
    let lease = a.acquire("G", &partition).await?.expect("free");
    let marker = lease.keys().commit.clone();
    let ack = |id: &str, attempt: u64, message: &str| {
        Ack::new(&lease, "G", &partition, Lane::Primary, &[id])
            .closing(attempt)
            .forgetting(Some(message))
    };

    let read = entries(a.read(&lease, "G", &partition, 1).await?).await?;
    let run = RedisFence::for_attempt(&lease, 1).handling("m-0");
    run.commit(&client, &FencedWrite::new().incr_by(&counter, 1))
        .await?;
    assert_eq!(
        client.ttl::<i64, _>(&marker).await?,
        -1,
        "kept until acknowledged, however long a halt lasts"
    );
    a.acknowledge(&[ack(&read[0].0, 1, "m-0")]).await?;
    // Only what a resend of the last commit needs is left, for a while.
    assert!(
        client.pttl::<i64, _>(&marker).await? > 0,
        "expires after its last message"
    );

    let next = entries(a.read(&lease, "G", &partition, 1).await?).await?;
    let run = RedisFence::for_attempt(&lease, 2).handling("m-1");
    run.commit(&client, &FencedWrite::new().incr_by(&counter, 1))
        .await?;
    // A late copy of the first acknowledgement.
    a.acknowledge(&[ack(&read[0].0, 1, "m-0")]).await?;
    assert_eq!(
        client.pttl::<i64, _>(&marker).await?,
        -1,
        "the next message's record is kept"
    );
    // The message after it commits before m-1's acknowledgement lands.
    RedisFence::for_attempt(&lease, 3)
        .handling("m-2")
        .commit(&client, &FencedWrite::new().incr_by(&counter, 10))
        .await?;
    // m-1 runs again: its first commit is in already.
    RedisFence::for_attempt(&lease, 2)
        .handling("m-1")
        .commit(&client, &FencedWrite::new().incr_by(&counter, 1))
        .await?;
    assert_eq!(
        client.get::<i64, _>(&counter).await?,
        12,
        "m-1 applied once, m-2 once"
    );
    a.acknowledge(&[ack(&next[0].0, 2, "m-1")]).await?;
    // m-1 is forgotten, m-2 is not: a run of m-2 again applies nothing.
    RedisFence::for_attempt(&lease, 4)
        .handling("m-2")
        .commit(&client, &FencedWrite::new().incr_by(&counter, 10))
        .await?;
    assert_eq!(client.get::<i64, _>(&counter).await?, 12);
    a.acknowledge(&[ack(&next[0].0, 4, "m-2")]).await?;
    assert!(client.pttl::<i64, _>(&marker).await? > 0);
    Ok(())
}

/// A reap deletes the partition's generation counter; tokens taken after it
/// must still be larger, or an owner stalled since before the reap could
/// match a new lease.
#[tokio::test]
async fn tokens_keep_growing_across_a_reap() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("reap");
    let partition = PartitionKeys::new(&category, "k", "backfill");
    publish(&url, &category, "k", 0..1).await?;
    let a = owner(&url, "a").await?;
    let lease = a.acquire("G", &partition).await?.expect("free");
    let read = entries(a.read(&lease, "G", &partition, 10).await?).await?;
    a.ack(&lease, "G", &partition, Lane::Primary, &[&read[0].0])
        .await?;
    assert_eq!(
        a.reap(&lease, &partition, Duration::from_millis(1)).await?,
        ReapOutcome::Reaped
    );
    assert!(
        !a.client()
            .exists::<bool, _>(partition.lease("G").generation)
            .await?
    );

    publish(&url, &category, "k", 1..2).await?;
    let again = a.acquire("G", &partition).await?.expect("free after the reap");
    assert!(
        again.token() > lease.token(),
        "{} > {}",
        again.token(),
        lease.token()
    );
    assert!(matches!(
        a.read(&lease, "G", &partition, 10).await,
        Err(Error::Fenced { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn a_stale_owner_cannot_save_process_state() -> anyhow::Result<()> {
    use ordo_core::contract::handler::HandlerContext;
    use ordo_core::contract::process::ProcessStore;
    use ordo_redis::RedisProcessStore;
    use ordo_redis::internals::LeaseKeys;

    let redis = Redis::start()?;
    let url = redis.url();
    let a = owner(&url, "a").await?;
    let b = owner(&url, "b").await?;
    let store = RedisProcessStore::new(a.client().clone());
    let correlation = common::category("order");
    let keys = LeaseKeys::process("Fulfilment", &correlation);
    let message = common::envelope("order", "Happened", Some(&correlation), 0);
    let context = |lease: &Lease| {
        HandlerContext::new(&message)
            .with_fencing_token(lease.token())
            .with_extension(RedisFence::new(lease))
    };

    let lease_a = a.acquire_keys(&keys).await?.expect("free");
    store
        .save("Fulfilment", &correlation, "a1".into(), &context(&lease_a))
        .await?;
    wait_expired(&a, &lease_a).await?;
    let lease_b = b.acquire_keys(&keys).await?.expect("free");
    store
        .save("Fulfilment", &correlation, "b1".into(), &context(&lease_b))
        .await?;
    let stale = store
        .save("Fulfilment", &correlation, "a2".into(), &context(&lease_a))
        .await;
    assert!(
        matches!(stale, Err(ordo_core::contract::error::ProcessStoreError::Fenced { fencing_token, .. }) if fencing_token == lease_a.token()),
        "{stale:?}"
    );
    assert_eq!(
        store.load("Fulfilment", &correlation).await?.as_deref(),
        Some("b1")
    );
    Ok(())
}
