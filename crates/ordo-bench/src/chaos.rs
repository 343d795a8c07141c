//! `chaos`: proves Ordo's guarantee under faults, with real processes.
//!
//! A run starts its own Redis (append-only) unless `--redis-url` /
//! `REDIS_URL` names one, starts `--instances` engine instances as separate
//! OS processes (`ordo-bench worker`, see [`crate::worker`]), publishes numbered
//! events over `--keys` keys at a steady `--rate` through the outbox, and
//! meanwhile injects faults on a schedule seeded by `--seed`: SIGKILL of an
//! instance (and a fresh one), SIGSTOP for longer than the lease TTL then
//! SIGCONT (preferably while a handler is mid-run), graceful stops, joins,
//! and Redis restarts and crashes (skipped on a Redis named by URL). Some
//! events make their handler work for a while, so faults land mid-handler.
//!
//! At the end it stops publishing, lets the instances drain, stops them
//! gracefully and checks what they recorded with [`ordo_harness::verify`]:
//! every handler run marks itself in flight atomically (an overlap is a run
//! that finds another run of its key in flight under a valid lease) and
//! commits its effect under the lease's fencing token. The run fails if any
//! event was lost, applied out of order, applied twice, or overlapped
//! another of its key.
//!
//! With `--postgres` (or `--database-url`) the outbox is in PostgreSQL, the
//! workers run a relay each beside their engine, `--relays` more processes
//! run a relay only (hit by the `relay_kill` and `relay_stop` faults), and
//! the handlers' effects go to PostgreSQL through its fence: there,
//! `duplicates` must be 0 too (see [`postgres`]). The database is
//! `--database-url` / `DATABASE_URL`, or a private one the run starts; on a
//! private one the `db_outage` fault stops it for a while and starts it
//! again, and then no key may halt (the drain must resolve no halt).
//!
//! With `--commands` every instance also sends commands for a few keys
//! shared by all of them, and runs their handler (see
//! [`ordo_harness::commands`]): the same overlap detector and fenced
//! effects, and a check per sender that its commands of a key were applied
//! in send order, and that every command it got a success for was applied.
//!
//! The sequence of fault kinds and the gaps between them replay from the
//! seed; which instance a fault hits, and what it is doing then, depend on
//! timing.

mod controller;
mod duplicates;
mod failover_times;
mod fault;
mod fleet;
pub mod postgres;
mod proxy;
mod rng;
mod stuck;
mod traffic;

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use fred::clients::Pool;
use fred::interfaces::{ClientLike as _, ServerInterface as _};
use fred::types::config::ReconnectPolicy;
use ordo_harness::verify::{Applied, Verdict};
use ordo_testkit::{Redis, RedisCluster};

use self::controller::{Controller, Outcome, Parts, Plan};
pub use self::fault::FaultKind;
use self::fault::Schedule;
use self::fleet::{Fleet, WorkerSpec};
use self::postgres::{PgEffects, PgTarget};
use self::rng::Rng;
use self::traffic::TrafficPlan;
use crate::redis::{BenchRedis, RedisArgs};
use crate::report::Report;

