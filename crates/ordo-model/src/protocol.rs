//! The lease/fence protocol of one partition as a state machine.
//!
//! Redis is one atomic state machine whose operations are the scripts'
//! effects (acquire, read, commit, acknowledge, release, reap, publish).
//! Instances are processes running the partition worker's loop. Commands
//! travel through an unordered network: Redis may apply any command in
//! flight next, so a command delayed on its connection can land after later
//! commands of the same process. The environment crashes and restarts
//! instances, stalls them, loses replies (the client then resends the same
//! command), times commands out (the worker retries the handler as a new
//! attempt), and kills a worker mid-handler (shutdown past its grace
//! period).
//!
//! Ownership is by member lease, the protocol [`crate::member`] checks on
//! its own: each process start (an [`Identity`]) keeps a member key alive,
//! and the partition's lease holds its holder's identity and token with no
//! TTL of its own. A member key expires only while its process is stalled,
//! down or gone (a live process keeps renewing it, whatever its handler
//! does); a renewal never brings it back, so that member is dead for good.
//! The lease value stays: the fence compares it as before, so what the dead
//! member sends under it passes until another process takes the lease over
//! (an acquire takes a lease whose holder's member is dead) and is refused
//! from then on. Its process, once it runs again, starts nothing new (its
//! own clock says its membership lapsed), may finish the run it had going,
//! and goes on only as a new member, under a new nonce.
//!
//! A handler may also fail for good on a message (a poison message): the
//! worker halts the partition under the fence, and an operator resolves the
//! halt (retry or skip the head, naming the head it saw). Or it may fail
//! with an ordinary error: the worker closes the attempt and counts the
//! failure with the entry (the retry budget), then runs it again. A client
//! timeout is a transient failure: its attempt is closed, not counted. When configured,
//! Redis itself may restart and come back with an older state: with
//! `appendfsync everysec` the writes of the last second are lost, so what
//! survives is a prefix of the history of writes.

use std::collections::BTreeSet;
use std::fmt;

use stateright::{Model, Property};

use crate::{Config, Mutant};

/// A process identity: its configured instance id and the nonce of this
/// start of it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identity {
    /// The configured instance id.
    pub instance: u8,
    /// Which start of the process (a random nonce in the real system).
    pub nonce: u8,
}

/// A lease value: who holds the partition, at which fencing token.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeaseValue {
    /// The holder.
    pub holder: Identity,
    /// The fencing token (grows at every change of owner).
    pub token: u8,
}

/// What acquiring does with a partition's `lease` for `from` (the
/// runtime's three calls, read, ask whether the holder's member is alive,
/// compare and set, which a history that runs them one after the other
/// sees as one step): a free lease is taken at the next token
/// (`generation` grows), the holder's own process start gets its lease
/// back, a lease whose holder's member is `dead` is taken over at the next
/// token; `None` while another live member holds it. A dead member takes
/// nothing: the runtime's acquire renews its member first and, finding it
/// expired, goes on as a new member (a new nonce), which a model plays as
/// that process starting again, then acquiring. `by_instance` is the hole
/// of issue 8 point 4 (the `lease-without-nonce` mutants): adopting a lease
/// by instance id alone.
pub(crate) fn acquire(
    lease: &mut Option<LeaseValue>,
    generation: &mut u8,
    from: Identity,
    dead: &BTreeSet<Identity>,
    by_instance: bool,
) -> Option<LeaseValue> {
    if dead.contains(&from) {
        return None;
    }
    match *lease {
        Some(held) if held.holder == from => Some(held),
        Some(held) if by_instance && held.holder.instance == from.instance => Some(held),
        Some(held) if !dead.contains(&held.holder) => None,
        // Free, or its holder's member is dead for good.
        _ => {
            *generation += 1;
            let taken = LeaseValue {
                holder: from,
                token: *generation,
            };
            *lease = Some(taken);
            Some(taken)
        }
    }
}

/// A command, as sent by a process.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Take the lease if it is free, this process's own, or its holder's
    /// member is dead.
    Acquire,
    /// The fenced read of the partition's head. The model has no pending
    /// list: every read of the runtime takes the group's pending entries
    /// before new ones (one consumer name for every owner), so what it
    /// gets is the first unacknowledged entry whichever owner's read, a
    /// refused one included, delivered it before. (A read that runs in a
    /// transaction rather than a script takes new entries in even when the
    /// lease or the halt refuses it, and they stay pending: the same head.)
    Read(LeaseValue),
    /// The fenced commit of a handler's effect for `msg`, made by `attempt`.
    Commit {
        /// The lease the handler ran under.
        lease: LeaseValue,
        /// The message handled.
        msg: u8,
        /// The lease-scoped attempt number.
        attempt: u8,
        /// The commit id (a resend carries the same one).
        id: u8,
    },
    /// The fenced acknowledgement of `msg`, closing `attempt`.
    Ack {
        /// The lease.
        lease: LeaseValue,
        /// The message.
        msg: u8,
        /// The attempt that handled it.
        attempt: u8,
    },
    /// Close `attempt` (and those before it) of the lease's holder: the
    /// worker's record of a failed attempt, made before it runs the next.
    Close {
        /// The lease.
        lease: LeaseValue,
        /// The attempt that failed.
        attempt: u8,
        /// The message whose failure counts with its entry (an ordinary
        /// error); `None` for a transient failure. It counts only when this
        /// close closes the attempt (not when it was closed already).
        count: Option<u8>,
    },
    /// Give the lease back (only if still held at this value).
    Release(LeaseValue),
    /// Retire the drained partition: delete its stream and index entry.
    Reap(LeaseValue),
    /// Halt the partition on the poison message `msg`, closing `attempt`.
    Halt {
        /// The lease.
        lease: LeaseValue,
        /// The message that failed every attempt.
        msg: u8,
        /// The attempt that failed last.
        attempt: u8,
        /// How many operator decisions had landed when the handler failed
        /// (a history variable for the property, not sent by the worker).
        resolutions: u8,
    },
    /// An operator's decision on a halted partition: retry (clear the halt)
    /// or skip (acknowledge the head, then clear the halt).
    Resolve {
        /// The head the operator saw halted.
        seen: u8,
        /// Whether the head is skipped (otherwise retried).
        skip: bool,
    },
}

