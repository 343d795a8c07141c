//! Exactly-once balances under worker failover, with real processes.
//!
//! Three worker processes each run the Redis consumer and a PostgreSQL
//! relay; their handler applies deposits to a balance table through
//! `fenced`. One worker is SIGKILLed and another SIGSTOPped past its lease
//! while deposits are committed; afterwards every balance is exactly the sum
//! of its committed deposits (a duplicate effect would inflate it, a lost one
//! deflate it).
//!
//! This file has its own `main` (`harness = false`): run with `worker ...`
//! it is one of the worker processes.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use common::{Deposited, pg_pool};
use ordo::prelude::*;
use ordo_postgres::{Fence, PgOutbox, PgRelay, UnitOfWorkExt, fenced_in};
use ordo_redis::RedisBroker;
use ordo_testkit::{Postgres, Process, Redis};
use sqlx::{AssertSqlSafe, PgPool};
use tokio_util::sync::CancellationToken;

const LEASE_TTL_MS: u64 = 1500;
const ACCOUNTS: u64 = 6;
const DEPOSITS: u64 = 600;

struct BalanceProjector {
    pool: PgPool,
    schema: String,
}

#[event_handler(part_of = common::Account, sequential_by = "account")]
impl BalanceProjector {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        let s = &self.schema;
        // Every run is counted outside the fence, to show redeliveries happened.
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{s}\".runs (message_id, runs) VALUES ($1, 1) \
             ON CONFLICT (message_id) DO UPDATE SET runs = \"{s}\".runs.runs + 1"
        )))
        .bind(ctx.message_id())
        .execute(&self.pool)
        .await?;
        let mut tx = self.pool.begin().await?;
        if fenced_in(s, &mut tx, "BalanceProjector", ctx).await? == Fence::AlreadyApplied {
            return Ok(());
        }
        // Some work inside the transaction, so kills and stalls land mid-handler.
        tokio::time::sleep(Duration::from_millis(15)).await;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{s}\".balance (account, balance, applied) VALUES ($1, $2, 1) \
             ON CONFLICT (account) DO UPDATE SET balance = \"{s}\".balance.balance + EXCLUDED.balance, \
             applied = \"{s}\".balance.applied + 1"
        )))
        .bind(&event.account)
        .bind(event.amount)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        // Committed but not acknowledged yet: the test kills a worker here, so
        // the next owner runs this message again and the fence must skip it.
        println!("committed {}", ctx.message_id());
        tokio::time::sleep(Duration::from_millis(40)).await;
        Ok(())
    }
}

fn config() -> anyhow::Result<ordo::Config> {
    Ok(ordo::Config::from_toml_str(&format!(
        "[server.partitioning]\n\
         lease_ttl_ms = {LEASE_TTL_MS}\n\
         heartbeat_interval_seconds = 0.3\n\
         poll_interval_seconds = 0.05\n\
         discovery_interval_seconds = 0.2\n\
         max_retries = 5\n\
         retry_backoff_initial_ms = 10\n\
         retry_backoff_max_ms = 100\n"
    ))?)
}

/// One worker process: the consumer and a relay, until SIGTERM.
async fn worker(pg_url: &str, redis_url: &str, schema: &str) -> anyhow::Result<()> {
    // A stalled owner's open transaction holds the fence row; PostgreSQL ends
    // it after a second, well before the stall ends, so the next owner goes on.
    let options: sqlx::postgres::PgConnectOptions = pg_url.parse()?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect_with(options.options([("idle_in_transaction_session_timeout", "1000")]))
        .await?;
    let broker = RedisBroker::builder(redis_url).config(config()?).build().await?;
    let domain = Domain::builder()
        .aggregate::<common::Account>()
        .event_handler(BalanceProjector {
            pool: pool.clone(),
            schema: schema.to_owned(),
        })
        .broker(broker)
        .config(config()?)
        .init()?;
    let outbox = PgOutbox::builder(pool)
        .schema(schema)
        .lease_ttl(Duration::from_millis(LEASE_TTL_MS))
        .build()?;
    let relay = PgRelay::for_domain(outbox, &domain).poll_interval(Duration::from_millis(200));
    let running = domain.start();
    let stop = CancellationToken::new();
    let relay_stop = stop.clone();
    let relay = tokio::spawn(async move { relay.run(relay_stop).await });
    println!("worker ready");
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    terminate.recv().await;
    stop.cancel();
    relay.await??;
    running.shutdown().await?;
    Ok(())
}

