//! `failover`: how long a key waits for a new owner after its owner is
//! SIGKILLed, at each lease TTL in `--ttls`.
//!
//! Each trial runs two engine instances as separate processes (this
//! program's hidden `worker` subcommand: the harness's worker with Ordo's
//! default timings and the trial's lease TTL, heartbeat TTL / 5) while this
//! process publishes `--rate` events per second over `--keys` keys through
//! the outbox. Once both instances handle events, the owner of key `k0`
//! (read from its lease) is killed with SIGKILL; the figure is the time
//! from the signal to the survivor's first handler start on `k0` (its
//! `start` line, at a higher fencing token), read from its stdout as it is
//! printed.
//!
//! What bounds it is the lease: the survivor can take `k0` only once the
//! dead owner's lease has expired (`lease_remaining_ms`: its PTTL right
//! after the kill, at most one TTL) and the dead instance has dropped out of
//! the live set (its announcement also lives one TTL), then at its next
//! discovery round (every second). `failover_after_expiry_ms` is the part
//! after the lease expired.

use std::num::NonZeroUsize;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use fred::clients::Client;
use fred::prelude::{ClientLike as _, KeysInterface as _};
use ordo_core::contract::config::Config;
use ordo_harness::line::{self, Line};
use ordo_harness::tick::Tick;
use ordo_harness::worker::TickHandler;
use ordo_redis::{RedisBroker, TlsFiles};
use ordo_testkit::Process;

use crate::engine;
use crate::latency::percentile;
use crate::load::OfferedLoad;
use crate::redis::BenchRedis;
use crate::report::Report;
use crate::worker::WorkerArgs;

/// The keys a failover trial leaves: the `chaos` category's streams,
/// bookkeeping and instance set, and the harness's records.
const FAILOVER_KEYS: [&str; 5] = [
    "chaos:*",
    "{chaos:*",
    "{chaos}:*",
    "harness:*",
    "ordo:instances:TickRecorder",
];

/// The key whose owner is killed.
const WATCHED_KEY: &str = "k0";

/// How long a worker may take to start and to handle its first events.
const STARTUP_DEADLINE: Duration = Duration::from_secs(30);

/// Options of `ordo-bench failover`.
#[derive(Debug, Clone, clap::Args)]
pub struct FailoverArgs {
    /// Lease TTLs to measure at, in ms (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "15000,2000")]
    pub ttls: Vec<u64>,
    /// Kills per TTL, each at a different phase of the instances' heartbeat
    /// and discovery cycles; the median is reported (and the maximum).
    #[arg(long, default_value = "3")]
    pub trials: NonZeroUsize,
    /// Keys with traffic, split between the two instances.
    #[arg(long, default_value = "8")]
    pub keys: NonZeroUsize,
    /// Events per second published over the keys during a trial.
    #[arg(long, default_value = "200")]
    pub rate: f64,
}

/// One kill and takeover.
#[derive(Debug, Clone, Copy)]
struct Takeover {
    /// From SIGKILL to the survivor's first handler start on the key.
    failover: Duration,
    /// The dead owner's lease time left right after the kill.
    lease_remaining: Duration,
}

/// Runs the trials and reports the failover times.
pub async fn run(args: &FailoverArgs, redis: &BenchRedis) -> Result<Report> {
    ensure!(!args.ttls.is_empty(), "--ttls names no lease TTL");
    let admin = redis.client().await?;
    let mut report = Report::new();
    let mut details = Report::new();
    for &ttl_ms in &args.ttls {
        let mut takeovers = Vec::with_capacity(args.trials.get());
        for trial in 0..args.trials.get() {
            let result = self::trial(args, redis, &admin, ttl_ms, trial).await;
            engine::delete_matching(&admin, &FAILOVER_KEYS).await?;
            takeovers.push(result.with_context(|| format!("failover trial {trial} at TTL {ttl_ms} ms"))?);
        }
        add_figures(&mut report, &mut details, ttl_ms, &takeovers);
    }
    admin.quit().await?;
    report
        .count("failover_trials", args.trials.get() as u64)
        .count("failover_keys", args.keys.get() as u64);
    for (name, figure) in details.figures() {
        report.push(name, figure.clone());
    }
    Ok(report)
}

