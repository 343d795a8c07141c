//! Ordo under exactly the least-privilege ACL rules of docs/OPERATIONS.md
//! ([`AclRole::rules`]), on a real Redis: once an administrator loaded Ordo's
//! functions (`ordo setup`), a worker (partitioned and plain handlers, a
//! process manager, heartbeat, waker, reaper, discovery, the health check),
//! a publisher (a unit of work, and the PostgreSQL outbox relay) and the
//! `ordo` tool each log in as their own ACL user with a
//! `redis://user:password@host/0` URL and do their work; Redis's `ACL LOG`
//! shows no command or key was refused on the way. The read-only user sees
//! everything and cannot `skip`. And every role, made from the documented
//! lines, tries what it must not do: each is refused, and nothing changes.

use crate::common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::bail;
use common::{Output, WAIT, ordo_in};
use fred::interfaces::{ClientLike, KeysInterface, SetsInterface, StreamsInterface};
use fred::types::Value;
use ordo::prelude::*;
use ordo_postgres::{PgOutbox, PgRelay, UnitOfWorkExt};
use ordo_redis::internals::names;
use ordo_redis::{AclRole, AclScope, PartitionKeys, RedisBroker, RedisProcessStore};
use ordo_testkit::{AclDenial, ConditionError, Postgres, Redis, eventually};

/// Every ACL user's password.
const PASSWORD: &str = "acl-Pa55word";
/// The partitioned category.
const ORDER: &str = "order";
/// The plain (non-partitioned) category.
const PAYMENT: &str = "payment";
/// The partitioned handler's group.
const PROJECTOR: &str = "AclProjector";
/// The plain handler's group.
const LEDGER: &str = "AclLedger";
/// The process manager's group.
const TALLY: &str = "AclTally";

/// The aggregate of the partitioned category `order`.
#[derive(Debug, Aggregate)]
pub struct Order;

/// An order of a client; handled in order per client.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
pub struct OrderPlaced {
    /// The order's id.
    #[aggregate_id]
    pub order_id: String,
    /// The client: the partition key.
    pub client_id: String,
}

/// The aggregate of the plain category `payment`.
#[derive(Debug, Aggregate)]
pub struct Payment;

/// A payment, handled by a plain consumer group.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Payment)]
pub struct PaymentMade {
    /// The payment's id.
    #[aggregate_id]
    pub payment_id: String,
}

/// The orders whose handling fails until cured.
#[derive(Clone, Default)]
struct Poison(Arc<Mutex<HashSet<String>>>);

impl Poison {
    fn of(ids: &[&str]) -> Self {
        Self(Arc::new(Mutex::new(
            ids.iter().map(|id| (*id).to_owned()).collect(),
        )))
    }

    fn contains(&self, id: &str) -> bool {
        self.0.lock().unwrap().contains(id)
    }

    fn cure(&self, ids: &[&str]) {
        let mut poison = self.0.lock().unwrap();
        for id in ids {
            poison.remove(*id);
        }
    }
}

/// Records the orders it handled per client, in order; fails on poison.
#[derive(Clone)]
struct AclProjector {
    handled: Arc<Mutex<Vec<(String, String)>>>,
    poison: Poison,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl AclProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        if self.poison.contains(&event.order_id) {
            bail!("poison order {} cannot be projected", event.order_id);
        }
        self.handled
            .lock()
            .unwrap()
            .push((event.client_id.clone(), event.order_id.clone()));
        Ok(())
    }
}

/// A plain handler: fails on poison payments while `poisoned`, so they are
/// dead-lettered to `payment:dlq`.
#[derive(Clone)]
struct AclLedger {
    handled: Arc<Mutex<Vec<String>>>,
    poison: Poison,
    poisoned: Arc<AtomicBool>,
}

#[event_handler(part_of = Payment)]
impl AclLedger {
    #[handle]
    async fn on_made(&self, event: &PaymentMade, _ctx: &HandlerContext) -> anyhow::Result<()> {
        if self.poisoned.load(Ordering::SeqCst) && self.poison.contains(&event.payment_id) {
            bail!("payment {} cannot be booked", event.payment_id);
        }
        self.handled.lock().unwrap().push(event.payment_id.clone());
        Ok(())
    }
}

impl AclLedger {
    /// The payments booked, sorted (a plain group has no order).
    fn booked(&self) -> Vec<String> {
        let mut booked = self.handled.lock().unwrap().clone();
        booked.sort();
        booked
    }
}

/// A process manager per client: the orders it saw, saved in Redis; pays
/// carol's order and places hank's.
#[derive(Debug, Default, Serialize, Deserialize)]
struct AclTally {
    orders: Vec<String>,
}

#[process_manager]
impl AclTally {
    #[handle(start, correlate = "client_id")]
    async fn on_placed(&mut self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.orders.push(event.order_id.clone());
        // The worker publishes too: carol's order is paid, and two orders of
        // a new client follow (a new partition, then an entry of it).
        if event.order_id == "c-1" {
            ctx.raise(PaymentMade {
                payment_id: "p-5".to_owned(),
            })?;
            ctx.raise(order_placed("h-1", "hank"))?;
            ctx.raise(order_placed("h-2", "hank"))?;
        }
        Ok(())
    }
}

