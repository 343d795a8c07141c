//! `relay`: the PostgreSQL outbox and its relays.
//!
//! Against a private PostgreSQL (or `--database-url`) and the run's Redis:
//!
//! 1. `outbox_commits_per_s`: `--writers` concurrent writers each commit one
//!    event per transaction (`commit_in`) over `--keys` keys.
//! 2. `relay_msgs_per_s_1` and `relay_msgs_per_s_3`: a backlog of
//!    `--backlog` committed rows is published to Redis by one relay, then
//!    (a new backlog) by three relays sharing the slots, until none is
//!    pending. The relays run in this process, each with its own
//!    connections, exactly as `PgRelay` publishes.
//! 3. `relay_latency_p50_ms`/`p99_ms`: commit to handler start at `--rate`
//!    events/s, one event per transaction: commit in PostgreSQL, the NOTIFY
//!    waking the relay, the publish to the partition stream, the engine's
//!    consumer handing the message to its handler.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, Result, ensure};
use ordo_core::contract::config::Config;
use ordo_postgres::sqlx::{self, AssertSqlSafe, PgPool};
use ordo_postgres::{OutboxStatusReport, PgOutbox, PgRelay, UnitOfWorkExt};
use ordo_redis::RedisBroker;
use ordo_testkit::Postgres;
use tokio_util::sync::CancellationToken;

use crate::engine::{self, BENCH_KEYS, COMMITTED_AT_US, Engine, EngineOptions, Tally};
use crate::load::OfferedLoad;
use crate::redis::BenchRedis;
use crate::report::{Report, rate};
use crate::workload::BenchEvent;

/// Options of `ordo-bench relay`.
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// The PostgreSQL to use; default: a private one started for the run.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<ordo_redis::SecretUrl>,
    /// Concurrent writers of the commit phase.
    #[arg(long, default_value = "8")]
    pub writers: usize,
    /// Events committed in the commit phase (one per transaction).
    #[arg(long, default_value = "20000")]
    pub commits: u64,
    /// Rows of each relay phase's backlog.
    #[arg(long, default_value = "100000")]
    pub backlog: u64,
    /// Keys the events are spread over, round-robin.
    #[arg(long, default_value = "64")]
    pub keys: NonZeroUsize,
    /// Rows per relay fetch.
    #[arg(long, default_value = "512")]
    pub batch: usize,
    /// Offered load of the latency phase, events per second.
    #[arg(long, default_value = "1000")]
    pub rate: f64,
    /// How long the latency phase offers its load.
    #[arg(long, default_value = "10")]
    pub duration_s: f64,
}