/// A command in flight.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Command {
    /// The sender.
    pub from: Identity,
    /// Which request of the sender this is (replies to older ones are ignored).
    pub request: u8,
    /// The operation.
    pub op: Op,
}

/// What Redis answered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Reply {
    /// The lease is held at this value.
    Acquired(LeaseValue),
    /// Someone else holds the lease.
    Busy,
    /// The lease moved on: stop.
    Fenced,
    /// The head message to handle; `authorized` is whether the lease was
    /// really held at the read (only a mutant reads without holding it).
    Entry {
        /// The message.
        msg: u8,
        /// Whether the read was made under the current lease.
        authorized: bool,
        /// The batch read (a bit per message): the unacknowledged messages
        /// from `msg` on (`msg` alone without an acknowledgement window).
        batch: u8,
    },
    /// Nothing to handle; `drained` when every published message is acknowledged.
    Idle {
        /// Whether the partition may be reaped.
        drained: bool,
    },
    /// The attempt was closed already: a later attempt moved past it.
    Stale,
    /// The partition is halted: nothing is read until an operator resolves it.
    Halted,
    /// Done.
    Ok,
}

/// What a worker is doing.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Work {
    /// No lease: may try to acquire.
    Idle,
    /// Waiting for a reply to `request`.
    Waiting {
        /// The request's number.
        request: u8,
        /// The command (resent as is after a lost reply).
        op: Op,
        /// The run in progress, if any.
        run: Option<Run>,
    },
    /// Holding the lease with nothing to do.
    Holding(LeaseValue),
    /// Running the handler of `run`.
    Running(Run),
    /// The process has stopped its worker for good (shut down).
    Stopped,
}

/// One handler run: a message, an attempt, under a lease.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Run {
    /// The lease the message was read under.
    pub lease: LeaseValue,
    /// The message.
    pub msg: u8,
    /// The lease-scoped attempt number.
    pub attempt: u8,
    /// The read batch the message came in (a bit per message): with an
    /// acknowledgement window the worker runs the batch's next message
    /// without waiting for this one's acknowledgement.
    pub batch: u8,
}

/// One process.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Process {
    /// The configured instance id (two processes may share one in a rolling
    /// deploy with a fixed id).
    pub instance: u8,
    /// Which start of the process this is.
    pub nonce: u8,
    /// Whether the process runs at all.
    pub up: bool,
    /// Whether the process is paused (SIGSTOP).
    pub stalled: bool,
    /// Shutdown was asked: the lease goes back once the run in progress ends.
    pub stopping: bool,
    /// The worker.
    pub work: Work,
    /// The next request number.
    pub next_request: u8,
    /// The next attempt number (per process start; attempts of one lease grow).
    pub next_attempt: u8,
    /// The next commit id.
    pub next_commit: u8,
    /// The reply waiting to be read, for a request.
    pub inbox: Option<(u8, Reply)>,
    /// Its member expired while it was paused (or its worker had stopped):
    /// it starts nothing new (no acquire, read or run), may finish the run
    /// it had going, whose fenced calls pass until another process takes
    /// the lease over, and goes on only as a new member (a new nonce).
    pub orphaned: bool,
    /// The reply to the request it waits for was lost: its client times
    /// out and resends (or the worker retries), whatever the fault budget.
    pub lost: bool,
}

impl Process {
    fn identity(&self) -> Identity {
        Identity {
            instance: self.instance,
            nonce: self.nonce,
        }
    }

    /// The run in progress, whether executing or waiting for a command of it.
    fn run(&self) -> Option<Run> {
        match self.work {
            Work::Running(run) => Some(run),
            Work::Waiting { run, .. } => run,
            _ => None,
        }
    }

