//! The protocol of one HASHED partition (`[categories.NAME] partitions = N`)
//! as a state machine: several keys share one stream and one lease, and the
//! owner reads ahead into a queue per key.
//!
//! What [`crate::protocol`] models for a per-key partition carries over (one
//! lease with a fencing token, acquired when free, renewed by a live holder,
//! expiring when its holder is stalled or down; commands delivered in any
//! order; crashes and restarts with a new nonce), and the owner's loop is
//! that of `crates/ordo-redis/src/consumer/hashed.rs`:
//!
//! - **Read-ahead.** A fenced read (`read_hashed.lua`) delivers the next
//!   entry in stream order into the consumer group's pending list; the owner
//!   puts it in its key's queue. A new owner reads from a cursor: first every
//!   pending entry (delivered, not acknowledged) from the start, in order,
//!   then new entries (`>`).
//! - **Per-key runs.** Every key runs on its own, side by side with the
//!   others, and strictly one message at a time: a key's next message starts
//!   only once the acknowledgement of the previous one (`ack.lua`, fenced)
//!   succeeded. A run is a fenced commit of the handler's effect followed by
//!   the fenced acknowledgement. A queued entry that has not started is no
//!   run; the worker starts it without asking Redis (only its commit and
//!   acknowledgement are fenced), so a stale owner that wakes up may start
//!   one.
//! - **A lost lease.** A fenced reply stops the owner: no queued entry starts
//!   any more, the runs in progress end (their commands are refused), and
//!   only then does the process try to acquire again (with an empty memory).
//! - **Skipping a saturated key** (when [`HashedConfig::queue`] is set): an
//!   entry of a key whose queue is full is not kept; the key remembers the
//!   span of the stream its skipped entries lie in, every later entry of the
//!   key extends the span, and once the key's queue is empty it reads them
//!   back in order (`refill.lua`: the entries of the key in the span, at
//!   most a queue's worth, and where to go on from).
//!
//! The properties are per key: each key's effects land in publish order and
//! without a gap, a current owner starts a run only on its key's
//! unacknowledged head, at most one run of a key at once by owners whose
//! effects can land, a failover re-runs at most one message per key, and
//! once faults stop every message is acknowledged.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use stateright::{Checker, Model, Property};

use crate::protocol::{Identity, LeaseValue};

/// What is explored: instances × keys × messages per key × faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashedConfig {
    /// Engine instances (processes).
    pub instances: u8,
    /// Keys in the partition.
    pub keys: u8,
    /// Messages in the stream, in publish order. The stream interleaves the
    /// keys: message `m` is of key `m % keys`, so 3 messages of 2 keys
    /// read A0 B0 A1.
    pub messages: u8,
    /// The most entries a key's queue holds before the reader skips past
    /// the key (`KEY_QUEUE`); 0 for no limit.
    pub queue: u8,
    /// SIGKILLs the environment may inject.
    pub crashes: u8,
    /// SIGSTOPs past the TTL.
    pub stalls: u8,
}

impl HashedConfig {
    /// Read-ahead, per-key runs side by side, and a stalled owner whose
    /// lease expires: 2 keys × 2 messages (the default of `ordo-model
    /// hashed`; too large for the test suite).
    pub const FULL: Self = Self {
        instances: 2,
        keys: 2,
        messages: 4,
        queue: 0,
        crashes: 0,
        stalls: 1,
    };

    /// [`HashedConfig::FULL`] with 3 messages (A0 B0 A1): the test suite's.
    pub const STALL: Self = Self {
        instances: 2,
        keys: 2,
        messages: 3,
        queue: 0,
        crashes: 0,
        stalls: 1,
    };

    /// An owner killed and restarted with a new nonce.
    pub const CRASH: Self = Self {
        instances: 2,
        keys: 2,
        messages: 3,
        queue: 0,
        crashes: 1,
        stalls: 0,
    };

    /// A queue of one entry per key: the reader skips past a saturated key
    /// and the key reads its skipped entries back, with a stalled owner.
    pub const SKIP: Self = Self {
        instances: 2,
        keys: 2,
        messages: 3,
        queue: 1,
        crashes: 0,
        stalls: 1,
    };

