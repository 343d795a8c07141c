//! `commands`: commands sent across instances on the Redis broker, against
//! the same commands run in process on the inline broker.
//!
//! Three parts, in one run, each with its own keys:
//!
//! 1. Round trip at a fixed offered load. Instance A only sends (it
//!    registers the handler by type and runs `start_publisher`, so it owns
//!    no partition); instance B (`start`) owns every command partition.
//!    After `--warmup-s` of the same load, [`OfferedLoad`] sends `--rate`
//!    commands per second over `--keys` keys for `--duration-s`, each one a
//!    task of its own so a slow reply never delays the next command; the
//!    time from the call to `send` to its reply gives
//!    `command_rtt_p50_ms` / `_p99_ms`. Every reply must come from B. Then
//!    B sends the same load itself: it owns every partition, so its
//!    commands run in place, with no Redis call (`local_owner_rtt_p50_ms`).
//!    Last, A alone runs the closed loop of part 2 (below) on keys of its
//!    own: every command crosses to B (`remote_commands_per_s`,
//!    `remote_rtt_p50_ms`, `remote_cpu_us_per_command`,
//!    `remote_redis_cpu_us_per_command`).
//! 2. Closed loop over two instances, both started, so each owns part of
//!    the partitions: `--senders` tasks split over the two instances, each
//!    sending its own key's next command as soon as the previous one
//!    replied. Commands completed over `--duration-s` after `--warmup-s`
//!    give `commands_per_s`. A sender whose instance owns its key's
//!    partition has its commands run in place, the others go through
//!    Redis: `closed_loop_local_share` is the share of commands run in
//!    place (more than the share of such senders, since they go faster),
//!    `closed_loop_remote_commands_per_s` and `closed_loop_remote_rtt_*` the
//!    commands that crossed instances. This process's CPU time (both
//!    instances and the senders) and Redis's (`INFO cpu`) over the same
//!    window, divided by those commands, give `cpu_us_per_command` and
//!    `redis_cpu_us_per_command`; what Redis's `used_memory` grew by over
//!    the window, per command, is `redis_bytes_per_command` (the outcome
//!    records, kept for `[commands] dedup_window_ms`, and the streams'
//!    entries); `INFO commandstats` gives `redis_calls_per_command` and
//!    `redis_top_commands` (the commands scripts run included). Part 1
//!    prints these too: its closed loop all of them (`remote_*`), its
//!    offered loads the calls (`command_rtt_*`, `local_owner_*`).
//! 3. The same closed loop on one inline domain (no broker, the command
//!    runs in the sending process): `inline_commands_per_s`,
//!    `inline_rtt_p50_ms`, `inline_cpu_us_per_command`, the baseline.
//!
//! Every reply is checked: the handler answers with the command's key and
//! number, a value computed from them, the instance that ran it and the
//! number of the key's previous command it ran. A reply that does not match
//! its command fails the run, and so does, in the closed loops (one sender
//! per key, so each key's commands are sent one after another), a command
//! that did not run right after its key's previous one.

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use fred::prelude::ClientLike as _;
use ordo::contract::handler::HandlerContext;
use ordo::{Aggregate, Command, command_handler};
use ordo_core::contract::config::Config;
use ordo_core::runtime::domain::{Domain, RunningDomain};
use ordo_redis::RedisBroker;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::engine;
use crate::latency::LatencyRecorder;
use crate::load::{LoadOutcome, OfferedLoad};
use crate::redis::BenchRedis;
use crate::redis_info::{self, CommandStats};
use crate::report::{Report, rate};

/// The keys this benchmark leaves in Redis: its command partitions (tagged
/// `{benchcmd.commands:...}`, their outcome records included), the
/// category's per-slot and directory keys, and the reply lists of its
/// instances (named `bench-cmd-...`). The command group's instance set
/// (`ordo:instances:commands`) is every application's: its instances leave
/// it when they shut down.
pub const COMMAND_KEYS: [&str; 4] = [
    "benchcmd*",
    "{benchcmd*",
    "{*}:benchcmd*",
    "{ordo:replies:bench-cmd-*",
];

