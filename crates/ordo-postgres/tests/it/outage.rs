//! A database outage is not a poison message: PostgreSQL is stopped in
//! the middle of a drain under a fenced handler and started again; the
//! handlers' pool timeouts and lost connections are transient, so every
//! key waits in order and resumes by itself once the database is back.
//! Nothing halts, nothing is applied twice, every balance is exact.
//!
//! `max_retries = 1`: on the old code the keys in flight used up their two
//! attempts within the outage and halted (the issue's report: "all 6
//! partitions halted").

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Deposited, pg_pool};
use ordo::prelude::*;
use ordo_postgres::{Fence, PgRelay, UnitOfWorkExt, fenced_in};
use ordo_redis::RedisBroker;
use ordo_testkit::{Postgres, Redis};
use sqlx::{AssertSqlSafe, PgPool};
use tokio_util::sync::CancellationToken;

const ACCOUNTS: u64 = 6;
const DEPOSITS: u64 = 240;

struct BalanceProjector {
    pool: PgPool,
    schema: String,
}

#[event_handler(part_of = common::Account, sequential_by = "account")]
impl BalanceProjector {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        let s = &self.schema;
        // The handler's transaction: while the database is down, beginning
        // it fails with a pool timeout, which `begin` marks transient.
        let mut tx = ordo_postgres::begin(&self.pool).await?;
        if fenced_in(s, &mut tx, "BalanceProjector", ctx).await? == Fence::AlreadyApplied {
            return Ok(());
        }
        // Some work inside the transaction, so the outage lands mid-handler.
        tokio::time::sleep(Duration::from_millis(20)).await;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{s}\".balance (account, balance, applied) VALUES ($1, $2, 1) \
             ON CONFLICT (account) DO UPDATE SET balance = \"{s}\".balance.balance + EXCLUDED.balance, \
             applied = \"{s}\".balance.applied + 1"
        )))
        .bind(&event.account)
        .bind(event.amount)
        .execute(&mut *tx)
        .await
        .map_err(ordo_postgres::Error::from)?;
        tx.commit().await.map_err(ordo_postgres::Error::from)?;
        Ok(())
    }
}

fn config() -> anyhow::Result<ordo::Config> {
    Ok(ordo::Config::from_toml_str(
        "[server.partitioning]\n\
         lease_ttl_ms = 3000\n\
         poll_interval_seconds = 0.05\n\
         discovery_interval_seconds = 0.2\n\
         max_retries = 1\n\
         retry_backoff_initial_ms = 50\n\
         retry_backoff_max_ms = 400\n",
    )?)
}

async fn balances(pool: &PgPool, schema: &str) -> anyhow::Result<BTreeMap<String, (i64, i64)>> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT account, balance, applied FROM \"{schema}\".balance"
    )))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(a, b, n)| (a, (b, n))).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_under_fenced_handlers_heals_by_itself() -> anyhow::Result<()> {
    let mut pg = Postgres::start_local()?;
    let redis = Redis::start_local()?;
    let pool = pg_pool(pg.url(), 6).await?;
    let outbox = common::outbox(&pool, "outage", Duration::from_secs(3)).await?;
    let schema = outbox.schema().to_owned();
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE \"{schema}\".balance (account text PRIMARY KEY, balance int8 NOT NULL, applied int8 NOT NULL)"
    )))
    .execute(&pool)
    .await?;

    // Everything committed to the outbox up front.
    let producer = common::domain()?;
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in 1..=DEPOSITS {
        let account = format!("acct-{}", i % ACCOUNTS);
        let amount = i64::try_from(i % 7 + 1)?;
        let mut tx = pool.begin().await?;
        let mut uow = producer.unit_of_work();
        uow.raise(Deposited {
            account: account.clone(),
            amount,
            n: i,
        })?;
        uow.commit_in_outbox(&outbox, &mut tx).await?;
        tx.commit().await?;
        let entry = expected.entry(account).or_default();
        entry.0 += amount;
        entry.1 += 1;
    }

    // The worker's pool waits at most half a second for a connection.
    let handlers = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_millis(500))
        .connect(pg.url())
        .await?;
    let broker = RedisBroker::builder(redis.url())
        .config(config()?)
        .build()
        .await?;
    let admin = broker.admin();
    let domain = Domain::builder()
        .aggregate::<common::Account>()
        .event_handler(BalanceProjector {
            pool: handlers.clone(),
            schema: schema.clone(),
        })
        .broker(broker)
        .config(config()?)
        .init()?;
    let relay = PgRelay::for_domain(outbox, &domain).poll_interval(Duration::from_millis(100));
    let running = domain.start();
    let stop = CancellationToken::new();
    let relay = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run(stop).await }
    });

    // The database goes away in the middle of the drain, for longer than
    // the two attempts of `max_retries = 1` take.
    let started = Instant::now();
    loop {
        let applied: i64 = balances(&pool, &schema).await?.values().map(|(_, n)| n).sum();
        if applied >= 30 {
            anyhow::ensure!(
                applied < i64::try_from(DEPOSITS)? / 2,
                "half the deposits were applied before the outage: nothing tested"
            );
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the drain did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    pg.stop()?;
    // The outage itself is the fault being injected, not a wait for a condition.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let halted_in_outage = admin.halted().await?;
    pg.start_again()?;

    let pool = pg_pool(pg.url(), 2).await?;
    let started = Instant::now();
    loop {
        let actual = balances(&pool, &schema).await?;
        if actual == expected {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!(
                "balances (sum, deposits applied) per account\n  expected {expected:?}\n  actual   {actual:?}\n  \
                 halted: {:?}",
                admin.halted().await?
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        halted_in_outage.is_empty(),
        "the outage halted keys: {halted_in_outage:?}"
    );
    assert!(admin.halted().await?.is_empty());
    stop.cancel();
    relay.await??;
    running.shutdown().await?;
    Ok(())
}