fn spawn_worker(pg: &Postgres, redis: &Redis, schema: &str) -> anyhow::Result<Process> {
    let mut command = Command::new(std::env::current_exe()?);
    command
        .args(["worker", pg.url(), &redis.url(), schema])
        .stderr(Stdio::null());
    let mut process = Process::spawn(command)?;
    process.wait_for_line(|line| line == "worker ready", Duration::from_secs(30))?;
    Ok(process)
}

async fn balances(pool: &PgPool, schema: &str) -> anyhow::Result<BTreeMap<String, (i64, i64)>> {
    let rows: Vec<(String, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT account, balance, applied FROM \"{schema}\".balance"
    )))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(a, b, n)| (a, (b, n))).collect())
}

async fn scenario() -> anyhow::Result<()> {
    let pg = Postgres::start_local()?;
    let redis = Redis::start_local()?;
    let pool = pg_pool(pg.url(), 6).await?;
    let outbox = common::outbox(&pool, "failover", Duration::from_millis(LEASE_TTL_MS)).await?;
    let schema = outbox.schema().to_owned();
    for table in [
        "balance (account text PRIMARY KEY, balance int8 NOT NULL, applied int8 NOT NULL)",
        "runs (message_id text PRIMARY KEY, runs int8 NOT NULL)",
    ] {
        sqlx::query(AssertSqlSafe(format!("CREATE TABLE \"{schema}\".{table}")))
            .execute(&pool)
            .await?;
    }
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(spawn_worker(&pg, &redis, &schema)?);
    }
    // The producer's domain only raises events.
    let domain = common::domain()?;
    let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for i in 1..=DEPOSITS {
        let account = format!("acct-{}", i % ACCOUNTS);
        let amount = i64::try_from(i % 7 + 1)?;
        let mut tx = pool.begin().await?;
        let mut uow = domain.unit_of_work();
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
        if i == DEPOSITS / 3 {
            workers[0].wait_for_line(|line| line.starts_with("committed "), Duration::from_secs(10))?;
            workers[0].kill()?;
        }
        if i == DEPOSITS / 2 {
            workers[1].pause()?;
        }
        if i == 5 * DEPOSITS / 6 {
            workers[1].resume()?;
        }
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    let started = Instant::now();
    loop {
        let actual = balances(&pool, &schema).await?;
        if actual == expected {
            break;
        }
        if started.elapsed() > Duration::from_secs(60) {
            anyhow::bail!(
                "balances (sum, deposits applied) per account\n  expected {expected:?}\n  actual   {actual:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reruns: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT coalesce(sum(runs - 1), 0)::int8 FROM \"{schema}\".runs"
    )))
    .fetch_one(&pool)
    .await?;
    println!(
        "every balance exact after a kill and a stall; {reruns} handler re-runs were skipped or retried"
    );
    for worker in &mut workers[1..] {
        worker.terminate()?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let [mode, pg_url, redis_url, schema] = args.as_slice()
        && mode == "worker"
    {
        return match runtime.block_on(worker(pg_url, redis_url, schema)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("worker failed: {error:?}");
                ExitCode::FAILURE
            }
        };
    }
    if args.iter().any(|a| a == "--list") {
        // The test is not ignored: the listing of ignored tests (which
        // cargo-nextest asks for apart) is empty, or nextest would skip it.
        if !args.iter().any(|a| a == "--ignored") {
            println!("exactly_once_balances_under_worker_failover: test");
        }
        return ExitCode::SUCCESS;
    }
    print!("test exactly_once_balances_under_worker_failover ... ");
    match runtime.block_on(scenario()) {
        Ok(()) => {
            println!("ok");
            ExitCode::SUCCESS
        }
        Err(error) => {
            println!("FAILED\n{error:?}");
            ExitCode::FAILURE
        }
    }
}