    /// The configurations `ordo-model hashed --config NAME` knows.
    pub const NAMED: [(&'static str, Self); 4] = [
        ("full", Self::FULL),
        ("stall", Self::STALL),
        ("crash", Self::CRASH),
        ("skip", Self::SKIP),
    ];

    /// The configuration called `name` in [`HashedConfig::NAMED`].
    pub fn named(name: &str) -> Option<Self> {
        Self::NAMED
            .into_iter()
            .find(|(known, _)| *known == name)
            .map(|(_, config)| config)
    }

    /// The smallest configuration whose faults can expose `mutant`.
    pub fn exposing(mutant: HashedMutant) -> Self {
        match mutant {
            HashedMutant::KeyNextBeforeAck | HashedMutant::TakeoverSkipsPending => Self::STALL,
            HashedMutant::LeaseWithoutNonce => Self {
                stalls: 0,
                ..Self::STALL
            },
            // One key of three messages: the reader skips its last while
            // the key reads back the one before.
            HashedMutant::RefillForgetsLateSkips => Self {
                keys: 1,
                stalls: 0,
                ..Self::SKIP
            },
        }
    }

    /// Messages in the stream.
    pub fn messages(&self) -> u8 {
        self.messages
    }

    /// The key of message `msg`.
    pub fn key_of(&self, msg: u8) -> u8 {
        msg % self.keys
    }
}

impl fmt::Display for HashedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instances × {} messages of {} keys, interleaved in one stream, key queue {} × faults \
             (crashes {}, stalls {}) with commands delivered in any order",
            self.instances,
            self.messages,
            self.keys,
            if self.queue == 0 {
                "unbounded".to_owned()
            } else {
                self.queue.to_string()
            },
            self.crashes,
            self.stalls
        )
    }
}

/// A seeded defect of the hashed owner: each is a hole the real owner closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HashedMutant {
    /// A key's next message starts once the previous one's effect is
    /// committed, without waiting for its acknowledgement (sent, not awaited).
    KeyNextBeforeAck,
    /// A new owner reads only new entries (`>`), not the pending list the
    /// previous owner left.
    TakeoverSkipsPending,
    /// A read-back of a key's skipped entries forgets the span even when
    /// the reader skipped more of the key while it was reading.
    RefillForgetsLateSkips,
    /// A lease is adopted by instance id alone, without the process's nonce
    /// (two processes share an instance id in a rolling deploy).
    LeaseWithoutNonce,
}

impl HashedMutant {
    /// Every mutant.
    pub const ALL: [Self; 4] = [
        Self::KeyNextBeforeAck,
        Self::TakeoverSkipsPending,
        Self::RefillForgetsLateSkips,
        Self::LeaseWithoutNonce,
    ];

    /// The mutant's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::KeyNextBeforeAck => "key-next-before-ack",
            Self::TakeoverSkipsPending => "takeover-skips-pending",
            Self::RefillForgetsLateSkips => "refill-forgets-late-skips",
            Self::LeaseWithoutNonce => "lease-without-nonce",
        }
    }
}

impl fmt::Display for HashedMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A hashed mutant name that does not exist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownHashedMutant(pub String);

impl fmt::Display for UnknownHashedMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = HashedMutant::ALL.iter().map(|m| m.name()).collect();
        write!(
            f,
            "unknown hashed mutant `{}`; expected one of: {}",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownHashedMutant {}

impl FromStr for HashedMutant {
    type Err = UnknownHashedMutant;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| UnknownHashedMutant(name.to_owned()))
    }
}

/// Which part of an owner sends a command: its reader, or the run of a key.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// The process's worker before it owns the partition (acquire).
    Worker,
    /// The reader (`read_hashed.lua`).
    Reader,
    /// The run of key `k`.
    Key(u8),
}