/// Fast timings; drained partitions are reaped after half a second.
const CONFIG: &str = "\
[server.partitioning]
lease_ttl_ms = 3000
heartbeat_interval_seconds = 0.5
poll_interval_seconds = 0.05
discovery_interval_seconds = 0.1
reap_idle_ms = 500
max_retries = 1
retry_backoff_initial_ms = 10
retry_backoff_max_ms = 20
";

/// What every user of a test works on: `categories` and `groups`, in
/// database 0 (the URLs name it, so `SELECT` is sent).
fn scope(categories: &[&str], groups: &[&str]) -> AclScope {
    AclScope::new().categories(categories).groups(groups).database(0)
}

/// The URL of ACL user `ordo-<role>` on `redis`, database 0 (so `SELECT`
/// is sent).
fn user_url(redis: &Redis, role: AclRole) -> String {
    let address = redis.url().trim_start_matches("redis://").to_owned();
    format!("redis://ordo-{}:{PASSWORD}@{address}/0", role.name())
}

/// Fails unless `ACL LOG` is empty: nobody was refused anything.
fn assert_nothing_refused(redis: &Redis, after: &str) -> anyhow::Result<()> {
    let refused = redis.acl_log()?;
    if !refused.is_empty() {
        bail!("after {after}, Redis refused (ACL LOG, newest first): {refused:#?}");
    }
    Ok(())
}