/// Options of `ordo-bench commands`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommandsArgs {
    /// Offered load of the round-trip part, commands per second.
    #[arg(long, default_value = "1000")]
    pub rate: f64,
    /// Keys (command partitions) the commands are spread over.
    #[arg(long, default_value = "64")]
    pub keys: NonZeroUsize,
    /// Concurrent senders of the closed loops (sender `i` sends to key
    /// `i % keys`).
    #[arg(long, default_value = "64")]
    pub senders: NonZeroUsize,
    /// How long each part measures.
    #[arg(long, default_value = "5")]
    pub duration_s: f64,
    /// How long each part runs before it measures (partitions acquired,
    /// connections warm).
    #[arg(long, default_value = "2")]
    pub warmup_s: f64,
}

/// The aggregate of the benchmark's commands (its command partitions are
/// `{benchcmd.commands:<key>}`).
#[derive(Debug, Clone, Copy, Default, Aggregate)]
#[aggregate(category = "benchcmd")]
pub struct CommandBench;

/// The benchmark command: key `key`'s command number `seq`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Command)]
#[command(part_of = CommandBench)]
pub struct Stamp {
    /// The key: the routing key, so the command partition.
    #[routing_key]
    pub key: String,
    /// The command's number within its key, from 0.
    pub seq: u64,
}

/// What the handler answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamped {
    /// The command's key.
    pub key: String,
    /// The command's number.
    pub seq: u64,
    /// [`Stamped::check_of`] the key and number, computed by the handler.
    pub check: u64,
    /// The instance that ran the command.
    pub instance: String,
    /// The number of the command of this key that ran before it, if any.
    pub previous: Option<u64>,
}

impl Stamped {
    /// The value a correct reply carries for `key`'s command `seq`.
    pub fn check_of(key: &str, seq: u64) -> u64 {
        key.bytes()
            .fold(seq.wrapping_mul(0x9E37_79B9_7F4A_7C15), |acc, byte| {
                acc.rotate_left(7) ^ u64::from(byte)
            })
    }

    /// Whether this reply answers `command` (its previous command aside).
    fn answers(&self, command: &Stamp) -> bool {
        self.key == command.key
            && self.seq == command.seq
            && self.check == Self::check_of(&command.key, command.seq)
    }
}

/// The last command number run per key, shared by the handlers of every
/// instance of a part (they are in this process): the order check.
#[derive(Debug, Default)]
pub struct KeyLog(Mutex<HashMap<String, u64>>);

impl KeyLog {
    /// Records that `key`'s command `seq` ran; the one that ran before it.
    fn ran(&self, key: &str, seq: u64) -> Option<u64> {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match last.get_mut(key) {
            Some(previous) => Some(std::mem::replace(previous, seq)),
            None => {
                last.insert(key.to_owned(), seq);
                None
            }
        }
    }
}

/// The benchmark's command handler: stamps each command with its instance.
#[derive(Debug)]
pub struct Stamper {
    instance: String,
    log: Arc<KeyLog>,
}

#[command_handler(part_of = CommandBench, name = "OrdoBenchCommands")]
impl Stamper {
    #[handle]
    async fn stamp(&self, command: &Stamp, _ctx: &HandlerContext) -> anyhow::Result<Stamped> {
        Ok(Stamped {
            key: command.key.clone(),
            seq: command.seq,
            check: Stamped::check_of(&command.key, command.seq),
            instance: self.instance.clone(),
            previous: self.log.ran(&command.key, command.seq),
        })
    }
}

/// Runs the three parts and reports their figures.
pub async fn run(args: &CommandsArgs, redis: &BenchRedis) -> Result<Report> {
    for (name, seconds) in [("--duration-s", args.duration_s), ("--warmup-s", args.warmup_s)] {
        ensure!(
            seconds.is_finite() && seconds >= 0.0,
            "{name} must be a number of seconds, not {seconds}"
        );
    }
    let admin = redis.client().await?;
    engine::delete_matching(&admin, &COMMAND_KEYS).await?;
    let result = measure(args, redis, &admin).await;
    engine::delete_matching(&admin, &COMMAND_KEYS).await?;
    result
}