/// A command, as sent by a process.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    /// Take the lease if it is free (or this process's own).
    Acquire,
    /// The fenced read from a cursor: `Some(c)` reads the pending entries
    /// from position `c` on (then, when none is left, new ones); `None`
    /// reads new entries only.
    Read {
        /// The lease.
        lease: LeaseValue,
        /// The cursor.
        cursor: Option<u8>,
    },
    /// The fenced commit of a handler's effect for `msg`.
    Commit {
        /// The lease the handler ran under.
        lease: LeaseValue,
        /// The message handled.
        msg: u8,
    },
    /// The fenced acknowledgement of `msg` (XACK).
    Ack {
        /// The lease.
        lease: LeaseValue,
        /// The message.
        msg: u8,
    },
    /// The fenced read-back of `key`'s skipped entries at positions
    /// `from..=to` (`refill.lua`).
    Refill {
        /// The lease.
        lease: LeaseValue,
        /// The key.
        key: u8,
        /// The first position to look at.
        from: u8,
        /// The last position to look at.
        to: u8,
    },
}

impl Op {
    fn lease(self) -> Option<LeaseValue> {
        match self {
            Self::Acquire => None,
            Self::Read { lease, .. }
            | Self::Commit { lease, .. }
            | Self::Ack { lease, .. }
            | Self::Refill { lease, .. } => Some(lease),
        }
    }
}

/// A command in flight.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Command {
    /// The sender.
    pub from: Identity,
    /// The part of the sender waiting for the reply.
    pub part: Part,
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
    /// The lease moved on.
    Fenced,
    /// An entry, delivered (or delivered again) to the group's consumer.
    Entry {
        /// The message.
        msg: u8,
        /// Where the reader goes on from.
        cursor: Option<u8>,
    },
    /// Nothing new to read.
    Idle,
    /// A read-back: the key's entries found (a bit per message, in stream
    /// order) and the position to go on from (`None`: the span is read).
    Refilled {
        /// The entries found.
        found: u8,
        /// The next position to look at, when a queue's worth was found.
        next: Option<u8>,
    },
    /// Done.
    Ok,
}

/// A part's command and, once Redis applied it, the reply.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Call {
    /// Nothing asked.
    None,
    /// Sent, no reply yet.
    Sent(Op),
    /// Answered, the reply not read yet.
    Answered(Op, Reply),
}

/// One key in an owner's memory.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Key {
    /// Entries read ahead and not started, in stream order.
    pub queue: Vec<u8>,
    /// The span `(from, to)` of positions where the key's skipped entries lie.
    pub skipped: Option<(u8, u8)>,
    /// The message whose run is in progress (commit, then acknowledgement).
    pub running: Option<u8>,
    /// The key's command.
    pub call: Call,
}

impl Key {
    fn new() -> Self {
        Self {
            queue: Vec::new(),
            skipped: None,
            running: None,
            call: Call::None,
        }
    }

    fn busy(&self) -> bool {
        self.running.is_some() || self.call != Call::None
    }
}

/// The owner of the partition, for the time its lease lasts.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Owner {
    /// The lease.
    pub lease: LeaseValue,
    /// A command was fenced: nothing new starts, the runs in progress end.
    pub lost: bool,
    /// The reader's cursor.
    pub cursor: Option<u8>,
    /// The reader's command.
    pub reader: Call,
    /// The keys, by key number.
    pub keys: Vec<Key>,
}

/// What a process's worker is doing.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Work {
    /// No lease: may try to acquire.
    Idle,
    /// Waiting for the answer to its acquire.
    Acquiring(Call),
    /// Owning the partition.
    Owner(Owner),
}

/// One process.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Process {
    /// Its identity (instance id and nonce of this start).
    pub id: Identity,
    /// Whether the process runs at all.
    pub up: bool,
    /// Whether the process is paused (SIGSTOP).
    pub stalled: bool,
    /// Its lease expired while it was paused: what it does under it is fenced.
    pub orphaned: bool,
    /// The worker.
    pub work: Work,
}

impl Process {
    fn live(&self) -> bool {
        self.up && !self.stalled
    }

    fn owner(&self) -> Option<&Owner> {
        match &self.work {
            Work::Owner(owner) => Some(owner),
            _ => None,
        }
    }
}

