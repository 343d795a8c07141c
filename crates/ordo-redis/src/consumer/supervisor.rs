//! The supervisor: discovery, fair share, and the workers' lifecycle.
//!
//! Once per discovery interval it announces this instance (one script call
//! for every group), reads each partitioned category's index (one `SMEMBERS`
//! each), and per group compares the units it owns with its fair share:
//! below it, it acquires free leases (one script call); above it for two
//! intervals in a row, it asks its surplus workers to stop between messages
//! and release their leases, so another instance takes them over at once.
//! It also records in Redis which handlers are paused on this instance by
//! their circuit breaker (only while one is, and when it resumes), for
//! `ordo status` and health.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use fred::interfaces::{ClientLike as _, KeysInterface, SetsInterface, SortedSetsInterface};
use fred::types::Value;
use ordo_core::contract::broker::Subscription;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use super::balance;
use super::delivery::{Control, Exit, Worker};
use super::plain::Plain;
use super::shared::SharedRef;
use super::unit::{GroupPlan, Unit};
use crate::consumer::metrics;
use crate::error::Result;
use crate::store::buckets;
use crate::store::calls;
use crate::store::groups::{self, IfNoStream};
use crate::store::keys::{
    BaseKeys, PartitionId, PartitionKeys, group_registry, group_registry_copy, index, index_directory,
    instances, joining,
};

/// At most this many candidates are offered to one acquire call.
const MAX_CANDIDATES: usize = 512;

/// How long a category stays marked as joining after a new group started
/// joining its lanes: far longer than the two passes over them take.
const JOINING_TTL_MS: i64 = 600_000;

/// Partitions per pipeline when a new group joins existing partitions.
const JOIN_CHUNK: usize = 256;

/// Discovery reads a category's index when its version changed, and at
/// least every this many rounds anyway: an increment can be lost (a
/// publisher that stopped between its script and the increment, a
/// partition indexed by hand or by an older release).
const FULL_READ_ROUNDS: u32 = 10;

/// Over-share must persist this many discovery rounds before surplus is
/// released, so a momentary difference of views does not cause churn.
const SURPLUS_ROUNDS: u32 = 2;

/// A worker the supervisor started.
#[derive(Debug)]
struct Running {
    plan: usize,
    unit: String,
    token: u64,
    control: Control,
    stopping: bool,
}

/// A worker's exit, reported to the supervisor.
#[derive(Debug)]
struct Exited {
    lease_key: String,
    token: u64,
    exit: Exit,
}

/// The supervisor of one consumer.
pub(crate) struct Supervisor {
    shared: SharedRef,
    plans: Vec<GroupPlan>,
    workers: HashMap<String, Running>,
    surplus_rounds: HashMap<usize, u32>,
    tracker: TaskTracker,
    exits: (UnboundedSender<Exited>, UnboundedReceiver<Exited>),
    next_watcher: u64,
    /// Whether this instance has announced itself once: the first round
    /// only announces, so instances that start together see each other
    /// before anyone acquires (rather than the first one taking everything).
    announced: bool,
    /// Whether `max_owned_partitions` holds this instance below its fair
    /// share (said once when it starts, and when it ends).
    limited: bool,
    /// The groups whose pause on this instance is recorded in Redis.
    paused: HashSet<String>,
    /// Every partitioned category's index as discovery last read it.
    indexed: BTreeMap<String, BTreeSet<String>>,
    /// The version each index had when it was read, and how many rounds
    /// ago (see [`FULL_READ_ROUNDS`]).
    index_read: HashMap<String, (Option<i64>, u32)>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    pub(crate) fn new(shared: SharedRef, subscriptions: &[Subscription]) -> Self {
        Self {
            shared,
            plans: GroupPlan::all(subscriptions),
            workers: HashMap::new(),
            surplus_rounds: HashMap::new(),
            tracker: TaskTracker::new(),
            exits: unbounded_channel(),
            next_watcher: 0,
            announced: false,
            limited: false,
            paused: HashSet::new(),
            indexed: BTreeMap::new(),
            index_read: HashMap::new(),
        }
    }

