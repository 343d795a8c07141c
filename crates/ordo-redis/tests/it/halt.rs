//! Halt on poison and the operator API, against a real Redis.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use fred::interfaces::StreamsInterface;
use fred::types::Value;
use ordo_core::contract::key::Lane;
use ordo_redis::{Error, HaltedPartition, PartitionAdmin};
use ordo_testkit::Redis;

use common::topology::TestRedis;
use common::{Outcome, Recorder, Running, broker, config, pool, publish_all, publish_seqs, subscribe};
use ordo_testkit::eventually;

const MAX_RETRIES: u32 = 2;

async fn halted_on(admin: &PartitionAdmin, key: &str) -> anyhow::Result<Option<HaltedPartition>> {
    Ok(admin.halted().await?.into_iter().find(|h| h.key == key))
}

async fn wait_halted(admin: &PartitionAdmin, key: &str) -> anyhow::Result<HaltedPartition> {
    eventually(
        Duration::from_secs(10),
        &format!("partition {key} to halt"),
        || async { Ok(halted_on(admin, key).await?.is_some()) },
    )
    .await?;
    Ok(halted_on(admin, key).await?.expect("halted"))
}

/// `bad` fails on seq 1 while `fail` says so; everything else succeeds.
fn poison(fail: Arc<std::sync::atomic::AtomicBool>) -> Recorder {
    Recorder::with(Arc::new(move |key, seq, _| {
        if key.starts_with("bad") && seq == 1 && fail.load(std::sync::atomic::Ordering::SeqCst) {
            Outcome::Fail
        } else {
            Outcome::Succeed
        }
    }))
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_poison_message_halts_its_partition_only_and_each_operator_action_does_what_it_says
);

async fn a_poison_message_halts_its_partition_only_and_each_operator_action_does_what_it_says(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let recorder = poison(fail.clone());
    let a = broker(&url, config(3_000, 3_600_000, MAX_RETRIES)).await?;
    let admin = a.admin();
    let keys = ["bad", "bad2", "good"].map(str::to_owned);
    publish_all(&a, &category, &keys, 0..4).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);

    // The poison halts `bad` and `bad2` at seq 1; `good` flows.
    recorder.wait_seqs("good", &[0, 1, 2, 3]).await?;
    let halt = wait_halted(&admin, "bad").await?;
    wait_halted(&admin, "bad2").await?;
    assert_eq!(recorder.seqs("bad"), [0]);
    assert_eq!(
        (halt.group.as_str(), halt.category.as_str(), halt.lane),
        ("P", category.as_str(), Lane::Primary)
    );
    assert_eq!(halt.attempts, MAX_RETRIES + 1);
    assert!(halt.error.contains("poison bad/1"), "{}", halt.error);
    assert_eq!(halt.owner, a.instance_id());
    let attempts = |key: &str| recorder.attempts(key, 1);
    assert_eq!(attempts("bad"), Some(MAX_RETRIES + 1));

    // Inspect shows the head message.
    let inspection = admin.inspect("P", &category, "bad").await?;
    let head = inspection.head.expect("the head is still in the stream");
    assert_eq!(head.id(), halt.head);
    assert_eq!(common::seq_of(&head.decode()?), 1);
    assert!(inspection.deliveries.is_some_and(|d| d >= 1));

    // Retry: the owner runs the head again (and halts again, still failing).
    admin.retry("P", &category, "bad").await?;
    eventually(
        Duration::from_secs(10),
        "the retried head to halt again",
        || async {
            Ok(attempts("bad") == Some(2 * (MAX_RETRIES + 1)) && halted_on(&admin, "bad").await?.is_some())
        },
    )
    .await?;

    // Skip: the head is acknowledged unhandled; the partition resumes after it.
    let skipped = admin.skip("P", &category, "bad").await?;
    assert_eq!(skipped, halt.head);
    recorder.wait_seqs("bad", &[0, 2, 3]).await?;
    assert!(halted_on(&admin, "bad").await?.is_none());

    // Dead-letter: the head goes to `{category}:bad2:dlq` with its error.
    admin.dead_letter("P", &category, "bad2").await?;
    recorder.wait_seqs("bad2", &[0, 2, 3]).await?;
    let client = pool(&url).await?;
    let dlq: Value = client
        .xrange(common::partition(&category, "bad2").dlq(), "-", "+", None)
        .await?;
    let dlq = dlq.into_array();
    assert_eq!(dlq.len(), 1, "one dead letter");
    let text = format!("{:?}", dlq[0]);
    assert!(
        text.contains("poison bad2/1") && text.contains("envelope"),
        "{text}"
    );

    // Every action refuses a partition that is not halted.
    for result in [
        admin.skip("P", &category, "good").await,
        admin.retry("P", &category, "good").await,
        admin.dead_letter("P", &category, "good").await,
    ] {
        assert!(matches!(result, Err(Error::NotHalted { .. })), "{result:?}");
    }
    assert!(matches!(
        admin.inspect("P", &category, "good").await,
        Err(Error::NotHalted { .. })
    ));
    assert!(admin.halted().await?.is_empty());
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_halt_survives_a_failover_and_the_new_owner_does_not_rerun_the_head
);

