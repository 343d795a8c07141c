//! The wrong handler never runs, a key is the same text on every path, and
//! nothing hangs: regressions found by users' crates, each one end to end
//! through the macros and the inline broker.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ordo::contract::process::{InMemoryProcessStore, ProcessStore};
use ordo::prelude::*;
use ordo::runtime::error::{SettleError, UsageProblem};

/// Every test is bounded: a hang is a failure, not a stuck run.
const DEADLINE: Duration = Duration::from_secs(20);

async fn settle(domain: &Domain) {
    tokio::time::timeout(DEADLINE, domain.settle())
        .await
        .expect("the domain settles")
        .expect("settle() outside handlers");
}

fn config(toml: &str) -> Config {
    Config::from_toml_str(toml).expect("a valid test configuration")
}

type Log = Arc<Mutex<Vec<String>>>;

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

// ------------------------------------------------ 1. delivery by category and type

mod sales {
    use ordo::prelude::*;

    #[derive(Aggregate)]
    pub(crate) struct Order;

    #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    #[event(part_of = Order)]
    pub(crate) struct Placed {
        pub(crate) id: String,
    }
}

mod invoicing {
    use ordo::prelude::*;

    #[derive(Aggregate)]
    pub(crate) struct Invoice;

    #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    #[event(part_of = Invoice)]
    pub(crate) struct Placed {
        pub(crate) id: String,
    }
}

struct SalesProjector {
    log: Log,
}

#[event_handler(part_of = sales::Order)]
impl SalesProjector {
    #[handle]
    async fn on_placed(&self, event: &sales::Placed) -> anyhow::Result<()> {
        self.log.lock().unwrap().push(event.id.clone());
        Ok(())
    }
}

#[tokio::test]
async fn an_event_of_another_aggregate_with_the_same_name_never_reaches_a_handler() {
    let log = Log::default();
    let domain = Domain::builder()
        .aggregate::<sales::Order>()
        .aggregate::<invoicing::Invoice>()
        .event_handler(SalesProjector { log: log.clone() })
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    uow.raise(invoicing::Placed {
        id: "invoice-1".into(),
    })
    .unwrap();
    uow.raise(sales::Placed { id: "sale-1".into() }).unwrap();
    uow.commit().await.unwrap();
    settle(&domain).await;
    assert_eq!(entries(&log), ["sale-1"], "the invoice was handled as a sale");
}

// ------------------------------------------------ 2. one Rust type per name and category

#[derive(Aggregate)]
struct Account;

mod v1 {
    use ordo::prelude::*;

    #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    #[event(part_of = super::Account)]
    pub(crate) struct Opened {
        pub(crate) id: String,
    }
}

mod v2 {
    use ordo::prelude::*;

    #[derive(Debug, Clone, Serialize, Deserialize, Event)]
    #[event(part_of = super::Account)]
    pub(crate) struct Opened {
        pub(crate) id: String,
        pub(crate) currency: String,
    }
}

struct V1Projector;

#[event_handler(part_of = Account)]
impl V1Projector {
    #[handle]
    async fn on_opened(&self, _event: &v1::Opened) -> anyhow::Result<()> {
        Ok(())
    }
}

struct V2Projector;

#[event_handler(part_of = Account)]
impl V2Projector {
    #[handle]
    async fn on_opened(&self, _event: &v2::Opened) -> anyhow::Result<()> {
        Ok(())
    }
}

#[test]
fn two_types_with_one_name_in_one_category_are_refused_at_init() {
    let error = Domain::builder()
        .event_handler(V1Projector)
        .event_handler(V2Projector)
        .init()
        .expect_err("v1::Opened and v2::Opened share a name");
    assert!(
        error.problems().iter().any(|p| matches!(
            p,
            UsageProblem::DuplicateTypeName {
                type_name: "Opened",
                category: "account",
                ..
            }
        )),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("v1::Opened") && text.contains("v2::Opened"),
        "{text}"
    );
    assert!(text.contains("#[event(name = \"...\")]"), "{text}");
}

#[tokio::test]
async fn raising_a_type_that_shares_a_handled_types_name_is_refused() {
    let domain = Domain::builder().event_handler(V1Projector).init().unwrap();
    let mut uow = domain.unit_of_work();
    let error = uow
        .raise(v2::Opened {
            id: "a-1".into(),
            currency: "EUR".into(),
        })
        .expect_err("v2::Opened would be decoded as v1::Opened");
    assert!(matches!(error, CommitError::AmbiguousTypeName { .. }), "{error}");
}

// ------------------------------------------------ 3. keys are the same text on every path

#[derive(Aggregate)]
struct Ledger;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Ledger)]
struct Credited {
    account: u128,
    amount: u64,
}

