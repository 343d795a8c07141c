//! The protocol of one HASHED partition (`[categories.NAME] partitions = N`)
//! as a state machine: several keys share one stream and one lease, and the
//! owner reads ahead into a queue per key.
//!
//! What [`crate::protocol`] models for a per-key partition carries over (one
//! lease with a fencing token held by a member: taken when free or when its
//! holder's member is dead, the member key renewed by a live process and
//! expiring, the lease value staying, when its process is stalled or down;
//! commands delivered in any order; crashes and restarts with a new nonce),
//! and the owner's loop is that of `crates/ordo-redis/src/consumer/hashed.rs`:
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
//! - **A lost lease.** A fenced reply, or a failed renewal of the heartbeat
//!   (the lease moved on, or the member is dead), stops the owner: no queued
//!   entry starts any more, the runs in progress end (their commands pass
//!   the fence until another process takes the lease over), and only then
//!   does the process try to acquire again (with an empty memory; a dead
//!   member's process as a new member, under a new nonce).
//! - **Lost commit replies** (when [`HashedConfig::timeouts`] is set): the
//!   client resends the same commit; the key's own commit marker answers it
//!   without applying it again.
//! - **Moving past a saturated key** (when [`HashedConfig::queue`] is
//!   set): an entry of a key whose queue is full, or that has entries moved
//!   past already, is kept behind the queue, in memory (the reader reads
//!   on for the other keys); once the key's queue is empty, the next queue's
//!   worth moves up, in stream order, with no read of Redis. (Before, such
//!   an entry was left in the stream and read back with `refill.lua`: every
//!   entry of a hot key read twice.)
//! - **Parking** (when [`HashedConfig::poisons`] is set): a handler run
//!   may fail for good; the worker parks the key under the fence
//!   (`park.lua`: the message moves to the key's held stream and is
//!   acknowledged in the lane), the key's later messages follow it there
//!   (`hold.lua`), the other keys flow. A new owner reads which keys are
//!   parked or holding first. An operator (racing the owners) retries or
//!   skips the held head it saw (`resolve_parked.lua`); the owner notices the
//!   key is no longer parked, runs its held messages first, in order
//!   (`held.lua`, `ack_held.lua`), then lets it flow.
//! - **Late held-next commands** (when [`HashedConfig::delays`] is set): a
//!   held-next command delayed on its connection past the client's timeout
//!   is sent again, and the first copy lands whenever Redis gets to it. Each
//!   held-next is an attempt of its key: the acknowledgement of the held
//!   message it fetched, or the end of the holding it answered, closes it,
//!   and `held.lua` refuses a command of a closed attempt (`stale`, which
//!   the client reads as the end of the holding: only an earlier copy of
//!   its own command can have closed it). Without that guard (mutant
//!   `unguarded-held-next`), a late copy ends the holding of a key whose
//!   next message the owner then moves into a held stream nobody lists, and
//!   the next owner never runs it.
//!
//! The properties are per key: each key's effects land in publish order
//! and without a gap (an effect lands only after those of the key's earlier
//! messages, or their skip), a handled message has its effect, a current
//! owner starts a run only on its key's head (its lowest message not handled),
//! at most one run of a key at once by owners whose effects can land, a
//! failover re-runs at most one message per key (and an operator's retry
//! one more), no effect of a parked key lands until it is resolved, a key's
//! held messages keep publish order, under one lease a message's effect
//! lands at most once (a commit resent after a lost reply answers from its
//! key's own marker, `commit.lua`), a key holding messages aside is listed
//! as holding (so a new owner finds them), and once faults stop every
//! message is handled, except those of a key waiting for an operator.
//!
//! A stale owner starts no run: an owner woken from a pause (its
//! heartbeat's last renewal may be a TTL old) confirms its lease before it
//! starts another run, as the worker does (`Worker::confirm_lease`): a
//! check that fails when the lease moved on or its member is dead (a dead
//! member's lease value stays until a takeover, so the lease alone would
//! pass). The first version of this model, without it, found an owner
//! starting a read-ahead message after its lease had expired (mutant
//! `start-without-confirming`).

use std::collections::BTreeSet;
use std::fmt;

use stateright::{HasDiscoveries, Model, Property};

use crate::explore::{Counterexample, Outcome, explore};
use crate::mutant::mutants;
use crate::protocol::{Identity, LeaseValue, acquire};

