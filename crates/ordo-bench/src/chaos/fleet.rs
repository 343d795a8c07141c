//! The engine instances of a chaos run: `ordo-bench worker` processes
//! ([`crate::worker`]), what their stdout lines say (stamped when the
//! controller receives them), and the signals the controller sends them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ordo_harness::line::{self, Line};
use ordo_testkit::Process;

use crate::worker::WorkerArgs;

/// How long the lines of a process that died without saying `stopped`
/// (killed) are still read: what it wrote before dying reaches the reader
/// thread within microseconds, this is a wide margin.
const AFTER_DEATH: Duration = Duration::from_secs(2);

/// The environment variable whose `RUST_LOG` filter the workers log with
/// (on the inherited stderr).
pub(crate) const LOG_ENV: &str = "ORDO_CHAOS_LOG";

/// The workers' log filter without [`LOG_ENV`]: errors only, and nothing of
/// the Redis client, which reports every connection a Redis restart drops.
const DEFAULT_LOG: &str = "error,fred=off";

/// How to start a worker: Ordo's default timings but for the lease TTL
/// (and the heartbeat, which follows it, and discovery, which must stay
/// under it), so that what is checked is what a deployment runs, faster.
#[derive(Debug, Clone)]
pub(crate) struct WorkerSpec {
    /// The Redis URL.
    pub(crate) redis_url: ordo_redis::SecretUrl,
    /// Its TLS files (passed to the workers by environment).
    pub(crate) tls: crate::redis::TlsPaths,
    /// The lease TTL.
    pub(crate) lease_ttl_ms: u64,
    /// The PostgreSQL mode's database and schema.
    pub(crate) postgres: Option<super::postgres::PgTarget>,
    /// Relay-only processes (named `r1`, `r2`...), not engine instances.
    pub(crate) relay_only: bool,
    /// The `chaos` category in that many hashed partitions (`None`: a
    /// partition per key).
    pub(crate) hashed: Option<std::num::NonZeroU32>,
    /// Shared command keys every instance sends commands for (0: no commands).
    pub(crate) command_keys: usize,
    /// The handler's `ack_window` (0: none).
    pub(crate) ack_window: u32,
}

/// Where an instance is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Started, not `ready` yet.
    Starting,
    /// Consuming.
    Running,
    /// SIGSTOPped.
    Paused,
    /// SIGTERMed at `since`; a fresh instance replaces it once it has
    /// exited if `replace`.
    Stopping { since: Instant, replace: bool },
    /// Exited (or killed) at `since`.
    Gone { since: Instant },
}

/// One instance.
#[derive(Debug)]
pub(crate) struct Member {
    pub(crate) name: String,
    process: Process,
    pub(crate) state: State,
    /// Runs that printed `start` and not yet their end: `(key, seq, token)`.
    in_flight: BTreeSet<(String, u64, u64)>,
    /// Whether it printed `stopped` (its last line).
    said_stopped: bool,
}

impl Member {
    /// Whether one of its handler runs is in flight: `key/seq` of one.
    pub(crate) fn mid_handler(&self) -> Option<String> {
        self.in_flight.first().map(|(key, seq, _)| format!("{key}/{seq}"))
    }

    /// Whether its lines can still change.
    fn open(&self, now: Instant) -> bool {
        match self.state {
            State::Gone { since } => !self.said_stopped && now.duration_since(since) < AFTER_DEATH,
            _ => true,
        }
    }

    fn is_live(&self) -> bool {
        !matches!(self.state, State::Gone { .. })
    }
}

/// Counts of the workers' lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LineCounts {
    /// `start`: handler runs begun.
    pub(crate) starts: u64,
    /// `done`: effects committed under the fence.
    pub(crate) done: u64,
    /// `fenced`: effects refused because the run's lease was gone (a stale
    /// owner woke up mid-handler).
    pub(crate) fenced: u64,
    /// `stale`: runs that did not start because their lease was gone.
    pub(crate) stale: u64,
    /// `failed`: runs that failed (Redis unreachable for too long).
    pub(crate) failed: u64,
    /// `cmd_fenced`: command runs whose effect the fence refused.
    pub(crate) cmd_fenced: u64,
    /// `cmd_failed`: command runs that failed otherwise.
    pub(crate) cmd_failed: u64,
}