/// Waits for `condition`; fails at once when Redis refuses anything (its
/// `ACL LOG` is not empty), and says what it refused.
async fn until<F, Fut>(redis: &Redis, what: &str, mut condition: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, ConditionError>>,
{
    let outcome = eventually(WAIT, what, || {
        let refused = redis.acl_log();
        let met = condition();
        async move {
            let refused = refused?;
            if !refused.is_empty() {
                return Err(format!("Redis refused (ACL LOG, newest first): {refused:#?}").into());
            }
            met.await
        }
    })
    .await;
    if let Err(error) = outcome {
        bail!(
            "{error}; Redis refused (ACL LOG, newest first): {:#?}",
            redis.acl_log()?
        );
    }
    Ok(())
}

/// The domain of the worker or the publisher: both register everything
/// (the publisher needs the handlers' partition keys).
fn domain(
    broker: RedisBroker,
    config: Config,
    projector: AclProjector,
    ledger: AclLedger,
) -> anyhow::Result<Domain> {
    Ok(Domain::builder()
        .aggregate::<Order>()
        .aggregate::<Payment>()
        .event_handler(projector)
        .event_handler(ledger)
        .process_manager::<AclTally>()
        .broker(broker)
        .config(config)
        .init()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_publisher_and_operator_do_their_work_under_the_documented_acl_rules() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    for role in AclRole::ALL {
        redis.create_user_with_rules(
            &format!("ordo-{}", role.name()),
            PASSWORD,
            &role.rules(&scope(&[ORDER, PAYMENT], &[PROJECTOR, LEDGER, TALLY])),
        )?;
    }
    // An administrator loads Ordo's functions (the roles may not).
    let dir = tempfile::tempdir()?;
    setup(&redis, &dir).await?;
    // The test's own eyes: the default user, with every permission.
    let admin = RedisBroker::builder(redis.url()).build().await?;
    let config = Config::from_toml_str(CONFIG)?;
    let projector = AclProjector {
        handled: Arc::default(),
        poison: Poison::of(&["b-1", "d-1", "e-1", "f-1", "f-2"]),
    };
    let ledger = AclLedger {
        handled: Arc::default(),
        poison: Poison::of(&["p-2", "p-4"]),
        poisoned: Arc::new(AtomicBool::new(true)),
    };
    let handled_of = |client: &str| -> Vec<String> {
        projector
            .handled
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| c == client)
            .map(|(_, order)| order.clone())
            .collect()
    };

    // The publisher only commits. A plain consumer died holding p-0 (its
    // consumer group made by hand, as a worker would have): the worker
    // claims it.
    let publisher_broker = RedisBroker::builder(user_url(&redis, AclRole::Publisher))
        .config(config.clone())
        .build()
        .await?;
    let publisher = domain(
        publisher_broker,
        config.clone(),
        projector.clone(),
        ledger.clone(),
    )?;
    let publishing = publisher.start_publisher();
    let _: Value = admin.client().xgroup_create(PAYMENT, LEDGER, "0", true).await?;
    let mut uow = publisher.unit_of_work();
    uow.raise(PaymentMade {
        payment_id: "p-0".to_owned(),
    })?;
    uow.commit().await?;
    until(&redis, "p-0 published", || async {
        let length: u64 = admin.client().xlen(PAYMENT).await?;
        Ok(length == 1)
    })
    .await?;
    let _: Value = admin
        .client()
        .xreadgroup(LEDGER, "a-dead-instance", Some(1), None, false, PAYMENT, ">")
        .await?;

    // The worker runs every handler. The publisher goes on once the
    // worker's groups are registered, so a new stream gets them and a later
    // entry of it finds the category joined (its marker).
    // Batches of one: every read that finds an entry fills its batch, so
    // the next read is a transaction (`MULTI`/`EXEC`), which the role must
    // allow.
    let worker_broker = RedisBroker::builder(user_url(&redis, AclRole::Worker))
        .config(config.clone())
        .read_batch(1)
        .build()
        .await?;
    let worker = domain(worker_broker, config.clone(), projector.clone(), ledger.clone())?;
    let running = worker.start();
    until(&redis, "the worker's groups registered", || async {
        let orders: Vec<String> = admin.client().smembers(names::group_registry(ORDER)).await?;
        let payments: Vec<String> = admin.client().smembers(names::group_registry(PAYMENT)).await?;
        Ok(orders.len() == 2 && payments.len() == 1)
    })
    .await?;
    let mut uow = publisher.unit_of_work();
    for (order, client) in [
        ("a-1", "alice"),
        ("b-1", "bob"),
        ("d-1", "dave"),
        ("a-2", "alice"),
        ("e-1", "erin"),
        ("f-1", "frank"),
        ("b-2", "bob"),
        ("d-2", "dave"),
        ("e-2", "erin"),
        ("f-2", "frank"),
        ("c-1", "carol"),
        ("a-3", "alice"),
    ] {
        uow.raise(order_placed(order, client))?;
    }
    for payment in ["p-1", "p-2", "p-3", "p-4"] {
        uow.raise(PaymentMade {
            payment_id: payment.to_owned(),
        })?;
    }
    uow.commit().await?;

    // The PostgreSQL outbox's relay publishes as the publisher too.
    let relayed = through_outbox(&publisher, |uow| {
        uow.raise(order_placed("g-1", "grace"))?;
        uow.raise(order_placed("g-2", "grace"))?;
        Ok(())
    })
    .await?;
    assert_eq!(relayed, 2);

    until(
        &redis,
        "alice, carol, grace and hank handled, four clients halted",
        || async {
            Ok(handled_of("alice") == ["a-1", "a-2", "a-3"]
                && handled_of("carol") == ["c-1"]
                && handled_of("hank") == ["h-1", "h-2"]
                && handled_of("grace") == ["g-1", "g-2"]
                && admin.admin().halted().await?.len() == 4)
        },
    )
    .await?;
    until(
        &redis,
        "p-0, p-1, p-3 and p-5 booked, p-2 and p-4 dead-lettered",
        || async {
            let dead: u64 = admin.client().xlen("payment:dlq").await?;
            Ok(ledger.booked() == ["p-0", "p-1", "p-3", "p-5"] && dead == 2)
        },
    )
    .await?;
    // The process manager saved every client's tally.
    until(&redis, "alice's tally saved", || async {
        let state: Option<String> = admin.client().get(RedisProcessStore::key(TALLY, "alice")).await?;
        Ok(state.as_deref() == Some(r#"{"orders":["a-1","a-2","a-3"]}"#))
    })
    .await?;
    // The reaper retired alice's drained partition.
    until(&redis, "alice's drained partition reaped", || async {
        Ok(!indexed(&admin, "alice").await?)
    })
    .await?;
    // The worker's health check (what `RunningDomain::health()` reports)
    // reads under the worker's rule too.
    let health = running.health().await;
    assert!(
        health
            .subscriptions
            .iter()
            .all(|s| s.state != ordo_core::contract::health::HealthState::Unknown),
        "{health:?}"
    );
    assert_nothing_refused(&redis, "the worker and the publishers ran")?;

    // The read-only user sees everything.
    let reader_url = user_url(&redis, AclRole::Reader);
    let reader = |args: Vec<&str>| ordo_as(&dir, &reader_url, args);
    let status = reader(vec!["status", "--json"]).await?.expect_code(0)?.json()?;
    let order_status = status["categories"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["category"] == ORDER)
        .expect("the order category")
        .clone();
    let projector_status = order_status["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == PROJECTOR)
        .expect("the projector's group")
        .clone();
    assert_eq!(projector_status["halted"], 4, "{status:#}");
    assert_eq!(projector_status["instances"][0]["live"], true, "{status:#}");
    reader(vec!["status", "--check"]).await?.expect_code(4)?;
    let partitions = reader(vec![
        "partitions",
        ORDER,
        "--group",
        PROJECTOR,
        "--halted",
        "--json",
    ])
    .await?
    .expect_code(0)?
    .json()?;
    let halted: Vec<&str> = partitions
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["halt"]["key"].as_str().unwrap())
        .collect();
    assert_eq!(halted, ["bob", "dave", "erin", "frank"], "{partitions:#}");
    let inspected = reader(vec!["inspect", ORDER, "bob", "--group", PROJECTOR, "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(inspected["halted"], true, "{inspected:#}");
    assert_eq!(inspected["head"]["envelope"]["payload"]["order_id"], "b-1");
    let bob_head = inspected["halt"]["head"].as_str().unwrap().to_owned();
    let watched = reader(vec!["watch", "--json", "--count", "1", "--interval", "0.05"])
        .await?
        .expect_code(0)?;
    assert!(watched.stdout.contains("\"halted\""), "{}", watched.stdout);
    let plain = reader(vec!["dlq", "list", PAYMENT, "--plain", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(plain.as_array().unwrap().len(), 2, "{plain:#}");
    let p4 = plain
        .as_array()
        .unwrap()
        .iter()
        .find(|letter| letter["message"]["envelope"]["payload"]["payment_id"] == "p-4")
        .expect("p-4 is a dead letter")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    reader(vec!["dlq", "inspect", PAYMENT, "--plain", "--id", &p4])
        .await?
        .expect_code(0)?;
    assert_nothing_refused(&redis, "the read-only views")?;

    // ...and cannot skip: a clear error, nothing changed.
    let skip_bob = vec![
        "skip",
        ORDER,
        "bob",
        "--group",
        PROJECTOR,
        "--yes",
        "--expect-head",
        &bob_head,
    ];
    let refused = reader(skip_bob.clone()).await?.expect_code(1)?;
    assert!(
        refused
            .stderr
            .contains("NOPERM this user has no permissions to run the 'fcall' command")
            && refused
                .stderr
                .contains("hint: the Redis ACL user of this URL lacks a permission"),
        "{}",
        refused.stderr
    );
    let halts = admin.admin().halted().await?;
    let bob = halts
        .iter()
        .find(|h| h.key == "bob")
        .expect("bob is still halted");
    assert_eq!(bob.head.as_str(), bob_head, "bob's head is unchanged");
    assert_eq!(halts.len(), 4, "{halts:?}");
    let denials = redis.acl_log()?;
    assert!(
        !denials.is_empty() && denials.iter().all(|d: &AclDenial| d.username == "ordo-reader"),
        "{denials:#?}"
    );
    redis.reset_acl_log()?;

    // The operator acts on every halt: skips bob's head, retries dave's,
    // dead-letters erin's and replays it once erin's partition is reaped (a
    // new stream), dead-letters frank's and replays it while frank is
    // halted on f-2 (an existing stream), then purges f-2.
    let operator_url = user_url(&redis, AclRole::Operator);
    let operator = |args: Vec<&str>| ordo_as(&dir, &operator_url, args);
    projector.poison.cure(&["b-1", "d-1", "e-1", "f-1"]);
    let mut skip_bob = skip_bob;
    skip_bob.push("--json");
    let skipped = operator(skip_bob).await?.expect_code(0)?.json()?;
    assert_eq!(skipped["action"], "skip", "{skipped:#}");
    operator(vec!["retry", ORDER, "dave", "--group", PROJECTOR, "--yes"])
        .await?
        .expect_code(0)?;
    for client in ["erin", "frank"] {
        let moved = operator(vec!["dlq", ORDER, client, "--group", PROJECTOR, "--yes"])
            .await?
            .expect_code(0)?;
        assert!(moved.stdout.contains("moved entry"), "{}", moved.stdout);
    }
    until(
        &redis,
        "bob and dave resumed, erin drained and reaped, frank halted on f-2",
        || async {
            let frank = admin.admin().halted().await?;
            Ok(handled_of("bob") == ["b-2"]
                && handled_of("dave") == ["d-1", "d-2"]
                && handled_of("erin") == ["e-2"]
                && !indexed(&admin, "erin").await?
                && frank.len() == 1
                && frank[0].key == "frank"
                && frank[0].head != bob_head)
        },
    )
    .await?;
    for client in ["erin", "frank"] {
        let replayed = operator(vec!["dlq", "replay", ORDER, client, "--yes", "--json"])
            .await?
            .expect_code(0)?
            .json()?;
        assert_eq!(replayed["replayed"].as_array().unwrap().len(), 1, "{replayed:#}");
    }
    operator(vec!["dlq", ORDER, "frank", "--group", PROJECTOR, "--yes"])
        .await?
        .expect_code(0)?;
    until(&redis, "erin's and frank's replayed orders handled", || async {
        Ok(handled_of("erin") == ["e-2", "e-1"] && handled_of("frank") == ["f-1"])
    })
    .await?;
    let purged = operator(vec!["dlq", "purge", ORDER, "frank", "--yes", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(purged["purged"].as_array().unwrap().len(), 1, "{purged:#}");
    operator(vec!["dlq", "purge", PAYMENT, "--plain", "--id", &p4, "--yes"])
        .await?
        .expect_code(0)?;
    ledger.poisoned.store(false, Ordering::SeqCst);
    operator(vec!["dlq", "replay", PAYMENT, "--plain", "--yes"])
        .await?
        .expect_code(0)?;
    until(&redis, "p-2 booked", || async {
        Ok(ledger.booked() == ["p-0", "p-1", "p-2", "p-3", "p-5"])
    })
    .await?;
    operator(vec!["status", "--check"]).await?.expect_code(0)?;
    assert_eq!(handled_of("alice"), ["a-1", "a-2", "a-3"]);
    assert_eq!(handled_of("carol"), ["c-1"]);
    let left = reader(vec!["dlq", "list", ORDER, "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(left, serde_json::json!([]), "erin's and f-1 replayed, f-2 purged");
    assert_nothing_refused(&redis, "the operator's commands")?;

    publishing.shutdown().await?;
    running.shutdown().await?;
    assert_nothing_refused(&redis, "the shutdown")?;
    Ok(())
}

/// `ordo setup` as the default user (an administrator): Ordo's function
/// library is loaded.
async fn setup(redis: &Redis, dir: &tempfile::TempDir) -> anyhow::Result<()> {
    let report = ordo_as(dir, &redis.url(), vec!["setup", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(report["library"], ordo_redis::setup::library_name(), "{report:#}");
    Ok(())
}

/// Commits what `raise` raises to a PostgreSQL outbox (a fresh server)
/// and publishes it with `publisher`'s outbox relay; returns how many
/// events the relay published.
async fn through_outbox(
    publisher: &Domain,
    raise: impl FnOnce(&mut ordo_core::runtime::uow::UnitOfWork) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let pg = Postgres::start()?;
    let pool = ordo_postgres::sqlx::PgPool::connect(pg.url()).await?;
    let outbox = PgOutbox::builder(pool.clone())
        .schema(format!("acl_{}", std::process::id()))
        .build()?;
    outbox.migrate().await?;
    let mut tx = pool.begin().await?;
    let mut uow = publisher.unit_of_work();
    raise(&mut uow)?;
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;
    let report = PgRelay::for_domain(outbox, publisher).publish_pending().await?;
    Ok(report.published as u64)
}

/// Whether `client`'s partition of the order category is in the index.
async fn indexed(admin: &RedisBroker, client: &str) -> Result<bool, ConditionError> {
    let partition = PartitionKeys::new(ORDER, client, "backfill");
    let members: Vec<String> = admin.client().smembers(partition.index()).await?;
    Ok(members.iter().any(|member| member == client))
}

fn order_placed(order: &str, client: &str) -> OrderPlaced {
    OrderPlaced {
        order_id: order.to_owned(),
        client_id: client.to_owned(),
    }
}

/// Runs `ordo --redis-url url args...` in `dir` (owning its arguments, so
/// a closure can return it).
fn ordo_as(
    dir: &tempfile::TempDir,
    url: &str,
    args: Vec<&str>,
) -> impl std::future::Future<Output = anyhow::Result<Output>> + use<> {
    let dir = dir.path().to_owned();
    let mut all = vec!["--redis-url".to_owned(), url.to_owned()];
    all.extend(args.into_iter().map(str::to_owned));
    async move {
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        ordo_in(&dir, &all, &[]).await
    }
}

/// The category with hashed partitions.
const SHIPMENT: &str = "shipment";
/// The hashed category's handler's group.
const DISPATCHER: &str = "AclDispatcher";

/// The aggregate of the hashed category `shipment`.
#[derive(Debug, Aggregate)]
pub struct Shipment;

/// A shipment booked with a carrier; handled in order per carrier.
#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Shipment)]
pub struct ShipmentBooked {
    /// The shipment's id.
    #[aggregate_id]
    pub shipment_id: String,
    /// The carrier: the partition key.
    pub carrier: String,
}

/// Records the shipments it handled per carrier; fails on poison.
#[derive(Clone)]
struct AclDispatcher {
    handled: Arc<Mutex<Vec<(String, String)>>>,
    poison: Poison,
}

#[event_handler(part_of = Shipment, sequential_by = "carrier")]
impl AclDispatcher {
    #[handle]
    async fn on_booked(&self, event: &ShipmentBooked, _ctx: &HandlerContext) -> anyhow::Result<()> {
        if self.poison.contains(&event.shipment_id) {
            bail!("poison shipment {} cannot be dispatched", event.shipment_id);
        }
        self.handled
            .lock()
            .unwrap()
            .push((event.carrier.clone(), event.shipment_id.clone()));
        Ok(())
    }
}

/// Hashed partitions under the same least-privilege rules: the publisher
/// checks and records the category's partitioning and publishes; the
/// worker reads ahead, reads skipped entries back, parks a poison key and
/// runs its held messages once resolved; the reader lists the parked key
/// and the operator inspects and retries it, then repartitions the drained
/// category; nobody is refused anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hashed_partitions_work_under_the_documented_acl_rules() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    for role in AclRole::ALL {
        redis.create_user_with_rules(
            &format!("ordo-{}", role.name()),
            PASSWORD,
            &role.rules(&scope(&[SHIPMENT], &[DISPATCHER])),
        )?;
    }
    let text = format!("{CONFIG}[categories.{SHIPMENT}]\npartitions = 4\n");
    let config = Config::from_toml_str(&text)?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("domain.toml"), &text)?;
    let dispatcher = AclDispatcher {
        handled: Arc::default(),
        poison: Poison::of(&["s-2"]),
    };
    let handled_of = |carrier: &str| -> Vec<String> {
        dispatcher
            .handled
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| c == carrier)
            .map(|(_, shipment)| shipment.clone())
            .collect()
    };
    let domain = |role: AclRole| {
        let (config, dispatcher, url) = (config.clone(), dispatcher.clone(), user_url(&redis, role));
        async move {
            let broker = RedisBroker::builder(url).config(config.clone()).build().await?;
            anyhow::Ok(
                Domain::builder()
                    .aggregate::<Shipment>()
                    .event_handler(dispatcher)
                    .broker(broker)
                    .config(config)
                    .init()?,
            )
        }
    };
    // Before an administrator loaded Ordo's functions, no role can start,
    // and the error says what to run.
    let refused = domain(AclRole::Worker)
        .await
        .expect_err("the library is not loaded");
    assert!(
        format!("{refused:#}").contains(&format!(
            "Ordo's function library `{}` is not loaded on this Redis, and this user may not load it: run `ordo setup`",
            ordo_redis::setup::library_name()
        )),
        "{refused:#}"
    );
    let denials = redis.acl_log()?;
    assert!(
        !denials.is_empty()
            && denials
                .iter()
                .all(|d| d.username == "ordo-worker" && d.object == "function|load"),
        "{denials:#?}"
    );
    redis.reset_acl_log()?;
    setup(&redis, &dir).await?;
    let publisher = domain(AclRole::Publisher).await?;
    let publishing = publisher.start_publisher();
    let mut uow = publisher.unit_of_work();
    // ups gets more than a key's queue holds, so the reader skips past it.
    for n in 0..40 {
        let carrier = match n {
            1..=3 => "dhl",
            n if n % 2 == 0 => "ups",
            _ => "fedex",
        };
        uow.raise(ShipmentBooked {
            shipment_id: format!("s-{n}"),
            carrier: carrier.to_owned(),
        })?;
    }
    uow.commit().await?;
    // The outbox relay publishes as the publisher too: in a hashed
    // partition each key's position is a field of one hash.
    let relayed = through_outbox(&publisher, |uow| {
        for n in [40, 41] {
            uow.raise(ShipmentBooked {
                shipment_id: format!("s-{n}"),
                carrier: "ups".to_owned(),
            })?;
        }
        Ok(())
    })
    .await?;
    assert_eq!(relayed, 2);
    let worker = domain(AclRole::Worker).await?;
    let running = worker.start();
    until(&redis, "dhl parked, the other carriers handled", || async {
        Ok(handled_of("ups").len() == 21 && handled_of("fedex").len() == 18 && handled_of("dhl") == ["s-1"])
    })
    .await?;
    assert_nothing_refused(&redis, "publishing and handling")?;

    let reader = |args: Vec<&str>| ordo_as(&dir, &user_url(&redis, AclRole::Reader), args);
    let operator = |args: Vec<&str>| ordo_as(&dir, &user_url(&redis, AclRole::Operator), args);
    until(&redis, "dhl listed as parked", || async {
        let status = reader(vec!["status", "--json"])
            .await
            .map_err(|e| e.to_string())?;
        Ok(status.code == 0 && status.json().map_err(|e| e.to_string())?["halted"][0]["parked"] == true)
    })
    .await?;
    let inspected = operator(vec!["inspect", SHIPMENT, "dhl", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    let head = inspected["halt"]["head"]
        .as_str()
        .expect("a parked head")
        .to_owned();
    dispatcher.poison.cure(&["s-2"]);
    operator(vec!["retry", SHIPMENT, "dhl", "--yes", "--expect-head", &head])
        .await?
        .expect_code(0)?;
    until(&redis, "dhl's held shipments", || async {
        Ok(handled_of("dhl") == ["s-1", "s-2", "s-3"])
    })
    .await?;
    // The key's holding ends with the acknowledgement of its last held
    // message, just after its handler returned: stopped before that, the
    // worker would leave the key held until its next owner (and repartition
    // refused).
    let admin = fred::prelude::Builder::from_config(ordo_redis::client_config(&redis.url())?).build()?;
    admin.init().await?;
    until(&redis, "dhl's holding ended", || async {
        let holding: Vec<String> = admin
            .custom(custom("KEYS"), vec![format!("{{{SHIPMENT}:*}}:holding:*")])
            .await
            .map_err(|e| e.to_string())?;
        for set in holding {
            if admin.scard::<u64, _>(set).await.map_err(|e| e.to_string())? > 0 {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await?;
    running.shutdown().await?;
    operator(vec!["repartition", SHIPMENT, "--to", "8", "--yes"])
        .await?
        .expect_code(0)?;
    publishing.shutdown().await?;
    assert_nothing_refused(&redis, "the operator's commands")?;
    Ok(())
}

/// The category the forbidden actions' users work on.
const OWN: &str = "order";
/// Another tenant's category, in the same Redis.
const FOREIGN: &str = "invoice";
/// The worker's group.
const OWN_GROUP: &str = "Projector";
/// Another team's group (a process manager), in the same Redis.
const FOREIGN_GROUP: &str = "Auditor";

/// Something a role must not do: a command sent as its user.
struct Forbidden {
    role: AclRole,
    what: &'static str,
    command: &'static str,
    args: Vec<String>,
}

fn forbidden(role: AclRole, what: &'static str, command: &'static str, args: &[&str]) -> Forbidden {
    Forbidden {
        role,
        what,
        command,
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
    }
}

/// Every role's user, made from the documented `ACL SETUSER` lines
/// (docs/OPERATIONS.md) with `order` and `Projector` for the placeholders
/// and database 0 allowed, tries what it must not do; each is refused and
/// nothing changes. Another tenant (`invoice`, `Auditor`) shares the Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_role_is_refused_what_it_must_not_do() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let docs = include_str!("../../../../docs/OPERATIONS.md");
    let block = &docs[docs.find("<!-- acl:begin -->").unwrap()..docs.find("<!-- acl:end -->").unwrap()];
    for line in block.lines().filter_map(|line| line.strip_prefix("ACL SETUSER ")) {
        let filled = line.replace("<category>", OWN).replace("<group>", OWN_GROUP);
        let mut words = filled.split(' ');
        let user = words.next().unwrap();
        // `on >PASSWORD`: the testkit sets them.
        let rules: Vec<&str> = words.skip(2).chain(["+select|0"]).collect();
        redis.create_user_with_rules(user, PASSWORD, &rules)?;
    }
    let dir = tempfile::tempdir()?;
    setup(&redis, &dir).await?;
    let admin = RedisBroker::builder(redis.url()).build().await?;
    let library = ordo_redis::setup::library_name();

    // What the users could damage: a partition of theirs with its lease,
    // generation, halt and position; another tenant's halts, process
    // manager and instances.
    let alice = PartitionKeys::new(OWN, "alice", "backfill");
    let bob = PartitionKeys::new(OWN, "bob", "backfill");
    let foreign = PartitionKeys::new(FOREIGN, "k", "backfill");
    let own_halted = bob.halted();
    let foreign_halted = foreign.halted();
    let foreign_state = RedisProcessStore::key(FOREIGN_GROUP, "x");
    let foreign_lease = ordo_redis::internals::LeaseKeys::process(FOREIGN_GROUP, "x").lease;
    let foreign_instances = names::instances(FOREIGN_GROUP);
    let lease = alice.lease(OWN_GROUP);
    let setup_commands: Vec<Vec<String>> = vec![
        vec![
            "XADD".into(),
            alice.primary().into(),
            "*".into(),
            "type".into(),
            "T".into(),
        ],
        vec!["SET".into(), lease.generation.clone(), "5".into()],
        vec!["SET".into(), lease.lease.clone(), "w1:5".into()],
        vec![
            "SET".into(),
            alice.position(ordo_core::contract::key::Lane::Primary),
            "10".into(),
        ],
        vec!["HSET".into(), bob.halt(OWN_GROUP), "head".into(), "1-0".into()],
        vec![
            "XADD".into(),
            bob.log(OWN_GROUP),
            "*".into(),
            "action".into(),
            "retry".into(),
        ],
        vec!["SADD".into(), own_halted.clone(), bob.halt(OWN_GROUP)],
        vec!["SADD".into(), foreign_halted.clone(), foreign.halt(FOREIGN_GROUP)],
        vec!["SET".into(), foreign_state.clone(), "{}".into()],
        vec!["SET".into(), foreign_lease.clone(), "a:1".into()],
        vec![
            "ZADD".into(),
            foreign_instances.clone(),
            "9999999999999".into(),
            "a".into(),
        ],
    ];
    for command in &setup_commands {
        let _: Value = admin
            .client()
            .custom(custom(&command[0]), command[1..].to_vec())
            .await?;
    }
    let watched = [
        alice.primary().to_owned(),
        lease.generation.clone(),
        lease.lease.clone(),
        alice.position(ordo_core::contract::key::Lane::Primary),
        bob.halt(OWN_GROUP),
        bob.log(OWN_GROUP),
        bob.dlq(),
        own_halted.clone(),
        foreign_halted.clone(),
        foreign_state.clone(),
        foreign_lease.clone(),
        foreign_instances.clone(),
    ];
    let before = dump(&admin, &watched).await?;

    let lua_loop = "while true do end";
    let function_loop = "#!lua name=evil\nredis.register_function('evil', function() while true do end end)";
    // The operator's `skip` of bob's head, as the resolve function does it.
    let resolve = format!("{library}_resolve");
    let skip_bob = [
        resolve.as_str(),
        "7",
        &bob.halt(OWN_GROUP),
        &own_halted,
        &bob.log(OWN_GROUP),
        bob.primary(),
        bob.backfill(),
        &bob.dlq(),
        &bob.attempts(OWN_GROUP),
        &bob.halt(OWN_GROUP),
        OWN_GROUP,
        "skip",
        "",
        "",
    ];
    let mut actions = Vec::new();
    for role in AclRole::ALL {
        actions.extend([
            forbidden(
                role,
                "load a script (any Lua, a loop blocks the server)",
                "SCRIPT",
                &["LOAD", lua_loop],
            ),
            forbidden(role, "run a script", "EVAL", &["return 1", "0"]),
            forbidden(role, "load a function", "FUNCTION", &["LOAD", function_loop]),
            forbidden(role, "list every key", "KEYS", &["*"]),
            forbidden(role, "empty the database", "FLUSHDB", &[]),
            forbidden(role, "read the server's configuration", "CONFIG", &["GET", "*"]),
        ]);
    }
    let publisher = AclRole::Publisher;
    actions.extend([
        forbidden(
            publisher,
            "delete a partition's stream",
            "DEL",
            &[alice.primary()],
        ),
        forbidden(
            publisher,
            "trim a partition's stream",
            "XTRIM",
            &[alice.primary(), "MAXLEN", "0"],
        ),
        forbidden(
            publisher,
            "reset a fencing generation",
            "SET",
            &[&lease.generation, "0"],
        ),
        forbidden(publisher, "forge a lease", "SET", &[&lease.lease, "evil:999"]),
        forbidden(publisher, "delete a halt record", "DEL", &[&bob.halt(OWN_GROUP)]),
        forbidden(
            publisher,
            "unlist a halt",
            "SREM",
            &[&own_halted, &bob.halt(OWN_GROUP)],
        ),
        forbidden(
            publisher,
            "skip a halted head (the operator's function)",
            "FCALL",
            &skip_bob,
        ),
    ]);
    let worker = AclRole::Worker;
    actions.extend([
        forbidden(
            worker,
            "write another group's process-manager state",
            "SET",
            &[&foreign_state, "{\"forged\":1}"],
        ),
        forbidden(
            worker,
            "forge another group's process-manager lease",
            "SET",
            &[&foreign_lease, "evil:9"],
        ),
        forbidden(
            worker,
            "announce itself in another group's instance set",
            "ZADD",
            &[&foreign_instances, "1", "evil"],
        ),
        forbidden(
            worker,
            "unlist another category's halt",
            "SREM",
            &[&foreign_halted, &foreign.halt(FOREIGN_GROUP)],
        ),
        forbidden(
            worker,
            "delete the operator action log",
            "DEL",
            &[&bob.log(OWN_GROUP)],
        ),
        forbidden(
            worker,
            "delete a halt record (only an operator resolves a halt)",
            "DEL",
            &[&bob.halt(OWN_GROUP)],
        ),
        forbidden(
            worker,
            "forge a dead letter of a partition",
            "XADD",
            &[&bob.dlq(), "*", "source_id", "1-0"],
        ),
        forbidden(
            worker,
            "delete a position (an outbox relay would publish again)",
            "DEL",
            &[&alice.position(ordo_core::contract::key::Lane::Primary)],
        ),
    ]);
    let operator = AclRole::Operator;
    actions.extend([
        forbidden(operator, "delete a partition's stream", "DEL", &[alice.primary()]),
        forbidden(operator, "forge a lease", "SET", &[&lease.lease, "evil:999"]),
        forbidden(
            operator,
            "reset a fencing generation",
            "SET",
            &[&lease.generation, "0"],
        ),
        forbidden(
            operator,
            "write a process manager's state",
            "SET",
            &[&foreign_state, "{}"],
        ),
    ]);
    let reader = AclRole::Reader;
    actions.extend([
        forbidden(
            reader,
            "release a lease (a function)",
            "FCALL",
            &[&format!("{library}_release"), "1", &lease.lease, "w1:5"],
        ),
        forbidden(
            reader,
            "skip a halted head (the operator's function)",
            "FCALL",
            &skip_bob,
        ),
    ]);

    // Last: a database selected would take the actions after it elsewhere.
    for role in AclRole::ALL {
        actions.push(forbidden(role, "select another database", "SELECT", &["1"]));
    }
    let mut clients = HashMap::new();
    for role in AclRole::ALL {
        let client = fred::prelude::Builder::from_config(ordo_redis::client_config(&user_url(&redis, role))?)
            .build()?;
        client.init().await?;
        clients.insert(role, client);
    }
    let mut allowed = Vec::new();
    for action in &actions {
        let reply: Result<Value, _> = clients[&action.role]
            .custom(custom(action.command), action.args.clone())
            .await;
        let refused = reply.as_ref().is_err_and(|error| {
            let text = error.details();
            text.starts_with("NOPERM") || text.contains("The user executing the script can't")
        });
        if !refused {
            allowed.push(format!(
                "{:?} could {} ({}): {reply:?}",
                action.role, action.what, action.command
            ));
        }
    }
    assert!(allowed.is_empty(), "not refused:\n{}", allowed.join("\n"));
    assert_eq!(dump(&admin, &watched).await?, before, "nothing changed");
    Ok(())
}

/// A command fred sends as it is (routed by its first key).
fn custom(name: &str) -> fred::types::CustomCommand {
    fred::types::CustomCommand::new(name.to_owned(), fred::types::ClusterHash::FirstKey, false)
}

/// `DUMP` of each of `keys` (None: no such key), to tell that nothing changed.
async fn dump(admin: &RedisBroker, keys: &[String]) -> anyhow::Result<Vec<Value>> {
    let mut dumps = Vec::with_capacity(keys.len());
    for key in keys {
        dumps.push(admin.client().custom(custom("DUMP"), vec![key.clone()]).await?);
    }
    Ok(dumps)
}

/// The aggregate of the commands test.
#[derive(Debug, Aggregate)]
pub struct Ticket;

/// A command sent across instances under the ACL rules.
#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Ticket)]
pub struct BookSeat {
    /// The routing key.
    #[routing_key]
    pub show_id: String,
    /// The seat.
    pub seat: u32,
}

/// Books seats, and answers which.
#[derive(Debug)]
pub struct AclBooking;

#[command_handler(part_of = Ticket)]
impl AclBooking {
    #[handle]
    async fn book(&self, command: &BookSeat) -> anyhow::Result<String> {
        Ok(format!("{} seat {}", command.show_id, command.seat))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_are_sent_and_run_under_the_documented_acl_rules() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let scope = scope(&["ticket", "ticket.commands"], &["commands"]);
    for role in [AclRole::Worker, AclRole::Publisher] {
        redis.create_user_with_rules(&format!("ordo-{}", role.name()), PASSWORD, &role.rules(&scope))?;
    }
    let dir = tempfile::tempdir()?;
    setup(&redis, &dir).await?;
    let config = Config::from_toml_str(CONFIG)?;
    // The worker runs the handler; the publisher only sends.
    let worker = Domain::builder()
        .aggregate::<Ticket>()
        .command_handler(AclBooking)
        .broker(
            RedisBroker::builder(user_url(&redis, AclRole::Worker))
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config.clone())
        .init()?;
    let running = worker.start();
    let sender = Domain::builder()
        .aggregate::<Ticket>()
        .command_handler_type::<AclBooking>()
        .broker(
            RedisBroker::builder(user_url(&redis, AclRole::Publisher))
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config)
        .init()?;
    for seat in 1..=3 {
        let booked: String = sender
            .send(BookSeat {
                show_id: "s-1".into(),
                seat,
            })
            .await?;
        assert_eq!(booked, format!("s-1 seat {seat}"));
        assert_nothing_refused(&redis, &format!("sending seat {seat}"))?;
    }
    // A resend of the caller's id reads the outcome record.
    let options = SendOptions::new().id("seat-9");
    for _ in 0..2 {
        let booked: String = sender
            .send_with(
                BookSeat {
                    show_id: "s-1".into(),
                    seat: 9,
                },
                options.clone(),
            )
            .await?;
        assert_eq!(booked, "s-1 seat 9");
    }
    // The worker sends to itself too (in place, or through Redis).
    let own: String = worker
        .send(BookSeat {
            show_id: "s-2".into(),
            seat: 1,
        })
        .await?;
    assert_eq!(own, "s-2 seat 1");
    assert_nothing_refused(&redis, "the commands")?;
    running.shutdown().await?;
    Ok(())
}