async fn measure(args: &CommandsArgs, redis: &BenchRedis, admin: &fred::clients::Client) -> Result<Report> {
    let mut report = Report::new();
    round_trip(args, redis, admin, &mut report)
        .await
        .context("the round-trip part failed")?;
    closed_loop_remote(args, redis, admin, &mut report)
        .await
        .context("the closed loop over two instances failed")?;
    closed_loop_inline(args, &mut report)
        .await
        .context("the closed loop on the inline broker failed")?;
    report
        .count("keys", args.keys.get() as u64)
        .count("senders", args.senders.get() as u64);
    Ok(report)
}

/// One instance of a part: its broker and its domain.
struct Instance {
    id: String,
    broker: RedisBroker,
    domain: Domain,
}

impl Instance {
    /// Connects instance `id`; with `log`, it runs [`Stamper`] itself,
    /// without, it registers the handler by type (only sends).
    async fn connect(redis: &BenchRedis, id: String, log: Option<Arc<KeyLog>>) -> Result<Self> {
        let config = Config::default();
        let broker = RedisBroker::builder(redis.url())
            .tls(redis.tls().files())
            .config(config.clone())
            .instance_id(&id)
            .build()
            .await
            .with_context(|| format!("could not start the Redis broker of instance {id}"))?;
        let builder = Domain::builder().aggregate::<CommandBench>();
        let builder = match log {
            Some(log) => builder.command_handler(Stamper {
                instance: id.clone(),
                log,
            }),
            None => builder.command_handler_type::<Stamper>(),
        };
        let domain = builder
            .broker(broker.clone())
            .config(config)
            .init()
            .context("the benchmark domain was refused")?;
        Ok(Self { id, broker, domain })
    }

    /// Shuts `running` (this instance's) down and closes the connections.
    async fn stop(&self, running: RunningDomain) -> Result<()> {
        running
            .shutdown()
            .await
            .with_context(|| format!("instance {} did not shut down cleanly", self.id))?;
        self.broker
            .client()
            .quit()
            .await
            .context("could not close the broker's connections")
    }
}

/// The name of key `index` of part `part`.
fn key(part: &str, index: usize) -> String {
    format!("{part}-k{index}")
}

/// Sends `command` and checks that the reply answers it.
async fn send_checked(domain: &Domain, command: Stamp) -> Result<Stamped> {
    let reply: Stamped = domain
        .send(command.clone())
        .await
        .with_context(|| format!("command {} of {} failed", command.seq, command.key))?;
    ensure!(
        reply.answers(&command),
        "the reply {reply:?} does not answer {command:?}"
    );
    Ok(reply)
}