/// A `start` line: the key, its run's fencing token, when it was received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Start {
    pub(crate) key: String,
    pub(crate) token: u64,
    pub(crate) at: Instant,
}

/// An instance that exited.
#[derive(Debug)]
pub(crate) enum Exit {
    /// After a SIGTERM; `replace` as asked then.
    Graceful { name: String, replace: bool },
    /// On its own: a crash (`ready` false: it never started consuming).
    Unexpected {
        name: String,
        status: ExitStatus,
        ready: bool,
        last_lines: Vec<String>,
    },
}

/// One handler run's `start` line, as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunStart {
    pub(crate) at: Instant,
    pub(crate) instance: String,
    pub(crate) token: u64,
    pub(crate) attempt: u32,
}

/// Every instance started during a run.
#[derive(Debug)]
pub(crate) struct Fleet {
    spec: WorkerSpec,
    members: Vec<Member>,
    /// Per key, the instance and token of the `start` with the highest token.
    owners: BTreeMap<String, (String, u64)>,
    /// Every run's start, per key and seq: what explains a duplicate.
    history: HashMap<(String, u64), Vec<RunStart>>,
    lines: LineCounts,
    /// The command lines worth the run's log (anything but a plain
    /// success), `{instance}: {line}`, not yet taken.
    notes: Vec<String>,
}

impl Fleet {
    /// No instances yet.
    pub(crate) fn new(spec: WorkerSpec) -> Self {
        Self {
            spec,
            members: Vec::new(),
            owners: BTreeMap::new(),
            history: HashMap::new(),
            lines: LineCounts::default(),
            notes: Vec::new(),
        }
    }

    /// Starts a fresh instance (`w1`, `w2`, ... in start order); returns its name.
    pub(crate) fn spawn(&mut self) -> Result<String> {
        let prefix = if self.spec.relay_only { 'r' } else { 'w' };
        let name = format!("{prefix}{}", self.members.len() + 1);
        let log = std::env::var(LOG_ENV).unwrap_or_else(|_| DEFAULT_LOG.to_owned());
        let mut args = WorkerArgs::new(&name, self.spec.lease_ttl_ms);
        if let Some(target) = &self.spec.postgres {
            args.database_url = Some(target.url.clone());
            args.pg_schema.clone_from(&target.schema);
            args.relay_only = self.spec.relay_only;
        }
        args.hashed_partitions = self.spec.hashed;
        args.ack_window = self.spec.ack_window;
        if !self.spec.relay_only {
            args.command_keys = self.spec.command_keys;
        }
        // Discovery must stay under the TTL (an instance's announcement
        // lives one TTL); Ordo's default otherwise.
        args.discovery_ms = args.discovery_ms.min(self.spec.lease_ttl_ms / 2);
        let mut command = running_executable(args.command(self.spec.redis_url.expose(), &self.spec.tls)?);
        command.env("RUST_LOG", log);
        let process = Process::spawn(command).with_context(|| format!("could not start worker {name}"))?;
        self.members.push(Member {
            name: name.clone(),
            process,
            state: State::Starting,
            in_flight: BTreeSet::new(),
            said_stopped: false,
        });
        Ok(name)
    }

    /// Instances started so far.
    pub(crate) fn started(&self) -> usize {
        self.members.len()
    }

    /// The counts of the lines read so far.
    pub(crate) fn lines(&self) -> LineCounts {
        self.lines
    }

