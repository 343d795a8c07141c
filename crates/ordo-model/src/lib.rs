//! An executable model of Ordo's lease/fence protocol, checked exhaustively
//! with [stateright](https://docs.rs/stateright).
//!
//! [`protocol`] describes one partition: Redis as a state machine whose
//! operations are the scripts' effects, ownership by member lease (a lease
//! without a TTL, taken over once its holder's member key has expired),
//! instances running the partition worker's loop, the outbox publisher, and
//! the faults of the environment.
//! [`hashed`] describes one hashed partition (several keys, one lease, the
//! owner reading ahead into per-key queues, parking per key), checked by
//! [`check_hashed`] against per-key properties, with its own mutants.
//! [`commands`] describes the command reply protocol on top of the lease
//! (a sender's outcome record lookup, deduplicated publish and wait; the
//! owner's run, SET NX of the outcome, reply push and fenced
//! acknowledgement), checked by [`check_commands`], with its own mutants.
//! [`publish`] describes publish deduplication by producer id and
//! per-stream sequence (an in-memory outbox processor's batches, failed
//! appends, lost replies, late requests and restarts against the script's
//! per-stream producer hash), checked by [`check_publish`], with its own
//! mutants.
//! [`member`] describes partition ownership by member lease (one liveness
//! key per process start, partition leases naming their holder's member
//! without a TTL of their own, takeover by compare and set once the holder's
//! member is gone), checked by [`check_member`], with its own mutants.
//! [`check`] explores every interleaving of a [`Config`] and reports the
//! properties of CONTRACT.md §1 that some history breaks. Seeded
//! [`Mutant`]s, each a hole the real protocol closes, prove the properties
//! have teeth: each must yield a counterexample.

use stateright::HasDiscoveries;
use std::fmt;

use crate::explore::explore;
pub use crate::explore::{Counterexample, Outcome};
use crate::mutant::mutants;

pub mod commands;
mod explore;
pub mod hashed;
pub mod member;
mod mutant;
pub mod protocol;
pub mod publish;

pub use commands::{
    Commands, CommandsConfig, CommandsMutant, CommandsReport, CommandsViolation, check_commands,
    check_commands_until_broken,
};
pub use hashed::{
    HASHED_BY_DESIGN, Hashed, HashedConfig, HashedMutant, HashedReport, HashedViolation, check_hashed,
    check_hashed_until_broken,
};
pub use member::{
    Member, MemberConfig, MemberMutant, MemberReport, MemberViolation, check_member,
    check_member_until_broken,
};
pub use protocol::{Action, Protocol, State};
pub use publish::{
    Publish, PublishConfig, PublishMutant, PublishReport, PublishViolation, check_publish,
    check_publish_until_broken,
};

/// What is explored: instances × messages × faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Engine instances (processes).
    pub instances: u8,
    /// Messages published to the partition, in order.
    pub messages: u8,
    /// SIGKILLs the environment may inject.
    pub crashes: u8,
    /// SIGSTOPs past the member key's TTL.
    pub stalls: u8,
    /// Client timeouts or lost replies (each followed by a resend or a retry).
    pub timeouts: u8,
    /// Workers killed mid-handler by a shutdown past its grace period.
    pub kills: u8,
    /// Handler runs that fail for good (poison messages: the partition halts).
    pub poisons: u8,
    /// Handler runs that fail with an ordinary error: the worker records
    /// the failed attempt, counted with the entry (the retry budget), and
    /// runs the handler again. (A client timeout, `timeouts`, is a
    /// transient failure: its attempt is closed but not counted.)
    pub errors: u8,
    /// Operator decisions on a halted partition (retry or skip the head seen).
    pub resolutions: u8,
    /// Redis restarts that lose the writes since the last fsync
    /// (`appendfsync everysec`).
    pub aof_losses: u8,
    /// The acknowledgement window (`ack_window`): how many of its
    /// acknowledgements a worker may have unanswered while it runs the next
    /// messages of its read batch (0: it waits for each before the next, as
    /// by default). It reads again only once every one is answered.
    pub window: u8,
}

impl Config {
    /// The configuration `ordo-model check` explores by default.
    ///
    /// Adding a crash to it grows the state space past 11 GiB of memory on
    /// the machines here; crashes are explored by [`Mutant`] checks and the
    /// chaos checker.
    pub const FULL: Self = Self {
        instances: 2,
        messages: 2,
        crashes: 0,
        stalls: 1,
        timeouts: 1,
        kills: 1,
        poisons: 0,
        errors: 0,
        resolutions: 0,
        aof_losses: 0,
        window: 0,
    };