/// Part 1: A sends at a fixed rate, B owns and runs every command; then B
/// sends at the same rate to the partitions it owns itself; then A runs the
/// closed loop alone, every command crossing to B.
async fn round_trip(
    args: &CommandsArgs,
    redis: &BenchRedis,
    admin: &fred::clients::Client,
    report: &mut Report,
) -> Result<()> {
    let pid = std::process::id();
    let log = Arc::new(KeyLog::default());
    let sender = Instance::connect(redis, format!("bench-cmd-a-{pid}"), None).await?;
    let owner = Instance::connect(redis, format!("bench-cmd-b-{pid}"), Some(log)).await?;
    let sending = sender.domain.start_publisher();
    let owning = owner.domain.start();
    let measured = async {
        let before = RedisUse::read(admin).await?;
        let remote = offered_load(args, &sender.domain, &owner.id, "rtt", 0).await?;
        let between = RedisUse::read(admin).await?;
        // The same keys, numbered on: B owns all of them by now.
        let next = remote.0.sent.div_ceil(args.keys.get() as u64) * args.keys.get() as u64;
        let local = offered_load(args, &owner.domain, &owner.id, "rtt", next).await?;
        let after = RedisUse::read(admin).await?;
        let mut redis_use = Vec::new();
        let crossing = closed_loop(
            args,
            "remote",
            &[(sender.domain.clone(), sender.id.clone())],
            async || {
                redis_use.push(RedisUse::read(admin).await?);
                Ok(())
            },
        )
        .await?;
        anyhow::Ok((remote, local, crossing, [before, between, after], redis_use))
    }
    .await;
    sender.stop(sending).await?;
    owner.stop(owning).await?;
    let (
        (outcome, mut remote),
        (local_outcome, mut local),
        mut crossing,
        [before, between, after],
        redis_use,
    ) = measured?;
    let summary = remote
        .summary()
        .context("no command was measured (--duration-s 0?)")?;
    report
        .millis("command_rtt_p50_ms", summary.p50)
        .millis("command_rtt_p99_ms", summary.p99)
        .millis("command_rtt_max_ms", summary.max)
        .count("command_rtt_samples", summary.count as u64)
        .per_second("command_rtt_offered_per_s", args.rate)
        .millis("command_rtt_max_lag_ms", outcome.max_lag);
    between.report_calls(&before, report, "command_rtt_", outcome.sent);
    let summary = local.summary().context("no local command was measured")?;
    report
        .millis("local_owner_rtt_p50_ms", summary.p50)
        .millis("local_owner_rtt_p99_ms", summary.p99)
        .millis("local_owner_rtt_max_ms", summary.max)
        .millis("local_owner_max_lag_ms", local_outcome.max_lag);
    after.report_calls(&between, report, "local_owner_", local_outcome.sent);
    ensure!(
        crossing.remote.len() == crossing.latencies.len(),
        "a command of the sender that owns nothing ran on the sender"
    );
    let summary = crossing
        .latencies
        .summary()
        .context("no command completed in the closed loop")?;
    report
        .per_second("remote_commands_per_s", rate(crossing.commands, crossing.window))
        .millis("remote_rtt_p50_ms", summary.p50)
        .millis("remote_rtt_p99_ms", summary.p99);
    report_costs(report, "remote_", &crossing, &redis_use);
    Ok(())
}

/// What Redis has used so far: CPU time, memory and the calls of each
/// command (those scripts run included).
#[derive(Debug, Clone)]
struct RedisUse {
    cpu: Duration,
    memory: u64,
    calls: BTreeMap<String, CommandStats>,
}

impl RedisUse {
    async fn read(admin: &fred::clients::Client) -> Result<Self> {
        Ok(Self {
            cpu: redis_info::cpu(admin).await?,
            memory: redis_info::memory(admin).await?,
            calls: redis_info::all_command_stats(admin).await?,
        })
    }

    /// `{prefix}redis_calls_per_command` and `{prefix}redis_top_commands`
    /// (the commands Redis spent the most time on, calls and µs per
    /// benchmark command) between `before` and this reading, over `commands`.
    fn report_calls(&self, before: &RedisUse, report: &mut Report, prefix: &str, commands: u64) {
        let ran = redis_info::busiest_commands(&self.calls, &before.calls);
        let per = |n: u64| n as f64 / commands.max(1) as f64;
        let calls: u64 = ran.iter().map(|(_, stats)| stats.calls).sum();
        let top: Vec<String> = ran
            .iter()
            .take(TOP_COMMANDS)
            .map(|(name, stats)| format!("{name}={:.2}:{:.1}us", per(stats.calls), per(stats.usec)))
            .collect();
        report
            .ratio(format!("{prefix}redis_calls_per_command"), per(calls))
            .text(format!("{prefix}redis_top_commands"), top.join(","));
    }
}

/// Commands named in `*_redis_top_commands`.
const TOP_COMMANDS: usize = 8;