/// Runs the three phases and reports their figures.
pub async fn run(args: &RelayArgs, redis: &BenchRedis) -> Result<Report> {
    ensure!(args.writers > 0, "--writers must be at least 1");
    let local;
    let url = match &args.database_url {
        Some(url) => url.clone(),
        None => {
            local = Postgres::start_local().context("could not start a private PostgreSQL")?;
            ordo_redis::SecretUrl::new(local.url())
        }
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(args.writers.max(32) + 8).unwrap_or(40))
        .connect(url.expose())
        .await
        .with_context(|| format!("could not connect to {url}"))?;
    // The relay of the latency phase has connections of its own, as a relay
    // process has, so its statements never queue for a connection behind
    // the 64 committing tasks.
    let relay_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(url.expose())
        .await
        .with_context(|| format!("could not connect to {url}"))?;
    let schema = format!("ordo_bench_{}", std::process::id());
    let admin = redis.client().await?;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    let result = measure(args, redis, &pool, &relay_pool, &schema).await;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    sqlx::query(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    result
}

fn outbox(pool: &PgPool, schema: &str) -> Result<PgOutbox> {
    Ok(PgOutbox::builder(pool.clone()).schema(schema).build()?)
}

async fn measure(
    args: &RelayArgs,
    redis: &BenchRedis,
    pool: &PgPool,
    relay_pool: &PgPool,
    schema: &str,
) -> Result<Report> {
    let keys = args.keys.get();
    let writer_outbox = outbox(pool, schema)?;
    writer_outbox.migrate().await?;
    // A domain to raise and validate the events (its broker is not used).
    let tally = Tally::new(args.keys);
    let engine = Engine::connect(
        redis,
        &format!("bench-relay-{}", std::process::id()),
        &EngineOptions::new(engine::config(None)?),
        tally.clone(),
    )
    .await?;
    let domain = engine.domain.clone();
    let mut report = Report::new();

    // 1. Commits by concurrent writers. Writer `w` commits the events of
    // the keys `k` with `k % writers == w`, the same number per key, so each
    // key's numbers follow its commit order (what the tally checks later).
    ensure!(args.writers <= keys, "--writers must not exceed --keys");
    let per_key = (args.commits / keys as u64).max(1);
    let started = Instant::now();
    let mut writers = Vec::new();
    for writer in 0..args.writers {
        let (pool, outbox, domain) = (pool.clone(), writer_outbox.clone(), domain.clone());
        let writers_count = args.writers;
        writers.push(tokio::spawn(async move {
            let mine: Vec<usize> = (writer..keys).step_by(writers_count).collect();
            for n in 0..per_key {
                for &key in &mine {
                    let mut tx = pool.begin().await?;
                    let mut uow = domain.unit_of_work();
                    uow.raise(BenchEvent::nth(n * keys as u64 + key as u64, keys))?;
                    uow.commit_in_outbox(&outbox, &mut tx).await?;
                    tx.commit().await?;
                }
            }
            anyhow::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    let committed = per_key * keys as u64;
    report
        .per_second("outbox_commits_per_s", rate(committed, started.elapsed()))
        .count("outbox_writers", args.writers as u64);
    // Publish that phase's rows so each relay phase starts from its own backlog.
    let first = Arc::new(relay(&writer_outbox, redis, args).await?);
    drain(std::slice::from_ref(&first)).await?;
    first.outbox().release_leases().await?;

    // 2. A backlog published by one relay, then by three (whole rounds of keys).
    let backlog = args.backlog.div_ceil(keys as u64) * keys as u64;
    for relays in [1usize, 3] {
        fill(pool, &writer_outbox, &domain, backlog, keys).await?;
        // Planner statistics as a long-running outbox has them (autovacuum
        // would gather them within a minute of the bulk insert).
        sqlx::query(AssertSqlSafe(format!("ANALYZE \"{schema}\".outbox")))
            .execute(pool)
            .await?;
        let mut group = Vec::new();
        for _ in 0..relays {
            group.push(Arc::new(relay(&outbox(pool, schema)?, redis, args).await?));
        }
        // Spread the slots before the clock starts (two rounds: register, then share).
        for _ in 0..2 {
            for relay in &group {
                relay.outbox().lease_slots().await?;
            }
        }
        let started = Instant::now();
        let published = drain(&group).await?;
        let elapsed = started.elapsed();
        ensure!(
            published >= backlog,
            "{relays} relay(s) published {published} of a {backlog} row backlog"
        );
        report.per_second(format!("relay_msgs_per_s_{relays}"), rate(published, elapsed));
        for relay in &group {
            relay.outbox().release_leases().await?;
        }
    }
    report
        .count("relay_backlog", backlog)
        .count("relay_batch", args.batch as u64);

    // 3. Commit to handler start through a NOTIFY-woken relay.
    let (outcome, handled) = engine
        .run(async {
            let latency_relay = PgRelay::for_domain(outbox(relay_pool, schema)?, &domain)
                .batch_size(args.batch)
                .poll_interval(Duration::from_millis(500));
            let stop = CancellationToken::new();
            let relay_task = {
                let stop = stop.clone();
                tokio::spawn(async move { latency_relay.run(stop).await })
            };
            // The previous phases' events were published before the engine ran: it
            // handles them first; wait for that, then measure.
            let earlier = committed + 2 * backlog;
            tally
                .wait_for(earlier, Duration::from_secs(300))
                .await
                .context("the engine did not catch up with the backlog")?;
            let _ = tally.take_latencies();
            let load = OfferedLoad {
                rate_per_s: args.rate,
                keys: args.keys,
                max_events: u64::MAX,
                max_duration: Duration::from_secs_f64(args.duration_s),
            };
            // One committing task per key, fed in schedule order: commits of one key
            // stay in order, commits of different keys overlap as they would in an
            // application (one transaction takes a few round trips).
            let mut senders = Vec::with_capacity(keys);
            let mut committers = tokio::task::JoinSet::new();
            for _ in 0..keys {
                let (send, mut receive) = tokio::sync::mpsc::unbounded_channel::<BenchEvent>();
                senders.push(send);
                let (pool, outbox, domain) = (pool.clone(), writer_outbox.clone(), domain.clone());
                committers.spawn(async move {
                    while let Some(event) = receive.recv().await {
                        let mut tx = pool.begin().await?;
                        let mut uow = domain.unit_of_work();
                        uow.raise(event)?;
                        uow.with_metadata(
                            COMMITTED_AT_US,
                            engine::unix_micros(SystemTime::now()).to_string(),
                        );
                        uow.commit_in_outbox(&outbox, &mut tx).await?;
                        tx.commit().await?;
                    }
                    anyhow::Ok(())
                });
            }
            let outcome = load
                .run(|tick| {
                    let index = earlier + tick.seq;
                    let sent = senders[(index % keys as u64) as usize]
                        .send(BenchEvent::nth(index, keys))
                        .map_err(|_| anyhow::anyhow!("a committing task stopped"));
                    async move { sent }
                })
                .await?;
            drop(senders);
            while let Some(result) = committers.join_next().await {
                result??;
            }
            let handled = tally
                .wait_for(earlier + outcome.sent, Duration::from_secs(60))
                .await;
            stop.cancel();
            relay_task.await??;
            anyhow::Ok((outcome, handled))
        })
        .await??;
    handled?;
    ensure!(
        tally.out_of_order() == 0,
        "{} events out of order",
        tally.out_of_order()
    );
    let mut latencies = tally.take_latencies();
    if let Some(summary) = latencies.summary() {
        summary.add_to(&mut report, "relay_latency");
    }
    report
        .per_second("relay_latency_offered_per_s", args.rate)
        .per_second("relay_latency_achieved_per_s", outcome.achieved_per_s())
        .millis("relay_latency_max_lag_ms", outcome.max_lag)
        .count("relay_latency_events", outcome.sent);
    Ok(report)
}

/// A relay on `outbox` publishing to the run's Redis with its own connections.
async fn relay(outbox: &PgOutbox, redis: &BenchRedis, args: &RelayArgs) -> Result<PgRelay> {
    let config = Config::default();
    let broker = RedisBroker::builder(redis.url())
        .tls(redis.tls().files())
        .config(config.clone())
        .build()
        .await?;
    Ok(PgRelay::new(outbox.clone(), Arc::new(broker), &config).batch_size(args.batch))
}

/// Commits `rows` events, 500 per transaction, numbered after what the
/// outbox already holds so every key's numbers stay consecutive.
async fn fill(
    pool: &PgPool,
    outbox: &PgOutbox,
    domain: &ordo_core::Domain,
    rows: u64,
    keys: usize,
) -> Result<()> {
    let start: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT coalesce(sum(last_seq), 0)::int8 FROM \"{}\".outbox_streams",
        outbox.schema()
    )))
    .fetch_one(pool)
    .await?;
    let start = u64::try_from(start)?;
    let mut seq = 0;
    while seq < rows {
        let mut tx = pool.begin().await?;
        let mut uow = domain.unit_of_work();
        for _ in 0..500.min(rows - seq) {
            uow.raise(BenchEvent::nth(start + seq, keys))?;
            seq += 1;
        }
        uow.commit_in_outbox(outbox, &mut tx).await?;
        tx.commit().await?;
    }
    Ok(())
}

/// Publishes with every relay of `group` at once until nothing is pending;
/// returns the rows they published.
async fn drain(group: &[Arc<PgRelay>]) -> Result<u64> {
    let mut tasks = tokio::task::JoinSet::new();
    for relay in group {
        let relay = Arc::clone(relay);
        tasks.spawn(async move {
            let mut published = 0u64;
            loop {
                let report = relay.publish_pending().await?;
                published += report.published as u64;
                ensure!(report.failed == 0, "a publish failed");
                if report.published == 0 {
                    if OutboxStatusReport::read(relay.outbox()).await?.pending == 0 {
                        return Ok(published);
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
    }
    let mut published = 0;
    while let Some(result) = tasks.join_next().await {
        published += result??;
    }
    Ok(published)
}