/// What is explored: instances × messages of some keys × faults.
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
    /// The most entries a key's queue holds before the reader moves past
    /// the key, keeping its later entries behind the queue (`KEY_QUEUE`);
    /// 0 for no limit.
    pub queue: u8,
    /// SIGKILLs the environment may inject.
    pub crashes: u8,
    /// SIGSTOPs past the TTL.
    pub stalls: u8,
    /// Handler runs that fail for good (poison messages: the key parks).
    pub poisons: u8,
    /// Operator decisions on a parked key (retry or skip the head seen).
    pub resolutions: u8,
    /// Commit replies lost (the client resends the same commit).
    pub timeouts: u8,
    /// Held-next commands (`held.lua`) delayed on their connection past
    /// the client's timeout: the client asks again, and the first copy
    /// lands later, whenever Redis gets to it.
    pub delays: u8,
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
        poisons: 0,
        resolutions: 0,
        timeouts: 0,
        delays: 0,
    };

    /// [`HashedConfig::FULL`] with 3 messages (A0 B0 A1): the test suite's.
    pub const STALL: Self = Self {
        instances: 2,
        keys: 2,
        messages: 3,
        queue: 0,
        crashes: 0,
        stalls: 1,
        poisons: 0,
        resolutions: 0,
        timeouts: 0,
        delays: 0,
    };

    /// An owner killed and restarted with a new nonce.
    pub const CRASH: Self = Self {
        instances: 2,
        keys: 2,
        messages: 3,
        queue: 0,
        crashes: 1,
        stalls: 0,
        poisons: 0,
        resolutions: 0,
        timeouts: 0,
        delays: 0,
    };

    /// A poison message parks its key: the key's messages are held aside,
    /// the other key flows, an operator retries or skips the head it saw,
    /// and the key's held messages run first; with a stall past the TTL
    /// (one instance: it takes the partition over from itself, under a new
    /// token, reading the parked keys and the pending list again).
    pub const PARK: Self = Self {
        instances: 1,
        keys: 2,
        messages: 3,
        queue: 0,
        crashes: 0,
        stalls: 1,
        poisons: 1,
        resolutions: 1,
        timeouts: 0,
        delays: 0,
    };

    /// A queue of one entry per key: the reader moves past a saturated key
    /// and the key's queue fills again from the entries moved past, with a
    /// stalled owner.
    pub const SKIP: Self = Self {
        instances: 2,
        keys: 2,
        messages: 3,
        queue: 1,
        crashes: 0,
        stalls: 1,
        poisons: 0,
        resolutions: 0,
        timeouts: 0,
        delays: 0,
    };

    /// Lost commit replies: the client resends the commit, and the key's
    /// commit marker makes the resend a no-op (its keys commit side by side,
    /// each under a marker of its own); with a stall past the TTL (one
    /// instance: it takes the partition over from itself).
    pub const RESEND: Self = Self {
        instances: 1,
        keys: 2,
        messages: 3,
        queue: 0,
        crashes: 0,
        stalls: 1,
        poisons: 0,
        resolutions: 0,
        timeouts: 2,
        delays: 0,
    };

    /// [`HashedConfig::PARK`] with a queue of one entry per key: a parked
    /// key's entries moved past are held behind the others, in order.
    pub const SKIP_PARK: Self = Self {
        queue: 1,
        ..Self::PARK
    };

    /// [`HashedConfig::PARK`] with one key and a held-next command delayed
    /// past the client's timeout: the client asks again, and the first
    /// copy lands whenever Redis gets to it (after the key's held message
    /// ran and was acknowledged, while its next message is being held).
    pub const LATE_HELD: Self = Self {
        keys: 1,
        messages: 2,
        delays: 1,
        ..Self::PARK
    };

    /// The configurations `ordo-model hashed --config NAME` knows.
    pub const NAMED: [(&'static str, Self); 11] = [
        ("full", Self::FULL),
        ("stall", Self::STALL),
        ("crash", Self::CRASH),
        ("skip", Self::SKIP),
        ("park", Self::PARK),
        ("skip-park", Self::SKIP_PARK),
        ("late-held", Self::LATE_HELD),
        ("resend", Self::RESEND),
        (
            "resend-stall",
            Self {
                instances: 2,
                timeouts: 1,
                ..Self::RESEND
            },
        ),
        (
            "park-crash",
            Self {
                instances: 2,
                crashes: 1,
                stalls: 0,
                ..Self::PARK
            },
        ),
        (
            "park-stall",
            Self {
                instances: 2,
                ..Self::PARK
            },
        ),
    ];

    /// The configuration called `name` in [`HashedConfig::NAMED`].
    pub fn named(name: &str) -> Option<Self> {
        crate::by_name(&Self::NAMED, name)
    }

    /// The smallest configuration whose faults can expose `mutant`.
    pub fn exposing(mutant: HashedMutant) -> Self {
        match mutant {
            HashedMutant::KeyNextBeforeAck
            | HashedMutant::CommitWithoutAppliedCheck
            | HashedMutant::TakeoverSkipsPending
            | HashedMutant::StartWithoutConfirming => Self::STALL,
            HashedMutant::SharedCommitMarker => Self {
                stalls: 0,
                timeouts: 1,
                ..Self::RESEND
            },
            HashedMutant::ResolvedKeySkipsHeld => Self {
                stalls: 0,
                ..Self::PARK
            },
            HashedMutant::UnguardedHeldNext => Self::LATE_HELD,
            HashedMutant::LeaseWithoutNonce => Self {
                stalls: 0,
                ..Self::STALL
            },
            // One key of three messages: the reader moves past the second
            // and reads the third once the first ran.
            HashedMutant::QueueAheadOfMovedPast => Self {
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
             (crashes {}, stalls {}, poison messages {}, operator decisions {}, lost commit replies {}, \
             delayed held-next commands {}) with commands delivered in any order",
            self.instances,
            self.messages,
            self.keys,
            if self.queue == 0 {
                "unbounded".to_owned()
            } else {
                self.queue.to_string()
            },
            self.crashes,
            self.stalls,
            self.poisons,
            self.resolutions,
            self.timeouts,
            self.delays
        )
    }
}

mutants! {
    /// A seeded defect of the hashed owner: each is a hole the real owner closes.
    pub enum HashedMutant, unknown UnknownHashedMutant ("hashed mutant") {
        /// The keys of a hashed partition share one commit marker and applied
        /// record, as a per-key partition has one: a key's commit overwrites
        /// another's.
        SharedCommitMarker = "shared-commit-marker",
        /// An owner woken from a pause starts queued messages without first
        /// confirming its lease (the runtime before the model found it).
        StartWithoutConfirming = "start-without-confirming",
        /// A key's next message starts once the previous one's effect is
        /// committed, without waiting for its acknowledgement (sent, not awaited).
        KeyNextBeforeAck = "key-next-before-ack",
        /// A new owner reads only new entries (`>`), not the pending list the
        /// previous owner left.
        TakeoverSkipsPending = "takeover-skips-pending",
        /// An entry read while its key has entries moved past joins the key's
        /// queue when the queue has room, ahead of the entries moved past
        /// before it.
        QueueAheadOfMovedPast = "queue-ahead-of-moved-past",
        /// A lease is adopted by instance id alone, without the process's nonce
        /// (two processes share an instance id in a rolling deploy).
        LeaseWithoutNonce = "lease-without-nonce",
        /// A resolved key flows again at once, before its held messages ran.
        ResolvedKeySkipsHeld = "resolved-key-skips-held",
        /// `held.lua` without the closed-attempt guard `park.lua`, `halt.lua`
        /// and `commit.lua` have: a held-next command that lands late (after
        /// the client asked again and went on) still answers, and its "done"
        /// branch ends the key's holding while the owner holds the key's next
        /// message in a held stream nobody lists any more.
        UnguardedHeldNext = "unguarded-held-next",
        /// A commit of a message whose effect is in already is applied again:
        /// the message a failover runs again has its effect twice.
        CommitWithoutAppliedCheck = "commit-without-applied-check",
    }
}

/// Which part of an owner sends a command: its reader, or the run of a key.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// The process's worker: acquire, then read which keys are parked.
    Worker,
    /// The heartbeat (its renewal of a lease that moved on fails).
    Heartbeat,
    /// The reader (`read_hashed.lua`).
    Reader,
    /// Confirming the lease before a run starts, after a pause (the
    /// worker's `confirm_lease`: the heartbeat's last renewal is too old).
    Confirm,
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
    /// The check that the lease is still held and its member alive (the
    /// worker's lease confirmation).
    Check {
        /// The lease.
        lease: LeaseValue,
    },
    /// What a new owner reads first: the parked keys, and those holding
    /// messages aside (`parking`, a plain read).
    Parking,
    /// Park `key` on the poison message `msg` (`park.lua`): move it to the
    /// key's held stream and acknowledge it in the lane, unless `held`
    /// (it is the held head, failing again).
    Park {
        /// The lease.
        lease: LeaseValue,
        /// The key.
        key: u8,
        /// The message that failed every attempt.
        msg: u8,
        /// Whether it is held already.
        held: bool,
    },
    /// Move `key`'s messages `msgs` (a bit each, in stream order) behind
    /// what it holds, acknowledging them in the lane (`hold.lua`).
    Hold {
        /// The lease.
        lease: LeaseValue,
        /// The key.
        key: u8,
        /// The messages.
        msgs: u8,
    },
    /// The next held message of a resolved key, or the end of its holding
    /// (`held.lua`), as attempt `attempt` of the key (closed by the first
    /// copy that lands; 0: unsequenced, when no command is delayed).
    HeldNext {
        /// The lease.
        lease: LeaseValue,
        /// The key.
        key: u8,
        /// The attempt it belongs to, in the key's attempt sequence.
        attempt: u8,
        /// The client's second copy, sent after the first timed out.
        again: bool,
    },
    /// The acknowledgement of a handled held message (`ack_held.lua`),
    /// closing the attempt that fetched it (0: none).
    AckHeld {
        /// The lease.
        lease: LeaseValue,
        /// The key.
        key: u8,
        /// The message.
        msg: u8,
        /// The attempt it closes in the key's attempt sequence.
        attempt: u8,
    },
    /// Whether `key` is still parked (the owner's poll, a plain read).
    StillParked {
        /// The key.
        key: u8,
    },
    /// An operator's decision on parked `key` (`resolve_parked.lua`).
    Resolve {
        /// The key.
        key: u8,
        /// The held head the operator saw.
        seen: u8,
        /// Skip the head (otherwise retry it).
        skip: bool,
    },
}

