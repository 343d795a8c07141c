//! Partition ownership by member lease (Kafka's member heartbeat), as a
//! state machine: each process start keeps one liveness key, and a
//! partition's lease names its holder's member without expiring itself, so
//! a process renews one key whatever the number of partitions it owns, and
//! a member that stops renewing loses every partition at once.
//!
//! - **Members.** A process start registers its member key
//!   `member:{instance:nonce}` (`SET NX PX ttl`: the nonce is new, so the
//!   key is too) and renews it with `PEXPIRE`, which never creates a key:
//!   once a member key has expired, that member is dead for good, and its
//!   process learns it from its next renewal (`PEXPIRE` answers 0). The
//!   process then drops every partition it worked on and starts again as a
//!   new member (a new nonce). Its *validity* is its own clock's view of its
//!   key: the time it sent its last successful renewal plus the TTL, less a
//!   margin for clock drift. A member key expires no earlier than that, so
//!   once the key has expired the process's validity has passed too.
//! - **Partition leases** hold `instance:nonce:token` and no TTL. The fence
//!   is unchanged: a fenced read, commit or acknowledgement names the lease
//!   value it works under and is refused once the lease holds another.
//! - **Acquisition** is three calls, which a Redis Cluster cannot make
//!   atomic (the member key and the lease sit in different slots): read the
//!   lease; if another member holds it, ask whether that member's key
//!   exists; if not (or the lease is free), *take* the lease with a compare
//!   and set on the value read (the token grows). A member's death is
//!   stable (no renewal revives it), so the answer "dead" stays true between
//!   the second call and the third, and the compare makes sure nobody took
//!   the lease meanwhile.
//! - **Runs.** A worker holding a lease reads the partition's head under
//!   the fence and starts the handler only while its member is valid; the
//!   handler's commit (with the acknowledgement) goes through the fence.
//! - **A clean stop**: the process takes no new partition or message,
//!   finishes the runs it has going (however long a handler in blocking
//!   code takes: its member key is renewed meanwhile), releases each lease
//!   with a compare and delete, and only then deletes its member key.
//! - **A rolling upgrade**: an instance of the release before member leases
//!   has no member key and takes only free leases, each with a TTL of its
//!   own, which it renews. A lease that has a TTL is that instance's: this
//!   release takes it only once it has expired (its holder has no member
//!   key, so it would look dead while it runs); the old release never takes
//!   a lease without a TTL (it waits: safe, it only starves).
//! - **Faults**: a process crashes (its key stays until it expires) and
//!   starts again as a new member, or stalls (SIGSTOP) long enough for its
//!   key to expire and then resumes; commands travel through an unordered
//!   network, so a call may land long after it was sent, after later calls
//!   of others.
//!
//! As in [`crate::protocol`], a member key expires only while its process is
//! stalled or down (a live process keeps renewing it), and each process
//! reads a partition only when it may have something to do there (a lease
//! free, its own, or held by a member whose key is gone): abstractions of
//! time and of the balance loop that keep the state space finite without
//! removing a race. Not modelled here: what [`crate::protocol`] checks of
//! the fenced calls themselves (attempts, halts, reaps, acknowledgement
//! windows): the fence is the same compare of the lease value, so those
//! properties carry over.
//!
//! The properties: at most one live run per partition among the runs that
//! started while their member was valid (a run that was going when its
//! member expired is a stalled owner's: the fence refuses what it commits);
//! a run starts only while its member's key exists; effects land once, in
//! order; and, on every history that ends, every message of every partition
//! is handled (a dead member's partitions are taken over).

use std::collections::BTreeSet;
use std::fmt;

use stateright::{HasDiscoveries, Model, Property};

use crate::explore::{Counterexample, Outcome, explore};
use crate::mutant::mutants;
use crate::protocol::{Identity, LeaseValue};

/// What is explored: instances × partitions × messages × faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberConfig {
    /// Engine instances (processes).
    pub instances: u8,
    /// Partitions, each with its own lease.
    pub partitions: u8,
    /// Messages waiting in each partition.
    pub messages: u8,
    /// SIGKILLs (the process starts again as a new member).
    pub crashes: u8,
    /// SIGSTOPs past the member key's TTL.
    pub stalls: u8,
    /// Clean stops: the process finishes its runs, releases its leases,
    /// deletes its member key and exits (it may start again).
    pub stops: u8,
    /// Process 0 runs the release before member leases (a rolling
    /// upgrade): it has no member key, takes only free leases, each with a
    /// TTL of its own that it renews, and runs while its lease has not
    /// expired.
    pub legacy: bool,
}

