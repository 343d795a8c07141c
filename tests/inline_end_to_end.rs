//! End to end through the facade: messages and handlers declared with the
//! macros, committed through the unit of work, handled by the inline broker.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo::contract::broker::{Capabilities, Publication, PublishError, Subscription};
use ordo::contract::key::KeyRule;
use ordo::prelude::*;

#[derive(Aggregate)]
struct Account;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Deposited {
    #[aggregate_id]
    account_id: String,
    owner: Option<String>,
    seq: u64,
}

/// Records per-owner order and flags any overlap of two runs for one owner.
#[derive(Clone, Default)]
struct Ledger {
    in_flight: Arc<Mutex<BTreeMap<String, Arc<AtomicBool>>>>,
    overlaps: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    max_running: Arc<AtomicUsize>,
    seen: Arc<Mutex<BTreeMap<String, Vec<u64>>>>,
}

impl Ledger {
    fn flag(&self, owner: &str) -> Arc<AtomicBool> {
        let mut flags = self.in_flight.lock().expect("not poisoned");
        flags.entry(owner.to_owned()).or_default().clone()
    }
}

#[event_handler(part_of = Account, sequential_by = "owner")]
impl Ledger {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        let owner = ctx
            .partition_key()
            .expect("a partitioned category carries its key")
            .to_owned();
        let flag = self.flag(&owner);
        if flag.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.seen
            .lock()
            .expect("not poisoned")
            .entry(owner)
            .or_default()
            .push(event.seq);
        self.running.fetch_sub(1, Ordering::SeqCst);
        flag.store(false, Ordering::SeqCst);
        Ok(())
    }
}

fn deposit(owner: Option<&str>, seq: u64) -> Deposited {
    Deposited {
        account_id: format!("acc-{seq}"),
        owner: owner.map(str::to_owned),
        seq,
    }
}

async fn settle(domain: &Domain) {
    tokio::time::timeout(Duration::from_secs(30), domain.settle())
        .await
        .expect("the inline broker settles")
        .expect("settle() is called outside handlers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_runs_in_commit_order_without_overlap_and_keys_run_in_parallel() {
    let ledger = Ledger::default();
    let domain = Domain::builder()
        .event_handler(ledger.clone())
        .init()
        .expect("valid domain");

    let owners = ["ann", "bo", "cy", "di"];
    for batch in 0..10u64 {
        let mut uow = domain.unit_of_work();
        for (i, owner) in owners.iter().enumerate() {
            uow.raise(deposit(Some(owner), batch * 4 + i as u64))
                .expect("serialisable");
        }
        uow.commit().await.expect("valid keys");
    }
    settle(&domain).await;

    let seen = ledger.seen.lock().expect("not poisoned").clone();
    for (i, owner) in owners.iter().enumerate() {
        let expected: Vec<u64> = (0..10).map(|batch| batch * 4 + i as u64).collect();
        assert_eq!(seen[*owner], expected, "{owner}'s deposits in commit order");
    }
    assert_eq!(
        ledger.overlaps.load(Ordering::SeqCst),
        0,
        "two runs of one key overlapped"
    );
    assert!(
        ledger.max_running.load(Ordering::SeqCst) > 1,
        "different keys never ran in parallel"
    );
}

#[tokio::test]
async fn a_null_key_fails_the_whole_commit_and_nothing_is_handled() {
    let ledger = Ledger::default();
    let domain = Domain::builder()
        .event_handler(ledger.clone())
        .init()
        .expect("valid domain");

    let mut uow = domain.unit_of_work();
    uow.raise(deposit(Some("ann"), 1)).expect("serialisable");
    uow.raise(deposit(None, 2)).expect("serialisable");
    let error = uow.commit().await.expect_err("a null key is rejected");
    let message = error.to_string();
    assert!(
        message.contains("`owner`") && message.contains("null"),
        "{message}"
    );
    match error {
        CommitError::InvalidKey { key, .. } => assert_eq!(key.rule, KeyRule::Null),
        other => panic!("expected an invalid key, got {other:?}"),
    }
    settle(&domain).await;
    assert!(
        ledger.seen.lock().expect("not poisoned").is_empty(),
        "nothing of the commit ran"
    );
}

/// A broker that neither partitions streams nor orders in process.
#[derive(Debug)]
struct FanOutBroker;

impl ordo::contract::broker::Broker for FanOutBroker {
    fn name(&self) -> &str {
        "fan-out"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::NONE
    }

    fn publish<'a>(
        &'a self,
        _: &'a [Publication],
    ) -> ordo::contract::handler::BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async { Ok(()) })
    }

    fn run(
        &self,
        _: Arc<[Subscription]>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> ordo::contract::handler::BoxFuture<'static, Result<(), ordo::contract::broker::BrokerError>> {
        Box::pin(async move {
            shutdown.cancelled().await;
            Ok(())
        })
    }
}

#[test]
fn init_rejects_a_partitioned_handler_on_a_broker_without_the_capability() {
    let error = Domain::builder()
        .event_handler(Ledger::default())
        .broker(FanOutBroker)
        .init()
        .expect_err("the broker cannot partition");
    let message = error.to_string();
    assert!(
        message.contains("Ledger") && message.contains("fan-out"),
        "{message}"
    );
}