    /// Whether the process executes (up, not paused).
    fn live(&self) -> bool {
        self.up && !self.stalled
    }
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The partition's lease (no TTL: it stays when its holder's member
    /// expires).
    pub lease: Option<LeaseValue>,
    /// The last fencing token handed out. Real tokens are the greater of
    /// the previous one plus one and Redis's clock in µs, so they grow at
    /// every take; the model numbers them 1, 2, 3...
    pub generation: u8,
    /// The generation key: the token of the last release (`release.lua`
    /// writes it as it deletes the lease; the reap deletes it).
    pub generation_key: Option<u8>,
    /// The process starts whose member key expired: dead for good (a
    /// renewal never brings a member key back). Not Redis data an AOF
    /// restart brings back: expiry is time, which does not go back.
    pub dead: BTreeSet<Identity>,
    /// How many messages were appended to the stream (in publish order).
    pub published: u8,
    /// Which messages were acknowledged (bit per message).
    pub acked: u8,
    /// Whether the key is in the category index (discovery finds it).
    pub indexed: bool,
    /// Whether the stream exists.
    pub stream: bool,
    /// Split-publish mutant: the index entry of the next message is written,
    /// its append is not yet.
    pub half_published: bool,
    /// The highest closed attempt per lease value.
    pub closed: Option<(LeaseValue, u8)>,
    /// The last commit id applied (idempotent resends).
    pub marker: Option<(Identity, u8)>,
    /// The messages whose effect was committed, each until its
    /// acknowledgement lands (a bit per message, kept in the commit
    /// marker): a commit of one again (a run again after a failover, a lost
    /// reply, a failed attempt) applies nothing and answers as the first did.
    pub applied: u8,
    /// The committed effects: message numbers, in the order they landed.
    pub effects: Vec<u8>,
    /// The halted head, while the partition is halted.
    pub halted: Option<u8>,
    /// Messages an operator skipped (acknowledged without an effect).
    pub skipped: u8,
    /// Failed attempts Redis counted (with their entries).
    pub counted: u8,
    /// Ordinary errors the handlers really had (a history variable).
    pub errors_seen: u8,
    /// What an AOF restart would bring back: Redis's state at its last fsync.
    pub durable: Option<Box<Durable>>,
    /// Commands in flight, in no particular order.
    pub network: BTreeSet<Command>,
    /// The processes.
    pub processes: Vec<Process>,
    /// Fault budget left.
    pub faults: Faults,
    /// A run was started from a read made without holding the lease.
    pub unauthorized_run: bool,
    /// A message was run after it had been acknowledged.
    pub rerun_after_ack: bool,
    /// A commit or an acknowledgement landed while the partition was halted.
    pub progress_while_halted: bool,
    /// An operator's skip landed on a head other than the one it saw.
    pub skipped_unseen: bool,
    /// Operator decisions that landed (cleared a halt).
    pub resolved: u8,
    /// A halt landed for a failure older than the last operator decision:
    /// a delayed or resent halt undid a resolution.
    pub stale_halt: bool,
}

/// Redis's part of [`State`]: what an AOF file keeps.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Durable {
    lease: Option<LeaseValue>,
    generation: u8,
    generation_key: Option<u8>,
    published: u8,
    acked: u8,
    indexed: bool,
    stream: bool,
    closed: Option<(LeaseValue, u8)>,
    marker: Option<(Identity, u8)>,
    applied: u8,
    effects: Vec<u8>,
    halted: Option<u8>,
    skipped: u8,
    counted: u8,
}

impl Durable {
    fn of(state: &State) -> Self {
        Self {
            lease: state.lease,
            generation: state.generation,
            generation_key: state.generation_key,
            published: state.published,
            acked: state.acked,
            indexed: state.indexed,
            stream: state.stream,
            closed: state.closed,
            marker: state.marker,
            applied: state.applied,
            effects: state.effects.clone(),
            halted: state.halted,
            skipped: state.skipped,
            counted: state.counted,
        }
    }

    fn restore(self, state: &mut State) {
        state.lease = self.lease;
        state.generation = self.generation;
        state.generation_key = self.generation_key;
        state.published = self.published;
        state.acked = self.acked;
        state.indexed = self.indexed;
        state.stream = self.stream;
        state.closed = self.closed;
        state.marker = self.marker;
        state.applied = self.applied;
        state.effects = self.effects;
        state.halted = self.halted;
        state.skipped = self.skipped;
        state.counted = self.counted;
    }
}

/// The faults the environment may still inject.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Faults {
    /// Crashes (SIGKILL) left.
    pub crashes: u8,
    /// Stalls (SIGSTOP, long enough for the member key to expire) left.
    pub stalls: u8,
    /// Client timeouts or lost replies left.
    pub timeouts: u8,
    /// Shutdowns (a worker killed mid-handler) left.
    pub kills: u8,
    /// Handler runs that may fail for good (poison messages) left.
    pub poisons: u8,
    /// Operator decisions left.
    pub resolutions: u8,
    /// Ordinary (counted) handler errors left.
    pub errors: u8,
    /// Redis restarts that lose the writes since the last fsync left.
    pub aof_losses: u8,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The outbox publishes the next message (atomically with the index).
    Publish,
    /// Split-publish mutant: the index entry first.
    PublishIndex,
    /// Split-publish mutant: then the append.
    PublishAppend,
    /// Process `p` sends a command (acquire, read, commit, ack, reap, release).
    Step(usize),
    /// Process `p` reads its reply.
    Receive(usize),
    /// Redis applies a command in flight; `lose_reply` drops its reply.
    Apply(Command, bool),
    /// Process `p` stops waiting for its reply and resends the command.
    Resend(usize),
    /// Process `p` gives up on its commit (client timeout), records the
    /// failed attempt (closing it) and runs the handler again as a new attempt.
    Retry(usize),
    /// The lease holder's member key expires (its process is down, stalled
    /// or gone); the lease value stays.
    Expire,
    /// Process `p`, whose member expired, learns it (its renewal finds no
    /// key): it drops what it was doing and goes on as a new member, under
    /// a new nonce.
    Rejoin(usize),
    /// SIGKILL of process `p`.
    Crash(usize),
    /// Process `p` starts again with a new nonce.
    Restart(usize),
    /// SIGSTOP of process `p`.
    Stall(usize),
    /// SIGCONT of process `p`.
    Resume(usize),
    /// Shutdown of process `p` past its grace period: the worker is killed
    /// while its handler may still be running.
    Kill(usize),
    /// The handler of process `p` fails for good: the worker halts the partition.
    Fail(usize),
    /// The handler of process `p` fails with an ordinary error: the worker
    /// closes the attempt, counting the failure, and runs it again.
    Error(usize),
    /// An operator resolves the halt it sees: skip the head, or retry it.
    Resolve {
        /// Skip (otherwise retry).
        skip: bool,
    },
    /// Redis writes its AOF to disk: what a restart brings back.
    Fsync,
    /// Redis restarts and loads its AOF: the writes since the last fsync are lost.
    RedisRestart,
}