/// Options of `ordo-bench chaos`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChaosArgs {
    /// Seconds of faults while traffic flows (then drain, stop, verify).
    #[arg(long, default_value = "120")]
    pub duration: NonZeroU64,
    /// Seed of the fault schedule and of the events' work; random (and
    /// printed) when not given.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Keys the events are spread over (round-robin), `k0`...
    #[arg(long, default_value = "32")]
    pub keys: NonZeroUsize,
    /// Engine instances at the start (joins add up to two more).
    #[arg(long, default_value = "3")]
    pub instances: NonZeroUsize,
    /// Events published per second, over all keys.
    #[arg(long, default_value = "200")]
    pub rate: NonZeroU64,
    /// The instances' lease TTL, short so that faults cycle quickly.
    #[arg(long, default_value = "2000")]
    pub lease_ttl_ms: NonZeroU64,
    /// Seconds between two faults, drawn uniformly from `MIN..MAX`.
    #[arg(long, default_value = "2..6", value_parser = parse_range, value_name = "MIN..MAX")]
    pub faults_every: (Duration, Duration),
    /// Percent of events whose handler run works for a while (so faults
    /// land mid-handler).
    #[arg(long, default_value = "10", value_parser = clap::value_parser!(u64).range(0..=100))]
    pub slow_percent: u64,
    /// The longest such work: each slow event works 1..=this many ms.
    #[arg(long, default_value = "400")]
    pub slow_work_ms: NonZeroU64,
    /// The kinds of fault to inject, comma-separated (default: all of
    /// kill, stop, term, join, redis_restart, redis_crash, conn_delay, and on
    /// a cluster of the run's own (--cluster) cluster_failover; conn_delay
    /// needs a single Redis; in the PostgreSQL mode relay_kill, relay_stop,
    /// and db_outage on a PostgreSQL of the run's own), to aim a run at one
    /// mechanism.
    #[arg(long, value_delimiter = ',', value_parser = parse_kind, value_name = "KIND,...")]
    pub faults: Vec<FaultKind>,
    /// Seconds the final publish may take, and the drain may go without an
    /// event applied (a slow drain that progresses goes on).
    #[arg(long, default_value = "60")]
    pub drain_timeout: NonZeroU64,
    /// The PostgreSQL mode: the outbox in PostgreSQL, relays in the worker
    /// processes (and in `--relays` relay-only processes), effects written
    /// through the PostgreSQL fence. On a private PostgreSQL unless
    /// `--database-url` names one.
    #[arg(long)]
    pub postgres: bool,
    /// The PostgreSQL of the PostgreSQL mode (implies `--postgres`); the run
    /// works in a schema of its own, dropped at the end.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<ordo_redis::SecretUrl>,
    /// Relay-only processes of the PostgreSQL mode (besides the relay in
    /// every worker), the targets of `relay_kill` and `relay_stop`.
    #[arg(long, default_value = "2")]
    pub relays: usize,
    /// The `chaos` category in N hashed partitions (`[categories.chaos]
    /// partitions = N`) instead of a partition per key: the keys share the
    /// partitions' leases, and the verdict is still per key.
    #[arg(long, value_name = "N", conflicts_with_all = ["postgres", "database_url"])]
    pub hashed: Option<NonZeroU32>,
    /// The handler's `ack_window`: each key's worker runs up to N messages
    /// ahead of their acknowledgements (per-key partitions only; 0: none).
    #[arg(long, value_name = "N", default_value_t = 0, conflicts_with = "hashed")]
    pub ack_window: u32,
    /// Commands too: every instance runs the harness's command handler and
    /// sends commands for `--command-keys` keys shared by all of them, one
    /// at a time per key, resending each under its id until it has an
    /// outcome. The run then also fails on `command_overlaps`,
    /// `command_order_violations` (a sender's commands of a key applied out
    /// of send order) and `command_lost` (a success without its effect).
    #[arg(long, conflicts_with_all = ["postgres", "database_url"])]
    pub commands: bool,
    /// The shared command keys of `--commands`, `c0`...
    #[arg(long, default_value = "8")]
    pub command_keys: NonZeroUsize,
}

impl ChaosArgs {
    /// Whether the run is in the PostgreSQL mode.
    pub fn postgres_mode(&self) -> bool {
        self.postgres || self.database_url.is_some()
    }
}

/// The kinds a run injects: those asked for (all if none), less what this
/// Redis cannot take (Redis faults need one of the run's own, a failover a
/// cluster, the per-connection delay a single Redis).
fn fault_kinds(
    asked: &[FaultKind],
    own_redis: bool,
    cluster: bool,
    relays: bool,
    own_database: bool,
) -> Vec<FaultKind> {
    FaultKind::ALL
        .into_iter()
        .filter(|kind| asked.is_empty() || asked.contains(kind))
        .filter(|kind| own_redis || !kind.needs_own_redis())
        .filter(|kind| relays || !kind.needs_postgres())
        .filter(|kind| own_database || !kind.needs_own_database())
        .filter(|kind| {
            if cluster {
                !kind.needs_single_node()
            } else {
                !kind.needs_cluster()
            }
        })
        .collect()
}

