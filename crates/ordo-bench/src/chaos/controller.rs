//! The chaos run itself: a control loop on a thread of its own that starts
//! the instances, injects the scheduled faults, reads the instances' lines
//! every [`TICK`], then drains, stops everything and verifies.
//!
//! The loop never blocks for long: a Redis restart (and a database outage)
//! runs on a helper thread and the loop keeps reading lines meanwhile, so
//! the receipt time stamped
//! on each `start` line (what failover times are measured with) stays
//! within a tick of when the instance printed it.

use std::fmt::Display;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use fred::clients::Pool;
use fred::interfaces::{ClientLike as _, KeysInterface as _};
use ordo_harness::command_verify::{CommandVerdict, command_overlap_log, verify_commands};
use ordo_harness::keys::{CommandRecords, Records};
use ordo_harness::verify::Verdict;
use ordo_testkit::RedisCluster;
use tokio::runtime::Handle;

use super::duplicates::{self, Causes, Duplicate};
use super::failover_times::{FailoverStats, Failovers};
use super::fault::{FaultCounts, FaultKind, Schedule};
use super::fleet::{Exit, Fleet, LineCounts, State};
use super::postgres::PgEffects;
use super::proxy::ConnProxy;
use super::rng::Rng;
use super::stuck::{self, Resolved};
use super::traffic::{Traffic, TrafficPlan};
use crate::redis::BenchRedis;

/// The control loop's period.
const TICK: Duration = Duration::from_millis(5);
/// How long a fresh instance may take to print `ready` at the start.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long a graceful stop may take before the instance is killed (and
/// the stop counted as timed out).
const STOP_WITHIN: Duration = Duration::from_secs(20);
/// How long a scheduled fault may wait for its precondition (e.g. two
/// running instances) before it is skipped.
const GIVE_UP_AFTER: Duration = Duration::from_secs(10);
/// How long a stop waits for an instance to be mid-handler before it stops
/// one that is not.
const MID_HANDLER_PATIENCE: Duration = Duration::from_secs(2);
/// Instances joins may add above the base count.
const EXTRA_INSTANCES: usize = 2;
/// How often the drain checks whether every event was applied.
const VERIFY_EVERY: Duration = Duration::from_millis(500);
/// How long reading the leases before a fault may take (Redis may still be
/// reconnecting after a restart; the instances' lines are the fallback).
const LEASE_READ_WITHIN: Duration = Duration::from_millis(300);
/// How long one verification may take.
const VERIFY_WITHIN: Duration = Duration::from_secs(30);
/// How long a Redis restart may take.
const REDIS_BACK_WITHIN: Duration = Duration::from_secs(60);
/// How often a long drain logs how much is left.
const DRAIN_REPORT_EVERY: Duration = Duration::from_secs(10);
/// How many undrained keys the log describes.
const STUCK_KEYS_SHOWN: usize = 8;
/// A failover slower than the lease TTL plus this is logged with its cause.
const SLOW_FAILOVER_MARGIN: Duration = Duration::from_secs(1);
/// The shortest database outage.
const DB_OUTAGE_MIN: Duration = Duration::from_secs(1);

/// The run's private PostgreSQL, shared with the thread of a database outage.
type SharedPostgres = Arc<std::sync::Mutex<ordo_testkit::Postgres>>;

/// What the run is asked to do.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// How long faults are injected while traffic flows.
    pub(crate) duration: Duration,
    /// The instances' lease TTL.
    pub(crate) lease_ttl: Duration,
    /// Instances at the start (and the floor graceful stops restore).
    pub(crate) instances: usize,
    /// Relay-only processes (PostgreSQL mode; 0 otherwise).
    pub(crate) relays: usize,
    /// The keys published to.
    pub(crate) keys: Vec<String>,
    /// How long the final publish may take, and the drain may go without
    /// an event applied.
    pub(crate) drain_within: Duration,
    /// Where each key's partition, lease and records are (a partition per
    /// key, or hashed partitions).
    pub(crate) records: Records,
    /// The shared command keys (`--commands`; empty without).
    pub(crate) command_keys: Vec<String>,
    /// Where the commands' records are.
    pub(crate) command_records: CommandRecords,
}

/// What a run observed.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// The verifier's verdict on the final records.
    pub(crate) verdict: Verdict,
    /// The duplicates by cause.
    pub(crate) duplicates: Causes,
    /// The overlap log, when there were overlaps.
    pub(crate) overlap_log: Vec<String>,
    /// Events the publisher raised.
    pub(crate) raised: u64,
    /// The faults injected.
    pub(crate) faults: FaultCounts,
    /// The failover windows.
    pub(crate) failovers: FailoverStats,
    /// The instances' lines.
    pub(crate) lines: LineCounts,
    /// Instances started over the run.
    pub(crate) instances_started: u64,
    /// Relay-only processes started over the run.
    pub(crate) relays_started: u64,
    /// Instances that exited without being asked to.
    pub(crate) unexpected_exits: u64,
    /// Graceful stops that did not finish within [`STOP_WITHIN`].
    pub(crate) stop_timeouts: u64,
    /// How long the faults phase lasted.
    pub(crate) chaos: Duration,
    /// From the end of publishing to every event applied (or to giving up).
    pub(crate) drain: Duration,
    /// Halted partitions and parked keys the drain retried.
    pub(crate) halts_resolved: Resolved,
    /// The commands' verdict (`--commands`).
    pub(crate) commands: Option<CommandVerdict>,
    /// The commands' overlap log, when there were overlaps.
    pub(crate) command_overlap_log: Vec<String>,
}