async fn a_halt_survives_a_failover_and_the_new_owner_does_not_rerun_the_head(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("order");
    let fail = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let recorder = poison(fail.clone());
    let sub = || subscribe::partitioned("P", &category, &recorder);
    let a = broker(&url, config(3_000, 3_600_000, MAX_RETRIES)).await?;
    publish_seqs(&a, &category, "bad", 0..3).await?;
    let run_a = Running::start(&a, vec![sub()]);
    let admin = a.admin();
    let halt = wait_halted(&admin, "bad").await?;
    run_a.stop().await?;

    // A new owner takes over; the fix is deployed (the head would now succeed).
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    let b = broker(&url, config(3_000, 3_600_000, MAX_RETRIES)).await?;
    let run_b = Running::start(&b, vec![sub()]);
    let client = pool(&url).await?;
    let lease = ordo_redis::PartitionKeys::new(&category, "bad", "backfill")
        .lease("P")
        .lease;
    eventually(
        Duration::from_secs(10),
        "b to own the halted partition",
        || async {
            let holder: Option<String> = fred::interfaces::KeysInterface::get(&client, &lease).await?;
            Ok(holder.is_some_and(|h| h.starts_with(b.instance_id())))
        },
    )
    .await?;
    // B owns it. Had B ignored the halt it would run the head on its first
    // read, within a poll interval; give it five.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(halted_on(&admin, "bad").await?, Some(halt.clone()));
    let attempts = recorder.attempts("bad", 1);
    assert_eq!(attempts, Some(MAX_RETRIES + 1));

    // The operator retries: B runs the head (now succeeding) and the rest.
    admin.retry("P", &category, "bad").await?;
    recorder.wait_seqs("bad", &[0, 1, 2]).await?;
    run_b.stop().await?;
    Ok(())
}

/// The operator inspected head H1 and decided to dead-letter it; meanwhile
/// another operator skipped H1 and the partition halted again on H2. The
/// decision about H1 must not land on H2: the expected head is compared in
/// the same atomic step as the action, and nothing changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_expecting_a_head_that_changed_changes_nothing() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("order");
    let recorder = Recorder::with(Arc::new(|_, seq, _| {
        if seq == 1 || seq == 2 {
            Outcome::Fail
        } else {
            Outcome::Succeed
        }
    }));
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    publish_seqs(&a, &category, "bad", 0..4).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);
    let admin = a.admin();
    let first = wait_halted(&admin, "bad").await?.head;
    let inspected = admin.inspect("P", &category, "bad").await?;
    assert_eq!(inspected.halt.head, first);

    // Another operator skips H1; the partition halts on H2.
    let skipped = admin.head("P", &category, "bad").expecting(&first).skip().await?;
    assert_eq!(skipped, first);
    eventually(Duration::from_secs(10), "the partition to halt on H2", || async {
        Ok(halted_on(&admin, "bad").await?.is_some_and(|h| h.head != first))
    })
    .await?;
    let second = halted_on(&admin, "bad").await?.expect("halted");

    // The first operator's decision about H1 is refused as a whole.
    let refused = admin
        .head("P", &category, "bad")
        .expecting(&inspected.halt.head)
        .dead_letter()
        .await;
    match &refused {
        Err(Error::HeadChanged {
            group,
            partition,
            expected,
            actual,
        }) => {
            assert_eq!((group.as_str(), expected, actual), ("P", &first, &second.head));
            assert_eq!(partition, &format!("{category}:bad"));
        }
        other => panic!("expected HeadChanged, got {other:?}"),
    }
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains(&first) && message.contains(&second.head),
        "{message}"
    );
    assert_eq!(
        halted_on(&admin, "bad").await?,
        Some(second.clone()),
        "still halted on H2"
    );
    let client = pool(&url).await?;
    let dlq: Value = client
        .xrange(common::partition(&category, "bad").dlq(), "-", "+", None)
        .await?;
    assert!(dlq.into_array().is_empty(), "nothing was dead-lettered");
    let pending: Value = client
        .xpending(
            common::stream(&category, "bad"),
            "P",
            (second.head.as_str(), second.head.as_str(), 1),
        )
        .await?;
    assert_eq!(pending.into_array().len(), 1, "H2 is still the pending head");

    // Acting on the head it is halted on now works.
    assert_eq!(
        admin
            .head("P", &category, "bad")
            .expecting(&second.head)
            .skip()
            .await?,
        second.head
    );
    recorder.wait_seqs("bad", &[0, 3]).await?;
    run.stop().await?;
    Ok(())
}