/// Not handled by anyone: its key comes from the JSON payload.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Ledger)]
struct Audited {
    account: u128,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Ledger)]
struct Flagged {
    account: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Ledger)]
struct Noted {
    text: String,
}

struct LedgerProjector;

#[event_handler(part_of = Ledger, sequential_by = "account")]
impl LedgerProjector {
    #[handle]
    async fn on_credited(&self, _event: &Credited) -> anyhow::Result<()> {
        Ok(())
    }
}

const BIG: u128 = 1 << 70;

#[tokio::test]
async fn integer_keys_beyond_2_pow_53_keep_their_exact_text_on_the_json_path() {
    let domain = Domain::builder().event_handler(LedgerProjector).init().unwrap();
    let mut uow = domain.unit_of_work();
    uow.raise(Credited {
        account: BIG,
        amount: 1,
    })
    .unwrap();
    uow.raise(Audited { account: BIG }).unwrap();
    uow.raise(Audited { account: BIG + 1 }).unwrap();
    uow.commit().await.unwrap();
    let keys: Vec<Option<String>> = domain
        .outbox()
        .pending(10)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.envelope.partition_key)
        .collect();
    assert_eq!(
        keys,
        [
            Some(BIG.to_string()),
            Some(BIG.to_string()),
            Some((BIG + 1).to_string())
        ]
    );
}

