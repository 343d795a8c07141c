//! Several relay processes against one database, with real signals: per key,
//! every committed row is published once, in commit order, whatever relay is
//! killed, stalled or Redis restarted meanwhile.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Deposited, count_status, domain, pg_pool, redis_pool};
use ordo::prelude::*;
use ordo_core::contract::broker::POSITION_METADATA;
use ordo_postgres::{PgOutbox, UnitOfWorkExt};
use ordo_testkit::eventually;
use ordo_testkit::{Postgres, Process, Redis};
use sqlx::{AssertSqlSafe, PgPool};
use tokio_util::sync::CancellationToken;

const KEYS: usize = 8;
const LEASE_TTL_MS: u64 = 1500;

fn spawn_relay(pg: &Postgres, redis: &Redis, schema: &str) -> anyhow::Result<Process> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ordo-pg-relay"));
    command
        .env("DATABASE_URL", pg.url())
        .env("REDIS_URL", redis.url())
        .env("ORDO_OUTBOX_SCHEMA", schema)
        .env("ORDO_RELAY_LEASE_TTL_MS", LEASE_TTL_MS.to_string())
        .env("ORDO_RELAY_POLL_MS", "200")
        .stderr(Stdio::null());
    let mut relay = Process::spawn(command)?;
    relay.wait_for_line(|line| line.starts_with("relay ready"), Duration::from_secs(30))?;
    Ok(relay)
}

/// Committed events per key, counted by the writers after each commit.
type Committed = Arc<Mutex<BTreeMap<String, u64>>>;

/// Writers committing one event per transaction on `KEYS` keys until cancelled.
fn start_writers(
    pool: &PgPool,
    outbox: &PgOutbox,
    domain: &Domain,
    committed: &Committed,
    stop: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<()>>> {
    (0..4)
        .map(|writer| {
            let (pool, outbox, domain) = (pool.clone(), outbox.clone(), domain.clone());
            let (committed, stop) = (committed.clone(), stop.clone());
            tokio::spawn(async move {
                let mut i = 0usize;
                while !stop.is_cancelled() {
                    let key = format!("k{}", (writer + i) % KEYS);
                    i += 1;
                    let mut tx = pool.begin().await?;
                    let mut uow = domain.unit_of_work();
                    uow.raise(Deposited {
                        account: key.clone(),
                        amount: 1,
                        n: i as u64,
                    })?;
                    uow.commit_in_outbox(&outbox, &mut tx).await?;
                    tx.commit().await?;
                    *committed.lock().unwrap().entry(key).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                anyhow::Ok(())
            })
        })
        .collect()
}

async fn live_owners(outbox: &PgOutbox) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(DISTINCT owner) FROM \"{}\".outbox_slots WHERE owner IS NOT NULL AND expires_at > now()",
        outbox.schema()
    )))
    .fetch_one(outbox.pool())
    .await?)
}

/// Waits until nothing is pending, then checks every key's stream: positions
/// 1..=committed, in order, none missing, none twice.
async fn check_streams(outbox: &PgOutbox, redis: &Redis, committed: &Committed) -> anyhow::Result<()> {
    eventually(Duration::from_secs(60), "every row to be published", || async {
        Ok(count_status(outbox, 0).await? == 0)
    })
    .await?;
    let client = redis_pool(&redis.url()).await?;
    let committed = committed.lock().unwrap().clone();
    assert_eq!(committed.len(), KEYS, "{committed:?}");
    for (key, count) in committed {
        let stream = common::account_stream(&key);
        let positions: Vec<u64> = common::stream_envelopes(&client, &stream)
            .await?
            .iter()
            .map(|e| {
                e.metadata
                    .get(POSITION_METADATA)
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        let expected: Vec<u64> = (1..=count).collect();
        assert_eq!(
            positions, expected,
            "{stream}: each committed row once, in commit order"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_relays_with_one_killed_and_one_stalled_publish_each_row_once_in_order() -> anyhow::Result<()> {
    let pg = Postgres::start_local()?;
    let redis = Redis::start_local()?;
    let pool = pg_pool(pg.url(), 8).await?;
    let outbox = common::outbox(&pool, "relays", Duration::from_millis(LEASE_TTL_MS)).await?;
    let domain = domain()?;
    let mut relays = [
        spawn_relay(&pg, &redis, outbox.schema())?,
        spawn_relay(&pg, &redis, outbox.schema())?,
        spawn_relay(&pg, &redis, outbox.schema())?,
    ];
    eventually(
        Duration::from_secs(20),
        "the slots to spread over three relays",
        || {
            let outbox = outbox.clone();
            async move { Ok(live_owners(&outbox).await? == 3) }
        },
    )
    .await?;

    let committed = Committed::default();
    let stop = CancellationToken::new();
    let writers = start_writers(&pool, &outbox, &domain, &committed, &stop);
    let total = || committed.lock().unwrap().values().sum::<u64>();
    eventually(Duration::from_secs(20), "some commits", || async {
        Ok(total() >= 100)
    })
    .await?;

    relays[0].kill()?;
    relays[1].pause()?;
    let before = total();
    eventually(Duration::from_secs(20), "commits after the faults", || async {
        Ok(total() >= before + 200)
    })
    .await?;
    // The survivor takes every slot once the dead and the stalled leases expire.
    eventually(Duration::from_secs(20), "one live owner of the slots", || {
        let outbox = outbox.clone();
        async move { Ok(live_owners(&outbox).await? == 1) }
    })
    .await?;
    eventually(Duration::from_secs(30), "the backlog to drain", || async {
        Ok(count_status(&outbox, 0).await? < 20)
    })
    .await?;
    // The stalled relay wakes up, possibly mid-batch, and rejoins.
    relays[1].resume()?;
    let before = total();
    eventually(Duration::from_secs(20), "commits after the resume", || async {
        Ok(total() >= before + 100)
    })
    .await?;
    stop.cancel();
    for writer in writers {
        writer.await??;
    }
    check_streams(&outbox, &redis, &committed).await?;
    for relay in &mut relays[1..] {
        relay.terminate()?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_mid_publish_loses_and_duplicates_nothing() -> anyhow::Result<()> {
    let pg = Postgres::start_local()?;
    let mut redis = Redis::builder().append_only(true).start()?;
    let pool = pg_pool(pg.url(), 8).await?;
    let outbox = common::outbox(&pool, "restart", Duration::from_millis(LEASE_TTL_MS)).await?;
    let domain = domain()?;
    let mut relays = [
        spawn_relay(&pg, &redis, outbox.schema())?,
        spawn_relay(&pg, &redis, outbox.schema())?,
    ];
    let committed = Committed::default();
    let stop = CancellationToken::new();
    let writers = start_writers(&pool, &outbox, &domain, &committed, &stop);
    let total = || committed.lock().unwrap().values().sum::<u64>();
    eventually(Duration::from_secs(20), "some commits", || async {
        Ok(total() >= 150)
    })
    .await?;
    redis.restart()?;
    let before = total();
    eventually(Duration::from_secs(20), "commits after the restart", || async {
        Ok(total() >= before + 150)
    })
    .await?;
    stop.cancel();
    for writer in writers {
        writer.await??;
    }
    check_streams(&outbox, &redis, &committed).await?;
    for relay in &mut relays {
        relay.terminate()?;
    }
    Ok(())
}