fn add_figures(report: &mut Report, details: &mut Report, ttl_ms: u64, takeovers: &[Takeover]) {
    let median = |durations: Vec<Duration>| {
        let mut sorted = durations;
        sorted.sort_unstable();
        percentile(&sorted, 50.0).unwrap_or_default()
    };
    let failovers: Vec<Duration> = takeovers.iter().map(|t| t.failover).collect();
    report.millis(format!("failover_ms_ttl_{ttl_ms}"), median(failovers.clone()));
    details
        .millis(
            format!("failover_max_ms_ttl_{ttl_ms}"),
            failovers.iter().max().copied().unwrap_or_default(),
        )
        .millis(
            format!("lease_remaining_ms_ttl_{ttl_ms}"),
            median(takeovers.iter().map(|t| t.lease_remaining).collect()),
        )
        .millis(
            format!("failover_after_expiry_ms_ttl_{ttl_ms}"),
            median(
                takeovers
                    .iter()
                    .map(|t| t.failover.saturating_sub(t.lease_remaining))
                    .collect(),
            ),
        );
}

/// Two workers, traffic, one SIGKILL, one takeover.
async fn trial(
    args: &FailoverArgs,
    redis: &BenchRedis,
    admin: &Client,
    ttl_ms: u64,
    trial: usize,
) -> Result<Takeover> {
    engine::delete_matching(admin, &FAILOVER_KEYS).await?;
    let mut workers = Vec::with_capacity(2);
    for name in ["a", "b"] {
        let instance = format!("failover-{ttl_ms}-{trial}-{name}-{}", std::process::id());
        let command = WorkerArgs::new(&instance, ttl_ms).command(redis.url(), redis.tls())?;
        workers.push((instance, spawn(command)?));
    }
    let publisher = tokio::spawn(publish(
        redis.url().to_owned(),
        redis.tls().files(),
        args.keys,
        args.rate,
    ));
    let result = kill_and_take_over(admin, &mut workers, ttl_ms, trial).await;
    publisher.abort();
    let published = publisher.await;
    for (_, worker) in workers {
        stop(worker).await?;
    }
    if let Ok(Err(error)) = published {
        return Err(error.context("publishing the trial's traffic failed"));
    }
    result
}

/// Waits until both workers handle events, kills `k0`'s owner and times
/// the survivor's takeover.
async fn kill_and_take_over(
    admin: &Client,
    workers: &mut Vec<(String, Process)>,
    ttl_ms: u64,
    trial: usize,
) -> Result<Takeover> {
    for (_, worker) in workers.iter_mut() {
        wait_for_line(worker, STARTUP_DEADLINE, |line| line.kind() == line::START).await?;
    }
    let lease_key = ordo_harness::keys::lease(WATCHED_KEY);
    // Kill at a different moment of the heartbeat and discovery cycles in
    // each trial, not right after an acquisition or a renewal.
    tokio::time::sleep(kill_delay(ttl_ms, trial)).await;
    let lease: Option<String> = admin.get(&lease_key).await?;
    let (owner, token) = lease
        .as_deref()
        // `{instance}:{nonce}:{token}`
        .and_then(|value| value.rsplit_once(':'))
        .and_then(|(owner, token)| Some((owner.rsplit_once(':')?.0.to_owned(), token.parse::<u64>().ok()?)))
        .with_context(|| format!("{WATCHED_KEY} has no lease while both workers run: {lease:?}"))?;
    let Some(victim) = workers.iter().position(|(instance, _)| *instance == owner) else {
        bail!("{WATCHED_KEY} is owned by {owner}, not by one of this trial's workers");
    };
    let (_, mut dead) = workers.remove(victim);
    // The owner handles k0's traffic under this token before it dies.
    wait_for_line(&mut dead, STARTUP_DEADLINE, |line| {
        line.kind() == line::START && line.key() == Some(WATCHED_KEY) && line.token() == Some(token)
    })
    .await?;

    let killed_at = Instant::now();
    let dead = tokio::task::spawn_blocking(move || dead.kill().map(|()| dead))
        .await
        .context("the task killing the owner panicked")??;
    // A lease lives as long as its holder's member key.
    let holder: Option<String> = admin.get(&lease_key).await?;
    let member = holder
        .as_deref()
        .and_then(ordo_redis::internals::names::lease_member)
        .unwrap_or_default();
    let pttl: i64 = admin.pttl(&member).await?;
    drop(dead);
    let lease_remaining = Duration::from_millis(pttl.max(0).unsigned_abs());

    let survivor = &mut workers[0].1;
    let deadline = Duration::from_millis(ttl_ms) + STARTUP_DEADLINE;
    let taken_at = wait_for_line(survivor, deadline, |line| {
        line.kind() == line::START
            && line.key() == Some(WATCHED_KEY)
            && line.token().is_some_and(|new| new > token)
    })
    .await
    .context("the survivor did not take the dead owner's key over")?;
    Ok(Takeover {
        failover: taken_at.saturating_duration_since(killed_at),
        lease_remaining,
    })
}