/// What [`Controller::inject`] did.
enum Injection {
    /// The fault was injected (or skipped for good).
    Done,
    /// Its precondition does not hold yet; try again shortly.
    NotNow,
}

/// The run's state.
#[derive(Debug)]
pub(crate) struct Controller {
    plan: Plan,
    runtime: Handle,
    client: Pool,
    /// The per-connection fault's proxy; `None` on a cluster.
    proxy: Option<ConnProxy>,
    redis: Option<BenchRedis>,
    redis_fault: Option<JoinHandle<(BenchRedis, Result<()>)>>,
    /// The run's private PostgreSQL (the `db_outage` fault's target).
    database: Option<SharedPostgres>,
    /// A database outage under way, on its own thread.
    db_fault: Option<JoinHandle<Result<()>>>,
    /// The publisher commits under it; an outage takes it first, so no
    /// commit is cut off with its outcome unknown.
    gate: Arc<tokio::sync::RwLock<()>>,
    traffic: Option<TrafficPlan>,
    fleet: Fleet,
    /// The relay-only processes (PostgreSQL mode).
    relays: Fleet,
    /// The effects in PostgreSQL, copied to Redis before each verification.
    effects: Option<PgEffects>,
    /// Fresh relay-only processes to start.
    relay_spawns_due: usize,
    schedule: Schedule,
    /// Targets and durations: kept apart from the schedule's generator so
    /// the sequence of kinds and gaps depends on the seed alone.
    choices: Rng,
    faults: FaultCounts,
    failovers: Failovers,
    /// Stopped instances and when to resume them.
    resumes: Vec<(Instant, String)>,
    /// Fresh instances to start (deferred while Redis is down).
    spawns_due: usize,
    unexpected_exits: u64,
    stop_timeouts: u64,
    /// Halted partitions and parked keys retried so far.
    resolved: Resolved,
    interrupted: Arc<AtomicBool>,
    clock: Instant,
    /// Everything logged, with its time: what explains a duplicate.
    timeline: Vec<(Instant, String)>,
}

/// What the controller is built from.
#[derive(Debug)]
pub(crate) struct Parts {
    pub(crate) plan: Plan,
    pub(crate) runtime: Handle,
    pub(crate) client: Pool,
    pub(crate) proxy: Option<ConnProxy>,
    pub(crate) redis: BenchRedis,
    pub(crate) traffic: TrafficPlan,
    pub(crate) fleet: Fleet,
    pub(crate) relays: Fleet,
    pub(crate) effects: Option<PgEffects>,
    pub(crate) schedule: Schedule,
    pub(crate) choices: Rng,
    pub(crate) interrupted: Arc<AtomicBool>,
    /// The run's private PostgreSQL (PostgreSQL mode on a server of its own).
    pub(crate) database: Option<SharedPostgres>,
    /// What the publisher commits under (see [`Controller`]'s `gate`).
    pub(crate) gate: Arc<tokio::sync::RwLock<()>>,
}

impl Controller {
    /// A controller over `parts`; nothing runs yet.
    pub(crate) fn new(parts: Parts) -> Self {
        Self {
            plan: parts.plan,
            runtime: parts.runtime,
            client: parts.client,
            proxy: parts.proxy,
            redis: Some(parts.redis),
            redis_fault: None,
            database: parts.database,
            db_fault: None,
            gate: parts.gate,
            traffic: Some(parts.traffic),
            fleet: parts.fleet,
            relays: parts.relays,
            effects: parts.effects,
            relay_spawns_due: 0,
            schedule: parts.schedule,
            choices: parts.choices,
            faults: FaultCounts::default(),
            failovers: Failovers::default(),
            resumes: Vec::new(),
            spawns_due: 0,
            unexpected_exits: 0,
            stop_timeouts: 0,
            resolved: Resolved::default(),
            interrupted: parts.interrupted,
            clock: Instant::now(),
            timeline: Vec::new(),
        }
    }

    /// Runs the whole thing (blocking): start, chaos, drain, stop, verify.
    pub(crate) fn run(mut self) -> Result<Outcome> {
        self.log(format!("starting {} instances", self.plan.instances));
        for _ in 0..self.plan.instances {
            self.fleet.spawn()?;
        }
        for _ in 0..self.plan.relays {
            self.relays.spawn()?;
        }
        self.wait_until(READY_WITHIN, "every instance to print `ready`", |c| {
            c.fleet.names(|m| m.state == State::Starting).is_empty()
                && c.relays.names(|m| m.state == State::Starting).is_empty()
        })?;
        let plan = self.traffic.take().context("the traffic was already started")?;
        let traffic = self.runtime.block_on(Traffic::start(plan))?;
        self.log(format!(
            "publishing; injecting faults for {:?}",
            self.plan.duration
        ));
        let began = Instant::now();
        self.chaos(began + self.plan.duration)?;
        let chaos = began.elapsed();

        let raised = self.quiesce(traffic)?;
        let drain_began = Instant::now();
        self.drain()?;
        let drain = drain_began.elapsed();
        self.stop_all()?;
        let verdict = self.verify()?;
        let overlap_log = if verdict.overlaps > 0 {
            self.runtime
                .block_on(ordo_harness::verify::overlap_log_with(
                    &self.client,
                    &self.plan.records,
                ))
                .context("could not read the overlap log")?
        } else {
            Vec::new()
        };
        let (commands, command_overlap_log) = self.verify_commands()?;
        // Closed before Redis stops, so the client does not report the
        // connections Redis drops on its way out.
        let _ = self.runtime.block_on(self.client.quit());
        let failovers = self.failovers.stats();
        if let Some(slowest) = &failovers.slowest {
            self.log(format!(
                "slowest failover: {} taken over {:?} after {}",
                slowest.key, slowest.took, slowest.cause
            ));
        }
        let (duplicates, found) = duplicates::classify(&verdict, |key, seq| self.fleet.runs_of(key, seq));
        for line in self.explain(&found) {
            self.log(format!("duplicate {line}"));
        }
        self.log("done");
        Ok(Outcome {
            duplicates,
            verdict,
            overlap_log,
            raised,
            faults: self.faults.clone(),
            failovers,
            lines: self.fleet.lines(),
            instances_started: self.fleet.started() as u64,
            relays_started: self.relays.started() as u64,
            unexpected_exits: self.unexpected_exits,
            stop_timeouts: self.stop_timeouts,
            chaos,
            drain,
            halts_resolved: self.resolved,
            commands,
            command_overlap_log,
        })
    }