impl MemberConfig {
    /// Two instances, one partition of two messages, a crash and a stall
    /// (the default of `ordo-model member`, and the test suite's).
    pub const FULL: Self = Self {
        instances: 2,
        partitions: 1,
        messages: 2,
        crashes: 1,
        stalls: 1,
        stops: 0,
        legacy: false,
    };

    /// Two partitions of one message each: a member that stops renewing
    /// loses both, and both are taken over.
    pub const PARTITIONS: Self = Self {
        instances: 2,
        partitions: 2,
        messages: 1,
        crashes: 0,
        stalls: 1,
        stops: 0,
        legacy: false,
    };

    /// Two stalls and no crash: a member that expired, resumed and started
    /// again, stalling again.
    pub const STALLS: Self = Self {
        instances: 2,
        partitions: 1,
        messages: 2,
        crashes: 0,
        stalls: 2,
        stops: 0,
        legacy: false,
    };

    /// A clean stop with a stall: the stopping process finishes its run,
    /// releases its lease and deletes its member key, while the other
    /// instance takes over.
    pub const STOP: Self = Self {
        instances: 2,
        partitions: 1,
        messages: 2,
        crashes: 0,
        stalls: 1,
        stops: 1,
        legacy: false,
    };

    /// A rolling upgrade: process 0 runs the release before member leases
    /// (a lease with a TTL, no member key), process 1 this one; a crash and
    /// a stall.
    pub const LEGACY: Self = Self {
        instances: 2,
        partitions: 1,
        messages: 2,
        crashes: 1,
        stalls: 1,
        stops: 0,
        legacy: true,
    };

    /// The configurations `ordo-model member --config NAME` knows.
    pub const NAMED: [(&'static str, Self); 5] = [
        ("full", Self::FULL),
        ("partitions", Self::PARTITIONS),
        ("stalls", Self::STALLS),
        ("stop", Self::STOP),
        ("legacy", Self::LEGACY),
    ];

    /// The configuration called `name` in [`MemberConfig::NAMED`].
    pub fn named(name: &str) -> Option<Self> {
        crate::by_name(&Self::NAMED, name)
    }

    /// The smallest configuration whose faults can expose `mutant`.
    pub fn exposing(mutant: MemberMutant) -> Self {
        let stall = Self {
            instances: 2,
            partitions: 1,
            messages: 1,
            crashes: 0,
            stalls: 1,
            stops: 0,
            legacy: false,
        };
        match mutant {
            MemberMutant::RenewRecreatesMember | MemberMutant::RunWithoutMemberCheck => stall,
            // The holder crashes; its new start and the other instance both
            // see its old member dead and take over.
            MemberMutant::TakeoverWithoutCompare => Self {
                crashes: 1,
                stalls: 0,
                ..stall
            },
            // A clean stop while the handler runs.
            MemberMutant::LeaveWhileRunning => Self {
                stalls: 0,
                stops: 1,
                ..stall
            },
            // No fault at all: the old release's holder runs.
            MemberMutant::LegacyLeaseTakenAsDead => Self {
                stalls: 0,
                legacy: true,
                ..stall
            },
        }
    }
}

impl fmt::Display for MemberConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instances × {} partitions × {} messages × faults (crashes {}, stalls past the TTL {}, clean \
             stops {}){} with calls landing in any order",
            self.instances,
            self.partitions,
            self.messages,
            self.crashes,
            self.stalls,
            self.stops,
            if self.legacy {
                ", process 0 on the release before member leases"
            } else {
                ""
            }
        )
    }
}

mutants! {
    /// A seeded defect of ownership by member lease: each is a hole the
    /// real protocol closes.
    pub enum MemberMutant, unknown UnknownMemberMutant ("member mutant") {
        /// The renewal sets the member key (`SET PX`) instead of extending it
        /// (`PEXPIRE`): a member whose key expired comes back to life after
        /// another instance saw it dead and is taking its partition over.
        RenewRecreatesMember = "renew-recreates-member",
        /// The worker starts a handler without looking at its member's
        /// validity: a member whose key expired while it was stalled runs
        /// under its lease (which nobody has taken yet, so the fenced read
        /// passes) while another takes it over.
        RunWithoutMemberCheck = "run-without-member-check",
        /// The takeover writes the lease without comparing it with the value
        /// read: two instances that both saw a dead holder both take it.
        TakeoverWithoutCompare = "takeover-without-compare",
        /// A stopping process deletes its member key at once, while a handler
        /// of its still runs (in blocking code past the shutdown's grace):
        /// another instance takes the partition over and runs beside it.
        LeaveWhileRunning = "leave-while-running",
        /// A lease with a TTL of its own (an instance of the release before
        /// member leases holds it) is taken like a dead member's: its holder
        /// has no member key, so it looks dead while it runs.
        LegacyLeaseTakenAsDead = "legacy-lease-taken-as-dead",
    }
}