/// The operator's identity on the network (its replies go nowhere).
const OPERATOR: Identity = Identity {
    instance: u8::MAX,
    nonce: 0,
};

/// The protocol model for one configuration and mutant.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// The configuration.
    pub config: Config,
    /// The seeded defect, if any.
    pub mutant: Option<Mutant>,
}

impl Protocol {
    fn has(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    fn messages(&self) -> u8 {
        self.config.messages
    }

    /// The lowest message not acknowledged among those published.
    fn head(state: &State) -> Option<u8> {
        (0..state.published).find(|m| state.acked & (1 << m) == 0)
    }

    fn send(process: &mut Process, network: &mut BTreeSet<Command>, op: Op, run: Option<Run>) {
        let request = process.next_request;
        process.next_request += 1;
        network.insert(Command {
            from: process.identity(),
            request,
            op,
        });
        process.work = Work::Waiting { request, op, run };
    }

    /// What the process sends next, if anything, from where it stands.
    fn step(&self, state: &mut State, p: usize) -> bool {
        let process = &mut state.processes[p];
        match process.work {
            Work::Idle if state.indexed && !process.stopping => {
                Self::send(process, &mut state.network, Op::Acquire, None);
            }
            Work::Holding(lease) if process.stopping => {
                Self::send(process, &mut state.network, Op::Release(lease), None);
            }
            Work::Holding(lease) => {
                Self::send(process, &mut state.network, Op::Read(lease), None);
            }
            Work::Running(run) => {
                let id = process.next_commit;
                process.next_commit += 1;
                let op = Op::Commit {
                    lease: run.lease,
                    msg: run.msg,
                    attempt: run.attempt,
                    id,
                };
                Self::send(process, &mut state.network, op, Some(run));
            }
            _ => return false,
        }
        true
    }

    /// Redis applies `command` to `state` and answers. Public for the
    /// conformance test, which compares it with the real scripts' answers.
    pub fn apply(&self, state: &mut State, command: Command) -> Reply {
        let holds = |state: &State, lease: LeaseValue| state.lease == Some(lease);
        match command.op {
            Op::Acquire => acquire(
                &mut state.lease,
                &mut state.generation,
                command.from,
                &state.dead,
                self.has(Mutant::LeaseWithoutNonce),
            )
            .map_or(Reply::Busy, Reply::Acquired),
            Op::Read(lease) => {
                let authorized = holds(state, lease);
                if !authorized && !self.has(Mutant::ReclaimWithoutLease) {
                    return Reply::Fenced;
                }
                if state.halted.is_some() {
                    return Reply::Halted;
                }
                match Self::head(state) {
                    Some(msg) => Reply::Entry {
                        msg,
                        authorized,
                        batch: if self.config.window > 0 {
                            (msg..state.published)
                                .filter(|m| state.acked & (1 << m) == 0)
                                .fold(0, |batch, m| batch | 1 << m)
                        } else {
                            1 << msg
                        },
                    },
                    None => Reply::Idle {
                        drained: state.stream,
                    },
                }
            }
            Op::Commit {
                lease,
                msg,
                attempt,
                id,
            } => {
                if state.marker == Some((command.from, id)) {
                    return Reply::Ok;
                }
                if !holds(state, lease) {
                    return Reply::Fenced;
                }
                let closed = state.closed.filter(|(l, _)| *l == lease).map(|(_, a)| a);
                if !self.has(Mutant::CommitFromOlderAttempt) && closed.is_some_and(|c| c >= attempt) {
                    return Reply::Stale;
                }
                // The message's effect is in already (committed by an
                // earlier run of it, not yet acknowledged): nothing again.
                if !self.has(Mutant::CommitWithoutAppliedCheck) && state.applied & (1 << msg) != 0 {
                    return Reply::Ok;
                }
                if state.halted.is_some() {
                    state.progress_while_halted = true;
                }
                state.effects.push(msg);
                state.marker = Some((command.from, id));
                if self.has(Mutant::OneAppliedRecord) {
                    state.applied = 1 << msg;
                } else {
                    state.applied |= 1 << msg;
                }
                Reply::Ok
            }
            Op::Ack { lease, msg, attempt } => {
                if !holds(state, lease) && !self.has(Mutant::AckWithoutToken) {
                    return Reply::Fenced;
                }
                // A resent acknowledgement of an acknowledged message is a no-op.
                if state.halted.is_some() && state.acked & (1 << msg) == 0 {
                    state.progress_while_halted = true;
                }
                state.acked |= 1 << msg;
                // Acknowledged, it never runs again: what it applied goes
                // out of the commit marker.
                state.applied &= !(1 << msg);
                Self::close(state, lease, attempt);
                Reply::Ok
            }
            Op::Close {
                lease,
                attempt,
                count,
            } => {
                if !holds(state, lease) {
                    return Reply::Fenced;
                }
                let closing = state
                    .closed
                    .filter(|(l, _)| *l == lease)
                    .is_none_or(|(_, closed)| closed < attempt);
                Self::close(state, lease, attempt);
                if count.is_some() && (closing || self.has(Mutant::CountEveryClose)) {
                    state.counted += 1;
                }
                Reply::Ok
            }
            Op::Release(lease) => {
                if holds(state, lease) {
                    state.lease = None;
                    state.generation_key = Some(lease.token);
                }
                Reply::Ok
            }
            Op::Reap(lease) => {
                if !holds(state, lease) {
                    return Reply::Fenced;
                }
                // The stream is empty: retire it. (A publish half done, in
                // the split-publish mutant, is invisible here.)
                // With the lanes go the partition's bookkeeping: the lease
                // and the generation key, the last commit's marker and the
                // attempt sequence.
                if Self::head(state).is_none() && state.halted.is_none() {
                    state.stream = false;
                    state.indexed = false;
                    state.lease = None;
                    state.generation_key = None;
                    state.marker = None;
                    state.applied = 0;
                    state.closed = None;
                }
                Reply::Ok
            }
            Op::Halt {
                lease,
                msg,
                attempt,
                resolutions,
            } => {
                if !holds(state, lease) {
                    return Reply::Fenced;
                }
                let closed = state.closed.filter(|(l, _)| *l == lease).map(|(_, a)| a);
                if closed.is_some_and(|c| c >= attempt) {
                    return Reply::Stale;
                }
                // The halt closes the failed attempts: a delayed commit of
                // one of them can no longer land on the halted partition.
                if !self.has(Mutant::HaltWithoutClosingAttempts) {
                    Self::close(state, lease, attempt);
                }
                if resolutions < state.resolved {
                    state.stale_halt = true;
                }
                state.halted = Some(msg);
                Reply::Ok
            }
            Op::Resolve { seen, skip } => {
                let Some(head) = state.halted else {
                    return Reply::Ok;
                };
                if head != seen && !self.has(Mutant::ResolveWithoutExpectedHead) {
                    // `head_changed`: the decision lands on nothing.
                    return Reply::Ok;
                }
                if skip {
                    if head != seen {
                        state.skipped_unseen = true;
                    }
                    state.acked |= 1 << head;
                    state.skipped |= 1 << head;
                }
                state.halted = None;
                state.resolved += 1;
                Reply::Ok
            }
        }
    }

    fn close(state: &mut State, lease: LeaseValue, attempt: u8) {
        match &mut state.closed {
            Some((held, closed)) if *held == lease => *closed = (*closed).max(attempt),
            other => *other = Some((lease, attempt)),
        }
    }

    /// The process reads the reply to its request.
    fn receive(&self, state: &mut State, p: usize) {
        let acked = state.acked;
        let process = &mut state.processes[p];
        let Some((_, reply)) = process.inbox.take() else {
            return;
        };
        let Work::Waiting { op, run, .. } = process.work else {
            return;
        };
        process.work = match (op, reply) {
            (Op::Acquire, Reply::Acquired(lease)) => Work::Holding(lease),
            (Op::Acquire, _) => Work::Idle,
            // A dead member starts no run: its process's own clock says its
            // membership lapsed while it was paused.
            (Op::Read(lease), Reply::Entry { .. }) if process.orphaned => Work::Holding(lease),
            (
                Op::Read(lease),
                Reply::Entry {
                    msg,
                    authorized,
                    batch,
                },
            ) => {
                if !authorized {
                    state.unauthorized_run = true;
                }
                // Only a live member starts a run (above), and it must
                // never run an acknowledged message again.
                if acked & (1 << msg) != 0 {
                    state.rerun_after_ack = true;
                }
                let attempt = process.next_attempt;
                process.next_attempt += 1;
                Work::Running(Run {
                    lease,
                    msg,
                    attempt,
                    batch,
                })
            }
            (Op::Read(lease), Reply::Idle { drained: true }) if !process.stopping => {
                let request = process.next_request;
                process.next_request += 1;
                state.network.insert(Command {
                    from: process.identity(),
                    request,
                    op: Op::Reap(lease),
                });
                Work::Waiting {
                    request,
                    op: Op::Reap(lease),
                    run: None,
                }
            }
            (Op::Read(lease), Reply::Idle { .. }) => Work::Holding(lease),
            (
                Op::Commit {
                    lease, msg, attempt, ..
                },
                Reply::Ok,
            ) => {
                let request = process.next_request;
                process.next_request += 1;
                let ack = Op::Ack { lease, msg, attempt };
                let from = process.identity();
                state.network.insert(Command {
                    from,
                    request,
                    op: ack,
                });
                match run {
                    // With a window: the acknowledgement is sent, not waited
                    // for (its reply goes nowhere); the batch's next message
                    // runs while at most `window` are unanswered, and the
                    // worker reads again once every one is.
                    Some(run) if self.config.window > 0 => {
                        let unanswered = Self::acks_in_flight(&state.network, from);
                        let next = (run.msg + 1..8).find(|m| run.batch & (1 << m) != 0);
                        if let Some(next) = next
                            && unanswered <= usize::from(self.config.window)
                            && !process.orphaned
                        {
                            if acked & (1 << next) != 0 {
                                state.rerun_after_ack = true;
                            }
                            let attempt = process.next_attempt;
                            process.next_attempt += 1;
                            Work::Running(Run {
                                msg: next,
                                attempt,
                                ..run
                            })
                        } else {
                            Work::Holding(lease)
                        }
                    }
                    _ => Work::Waiting {
                        request,
                        op: ack,
                        run,
                    },
                }
            }
            (Op::Ack { lease, .. }, Reply::Ok) => Work::Holding(lease),
            (Op::Read(lease), Reply::Halted) => Work::Holding(lease),
            // The failed attempt is closed: the handler runs again as the next.
            (Op::Close { .. }, Reply::Ok) => match run {
                Some(run) if process.orphaned => Work::Holding(run.lease),
                Some(run) => {
                    let attempt = process.next_attempt;
                    process.next_attempt += 1;
                    Work::Running(Run { attempt, ..run })
                }
                None => Work::Idle,
            },
            (Op::Halt { lease, .. }, Reply::Ok) => Work::Holding(lease),
            (Op::Reap(_), Reply::Ok) => Work::Idle,
            (Op::Release(_), _) => Work::Stopped,
            // Fenced, stale or busy: the lease (or the attempt) moved on.
            _ => {
                if process.stopping {
                    Work::Stopped
                } else {
                    Work::Idle
                }
            }
        };
    }

    /// How many acknowledgements of the process start `from` are in flight.
    fn acks_in_flight(network: &BTreeSet<Command>, from: Identity) -> usize {
        network
            .iter()
            .filter(|c| c.from == from && matches!(c.op, Op::Ack { .. }))
            .count()
    }

    /// Whether the lease holder's member may expire now: it is alive and
    /// its process is down, paused, stopped for good, or a process start
    /// that no longer exists. A live process renews its member key.
    fn may_expire(state: &State) -> bool {
        let Some(lease) = state.lease else { return false };
        !state.dead.contains(&lease.holder)
            && !state
                .processes
                .iter()
                .any(|p| p.identity() == lease.holder && p.live() && !matches!(p.work, Work::Stopped))
    }

    /// A nonce no process start has had yet.
    fn next_nonce(state: &State) -> u8 {
        state.processes.iter().map(|p| p.nonce).max().unwrap_or(0) + 1
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let processes = (0..self.config.instances)
            .map(|i| Process {
                instance: if self.has(Mutant::LeaseWithoutNonce) { 0 } else { i },
                nonce: i,
                up: true,
                stalled: false,
                stopping: false,
                work: Work::Idle,
                next_request: 0,
                next_attempt: 1,
                next_commit: 0,
                inbox: None,
                orphaned: false,
                lost: false,
            })
            .collect();
        let mut state = State {
            lease: None,
            generation: 0,
            generation_key: None,
            dead: BTreeSet::new(),
            published: 0,
            acked: 0,
            indexed: false,
            stream: false,
            half_published: false,
            closed: None,
            marker: None,
            applied: 0,
            effects: Vec::new(),
            halted: None,
            skipped: 0,
            counted: 0,
            errors_seen: 0,
            durable: None,
            network: BTreeSet::new(),
            processes,
            faults: Faults {
                crashes: self.config.crashes,
                stalls: self.config.stalls,
                timeouts: self.config.timeouts,
                kills: self.config.kills,
                poisons: self.config.poisons,
                resolutions: self.config.resolutions,
                errors: self.config.errors,
                aof_losses: self.config.aof_losses,
            },
            unauthorized_run: false,
            rerun_after_ack: false,
            progress_while_halted: false,
            skipped_unseen: false,
            resolved: 0,
            stale_halt: false,
        };
        if self.config.aof_losses > 0 {
            state.durable = Some(Box::new(Durable::of(&state)));
        }
        vec![state]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.published < self.messages() {
            if self.has(Mutant::ReapNotAtomicWithPublish) {
                actions.push(if state.half_published {
                    Action::PublishAppend
                } else {
                    Action::PublishIndex
                });
            } else {
                actions.push(Action::Publish);
            }
        }
        for command in &state.network {
            actions.push(Action::Apply(*command, false));
            if state.faults.timeouts > 0 {
                actions.push(Action::Apply(*command, true));
            }
        }
        if Self::may_expire(state) {
            actions.push(Action::Expire);
        }
        if state.halted.is_some() && state.faults.resolutions > 0 {
            actions.push(Action::Resolve { skip: true });
            actions.push(Action::Resolve { skip: false });
        }
        if state.faults.aof_losses > 0 {
            if state.durable.as_deref() != Some(&Durable::of(state)) {
                actions.push(Action::Fsync);
            }
            actions.push(Action::RedisRestart);
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
            let waiting = matches!(process.work, Work::Waiting { .. });
            // Abstractions of discovery and of the waker: a worker tries to
            // acquire only a lease that may be free (or its own), and reads
            // only when there is something to read or to reap. This keeps the
            // state space finite without removing any race.
            let stepping = match process.work {
                Work::Idle => {
                    state.indexed
                        && !process.stopping
                        && !process.orphaned
                        && state
                            .lease
                            .is_none_or(|l| l.holder == process.identity() || state.dead.contains(&l.holder))
                }
                Work::Holding(_) if process.stopping => true,
                // A dead member reads nothing more.
                Work::Holding(_) if process.orphaned => false,
                // A halted partition is read again once it is resolved.
                // With a window, it reads again once its acknowledgements
                // are answered.
                Work::Holding(_) => {
                    state.halted.is_none()
                        && (Self::head(state).is_some() || state.stream)
                        && (self.config.window == 0
                            || Self::acks_in_flight(&state.network, process.identity()) == 0)
                }
                Work::Running(_) => true,
                _ => false,
            };
            if stepping {
                actions.push(Action::Step(p));
            }
            if process.inbox.is_some() {
                actions.push(Action::Receive(p));
            }
            if process.orphaned && !matches!(process.work, Work::Stopped) {
                actions.push(Action::Rejoin(p));
            }
            if waiting && process.inbox.is_none() && (state.faults.timeouts > 0 || process.lost) {
                actions.push(Action::Resend(p));
                if matches!(
                    process.work,
                    Work::Waiting {
                        op: Op::Commit { .. },
                        ..
                    }
                ) {
                    actions.push(Action::Retry(p));
                }
            }
            if state.faults.crashes > 0 {
                actions.push(Action::Crash(p));
            }
            if state.faults.stalls > 0 {
                actions.push(Action::Stall(p));
            }
            if state.faults.kills > 0 && process.run().is_some() && !process.stopping {
                actions.push(Action::Kill(p));
            }
            if state.faults.poisons > 0 && matches!(process.work, Work::Running(_)) {
                actions.push(Action::Fail(p));
            }
            if state.faults.errors > 0 && matches!(process.work, Work::Running(_)) {
                actions.push(Action::Error(p));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Publish => {
                state.published += 1;
                state.stream = true;
                state.indexed = true;
            }
            Action::PublishIndex => {
                state.indexed = true;
                state.half_published = true;
            }
            Action::PublishAppend => {
                state.published += 1;
                state.stream = true;
                state.half_published = false;
            }
            Action::Step(p) => {
                if !self.step(&mut state, p) {
                    return None;
                }
            }
            Action::Receive(p) => self.receive(&mut state, p),
            Action::Apply(command, lose_reply) => {
                state.network.remove(&command);
                let reply = self.apply(&mut state, command);
                if lose_reply {
                    state.faults.timeouts -= 1;
                    if let Some(process) = state
                        .processes
                        .iter_mut()
                        .find(|p| p.up && p.identity() == command.from)
                        && matches!(process.work, Work::Waiting { request, .. } if request == command.request)
                    {
                        process.lost = true;
                    }
                } else if let Some(process) = state
                    .processes
                    .iter_mut()
                    .find(|p| p.up && p.identity() == command.from)
                    && matches!(process.work, Work::Waiting { request, .. } if request == command.request)
                {
                    process.inbox = Some((command.request, reply));
                }
            }
            Action::Resend(p) => {
                let process = &mut state.processes[p];
                // After a lost reply this is the client's reaction, not a
                // new fault.
                if !std::mem::take(&mut process.lost) {
                    state.faults.timeouts -= 1;
                }
                let Work::Waiting { op, run, .. } = process.work else {
                    return None;
                };
                Self::send(process, &mut state.network, op, run);
            }
            Action::Retry(p) => {
                let process = &mut state.processes[p];
                if !std::mem::take(&mut process.lost) {
                    state.faults.timeouts -= 1;
                }
                let Work::Waiting { run: Some(run), .. } = process.work else {
                    return None;
                };
                // As the worker does: record the failed attempt (closing it)
                // before running the handler again. A timeout is transient:
                // the attempt is not counted.
                let close = Op::Close {
                    lease: run.lease,
                    attempt: run.attempt,
                    count: self.has(Mutant::CountTransientFailures).then_some(run.msg),
                };
                Self::send(process, &mut state.network, close, Some(run));
            }
            Action::Expire => {
                let holder = state.lease?.holder;
                state.dead.insert(holder);
                for process in &mut state.processes {
                    if process.up && process.identity() == holder {
                        process.orphaned = true;
                    }
                }
            }
            Action::Rejoin(p) => {
                let nonce = Self::next_nonce(&state);
                let process = &mut state.processes[p];
                process.nonce = nonce;
                process.orphaned = false;
                process.inbox = None;
                process.lost = false;
                process.next_request = 0;
                process.next_attempt = 1;
                process.next_commit = 0;
                // A process shutting down stops; any other takes
                // partitions again, as the new member.
                process.work = if process.stopping {
                    Work::Stopped
                } else {
                    Work::Idle
                };
            }
            Action::Crash(p) => {
                state.faults.crashes -= 1;
                let process = &mut state.processes[p];
                process.up = false;
                process.stalled = false;
                process.stopping = false;
                process.work = Work::Idle;
                process.inbox = None;
                process.orphaned = false;
                process.lost = false;
            }
            Action::Restart(p) => {
                let nonce = Self::next_nonce(&state);
                let process = &mut state.processes[p];
                process.up = true;
                process.nonce = nonce;
                process.next_request = 0;
                process.next_attempt = 1;
                process.next_commit = 0;
            }
            Action::Stall(p) => {
                state.faults.stalls -= 1;
                state.processes[p].stalled = true;
            }
            Action::Resume(p) => state.processes[p].stalled = false,
            Action::Kill(p) => {
                state.faults.kills -= 1;
                let process = &mut state.processes[p];
                process.stopping = true;
                let run = process.run()?;
                // The hole of issue 8 point 3: releasing at once while the
                // handler, in blocking code, goes on running.
                if self.has(Mutant::ReleaseWhileRunning) {
                    state.network.insert(Command {
                        from: process.identity(),
                        request: u8::MAX,
                        op: Op::Release(run.lease),
                    });
                }
            }
            Action::Error(p) => {
                state.faults.errors -= 1;
                state.errors_seen += 1;
                let process = &mut state.processes[p];
                let Work::Running(run) = process.work else {
                    return None;
                };
                let close = Op::Close {
                    lease: run.lease,
                    attempt: run.attempt,
                    count: Some(run.msg),
                };
                Self::send(process, &mut state.network, close, Some(run));
            }
            Action::Fail(p) => {
                state.faults.poisons -= 1;
                let process = &mut state.processes[p];
                let Work::Running(run) = process.work else {
                    return None;
                };
                let halt = Op::Halt {
                    lease: run.lease,
                    msg: run.msg,
                    attempt: run.attempt,
                    resolutions: state.resolved,
                };
                Self::send(process, &mut state.network, halt, None);
            }
            Action::Resolve { skip } => {
                state.faults.resolutions -= 1;
                let seen = state.halted?;
                state.network.insert(Command {
                    from: OPERATOR,
                    request: state.faults.resolutions,
                    op: Op::Resolve { seen, skip },
                });
            }
            Action::Fsync => state.durable = Some(Box::new(Durable::of(&state))),
            Action::RedisRestart => {
                state.faults.aof_losses -= 1;
                state.durable.clone()?.restore(&mut state);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("effects land in publish order", |_, state: &State| {
                state.effects.windows(2).all(|pair| pair[0] <= pair[1])
            }),
            Property::always("each message's effect lands once", |_, state: &State| {
                state
                    .effects
                    .iter()
                    .enumerate()
                    .all(|(at, msg)| !state.effects[..at].contains(msg))
            }),
            Property::always("an acknowledged message has its effect", |_, state: &State| {
                (0..8u8)
                    .filter(|m| state.acked & !state.skipped & (1 << m) != 0)
                    .all(|m| state.effects.contains(&m))
            }),
            Property::always("a run starts only under the lease", |_, state: &State| {
                !state.unauthorized_run
            }),
            Property::always("only the unacknowledged head is run", |_, state: &State| {
                !state.rerun_after_ack
            }),
            Property::always("at most one live run holds the key", |_, state: &State| {
                state
                    .processes
                    .iter()
                    .filter(|p| p.live() && !p.orphaned && p.run().is_some())
                    .count()
                    <= 1
            }),
            Property::always("no published message is stranded", |_, state: &State| {
                Protocol::head(state).is_none() || state.indexed
            }),
            // Liveness, checked on every history that ends (the faults are
            // used up and nothing is left to do): every message was handled,
            // unless the partition waits for an operator or no worker is
            // left to run (every process shut down).
            Property::eventually(
                "once faults stop, every published message is handled",
                |model: &Protocol, state: &State| {
                    let all = (1u16 << model.messages()) - 1;
                    let handled = state.published == model.messages() && u16::from(state.acked) & all == all;
                    let waits_for_operator = state.halted.is_some() && state.faults.resolutions == 0;
                    let no_worker = state.processes.iter().all(|p| matches!(p.work, Work::Stopped));
                    handled || waits_for_operator || no_worker
                },
            ),
            Property::always(
                "a halted partition makes no progress until resolved",
                |_, state: &State| !state.progress_while_halted,
            ),
            Property::always(
                "an operator's skip lands on the head it saw",
                |_, state: &State| !state.skipped_unseen,
            ),
            Property::always(
                "no stale halt undoes an operator's decision",
                |_, state: &State| !state.stale_halt,
            ),
            Property::always(
                "Redis counts only ordinary failures, each once",
                |_, state: &State| state.counted <= state.errors_seen,
            ),
        ]
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Apply(command, lose) => write!(
                f,
                "redis applies {:?} from instance {} (start {}){}",
                command.op,
                command.from.instance,
                command.from.nonce,
                if *lose { ", reply lost" } else { "" }
            ),
            other => write!(f, "{other:?}"),
        }
    }
}