    /// The commands' verdict and overlap log (`None` without commands).
    fn verify_commands(&self) -> Result<(Option<CommandVerdict>, Vec<String>)> {
        let keys = &self.plan.command_keys;
        if keys.is_empty() {
            return Ok((None, Vec::new()));
        }
        let records = &self.plan.command_records;
        self.runtime
            .block_on(tokio::time::timeout(VERIFY_WITHIN, async {
                let verdict = verify_commands(&self.client, records, keys).await?;
                let log = if verdict.overlaps > 0 {
                    command_overlap_log(&self.client, records, keys).await?
                } else {
                    Vec::new()
                };
                anyhow::Ok((Some(verdict), log))
            }))
            .context("verifying the commands timed out")?
    }

    /// The faults phase: faults at the scheduled gaps until `end`.
    fn chaos(&mut self, end: Instant) -> Result<()> {
        let mut next = Instant::now() + self.schedule.gap();
        let mut waiting_since: Option<Instant> = None;
        while Instant::now() < end {
            self.tick()?;
            let now = Instant::now();
            if now >= next {
                let waited = now.duration_since(*waiting_since.get_or_insert(now));
                match self.inject(waited)? {
                    Injection::Done => {
                        waiting_since = None;
                        next = now + self.schedule.gap();
                    }
                    Injection::NotNow if waited >= GIVE_UP_AFTER => {
                        if let Some(kind) = self.schedule.take() {
                            self.faults.skipped += 1;
                            self.log(format!(
                                "skipped {kind}: its precondition never held for {waited:?}"
                            ));
                        }
                        waiting_since = None;
                        next = now + self.schedule.gap();
                    }
                    Injection::NotNow => {}
                }
            }
            std::thread::sleep(TICK);
        }
        Ok(())
    }

    /// Injects the next scheduled fault if it can run now.
    fn inject(&mut self, waited: Duration) -> Result<Injection> {
        let Some(kind) = self.schedule.peek() else {
            return Ok(Injection::Done);
        };
        // Nothing else happens while Redis (or the database) is away:
        // replacements could not start, and the fault would measure the outage.
        if self.redis_fault.is_some() || self.db_fault.is_some() {
            return Ok(Injection::NotNow);
        }
        let running = self.fleet.names(|m| m.state == State::Running);
        let busy = self
            .fleet
            .names(|m| m.state == State::Running && m.mid_handler().is_some());
        match kind {
            FaultKind::Kill => {
                let live = self
                    .fleet
                    .names(|m| matches!(m.state, State::Running | State::Paused));
                let Some(target) = self.target(&busy, &live, 50) else {
                    return Ok(Injection::NotNow);
                };
                self.kill(&target)?;
            }
            FaultKind::Stop => {
                if running.len() < 2 {
                    return Ok(Injection::NotNow);
                }
                let patience_left = waited < MID_HANDLER_PATIENCE;
                if busy.is_empty() && patience_left {
                    return Ok(Injection::NotNow);
                }
                let Some(target) = self.target(&busy, &running, 100) else {
                    return Ok(Injection::NotNow);
                };
                self.stop(&target)?;
            }
            FaultKind::Term => {
                if running.len() < 2 {
                    return Ok(Injection::NotNow);
                }
                let Some(target) = self.target(&busy, &running, 50) else {
                    return Ok(Injection::NotNow);
                };
                self.term(&target)?;
            }
            FaultKind::Join => {
                if self.fleet.live() >= self.plan.instances + EXTRA_INSTANCES {
                    self.schedule.take();
                    self.faults.skipped += 1;
                    self.log("skipped join: the fleet is at its largest");
                    return Ok(Injection::Done);
                }
                self.join()?;
            }
            FaultKind::RedisRestart | FaultKind::RedisCrash | FaultKind::ClusterFailover => {
                let settling = self
                    .fleet
                    .names(|m| matches!(m.state, State::Starting | State::Stopping { .. }));
                if !settling.is_empty() || self.spawns_due > 0 {
                    return Ok(Injection::NotNow);
                }
                self.redis_fault(kind)?;
            }
            FaultKind::ConnDelay => {
                if running.is_empty() || !self.conn_delay() {
                    return Ok(Injection::NotNow);
                }
            }
            FaultKind::RelayKill => {
                let live = self
                    .relays
                    .names(|m| matches!(m.state, State::Running | State::Paused));
                let Some(target) = self.choices.pick(&live).cloned() else {
                    return Ok(Injection::NotNow);
                };
                self.relays.kill(&target)?;
                self.resumes.retain(|(_, paused)| *paused != target);
                self.relay_spawns_due += 1;
                self.log(format!("relay kill {target}"));
            }
            FaultKind::DbOutage => {
                let settling = self
                    .fleet
                    .names(|m| matches!(m.state, State::Starting | State::Stopping { .. }));
                if !settling.is_empty() || self.spawns_due > 0 || self.relay_spawns_due > 0 {
                    return Ok(Injection::NotNow);
                }
                self.db_outage()?;
            }
            FaultKind::RelayStop => {
                let running = self.relays.names(|m| m.state == State::Running);
                let Some(target) = self.choices.pick(&running).cloned() else {
                    return Ok(Injection::NotNow);
                };
                // Its slot leases live a lease TTL, like the partitions'.
                let ttl = self.plan.lease_ttl;
                let stall = self.choices.duration(ttl * 5 / 4, ttl * 2);
                self.relays.pause(&target)?;
                self.resumes.push((Instant::now() + stall, target.clone()));
                self.log(format!("relay stop {target} for {stall:?}"));
            }
        }
        self.schedule.take();
        self.faults.record(kind);
        Ok(Injection::Done)
    }