/// At most one live run per partition among the runs that started while
/// their member was valid.
pub const ONE_RUN: &str = "at most one live run holds each partition";
/// A run starts only while its member's key exists.
pub const LIVE_MEMBER: &str = "a run starts only while its member is alive";
/// Each partition's effects land once, in order.
pub const ONCE_IN_ORDER: &str = "each partition's effects land once, in order";
/// On every history that ends, every message of every partition is handled.
pub const EVERY_MESSAGE: &str = "once faults stop, every message of every partition is handled";

/// A call to Redis.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// `GET` of partition `k`'s lease.
    Read(u8),
    /// `EXISTS` of the member key of the holder read (the lease value read
    /// travels with the call for the takeover that follows).
    Alive(u8, LeaseValue),
    /// Compare and set of partition `k`'s lease: taken when it holds the
    /// value read (`None`: free) and, if held, has no TTL of its own.
    Take(u8, Option<LeaseValue>),
    /// The fenced read of partition `k`'s head.
    Fetch(u8, LeaseValue),
    /// The fenced commit (with the acknowledgement) of message `msg`.
    Commit(u8, LeaseValue, u8),
    /// `PEXPIRE` of the sender's member key; whether the sender held itself
    /// valid when it sent it.
    Renew(bool),
    /// Compare and delete of partition `k`'s lease (a clean stop).
    Release(u8, LeaseValue),
    /// `DEL` of the sender's member key (a clean stop, last).
    Leave,
}

/// A call in flight: who sent it, what it asks.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Call {
    /// The member that sent it.
    pub from: Identity,
    /// What it asks.
    pub op: Op,
}

/// What Redis answers.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Reply {
    /// The lease read, and whether it has a TTL (an old release's).
    Lease(Option<LeaseValue>, bool),
    /// Whether the holder's member key exists.
    Alive(bool),
    /// The lease, taken.
    Taken(LeaseValue),
    /// The lease did not hold the value read.
    Busy,
    /// The head under the fence (`None`: nothing left).
    Head(Option<u8>),
    /// Committed.
    Committed,
    /// The fence refused the call: the lease holds another value.
    Fenced,
    /// Whether the member key was there to renew.
    Renewed(bool),
    /// Released (or no longer held), or the member key deleted.
    Done,
}

/// A handler run.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Run {
    /// The lease it works under.
    pub lease: LeaseValue,
    /// The message.
    pub msg: u8,
    /// Its member expired while it was going (a stalled owner's run).
    pub orphaned: bool,
}

/// What a worker does on one partition.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Work {
    /// Nothing: it may try to acquire.
    Idle,
    /// Waiting for the reply to a call (with the run it belongs to).
    Waiting(Op, Option<Run>),
    /// Holding the lease, between runs.
    Holding(LeaseValue),
    /// Running the handler; its commit goes next.
    Running(Run),
}

impl Work {
    fn run(&self) -> Option<Run> {
        match *self {
            Work::Running(run) | Work::Waiting(_, Some(run)) => Some(run),
            _ => None,
        }
    }
}

/// A process's worker on one partition.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Slot {
    /// What it does.
    pub work: Work,
    /// The reply waiting to be read (a stalled process's), if any.
    pub inbox: Option<Reply>,
    /// The holder Redis last said was alive: the worker asks about it again
    /// only once that member's key expires (an abstraction of the balance
    /// loop asking again later, which keeps a worker that is told "alive"
    /// of a dead member, forever, from looping unseen).
    pub told_alive: Option<Identity>,
}

impl Slot {
    const IDLE: Self = Self {
        work: Work::Idle,
        inbox: None,
        told_alive: None,
    };

    /// Its run, if any, is a stalled owner's from now on.
    fn orphan(&mut self) {
        if let Work::Running(run) | Work::Waiting(_, Some(run)) = &mut self.work {
            run.orphaned = true;
        }
    }
}