#[tokio::test]
async fn the_json_path_refuses_what_the_macros_refuse_and_names_a_missing_field() {
    let domain = Domain::builder().event_handler(LedgerProjector).init().unwrap();
    let mut uow = domain.unit_of_work();
    uow.raise(Flagged { account: true }).unwrap();
    let error = uow.commit().await.expect_err("a boolean cannot be a key");
    assert!(
        matches!(
            error,
            CommitError::UnsupportedKeyValue {
                found: "a boolean",
                ..
            }
        ),
        "{error}"
    );

    let mut uow = domain.unit_of_work();
    uow.raise(Noted { text: "hello".into() }).unwrap();
    let error = uow.commit().await.expect_err("no key field at all");
    assert!(error.to_string().contains("has no field `account`"), "{error}");
    assert!(domain.outbox().pending(10).await.unwrap().is_empty());
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CreditTally {
    credits: u32,
}

#[process_manager]
impl CreditTally {
    #[handle(start, correlate = "account")]
    async fn on_credited(&mut self, _event: &Credited) -> anyhow::Result<()> {
        self.credits += 1;
        Ok(())
    }
}

#[tokio::test]
async fn process_manager_correlation_values_beyond_2_pow_53_stay_apart() {
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .process_manager::<CreditTally>()
        .process_store(store.clone())
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    for account in [BIG, BIG + 1, BIG + 2] {
        uow.raise(Credited { account, amount: 5 }).unwrap();
    }
    uow.commit().await.unwrap();
    settle(&domain).await;
    assert_eq!(store.len(), 3, "three accounts, three process instances");
    let state = store.load("CreditTally", &(BIG + 1).to_string()).await.unwrap();
    assert_eq!(state.as_deref(), Some(r#"{"credits":1}"#));
}

// ------------------------------------------------ 4. serde renames

#[derive(Aggregate)]
struct Cart;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[serde(rename_all = "camelCase")]
#[event(part_of = Cart)]
struct ItemAdded {
    cart_id: String,
    item_no: u32,
}

/// Tracks how many handler runs of one cart overlap.
#[derive(Default)]
struct Overlap {
    running: AtomicUsize,
    max: AtomicUsize,
    runs: AtomicUsize,
}

struct CartProjector {
    overlap: Arc<Overlap>,
}

#[event_handler(part_of = Cart)]
#[sequencing_policy(property = "cart_id")]
impl CartProjector {
    #[handle]
    async fn on_added(&self, _event: &ItemAdded) -> anyhow::Result<()> {
        let now = self.overlap.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.overlap.max.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.overlap.running.fetch_sub(1, Ordering::SeqCst);
        self.overlap.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CartSession {
    items: Vec<u32>,
}

#[process_manager]
impl CartSession {
    #[handle(start, correlate = "cart_id")]
    async fn on_added(&mut self, event: &ItemAdded) -> anyhow::Result<()> {
        self.items.push(event.item_no);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serde_renames_do_not_change_property_sequences_or_correlation() {
    let overlap = Arc::new(Overlap::default());
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .event_handler(CartProjector {
            overlap: Arc::clone(&overlap),
        })
        .process_manager::<CartSession>()
        .process_store(store.clone())
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    for item_no in 0..10 {
        uow.raise(ItemAdded {
            cart_id: "cart-1".into(),
            item_no,
        })
        .unwrap();
    }
    uow.commit().await.unwrap();
    settle(&domain).await;
    assert_eq!(overlap.runs.load(Ordering::SeqCst), 10);
    assert_eq!(
        overlap.max.load(Ordering::SeqCst),
        1,
        "one cart's events overlapped"
    );
    assert!(domain.inline_broker().unwrap().failures().is_empty());
    let state = store
        .state("CartSession", "cart-1")
        .expect("the cart's process instance");
    assert_eq!(state, r#"{"items":[0,1,2,3,4,5,6,7,8,9]}"#);
}

// ------------------------------------------------ 5. what cannot be decoded is refused at commit

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Cart)]
struct Annotated {
    cart_id: String,
    note: serde_json::Value,
}

#[tokio::test]
async fn json_too_deep_to_decode_is_refused_at_raise_with_the_true_reason() {
    let domain = Domain::builder().init().unwrap();
    let mut note = serde_json::Value::Null;
    for _ in 0..200 {
        note = serde_json::Value::Array(vec![note]);
    }
    let mut uow = domain.unit_of_work();
    let error = uow
        .raise(Annotated {
            cart_id: "cart-1".into(),
            note,
        })
        .expect_err("200 levels exceed the decoder's limit");
    assert!(matches!(error, CommitError::Undecodable { .. }), "{error}");
    let cause = std::error::Error::source(&error)
        .expect("the decoder's error")
        .to_string();
    assert!(cause.contains("recursion limit"), "{cause}");
}

// ------------------------------------------------ 6 and 7. nested dispatch and settle() never hang

#[derive(Aggregate)]
struct Shop;

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Shop)]
struct Checkout {
    #[routing_key]
    basket: String,
    /// The routing key of the sub-command.
    reserve_in: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Shop)]
struct Reserve {
    #[routing_key]
    warehouse: String,
}

struct ShopHandler {
    domain: Arc<OnceLock<Domain>>,
    reserved: Arc<AtomicUsize>,
    gate: Arc<SlotGate>,
}

/// Holds the first `slots` outer commands until all of them have entered
/// their handlers, so that every slot is taken by a handler about to
/// dispatch: the case that deadlocked.
struct SlotGate {
    slots: usize,
    entered: AtomicUsize,
    full: tokio::sync::Notify,
}

impl SlotGate {
    async fn enter(&self) {
        let entered = self.entered.fetch_add(1, Ordering::SeqCst) + 1;
        if entered >= self.slots {
            self.full.notify_waiters();
            return;
        }
        loop {
            let notified = self.full.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.entered.load(Ordering::SeqCst) >= self.slots {
                return;
            }
            notified.await;
        }
    }
}

#[command_handler(part_of = Shop)]
impl ShopHandler {
    #[handle]
    async fn checkout(&self, command: &Checkout) -> anyhow::Result<()> {
        let domain = self.domain.get().expect("the domain is set");
        self.gate.enter().await;
        domain
            .dispatch(Reserve {
                warehouse: command.reserve_in.clone(),
            })
            .await?;
        Ok(())
    }

    #[handle]
    async fn reserve(&self, _command: &Reserve) -> anyhow::Result<()> {
        self.reserved.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// A shop whose first `max_concurrency` checkouts all hold a slot before any
/// of them dispatches.
fn shop(max_concurrency: usize) -> (Domain, Arc<AtomicUsize>) {
    let cell = Arc::new(OnceLock::new());
    let reserved = Arc::new(AtomicUsize::new(0));
    let domain = Domain::builder()
        .config(config(&format!(
            "[server.partitioning]\nmax_concurrency = {max_concurrency}"
        )))
        .command_handler(ShopHandler {
            domain: Arc::clone(&cell),
            reserved: Arc::clone(&reserved),
            gate: Arc::new(SlotGate {
                slots: max_concurrency,
                entered: AtomicUsize::new(0),
                full: tokio::sync::Notify::new(),
            }),
        })
        .init()
        .unwrap();
    cell.set(domain.clone()).unwrap();
    (domain, reserved)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_dispatching_sub_commands_cannot_take_every_slot() {
    let (domain, reserved) = shop(8);
    let outer = (0..20).map(|i| {
        let domain = domain.clone();
        tokio::spawn(async move {
            domain
                .dispatch(Checkout {
                    basket: format!("basket-{i}"),
                    reserve_in: format!("warehouse-{}", i % 3),
                })
                .await
        })
    });
    let results = tokio::time::timeout(DEADLINE, futures_join(outer.collect()))
        .await
        .expect("20 nested dispatches over 8 slots complete");
    for result in results {
        result.expect("no panic").expect("dispatched");
    }
    assert_eq!(reserved.load(Ordering::SeqCst), 20);
}

#[tokio::test]
async fn a_nested_dispatch_of_the_callers_own_sequence_is_an_error_not_a_hang() {
    let (domain, reserved) = shop(1);
    let outcome = tokio::time::timeout(
        DEADLINE,
        domain.dispatch(Checkout {
            basket: "same".into(),
            reserve_in: "same".into(),
        }),
    )
    .await
    .expect("the dispatch returns");
    let error = outcome.expect_err("Reserve shares the routing key `same` with its caller");
    let chain = ordo::contract::error::error_chain(&error);
    assert!(chain.contains("would wait for the handler"), "{chain}");
    assert_eq!(reserved.load(Ordering::SeqCst), 0);
    // The bus is not wedged.
    tokio::time::timeout(
        DEADLINE,
        domain.dispatch(Reserve {
            warehouse: "same".into(),
        }),
    )
    .await
    .expect("the bus still works")
    .unwrap();
}

async fn futures_join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await);
    }
    out
}

struct SettlingProjector {
    domain: Arc<OnceLock<Domain>>,
    outcomes: Arc<Mutex<Vec<Result<(), SettleError>>>>,
}

#[event_handler(part_of = Cart)]
impl SettlingProjector {
    #[handle]
    async fn on_added(&self, _event: &ItemAdded) -> anyhow::Result<()> {
        let domain = self.domain.get().expect("the domain is set");
        let outcome = tokio::time::timeout(DEADLINE, domain.settle())
            .await
            .expect("settle() inside a handler returns at once");
        self.outcomes.lock().unwrap().push(outcome);
        Ok(())
    }
}

#[tokio::test]
async fn settle_from_a_handler_is_an_error_and_later_settles_still_return() {
    let cell = Arc::new(OnceLock::new());
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let domain = Domain::builder()
        .event_handler(SettlingProjector {
            domain: Arc::clone(&cell),
            outcomes: Arc::clone(&outcomes),
        })
        .init()
        .unwrap();
    cell.set(domain.clone()).unwrap();
    let mut uow = domain.unit_of_work();
    uow.raise(ItemAdded {
        cart_id: "cart-1".into(),
        item_no: 1,
    })
    .unwrap();
    uow.commit().await.unwrap();
    settle(&domain).await;
    settle(&domain).await;
    assert_eq!(
        *outcomes.lock().unwrap(),
        [Err(SettleError::InsideHandler {
            handler: "SettlingProjector"
        })]
    );
}

// ------------------------------------------------ 8. a retry backoff holds no slot

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Cart)]
struct Priced {
    cart_id: String,
}

/// Fails every `bad-*` cart; records every attempt and success in order.
struct PricingProjector {
    log: Log,
}

#[event_handler(part_of = Cart, sequential_by = "cart_id")]
impl PricingProjector {
    #[handle]
    async fn on_priced(&self, event: &Priced) -> anyhow::Result<()> {
        self.log.lock().unwrap().push(event.cart_id.clone());
        if event.cart_id.starts_with("bad") {
            anyhow::bail!("cannot price {}", event.cart_id);
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_key_is_not_kept_waiting_by_other_keys_retry_backoffs() {
    let log = Log::default();
    let domain = Domain::builder()
        .config(config(
            "[server.partitioning]\nmax_concurrency = 2\nmax_retries = 2\n\
             retry_backoff_initial_ms = 300\nretry_backoff_max_ms = 300",
        ))
        .event_handler(PricingProjector { log: log.clone() })
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    for cart in ["bad-1", "bad-2", "bad-3", "bad-4", "good"] {
        uow.raise(Priced { cart_id: cart.into() }).unwrap();
    }
    uow.commit().await.unwrap();
    settle(&domain).await;
    let log = entries(&log);
    let good = log
        .iter()
        .position(|cart| cart == "good")
        .expect("the good cart ran");
    let mut attempts: BTreeMap<&str, usize> = BTreeMap::new();
    for cart in &log[..good] {
        *attempts.entry(cart.as_str()).or_default() += 1;
    }
    // Each bad cart makes 3 attempts, 300 ms apart. Were the backoffs holding
    // both slots, the good cart would wait until two bad carts had finished.
    assert!(
        attempts.values().all(|&n| n < 3),
        "the good cart waited for retries to finish: {log:?}"
    );
}

// ------------------------------------------------ 13. events of unregistered aggregates

#[tokio::test]
async fn once_aggregates_are_registered_an_event_of_another_one_is_refused() {
    let domain = Domain::builder().aggregate::<sales::Order>().init().unwrap();
    let mut uow = domain.unit_of_work();
    let error = uow
        .raise(invoicing::Placed {
            id: "invoice-1".into(),
        })
        .expect_err("the invoice aggregate is not registered");
    assert!(
        matches!(
            error,
            CommitError::UnknownCategory {
                category: "invoice",
                ..
            }
        ),
        "{error}"
    );
    uow.raise(sales::Placed { id: "sale-1".into() }).unwrap();
    uow.commit().await.unwrap();
}