/// Parses a fault kind by its report name.
fn parse_kind(text: &str) -> Result<FaultKind, String> {
    FaultKind::ALL
        .into_iter()
        .find(|kind| kind.name() == text.trim())
        .ok_or_else(|| {
            let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
            format!("`{text}` is not a fault kind; the kinds are {}", names.join(", "))
        })
}

/// Parses `MIN..MAX` seconds (decimals allowed), `0 < MIN <= MAX`.
fn parse_range(text: &str) -> Result<(Duration, Duration), String> {
    let (min, max) = text
        .split_once("..")
        .ok_or_else(|| format!("`{text}` is not MIN..MAX (seconds), e.g. 2..6"))?;
    let seconds = |part: &str| -> Result<Duration, String> {
        let value: f64 = part
            .trim()
            .parse()
            .map_err(|_| format!("`{part}` in `{text}` is not a number of seconds"))?;
        Duration::try_from_secs_f64(value)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("`{part}` in `{text}` is not a positive number of seconds"))
    };
    let (min, max) = (seconds(min)?, seconds(max)?);
    if min > max {
        return Err(format!("`{text}`: MIN is above MAX"));
    }
    Ok((min, max))
}

/// Runs the checker and reports what it found.
pub async fn run(args: &ChaosArgs, redis: &RedisArgs) -> Result<Report> {
    let seed = args.seed.unwrap_or_else(random_seed);
    let mut server = redis
        .start_with(
            Redis::builder().append_only(true),
            RedisCluster::builder().append_only(true).replicas(true),
        )
        .await?;
    let own_redis = server.server_mut().is_some() || server.cluster_mut().is_some();
    let cluster = server.is_cluster();
    eprintln!(
        "chaos: seed {seed}; {} instances, {} keys ({}), {} events/s, lease TTL {} ms, faults every {:?}..{:?}, \
         for {} s on {} Redis at {}",
        args.instances,
        args.keys,
        args.hashed.map_or_else(
            || "a partition per key".to_owned(),
            |n| format!("in {n} hashed partitions")
        ),
        args.rate,
        args.lease_ttl_ms,
        args.faults_every.0,
        args.faults_every.1,
        args.duration,
        match (own_redis, cluster) {
            (true, false) => "its own (append-only)",
            (true, true) => "its own cluster (append-only, one replica per primary)",
            (false, _) => "an external",
        },
        server.url(),
    );
    let client = connect(&server).await?;
    if !own_redis {
        let size: u64 = client.dbsize().await.context("could not read DBSIZE")?;
        ensure!(
            size == 0,
            "the Redis at {} holds {size} keys: a chaos run needs an empty database (its records would \
             mix with what is there); point it at an empty one or let it start its own",
            server.url()
        );
    }
    let interrupted = on_interrupt();
    let database = if args.postgres_mode() {
        Some(Database::start(args).await?)
    } else {
        None
    };
    let parts = parts(
        args,
        seed,
        server,
        client,
        own_redis,
        database.as_ref(),
        interrupted,
    )?;
    let outcome = tokio::task::spawn_blocking(move || Controller::new(parts).run())
        .await
        .context("the chaos controller panicked");
    if let Some(database) = database {
        database.target.drop_schema(&database.pool).await?;
        // Closed before a private server stops, which would end them noisily.
        database.pool.close().await;
    }
    Ok(report(args, seed, (own_redis, cluster), &outcome??))
}

/// The PostgreSQL of a run in the PostgreSQL mode, with the run's schema.
struct Database {
    /// A private server, alive for the run (the `db_outage` fault stops and
    /// starts it).
    server: Option<Arc<std::sync::Mutex<ordo_testkit::Postgres>>>,
    target: PgTarget,
    pool: ordo_postgres::sqlx::PgPool,
}