/// One process.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Process {
    /// Its member: the instance id and this start's nonce.
    pub identity: Identity,
    /// Up (not crashed).
    pub up: bool,
    /// SIGSTOPped.
    pub stalled: bool,
    /// Stopping cleanly: it takes no new partition or message.
    pub stopping: bool,
    /// Its validity has not passed (by its own clock).
    pub valid: bool,
    /// What it does on each partition.
    pub slots: Vec<Slot>,
    /// Its renewal in flight (whether it held itself valid when it sent it).
    pub renewing: Option<bool>,
    /// The renewal's reply waiting to be read.
    pub renewed: Option<bool>,
    /// Renewed since it started or last resumed (a renewal matters only
    /// after a pause: a live member's key does not expire).
    pub fresh: bool,
}

impl Process {
    fn live(&self) -> bool {
        self.up && !self.stalled
    }

    /// The process is gone (killed, or exited after a clean stop).
    fn exit(&mut self) {
        self.up = false;
        self.stalled = false;
        self.stopping = false;
        self.slots.clear();
        self.renewing = None;
        self.renewed = None;
    }
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct MemberState {
    /// The member keys that exist.
    pub members: BTreeSet<Identity>,
    /// Each partition's lease.
    pub leases: Vec<Option<LeaseValue>>,
    /// Whether each partition's lease has a TTL (an old release's).
    pub ttl: Vec<bool>,
    /// The token of the last acquisition (every partition's: tokens only
    /// need to grow).
    pub generation: u8,
    /// Each partition's handled messages, in commit order.
    pub effects: Vec<Vec<u8>>,
    /// The calls in flight.
    pub network: BTreeSet<Call>,
    /// The processes.
    pub processes: Vec<Process>,
    /// The next nonce.
    pub next_nonce: u8,
    /// Crashes left.
    pub crashes: u8,
    /// Stalls left.
    pub stalls: u8,
    /// Clean stops left.
    pub stops: u8,
    /// A run started while its member's key did not exist.
    pub dead_run: bool,
}

impl MemberState {
    /// Whether a live process is `identity` (its key, or its lease with a
    /// TTL, is renewed).
    fn runs_as(&self, identity: Identity) -> bool {
        self.processes
            .iter()
            .any(|process| process.identity == identity && process.live())
    }
}

/// What can happen next.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// Process `p` sends its next call for partition `k`.
    Step(usize, u8),
    /// Process `p` sends a renewal.
    Renew(usize),
    /// Redis carries out a call and answers (to its sender, if it is still
    /// that member).
    Apply(Call),
    /// Process `p` reads the reply for partition `k`.
    Receive(usize, u8),
    /// Process `p` reads its renewal's reply.
    Renewed(usize),
    /// The member key of a stalled or stopped member expires.
    Expire(Identity),
    /// The lease of partition `k`, with a TTL of its own, expires (its
    /// holder, on the old release, is stalled or down).
    ExpireLease(u8),
    /// SIGKILL of process `p`.
    Crash(usize),
    /// Process `p` starts again as a new member.
    Restart(usize),
    /// SIGSTOP of process `p`.
    Stall(usize),
    /// SIGCONT of process `p`.
    Resume(usize),
    /// Process `p` is asked to stop cleanly.
    Stop(usize),
    /// Process `p`, stopping with nothing left on any partition, deletes
    /// its member key and exits.
    Leave(usize),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let member = |id: &Identity| format!("member {}:{}", id.instance, id.nonce);
        match self {
            Self::Step(p, k) => write!(f, "process {p} sends its next call for partition {k}"),
            Self::Renew(p) => write!(f, "process {p} renews its member key"),
            Self::Apply(call) => write!(f, "Redis carries out {:?} from {}", call.op, member(&call.from)),
            Self::Receive(p, k) => write!(f, "process {p} reads its reply for partition {k}"),
            Self::Renewed(p) => write!(f, "process {p} reads its renewal's reply"),
            Self::Expire(id) => write!(f, "the key of {} expires", member(id)),
            Self::ExpireLease(k) => write!(f, "the lease of partition {k} expires"),
            Self::Crash(p) => write!(f, "process {p} is killed"),
            Self::Restart(p) => write!(f, "process {p} starts again"),
            Self::Stall(p) => write!(f, "process {p} stalls"),
            Self::Resume(p) => write!(f, "process {p} resumes"),
            Self::Stop(p) => write!(f, "process {p} is asked to stop"),
            Self::Leave(p) => write!(f, "process {p} deletes its member key and exits"),
        }
    }
}