/// `{prefix}cpu_us_per_command` (this process), `{prefix}redis_cpu_us_per_command`
/// and `{prefix}redis_bytes_per_command` of a closed loop, from Redis's use
/// at the window's start and end.
fn report_costs(report: &mut Report, prefix: &str, outcome: &LoopOutcome, redis_use: &[RedisUse]) {
    if let Some(cpu) = outcome.process_cpu {
        report.ratio(
            format!("{prefix}cpu_us_per_command"),
            per_command(cpu, outcome.commands),
        );
    }
    if let [before, after] = redis_use {
        after.report_calls(before, report, prefix, outcome.commands);
        report
            .ratio(
                format!("{prefix}redis_cpu_us_per_command"),
                per_command(after.cpu.saturating_sub(before.cpu), outcome.commands),
            )
            .ratio(
                format!("{prefix}redis_bytes_per_command"),
                after.memory.saturating_sub(before.memory) as f64 / outcome.commands.max(1) as f64,
            );
    }
}

/// Sends `--rate` commands per second from `domain` over the keys of
/// `part` for the warm-up and the measured window, command `n` of the run
/// being number `first + n` over the keys, each in a task of its own; every
/// reply must come from `owner`. The schedule's outcome and the round trips
/// (from the call to `send` to its reply) of the measured window. (Not from
/// the command's due time: tokio's timer wakes the ticker up to a
/// millisecond late, which `*_max_lag_ms` shows apart.)
async fn offered_load(
    args: &CommandsArgs,
    domain: &Domain,
    owner: &str,
    part: &'static str,
    first: u64,
) -> Result<(LoadOutcome, LatencyRecorder)> {
    let keys = args.keys.get() as u64;
    let warmup = (args.rate * args.warmup_s).ceil() as u64;
    let load = OfferedLoad {
        rate_per_s: args.rate,
        keys: args.keys,
        max_events: u64::MAX,
        max_duration: Duration::from_secs_f64(args.warmup_s + args.duration_s),
    };
    let mut inflight: JoinSet<Result<(u64, Duration)>> = JoinSet::new();
    let outcome = load
        .run(|tick| {
            let domain = domain.clone();
            let owner = owner.to_owned();
            inflight.spawn(async move {
                let n = first + tick.seq;
                let command = Stamp {
                    key: key(part, (n % keys) as usize),
                    seq: n / keys,
                };
                let sent = Instant::now();
                let reply = send_checked(&domain, command).await?;
                let rtt = sent.elapsed();
                ensure!(
                    reply.instance == owner,
                    "command {} of {} ran on {}, not on the owner {owner}",
                    reply.seq,
                    reply.key,
                    reply.instance
                );
                Ok((tick.seq, rtt))
            });
            std::future::ready(Ok(()))
        })
        .await?;
    let mut latencies = LatencyRecorder::with_capacity(outcome.sent as usize);
    while let Some(joined) = inflight.join_next().await {
        let (seq, rtt) = joined.context("a sending task panicked")??;
        if seq >= warmup {
            latencies.record(rtt);
        }
    }
    Ok((outcome, latencies))
}

/// What a closed loop measured.
struct LoopOutcome {
    /// Commands that completed in the measured window.
    commands: u64,
    /// The measured window.
    window: Duration,
    /// Sent to reply, per command of the window.
    latencies: LatencyRecorder,
    /// This process's CPU time over the window.
    process_cpu: Option<Duration>,
    /// Commands of the window run per instance id.
    ran_by: HashMap<String, u64>,
    /// Sent to reply, per command of the window another instance than its
    /// sender's ran.
    remote: LatencyRecorder,
}

/// What one closed-loop sender measured in the window.
#[derive(Debug, Default)]
struct SenderTally {
    latencies: LatencyRecorder,
    ran_by: HashMap<String, u64>,
    /// The latencies of the commands another instance ran.
    remote: LatencyRecorder,
}