    /// Holds back one instance connection's commands for longer than the
    /// command timeout (a third of the lease TTL), up to a lease TTL: the
    /// client gives up on them, and they run late. Returns whether there
    /// was a connection to delay.
    fn conn_delay(&mut self) -> bool {
        let ttl = self.plan.lease_ttl;
        let hold = self.choices.duration(ttl / 2, ttl);
        let pick = usize::try_from(self.choices.next_u64() % 1_000_000).unwrap_or(0);
        let Some(proxy) = &self.proxy else {
            return false;
        };
        let connections = proxy.connections();
        match proxy.delay_one(pick, hold) {
            Some(id) => {
                self.log(format!(
                    "conn delay: connection {id} of {connections} held back {hold:?}"
                ));
                true
            }
            None => false,
        }
    }

    /// One of `preferred` with probability `percent` (when there is one),
    /// else one of `all`.
    fn target(&mut self, preferred: &[String], all: &[String], percent: u64) -> Option<String> {
        if !preferred.is_empty() && self.choices.percent(percent) {
            return self.choices.pick(preferred).cloned();
        }
        self.choices.pick(all).cloned()
    }

    /// SIGKILL, and a fresh instance.
    fn kill(&mut self, name: &str) -> Result<()> {
        let mid = self.note_mid_handler(name);
        let owned = self.owned(name);
        self.failovers.disturb();
        self.fleet.kill(name)?;
        let at = Instant::now();
        let cause = format!("kill {name} at{}", self.at(at));
        for (key, token) in &owned {
            self.failovers.open(key, *token, at, &cause);
        }
        self.resumes.retain(|(_, paused)| paused != name);
        self.spawns_due += 1;
        self.log(format!("kill {name}{mid}, owner of {} keys", owned.len()));
        Ok(())
    }

    /// SIGSTOP for longer than the lease TTL; SIGCONT later (in `tick`).
    fn stop(&mut self, name: &str) -> Result<()> {
        let mid = self.note_mid_handler(name);
        let owned = self.owned(name);
        let ttl = self.plan.lease_ttl;
        let stall = self.choices.duration(ttl * 5 / 4, ttl * 2);
        self.failovers.disturb();
        self.fleet.pause(name)?;
        let at = Instant::now();
        let cause = format!("stop {name} at{}", self.at(at));
        for (key, token) in &owned {
            self.failovers.open(key, *token, at, &cause);
        }
        self.resumes.push((at + stall, name.to_owned()));
        self.log(format!(
            "stop {name}{mid}, owner of {} keys, for {stall:?}",
            owned.len()
        ));
        Ok(())
    }

    /// SIGTERM; a fresh instance once it has exited, unless the fleet is
    /// above its base size.
    fn term(&mut self, name: &str) -> Result<()> {
        let mid = self.note_mid_handler(name);
        let replace = self.fleet.live() <= self.plan.instances;
        self.failovers.disturb();
        self.fleet.terminate(name, replace)?;
        let then = if replace { ", to be replaced" } else { ", leaving" };
        self.log(format!("term {name}{mid}{then}"));
        Ok(())
    }

    /// A new instance.
    fn join(&mut self) -> Result<()> {
        self.failovers.disturb();
        let name = self.fleet.spawn()?;
        self.log(format!("join {name}"));
        Ok(())
    }

    /// A Redis restart or crash, on a helper thread.
    fn redis_fault(&mut self, kind: FaultKind) -> Result<()> {
        let mut redis = self.redis.take().context("Redis is already being faulted")?;
        let ttl = self.plan.lease_ttl;
        let outage = self
            .choices
            .duration(Duration::from_millis(200), ttl + Duration::from_secs(1));
        let pick = self.choices.next_u64();
        self.failovers.disturb();
        // On a cluster, the node is chosen (and named) before the thread starts.
        let target = match redis.cluster_mut() {
            Some(cluster) => Some(cluster_target(cluster, kind, pick)?),
            None => None,
        };
        let on = target.map_or_else(String::new, |(index, port)| {
            format!(" of node {index} (port {port})")
        });
        let node = target.map(|(index, _)| index);
        let handle = std::thread::Builder::new()
            .name("chaos-redis".to_owned())
            .spawn(move || {
                let result = match node {
                    Some(node) => fault_cluster(&mut redis, node, kind, outage),
                    None => fault_redis(&mut redis, kind, outage),
                };
                (redis, result)
            })
            .context("could not start the Redis fault's thread")?;
        self.redis_fault = Some(handle);
        match kind {
            FaultKind::RedisCrash => self.log(format!("redis crash (SIGKILL){on}, down for {outage:?}")),
            FaultKind::ClusterFailover => self.log(format!("cluster failover (CLUSTER FAILOVER){on}")),
            _ => self.log(format!("redis restart (graceful){on}")),
        }
        Ok(())
    }