impl Database {
    /// `--database-url`, or a private server; the run's schema created.
    async fn start(args: &ChaosArgs) -> Result<Self> {
        let (server, url) = match args
            .database_url
            .as_ref()
            .filter(|u| !u.expose().trim().is_empty())
        {
            Some(url) => (None, url.clone()),
            None => {
                let server = tokio::task::spawn_blocking(ordo_testkit::Postgres::start_local)
                    .await
                    .context("the task starting PostgreSQL panicked")?
                    .context(
                        "could not start a private PostgreSQL (or pass --database-url / set DATABASE_URL)",
                    )?;
                let url = ordo_redis::SecretUrl::new(server.url());
                (Some(server), url)
            }
        };
        let target = PgTarget {
            url,
            schema: format!("ordo_chaos_{}", std::process::id()),
        };
        let pool = target.connect(4).await?;
        target.prepare(&pool).await?;
        eprintln!(
            "chaos: PostgreSQL mode on {} at {}, schema {}",
            if server.is_some() {
                "a private PostgreSQL"
            } else {
                "the PostgreSQL"
            },
            target.url,
            target.schema
        );
        Ok(Self {
            server: server.map(|server| Arc::new(std::sync::Mutex::new(server))),
            target,
            pool,
        })
    }
}

/// Everything the controller needs.
fn parts(
    args: &ChaosArgs,
    seed: u64,
    redis: BenchRedis,
    client: Pool,
    own_redis: bool,
    database: Option<&Database>,
    interrupted: Arc<AtomicBool>,
) -> Result<Parts> {
    let lease_ttl = Duration::from_millis(args.lease_ttl_ms.get());
    let cluster = redis.is_cluster();
    let keys = ordo_harness::publisher::key_names(args.keys.get());
    let relays = database.is_some() && args.relays > 0;
    let own_database = database.is_some_and(|d| d.server.is_some());
    let kinds = fault_kinds(&args.faults, own_redis, cluster, relays, own_database);
    ensure!(
        !kinds.is_empty(),
        "no fault left to inject: Redis faults need a Redis of the run's own (no --redis-url), \
         cluster_failover a cluster of its own (--cluster), conn_delay a single Redis"
    );
    // On a single Redis the instances reach it through the per-connection
    // fault's proxy; the publisher and the checker's own client go direct.
    // A cluster client follows the addresses the cluster announces, so on a
    // cluster everyone goes direct.
    let runtime = tokio::runtime::Handle::current();
    let proxy = if cluster {
        None
    } else {
        Some(self::proxy::ConnProxy::start(&runtime, redis.url())?)
    };
    let postgres = database.map(|d| d.target.clone());
    let config = ordo_harness::tick::config(args.hashed);
    let records = ordo_harness::keys::Records::new(ordo_redis::Routing::new(&config));
    let spec = WorkerSpec {
        redis_url: match &proxy {
            Some(proxy) => proxy.url_for(redis.url())?.into(),
            None => redis.url().into(),
        },
        tls: redis.tls().clone(),
        lease_ttl_ms: args.lease_ttl_ms.get(),
        postgres: postgres.clone(),
        relay_only: false,
        hashed: args.hashed,
        command_keys: if args.commands { args.command_keys.get() } else { 0 },
        ack_window: args.ack_window,
    };
    let relay_spec = WorkerSpec {
        relay_only: true,
        ..spec.clone()
    };
    let drain_within = Duration::from_secs(args.drain_timeout.get());
    // The publisher commits under it; a database outage waits for it.
    let gate = Arc::new(tokio::sync::RwLock::new(()));
    Ok(Parts {
        plan: Plan {
            duration: Duration::from_secs(args.duration.get()),
            lease_ttl,
            instances: args.instances.get(),
            relays: if database.is_some() { args.relays } else { 0 },
            keys: keys.clone(),
            drain_within,
            records,
            command_keys: if args.commands {
                ordo_harness::commands::command_key_names(args.command_keys.get())
            } else {
                Vec::new()
            },
            command_records: ordo_harness::keys::CommandRecords::new(ordo_redis::Routing::new(&config)),
        },
        runtime,
        client,
        proxy,
        traffic: TrafficPlan {
            redis_url: redis.url().into(),
            tls: redis.tls().clone(),
            keys,
            rate: args.rate.get(),
            slow_percent: args.slow_percent,
            slow_work_ms: args.slow_work_ms.get(),
            rng: Rng::derived(seed, 1),
            settle_within: drain_within,
            postgres,
            config,
            gate: gate.clone(),
        },
        database: database.and_then(|d| d.server.clone()),
        gate,
        redis,
        fleet: Fleet::new(spec),
        relays: Fleet::new(relay_spec),
        effects: database.map(|d| PgEffects::new(d.pool.clone(), d.target.schema.clone())),
        schedule: Schedule::new(Rng::derived(seed, 2), kinds, args.faults_every),
        choices: Rng::derived(seed, 3),
        interrupted,
    })
}

