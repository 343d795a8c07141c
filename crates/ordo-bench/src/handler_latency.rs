//! `latency`: publish-to-handler-start latency at a fixed offered load.
//!
//! One engine instance runs (outbox processor and consumer, Ordo's
//! defaults). First one event per key is published and handled, so every
//! partition exists and is owned before measuring: acquisition is not
//! latency. Then [`OfferedLoad`] commits `--rate` events per second over
//! `--keys` keys for `--duration-s`, one event per unit of work, each unit
//! of work carrying its commit time in its metadata
//! ([`engine::COMMITTED_AT_US`]); the handler records the time from that
//! commit to its own start. The path measured is the application's: commit
//! to the outbox, the outbox processor woken by the commit publishing to
//! the partition stream, the partition's doorbell ringing the waker, the
//! worker's fenced read, the handler task starting.
//!
//! `latency_max_lag_ms` says how late the ticker ever was, so a reader can
//! tell the load was really offered.

use std::num::NonZeroUsize;
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, Result, ensure};

use crate::engine::{self, BENCH_KEYS, COMMITTED_AT_US, Engine, EngineOptions, Tally};
use crate::load::OfferedLoad;
use crate::redis::BenchRedis;
use crate::report::Report;
use crate::workload::BenchEvent;

/// Options of `ordo-bench latency`.
#[derive(Debug, Clone, clap::Args)]
pub struct LatencyArgs {
    /// Offered load, events per second.
    #[arg(long, default_value = "1000")]
    pub rate: f64,
    /// Keys (partitions) the events are spread over, round-robin.
    #[arg(long, default_value = "64")]
    pub keys: NonZeroUsize,
    /// How long the load is offered.
    #[arg(long, default_value = "20")]
    pub duration_s: f64,
    /// How long to wait for the last events to be handled.
    #[arg(long, default_value = "60")]
    pub deadline_s: u64,
}

/// Offers the load and reports the latency percentiles.
pub async fn run(args: &LatencyArgs, redis: &BenchRedis) -> Result<Report> {
    ensure!(
        args.duration_s.is_finite() && args.duration_s >= 0.0,
        "--duration-s must be a number of seconds, not {}",
        args.duration_s
    );
    let admin = redis.client().await?;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    let result = measure(args, redis).await;
    engine::delete_matching(&admin, &BENCH_KEYS).await?;
    result
}

async fn measure(args: &LatencyArgs, redis: &BenchRedis) -> Result<Report> {
    let keys = args.keys.get();
    let deadline = Duration::from_secs(args.deadline_s);
    let tally = Tally::new(args.keys);
    let instance = format!("bench-latency-{}", std::process::id());
    let engine = Engine::connect(
        redis,
        &instance,
        &EngineOptions::new(engine::config(None)?),
        tally.clone(),
    )
    .await?;
    let (outcome, expected, handled) = engine
        .run(async {
            // One event per key, handled before the clock starts.
            let mut uow = engine.domain.unit_of_work();
            for n in 0..keys as u64 {
                uow.raise(BenchEvent::nth(n, keys))?;
            }
            uow.commit()
                .await
                .context("committing the warm-up events failed")?;
            tally
                .wait_for(keys as u64, deadline)
                .await
                .context("the warm-up events were not handled")?;

            let load = OfferedLoad {
                rate_per_s: args.rate,
                keys: args.keys,
                max_events: u64::MAX,
                max_duration: Duration::from_secs_f64(args.duration_s),
            };
            let domain = engine.domain.clone();
            let outcome = load
                .run(|tick| {
                    let domain = domain.clone();
                    async move {
                        // Continues every key's numbering after its warm-up event.
                        let event = BenchEvent::nth(keys as u64 + tick.seq, keys);
                        let mut uow = domain.unit_of_work();
                        uow.raise(event)?;
                        uow.with_metadata(
                            COMMITTED_AT_US,
                            engine::unix_micros(SystemTime::now()).to_string(),
                        );
                        uow.commit().await?;
                        Ok(())
                    }
                })
                .await?;
            let expected = keys as u64 + outcome.sent;
            let handled = tally.wait_for(expected, deadline).await;
            anyhow::Ok((outcome, expected, handled))
        })
        .await??;
    handled?;
    ensure!(
        tally.handled() == expected && tally.out_of_order() == 0,
        "handled {} events ({} out of order), {expected} were published",
        tally.handled(),
        tally.out_of_order()
    );

    let mut latencies = tally.take_latencies();
    ensure!(
        latencies.len() as u64 == outcome.sent,
        "{} latencies recorded for {} events",
        latencies.len(),
        outcome.sent
    );
    let mut report = Report::new();
    if let Some(summary) = latencies.summary() {
        summary.add_to(&mut report, "latency");
    }
    report
        .per_second("latency_offered_per_s", args.rate)
        .per_second("latency_achieved_per_s", outcome.achieved_per_s())
        .millis("latency_max_lag_ms", outcome.max_lag)
        .count("latency_events", outcome.sent)
        .count("keys", keys as u64);
    Ok(report)
}
