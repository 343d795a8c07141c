//! The operator's tools on messages from the PostgreSQL outbox: a dead
//! letter replayed into fenced handlers, and a repartition after a relay
//! was killed between publishing and marking.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::bail;
use common::{CATEGORY, CONFIG, Fixture, OrderPlaced, WAIT, ordo_on};
use fred::interfaces::{ListInterface, StreamsInterface};
use ordo::prelude::*;
use ordo_core::contract::broker::{Broker, POSITION_METADATA, POSITION_SCOPE_METADATA, Publication};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_postgres::sqlx::{self, AssertSqlSafe, PgPool};
use ordo_postgres::{Fence, PgOutbox, PgRelay, UnitOfWorkExt, fenced_in};
use ordo_redis::{FencedWrite, PartitionKeys, RedisBroker, RedisFence, Routing};
use ordo_testkit::{Postgres, Redis, eventually};
use tokio_util::sync::CancellationToken;

#[derive(Aggregate)]
struct Account;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Deposited {
    account: String,
    n: u64,
    /// The projector fails on it while poison is on.
    poison: bool,
}

/// Writes each deposit's effect in PostgreSQL, fenced by position, and in
/// Redis, fenced by its lease; fails on poison deposits while `poisoned`.
#[derive(Clone)]
struct Projector {
    pool: PgPool,
    schema: String,
    redis: fred::clients::Pool,
    poisoned: Arc<AtomicBool>,
}

#[event_handler(part_of = Account, sequential_by = "account")]
impl Projector {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        if event.poison && self.poisoned.load(Ordering::SeqCst) {
            bail!("poison deposit {} cannot be projected", event.n);
        }
        if apply(&self.pool, &self.schema, "Projector", event, ctx).await? == Fence::Apply {
            self.redis_effect(event, ctx).await?;
        }
        Ok(())
    }
}

impl Projector {
    /// The Redis half of the effect, under the lease.
    async fn redis_effect(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        let fence = RedisFence::from_context(ctx).ok_or_else(|| anyhow::anyhow!("no lease fence"))?;
        fence
            .commit(
                &self.redis,
                &FencedWrite::new().rpush("effects:Projector", event.n.to_string()),
            )
            .await?;
        Ok(())
    }
}

/// Handles every deposit, fenced by position (a second consumer group).
#[derive(Clone)]
struct Auditor {
    pool: PgPool,
    schema: String,
}

#[event_handler(part_of = Account, sequential_by = "account")]
impl Auditor {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        let _fence = apply(&self.pool, &self.schema, "Auditor", event, ctx).await?;
        Ok(())
    }
}

/// The effect of `event` for `consumer`, exactly once; what the fence said.
async fn apply(
    pool: &PgPool,
    schema: &str,
    consumer: &str,
    event: &Deposited,
    ctx: &HandlerContext,
) -> anyhow::Result<Fence> {
    let mut tx = pool.begin().await?;
    if fenced_in(schema, &mut tx, consumer, ctx).await? == Fence::AlreadyApplied {
        return Ok(Fence::AlreadyApplied);
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{schema}\".effects (consumer, account, n) VALUES ($1, $2, $3)"
    )))
    .bind(consumer)
    .bind(&event.account)
    .bind(i64::try_from(event.n)?)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Fence::Apply)
}

/// Each consumer's effects, as (n, how many times).
async fn effects(pool: &PgPool, schema: &str) -> anyhow::Result<BTreeMap<String, Vec<(i64, i64)>>> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT consumer, n, count(*) FROM \"{schema}\".effects GROUP BY consumer, n ORDER BY consumer, n"
    )))
    .fetch_all(pool)
    .await?;
    let mut by_consumer: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for (consumer, n, count) in rows {
        by_consumer.entry(consumer).or_default().push((n, count));
    }
    Ok(by_consumer)
}