/// The member lease model for one configuration and mutant.
#[derive(Clone, Debug)]
pub struct Member {
    /// The configuration.
    pub config: MemberConfig,
    /// The seeded defect, if any.
    pub mutant: Option<MemberMutant>,
}

impl Member {
    fn has(&self, mutant: MemberMutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// Whether `identity` is a process of the release before member leases.
    fn legacy(&self, identity: Identity) -> bool {
        self.config.legacy && identity.instance == 0
    }

    fn head(&self, state: &MemberState, k: u8) -> Option<u8> {
        let handled = state.effects[usize::from(k)].len() as u8;
        (handled < self.config.messages).then_some(handled)
    }

    /// A new member for process `p`: a new nonce, its key registered.
    fn start(&self, state: &mut MemberState, p: usize) {
        let identity = Identity {
            instance: p as u8,
            nonce: state.next_nonce,
        };
        state.next_nonce += 1;
        if !self.legacy(identity) {
            state.members.insert(identity);
        }
        let process = &mut state.processes[p];
        process.identity = identity;
        process.stopping = false;
        process.valid = true;
        process.slots = vec![Slot::IDLE; usize::from(self.config.partitions)];
        process.renewing = None;
        process.renewed = None;
        process.fresh = true;
    }

    /// Whether process `p` has something to send for partition `k`. An
    /// idle worker tries only a lease that may be free (free, its own, or
    /// its holder's member gone); a holder reads only while there is a head
    /// and its member is valid.
    fn may_step(&self, state: &MemberState, p: usize, k: u8) -> bool {
        let process = &state.processes[p];
        let ignores_validity = self.has(MemberMutant::RunWithoutMemberCheck);
        let slot = process.slots[usize::from(k)];
        if slot.inbox.is_some() {
            return false;
        }
        match slot.work {
            Work::Idle => {
                // A lease with a TTL is taken only once it expires (by the
                // old release, any held lease).
                let waits = (state.ttl[usize::from(k)] && !self.has(MemberMutant::LegacyLeaseTakenAsDead))
                    || self.legacy(process.identity);
                !process.stopping
                    && process.valid
                    && state.leases[usize::from(k)].is_none_or(|held| {
                        held.holder == process.identity
                            || (!waits
                                && !state.members.contains(&held.holder)
                                && slot.told_alive != Some(held.holder))
                    })
            }
            // A stopping worker releases its lease.
            Work::Holding(_) if process.stopping => true,
            Work::Holding(_) => (process.valid || ignores_validity) && self.head(state, k).is_some(),
            Work::Running(_) => true,
            Work::Waiting(..) => false,
        }
    }

    fn send(state: &mut MemberState, p: usize, k: u8, op: Op, run: Option<Run>) {
        let from = state.processes[p].identity;
        state.network.insert(Call { from, op });
        state.processes[p].slots[usize::from(k)].work = Work::Waiting(op, run);
    }

    /// Redis carries out `call`.
    fn apply(&self, state: &mut MemberState, call: Call) -> Reply {
        match call.op {
            Op::Read(k) => Reply::Lease(state.leases[usize::from(k)], state.ttl[usize::from(k)]),
            Op::Alive(_, held) => Reply::Alive(state.members.contains(&held.holder)),
            Op::Take(k, expected) => {
                let lease = &mut state.leases[usize::from(k)];
                if *lease != expected && !self.has(MemberMutant::TakeoverWithoutCompare) {
                    return Reply::Busy;
                }
                // A held lease with a TTL is an old release's, never a
                // dead member's.
                let ttl = &mut state.ttl[usize::from(k)];
                if lease.is_some() && *ttl && !self.has(MemberMutant::LegacyLeaseTakenAsDead) {
                    return Reply::Busy;
                }
                *ttl = self.config.legacy && call.from.instance == 0;
                state.generation += 1;
                let taken = LeaseValue {
                    holder: call.from,
                    token: state.generation,
                };
                *lease = Some(taken);
                Reply::Taken(taken)
            }
            Op::Fetch(k, lease) => {
                if state.leases[usize::from(k)] != Some(lease) {
                    return Reply::Fenced;
                }
                Reply::Head(self.head(state, k))
            }
            Op::Commit(k, lease, msg) => {
                if state.leases[usize::from(k)] != Some(lease) || self.head(state, k) != Some(msg) {
                    return Reply::Fenced;
                }
                state.effects[usize::from(k)].push(msg);
                Reply::Committed
            }
            Op::Release(k, lease) => {
                let held = &mut state.leases[usize::from(k)];
                if *held == Some(lease) {
                    *held = None;
                    state.ttl[usize::from(k)] = false;
                }
                Reply::Done
            }
            Op::Leave => {
                state.members.remove(&call.from);
                Reply::Done
            }
            Op::Renew(_) => {
                if self.has(MemberMutant::RenewRecreatesMember) {
                    state.members.insert(call.from);
                    Reply::Renewed(true)
                } else {
                    Reply::Renewed(state.members.contains(&call.from))
                }
            }
        }
    }

    /// Process `p` reads `reply` for partition `k`.
    fn receive(&self, state: &mut MemberState, p: usize, k: u8, reply: Reply) {
        let Work::Waiting(op, run) = state.processes[p].slots[usize::from(k)].work else {
            unreachable!("a reply without a call")
        };
        let slot = |state: &mut MemberState, work| state.processes[p].slots[usize::from(k)].work = work;
        match (op, reply) {
            (Op::Read(_), Reply::Lease(None, _)) => Self::send(state, p, k, Op::Take(k, None), None),
            (Op::Read(_), Reply::Lease(Some(held), _)) if held.holder == state.processes[p].identity => {
                slot(state, Work::Holding(held))
            }
            // The old release waits for a held lease to expire; this one
            // waits for a lease with a TTL to expire.
            (Op::Read(_), Reply::Lease(Some(_), ttl))
                if self.legacy(state.processes[p].identity)
                    || (ttl && !self.has(MemberMutant::LegacyLeaseTakenAsDead)) =>
            {
                slot(state, Work::Idle)
            }
            (Op::Read(_), Reply::Lease(Some(held), _)) => Self::send(state, p, k, Op::Alive(k, held), None),
            (Op::Alive(_, held), Reply::Alive(false)) => {
                Self::send(state, p, k, Op::Take(k, Some(held)), None)
            }
            (Op::Take(..), Reply::Taken(lease)) => slot(state, Work::Holding(lease)),
            (Op::Fetch(_, lease), Reply::Head(Some(msg))) => {
                let process = &state.processes[p];
                if process.valid || self.has(MemberMutant::RunWithoutMemberCheck) {
                    if !self.legacy(process.identity) && !state.members.contains(&process.identity) {
                        state.dead_run = true;
                    }
                    let run = Run {
                        lease,
                        msg,
                        orphaned: false,
                    };
                    slot(state, Work::Running(run));
                } else {
                    // Its validity passed since the read: it waits for its
                    // renewal's verdict.
                    slot(state, Work::Holding(lease));
                }
            }
            (Op::Fetch(_, lease), Reply::Head(None)) => slot(state, Work::Holding(lease)),
            (Op::Commit(..), Reply::Committed) => {
                let run = run.expect("a commit belongs to a run");
                slot(state, Work::Holding(run.lease))
            }
            // Alive, busy or fenced: back to idle.
            _ => slot(state, Work::Idle),
        }
    }

    /// Process `p` reads its renewal's reply.
    fn renewed(&self, state: &mut MemberState, p: usize, alive: bool) {
        let sent_valid = state.processes[p]
            .renewing
            .take()
            .expect("a reply to a renewal sent");
        if !alive {
            // Its member is dead: every partition goes, and it starts again
            // as a new member.
            self.start(state, p);
        } else if !sent_valid {
            // Only a renewal that recreates the key answers a member whose
            // validity had passed: its process counts from the moment it
            // sent it.
            state.processes[p].valid = true;
        }
    }
}

impl Model for Member {
    type State = MemberState;
    type Action = Action;

