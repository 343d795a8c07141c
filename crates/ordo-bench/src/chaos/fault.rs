//! The kinds of fault and the seeded schedule that orders them.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::rng::Rng;

/// One kind of fault a chaos run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// SIGKILL of an instance (preferably mid-handler), and a fresh one started.
    Kill,
    /// SIGSTOP of an instance (preferably mid-handler) for longer than the
    /// lease TTL, then SIGCONT.
    Stop,
    /// SIGTERM (graceful stop) of an instance, and a fresh one started once
    /// it has exited unless the fleet is above its base size.
    Term,
    /// A new instance joins.
    Join,
    /// Redis shuts down gracefully and starts again on its append-only file
    /// (on a cluster: one primary, chosen at random).
    RedisRestart,
    /// Redis is SIGKILLed, stays down for a while (up to longer than a
    /// lease), and starts again on its append-only file (on a cluster: one
    /// primary, whose replica may be promoted while it is down).
    RedisCrash,
    /// One connection between an instance and Redis (through the run's
    /// proxy) has what it sends held back for longer than the command
    /// timeout, while the instance's other connections flow: a command the
    /// client gave up on runs late.
    ConnDelay,
    /// SIGKILL of a relay-only process of the PostgreSQL mode, and a fresh
    /// one started: its slots move when their leases expire.
    RelayKill,
    /// SIGSTOP of a relay-only process of the PostgreSQL mode for longer
    /// than its slot leases, then SIGCONT: it wakes up with a batch read
    /// under leases other relays have taken over since.
    RelayStop,
    /// A manual `CLUSTER FAILOVER`: the replica of a random primary takes
    /// over after catching up, so no write is lost (a cluster of the run's own only).
    ClusterFailover,
    /// PostgreSQL of the PostgreSQL mode shuts down ("fast": every session
    /// ended), stays down for a while (up to longer than a lease), and
    /// starts again: handlers, relays and the publisher lose the database
    /// mid-work. Its handlers' failures are transient: no key may halt (a
    /// database of the run's own only).
    DbOutage,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Kill,
        FaultKind::Stop,
        FaultKind::Term,
        FaultKind::Join,
        FaultKind::RedisRestart,
        FaultKind::RedisCrash,
        FaultKind::ConnDelay,
        FaultKind::RelayKill,
        FaultKind::RelayStop,
        FaultKind::ClusterFailover,
        FaultKind::DbOutage,
    ];

    /// The name in reports: `faults_{name}`.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill",
            FaultKind::Stop => "stop",
            FaultKind::Term => "term",
            FaultKind::Join => "join",
            FaultKind::RedisRestart => "redis_restart",
            FaultKind::RedisCrash => "redis_crash",
            FaultKind::ConnDelay => "conn_delay",
            FaultKind::RelayKill => "relay_kill",
            FaultKind::RelayStop => "relay_stop",
            FaultKind::ClusterFailover => "cluster_failover",
            FaultKind::DbOutage => "db_outage",
        }
    }

    /// Whether the fault needs a Redis the run controls.
    pub(crate) fn needs_own_redis(self) -> bool {
        matches!(
            self,
            FaultKind::RedisRestart | FaultKind::RedisCrash | FaultKind::ClusterFailover
        )
    }

    /// Whether the fault only makes sense on a Redis Cluster.
    pub(crate) fn needs_cluster(self) -> bool {
        self == FaultKind::ClusterFailover
    }

    /// Whether the fault only works on a single Redis: the per-connection
    /// proxy stands in front of one server, while a cluster client connects
    /// to the addresses the cluster announces.
    pub(crate) fn needs_single_node(self) -> bool {
        self == FaultKind::ConnDelay
    }

    /// Whether the fault needs the PostgreSQL mode (relay-only processes).
    pub(crate) fn needs_postgres(self) -> bool {
        matches!(self, FaultKind::RelayKill | FaultKind::RelayStop)
    }

    /// Whether the fault needs a PostgreSQL the run controls (a private one).
    pub(crate) fn needs_own_database(self) -> bool {
        self == FaultKind::DbOutage
    }

    /// How many of each kind one round of the schedule holds: instance
    /// crashes and stalls are what failover is about, so they come twice.
    fn per_round(self) -> usize {
        match self {
            FaultKind::Kill | FaultKind::Stop | FaultKind::ConnDelay => 2,
            FaultKind::Term
            | FaultKind::Join
            | FaultKind::RedisRestart
            | FaultKind::RedisCrash
            | FaultKind::RelayKill
            | FaultKind::RelayStop
            | FaultKind::ClusterFailover
            | FaultKind::DbOutage => 1,
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The order of faults: rounds ("bags") holding every enabled kind its
/// [`per_round`](FaultKind::per_round) times, each round shuffled. Unlike
/// independent draws, every kind is sure to come up in every round, so even
/// a short seeded run exercises all of them; the order within a round, and
/// the gaps between faults, are random.
#[derive(Debug)]
pub(crate) struct Schedule {
    rng: Rng,
    kinds: Vec<FaultKind>,
    bag: Vec<FaultKind>,
    gap: (Duration, Duration),
}

impl Schedule {
    /// A schedule of `kinds` separated by gaps in `gap` (inclusive).
    pub(crate) fn new(rng: Rng, kinds: Vec<FaultKind>, gap: (Duration, Duration)) -> Self {
        Self {
            rng,
            kinds,
            bag: Vec::new(),
            gap,
        }
    }

    /// The next fault's kind, without taking it.
    pub(crate) fn peek(&mut self) -> Option<FaultKind> {
        if self.bag.is_empty() {
            self.refill();
        }
        self.bag.last().copied()
    }

    /// Takes the next fault's kind.
    pub(crate) fn take(&mut self) -> Option<FaultKind> {
        self.peek()?;
        self.bag.pop()
    }

    /// The wait before the next fault.
    pub(crate) fn gap(&mut self) -> Duration {
        self.rng.duration(self.gap.0, self.gap.1)
    }

    fn refill(&mut self) {
        self.bag = self
            .kinds
            .iter()
            .flat_map(|&kind| std::iter::repeat_n(kind, kind.per_round()))
            .collect();
        self.rng.shuffle(&mut self.bag);
    }
}

/// How many faults of each kind were injected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FaultCounts {
    by_kind: BTreeMap<FaultKind, u64>,
    /// Kills, stops and graceful stops that hit an instance while one of its
    /// handler runs was in flight (a `start` without its end).
    pub(crate) mid_handler: u64,
    /// Faults dropped because their preconditions never held (e.g. a stop
    /// needs two running instances).
    pub(crate) skipped: u64,
}

impl FaultCounts {
    /// Counts one fault of `kind`.
    pub(crate) fn record(&mut self, kind: FaultKind) {
        *self.by_kind.entry(kind).or_default() += 1;
    }

    /// Faults of `kind`.
    pub(crate) fn of(&self, kind: FaultKind) -> u64 {
        self.by_kind.get(&kind).copied().unwrap_or(0)
    }

    /// Faults of every kind.
    pub(crate) fn total(&self) -> u64 {
        self.by_kind.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(seed: u64, kinds: &[FaultKind]) -> Schedule {
        let gap = (Duration::from_secs(1), Duration::from_secs(2));
        Schedule::new(Rng::new(seed), kinds.to_vec(), gap)
    }

    #[test]
    fn every_round_holds_every_kind_its_share_of_times() {
        let mut schedule = schedule(42, &FaultKind::ALL);
        let round: usize = FaultKind::ALL.iter().map(|k| k.per_round()).sum();
        for _ in 0..3 {
            let mut counts = FaultCounts::default();
            for _ in 0..round {
                counts.record(schedule.take().unwrap());
            }
            for kind in FaultKind::ALL {
                assert_eq!(counts.of(kind), kind.per_round() as u64, "{kind}");
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let order = |seed| {
            let mut s = schedule(seed, &FaultKind::ALL);
            (0..24).map(|_| (s.take(), s.gap())).collect::<Vec<_>>()
        };
        assert_eq!(order(7), order(7));
        assert_ne!(order(7), order(8));
    }

    #[test]
    fn peek_does_not_take_and_disabled_kinds_never_come() {
        let mut s = schedule(1, &[FaultKind::Kill, FaultKind::Join]);
        for _ in 0..30 {
            let next = s.peek();
            assert_eq!(s.take(), next);
            assert!(matches!(next, Some(FaultKind::Kill | FaultKind::Join)));
        }
        assert_eq!(schedule(1, &[]).take(), None);
    }

    #[test]
    fn gaps_stay_in_range() {
        let mut s = schedule(3, &FaultKind::ALL);
        for _ in 0..100 {
            let gap = s.gap();
            assert!(gap >= Duration::from_secs(1) && gap <= Duration::from_secs(2));
        }
    }
}