/// The figures, and the failures that make the exit status non-zero.
/// `redis` is (the run's own Redis, a cluster).
fn report(args: &ChaosArgs, seed: u64, redis: (bool, bool), outcome: &Outcome) -> Report {
    let verdict = &outcome.verdict;
    let lost = Lost::of(verdict);
    let mut report = Report::new();
    report
        .count("events", verdict.events)
        .count("keys", verdict.keys)
        .count("instances", args.instances.get() as u64)
        .count("instances_started", outcome.instances_started)
        .text(
            "outbox",
            if args.postgres_mode() {
                "postgres (relays in the workers, effects through the PostgreSQL fence)"
            } else {
                "in memory (effects through the Redis fence)"
            },
        )
        .text(
            "partitions",
            args.hashed
                .map_or_else(|| "per_key".to_owned(), |n| n.to_string()),
        )
        .count("relays_started", outcome.relays_started)
        .count("faults_injected", outcome.faults.total());
    for kind in FaultKind::ALL {
        report.count(format!("faults_{kind}"), outcome.faults.of(kind));
    }
    report
        .count("faults_mid_handler", outcome.faults.mid_handler)
        .count("faults_skipped", outcome.faults.skipped)
        .text(
            "redis_faults",
            match redis {
                (true, false) => "injected (own Redis, appendonly yes, appendfsync everysec)",
                (true, true) => {
                    "injected (own cluster: 3 primaries with a replica each, appendonly yes, appendfsync everysec)"
                }
                (false, _) => "skipped (external Redis)",
            },
        )
        .count("overlaps", verdict.overlaps)
        .count("order_violations", verdict.order_violations)
        .count("lost", verdict.lost)
        .count("lost_gaps", lost.gaps)
        .count("lost_tail", lost.tail)
        .count("duplicates", verdict.duplicates)
        .count("duplicates_same_token", outcome.duplicates.same_token())
        .count("duplicates_failover", outcome.duplicates.failover)
        .count("duplicates_recommitted", outcome.duplicates.recommitted)
        .count("duplicates_retried", outcome.duplicates.retried)
        .count("duplicates_redelivered", outcome.duplicates.redelivered)
        .count("token_regressions", verdict.token_regressions)
        .count("unexpected", verdict.unexpected)
        .count("reruns", verdict.reruns)
        .count("stale_starts", verdict.stale_starts)
        .count("fenced_commits", outcome.lines.fenced)
        .count("handler_failures", outcome.lines.failed)
        .count("unexpected_exits", outcome.unexpected_exits)
        .count("stop_timeouts", outcome.stop_timeouts)
        .count("halts_resolved", outcome.halts_resolved.partitions)
        .count("parked_keys_resolved", outcome.halts_resolved.parked_keys)
        .count("failovers", outcome.failovers.measured)
        .count("failovers_disturbed", outcome.failovers.disturbed)
        .count("failovers_open", outcome.failovers.open);
    if let Some(commands) = &outcome.commands {
        report
            .count("command_keys", commands.keys)
            .count("commands_ok", commands.commands_ok)
            .count("command_effects", commands.effects)
            .count("command_overlaps", commands.overlaps)
            .count("command_order_violations", commands.order_violations)
            .count("command_lost", commands.lost)
            .count("command_token_regressions", commands.token_regressions)
            .count("command_wrong_replies", commands.wrong_replies)
            .count("command_reruns", commands.reruns)
            .count("command_abandoned", commands.abandoned)
            .count("command_abandoned_late", commands.abandoned_late)
            .count("commands_failed", commands.failed)
            .count("commands_failed_but_applied", commands.failed_but_applied)
            .count("command_resends", commands.resends)
            .count("command_stale_starts", commands.stale_starts)
            .count("command_fenced_commits", outcome.lines.cmd_fenced)
            .count("command_run_failures", outcome.lines.cmd_failed);
    }
    let millis = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64() * 1_000.0);
    report
        .push(
            "max_failover_ms",
            crate::Figure::Millis(millis(outcome.failovers.slowest.as_ref().map(|m| m.took))),
        )
        .push(
            "median_failover_ms",
            crate::Figure::Millis(millis(outcome.failovers.median)),
        )
        .count("lease_ttl_ms", args.lease_ttl_ms.get())
        .count("ack_window", u64::from(args.ack_window))
        .millis("chaos_ms", outcome.chaos)
        .millis("drain_ms", outcome.drain)
        .count("seed", seed);
    for (name, value) in [
        ("overlaps", verdict.overlaps),
        ("order_violations", verdict.order_violations),
        ("token_regressions", verdict.token_regressions),
        ("unexpected", verdict.unexpected),
    ] {
        if value > 0 {
            report.fail(format!("{name}: {value} (seed {seed})"));
        }
    }
    if let Some(commands) = &outcome.commands {
        for (name, value) in [
            ("command_overlaps", commands.overlaps),
            ("command_order_violations", commands.order_violations),
            ("command_lost", commands.lost),
            ("command_token_regressions", commands.token_regressions),
            ("command_wrong_replies", commands.wrong_replies),
        ] {
            if value > 0 {
                report.fail(format!("{name}: {value} (seed {seed})"));
            }
        }
        if commands.commands_ok == 0 {
            report.fail(format!(
                "commands_ok: 0 (seed {seed}): no command got a success, so none was checked"
            ));
        }
    }
    let outages = outcome.faults.of(FaultKind::DbOutage);
    let halts = outcome.halts_resolved.partitions + outcome.halts_resolved.parked_keys;
    if outages > 0 && halts > 0 {
        report.fail(format!(
            "halts: {halts} keys halted in a run with {outages} database outages (seed {seed}): \
             a dependency outage is transient and must not halt a key"
        ));
    }
    if args.postgres_mode() && verdict.duplicates > 0 {
        report.fail(format!(
            "duplicates: {} (seed {seed}): effects through the PostgreSQL fence must apply exactly once",
            verdict.duplicates
        ));
    } else if verdict.duplicates > 0 {
        // Even a crash of Redis that loses its last writes takes a commit's
        // effects and its record back together (ordo-model's `aof`).
        report.fail(format!(
            "duplicates: {} (seed {seed}): effects through the Redis fence must apply exactly once",
            verdict.duplicates
        ));
    }
    if verdict.lost > 0 {
        report.fail(format!(
            "lost: {} (seed {seed}): {} gaps (a later event of the key was applied), {} at the tail \
             (a partition stopped making progress)",
            verdict.lost, lost.gaps, lost.tail
        ));
    }
    if outcome.raised != verdict.events {
        report.fail(format!(
            "the publisher raised {} events but {} were recorded as published",
            outcome.raised, verdict.events
        ));
    }
    if !report.failures().is_empty() {
        describe_problems(outcome);
    } else if outcome.commands.as_ref().is_some_and(|c| c.failed > 0) {
        // Not a breach by itself, but worth seeing: why commands failed.
        describe_command_problems(outcome);
    }
    report
}