    fn init_states(&self) -> Vec<MemberState> {
        let processes = (0..self.config.instances)
            .map(|_| Process {
                identity: Identity {
                    instance: 0,
                    nonce: 0,
                },
                up: true,
                stalled: false,
                stopping: false,
                valid: false,
                slots: Vec::new(),
                renewing: None,
                renewed: None,
                fresh: true,
            })
            .collect();
        let mut state = MemberState {
            members: BTreeSet::new(),
            leases: vec![None; usize::from(self.config.partitions)],
            ttl: vec![false; usize::from(self.config.partitions)],
            generation: 0,
            effects: vec![Vec::new(); usize::from(self.config.partitions)],
            network: BTreeSet::new(),
            processes,
            next_nonce: 0,
            crashes: self.config.crashes,
            stalls: self.config.stalls,
            stops: self.config.stops,
            dead_run: false,
        };
        for p in 0..usize::from(self.config.instances) {
            self.start(&mut state, p);
        }
        vec![state]
    }

    fn actions(&self, state: &MemberState, actions: &mut Vec<Action>) {
        for call in &state.network {
            actions.push(Action::Apply(*call));
        }
        for member in &state.members {
            if !state.runs_as(*member) {
                actions.push(Action::Expire(*member));
            }
        }
        for k in 0..self.config.partitions {
            let Some(held) = state.leases[usize::from(k)] else {
                continue;
            };
            if state.ttl[usize::from(k)] && !state.runs_as(held.holder) {
                actions.push(Action::ExpireLease(k));
            }
        }
        for (p, process) in state.processes.iter().enumerate() {
            if !process.up {
                actions.push(Action::Restart(p));
                continue;
            }
            if process.stalled {
                actions.push(Action::Resume(p));
                continue;
            }
            for k in 0..self.config.partitions {
                if process.slots[usize::from(k)].inbox.is_some() {
                    actions.push(Action::Receive(p, k));
                } else if self.may_step(state, p, k) {
                    actions.push(Action::Step(p, k));
                }
            }
            if process.renewed.is_some() {
                actions.push(Action::Renewed(p));
            } else if process.renewing.is_none() && !process.fresh && !self.legacy(process.identity) {
                actions.push(Action::Renew(p));
            }
            if state.crashes > 0 {
                actions.push(Action::Crash(p));
            }
            if state.stops > 0 && !process.stopping {
                actions.push(Action::Stop(p));
            }
            let done = process
                .slots
                .iter()
                .all(|slot| slot.work == Work::Idle && slot.inbox.is_none());
            if process.stopping && done {
                actions.push(Action::Leave(p));
            }
            if state.stalls > 0 {
                actions.push(Action::Stall(p));
            }
        }
    }