/// The whole system.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct HashedState {
    /// The partition's lease.
    pub lease: Option<LeaseValue>,
    /// The generation counter behind fencing tokens (acquisitions so far).
    pub generation: u8,
    /// Messages appended to the stream.
    pub published: u8,
    /// Entries delivered to the group (a prefix of the stream).
    pub delivered: u8,
    /// Acknowledged entries (bit per message).
    pub acked: u8,
    /// Committed effects, message numbers in the order they landed.
    pub effects: Vec<u8>,
    /// Commands in flight, in no particular order.
    pub network: BTreeSet<Command>,
    /// The processes.
    pub processes: Vec<Process>,
    /// Crashes left.
    pub crashes: u8,
    /// Stalls left.
    pub stalls: u8,
    /// Handler runs started per message (a history variable).
    pub runs: Vec<u8>,
    /// A current owner started a run on a message other than its key's
    /// unacknowledged head (a history variable).
    pub run_off_head: bool,
    /// A stale owner (its lease expired while it was paused) started a run
    /// (a history variable; its effects are fenced).
    pub stale_start: bool,
}

/// What can happen next.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The outbox appends the next message.
    Publish,
    /// Process `p`'s part sends its next command (or starts a run).
    Step(usize, Part),
    /// Process `p`'s part reads the reply that came while it was paused.
    Receive(usize, Part),
    /// Redis applies a command in flight.
    Apply(Command),
    /// The lease expires (its holder is down, stalled or gone).
    Expire,
    /// SIGKILL of process `p`.
    Crash(usize),
    /// Process `p` starts again with a new nonce.
    Restart(usize),
    /// SIGSTOP of process `p`.
    Stall(usize),
    /// SIGCONT of process `p`.
    Resume(usize),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Apply(command) => write!(
                f,
                "redis applies {:?} from instance {} (start {}), {:?}",
                command.op, command.from.instance, command.from.nonce, command.part
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

/// The hashed-partition model for one configuration and mutant.
#[derive(Clone, Debug)]
pub struct Hashed {
    /// The configuration.
    pub config: HashedConfig,
    /// The seeded defect, if any.
    pub mutant: Option<HashedMutant>,
}

/// The properties of the real design that do not hold, with why (see
/// docs/RELIABILITY.md): reported by the checker, never failed on.
pub const HASHED_BY_DESIGN: [&str; 1] = [STALE_START];

const STALE_START: &str = "a stale owner starts no run";

impl Hashed {
    fn has(&self, mutant: HashedMutant) -> bool {
        self.mutant == Some(mutant)
    }

    fn bit(msg: u8) -> u8 {
        1 << msg
    }

    /// The messages of `msg`'s key before it.
    fn earlier(&self, msg: u8) -> impl Iterator<Item = u8> + use<> {
        let keys = self.config.keys;
        (0..msg).filter(move |m| m % keys == msg % keys)
    }

    fn send(network: &mut BTreeSet<Command>, from: Identity, part: Part, op: Op) -> Call {
        network.insert(Command { from, part, op });
        Call::Sent(op)
    }

    /// Whether part `part` of process `p` has something to do now.
    fn may_step(&self, state: &HashedState, p: usize, part: Part) -> bool {
        let process = &state.processes[p];
        match (&process.work, part) {
            // Abstraction of discovery: a worker tries to acquire only a
            // lease that may be free (or its own), when there is work.
            (Work::Idle, Part::Worker) => {
                state.lease.is_none_or(|l| {
                    l.holder == process.id
                        || self.has(HashedMutant::LeaseWithoutNonce)
                            && l.holder.instance == process.id.instance
                }) && (0..state.published).any(|m| state.acked & Self::bit(m) == 0)
            }
            // The heartbeat: a renewal of a lease that moved on fails, and
            // the owner stops.
            (Work::Owner(owner), Part::Worker) => !owner.lost && state.lease != Some(owner.lease),
            // Abstraction of the waker: the reader reads when it has pending
            // entries to go through, or something new was appended.
            (Work::Owner(owner), Part::Reader) => {
                !owner.lost
                    && owner.reader == Call::None
                    && (owner.cursor.is_some() || state.delivered < state.published)
            }
            (Work::Owner(owner), Part::Key(k)) => {
                let key = &owner.keys[usize::from(k)];
                !owner.lost && !key.busy() && (!key.queue.is_empty() || key.skipped.is_some())
            }
            _ => false,
        }
    }

    fn step(&self, state: &mut HashedState, p: usize, part: Part) {
        let acked = state.acked;
        let process = &mut state.processes[p];
        let id = process.id;
        let orphaned = process.orphaned;
        match (&mut process.work, part) {
            (Work::Idle, Part::Worker) => {
                process.work = Work::Acquiring(Self::send(&mut state.network, id, Part::Worker, Op::Acquire));
            }
            (Work::Owner(owner), Part::Worker) => {
                owner.lost = true;
                Self::settle(process);
            }
            (Work::Owner(owner), Part::Reader) => {
                let op = Op::Read {
                    lease: owner.lease,
                    cursor: owner.cursor,
                };
                owner.reader = Self::send(&mut state.network, id, part, op);
            }
            (Work::Owner(owner), Part::Key(k)) => {
                let lease = owner.lease;
                let key = &mut owner.keys[usize::from(k)];
                if key.queue.is_empty() {
                    let Some((from, to)) = key.skipped else { return };
                    let op = Op::Refill {
                        lease,
                        key: k,
                        from,
                        to,
                    };
                    key.call = Self::send(&mut state.network, id, part, op);
                    return;
                }
                // A run starts: the handler runs, then commits under the fence.
                let msg = key.queue.remove(0);
                key.running = Some(msg);
                key.call = Self::send(&mut state.network, id, part, Op::Commit { lease, msg });
                let run = &mut state.runs[usize::from(msg)];
                *run = run.saturating_add(1);
                if orphaned {
                    state.stale_start = true;
                } else {
                    let head =
                        acked & Self::bit(msg) == 0 && self.earlier(msg).all(|m| acked & Self::bit(m) != 0);
                    if !head {
                        state.run_off_head = true;
                    }
                }
            }
            _ => {}
        }
    }

    /// Redis applies `command` and answers.
    pub fn apply(&self, state: &mut HashedState, command: Command) -> Reply {
        if let Some(lease) = command.op.lease()
            && state.lease != Some(lease)
        {
            return Reply::Fenced;
        }
        match command.op {
            Op::Acquire => match state.lease {
                None => {
                    state.generation += 1;
                    let lease = LeaseValue {
                        holder: command.from,
                        token: state.generation,
                    };
                    state.lease = Some(lease);
                    Reply::Acquired(lease)
                }
                Some(lease) if lease.holder == command.from => Reply::Acquired(lease),
                Some(lease)
                    if self.has(HashedMutant::LeaseWithoutNonce)
                        && lease.holder.instance == command.from.instance =>
                {
                    Reply::Acquired(lease)
                }
                Some(_) => Reply::Busy,
            },
            Op::Read { cursor, .. } => {
                if let Some(from) = cursor {
                    // XREADGROUP from an id: the pending entries after it.
                    if let Some(msg) = (from..state.delivered).find(|m| state.acked & Self::bit(*m) == 0) {
                        return Reply::Entry {
                            msg,
                            cursor: Some(msg + 1),
                        };
                    }
                }
                // Then `>`: the next entry never delivered.
                if state.delivered < state.published {
                    let msg = state.delivered;
                    state.delivered += 1;
                    Reply::Entry { msg, cursor: None }
                } else {
                    Reply::Idle
                }
            }
            Op::Commit { msg, .. } => {
                state.effects.push(msg);
                Reply::Ok
            }
            Op::Ack { msg, .. } => {
                state.acked |= Self::bit(msg);
                Reply::Ok
            }
            Op::Refill { key, from, to, .. } => {
                // XRANGE over the span: every entry of the key there, whether
                // acknowledged or not (nothing is trimmed in the model).
                let mut found = 0u8;
                let mut count = 0u8;
                for msg in from..=to.min(state.published.saturating_sub(1)) {
                    if self.config.key_of(msg) == key {
                        found |= Self::bit(msg);
                        count += 1;
                        if count == self.config.queue {
                            // `refill.lua` answers the id of the last entry
                            // found: the next read-back starts after it.
                            return Reply::Refilled {
                                found,
                                next: Some(msg + 1),
                            };
                        }
                    }
                }
                Reply::Refilled { found, next: None }
            }
        }
    }

    /// An entry read: queued to its key, or skipped when the key's queue is
    /// full (or the key has skipped entries already).
    fn dispatch(&self, owner: &mut Owner, msg: u8) {
        let key = &mut owner.keys[usize::from(self.config.key_of(msg))];
        if let Some((_, to)) = &mut key.skipped {
            *to = msg;
        } else if self.config.queue > 0 && key.queue.len() >= usize::from(self.config.queue) {
            key.skipped = Some((msg, msg));
        } else {
            key.queue.push(msg);
        }
    }

    fn receive(&self, state: &mut HashedState, p: usize, part: Part) {
        let process = &mut state.processes[p];
        let id = process.id;
        match (&mut process.work, part) {
            (Work::Acquiring(Call::Answered(_, reply)), Part::Worker) => {
                process.work = match *reply {
                    Reply::Acquired(lease) => {
                        process.orphaned = false;
                        Work::Owner(Owner {
                            lease,
                            lost: false,
                            cursor: if self.has(HashedMutant::TakeoverSkipsPending) {
                                None
                            } else {
                                Some(0)
                            },
                            reader: Call::None,
                            keys: (0..self.config.keys).map(|_| Key::new()).collect(),
                        })
                    }
                    _ => Work::Idle,
                };
            }
            (Work::Owner(owner), Part::Reader) => {
                let Call::Answered(_, reply) = owner.reader else {
                    return;
                };
                owner.reader = Call::None;
                match reply {
                    Reply::Entry { msg, cursor } => {
                        owner.cursor = cursor;
                        self.dispatch(owner, msg);
                    }
                    Reply::Idle => owner.cursor = None,
                    _ => owner.lost = true,
                }
            }
            (Work::Owner(owner), Part::Key(k)) => {
                let lease = owner.lease;
                let key = &mut owner.keys[usize::from(k)];
                let Call::Answered(op, reply) = key.call else {
                    return;
                };
                key.call = Call::None;
                match (op, reply) {
                    (Op::Commit { msg, .. }, Reply::Ok) => {
                        let ack = Op::Ack { lease, msg };
                        if self.has(HashedMutant::KeyNextBeforeAck) {
                            // Sent, not awaited: the key goes on at once.
                            state.network.insert(Command {
                                from: id,
                                part: Part::Worker,
                                op: ack,
                            });
                            key.running = None;
                        } else {
                            key.call = Self::send(&mut state.network, id, part, ack);
                        }
                    }
                    (Op::Ack { .. }, Reply::Ok) => key.running = None,
                    (Op::Refill { to, .. }, Reply::Refilled { found, next }) => {
                        key.queue.extend((0..8).filter(|m| found & Self::bit(*m) != 0));
                        if let Some((from, now_to)) = &mut key.skipped {
                            match next {
                                Some(next) => *from = next,
                                // Read up to where the span ended when the
                                // read-back began; the reader may have skipped
                                // more of the key since.
                                None if *now_to == to || self.has(HashedMutant::RefillForgetsLateSkips) => {
                                    key.skipped = None;
                                }
                                None => *from = to + 1,
                            }
                        }
                    }
                    _ => {
                        key.running = None;
                        owner.lost = true;
                    }
                }
            }
            _ => return,
        }
        Self::settle(process);
    }

    /// A lost lease: once every run has ended, the worker exits (its read in
    /// flight is dropped) and the process may try to acquire again, with an
    /// empty memory.
    fn settle(process: &mut Process) {
        if let Work::Owner(owner) = &process.work
            && owner.lost
            && owner.keys.iter().all(|k| !k.busy())
        {
            process.work = Work::Idle;
            process.orphaned = false;
        }
    }

    fn may_expire(state: &HashedState) -> bool {
        let Some(lease) = state.lease else { return false };
        !state.processes.iter().any(|p| p.id == lease.holder && p.live())
    }

    /// Messages of `key` run more than once, counting every start after
    /// the first.
    fn reruns(&self, state: &HashedState, key: u8) -> u8 {
        (0..self.config.messages())
            .filter(|m| self.config.key_of(*m) == key)
            .map(|m| state.runs[usize::from(m)].saturating_sub(1))
            .sum()
    }
}

impl Model for Hashed {
    type State = HashedState;
    type Action = Action;

    fn init_states(&self) -> Vec<HashedState> {
        let processes = (0..self.config.instances)
            .map(|i| Process {
                id: Identity {
                    instance: if self.has(HashedMutant::LeaseWithoutNonce) {
                        0
                    } else {
                        i
                    },
                    nonce: i,
                },
                up: true,
                stalled: false,
                orphaned: false,
                work: Work::Idle,
            })
            .collect();
        vec![HashedState {
            lease: None,
            generation: 0,
            published: 0,
            delivered: 0,
            acked: 0,
            effects: Vec::new(),
            network: BTreeSet::new(),
            processes,
            crashes: self.config.crashes,
            stalls: self.config.stalls,
            runs: vec![0; usize::from(self.config.messages())],
            run_off_head: false,
            stale_start: false,
        }]
    }

    fn actions(&self, state: &HashedState, actions: &mut Vec<Action>) {
        if state.published < self.config.messages() {
            actions.push(Action::Publish);
        }
        for command in &state.network {
            actions.push(Action::Apply(*command));
        }
        if Self::may_expire(state) {
            actions.push(Action::Expire);
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
            let parts = std::iter::once(Part::Worker)
                .chain(std::iter::once(Part::Reader))
                .chain((0..self.config.keys).map(Part::Key));
            for part in parts {
                if self.may_step(state, p, part) {
                    actions.push(Action::Step(p, part));
                }
                let answered = match (&process.work, part) {
                    (Work::Acquiring(call), Part::Worker) => matches!(call, Call::Answered(..)),
                    (Work::Owner(owner), Part::Reader) => matches!(owner.reader, Call::Answered(..)),
                    (Work::Owner(owner), Part::Key(k)) => {
                        matches!(owner.keys[usize::from(k)].call, Call::Answered(..))
                    }
                    _ => false,
                };
                if answered {
                    actions.push(Action::Receive(p, part));
                }
            }
            if state.crashes > 0 {
                actions.push(Action::Crash(p));
            }
            if state.stalls > 0 {
                actions.push(Action::Stall(p));
            }
        }
    }

    fn next_state(&self, last: &HashedState, action: Action) -> Option<HashedState> {
        let mut state = last.clone();
        match action {
            Action::Publish => state.published += 1,
            Action::Step(p, part) => self.step(&mut state, p, part),
            Action::Receive(p, part) => self.receive(&mut state, p, part),
            Action::Apply(command) => {
                state.network.remove(&command);
                let reply = self.apply(&mut state, command);
                // The reply reaches the part that waits for it, if it still
                // does (a process start that is gone, or a worker that moved
                // on, drops it).
                let Some(p) = state.processes.iter().position(|p| p.up && p.id == command.from) else {
                    return Some(state);
                };
                let process = &mut state.processes[p];
                let live = process.live();
                let call = match (&mut process.work, command.part) {
                    (Work::Acquiring(call), Part::Worker) => Some(call),
                    (Work::Owner(owner), Part::Reader) => Some(&mut owner.reader),
                    (Work::Owner(owner), Part::Key(k)) => Some(&mut owner.keys[usize::from(k)].call),
                    _ => None,
                };
                if let Some(call) = call
                    && *call == Call::Sent(command.op)
                {
                    *call = Call::Answered(command.op, reply);
                    // A live process reads its reply at once: what it does
                    // with it touches only its own memory and sends its next
                    // command, which commutes with everything else that can
                    // happen meanwhile (a reduction of the state space). A
                    // paused one reads it when it resumes.
                    if live {
                        self.receive(&mut state, p, command.part);
                    }
                }
            }
            Action::Expire => {
                let expired = state.lease.take()?;
                for process in &mut state.processes {
                    if process.owner().is_some_and(|o| o.lease == expired) {
                        process.orphaned = true;
                    }
                }
            }
            Action::Crash(p) => {
                state.crashes -= 1;
                let process = &mut state.processes[p];
                process.up = false;
                process.stalled = false;
                process.orphaned = false;
                process.work = Work::Idle;
            }
            Action::Restart(p) => {
                let nonce = state.processes.iter().map(|p| p.id.nonce).max().unwrap_or(0) + 1;
                let process = &mut state.processes[p];
                process.up = true;
                process.id.nonce = nonce;
            }
            Action::Stall(p) => {
                state.stalls -= 1;
                state.processes[p].stalled = true;
            }
            Action::Resume(p) => state.processes[p].stalled = false,
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "each key's effects land in publish order",
                |model: &Hashed, state: &HashedState| {
                    (0..model.config.keys).all(|key| {
                        let mut of_key = state.effects.iter().filter(|m| model.config.key_of(**m) == key);
                        let Some(mut last) = of_key.next() else {
                            return true;
                        };
                        of_key.all(|m| {
                            let ordered = last <= m;
                            last = m;
                            ordered
                        })
                    })
                },
            ),
            Property::always(
                "no key's effect lands before its earlier messages' effects",
                |model: &Hashed, state: &HashedState| {
                    state.effects.iter().enumerate().all(|(at, msg)| {
                        model
                            .earlier(*msg)
                            .all(|before| state.effects[..at].contains(&before))
                    })
                },
            ),
            Property::always(
                "an acknowledged message has its effect",
                |model: &Hashed, state: &HashedState| {
                    (0..model.config.messages())
                        .filter(|m| state.acked & Hashed::bit(*m) != 0)
                        .all(|m| state.effects.contains(&m))
                },
            ),
            Property::always(
                "a current owner runs only its key's unacknowledged head",
                |_, state: &HashedState| !state.run_off_head,
            ),
            Property::always(
                "at most one run of a key at once by owners whose effects can land",
                |model: &Hashed, state: &HashedState| {
                    (0..model.config.keys).all(|key| {
                        state
                            .processes
                            .iter()
                            .filter(|p| p.live() && !p.orphaned)
                            .filter_map(Process::owner)
                            .filter(|o| !o.lost && o.keys[usize::from(key)].running.is_some())
                            .count()
                            <= 1
                    })
                },
            ),
            Property::always(
                "a failover re-runs at most one message per key",
                |model: &Hashed, state: &HashedState| {
                    let failovers = state.generation.saturating_sub(1);
                    (0..model.config.keys).all(|key| model.reruns(state, key) <= failovers)
                },
            ),
            Property::always(STALE_START, |_, state: &HashedState| !state.stale_start),
            // Liveness, checked on every history that ends (faults used up,
            // nothing left to do): every message was acknowledged.
            Property::eventually(
                "once faults stop, every published message is acknowledged",
                |model: &Hashed, state: &HashedState| {
                    let all = ((1u16 << model.config.messages()) - 1) as u8;
                    state.published == model.config.messages() && state.acked == all
                },
            ),
        ]
    }
}