    /// The command lines read since the last call (see `notes`).
    pub(crate) fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// The member named `name`.
    pub(crate) fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// Names of the members for which `filter` holds.
    pub(crate) fn names(&self, filter: impl Fn(&Member) -> bool) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| filter(m))
            .map(|m| m.name.clone())
            .collect()
    }

    /// Members not gone.
    pub(crate) fn live(&self) -> usize {
        self.members.iter().filter(|m| m.is_live()).count()
    }

    /// The keys whose latest `start` came from `name`, with that run's token.
    pub(crate) fn owned_by_lines(&self, name: &str) -> Vec<(String, u64)> {
        self.owners
            .iter()
            .filter(|(_, (owner, _))| owner == name)
            .map(|(key, (_, token))| (key.clone(), *token))
            .collect()
    }

    /// The runs of event `seq` of `key` that started, in order.
    pub(crate) fn runs_of(&self, key: &str, seq: u64) -> &[RunStart] {
        self.history
            .get(&(key.to_owned(), seq))
            .map_or(&[], Vec::as_slice)
    }

    /// Reads every line printed since the last call; returns the `start`s.
    pub(crate) fn pump(&mut self) -> Vec<Start> {
        let now = Instant::now();
        let mut starts = Vec::new();
        for member in &mut self.members {
            if !member.open(now) {
                continue;
            }
            // A zero deadline returns the next unread line, or an error when
            // there is none: a non-blocking read.
            while let Ok(text) = member.process.wait_for_line(|_| true, Duration::ZERO) {
                let at = Instant::now();
                let Some(line) = Line::parse(&text) else {
                    continue;
                };
                let tracking = Tracking {
                    counts: &mut self.lines,
                    owners: &mut self.owners,
                    history: &mut self.history,
                    notes: &mut self.notes,
                };
                if let Some(start) = observe(member, tracking, &line, at) {
                    starts.push(start);
                }
            }
        }
        starts
    }

    /// Notices the instances that exited since the last call.
    pub(crate) fn reap(&mut self) -> Result<Vec<Exit>> {
        let mut exits = Vec::new();
        for member in &mut self.members {
            if !matches!(
                member.state,
                State::Starting | State::Running | State::Stopping { .. }
            ) {
                continue;
            }
            let exited = member
                .process
                .wait_timeout(Duration::ZERO)
                .with_context(|| format!("could not check on worker {}", member.name))?;
            let Some(status) = exited else { continue };
            let previous = member.state;
            member.state = State::Gone {
                since: Instant::now(),
            };
            exits.push(match previous {
                State::Stopping { replace, .. } => Exit::Graceful {
                    name: member.name.clone(),
                    replace,
                },
                _ => Exit::Unexpected {
                    name: member.name.clone(),
                    status,
                    ready: previous != State::Starting,
                    last_lines: last_lines(&member.process),
                },
            });
        }
        Ok(exits)
    }

    /// SIGKILLs `name` (reaped at once).
    pub(crate) fn kill(&mut self, name: &str) -> Result<()> {
        let member = self.member_mut(name)?;
        member
            .process
            .kill()
            .with_context(|| format!("could not kill worker {name}"))?;
        member.state = State::Gone {
            since: Instant::now(),
        };
        Ok(())
    }

    /// SIGSTOPs `name`; returns once it is stopped.
    pub(crate) fn pause(&mut self, name: &str) -> Result<()> {
        let member = self.member_mut(name)?;
        member
            .process
            .pause()
            .with_context(|| format!("could not stop worker {name}"))?;
        member.state = State::Paused;
        Ok(())
    }

    /// SIGCONTs `name`.
    pub(crate) fn resume(&mut self, name: &str) -> Result<()> {
        let member = self.member_mut(name)?;
        member
            .process
            .resume()
            .with_context(|| format!("could not resume worker {name}"))?;
        member.state = State::Running;
        Ok(())
    }

    /// SIGTERMs `name` without waiting; [`Fleet::reap`] reports its exit.
    pub(crate) fn terminate(&mut self, name: &str, replace: bool) -> Result<()> {
        let member = self.member_mut(name)?;
        member
            .process
            .terminate()
            .with_context(|| format!("could not terminate worker {name}"))?;
        member.state = State::Stopping {
            since: Instant::now(),
            replace,
        };
        Ok(())
    }

    /// Whether every line of every instance has been read (all are gone).
    pub(crate) fn all_read(&self) -> bool {
        let now = Instant::now();
        self.members.iter().all(|m| !m.is_live() && !m.open(now))
    }

    fn member_mut(&mut self, name: &str) -> Result<&mut Member> {
        self.members
            .iter_mut()
            .find(|m| m.name == name)
            .with_context(|| format!("no worker named {name}"))
    }
}