/// How long trial `trial` lets traffic flow before the kill: a second, plus
/// a fraction of the longer of the heartbeat (TTL / 5) and discovery (1 s)
/// periods that differs between trials (golden-ratio steps), so the kills
/// sample the cycles' phases evenly and reproducibly.
fn kill_delay(ttl_ms: u64, trial: usize) -> Duration {
    let period = Duration::from_millis((ttl_ms / 5).max(1_000));
    let phase = (0.5 + trial as f64 * 0.618_033_988_75).fract();
    Duration::from_secs(1) + period.mul_f64(phase)
}

fn spawn(command: Command) -> Result<Process> {
    Process::spawn(command).context("could not start a worker process")
}

/// Waits on a blocking thread for the worker's next line matching
/// `predicate`; returns when it was seen (right as it was read).
async fn wait_for_line(
    worker: &mut Process,
    deadline: Duration,
    predicate: impl Fn(&Line) -> bool,
) -> Result<Instant> {
    // `Process` blocks on a condition variable, woken as each line is read.
    tokio::task::block_in_place(|| {
        worker
            .wait_for_line(|text| Line::parse(text).is_some_and(|l| predicate(&l)), deadline)
            .map(|_| Instant::now())
            .map_err(anyhow::Error::from)
    })
}

/// Stops a worker gracefully (SIGTERM), or kills it if it does not exit.
async fn stop(mut worker: Process) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        if worker.terminate().is_ok() && worker.wait_timeout(Duration::from_secs(30))?.is_some() {
            return Ok(());
        }
        worker.kill()
    })
    .await
    .context("the task stopping a worker panicked")?
    .context("could not stop a worker")
}

/// Publishes `rate` [`Tick`]s per second over `keys` keys through a unit
/// of work and the outbox processor each, until aborted.
async fn publish(url: String, tls: TlsFiles, keys: NonZeroUsize, rate: f64) -> Result<()> {
    let config = Config::default();
    let broker = RedisBroker::builder(&url)
        .tls(tls)
        .config(config.clone())
        .build()
        .await?;
    let handler = TickHandler::new(broker.client().clone(), "bench-publisher");
    let domain = ordo_harness::worker::domain(broker, handler, config)?;
    let load = OfferedLoad {
        rate_per_s: rate,
        keys,
        max_events: u64::MAX,
        max_duration: Duration::from_secs(86_400),
    };
    load.run(|tick| {
        let domain = domain.clone();
        async move {
            let event = tick.event();
            let mut uow = domain.unit_of_work();
            uow.raise(Tick {
                key: event.key,
                seq: event.seq,
                poison: false,
                work_ms: 0,
                linger_ms: 0,
            })?;
            uow.commit().await?;
            let report = domain.publish_pending().await?;
            ensure!(report.failed == 0, "an outbox publish failed");
            Ok(())
        }
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_delays_spread_over_the_longer_cycle() {
        let ms = |trial| kill_delay(15_000, trial).as_millis();
        // Heartbeat every 3 s: delays between 1 s and 4 s, all different.
        let delays: Vec<u128> = (0..5).map(ms).collect();
        assert!(delays.iter().all(|d| (1_000..4_000).contains(d)), "{delays:?}");
        let mut distinct = delays.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), delays.len(), "{delays:?}");
        // Heartbeat every 0.4 s: the 1 s discovery period is the longer one.
        assert_eq!(kill_delay(2_000, 0), Duration::from_millis(1_500));
    }
}