    /// A smaller configuration for the test suite.
    pub const SMALL: Self = Self {
        instances: 2,
        messages: 2,
        crashes: 0,
        stalls: 1,
        timeouts: 1,
        kills: 0,
        poisons: 0,
        errors: 0,
        resolutions: 0,
        aof_losses: 0,
        window: 0,
    };

    /// Halts and their resolution: poison messages, operators racing the
    /// workers (and each other), with delays, stalls and lost replies.
    pub const HALTS: Self = Self {
        instances: 2,
        messages: 2,
        crashes: 0,
        stalls: 0,
        timeouts: 1,
        kills: 0,
        poisons: 2,
        errors: 0,
        resolutions: 2,
        aof_losses: 0,
        window: 0,
    };

    /// A Redis restart that loses the last writes (AOF `everysec`): what
    /// such a restart costs (see [`AOF_LOSS_BREAKS`]).
    pub const AOF: Self = Self {
        instances: 2,
        messages: 2,
        crashes: 0,
        stalls: 0,
        timeouts: 0,
        kills: 0,
        poisons: 0,
        errors: 0,
        resolutions: 0,
        aof_losses: 1,
        window: 0,
    };

    /// The attempt accounting: an ordinary (counted) handler error and a
    /// client timeout (a transient failure, not counted), with stalls and
    /// lost replies (a resent close), across two instances.
    pub const ATTEMPTS: Self = Self {
        instances: 2,
        messages: 2,
        crashes: 0,
        stalls: 1,
        timeouts: 1,
        kills: 0,
        poisons: 0,
        errors: 1,
        resolutions: 0,
        aof_losses: 0,
        window: 0,
    };

    /// The acknowledgement window: a worker runs the rest of its read
    /// batch with up to two acknowledgements unanswered; stalls past the
    /// TTL and lost replies (a failover then runs the window again).
    pub const WINDOW: Self = Self {
        messages: 3,
        window: 2,
        ..Self::SMALL
    };

    /// The configurations `ordo-model check --config NAME` knows.
    pub const NAMED: [(&'static str, Self); 6] = [
        ("full", Self::FULL),
        ("small", Self::SMALL),
        ("halts", Self::HALTS),
        ("attempts", Self::ATTEMPTS),
        ("aof", Self::AOF),
        ("window", Self::WINDOW),
    ];

    /// The configuration called `name` in [`Config::NAMED`].
    pub fn named(name: &str) -> Option<Self> {
        crate::by_name(&Self::NAMED, name)
    }
}

/// The configuration called `name` among `known` (a model's named
/// configurations).
fn by_name<C: Copy>(known: &[(&'static str, C)], name: &str) -> Option<C> {
    known
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, config)| *config)
}

/// The properties a Redis restart that loses its last writes breaks, by
/// design of Redis's asynchronous persistence (docs/RELIABILITY.md says what
/// each means for users): an acknowledgement lost with them lets its message
/// run again, after a later one the worker had read already; a commit lost
/// with them leaves its message without its effect once the acknowledgement
/// sent after the restart lands (the lease survived); a lease lost with them
/// is handed out again while its first holder still runs, until that
/// holder's next renewal fails. Every other property holds, each message's
/// effect landing once included: what a commit applied and its record go
/// back together.
pub const AOF_LOSS_BREAKS: [&str; 4] = [
    "effects land in publish order",
    "an acknowledged message has its effect",
    "only the unacknowledged head is run",
    "at most one live run holds the key",
];

impl Config {
    /// The smallest configuration whose faults can expose `mutant`: what the
    /// test suite checks each mutant with.
    pub fn exposing(mutant: Mutant) -> Self {
        let quiet = Self {
            crashes: 0,
            stalls: 0,
            timeouts: 0,
            kills: 0,
            ..Self::FULL
        };
        match mutant {
            Mutant::AckWithoutToken => Self { stalls: 1, ..quiet },
            // A live member's lease moves on only when Redis loses the last
            // writes: a stalled holder whose member expired reads nothing
            // more, so without a restart the read's fence is never tested.
            Mutant::ReclaimWithoutLease => Self {
                aof_losses: 1,
                ..quiet
            },
            Mutant::CommitFromOlderAttempt => Self { timeouts: 1, ..quiet },
            Mutant::ReleaseWhileRunning => Self { kills: 1, ..quiet },
            Mutant::ReapNotAtomicWithPublish | Mutant::LeaseWithoutNonce => quiet,
            Mutant::HaltWithoutClosingAttempts => Self {
                timeouts: 1,
                poisons: 1,
                errors: 0,
                resolutions: 1,
                ..quiet
            },
            Mutant::CountTransientFailures | Mutant::CommitWithoutAppliedCheck => {
                Self { timeouts: 1, ..quiet }
            }
            Mutant::CountEveryClose => Self {
                timeouts: 1,
                errors: 1,
                ..quiet
            },
            Mutant::ResolveWithoutExpectedHead => Self {
                poisons: 2,
                errors: 0,
                resolutions: 2,
                ..quiet
            },
            Mutant::OneAppliedRecord => Self {
                messages: 2,
                stalls: 1,
                window: 1,
                ..quiet
            },
        }
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} instances × {} messages × faults (crashes {}, stalls {}, timeouts/lost replies {}, kills {}, \
             poison messages {}, ordinary errors {}, operator decisions {}, AOF losses {}) with commands \
             delivered in any order, acknowledgement window {}",
            self.instances,
            self.messages,
            self.crashes,
            self.stalls,
            self.timeouts,
            self.kills,
            self.poisons,
            self.errors,
            self.resolutions,
            self.aof_losses,
            self.window
        )
    }
}