/// `command` with its program replaced by `/proc/self/exe` where there is
/// one: the executable this process runs, even after a rebuild replaced the
/// file on disk (a long run would otherwise start new instances of another
/// build, or fail to start them).
fn running_executable(command: Command) -> Command {
    if !Path::new(SELF_EXE).exists() {
        return command;
    }
    let mut running = Command::new(SELF_EXE);
    running.args(command.get_args());
    // The URLs travel in the environment (not in `ps`-visible arguments).
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => running.env(name, value),
            None => running.env_remove(name),
        };
    }
    running
}

/// The running executable, on Linux.
const SELF_EXE: &str = "/proc/self/exe";

/// What the lines update, besides their member.
struct Tracking<'a> {
    counts: &'a mut LineCounts,
    owners: &'a mut BTreeMap<String, (String, u64)>,
    history: &'a mut HashMap<(String, u64), Vec<RunStart>>,
    notes: &'a mut Vec<String>,
}

/// Applies one line of `member`; returns it as a [`Start`] if it is one.
fn observe(member: &mut Member, tracking: Tracking<'_>, line: &Line, at: Instant) -> Option<Start> {
    let Tracking {
        counts,
        owners,
        history,
        notes,
    } = tracking;
    match line.kind() {
        line::READY if member.state == State::Starting => member.state = State::Running,
        line::STOPPED => member.said_stopped = true,
        line::START => {
            let (key, seq, token) = (line.key()?, line.seq()?, line.token()?);
            counts.starts += 1;
            member.in_flight.insert((key.to_owned(), seq, token));
            let newer = owners.get(key).is_none_or(|(_, known)| token >= *known);
            if newer {
                owners.insert(key.to_owned(), (member.name.clone(), token));
            }
            history.entry((key.to_owned(), seq)).or_default().push(RunStart {
                at,
                instance: member.name.clone(),
                token,
                attempt: line.get("attempt").and_then(|a| a.parse().ok()).unwrap_or(0),
            });
            return Some(Start {
                key: key.to_owned(),
                token,
                at,
            });
        }
        kind @ (line::DONE | line::FENCED | line::STALE | line::FAILED) => {
            let counter = match kind {
                line::DONE => &mut counts.done,
                line::FENCED => &mut counts.fenced,
                line::STALE => &mut counts.stale,
                _ => &mut counts.failed,
            };
            *counter += 1;
            if let (Some(key), Some(seq), Some(token)) = (line.key(), line.seq(), line.token()) {
                member.in_flight.remove(&(key.to_owned(), seq, token));
            }
        }
        kind @ (line::CMD_FENCED
        | line::CMD_STALE
        | line::CMD_FAILED
        | line::CMD_OVERLAP
        | line::SENT_FAILED
        | line::SENT_WRONG) => {
            match kind {
                line::CMD_FENCED => counts.cmd_fenced += 1,
                line::CMD_FAILED => counts.cmd_failed += 1,
                _ => {}
            }
            notes.push(format!("{}: {line}", member.name));
        }
        _ => {}
    }
    None
}

/// The last lines a process printed, for a report about its death.
fn last_lines(process: &Process) -> Vec<String> {
    let lines = process.lines();
    lines[lines.len().saturating_sub(5)..].to_vec()
}