/// Lost events, told apart by where they are in their key's sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Lost {
    /// Below the key's highest applied seq: a hole in the applied sequence.
    gaps: u64,
    /// Above it: the key never got that far.
    tail: u64,
}

impl Lost {
    fn of(verdict: &Verdict) -> Self {
        let mut lost = Lost::default();
        for report in verdict.per_key.values() {
            let highest = report.applied.iter().map(|a| a.seq).max();
            for &seq in &report.lost {
                if highest.is_some_and(|highest| seq < highest) {
                    lost.gaps += 1;
                } else {
                    lost.tail += 1;
                }
            }
        }
        lost
    }
}

/// On stderr, the records of every key with a problem, and the overlap log.
fn describe_problems(outcome: &Outcome) {
    for (key, r) in &outcome.verdict.per_key {
        if r.lost.is_empty() && r.order_violations == 0 && r.token_regressions == 0 && r.unexpected.is_empty()
        {
            continue;
        }
        eprintln!(
            "{key}: lost {}, order_violations {}, token_regressions {}, duplicates {:?}, unexpected {:?}\n  \
             applied (runs of seq@token, in commit order): {}",
            seq_ranges(&r.lost),
            r.order_violations,
            r.token_regressions,
            r.duplicates,
            r.unexpected,
            runs(&r.applied)
        );
    }
    for entry in &outcome.overlap_log {
        eprintln!("overlap: {entry}");
    }
    describe_command_problems(outcome);
}