/// A property some history breaks, with that history.
#[derive(Debug, Clone)]
pub struct HashedViolation {
    /// The property.
    pub property: &'static str,
    /// The actions from the initial state to the violating one.
    pub trace: Vec<Action>,
    /// The violating state.
    pub state: HashedState,
}

/// The outcome of one exhaustive check of the hashed model.
#[derive(Debug, Clone)]
pub struct HashedReport {
    /// Distinct states explored.
    pub states: usize,
    /// The deepest history explored.
    pub max_depth: usize,
    /// What was explored.
    pub config: HashedConfig,
    /// The seeded defect, if any.
    pub mutant: Option<HashedMutant>,
    /// Properties broken, each with a shortest counterexample (those of
    /// [`HASHED_BY_DESIGN`] included).
    pub violations: Vec<HashedViolation>,
    /// How long the check took.
    pub elapsed: Duration,
}

impl HashedReport {
    /// The violations other than those the design accepts
    /// ([`HASHED_BY_DESIGN`]).
    pub fn unexpected(&self) -> impl Iterator<Item = &HashedViolation> {
        self.violations
            .iter()
            .filter(|v| !HASHED_BY_DESIGN.contains(&v.property))
    }
}

/// Explores every history of `config` (with `mutant` seeded) breadth-first,
/// so each counterexample is a shortest one.
pub fn check_hashed(config: HashedConfig, mutant: Option<HashedMutant>) -> HashedReport {
    let started = Instant::now();
    let model = Hashed { config, mutant };
    let properties: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let checker = model.checker().spawn_bfs().join();
    let mut discoveries = checker.discoveries();
    let violations = properties
        .into_iter()
        .filter_map(|property| {
            let path = discoveries.remove(property)?;
            let state = path.last_state().clone();
            Some(HashedViolation {
                property,
                trace: path.into_actions(),
                state,
            })
        })
        .collect();
    HashedReport {
        states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        config,
        mutant,
        violations,
        elapsed: started.elapsed(),
    }
}