impl Op {
    fn lease(self) -> Option<LeaseValue> {
        match self {
            Self::Acquire | Self::Parking | Self::StillParked { .. } | Self::Resolve { .. } => None,
            Self::Read { lease, .. }
            | Self::Check { lease }
            | Self::Commit { lease, .. }
            | Self::Ack { lease, .. }
            | Self::Park { lease, .. }
            | Self::Hold { lease, .. }
            | Self::HeldNext { lease, .. }
            | Self::AckHeld { lease, .. } => Some(lease),
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
    /// The parked keys and the keys holding messages (a bit per key).
    Parking {
        /// Parked keys.
        parked: u8,
        /// Keys holding messages aside (parked, or resolved and not drained).
        holding: u8,
    },
    /// The next held message of a resolved key.
    Held(u8),
    /// The key is parked (not resolved, or parked again).
    Parked,
    /// The key holds nothing more: it flows again.
    Drained,
    /// Whether the key is still parked.
    StillParked(bool),
    /// The command's attempt is closed already (a late copy): refused.
    Stale,
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
    /// Entries read after the queue was full, in memory behind it, in
    /// stream order.
    pub moved_past: Vec<u8>,
    /// The message whose run is in progress (commit, then acknowledgement).
    pub running: Option<u8>,
    /// The key's command.
    pub call: Call,
    /// How the key's messages are handled.
    pub mode: Mode,
    /// The held message `held.lua` answered, to run next.
    pub held_next: Option<u8>,
    /// The attempt of the held message running or about to run (the
    /// held-next command's): its acknowledgement closes it.
    pub attempt: u8,
}

/// How a key's messages are handled.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Mode {
    /// Run as they come.
    Flowing,
    /// Parked on a poison message: held aside until an operator resolves it.
    Parked,
    /// Resolved: its held messages run first.
    Holding,
}

impl Key {
    fn new() -> Self {
        Self {
            queue: Vec::new(),
            moved_past: Vec::new(),
            running: None,
            call: Call::None,
            mode: Mode::Flowing,
            held_next: None,
            attempt: 0,
        }
    }

