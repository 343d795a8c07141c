//! Helpers shared by the ordo-postgres tests: a private PostgreSQL and Redis
//! from the testkit, a unique schema per test, a small bank domain, and
//! readers of what reached Redis. The ordo-pg-relay crate's tests share it.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::StreamsInterface;
use fred::prelude::{Builder, ClientLike, Config as FredConfig};
use fred::types::Value;
use ordo::prelude::*;
use ordo_core::contract::message::Envelope;
use ordo_postgres::{PgOutbox, UnitOfWorkExt};
use ordo_testkit::{Postgres, TestCa};
use sqlx::PgPool;

#[derive(Aggregate)]
pub struct Account;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
pub struct Deposited {
    pub account: String,
    pub amount: i64,
    /// The writer's sequence number for this account (1, 2, 3...).
    pub n: u64,
}

/// Does nothing: it only declares `account` the partition key of the category.
pub struct Ledger;

#[event_handler(part_of = Account, sequential_by = "account")]
impl Ledger {
    #[handle]
    async fn on_deposited(&self, _event: &Deposited, _ctx: &HandlerContext) -> anyhow::Result<()> {
        Ok(())
    }
}

/// A domain on the inline broker (it is only used to raise and validate events).
pub fn domain() -> anyhow::Result<Domain> {
    Ok(Domain::builder()
        .aggregate::<Account>()
        .event_handler(Ledger)
        .init()?)
}

/// A schema name unique to this test process and call.
pub fn schema(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub async fn pg_pool(url: &str, connections: u32) -> anyhow::Result<PgPool> {
    Ok(sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .acquire_timeout(Duration::from_secs(30))
        .connect(url)
        .await?)
}

/// A migrated outbox in a fresh schema.
pub async fn outbox(pool: &PgPool, prefix: &str, lease_ttl: Duration) -> anyhow::Result<PgOutbox> {
    let outbox = PgOutbox::builder(pool.clone())
        .schema(schema(prefix))
        .lease_ttl(lease_ttl)
        .build()?;
    outbox.migrate().await?;
    Ok(outbox)
}

/// A relay of `outbox` to `redis`, with the default configuration.
pub async fn relay(outbox: &PgOutbox, redis: &ordo_testkit::Redis) -> anyhow::Result<ordo_postgres::PgRelay> {
    let broker = ordo_redis::RedisBroker::builder(redis.url()).build().await?;
    Ok(ordo_postgres::PgRelay::new(
        outbox.clone(),
        std::sync::Arc::new(broker),
        &ordo_core::contract::config::Config::default(),
    ))
}

pub async fn redis_pool(url: &str) -> anyhow::Result<Pool> {
    let pool = Builder::from_config(FredConfig::from_url(url)?).build_pool(2)?;
    pool.init().await?;
    Ok(pool)
}

/// The envelopes on `stream`, in stream order.
/// The primary stream of `key`'s partition of the `account` category.
pub fn account_stream(key: &str) -> String {
    ordo_redis::PartitionKeys::new("account", key, "backfill")
        .primary()
        .to_owned()
}

pub async fn stream_envelopes(redis: &Pool, stream: &str) -> anyhow::Result<Vec<Envelope>> {
    let entries: Vec<(String, std::collections::HashMap<String, String>)> =
        redis.xrange_values(stream, "-", "+", None).await?;
    entries
        .into_iter()
        .map(|(_, mut fields)| {
            let json = fields
                .remove("envelope")
                .ok_or_else(|| anyhow::anyhow!("an entry of {stream} has no envelope"))?;
            Ok(serde_json::from_str(&json)?)
        })
        .collect()
}

/// The `n` of each `Deposited` on `stream`, in stream order.
pub async fn numbers(redis: &Pool, stream: &str) -> anyhow::Result<Vec<u64>> {
    stream_envelopes(redis, stream)
        .await?
        .into_iter()
        .map(|e| Ok(serde_json::from_str::<Deposited>(&e.payload)?.n))
        .collect()
}

pub async fn xlen(redis: &Pool, stream: &str) -> anyhow::Result<u64> {
    let value: Value = redis.xlen(stream).await?;
    Ok(value.convert()?)
}

/// How many rows of `outbox` have `status` (0 pending, 1 published, 2
/// abandoned): a row is published when its position is at or below its
/// scope's published position.
pub async fn count_status(outbox: &PgOutbox, status: i16) -> anyhow::Result<i64> {
    let sql = format!(
        "SELECT count(*) FROM \"{s}\".outbox o JOIN \"{s}\".outbox_streams s ON s.stream = o.stream \
         WHERE (CASE WHEN o.status = 2 THEN 2 WHEN o.seq <= s.published_seq THEN 1 ELSE 0 END) = $1",
        s = outbox.schema()
    );
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(i32::from(status))
        .fetch_one(outbox.pool())
        .await?)
}

/// A deposit of 10 to `account`, its `n`th.
pub fn deposit(account: &str, n: u64) -> Deposited {
    Deposited {
        account: account.to_owned(),
        amount: 10,
        n,
    }
}

/// Commits `events` to `outbox` in one transaction of `pool`.
pub async fn commit(
    pool: &PgPool,
    outbox: &PgOutbox,
    domain: &Domain,
    events: Vec<Deposited>,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    for event in events {
        uow.raise(event)?;
    }
    uow.commit_in_outbox(outbox, &mut tx).await?;
    tx.commit().await?;
    Ok(())
}

/// The password [`with_password`] puts in a URL.
pub const PASSWORD: &str = "pg-s3cret";

/// A server with a certificate of `ca` that refuses plain connections.
pub fn tls_postgres(ca: &TestCa) -> anyhow::Result<Postgres> {
    Ok(Postgres::builder().tls(ca.postgres_tls(true)?).start()?)
}

/// The server's URL with `sslmode` and, when given, the CA file to trust.
pub fn url_with(pg: &Postgres, sslmode: &str, root_cert: Option<&Path>) -> String {
    let mut url = format!("{}?sslmode={sslmode}", pg.url());
    if let Some(ca) = root_cert {
        url.push_str(&format!("&sslrootcert={}", ca.display()));
    }
    url
}

/// The same URL with a password (the server trusts 127.0.0.1 and ignores it).
pub fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{PASSWORD}@"),
        1,
    )
}