/// Runs `senders` closed-loop senders, sender `i` on `domains[i % len]`
/// (a domain and its instance id)
/// with key `i % keys` of `part`, for the warm-up then the measured window;
/// `at_edges` is called at the window's start and end (to read Redis's CPU).
async fn closed_loop(
    args: &CommandsArgs,
    part: &'static str,
    domains: &[(Domain, String)],
    mut at_edges: impl AsyncFnMut() -> Result<()>,
) -> Result<LoopOutcome> {
    let keys = args.keys.get();
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(args.warmup_s);
    let measure_to = measure_from + Duration::from_secs_f64(args.duration_s);
    let mut senders: JoinSet<Result<SenderTally>> = JoinSet::new();
    for sender in 0..args.senders.get() {
        let (domain, own) = domains[sender % domains.len()].clone();
        let key = key(part, sender % keys);
        // Senders sharing a key (more senders than keys) cannot check its order.
        let ordered = args.senders.get() <= keys;
        senders.spawn(async move {
            let mut tally = SenderTally::default();
            let mut seq = 0;
            loop {
                let sent = Instant::now();
                if sent >= measure_to {
                    break;
                }
                let command = Stamp {
                    key: key.clone(),
                    seq,
                };
                let reply = send_checked(&domain, command).await?;
                let replied = Instant::now();
                if ordered {
                    ensure!(
                        reply.previous == seq.checked_sub(1),
                        "command {seq} of {key} ran after command {:?} of its key, not right after {:?}",
                        reply.previous,
                        seq.checked_sub(1)
                    );
                }
                if sent >= measure_from && replied <= measure_to {
                    tally.latencies.record(replied - sent);
                    if reply.instance != own {
                        tally.remote.record(replied - sent);
                    }
                    *tally.ran_by.entry(reply.instance).or_default() += 1;
                }
                seq += 1;
            }
            Ok(tally)
        });
    }
    tokio::time::sleep_until(measure_from).await;
    let cpu_before = redis_info::process_cpu();
    at_edges().await?;
    tokio::time::sleep_until(measure_to).await;
    let cpu_after = redis_info::process_cpu();
    at_edges().await?;
    let window = measure_to - measure_from;
    let mut latencies = LatencyRecorder::new();
    let mut ran_by: HashMap<String, u64> = HashMap::new();
    let mut remote = LatencyRecorder::new();
    while let Some(joined) = senders.join_next().await {
        let tally = joined.context("a sender panicked")??;
        latencies.merge(tally.latencies);
        remote.merge(tally.remote);
        for (instance, count) in tally.ran_by {
            *ran_by.entry(instance).or_default() += count;
        }
    }
    Ok(LoopOutcome {
        commands: latencies.len() as u64,
        window,
        latencies,
        process_cpu: cpu_before
            .zip(cpu_after)
            .map(|(before, after)| after.saturating_sub(before)),
        ran_by,
        remote,
    })
}

/// Microseconds of `cpu` per command of `commands`.
fn per_command(cpu: Duration, commands: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / commands.max(1) as f64
}