/// On stderr, the records of every command key with a problem, the
/// failure outcomes the senders got, and the commands' overlap log.
fn describe_command_problems(outcome: &Outcome) {
    let Some(commands) = &outcome.commands else {
        return;
    };
    for (key, r) in &commands.per_key {
        if r.lost.is_empty()
            && r.order_violations == 0
            && r.token_regressions == 0
            && r.wrong_replies.is_empty()
        {
            continue;
        }
        let effects: Vec<String> = r
            .effects
            .iter()
            .map(|e| format!("{}:{}@{}", e.sender, e.seq, e.token))
            .collect();
        eprintln!(
            "command key {key}: lost {:?}, order_violations {}, token_regressions {}, wrong replies {:?}\n  \
             effects (sender:seq@token, in commit order): {}",
            r.lost,
            r.order_violations,
            r.token_regressions,
            r.wrong_replies,
            effects.join(" ")
        );
    }
    for (key, r) in &commands.per_key {
        for failed in &r.failed {
            let applied = if r.failed_but_applied.contains(failed) {
                "APPLIED all the same"
            } else {
                "not applied"
            };
            eprintln!("command key {key}: failure outcome ({applied}) {failed}");
        }
    }
    for entry in &outcome.command_overlap_log {
        eprintln!("command overlap: {entry}");
    }
}

/// Applied effects as runs of consecutive seqs under one token
/// (`0..=12@T1 13@T2 12..=20@T2`): short, and every change of owner,
/// repeat or step back shows.
fn runs(applied: &[Applied]) -> String {
    let mut runs: Vec<(u64, u64, u64)> = Vec::new();
    for a in applied {
        match runs.last_mut() {
            Some((_, last, token)) if a.seq == *last + 1 && a.token == *token => *last = a.seq,
            _ => runs.push((a.seq, a.seq, a.token)),
        }
    }
    let text: Vec<String> = runs
        .iter()
        .map(|&(first, last, token)| format!("{}@{token}", range(first, last)))
        .collect();
    text.join(" ")
}

/// Seqs as ranges of consecutive ones: `[1..=4, 9]`.
fn seq_ranges(seqs: &[u64]) -> String {
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for &seq in seqs {
        match ranges.last_mut() {
            Some((_, last)) if seq == *last + 1 => *last = seq,
            _ => ranges.push((seq, seq)),
        }
    }
    let text: Vec<String> = ranges.iter().map(|&(first, last)| range(first, last)).collect();
    format!("[{}]", text.join(", "))
}

fn range(first: u64, last: u64) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}..={last}")
    }
}

/// A client that reconnects across Redis restarts.
async fn connect(redis: &BenchRedis) -> Result<Pool> {
    let mut builder = crate::redis::builder(redis.url(), redis.tls())?;
    builder.set_policy(ReconnectPolicy::new_exponential(0, 100, 1_000, 2));
    let pool = builder.build_pool(2)?;
    pool.init()
        .await
        .with_context(|| format!("could not connect to Redis at {}", redis.url()))?;
    Ok(pool)
}

/// A flag set on SIGINT or SIGTERM, so the run stops its processes (and its
/// Redis) instead of leaving them behind.
fn on_interrupt() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let set = Arc::clone(&flag);
    tokio::spawn(async move {
        let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        set.store(true, Ordering::Relaxed);
    });
    flag
}

/// A seed from the clock and the process id.
fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos ^ u64::from(std::process::id()).rotate_left(32)).next_u64()
}

#[cfg(test)]
mod tests {
    use ordo_harness::verify::KeyReport;

    use super::*;