    /// PostgreSQL stops ("fast" shutdown), stays down for a while, and
    /// starts again, on a helper thread. The publisher's commits wait
    /// meanwhile (the application cannot write either), so none is cut off
    /// with its outcome unknown; handlers and relays lose the database
    /// mid-work.
    fn db_outage(&mut self) -> Result<()> {
        let database = self
            .database
            .clone()
            .context("a database outage needs a PostgreSQL of the run's own")?;
        let ttl = self.plan.lease_ttl;
        let outage = self.choices.duration(DB_OUTAGE_MIN, ttl * 2 + DB_OUTAGE_MIN);
        let gate = self.gate.clone();
        self.failovers.disturb();
        let handle = std::thread::Builder::new()
            .name("chaos-database".to_owned())
            .spawn(move || {
                let _publishing = gate.blocking_write();
                let mut server = database
                    .lock()
                    .map_err(|_| anyhow::anyhow!("the PostgreSQL handle was poisoned"))?;
                server.stop().context("could not stop PostgreSQL")?;
                // The outage itself is the fault being injected.
                std::thread::sleep(outage);
                server.start_again().context("could not start PostgreSQL again")?;
                Ok(())
            })
            .context("could not start the database fault's thread")?;
        self.db_fault = Some(handle);
        self.log(format!("database outage (fast shutdown), down for {outage:?}"));
        Ok(())
    }

    /// Ends a finished database outage.
    fn collect_db_fault(&mut self) -> Result<()> {
        if !self.db_fault.as_ref().is_some_and(JoinHandle::is_finished) {
            return Ok(());
        }
        let handle = self.db_fault.take().context("no database fault")?;
        handle
            .join()
            .map_err(|_| anyhow::anyhow!("the database fault's thread panicked"))?
            .context("the database outage failed")?;
        self.log("database is back");
        Ok(())
    }

    /// Counts a fault on `name` mid-handler; returns a note for the log.
    fn note_mid_handler(&mut self, name: &str) -> String {
        match self.fleet.member(name).and_then(|m| m.mid_handler()) {
            Some(run) => {
                self.faults.mid_handler += 1;
                format!(" (mid-handler: {run})")
            }
            None => String::new(),
        }
    }

    /// The keys `name` owns and their tokens: its leases in Redis, or (if
    /// Redis does not answer at once) the keys whose latest `start` it printed.
    fn owned(&mut self, name: &str) -> Vec<(String, u64)> {
        match self.read_leases() {
            Ok(leases) => leases
                .into_iter()
                .filter(|(_, owner, _)| owner == name)
                .map(|(key, _, token)| (key, token))
                .collect(),
            Err(error) => {
                self.log(format!(
                    "could not read the leases ({error:#}); using the instances' lines"
                ));
                self.fleet.owned_by_lines(name)
            }
        }
    }

    /// Every key's lease: `(key, instance, token)`.
    fn read_leases(&self) -> Result<Vec<(String, String, u64)>> {
        // In hashed partitions a key's lease is its partition's.
        let lease_keys: Vec<String> = self
            .plan
            .keys
            .iter()
            .map(|k| self.plan.records.lease(k))
            .collect();
        // One GET per lease: on a cluster the leases live in many slots.
        let read = async {
            let mut values = Vec::with_capacity(lease_keys.len());
            for lease in lease_keys {
                values.push(self.client.get::<Option<String>, _>(lease).await?);
            }
            Ok::<_, fred::error::Error>(values)
        };
        let values: Vec<Option<String>> = self
            .runtime
            .block_on(tokio::time::timeout(LEASE_READ_WITHIN, read))
            .context("timed out")??;
        Ok(self
            .plan
            .keys
            .iter()
            .zip(values)
            .filter_map(|(key, value)| {
                // `{instance}:{nonce}:{token}`
                let (owner, token) = value?
                    .rsplit_once(':')
                    .map(|(o, t)| (o.to_owned(), t.to_owned()))?;
                let (instance, _nonce) = owner.rsplit_once(':')?;
                Some((key.clone(), instance.to_owned(), token.parse().ok()?))
            })
            .collect())
    }

