//! A small bank on the PostgreSQL outbox: an account table, deposit events
//! written in the same transaction, and a balance projection updated
//! exactly once per event through `ordo_postgres::fenced`.
//!
//! Needs a PostgreSQL and a Redis:
//!
//! ```text
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
//! REDIS_URL=redis://127.0.0.1:6379 \
//! cargo run -p ordo-postgres --example bank
//! ```
//!
//! Everything lives in the schema `bank_example` (dropped and re-created at
//! start). One deposit's transaction is rolled back on purpose: neither its
//! balance change nor its event exists. At the end the projection, built from
//! the published events, equals the account table.

use std::time::Duration;

use anyhow::Context;
use ordo::prelude::*;
use ordo_postgres::{Fence, PgOutbox, PgRelay, UnitOfWorkExt, fenced_in};
use ordo_redis::RedisBroker;
use sqlx::{AssertSqlSafe, PgPool};
use tokio_util::sync::CancellationToken;

const SCHEMA: &str = "bank_example";

#[derive(Aggregate)]
struct Account;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Deposited {
    account: String,
    amount: i64,
}

/// Keeps `projection` in step with the events, exactly once per event.
struct BalanceProjector {
    pool: PgPool,
}

#[event_handler(part_of = Account, sequential_by = "account")]
impl BalanceProjector {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        // A database outage is transient: retried without using up attempts.
        let mut tx = ordo_postgres::begin(&self.pool).await?;
        if fenced_in(SCHEMA, &mut tx, "BalanceProjector", ctx).await? == Fence::AlreadyApplied {
            return Ok(()); // a redelivery: already in the projection
        }
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {SCHEMA}.projection (account, balance) VALUES ($1, $2) \
             ON CONFLICT (account) DO UPDATE SET balance = {SCHEMA}.projection.balance + EXCLUDED.balance"
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

/// One deposit: the business write and its event in one transaction.
async fn deposit(
    pool: &PgPool,
    domain: &Domain,
    outbox: &PgOutbox,
    account: &str,
    amount: i64,
    commit: bool,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {SCHEMA}.account SET balance = balance + $1 WHERE id = $2"
    )))
    .bind(amount)
    .bind(account)
    .execute(&mut *tx)
    .await?;
    let mut uow = domain.unit_of_work();
    uow.raise(Deposited {
        account: account.to_owned(),
        amount,
    })?;
    uow.commit_in_outbox(outbox, &mut tx).await?;
    if commit {
        tx.commit().await?;
    } else {
        tx.rollback().await?;
    }
    Ok(())
}

async fn table(pool: &PgPool, name: &str) -> anyhow::Result<Vec<(String, i64)>> {
    Ok(sqlx::query_as(AssertSqlSafe(format!(
        "SELECT {}, balance FROM {SCHEMA}.{name} ORDER BY 1",
        if name == "account" { "id" } else { "account" }
    )))
    .fetch_all(pool)
    .await?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let database_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&database_url)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {database_url} (set DATABASE_URL)"))?;

    sqlx::query(AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")))
        .execute(&pool)
        .await?;
    let outbox = PgOutbox::builder(pool.clone()).schema(SCHEMA).build()?;
    outbox.migrate().await?;
    for ddl in [
        "account (id text PRIMARY KEY, balance int8 NOT NULL)",
        "projection (account text PRIMARY KEY, balance int8 NOT NULL)",
    ] {
        sqlx::query(AssertSqlSafe(format!("CREATE TABLE {SCHEMA}.{ddl}")))
            .execute(&pool)
            .await?;
    }
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {SCHEMA}.account VALUES ('alice', 0), ('bob', 0), ('carol', 0)"
    )))
    .execute(&pool)
    .await?;

    let broker = RedisBroker::builder(&redis_url)
        .build()
        .await
        .with_context(|| format!("cannot connect to Redis at {redis_url} (set REDIS_URL)"))?;
    let domain = Domain::builder()
        .aggregate::<Account>()
        .event_handler(BalanceProjector { pool: pool.clone() })
        .broker(broker)
        .init()?;
    let running = domain.start();
    let relay = PgRelay::for_domain(outbox.clone(), &domain);
    let stop = CancellationToken::new();
    let relay_task = {
        let stop = stop.clone();
        tokio::spawn(async move { relay.run(stop).await })
    };

    for (i, account) in ["alice", "bob", "carol"].iter().cycle().take(30).enumerate() {
        deposit(&pool, &domain, &outbox, account, i as i64 + 1, true).await?;
    }
    // Rolled back: no balance change, no event.
    deposit(&pool, &domain, &outbox, "alice", 1_000_000, false).await?;

    let accounts = table(&pool, "account").await?;
    let started = std::time::Instant::now();
    while table(&pool, "projection").await? != accounts {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the projection did not catch up with the accounts"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("accounts and projection agree: {accounts:?}");
    println!("{}", ordo_postgres::OutboxStatusReport::read(&outbox).await?);

    stop.cancel();
    relay_task.await??;
    running.shutdown().await?;
    Ok(())
}