    fn busy(&self) -> bool {
        self.running.is_some() || self.call != Call::None || self.held_next.is_some()
    }
}

/// The owner of the partition, for the time its lease lasts.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Owner {
    /// The lease.
    pub lease: LeaseValue,
    /// A command was fenced: nothing new starts, the runs in progress end.
    pub lost: bool,
    /// The parked keys are read: the reader and the keys may start.
    pub ready: bool,
    /// The worker's command (reading the parked keys).
    pub setup: Call,
    /// The reader's cursor.
    pub cursor: Option<u8>,
    /// The reader's command.
    pub reader: Call,
    /// The keys, by key number.
    pub keys: Vec<Key>,
    /// Woken from a pause: no run starts until the lease is confirmed.
    pub unconfirmed: bool,
    /// The command confirming the lease.
    pub confirm: Call,
    /// The last attempt numbered under the lease (only when commands may
    /// be delayed; 0 otherwise, the unsequenced attempt).
    pub attempts: u8,
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
    /// Its member expired while it was paused: it starts no run, and it
    /// acquires again only as a new member (a new nonce).
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
    /// The partition's lease (no TTL: it stays when its holder's member
    /// expires).
    pub lease: Option<LeaseValue>,
    /// The generation counter behind fencing tokens (acquisitions so far).
    pub generation: u8,
    /// The process starts whose member key expired: dead for good.
    pub dead: BTreeSet<Identity>,
    /// Messages appended to the stream.
    pub published: u8,
    /// Entries delivered to the group (a prefix of the stream).
    pub delivered: u8,
    /// Entries acknowledged in the lane (bit per message): handled, or
    /// moved to their key's held stream.
    pub acked: u8,
    /// Handled messages: acknowledged after their run (in the lane or in
    /// the held stream), or skipped by an operator.
    pub done: u8,
    /// Messages an operator skipped.
    pub skipped: u8,
    /// Parked keys (a bit per key).
    pub parked: u8,
    /// Keys holding messages aside (a bit per key).
    pub holding: u8,
    /// Each key's held stream, in order.
    pub held: Vec<Vec<u8>>,
    /// Poison messages left.
    pub poisons: u8,
    /// Operator decisions left.
    pub resolutions: u8,
    /// An effect of a parked key landed (a history variable).
    pub progress_while_parked: bool,
    /// The last commit applied per key (`commit.lua`'s marker): its sender,
    /// lease and message. A resend of it answers `ok` without applying.
    pub markers: Vec<Option<(Identity, LeaseValue, u8)>>,
    /// Commit replies that may still be lost.
    pub timeouts: u8,
    /// Held-next commands that may still be delayed.
    pub delays: u8,
    /// Per key, its attempt sequence (`{closed attempt}:{lease value}`):
    /// the lease value and the last attempt closed under it.
    pub sequences: Vec<Option<(LeaseValue, u8)>>,
    /// Per message, the token of the lease its last effect landed under
    /// (0: none).
    pub landed_under: Vec<u8>,
    /// A message's effect landed twice under one lease (a history variable).
    pub double_effect: bool,
    /// Per key, the message whose effect was committed last, until its
    /// acknowledgement lands (`commit.lua`'s applied record): a commit of it
    /// again applies nothing.
    pub applied: Vec<Option<u8>>,
    /// Operator retries that landed, per key (a history variable: each
    /// runs the key's head again).
    pub retried: Vec<u8>,

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
    /// Redis applies a commit in flight and its reply is lost.
    ApplyLosingReply(Command),
    /// Process `p`'s key `k` resends the commit whose reply was lost.
    Resend(usize, u8),
    /// Process `p`'s key `k` times out on its held-next command, still in
    /// flight, and asks again: the first copy lands later.
    Delay(usize, u8),
    /// The lease holder's member key expires (its process is down, stalled
    /// or gone); the lease value stays.
    Expire,
    /// SIGKILL of process `p`.
    Crash(usize),
    /// Process `p` starts again with a new nonce.
    Restart(usize),
    /// SIGSTOP of process `p`.
    Stall(usize),
    /// SIGCONT of process `p`.
    Resume(usize),
    /// The handler of process `p`'s key `k` fails for good on the message it
    /// would run next: the worker parks the key.
    Fail(usize, u8),
    /// An operator resolves parked key `key`, naming the head it sees:
    /// skip it, or retry it.
    Resolve {
        /// The key.
        key: u8,
        /// Skip (otherwise retry).
        skip: bool,
    },
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

/// The properties of the real design that do not hold (see
/// docs/RELIABILITY.md): reported by the checker, never failed on. None
/// since a woken owner confirms its lease before starting a run.
pub const HASHED_BY_DESIGN: [&str; 0] = [];

const STALE_START: &str = "a stale owner starts no run";

/// The operator's identity on the network (its replies go nowhere).
const OPERATOR: Identity = Identity {
    instance: u8::MAX,
    nonce: 0,
};

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
            // lease that may be free (free, its own, or its holder's member
            // dead), when there is work.
            (Work::Idle, Part::Worker) => {
                state.lease.is_none_or(|l| {
                    l.holder == process.id
                        || state.dead.contains(&l.holder)
                        || self.has(HashedMutant::LeaseWithoutNonce)
                            && l.holder.instance == process.id.instance
                }) && (0..state.published).any(|m| state.done & Self::bit(m) == 0)
            }
            (Work::Owner(owner), Part::Worker) => !owner.lost && !owner.ready && owner.setup == Call::None,
            (Work::Owner(owner), Part::Confirm) => {
                owner.unconfirmed && !owner.lost && owner.confirm == Call::None
            }
            // The heartbeat: a renewal of a lease that moved on, or of a
            // dead member, fails, and the owner stops.
            (Work::Owner(owner), Part::Heartbeat) => {
                !owner.lost && (state.lease != Some(owner.lease) || process.orphaned)
            }
            // Abstraction of the waker: the reader reads when it has pending
            // entries to go through, or something new was appended.
            (Work::Owner(owner), Part::Reader) => {
                owner.ready
                    && !owner.lost
                    && owner.reader == Call::None
                    && (owner.cursor.is_some() || state.delivered < state.published)
            }
            (Work::Owner(owner), Part::Key(k)) => {
                let key = &owner.keys[usize::from(k)];
                // A held message `held.lua` answered runs at once (the
                // worker checks nothing in between); anything else waits
                // while the lease is known to be lost.
                // A run (a held message `held.lua` answered, or a flowing
                // key's queued head) does not start while the lease is
                // unconfirmed; a held one runs even once the lease is known
                // to be lost (the worker checks nothing in between).
                let held = key.held_next.is_some();
                let head = !key.queue.is_empty() && key.mode == Mode::Flowing;
                owner.ready
                    && key.running.is_none()
                    && key.call == Call::None
                    && ((held || head && !owner.lost) && !owner.unconfirmed
                        // A lost owner's held message does not start: its
                        // lease confirmation fails (it is dropped).
                        || held && owner.lost
                        || !held
                            && !head
                            && !owner.lost
                            && (!key.queue.is_empty()
                                || !key.moved_past.is_empty()
                                || key.mode == Mode::Holding
                                // Abstraction of the poll: the owner asks
                                // whether a parked key is still parked once
                                // an operator resolved it.
                                || key.mode == Mode::Parked && state.parked & Self::bit(k) == 0))
            }
            _ => false,
        }
    }

    fn step(&self, state: &mut HashedState, p: usize, part: Part) {
        let nonce = Self::next_nonce(state);
        let process = &mut state.processes[p];
        let id = process.id;
        let orphaned = process.orphaned;
        let mut started = None;
        match (&mut process.work, part) {
            (Work::Idle, Part::Worker) => {
                // The acquire renews the member first: a dead one goes on as
                // a new member.
                let id = if process.orphaned {
                    process.orphaned = false;
                    process.id.nonce = nonce;
                    process.id
                } else {
                    id
                };
                process.work = Work::Acquiring(Self::send(&mut state.network, id, Part::Worker, Op::Acquire));
            }
            (Work::Owner(owner), Part::Worker) => {
                owner.setup = Self::send(&mut state.network, id, part, Op::Parking);
            }
            (Work::Owner(owner), Part::Heartbeat) => {
                owner.lost = true;
                Self::settle(process);
            }
            (Work::Owner(owner), Part::Confirm) => {
                let op = Op::Check { lease: owner.lease };
                owner.confirm = Self::send(&mut state.network, id, part, op);
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
                let op = if owner.lost && owner.unconfirmed && key.held_next.is_some() {
                    // The lease confirmation before the run fails: it does
                    // not start (the next owner runs the held message).
                    key.held_next = None;
                    Self::settle(process);
                    return;
                } else if let Some(msg) = key.held_next.take() {
                    // A resolved key's held message runs.
                    started = Some(msg);
                    Op::Commit { lease, msg }
                } else if !key.queue.is_empty() && key.mode == Mode::Flowing {
                    // A run starts: the handler runs, then commits under the fence.
                    let msg = key.queue.remove(0);
                    started = Some(msg);
                    Op::Commit { lease, msg }
                } else if !key.queue.is_empty() {
                    // Parked, or resolved and holding: behind what it holds.
                    let msgs = key.queue.drain(..).fold(0, |msgs, msg| msgs | Self::bit(msg));
                    Op::Hold { lease, key: k, msgs }
                } else if !key.moved_past.is_empty() {
                    // The queue is empty: the next queue's worth of the
                    // entries moved past moves up, in memory.
                    let up = key.moved_past.len().min(self.queue_bound());
                    key.queue.extend(key.moved_past.drain(..up));
                    return;
                } else if key.mode == Mode::Holding {
                    // A new attempt of the key (numbered only when a
                    // command may be delayed: a smaller state space).
                    let attempt = if self.config.delays > 0 {
                        owner.attempts += 1;
                        owner.attempts
                    } else {
                        0
                    };
                    Op::HeldNext {
                        lease,
                        key: k,
                        attempt,
                        again: false,
                    }
                } else {
                    Op::StillParked { key: k }
                };
                key.running = started;
                key.call = Self::send(&mut state.network, id, part, op);
            }
            _ => {}
        }
        if let Some(msg) = started {
            self.start_run(state, orphaned, msg);
        }
    }

    /// The bookkeeping of a run's start: how many times the message ran,
    /// and whether it is its key's unacknowledged head.
    fn start_run(&self, state: &mut HashedState, orphaned: bool, msg: u8) {
        let run = &mut state.runs[usize::from(msg)];
        *run = run.saturating_add(1);
        if orphaned {
            state.stale_start = true;
        } else {
            let done = state.done;
            let head = done & Self::bit(msg) == 0 && self.earlier(msg).all(|m| done & Self::bit(m) != 0);
            if !head {
                state.run_off_head = true;
            }
        }
    }

    /// Redis applies `command` and answers.
    pub fn apply(&self, state: &mut HashedState, command: Command) -> Reply {
        // The marker is checked before the fence: a resent commit applied
        // under a lease that has moved on since still answers `ok`.
        if let Op::Commit { lease, msg } = command.op
            && state.markers[self.marker_of(msg)] == Some((command.from, lease, msg))
        {
            return Reply::Ok;
        }
        if let Some(lease) = command.op.lease()
            && state.lease != Some(lease)
        {
            return Reply::Fenced;
        }
        match command.op {
            Op::Acquire => acquire(
                &mut state.lease,
                &mut state.generation,
                command.from,
                &state.dead,
                self.has(HashedMutant::LeaseWithoutNonce),
            )
            .map_or(Reply::Busy, Reply::Acquired),
            // The fence above refused it unless the lease is held; a dead
            // member's lease value stays until a takeover, so the
            // confirmation asks about the member too.
            Op::Check { .. } if state.dead.contains(&command.from) => Reply::Fenced,
            Op::Check { .. } => Reply::Ok,
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
            Op::Commit { lease, msg } => {
                let key = self.marker_of(msg);
                // The message's effect is in already (committed by an earlier
                // run, not yet acknowledged): nothing again.
                if !self.has(HashedMutant::CommitWithoutAppliedCheck) && state.applied[key] == Some(msg) {
                    return Reply::Ok;
                }
                state.applied[key] = Some(msg);
                if state.parked & Self::bit(self.config.key_of(msg)) != 0 {
                    state.progress_while_parked = true;
                }
                let under = &mut state.landed_under[usize::from(msg)];
                if *under == lease.token {
                    state.double_effect = true;
                }
                *under = lease.token;
                state.effects.push(msg);
                // Only a resend reads the marker: without lost replies it is
                // not kept (a smaller state space, the same histories).
                if self.config.timeouts > 0 {
                    let marker = self.marker_of(msg);
                    state.markers[marker] = Some((command.from, lease, msg));
                }
                Reply::Ok
            }
            Op::Ack { msg, .. } => {
                // Acknowledged, it never runs again: its record goes.
                let key = self.marker_of(msg);
                if state.applied[key] == Some(msg) {
                    state.applied[key] = None;
                }
                state.acked |= Self::bit(msg);
                state.done |= Self::bit(msg);
                Reply::Ok
            }
            Op::Parking => Reply::Parking {
                parked: state.parked,
                holding: state.holding,
            },
            Op::Park { key, msg, held, .. } => {
                if !held {
                    state.held[usize::from(key)].push(msg);
                    state.acked |= Self::bit(msg);
                }
                state.parked |= Self::bit(key);
                state.holding |= Self::bit(key);
                Reply::Ok
            }
            Op::Hold { key, msgs, .. } => {
                for msg in (0..8).filter(|m| msgs & Self::bit(*m) != 0) {
                    state.held[usize::from(key)].push(msg);
                    state.acked |= Self::bit(msg);
                }
                Reply::Ok
            }
            Op::HeldNext {
                key, attempt, lease, ..
            } => {
                // The guard `park.lua`, `halt.lua` and `commit.lua` have: a
                // command of an attempt closed already is a late copy (its
                // held message was acknowledged, or an earlier copy ended
                // the holding).
                if self.closed(state, key, lease) >= attempt
                    && attempt != 0
                    && !self.has(HashedMutant::UnguardedHeldNext)
                {
                    return Reply::Stale;
                }
                if state.parked & Self::bit(key) != 0 {
                    return Reply::Parked;
                }
                match state.held[usize::from(key)].first() {
                    Some(msg) => Reply::Held(*msg),
                    None => {
                        state.holding &= !Self::bit(key);
                        Self::close(state, key, lease, attempt);
                        Reply::Drained
                    }
                }
            }
            Op::AckHeld {
                key,
                msg,
                attempt,
                lease,
            } => {
                Self::close(state, key, lease, attempt);
                // XDEL of the held id: a no-op when it is gone already.
                state.held[usize::from(key)].retain(|m| *m != msg);
                state.done |= Self::bit(msg);
                Reply::Ok
            }
            Op::StillParked { key } => Reply::StillParked(state.parked & Self::bit(key) != 0),
            Op::Resolve { key, seen, skip } => {
                let held = &mut state.held[usize::from(key)];
                // `head_changed` (or `not_halted`): the decision lands on nothing.
                if state.parked & Self::bit(key) == 0 || held.first() != Some(&seen) {
                    return Reply::Ok;
                }
                if skip {
                    held.remove(0);
                    state.skipped |= Self::bit(seen);
                    state.done |= Self::bit(seen);
                } else {
                    state.retried[usize::from(key)] += 1;
                }
                state.parked &= !Self::bit(key);
                Reply::Ok
            }
        }
    }

    /// An entry read: queued to its key, or moved past (kept behind the
    /// queue) when the key's queue is full or the key has entries moved
    /// past already.
    fn dispatch(&self, owner: &mut Owner, msg: u8) {
        let key = &mut owner.keys[usize::from(self.config.key_of(msg))];
        let behind = !key.moved_past.is_empty() && !self.has(HashedMutant::QueueAheadOfMovedPast);
        if behind || key.queue.len() >= self.queue_bound() {
            key.moved_past.push(msg);
        } else {
            key.queue.push(msg);
        }
    }

    /// The most entries a key's queue holds.
    fn queue_bound(&self) -> usize {
        match self.config.queue {
            0 => usize::MAX,
            queue => usize::from(queue),
        }
    }

    fn receive(&self, state: &mut HashedState, p: usize, part: Part) {
        let process = &mut state.processes[p];
        let id = process.id;
        match (&mut process.work, part) {
            (Work::Acquiring(Call::Answered(_, reply)), Part::Worker) => {
                let orphaned = process.orphaned;
                process.work = match *reply {
                    Reply::Acquired(lease) => {
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
                            // With no poison message, nothing is ever parked:
                            // the read of the parked keys is left out.
                            ready: self.config.poisons == 0,
                            setup: Call::None,
                            // Taken before its member expired, read once it
                            // resumed: confirmed first, as after any pause.
                            unconfirmed: orphaned && !self.has(HashedMutant::StartWithoutConfirming),
                            confirm: Call::None,
                            attempts: 0,
                        })
                    }
                    _ => Work::Idle,
                };
            }
            (Work::Owner(owner), Part::Worker) => {
                let Call::Answered(_, reply) = owner.setup else {
                    return;
                };
                owner.setup = Call::None;
                match reply {
                    Reply::Parking { parked, holding } => {
                        for (k, key) in owner.keys.iter_mut().enumerate() {
                            let bit = Self::bit(k as u8);
                            if parked & bit != 0 {
                                key.mode = Mode::Parked;
                            } else if holding & bit != 0 {
                                key.mode = Mode::Holding;
                            }
                        }
                        owner.ready = true;
                    }
                    _ => owner.lost = true,
                }
            }
            (Work::Owner(owner), Part::Confirm) => {
                let Call::Answered(_, reply) = owner.confirm else {
                    return;
                };
                owner.confirm = Call::None;
                match reply {
                    Reply::Ok => owner.unconfirmed = false,
                    _ => owner.lost = true,
                }
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
                    // A held message's run is acknowledged in the held stream.
                    (Op::Commit { msg, .. }, Reply::Ok) if key.mode == Mode::Holding => {
                        let ack = Op::AckHeld {
                            lease,
                            key: k,
                            msg,
                            attempt: key.attempt,
                        };
                        key.call = Self::send(&mut state.network, id, part, ack);
                    }
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
                    (Op::Ack { .. } | Op::AckHeld { .. }, Reply::Ok) => key.running = None,
                    (Op::Park { .. }, Reply::Ok) => {
                        key.running = None;
                        key.mode = Mode::Parked;
                    }
                    (Op::Hold { .. }, Reply::Ok) | (Op::StillParked { .. }, Reply::StillParked(true)) => {}
                    (Op::HeldNext { attempt, .. }, Reply::Held(msg)) => {
                        key.held_next = Some(msg);
                        key.attempt = attempt;
                    }
                    (Op::HeldNext { .. }, Reply::Parked) => key.mode = Mode::Parked,
                    // Refused as stale: only an earlier copy of this very
                    // command can have closed its attempt, by ending the
                    // key's holding (its reply lost): the same as `Drained`.
                    (Op::HeldNext { .. }, Reply::Drained | Reply::Stale) => key.mode = Mode::Flowing,
                    (Op::StillParked { .. }, Reply::StillParked(false)) => {
                        key.mode = if self.has(HashedMutant::ResolvedKeySkipsHeld) {
                            Mode::Flowing
                        } else {
                            Mode::Holding
                        };
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
    /// empty memory (as a new member if its member is dead).
    fn settle(process: &mut Process) {
        if let Work::Owner(owner) = &process.work
            && owner.lost
            && owner.keys.iter().all(|k| !k.busy())
        {
            process.work = Work::Idle;
        }
    }

    /// Whether the lease holder's member may expire: it is alive, and its
    /// process is down, paused or gone (a live one renews it).
    fn may_expire(state: &HashedState) -> bool {
        let Some(lease) = state.lease else { return false };
        !state.dead.contains(&lease.holder)
            && !state.processes.iter().any(|p| p.id == lease.holder && p.live())
    }

    /// A nonce no process start has had yet.
    fn next_nonce(state: &HashedState) -> u8 {
        state.processes.iter().map(|p| p.id.nonce).max().unwrap_or(0) + 1
    }

    /// The last attempt of `key` closed under `lease` (0: none).
    fn closed(&self, state: &HashedState, key: u8, lease: LeaseValue) -> u8 {
        state.sequences[usize::from(key)]
            .filter(|(value, _)| *value == lease)
            .map_or(0, |(_, closed)| closed)
    }

    /// Closes every attempt of `key` up to `attempt` under `lease` (0:
    /// none), as `close_attempt` in `common.lua` does.
    fn close(state: &mut HashedState, key: u8, lease: LeaseValue, attempt: u8) {
        if attempt == 0 {
            return;
        }
        let sequence = &mut state.sequences[usize::from(key)];
        let closed = sequence
            .filter(|(value, _)| *value == lease)
            .map_or(0, |(_, closed)| closed);
        *sequence = Some((lease, closed.max(attempt)));
    }

    /// The commit marker and applied record `msg`'s key commits under.
    fn marker_of(&self, msg: u8) -> usize {
        if self.has(HashedMutant::SharedCommitMarker) {
            0
        } else {
            usize::from(self.config.key_of(msg))
        }
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
            dead: BTreeSet::new(),
            published: 0,
            delivered: 0,
            acked: 0,
            done: 0,
            skipped: 0,
            parked: 0,
            holding: 0,
            held: vec![Vec::new(); usize::from(self.config.keys)],
            poisons: self.config.poisons,
            resolutions: self.config.resolutions,
            progress_while_parked: false,
            retried: vec![0; usize::from(self.config.keys)],
            markers: vec![None; usize::from(self.config.keys)],
            timeouts: self.config.timeouts,
            delays: self.config.delays,
            sequences: vec![None; usize::from(self.config.keys)],
            landed_under: vec![0; usize::from(self.config.messages())],
            double_effect: false,
            applied: vec![None; usize::from(self.config.keys)],
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
            if state.timeouts > 0 && matches!(command.op, Op::Commit { .. }) {
                actions.push(Action::ApplyLosingReply(*command));
            }
        }
        if Self::may_expire(state) {
            actions.push(Action::Expire);
        }
        if state.resolutions > 0 {
            for key in (0..self.config.keys).filter(|k| state.parked & Self::bit(*k) != 0) {
                actions.push(Action::Resolve { key, skip: true });
                actions.push(Action::Resolve { key, skip: false });
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
            let parts = [Part::Worker, Part::Heartbeat, Part::Confirm, Part::Reader]
                .into_iter()
                .chain((0..self.config.keys).map(Part::Key));
            for part in parts {
                if self.may_step(state, p, part) {
                    actions.push(Action::Step(p, part));
                }
                let answered = match (&process.work, part) {
                    (Work::Acquiring(call), Part::Worker) => matches!(call, Call::Answered(..)),
                    (Work::Owner(owner), Part::Worker) => matches!(owner.setup, Call::Answered(..)),
                    (Work::Owner(owner), Part::Confirm) => matches!(owner.confirm, Call::Answered(..)),
                    (Work::Owner(owner), Part::Reader) => matches!(owner.reader, Call::Answered(..)),
                    (Work::Owner(owner), Part::Key(k)) => {
                        matches!(owner.keys[usize::from(k)].call, Call::Answered(..))
                    }
                    _ => false,
                };
                if answered {
                    actions.push(Action::Receive(p, part));
                }
                // A commit neither in flight nor answered lost its reply:
                // the client resends it.
                if let (Work::Owner(owner), Part::Key(k)) = (&process.work, part)
                    && let Call::Sent(op @ Op::Commit { .. }) = owner.keys[usize::from(k)].call
                    && !state.network.contains(&Command {
                        from: process.id,
                        part,
                        op,
                    })
                {
                    actions.push(Action::Resend(p, k));
                }
                // A held-next command still in flight times out: the client
                // asks again.
                if state.delays > 0
                    && let (Work::Owner(owner), Part::Key(k)) = (&process.work, part)
                    && let Call::Sent(op @ Op::HeldNext { again: false, .. }) =
                        owner.keys[usize::from(k)].call
                    && state.network.contains(&Command {
                        from: process.id,
                        part,
                        op,
                    })
                {
                    actions.push(Action::Delay(p, k));
                }
            }
            if state.crashes > 0 {
                actions.push(Action::Crash(p));
            }
            if state.stalls > 0 {
                actions.push(Action::Stall(p));
            }
            if state.poisons > 0
                && let Work::Owner(owner) = &process.work
                && owner.ready
            {
                for (k, key) in owner.keys.iter().enumerate() {
                    let next = !owner.unconfirmed
                        && (key.held_next.is_some()
                            || !owner.lost && key.mode == Mode::Flowing && !key.queue.is_empty());
                    if next && key.running.is_none() && key.call == Call::None {
                        actions.push(Action::Fail(p, k as u8));
                    }
                }
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
                    (Work::Owner(owner), Part::Worker) => Some(&mut owner.setup),
                    (Work::Owner(owner), Part::Confirm) => Some(&mut owner.confirm),
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
            Action::ApplyLosingReply(command) => {
                state.timeouts -= 1;
                state.network.remove(&command);
                self.apply(&mut state, command);
            }
            Action::Resend(p, k) => {
                let process = &state.processes[p];
                let Work::Owner(owner) = &process.work else {
                    return None;
                };
                let Call::Sent(op) = owner.keys[usize::from(k)].call else {
                    return None;
                };
                state.network.insert(Command {
                    from: process.id,
                    part: Part::Key(k),
                    op,
                });
            }
            Action::Delay(p, k) => {
                state.delays -= 1;
                let process = &mut state.processes[p];
                let id = process.id;
                let Work::Owner(owner) = &mut process.work else {
                    return None;
                };
                let key = &mut owner.keys[usize::from(k)];
                let Call::Sent(Op::HeldNext {
                    lease,
                    key: held_key,
                    attempt,
                    again: false,
                }) = key.call
                else {
                    return None;
                };
                // The same command again (the same attempt), on another
                // connection; the first copy stays in flight.
                let again = Op::HeldNext {
                    lease,
                    key: held_key,
                    attempt,
                    again: true,
                };
                key.call = Self::send(&mut state.network, id, Part::Key(k), again);
            }
            Action::Expire => {
                let holder = state.lease?.holder;
                state.dead.insert(holder);
                for process in &mut state.processes {
                    if process.up && process.id == holder {
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
                let nonce = Self::next_nonce(&state);
                let process = &mut state.processes[p];
                process.up = true;
                process.id.nonce = nonce;
            }
            Action::Stall(p) => {
                state.stalls -= 1;
                state.processes[p].stalled = true;
            }
            Action::Resume(p) => {
                let process = &mut state.processes[p];
                process.stalled = false;
                // Its heartbeat's last renewal may be a TTL old: the worker
                // confirms the lease before it starts another run.
                if let Work::Owner(owner) = &mut process.work
                    && !self.has(HashedMutant::StartWithoutConfirming)
                {
                    owner.unconfirmed = true;
                }
            }
            Action::Fail(p, k) => {
                state.poisons -= 1;
                let process = &mut state.processes[p];
                let (id, orphaned) = (process.id, process.orphaned);
                let Work::Owner(owner) = &mut process.work else {
                    return None;
                };
                let lease = owner.lease;
                let key = &mut owner.keys[usize::from(k)];
                let (msg, held) = match key.held_next.take() {
                    Some(msg) => (msg, true),
                    None => (key.queue.remove(0), false),
                };
                // The run started, failed every attempt, and the worker
                // parks the key under the fence.
                key.running = Some(msg);
                let park = Op::Park {
                    lease,
                    key: k,
                    msg,
                    held,
                };
                key.call = Self::send(&mut state.network, id, Part::Key(k), park);
                self.start_run(&mut state, orphaned, msg);
            }
            Action::Resolve { key, skip } => {
                state.resolutions -= 1;
                let seen = *state.held[usize::from(key)].first()?;
                state.network.insert(Command {
                    from: OPERATOR,
                    part: Part::Worker,
                    op: Op::Resolve { key, seen, skip },
                });
            }
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
                        model.earlier(*msg).all(|before| {
                            state.effects[..at].contains(&before) || state.skipped & Hashed::bit(before) != 0
                        })
                    })
                },
            ),
            Property::always(
                "a handled message has its effect, unless an operator skipped it",
                |model: &Hashed, state: &HashedState| {
                    (0..model.config.messages())
                        .filter(|m| state.done & !state.skipped & Hashed::bit(*m) != 0)
                        .all(|m| state.effects.contains(&m))
                },
            ),
            Property::always(
                "no effect of a parked key lands until an operator resolves it",
                |_, state: &HashedState| !state.progress_while_parked,
            ),
            Property::always(
                "each key's held messages keep publish order",
                |_, state: &HashedState| {
                    state
                        .held
                        .iter()
                        .all(|held| held.windows(2).all(|pair| pair[0] < pair[1]))
                },
            ),
            Property::always(
                "a key holding messages aside is listed as holding",
                |model: &Hashed, state: &HashedState| {
                    (0..model.config.keys).all(|key| {
                        state.held[usize::from(key)].is_empty() || state.holding & Hashed::bit(key) != 0
                    })
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
                    // Besides, each operator retry runs the key's head again.
                    let failovers = state.generation.saturating_sub(1);
                    (0..model.config.keys)
                        .all(|key| model.reruns(state, key) <= failovers + state.retried[usize::from(key)])
                },
            ),
            Property::always("each message's effect lands once", |_, state: &HashedState| {
                state
                    .effects
                    .iter()
                    .enumerate()
                    .all(|(at, msg)| !state.effects[..at].contains(msg))
            }),
            Property::always(
                "under one lease a message's effect lands at most once",
                |_, state: &HashedState| !state.double_effect,
            ),
            Property::always(STALE_START, |_, state: &HashedState| !state.stale_start),
            // Liveness, checked on every history that ends (faults used up,
            // nothing left to do): every message was handled.
            Property::eventually(
                "once faults stop, every published message is handled",
                |model: &Hashed, state: &HashedState| {
                    // Every key's messages are handled, unless the key waits
                    // for an operator decision that will not come (none
                    // left, none on its way).
                    state.published == model.config.messages()
                        && (0..model.config.keys).all(|key| {
                            let deciding = state
                                .network
                                .iter()
                                .any(|c| matches!(c.op, Op::Resolve { key: k, .. } if k == key));
                            let waits =
                                state.parked & Hashed::bit(key) != 0 && state.resolutions == 0 && !deciding;
                            waits
                                || (0..model.config.messages())
                                    .filter(|m| model.config.key_of(*m) == key)
                                    .all(|m| state.done & Hashed::bit(m) != 0)
                        })
                },
            ),
        ]
    }
}

/// A property some history breaks, with that history.
pub type HashedViolation = Counterexample<Action, HashedState>;

/// The outcome of one exhaustive check of the hashed model (the violations of [`HASHED_BY_DESIGN`] included).
pub type HashedReport = Outcome<HashedConfig, HashedMutant, Action, HashedState>;

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
    check_hashed_with(config, mutant, HasDiscoveries::All)
}

/// Like [`check_hashed`], but stops exploring once every property of
/// `wanted` is broken (any property at all when `wanted` is empty), or every
/// history is explored (see [`crate::check_until_broken`]).
pub fn check_hashed_until_broken(
    config: HashedConfig,
    mutant: Option<HashedMutant>,
    wanted: &[&'static str],
) -> HashedReport {
    check_hashed_with(config, mutant, crate::until_broken(wanted))
}

fn check_hashed_with(
    config: HashedConfig,
    mutant: Option<HashedMutant>,
    finish: HasDiscoveries,
) -> HashedReport {
    explore(Hashed { config, mutant }, config, mutant, finish)
}