    /// One turn of the loop: lines, exits, resumes, overdue stops, Redis,
    /// replacements.
    fn tick(&mut self) -> Result<()> {
        if self.interrupted.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
        let slow = self.plan.lease_ttl + SLOW_FAILOVER_MARGIN;
        for start in self.fleet.pump() {
            let measured = self.failovers.on_start(&start.key, start.token, start.at);
            if let Some(m) = measured.filter(|m| m.took > slow).cloned() {
                self.log(format!(
                    "slow failover: {} taken over {:?} after {} (over TTL + {SLOW_FAILOVER_MARGIN:?})",
                    m.key, m.took, m.cause
                ));
            }
        }
        for note in self.fleet.take_notes() {
            self.log(note);
        }
        for exit in self.fleet.reap()? {
            match exit {
                Exit::Graceful { name, replace } => {
                    self.log(format!("{name} stopped gracefully"));
                    self.spawns_due += usize::from(replace);
                }
                Exit::Unexpected {
                    name,
                    status,
                    ready: false,
                    ..
                } => {
                    // A worker that cannot start would fail again: stop here.
                    bail!("worker {name} exited before it was ready ({status}); its error is above");
                }
                Exit::Unexpected {
                    name,
                    status,
                    last_lines,
                    ..
                } => {
                    self.unexpected_exits += 1;
                    self.log(format!(
                        "{name} EXITED UNEXPECTEDLY ({status}); its last lines: {last_lines:?}"
                    ));
                    self.spawns_due += 1;
                }
            }
        }
        self.tend_relays()?;
        self.resume_due(Instant::now())?;
        self.kill_overdue_stops()?;
        self.collect_redis_fault()?;
        self.collect_db_fault()?;
        let away = self.redis_fault.is_some() || self.db_fault.is_some();
        while self.spawns_due > 0 && !away {
            let name = self.fleet.spawn()?;
            self.spawns_due -= 1;
            self.log(format!("started {name}"));
        }
        while self.relay_spawns_due > 0 && !away {
            let name = self.relays.spawn()?;
            self.relay_spawns_due -= 1;
            self.log(format!("started relay {name}"));
        }
        Ok(())
    }

    /// Reads the relay-only processes' lines (they print no runs) and
    /// replaces those that exited on their own.
    fn tend_relays(&mut self) -> Result<()> {
        let _ = self.relays.pump();
        for exit in self.relays.reap()? {
            match exit {
                Exit::Graceful { name, .. } => self.log(format!("relay {name} stopped gracefully")),
                Exit::Unexpected {
                    name,
                    status,
                    ready: false,
                    ..
                } => bail!("relay {name} exited before it was ready ({status}); its error is above"),
                Exit::Unexpected {
                    name,
                    status,
                    last_lines,
                    ..
                } => {
                    self.unexpected_exits += 1;
                    self.log(format!(
                        "relay {name} EXITED UNEXPECTEDLY ({status}); its last lines: {last_lines:?}"
                    ));
                    self.relay_spawns_due += 1;
                }
            }
        }
        Ok(())
    }

    /// The fleet `name` belongs to (relay-only processes are `r1`, `r2`...).
    fn fleet_of(&mut self, name: &str) -> &mut Fleet {
        if self.relays.member(name).is_some() {
            &mut self.relays
        } else {
            &mut self.fleet
        }
    }

    /// SIGCONTs the stopped instances due by `now`.
    fn resume_due(&mut self, now: Instant) -> Result<()> {
        let (due, later) = std::mem::take(&mut self.resumes)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.resumes = later;
        for (_, name) in due {
            let fleet = self.fleet_of(&name);
            if fleet.member(&name).is_some_and(|m| m.state == State::Paused) {
                fleet.resume(&name)?;
                self.log(format!("resume {name}"));
            }
        }
        Ok(())
    }

    /// Kills instances whose graceful stop takes longer than [`STOP_WITHIN`].
    fn kill_overdue_stops(&mut self) -> Result<()> {
        let now = Instant::now();
        let overdue = self.fleet.names(
            |m| matches!(m.state, State::Stopping { since, .. } if now.duration_since(since) > STOP_WITHIN),
        );
        for name in overdue {
            let replace = self
                .fleet
                .member(&name)
                .is_some_and(|m| matches!(m.state, State::Stopping { replace: true, .. }));
            self.fleet.kill(&name)?;
            self.stop_timeouts += 1;
            self.spawns_due += usize::from(replace);
            self.log(format!(
                "{name} did not stop within {STOP_WITHIN:?} of SIGTERM: killed"
            ));
        }
        Ok(())
    }

    /// Takes Redis back from a finished fault.
    fn collect_redis_fault(&mut self) -> Result<()> {
        if !self.redis_fault.as_ref().is_some_and(JoinHandle::is_finished) {
            return Ok(());
        }
        let handle = self.redis_fault.take().context("no Redis fault")?;
        let (redis, result) = handle
            .join()
            .map_err(|_| anyhow::anyhow!("the Redis fault's thread panicked"))?;
        self.redis = Some(redis);
        result.context("the Redis fault failed")?;
        self.log("redis is back");
        Ok(())
    }

    /// Ends the faults: Redis back, stopped instances resumed, publishing
    /// stopped and the outbox settled. Returns how many events were raised.
    fn quiesce(&mut self, traffic: Traffic) -> Result<u64> {
        self.log("faults over; letting everything settle");
        self.wait_until(REDIS_BACK_WITHIN, "Redis to be back", |c| c.redis_fault.is_none())?;
        self.wait_until(REDIS_BACK_WITHIN, "PostgreSQL to be back", |c| {
            c.db_fault.is_none()
        })?;
        let paused: Vec<(Instant, String)> = std::mem::take(&mut self.resumes);
        for (_, name) in paused {
            let fleet = self.fleet_of(&name);
            if fleet.member(&name).is_some_and(|m| m.state == State::Paused) {
                fleet.resume(&name)?;
                self.log(format!("resume {name}"));
            }
        }
        traffic.stop();
        let within = self.plan.drain_within;
        self.wait_until(within, "the publisher to settle the outbox", |_| {
            traffic.is_finished()
        })?;
        let raised = self.runtime.block_on(traffic.join())?;
        self.log(format!("published {raised} events"));
        Ok(raised)
    }