    /// Runs until `shutdown` is cancelled, then stops every worker (letting
    /// in-flight messages finish for up to a lease TTL) and releases leases.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) -> Result<()> {
        self.register_groups(Registration::Start).await?;
        let plain_stop = CancellationToken::new();
        self.start_plain_consumers(&plain_stop)?;
        let mut ticker = tokio::time::interval(self.shared.settings.discovery_interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {
                    // Redis may have lost its data (a restart without
                    // persistence): the operator tool and the publish script
                    // rely on the registries, so they are restored.
                    match self.register_groups(Registration::Restore).await {
                        Ok(0) => {}
                        Ok(restored) => warn!(restored,
                            "consumer groups were missing from their categories' registries \
                             (did Redis lose its data?); registered them again"),
                        Err(error) => warn!(error = %ordo_core::contract::error::error_chain(&error), "checking the group registries failed; retrying next interval"),
                    }
                    self.record_pauses(false).await;
                    match self.round().await {
                        Ok(()) => {}
                        Err(error @ crate::error::Error::DuplicateInstance { .. }) => {
                            tracing::error!(error = %ordo_core::contract::error::error_chain(&error), "another live process uses this instance id; acquiring nothing until it is gone");
                            metrics::duplicate_instance();
                        }
                        Err(error) => warn!(event = ordo_core::contract::log_events::DISCOVERY_FAILED, error = %ordo_core::contract::error::error_chain(&error), "discovery round failed; retrying next interval"),
                    }
                }
                Some(exited) = self.exits.1.recv() => self.on_exit(exited),
                () = shutdown.cancelled() => break,
            }
        }
        plain_stop.cancel();
        // Leaving: this instance's pauses end with it.
        self.record_pauses(true).await;
        self.stop_all().await;
        self.leave().await;
        Ok(())
    }

    /// Records in Redis the handlers paused on this instance (refreshing the
    /// record while the pause lasts) and clears the record of one that
    /// resumed (every one when `leaving`): no Redis call while none is or
    /// was paused.
    async fn record_pauses(&mut self, leaving: bool) {
        let ttl = self.shared.settings.lease_ttl;
        for plan in &self.plans {
            let pause = plan.subscription.paused().filter(|_| !leaving);
            let group = plan.group.to_string();
            if pause.is_none() && !self.paused.contains(&group) {
                continue;
            }
            metrics::paused(&group, pause.is_some());
            let recorded = crate::owner::pause::record(
                self.shared.partitions.client(),
                &group,
                self.shared.instance(),
                pause.as_ref(),
                ttl,
            )
            .await;
            match (recorded, pause.is_some()) {
                (Ok(()), true) => {
                    self.paused.insert(group);
                }
                (Ok(()), false) => {
                    self.paused.remove(&group);
                }
                (Err(error), _) => {
                    warn!(%error, %group, "recording the handler's pause in Redis failed; retrying next interval");
                }
            }
        }
    }

    /// Adds every group to the registries of the categories it consumes, so
    /// new streams get their consumer groups when first published to.
    ///
    /// A group new to a partitioned category first gets its consumer group
    /// on the partitions that exist already. Otherwise, until one of its
    /// owners first read a partition, the other groups' trimming and reaping
    /// would not see it, and drop entries published after it registered.
    /// Registering comes after (a crash in between redoes it all at the next
    /// start), then a second pass covers the lanes created meanwhile.
    ///
    /// Runs at start and at every discovery round (one `SISMEMBER` per group
    /// and category, plus an `EXISTS` of the joining marker for partitioned
    /// ones): returns how many registrations were missing and made.
    async fn register_groups(&self, when: Registration) -> Result<usize> {
        let client = self.shared.partitions.client();
        let mut registered = 0;
        for plan in &self.plans {
            for category in &plan.partitioned {
                let registry = group_registry(category);
                let marker = joining(category);
                // At start, a registration still marked as joining may have
                // stopped between its passes, or (on a Redis Cluster, where
                // the per-slot copies are written) predate the copies (made
                // by a release without them; slot 0's copy stands for all,
                // since they are written before the registry): redo it.
                // Later rounds only restore a registration Redis lost.
                let current = if !client.sismember(&registry, &*plan.group).await? {
                    false
                } else if when == Registration::Restore {
                    true
                } else {
                    (!client.next().is_clustered()
                        || client
                            .sismember(group_registry_copy(category, 0), &*plan.group)
                            .await?)
                        && !client.exists::<bool, _>(&marker).await?
                };
                if current {
                    continue;
                }
                // While it exists, publishes give every lane the registered
                // groups it lacks (a lane created between the passes below).
                // The publish script reads the copy in its partition's slot:
                // every slot's copy is set before the first pass.
                buckets::mark_joining(client, category, &plan.group, JOINING_TTL_MS).await?;
                self.join_partitions(&plan.group, category, &BTreeSet::new())
                    .await?;
                // Every slot's copy before the category's own: the check
                // above skips a group only once its own registry has it, so
                // a crash in between redoes the copies.
                buckets::register_group(client, category, &plan.group).await?;
                // Every lane again, not only the partitions the first pass
                // missed: a lane of a known partition (its backfill lane)
                // may have been created in between. Lanes created after the
                // registration get the group when they are created, and
                // any lane still without it gets it at its next publish.
                self.join_partitions(&plan.group, category, &BTreeSet::new())
                    .await?;
                registered += 1;
            }
            for category in &plan.base {
                if client.sismember(group_registry(category), &*plan.group).await? {
                    continue;
                }
                // The group on the base stream first (from the start), so
                // the other groups' trimming keeps what it has not read.
                groups::create(
                    client,
                    BaseKeys::new(category).stream(),
                    &plan.group,
                    IfNoStream::Create,
                )
                .await?;
                let _: Value = client.sadd(group_registry(category), &*plan.group).await?;
                registered += 1;
            }
        }
        Ok(registered)
    }

    /// Creates `group`'s consumer group, from the start, on both lanes of
    /// every partition of `category` except `done`; returns the partitions
    /// found. Lanes that do not exist, and groups that do, are left alone.
    async fn join_partitions(
        &self,
        group: &str,
        category: &str,
        done: &BTreeSet<String>,
    ) -> Result<BTreeSet<String>> {
        let client = self.shared.partitions.client();
        let keys = indexed_members(client, category).await?;
        let suffix = &self.shared.settings.backfill_suffix;
        let todo: Vec<&String> = keys.difference(done).collect();
        for chunk in todo.chunks(JOIN_CHUNK) {
            let pipeline = client.next().pipeline();
            for member in chunk {
                let partition = PartitionKeys::of(PartitionId::from_member(category, member), suffix);
                for lane in [partition.primary(), partition.backfill()] {
                    groups::create(&pipeline, lane, group, IfNoStream::Skip).await?;
                }
            }
            for created in pipeline.try_all::<Value>().await {
                groups::settle(created, IfNoStream::Skip)?;
            }
        }
        if !todo.is_empty() {
            info!(%group, category, partitions = todo.len(), "joined the existing partitions");
        }
        Ok(keys)
    }

    fn start_plain_consumers(&self, stop: &CancellationToken) -> Result<()> {
        for plan in &self.plans {
            for category in &plan.base {
                let plain = Plain::new(self.shared.clone(), plan.subscription.clone(), category)?;
                self.tracker.spawn(plain.run(stop.clone()));
            }
        }
        Ok(())
    }

    /// One discovery and balancing round.
    async fn round(&mut self) -> Result<()> {
        // Every group is announced: partitioned groups share their
        // partitions among the live instances, plain consumers claim
        // entries only from instances that are no longer live.
        let announced: Vec<usize> = (0..self.plans.len())
            .filter(|i| !self.plans[*i].partitioned.is_empty() || !self.plans[*i].base.is_empty())
            .collect();
        if announced.is_empty() {
            return Ok(());
        }
        let live = self.announce(&announced).await?;
        if !std::mem::replace(&mut self.announced, true) {
            return Ok(());
        }
        let (partitioned, live): (Vec<usize>, Vec<Vec<String>>) = announced
            .into_iter()
            .zip(live)
            .filter(|(plan, _)| !self.plans[*plan].partitioned.is_empty())
            .unzip();
        if partitioned.is_empty() {
            return Ok(());
        }
        self.discover(&partitioned).await?;
        // Out of `self` while the rounds below borrow it mutably.
        let indexed = std::mem::take(&mut self.indexed);
        let balanced = self.balance_all(&partitioned, &live, &indexed).await;
        self.indexed = indexed;
        balanced
    }

    /// Moves this instance's ownership of every plan in `partitioned`
    /// towards its fair share among `live` (each plan's live instances).
    async fn balance_all(
        &mut self,
        partitioned: &[usize],
        live: &[Vec<String>],
        indexed: &BTreeMap<String, BTreeSet<String>>,
    ) -> Result<()> {
        let fair: Vec<usize> = partitioned
            .iter()
            .zip(live)
            .map(|(&plan, live)| {
                let units = self.plans[plan].unit_count(indexed);
                balance::target(units, live, self.shared.instance(), &self.plans[plan].group)
            })
            .collect();
        let limit = self.shared.settings.max_owned.map(std::num::NonZeroUsize::get);
        let targets = balance::within_limit(&fair, limit);
        self.note_limit(limit, &fair, &targets);
        for (position, &plan) in partitioned.iter().enumerate() {
            self.balance(plan, indexed, live[position].len(), targets[position])
                .await?;
        }
        Ok(())
    }

    /// Says when `max_owned_partitions` starts (or stops) holding this
    /// instance below its fair share: the units over it are left to other
    /// instances, or wait.
    fn note_limit(&mut self, limit: Option<usize>, fair: &[usize], targets: &[usize]) {
        let (Some(limit), wanted, allowed) =
            (limit, fair.iter().sum::<usize>(), targets.iter().sum::<usize>())
        else {
            return;
        };
        let limited = allowed < wanted;
        if limited == std::mem::replace(&mut self.limited, limited) {
            return;
        }
        if limited {
            warn!(
                limit,
                fair_share = wanted,
                "this instance owns at most max_owned_partitions = {limit} partitions, {} fewer than its \
                 fair share: they are left to other instances, or wait until one has room",
                wanted - allowed
            );
        } else {
            info!(
                limit,
                "this instance's fair share is within max_owned_partitions again"
            );
        }
    }

    /// Announces this instance to every group in `plans`; returns each
    /// group's live instances.
    async fn announce(&self, plans: &[usize]) -> Result<Vec<Vec<String>>> {
        let groups: Vec<&str> = plans.iter().map(|p| &*self.plans[*p].group).collect();
        calls::consumer::announce(
            self.shared.partitions.client(),
            &groups,
            self.shared.instance(),
            self.shared.settings.lease_ttl,
        )
        .await
    }

    /// Brings [`Supervisor::indexed`] up to date for every partitioned
    /// category of `plans`: one `GET` of its index version, and the index
    /// itself only when the version changed since it was read or it was
    /// read [`FULL_READ_ROUNDS`] rounds ago. An idle system's discovery then
    /// costs the same whatever its number of partitions.
    async fn discover(&mut self, plans: &[usize]) -> Result<()> {
        let categories: BTreeSet<String> = plans
            .iter()
            .flat_map(|p| self.plans[*p].partitioned.iter().cloned())
            .collect();
        let client = self.shared.partitions.client();
        for category in categories {
            // Read before the index: an increment made after the index
            // changed is then either seen here, or seen next round.
            let version = buckets::index_version(client, &category).await?;
            let current = match self.index_read.get_mut(&category) {
                Some((read, rounds)) if *read == version && *rounds + 1 < FULL_READ_ROUNDS => {
                    *rounds += 1;
                    true
                }
                _ => false,
            };
            if !current {
                let members = indexed_members(client, &category).await?;
                self.index_read.insert(category.clone(), (version, 0));
                self.indexed.insert(category, members);
            }
        }
        Ok(())
    }

    /// Moves this instance's ownership of `plan`'s units towards `target`
    /// (its fair share among `live` instances, within its limit).
    async fn balance(
        &mut self,
        plan: usize,
        indexed: &BTreeMap<String, BTreeSet<String>>,
        live: usize,
        target: usize,
    ) -> Result<()> {
        let group = self.plans[plan].group.clone();
        let owned: Vec<&String> = self
            .workers
            .iter()
            .filter(|(_, w)| w.plan == plan && !w.stopping)
            .map(|(key, _)| key)
            .collect();
        debug!(%group, units = self.plans[plan].unit_count(indexed), live, target, owned = owned.len(), "balance");
        if owned.len() > target {
            let rounds = self.surplus_rounds.entry(plan).or_default();
            *rounds += 1;
            if *rounds >= SURPLUS_ROUNDS {
                *rounds = 0;
                self.release_surplus(plan, owned.len() - target);
            }
            return Ok(());
        }
        self.surplus_rounds.remove(&plan);
        if owned.len() < target {
            let units = self.plans[plan].units(indexed, &self.shared.settings.backfill_suffix);
            debug_assert_eq!(
                units.len(),
                self.plans[plan].unit_count(indexed),
                "the fair share counted other units than there are"
            );
            self.acquire(plan, &units, target - owned.len()).await?;
        }
        Ok(())
    }

    /// Asks `count` of `plan`'s workers to stop between messages and
    /// release their leases (the ones this instance prefers least).
    fn release_surplus(&mut self, plan: usize, count: usize) {
        let instance = self.shared.instance().to_owned();
        let mut owned: Vec<(&String, &mut Running)> = self
            .workers
            .iter_mut()
            .filter(|(_, w)| w.plan == plan && !w.stopping)
            .collect();
        balance::preference_order(&mut owned, &instance, |(_, w)| w.unit.as_str());
        let mut released = 0usize;
        for (_, worker) in owned.into_iter().rev().take(count) {
            debug!(unit = %worker.unit, "releasing a unit over this instance's share");
            worker.stopping = true;
            worker.control.stop.cancel();
            released += 1;
        }
        let group = &self.plans[plan].group;
        info!(event = ordo_core::contract::log_events::PARTITIONS_RELEASED, %group, released, reason = "over this instance's share", "releasing {released} partitions");
    }

    /// Acquires up to `limit` free units of `plan` and starts their workers.
    async fn acquire(&mut self, plan: usize, units: &BTreeMap<String, Unit>, limit: usize) -> Result<()> {
        let mut candidates: Vec<&Unit> = units
            .values()
            .filter(|unit| {
                !self.workers.contains_key(&unit.lease.lease)
                    && !self.shared.leases.lingers(&unit.lease.lease)
            })
            .collect();
        balance::preference_order(&mut candidates, self.shared.instance(), |u| u.id.as_str());
        candidates.truncate(MAX_CANDIDATES);
        let keys: Vec<_> = candidates.iter().map(|u| u.lease.clone()).collect();
        // The leases are held at least as long as the member, renewed (or
        // registered) before they were taken.
        let (leases, valid_until) = self.shared.partitions.acquire_until(&keys, limit).await?;
        let acquired: Vec<_> = candidates
            .into_iter()
            .zip(leases)
            .filter_map(|(unit, lease)| lease.map(|lease| (unit.clone(), lease)))
            .collect();
        let count = acquired.len();
        for (unit, lease) in acquired {
            self.start_worker(plan, unit, lease, valid_until);
        }
        if count > 0 {
            let group = &self.plans[plan].group;
            let owned = self
                .workers
                .values()
                .filter(|w| w.plan == plan && !w.stopping)
                .count();
            info!(event = ordo_core::contract::log_events::PARTITIONS_ACQUIRED, %group, acquired = count, owned, "acquired {count} partitions");
        }
        Ok(())
    }

    fn start_worker(
        &mut self,
        plan: usize,
        unit: Unit,
        lease: crate::owner::lease::Lease,
        valid_until: std::time::Instant,
    ) {
        debug!(event = ordo_core::contract::log_events::LEASE_ACQUIRED, group = %unit.group, unit = %unit.id, token = lease.token(), "lease acquired");
        metrics::lease_acquired(&unit);
        let control = Control::default();
        self.shared
            .leases
            .insert(lease.key(), lease.value(), control.kill.clone(), valid_until);
        self.next_watcher += 1;
        self.workers.insert(
            lease.key().to_owned(),
            Running {
                plan,
                unit: unit.id.clone(),
                token: lease.token(),
                control: control.clone(),
                stopping: false,
            },
        );
        let exited = Exited {
            lease_key: lease.key().to_owned(),
            token: lease.token(),
            exit: Exit::Lost,
        };
        let exits = self.exits.0.clone();
        let worker = Worker::new(
            self.shared.clone(),
            self.plans[plan].subscription.clone(),
            unit,
            lease,
            control,
            self.next_watcher,
        );
        // A combinator, not an `async move` block: the block would keep
        // the worker's future twice (captured, then awaited).
        let task = futures_util::FutureExt::map(worker.run(), move |exit| {
            let _ = exits.send(Exited { exit, ..exited });
        });
        self.tracker.spawn(task);
    }

    fn on_exit(&mut self, exited: Exited) {
        if self
            .workers
            .get(&exited.lease_key)
            .is_some_and(|w| w.token == exited.token)
        {
            self.workers.remove(&exited.lease_key);
        }
        debug!(lease = %exited.lease_key, exit = ?exited.exit, "worker exited");
    }

    /// Stops every worker between messages; after a lease TTL, aborts the
    /// handlers still running (their messages stay pending).
    async fn stop_all(&mut self) {
        for worker in self.workers.values() {
            worker.control.stop.cancel();
        }
        let released = self.workers.len();
        info!(
            event = ordo_core::contract::log_events::PARTITIONS_RELEASED,
            released,
            reason = "shutdown",
            "releasing {released} partitions"
        );
        self.tracker.close();
        let grace = self.shared.settings.lease_ttl;
        if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
            warn!(
                ?grace,
                "handlers still running after the shutdown grace; aborting them"
            );
            for worker in self.workers.values() {
                worker.control.kill.cancel();
            }
            self.tracker.wait().await;
        }
        self.workers.clear();
    }

    /// Leaves the instance sets, so the others' shares grow at once.
    async fn leave(&self) {
        let client = self.shared.partitions.client();
        for plan in self
            .plans
            .iter()
            .filter(|p| !p.partitioned.is_empty() || !p.base.is_empty())
        {
            let left: std::result::Result<Value, _> =
                client.zrem(instances(&plan.group), self.shared.instance()).await;
            if let Err(error) = left {
                warn!(error = %ordo_core::contract::error::error_chain(&error), group = %plan.group, "leaving the instance set failed; it will expire");
            }
        }
    }
}

/// When [`Supervisor::register_groups`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Registration {
    /// At start: also redo a registration interrupted between its passes.
    Start,
    /// At a discovery round: restore registrations Redis lost.
    Restore,
}

/// The members of every bucket of `category`'s partition index: the
/// directory of its slots, then each listed bucket.
async fn indexed_members(client: &fred::clients::Pool, category: &str) -> Result<BTreeSet<String>> {
    buckets::members_per_node(client, &index_directory(category), |slot| index(category, slot)).await
}