/// A poison message from the outbox halts a fenced handler; the operator
/// dead-letters it (the key goes on, the fence past the gap), cures the
/// handler and replays the letter: it is applied exactly once, by the
/// group that dead-lettered it only (the other group applied it already),
/// through the PostgreSQL fence and the Redis lease fence alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_dead_letter_is_applied_once_by_fenced_handlers() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start_local()?;
    let url = redis.url();
    let pool = PgPool::connect(pg.url()).await?;
    let schema = format!("replay_{}", std::process::id());
    let outbox = PgOutbox::builder(pool.clone()).schema(&schema).build()?;
    outbox.migrate().await?;
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE \"{schema}\".effects (consumer text, account text, n int8)"
    )))
    .execute(&pool)
    .await?;

    let config = Config::from_toml_str(CONFIG)?;
    let broker = RedisBroker::builder(&url).config(config.clone()).build().await?;
    let poisoned = Arc::new(AtomicBool::new(true));
    let projector = Projector {
        pool: pool.clone(),
        schema: schema.clone(),
        redis: broker.client().clone(),
        poisoned: poisoned.clone(),
    };
    let domain = Domain::builder()
        .aggregate::<Account>()
        .event_handler(projector.clone())
        .event_handler(Auditor {
            pool: pool.clone(),
            schema: schema.clone(),
        })
        .broker(broker.clone())
        .config(config)
        .init()?;
    let running = domain.start();
    let relay = PgRelay::for_domain(outbox.clone(), &domain).poll_interval(Duration::from_millis(100));
    let stop = CancellationToken::new();
    let relay_task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });

    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    for (n, poison) in [(1, false), (2, true), (3, false)] {
        uow.raise(Deposited {
            account: "k".to_owned(),
            n,
            poison,
        })?;
    }
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;

    eventually(WAIT, "the projector to halt on deposit 2", || async {
        Ok(broker.admin().halted().await?.len() == 1)
    })
    .await?;
    let dir = tempfile::tempdir()?;
    ordo_on(
        &url,
        dir.path(),
        &["dlq", "account", "k", "--group", "Projector", "--yes"],
    )
    .await?
    .expect_code(0)?;
    eventually(WAIT, "deposit 3 to be applied past the dead letter", || async {
        let effects = effects(&pool, &schema).await?;
        Ok(effects
            .get("Projector")
            .is_some_and(|e| e.iter().any(|(n, _)| *n == 3)))
    })
    .await?;

    poisoned.store(false, Ordering::SeqCst);
    ordo_on(&url, dir.path(), &["dlq", "replay", "account", "k", "--yes"])
        .await?
        .expect_code(0)?;
    eventually(WAIT, "the replayed deposit to be applied", || async {
        let effects = effects(&pool, &schema).await?;
        Ok(effects.get("Projector").is_some_and(|e| e.len() == 3))
    })
    .await?;
    assert!(broker.admin().halted().await?.is_empty(), "nothing halted again");
    let once = vec![(1, 1), (2, 1), (3, 1)];
    let effects_now = effects(&pool, &schema).await?;
    assert_eq!(effects_now.get("Projector"), Some(&once), "{effects_now:?}");
    assert_eq!(effects_now.get("Auditor"), Some(&once), "{effects_now:?}");
    let redis_effects: Vec<String> = broker.client().lrange("effects:Projector", 0, -1).await?;
    assert_eq!(
        redis_effects,
        ["1", "3", "2"],
        "the Redis fence took the replay under its lease"
    );

    // A replay published twice (the tool killed between publishing and
    // removing the letter, then run again): applied once.
    let message_id: String = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT message_id FROM \"{schema}\".applied_replays WHERE consumer = 'Projector'"
    )))
    .fetch_one(&pool)
    .await?;
    let mut again = Envelope::new(&Deposited {
        account: "k".to_owned(),
        n: 2,
        poison: true,
    })?;
    again.id = message_id;
    again.partition_key = Some("k".to_owned());
    again
        .metadata
        .insert(POSITION_SCOPE_METADATA.to_owned(), "account:k".to_owned());
    broker
        .replay(
            "Projector",
            &[Publication::to_partition("k", Lane::Primary, again)],
        )
        .await?;
    // A later deposit, behind the second copy in the key's order.
    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    uow.raise(Deposited {
        account: "k".to_owned(),
        n: 4,
        poison: false,
    })?;
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;
    eventually(WAIT, "deposit 4 to be applied", || async {
        let effects = effects(&pool, &schema).await?;
        Ok(effects.get("Projector").is_some_and(|e| e.len() == 4)
            && effects.get("Auditor").is_some_and(|e| e.len() == 4))
    })
    .await?;
    let once = vec![(1, 1), (2, 1), (3, 1), (4, 1)];
    let effects_now = effects(&pool, &schema).await?;
    assert_eq!(effects_now.get("Projector"), Some(&once), "{effects_now:?}");
    assert_eq!(effects_now.get("Auditor"), Some(&once), "{effects_now:?}");

    stop.cancel();
    relay_task.await??;
    running.shutdown().await?;
    Ok(())
}

/// `ordo repartition` moves a category's keys to other partitions; a relay
/// killed after publishing rows but before marking them publishes them
/// again after the switch. Their positions must follow them into the new
/// partitions, so the re-publish is dropped instead of delivered again
/// after the key's later events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repartition_carries_each_keys_position_over() -> anyhow::Result<()> {
    let mut fixture = Fixture::start(false, false).await?;
    let positioned: Vec<Publication> = (1..=3u64)
        .map(|n| {
            let mut envelope = Envelope::new(&OrderPlaced {
                order_id: format!("d-{n}"),
                client_id: "dave".to_owned(),
                poison: false,
            })?;
            envelope.partition_key = Some("dave".to_owned());
            envelope
                .metadata
                .insert(POSITION_SCOPE_METADATA.to_owned(), format!("{CATEGORY}:dave"));
            envelope
                .metadata
                .insert(POSITION_METADATA.to_owned(), n.to_string());
            Ok(Publication::to_partition("dave", Lane::Primary, envelope))
        })
        .collect::<anyhow::Result<_>>()?;
    Broker::publish(&fixture.broker, &positioned).await?;
    eventually(WAIT, "dave's orders", || async {
        Ok(fixture.handled_of("dave").len() == 3)
    })
    .await?;
    fixture.stop_domain().await?;
    fixture
        .ordo(&["repartition", CATEGORY, "--to", "4", "--yes"])
        .await?
        .expect_code(0)?;

    let config = Config::from_toml_str(&format!("{CONFIG}[categories.{CATEGORY}]\npartitions = 4\n"))?;
    let relay_broker = RedisBroker::builder(fixture.redis.url())
        .config(config.clone())
        .build()
        .await?;
    Broker::publish(&relay_broker, &positioned).await?;
    let hashed = PartitionKeys::of(Routing::new(&config).partition_of(CATEGORY, "dave"), "backfill");
    let length: u64 = relay_broker.client().xlen(hashed.primary()).await?;
    assert_eq!(
        length, 0,
        "positions 1..=3 were published before the repartition: dropped"
    );
    fixture.stop().await?;
    Ok(())
}