    #[test]
    fn applied_effects_print_as_runs_under_one_token() {
        let applied = [(0, 1), (1, 1), (2, 1), (3, 5), (3, 5), (2, 5), (3, 5)]
            .map(|(seq, token)| Applied { seq, token });
        assert_eq!(runs(&applied), "0..=2@1 3@5 3@5 2..=3@5");
        assert_eq!(runs(&[]), "");
        assert_eq!(seq_ranges(&[1, 2, 3, 4, 9, 11, 12]), "[1..=4, 9, 11..=12]");
    }

    #[test]
    fn lost_events_below_the_highest_applied_are_gaps_the_rest_a_tail() {
        let key = |applied: &[u64], lost: &[u64]| KeyReport {
            applied: applied.iter().map(|&seq| Applied { seq, token: 1 }).collect(),
            lost: lost.to_vec(),
            ..KeyReport::default()
        };
        let mut verdict = Verdict::default();
        verdict
            .per_key
            .insert("a".to_owned(), key(&[0, 2, 3], &[1, 4, 5]));
        verdict.per_key.insert("b".to_owned(), key(&[], &[0, 1]));
        assert_eq!(Lost::of(&verdict), Lost { gaps: 1, tail: 4 });
    }

    #[test]
    fn each_redis_gets_the_faults_it_can_take() {
        use FaultKind::*;
        let instance_faults = [Kill, Stop, Term, Join];
        let own_single = fault_kinds(&[], true, false, false, false);
        assert_eq!(
            own_single,
            [Kill, Stop, Term, Join, RedisRestart, RedisCrash, ConnDelay]
        );
        let own_cluster = fault_kinds(&[], true, true, false, false);
        assert_eq!(
            own_cluster,
            [Kill, Stop, Term, Join, RedisRestart, RedisCrash, ClusterFailover]
        );
        assert_eq!(
            fault_kinds(&[], false, false, false, false),
            [Kill, Stop, Term, Join, ConnDelay]
        );
        assert_eq!(fault_kinds(&[], false, true, false, false), instance_faults);
        assert_eq!(
            fault_kinds(&[ClusterFailover, Kill], true, false, false, false),
            [Kill]
        );
        assert!(fault_kinds(&[ConnDelay], true, true, false, false).is_empty());
        // Relay faults only where relay-only processes run (PostgreSQL mode).
        assert_eq!(
            fault_kinds(&[], false, false, true, false),
            [Kill, Stop, Term, Join, ConnDelay, RelayKill, RelayStop]
        );
        assert!(fault_kinds(&[RelayKill], true, false, false, false).is_empty());
        // The database outage only on a PostgreSQL of the run's own.
        assert!(fault_kinds(&[], false, false, true, true).contains(&DbOutage));
        assert!(fault_kinds(&[DbOutage], true, false, true, false).is_empty());
    }

    #[test]
    fn fault_kinds_parse_by_name() {
        assert_eq!(parse_kind("redis_crash"), Ok(FaultKind::RedisCrash));
        assert_eq!(parse_kind(" kill"), Ok(FaultKind::Kill));
        assert_eq!(parse_kind("cluster_failover"), Ok(FaultKind::ClusterFailover));
        assert_eq!(parse_kind("relay_stop"), Ok(FaultKind::RelayStop));
        assert_eq!(parse_kind("db_outage"), Ok(FaultKind::DbOutage));
        assert!(FaultKind::RelayKill.needs_postgres() && !FaultKind::Kill.needs_postgres());
        assert!(parse_kind("nap").unwrap_err().contains("kill, stop, term"));
    }

    #[test]
    fn fault_gaps_parse_as_seconds() {
        let secs = Duration::from_secs_f64;
        assert_eq!(parse_range("2..6"), Ok((secs(2.0), secs(6.0))));
        assert_eq!(parse_range("0.5..0.5"), Ok((secs(0.5), secs(0.5))));
        assert!(parse_range("6..2").unwrap_err().contains("MIN is above MAX"));
        assert!(parse_range("0..2").unwrap_err().contains("positive"));
        assert!(parse_range("2-6").unwrap_err().contains("MIN..MAX"));
        assert!(parse_range("a..6").unwrap_err().contains("not a number"));
    }
}