    fn next_state(&self, last: &MemberState, action: Action) -> Option<MemberState> {
        let mut state = last.clone();
        match action {
            Action::Step(p, k) => match state.processes[p].slots[usize::from(k)].work {
                Work::Idle => Self::send(&mut state, p, k, Op::Read(k), None),
                Work::Holding(lease) if state.processes[p].stopping => {
                    Self::send(&mut state, p, k, Op::Release(k, lease), None)
                }
                Work::Holding(lease) => Self::send(&mut state, p, k, Op::Fetch(k, lease), None),
                Work::Running(run) => {
                    Self::send(&mut state, p, k, Op::Commit(k, run.lease, run.msg), Some(run))
                }
                Work::Waiting(..) => return None,
            },
            Action::Renew(p) => {
                let process = &mut state.processes[p];
                let valid = process.valid;
                process.renewing = Some(valid);
                process.fresh = true;
                let from = process.identity;
                state.network.insert(Call {
                    from,
                    op: Op::Renew(valid),
                });
            }
            Action::Apply(call) => {
                state.network.remove(&call);
                let reply = self.apply(&mut state, call);
                // A reply reaches its sender only while it is still that
                // member (a crashed or restarted one has moved on). A live
                // process reads it at once (reading it later is the same as
                // Redis answering later: nothing else is local to it); a
                // stalled one reads it once it resumes.
                let Some(p) =
                    (state.processes.iter()).position(|process| process.up && process.identity == call.from)
                else {
                    return Some(state);
                };
                let live = state.processes[p].live();
                match (call.op, reply) {
                    (Op::Renew(_), Reply::Renewed(alive)) if live => self.renewed(&mut state, p, alive),
                    (Op::Renew(_), Reply::Renewed(alive)) => state.processes[p].renewed = Some(alive),
                    (Op::Renew(_), _) => unreachable!("a renewal answers renewed"),
                    (Op::Leave, _) => {}
                    (
                        Op::Read(k) | Op::Alive(k, _) | Op::Take(k, _) | Op::Fetch(k, _) | Op::Release(k, _),
                        _,
                    )
                    | (Op::Commit(k, ..), _) => {
                        if let (Op::Alive(_, held), Reply::Alive(true)) = (call.op, reply) {
                            // As Redis answers: an expiry after it clears it.
                            state.processes[p].slots[usize::from(k)].told_alive = Some(held.holder);
                        }
                        if live {
                            self.receive(&mut state, p, k, reply);
                        } else {
                            state.processes[p].slots[usize::from(k)].inbox = Some(reply);
                        }
                    }
                }
            }
            Action::Receive(p, k) => {
                let reply = state.processes[p].slots[usize::from(k)].inbox.take()?;
                self.receive(&mut state, p, k, reply);
            }
            Action::Renewed(p) => {
                let alive = state.processes[p].renewed.take()?;
                self.renewed(&mut state, p, alive);
            }
            Action::ExpireLease(k) => {
                let expired = state.leases[usize::from(k)].take()?;
                state.ttl[usize::from(k)] = false;
                for process in &mut state.processes {
                    if process.identity != expired.holder {
                        continue;
                    }
                    process.valid = false;
                    if let Some(slot) = process.slots.get_mut(usize::from(k)) {
                        slot.orphan();
                    }
                }
            }
            Action::Expire(member) => {
                state.members.remove(&member);
                for slot in state.processes.iter_mut().flat_map(|process| &mut process.slots) {
                    if slot.told_alive == Some(member) {
                        slot.told_alive = None;
                    }
                }
                for process in &mut state.processes {
                    if process.identity != member {
                        continue;
                    }
                    process.valid = false;
                    process.slots.iter_mut().for_each(Slot::orphan);
                }
            }
            Action::Crash(p) => {
                state.crashes -= 1;
                state.processes[p].exit();
            }
            Action::Restart(p) => {
                state.processes[p].up = true;
                self.start(&mut state, p);
            }
            Action::Stall(p) => {
                state.stalls -= 1;
                state.processes[p].stalled = true;
            }
            Action::Stop(p) => {
                state.stops -= 1;
                state.processes[p].stopping = true;
                if self.has(MemberMutant::LeaveWhileRunning) {
                    let from = state.processes[p].identity;
                    state.network.insert(Call { from, op: Op::Leave });
                }
            }
            Action::Leave(p) => {
                let process = &mut state.processes[p];
                let from = process.identity;
                process.exit();
                state.network.insert(Call { from, op: Op::Leave });
            }
            Action::Resume(p) => {
                let process = &mut state.processes[p];
                process.stalled = false;
                process.fresh = false;
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_RUN, |model: &Member, state: &MemberState| {
                (0..usize::from(model.config.partitions)).all(|k| {
                    state
                        .processes
                        .iter()
                        .filter(|process| process.live())
                        .filter(|process| {
                            process
                                .slots
                                .get(k)
                                .and_then(|slot| slot.work.run())
                                .is_some_and(|run| !run.orphaned)
                        })
                        .count()
                        <= 1
                })
            }),
            Property::always(LIVE_MEMBER, |_, state: &MemberState| !state.dead_run),
            Property::always(ONCE_IN_ORDER, |_, state: &MemberState| {
                state
                    .effects
                    .iter()
                    .all(|effects| effects.iter().enumerate().all(|(i, &msg)| usize::from(msg) == i))
            }),
            Property::eventually(EVERY_MESSAGE, |model: &Member, state: &MemberState| {
                state
                    .effects
                    .iter()
                    .all(|effects| effects.len() == usize::from(model.config.messages))
            }),
        ]
    }
}

/// A property some history breaks, with that history.
pub type MemberViolation = Counterexample<Action, MemberState>;

/// The outcome of one exhaustive check of the member lease model.
pub type MemberReport = Outcome<MemberConfig, MemberMutant, Action, MemberState>;

/// Explores every history of `config` (with `mutant` seeded) breadth-first,
/// so each counterexample is a shortest one.
pub fn check_member(config: MemberConfig, mutant: Option<MemberMutant>) -> MemberReport {
    check_member_with(config, mutant, HasDiscoveries::All)
}

/// Like [`check_member`], but stops exploring once every property of
/// `wanted` is broken (any property at all when `wanted` is empty), or every
/// history is explored (see [`crate::check_until_broken`]).
pub fn check_member_until_broken(
    config: MemberConfig,
    mutant: Option<MemberMutant>,
    wanted: &[&'static str],
) -> MemberReport {
    check_member_with(config, mutant, crate::until_broken(wanted))
}

fn check_member_with(
    config: MemberConfig,
    mutant: Option<MemberMutant>,
    finish: HasDiscoveries,
) -> MemberReport {
    explore(Member { config, mutant }, config, mutant, finish)
}