    /// Waits until every published event was applied, or until none has
    /// been for the drain timeout: a backlog that drains slowly (a run
    /// publishing faster than the instances can apply under faults) is not
    /// mistaken for a stuck partition.
    fn drain(&mut self) -> Result<()> {
        let patience = self.plan.drain_within;
        let mut last_check = Instant::now();
        let mut last_progress = Instant::now();
        let mut last_report = Instant::now();
        let mut left = u64::MAX;
        loop {
            self.tick()?;
            if last_check.elapsed() >= VERIFY_EVERY {
                last_check = Instant::now();
                let verdict = self.verify()?;
                if verdict.lost == 0 {
                    self.log("every published event was applied");
                    return Ok(());
                }
                if verdict.lost < left {
                    left = verdict.lost;
                    last_progress = Instant::now();
                }
                self.resolve_halts();
                if last_progress.elapsed() >= patience {
                    self.log(format!(
                        "no event applied for {patience:?}: {} events not applied",
                        verdict.lost
                    ));
                    self.describe_stuck(&verdict);
                    return Ok(());
                }
                if last_report.elapsed() >= DRAIN_REPORT_EVERY {
                    last_report = Instant::now();
                    self.log(format!("draining: {} events left", verdict.lost));
                }
            }
            std::thread::sleep(TICK);
        }
    }

    /// Retries the halted partitions and parked keys, if any (see
    /// [`stuck::resolve`]), and logs what it did.
    fn resolve_halts(&mut self) {
        let resolved = self.runtime.block_on(tokio::time::timeout(
            VERIFY_WITHIN,
            stuck::resolve(&self.client, &self.plan.records),
        ));
        match resolved {
            Ok(Ok((lines, resolved))) => {
                self.resolved.partitions += resolved.partitions;
                self.resolved.parked_keys += resolved.parked_keys;
                for line in lines {
                    self.log(line);
                }
            }
            Ok(Err(error)) => self.log(format!("could not list the halted partitions: {error:#}")),
            Err(_) => self.log("listing the halted partitions timed out"),
        }
    }

    /// Logs what Redis holds for the first keys that did not drain.
    fn describe_stuck(&mut self, verdict: &Verdict) {
        let stuck: Vec<String> = verdict
            .per_key
            .iter()
            .filter(|(_, report)| !report.lost.is_empty())
            .map(|(key, _)| key.clone())
            .take(STUCK_KEYS_SHOWN)
            .collect();
        let described = self.runtime.block_on(tokio::time::timeout(
            VERIFY_WITHIN,
            stuck::describe(&self.client, &self.plan.records, &stuck),
        ));
        match described {
            Ok(Ok(lines)) => {
                for line in lines {
                    self.log(format!("stuck {line}"));
                }
            }
            Ok(Err(error)) => self.log(format!("could not describe the stuck partitions: {error:#}")),
            Err(_) => self.log("describing the stuck partitions timed out"),
        }
    }

    /// Stops every instance gracefully and reads their last lines.
    fn stop_all(&mut self) -> Result<()> {
        self.spawns_due = 0;
        self.relay_spawns_due = 0;
        let live = |fleet: &Fleet| {
            fleet.names(|m| matches!(m.state, State::Starting | State::Running | State::Paused))
        };
        let (instances, relays) = (live(&self.fleet), live(&self.relays));
        self.log(format!(
            "stopping {} instances and {} relays",
            instances.len(),
            relays.len()
        ));
        for name in instances.into_iter().chain(relays) {
            let fleet = self.fleet_of(&name);
            if fleet.member(&name).is_some_and(|m| m.state == State::Paused) {
                fleet.resume(&name)?;
            }
            fleet.terminate(&name, false)?;
        }
        self.wait_until(STOP_WITHIN * 2, "every instance to exit", |c| {
            c.fleet.live() == 0 && c.relays.live() == 0
        })?;
        self.wait_until(STOP_WITHIN, "the instances' last lines", |c| {
            c.fleet.all_read() && c.relays.all_read()
        })
    }

    /// The verifier's verdict on what the instances recorded.
    fn verify(&self) -> Result<Verdict> {
        let verdict = self
            .runtime
            .block_on(tokio::time::timeout(VERIFY_WITHIN, async {
                if let Some(effects) = &self.effects {
                    effects.mirror(&self.client, &self.plan.keys).await?;
                }
                anyhow::Ok(ordo_harness::verify::verify_with(&self.client, &self.plan.records).await?)
            }))
            .context("verifying timed out")??;
        Ok(verdict)
    }

    /// Runs the loop until `condition` holds, or fails after `within`.
    fn wait_until(&mut self, within: Duration, what: &str, condition: impl Fn(&Self) -> bool) -> Result<()> {
        let started = Instant::now();
        loop {
            self.tick()?;
            if condition(self) {
                return Ok(());
            }
            if started.elapsed() >= within {
                bail!("timed out after {within:?} waiting for {what}");
            }
            std::thread::sleep(TICK);
        }
    }

    /// A progress line on stderr, with the time since the run began.
    fn log(&mut self, message: impl Display) {
        let now = Instant::now();
        let message = message.to_string();
        eprintln!("chaos [{}] {message}", self.at(now));
        self.timeline.push((now, message));
    }

    /// `instant` as the time since the run began.
    fn at(&self, instant: Instant) -> String {
        format!(
            "{:>8.3}s",
            instant.saturating_duration_since(self.clock).as_secs_f64()
        )
    }