/// A handler that commits seq 0's effect through the fence and then fails
/// on it for good, and runs the later seqs without committing.
#[derive(Clone)]
struct CommitsThenFails {
    pool: fred::clients::Pool,
    counter: String,
    /// The id of the message that committed.
    committed: Arc<std::sync::Mutex<Option<String>>>,
    done: Arc<std::sync::atomic::AtomicU64>,
}

impl ordo_core::DynHandler for CommitsThenFails {
    fn handle<'a>(
        &'a self,
        message: &'a ordo_core::contract::message::Envelope,
        ctx: &'a ordo_core::contract::handler::HandlerContext,
    ) -> ordo_core::contract::handler::BoxFuture<'a, ordo_core::contract::handler::HandlerResult> {
        Box::pin(async move {
            if common::seq_of(message) > 0 {
                self.done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Ok(());
            }
            let fence = ordo_redis::RedisFence::from_context(ctx).ok_or("no fence")?;
            fence
                .commit(
                    &self.pool,
                    &ordo_redis::FencedWrite::new().incr_by(&self.counter, 1),
                )
                .await?;
            *self.committed.lock().unwrap() = Some(message.id.clone());
            Err("fails after its commit".into())
        })
    }
}

/// A message whose runs committed and that then halted keeps the record of
/// what it applied when an operator skips it and the next message runs
/// (without committing) and is acknowledged: before, the worker still had
/// the skipped message noted as the one that committed, and the next
/// message's acknowledgement took its record out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_message_keeps_the_record_of_what_its_runs_applied() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("order");
    let partition = ordo_redis::PartitionKeys::new(&category, "k", "backfill");
    let marker = partition.lease("P").commit;
    let handler = CommitsThenFails {
        pool: pool(&url).await?,
        counter: format!("{}:counter", partition.primary()),
        committed: Arc::default(),
        done: Arc::default(),
    };
    let a = broker(&url, config(3_000, 3_600_000, MAX_RETRIES)).await?;
    publish_seqs(&a, &category, "k", 0..2).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &handler)]);
    let admin = a.admin();
    wait_halted(&admin, "k").await?;
    admin.skip("P", &category, "k").await?;
    eventually(Duration::from_secs(10), "seq 1 to be handled", || async {
        Ok(handler.done.load(std::sync::atomic::Ordering::SeqCst) == 1)
    })
    .await?;
    run.stop().await?;

    let message = handler
        .committed
        .lock()
        .unwrap()
        .clone()
        .expect("seq 0 committed");
    let client = pool(&url).await?;
    let recorded: i64 = fred::interfaces::LuaInterface::eval(
        &client,
        "local raw = redis.call('GET', KEYS[1]) \
         if not raw then return 0 end \
         local marker = cmsgpack.unpack(raw) \
         if type(marker[3]) == 'table' and marker[3][ARGV[1]] then return 1 end \
         return 0",
        vec![marker],
        vec![message],
    )
    .await?;
    assert_eq!(recorded, 1, "the skipped message's record was taken out");
    let applied: i64 = fred::interfaces::KeysInterface::get(&client, &handler.counter).await?;
    assert_eq!(applied, 1, "its runs applied the effect once");
    Ok(())
}