/// Part 2: the closed loop over two started instances.
async fn closed_loop_remote(
    args: &CommandsArgs,
    redis: &BenchRedis,
    admin: &fred::clients::Client,
    report: &mut Report,
) -> Result<()> {
    let pid = std::process::id();
    let log = Arc::new(KeyLog::default());
    let first = Instance::connect(redis, format!("bench-cmd-c-{pid}"), Some(Arc::clone(&log))).await?;
    let second = Instance::connect(redis, format!("bench-cmd-d-{pid}"), Some(log)).await?;
    let running_first = first.domain.start();
    let running_second = second.domain.start();
    let mut redis_use = Vec::new();
    let measured = closed_loop(
        args,
        "loop",
        &[
            (first.domain.clone(), first.id.clone()),
            (second.domain.clone(), second.id.clone()),
        ],
        async || {
            redis_use.push(RedisUse::read(admin).await?);
            Ok(())
        },
    )
    .await;
    first.stop(running_first).await?;
    second.stop(running_second).await?;
    let mut outcome = measured?;
    ensure!(
        outcome.commands > 0,
        "no command completed in the measured window"
    );
    let summary = outcome.latencies.summary().context("no latency recorded")?;
    report
        .per_second("commands_per_s", rate(outcome.commands, outcome.window))
        .millis("closed_loop_rtt_p50_ms", summary.p50)
        .millis("closed_loop_rtt_p99_ms", summary.p99)
        .count("closed_loop_commands", outcome.commands)
        .ratio(
            "closed_loop_local_share",
            1.0 - outcome.remote.len() as f64 / outcome.commands as f64,
        )
        .per_second(
            "closed_loop_remote_commands_per_s",
            rate(outcome.remote.len() as u64, outcome.window),
        );
    if let Some(remote) = outcome.remote.summary() {
        report
            .millis("closed_loop_remote_rtt_p50_ms", remote.p50)
            .millis("closed_loop_remote_rtt_p99_ms", remote.p99);
    }
    for (label, instance) in [("c", &first.id), ("d", &second.id)] {
        report.count(
            format!("closed_loop_ran_on_{label}"),
            outcome.ran_by.get(instance).copied().unwrap_or(0),
        );
    }
    report_costs(report, "", &outcome, &redis_use);
    Ok(())
}

/// Part 3: the same closed loop on the inline broker.
async fn closed_loop_inline(args: &CommandsArgs, report: &mut Report) -> Result<()> {
    let domain = Domain::builder()
        .aggregate::<CommandBench>()
        .command_handler(Stamper {
            instance: "inline".to_owned(),
            log: Arc::new(KeyLog::default()),
        })
        .init()
        .context("the inline domain was refused")?;
    let mut outcome = closed_loop(args, "inline", &[(domain, "inline".to_owned())], async || Ok(())).await?;
    ensure!(
        outcome.commands > 0,
        "no command completed in the measured window"
    );
    let summary = outcome.latencies.summary().context("no latency recorded")?;
    report
        .per_second("inline_commands_per_s", rate(outcome.commands, outcome.window))
        .millis("inline_rtt_p50_ms", summary.p50)
        .millis("inline_rtt_p99_ms", summary.p99);
    if let Some(cpu) = outcome.process_cpu {
        report.ratio("inline_cpu_us_per_command", per_command(cpu, outcome.commands));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_answers_only_its_own_command() {
        let command = Stamp {
            key: "loop-k3".to_owned(),
            seq: 7,
        };
        let reply = Stamped {
            key: command.key.clone(),
            seq: 7,
            check: Stamped::check_of("loop-k3", 7),
            instance: "x".to_owned(),
            previous: Some(6),
        };
        assert!(reply.answers(&command));
        let other_seq = Stamp {
            seq: 8,
            ..command.clone()
        };
        assert!(!reply.answers(&other_seq));
        let other_key = Stamp {
            key: "loop-k4".to_owned(),
            ..command.clone()
        };
        assert!(!reply.answers(&other_key));
        assert_ne!(Stamped::check_of("loop-k3", 7), Stamped::check_of("loop-k3", 8));
    }

    #[test]
    fn the_key_log_returns_the_previous_command_of_the_key() {
        let log = KeyLog::default();
        assert_eq!(log.ran("a", 0), None);
        assert_eq!(log.ran("b", 0), None);
        assert_eq!(log.ran("a", 1), Some(0));
        assert_eq!(log.ran("a", 2), Some(1));
    }

    #[tokio::test]
    async fn the_inline_closed_loop_checks_every_reply() {
        let args = CommandsArgs {
            rate: 1.0,
            keys: NonZeroUsize::new(4).unwrap(),
            senders: NonZeroUsize::new(4).unwrap(),
            duration_s: 0.2,
            warmup_s: 0.05,
        };
        let mut report = Report::new();
        closed_loop_inline(&args, &mut report).await.unwrap();
        assert!(report.get("inline_commands_per_s").is_some());
        assert!(report.get("inline_rtt_p50_ms").is_some());
    }
}