    /// One line per event applied more than once: its tokens, the cause
    /// of each repeat, every run of it (time, instance, token, attempt),
    /// and what happened just before its last run.
    fn explain(&self, duplicates: &[Duplicate]) -> Vec<String> {
        duplicates
            .iter()
            .map(|d| {
                let runs = self.fleet.runs_of(&d.key, d.seq);
                let described: Vec<String> = runs
                    .iter()
                    .map(|r| {
                        format!(
                            "[{}] {} token {} attempt {}",
                            self.at(r.at),
                            r.instance,
                            r.token,
                            r.attempt
                        )
                    })
                    .collect();
                let before = runs.last().and_then(|last| {
                    self.timeline
                        .iter()
                        .rev()
                        .find(|(at, _)| *at <= last.at)
                        .map(|(at, event)| format!("[{}] {event}", self.at(*at)))
                });
                let tokens: Vec<String> = d.tokens.iter().map(u64::to_string).collect();
                format!(
                    "{}/{} applied under tokens {} ({}); runs: {}; last event before its last run: {}",
                    d.key,
                    d.seq,
                    tokens.join(", "),
                    d.causes.join(", "),
                    described.join(", "),
                    before.unwrap_or_else(|| "none".to_owned()),
                )
            })
            .collect()
    }
}

/// The node a cluster fault hits, as (index, port): for a failover, a
/// replica of a primary chosen by `pick`; else that primary.
fn cluster_target(cluster: &RedisCluster, kind: FaultKind, pick: u64) -> Result<(usize, u16)> {
    let primaries = cluster
        .primaries()
        .context("could not list the cluster's primaries")?;
    ensure!(!primaries.is_empty(), "the cluster has no reachable primary");
    let primary = primaries[usize::try_from(pick % primaries.len() as u64).unwrap_or(0)];
    let index = if kind == FaultKind::ClusterFailover {
        *cluster
            .replicas_of(primary)
            .context("could not list the replicas")?
            .first()
            .with_context(|| format!("primary {primary} has no replica to fail over to"))?
    } else {
        primary
    };
    Ok((index, cluster.node(index)?.port()))
}

/// Restarts or crashes one node of the run's own cluster (`node` a primary),
/// or fails over to replica `node`, and waits until the cluster is ok again.
fn fault_cluster(redis: &mut BenchRedis, node: usize, kind: FaultKind, outage: Duration) -> Result<()> {
    let cluster = redis
        .cluster_mut()
        .context("a cluster named by URL cannot be faulted")?;
    if kind == FaultKind::ClusterFailover {
        return cluster.failover(node).context("CLUSTER FAILOVER failed");
    }
    let target = cluster.node_mut(node)?;
    if kind == FaultKind::RedisCrash {
        target.kill().context("could not kill the cluster node")?;
        // The outage is the fault being injected, not a wait for a condition.
        std::thread::sleep(outage);
    }
    target.restart().context("could not restart the cluster node")?;
    cluster.wait_ok().context("the cluster did not recover")?;
    Ok(())
}

/// Restarts or crashes the run's own Redis.
fn fault_redis(redis: &mut BenchRedis, kind: FaultKind, outage: Duration) -> Result<()> {
    let server = redis
        .server_mut()
        .context("a Redis named by URL cannot be restarted")?;
    if kind == FaultKind::RedisCrash {
        server.kill().context("could not kill Redis")?;
        // The outage is the fault being injected, not a wait for a condition.
        std::thread::sleep(outage);
    }
    server.restart().context("could not restart Redis")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use ordo_testkit::NodeRole;

    use super::*;
    use crate::redis::RedisArgs;

    /// The cluster faults on a real cluster: each hits the node it names and
    /// leaves the cluster ok, with every slot served.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_faults_hit_the_chosen_node_and_the_cluster_recovers() -> Result<()> {
        let args = RedisArgs {
            redis_url: None,
            cluster: true,
            ..RedisArgs::default()
        };
        let mut redis = args
            .start_with(
                ordo_testkit::Redis::builder(),
                RedisCluster::builder().append_only(true).replicas(true),
            )
            .await?;
        assert!(redis.is_cluster() && redis.server_mut().is_none());
        let outage = Duration::from_millis(300);
        for (pick, kind) in [
            (0, FaultKind::ClusterFailover),
            (1, FaultKind::RedisCrash),
            (2, FaultKind::RedisRestart),
        ] {
            let cluster = redis.cluster_mut().context("a cluster of the run's own")?;
            let (node, port) = cluster_target(cluster, kind, pick)?;
            assert_eq!(cluster.node(node)?.port(), port);
            let role = cluster.node(node)?.role()?;
            let expected_before = if kind == FaultKind::ClusterFailover {
                matches!(role, NodeRole::Replica { .. })
            } else {
                role == NodeRole::Primary
            };
            assert!(expected_before, "{kind}: node {node} is {role:?}");
            redis = tokio::task::spawn_blocking(move || {
                fault_cluster(&mut redis, node, kind, outage).map(|()| redis)
            })
            .await??;
            let cluster = redis.cluster_mut().context("a cluster of the run's own")?;
            cluster.wait_ok()?;
            assert_eq!(cluster.primaries()?.len(), 3, "{kind}");
            if kind == FaultKind::ClusterFailover {
                assert_eq!(cluster.node(node)?.role()?, NodeRole::Primary, "{kind}");
            }
        }
        Ok(())
    }
}