mutants! {
    /// A seeded defect: each is a hole the real protocol closes.
    pub enum Mutant, unknown UnknownMutant ("mutant") {
        /// The acknowledgement does not check the lease token.
        AckWithoutToken = "ack-without-token",
        /// The read that reclaims pending entries does not check the lease.
        ReclaimWithoutLease = "reclaim-without-lease",
        /// A commit of an attempt the partition has moved past is applied (the
        /// late-commit reorder).
        CommitFromOlderAttempt = "commit-from-older-attempt",
        /// Publishing writes the index and appends in two steps, so a reap can
        /// run between them.
        ReapNotAtomicWithPublish = "reap-not-atomic-with-publish",
        /// A killed worker releases its lease while its handler is still running.
        ReleaseWhileRunning = "release-while-running",
        /// A lease is adopted by instance id alone, without the process's nonce.
        LeaseWithoutNonce = "lease-without-nonce",
        /// A halt does not close the attempt that failed, so the same halt
        /// arriving again (resent after a lost reply, or delayed) halts again a
        /// partition an operator resolved meanwhile.
        HaltWithoutClosingAttempts = "halt-without-closing-attempts",
        /// An operator's decision applies to whatever head is halted, not the
        /// one the operator saw.
        ResolveWithoutExpectedHead = "resolve-without-expected-head",
        /// A transient failure (a client timeout) is counted as a failed
        /// attempt, using up the message's retry budget during an outage.
        CountTransientFailures = "count-transient-failures",
        /// The close of a failed attempt counts it even when the attempt was
        /// closed already (the close resent after a lost reply, or arriving
        /// late): one failure counted twice, and the message halts early.
        CountEveryClose = "count-every-close",
        /// A commit of a message whose effect is in already is applied again:
        /// a message run again before its acknowledgement landed (after a
        /// failover, a lost reply, a failed attempt) has its effect twice.
        CommitWithoutAppliedCheck = "commit-without-applied-check",
        /// The commit marker keeps what only the last committed message
        /// applied: with an acknowledgement window, a message's record is
        /// gone once the next one commits, and a failover runs it again.
        OneAppliedRecord = "one-applied-record",
    }
}

/// A property some history breaks, with that history.
pub type Violation = Counterexample<Action, State>;

/// The outcome of one exhaustive check of the lease/fence protocol.
pub type Report = Outcome<Config, Mutant, Action, State>;

/// Explores every history of `config` (with `mutant` seeded) breadth-first,
/// so each counterexample is a shortest one.
pub fn check(config: Config, mutant: Option<Mutant>) -> Report {
    check_with(config, mutant, HasDiscoveries::All)
}

/// Like [`check`], but stops exploring once every property of `wanted` is
/// broken (any property at all when `wanted` is empty), or every history is
/// explored: enough to show that a mutant is caught, with a shortest
/// counterexample for each of `wanted`, without exploring the rest of its
/// configuration. The report lists only what was found by then.
pub fn check_until_broken(config: Config, mutant: Option<Mutant>, wanted: &[&'static str]) -> Report {
    check_with(config, mutant, until_broken(wanted))
}

/// When a check for `wanted` broken properties may stop.
pub(crate) fn until_broken(wanted: &[&'static str]) -> HasDiscoveries {
    if wanted.is_empty() {
        HasDiscoveries::AnyFailures
    } else {
        HasDiscoveries::AllOf(wanted.iter().copied().collect())
    }
}

fn check_with(config: Config, mutant: Option<Mutant>, finish: HasDiscoveries) -> Report {
    explore(Protocol { config, mutant }, config, mutant, finish)
}
