//! What the two runners of a partition worker share (per key,
//! [`super::per_key`]; hashed, [`super::hashed`]): the [`Worker`] of one
//! owned unit under its lease, handling one message with retries,
//! acknowledging it, halting the partition (or parking the key) on a poison
//! message, and waiting idle for the waker or the time to retire the
//! partition.
//!
//! Every Redis operation is fenced: a worker that lost its lease gets
//! [`Error::Fenced`] and stops at once, without touching the partition again.
//! The same holds for the handler: a handler error caused by the fence (a
//! refused [`RedisFence`] commit or fenced state save) stops the worker
//! instead of being retried, and every retry first confirms the lease, so a
//! stale owner never runs a message again while the new owner may run it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use ordo_core::contract::attempt::{Attempt, Failure, Outcome, StillRunning};
use ordo_core::contract::broker::Subscription;
use ordo_core::contract::command::{CommandOutcome, REPLY_TO_METADATA, ReplySlot};
use ordo_core::contract::delivery::{DeliveryHooks, deliver};
use ordo_core::contract::error::ProcessStoreError;
use ordo_core::contract::handler::{HandlerContext, HandlerKind};
use ordo_core::contract::message::Envelope;
use ordo_core::contract::retry::{Failed, GiveUp, Retries, RetryPolicy};
use ordo_core::contract::text::log_text;
use ordo_core::contract::trace;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::local::{LocalCommand, LocalDone, OpenDoor};
use super::shared::SharedRef;
use super::unit::Unit;
use super::waker::{Bell, WatcherId};
use crate::consumer::metrics;
use crate::error::Error;
use crate::owner::ack::Ack;
use crate::owner::fence::{Applied, FenceNames, RedisFence};
use crate::owner::lease::Lease;
use crate::owner::partition::{HaltReason, Held, Idle, ReapOutcome, StreamEntry};
use crate::store::keys::{self, KeyNames, PartitionKeys};
use crate::store::replies;

/// Why a worker stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It was asked to stop and released its lease.
    Released,
    /// Its lease was lost (fenced, expired or reaped by another group).
    Lost,
    /// Its partitions no longer exist (it retired them, or found them gone).
    Gone,
}

/// How the supervisor controls a worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Control {
    /// Stop between messages and release the lease (rebalancing, shutdown).
    pub(crate) stop: CancellationToken,
    /// Stop at once without touching Redis: the lease is gone.
    pub(crate) kill: CancellationToken,
}

/// What handling one message came to.
pub(super) enum Handled {
    /// Handled (or not for this handler): acknowledge it.
    Done,
    /// Failed every attempt and the partition was halted.
    Halted,
    /// Stop requested while retrying: leave it pending.
    Stop,
    /// The lease is gone.
    Lost,
}

/// One worker.
pub(crate) struct Worker {
    pub(super) shared: SharedRef,
    pub(super) subscription: Subscription,
    pub(super) unit: Unit,
    pub(super) lease: Lease,
    pub(super) control: Control,
    pub(super) watcher: WatcherId,
    pub(super) wake: Arc<Notify>,
    /// The last handler attempt started under the lease (attempts are
    /// numbered per lease from 1; see [`RedisFence::for_attempt`]).
    attempts: AtomicU64,
    /// The killed handler runs that did not end (blocking code): the lease
    /// is then kept, renewed, until they have, so nobody else runs the key
    /// meanwhile (see [`super::shared::LeaseTable`]).
    pub(super) unfinished: Mutex<Vec<StillRunning>>,
    /// What every message records, registered once.
    pub(super) metrics: metrics::MessageMetrics,
}

/// What one sequence of messages handled one at a time keeps from one
/// message to the next: the whole partition of a key, or one key of a
/// hashed partition.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// Set by the fences of the slot's attempts when they send a command:
    /// only then does the acknowledgement need to close the attempt.
    fence_used: Arc<AtomicBool>,
    /// Set by the fences of the slot's runs to the message they sent a
    /// commit of: its acknowledgement takes what it applied out of the
    /// commit marker.
    applied: Applied,
    /// Whether the entry being handled has failed attempts on record.
    had_failures: AtomicBool,
    /// The commit marker and attempt sequence of its attempts: `None` for
    /// the lease's own; one key of a hashed partition has its own, since
    /// keys run their attempts side by side.
    own: Option<KeyNames>,
    /// The key, in a hashed partition (a poison message parks it).
    key: Option<Arc<str>>,
    /// Whether the entry being handled is one of the key's held messages.
    held: AtomicBool,
    /// What its runs' fences name, made at its first run: a slot serves
    /// one worker, under one lease.
    fence_names: OnceLock<Arc<FenceNames>>,
}

impl Slot {
    /// The slot of `key` of a hashed partition, with its own names.
    pub(crate) fn of_key(key: Arc<str>, own: KeyNames) -> Self {
        Self {
            own: Some(own),
            key: Some(key),
            ..Self::default()
        }
    }

    /// The key, in a hashed partition.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The key's own commit marker and attempt sequence, in a hashed partition.
    pub(crate) fn own(&self) -> Option<&KeyNames> {
        self.own.as_ref()
    }

    /// Marks the entry being handled as one of the key's held messages.
    pub(crate) fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::SeqCst);
    }

    /// Whether the entry being handled is one of the key's held messages.
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::SeqCst)
    }

    /// The fence of a run of attempt `attempt` under `lease`, the worker's.
    fn fence(&self, lease: &Lease, attempt: u64) -> RedisFence {
        let names = self
            .fence_names
            .get_or_init(|| FenceNames::of(lease, self.own.as_ref()));
        RedisFence::tracked(
            names.clone(),
            lease.token(),
            attempt,
            self.fence_used.clone(),
            self.applied.clone(),
        )
    }

    /// The attempt sequence its attempts are closed in.
    pub(crate) fn sequence<'a>(&'a self, lease: &'a Lease) -> &'a str {
        self.own
            .as_ref()
            .map_or(lease.keys().sequence.as_str(), |own| own.sequence.as_str())
    }

    /// Whether an attempt of the slot sent a fenced command since the last
    /// call (then its acknowledgement closes it).
    pub(crate) fn take_fence_used(&self) -> bool {
        self.fence_used.swap(false, Ordering::SeqCst)
    }

    /// The message whose runs sent fenced commits since the last call.
    pub(crate) fn take_applied(&self) -> Option<String> {
        self.applied.take()
    }

    /// Whether the entry just handled had failed attempts on record.
    pub(crate) fn take_had_failures(&self) -> bool {
        self.had_failures.swap(false, Ordering::SeqCst)
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("unit", &self.unit.id)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Worker {
    pub(crate) fn new(
        shared: SharedRef,
        subscription: Subscription,
        unit: Unit,
        lease: Lease,
        control: Control,
        watcher: WatcherId,
    ) -> Self {
        Self {
            shared,
            subscription,
            metrics: metrics::MessageMetrics::of(&unit),
            unit,
            lease,
            control,
            watcher,
            wake: Arc::new(Notify::new()),
            attempts: AtomicU64::new(0),
            unfinished: Mutex::default(),
        }
    }

    /// `partition` as this worker holds it: under its lease, for its group.
    pub(super) fn held<'a>(&'a self, partition: &'a PartitionKeys) -> Held<'a> {
        self.shared
            .partitions
            .held(&self.lease, &self.unit.group, partition)
    }

    /// Numbers a new attempt.
    pub(super) fn next_attempt(&self) -> u64 {
        self.attempts.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The last attempt numbered.
    pub(super) fn last_attempt(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Sleeps `duration`, or less when asked to stop.
    pub(super) async fn pause(&self, duration: Duration) {
        tokio::select! {
            () = tokio::time::sleep(duration) => {}
            () = self.control.stop.cancelled() => {}
            () = self.control.kill.cancelled() => {}
        }
    }

    /// The doorbells of the unit's partitions, at the positions `idle` read
    /// (from the start for those it did not).
    pub(super) fn bells(&self, idle: &[(usize, Idle)]) -> Vec<Bell> {
        let bell = |partition: &PartitionKeys, read: Option<&Idle>| Bell {
            doorbell: partition.doorbell(),
            group: Arc::clone(&self.unit.group),
            channel: partition.doorbell_channel(),
            lanes: vec![
                (
                    partition.primary().to_owned(),
                    read.map_or("0-0", |state| &state.primary_last).to_owned(),
                ),
                (
                    partition.backfill().to_owned(),
                    read.map_or("0-0", |state| &state.backfill_last).to_owned(),
                ),
            ],
            read: read.is_some(),
        };
        // Partitions of a process-manager unit that do not exist (yet) are
        // watched from the start, so a publish that creates them wakes us.
        self.unit
            .partitions
            .iter()
            .enumerate()
            .map(|(index, partition)| {
                let read = idle.iter().find(|(i, _)| *i == index).map(|(_, state)| state);
                bell(partition, read)
            })
            .collect()
    }

    /// Waits for new entries (or the time to reap); `Some` to stop. A
    /// command partition's worker runs the commands offered at its `door`
    /// meanwhile (see [`super::local`]).
    pub(super) async fn wait_idle(
        &self,
        idle: &[(usize, Idle)],
        reap_after: &mut Option<Instant>,
        mut door: Option<&mut OpenDoor>,
    ) -> Option<Exit> {
        let settings = &self.shared.settings;
        let bells = self.bells(idle);
        // `reap_idle_ms = 0`: never reap, so no reap timer at all.
        let reap_in = settings.reap_idle.map(|reap_idle| {
            let due = idle
                .iter()
                .map(|(_, state)| reap_idle.saturating_sub(state.idle_for))
                .min()
                .unwrap_or(reap_idle);
            let not_before =
                reap_after.map_or(Duration::ZERO, |at| at.saturating_duration_since(Instant::now()));
            due.max(not_before)
        });
        let reap_timer = async {
            match reap_in {
                Some(reap_in) => tokio::time::sleep(reap_in).await,
                None => std::future::pending().await,
            }
        };
        self.shared.waker.watch(self.watcher, bells, self.wake.clone());
        tokio::pin!(reap_timer);
        /// What ended one wait.
        enum Woken {
            Exit(Option<Exit>),
            Reap,
            Local(Option<LocalCommand>),
        }
        loop {
            let offered = async {
                match door.as_deref_mut() {
                    Some(door) => door.queue.recv().await,
                    None => std::future::pending().await,
                }
            };
            let woken = tokio::select! {
                () = self.wake.notified() => Woken::Exit(None),
                () = self.control.stop.cancelled() => Woken::Exit(Some(Exit::Released)),
                () = self.control.kill.cancelled() => Woken::Exit(Some(Exit::Lost)),
                () = &mut reap_timer => Woken::Reap,
                command = offered => Woken::Local(command),
            };
            match woken {
                Woken::Exit(exit) => return exit,
                // Both boxed: the wait is what an idle worker's task keeps.
                Woken::Reap => {
                    self.shared.waker.unwatch(self.watcher);
                    return Box::pin(self.reap(idle, reap_after)).await;
                }
                Woken::Local(Some(command)) => {
                    if let Some(exit) = Box::pin(self.run_local(&self.unit.partitions[0], command)).await {
                        return Some(exit);
                    }
                }
                // Cannot happen while the door is open.
                Woken::Local(None) => return None,
            }
        }
    }

    /// Runs the commands queued at `door`, in order, before anything else
    /// of the partition is read; `Some` to stop.
    pub(super) async fn run_queued(&self, door: &mut OpenDoor) -> Option<Exit> {
        while let Ok(command) = door.queue.try_recv() {
            if let Some(exit) = self.run_local(&self.unit.partitions[0], command).await {
                return Some(exit);
            }
        }
        None
    }

    /// Runs a command offered by this instance's router (no stream entry),
    /// once, under the lease; answers it. A failed attempt, or a lease
    /// that went meanwhile, sends it back to be sent through Redis.
    async fn run_local(&self, partition: &PartitionKeys, command: LocalCommand) -> Option<Exit> {
        let LocalCommand { envelope, done } = command;
        let envelope = Arc::new(*envelope);
        let slot = Slot::default();
        let reply = ReplySlot::new();
        let policy = self.subscription.retry_policy(&self.shared.settings.retry);
        let sequence = self.next_attempt();
        let outcome = self
            .invoke(&slot, &envelope, 1, sequence, partition, &policy, Some(&reply))
            .await;
        // Close the attempt when it sent fenced commands, so none of them
        // can land late.
        if slot.take_fence_used() {
            let closed = self
                .until_answered("closing a command's attempt", false, || {
                    self.held(partition)
                        .attempt_failed_in(slot.sequence(&self.lease), None, sequence)
                })
                .await;
            if !matches!(closed, Ok(Ok(_))) {
                let _ = done.send(LocalDone::NotRun(Box::new(Arc::unwrap_or_clone(envelope))));
                return Some(Exit::Lost);
            }
        }
        match outcome {
            Ok(Ok(())) => {
                let (outcome, error) = reply.take_with_error();
                if error.is_some_and(|error| fenced_by(&*error, &self.lease)) {
                    info!(
                        event = ordo_core::contract::log_events::LEASE_LOST,
                        id = envelope.id,
                        "lease lost during a command run in place; it goes through Redis"
                    );
                    let _ = done.send(LocalDone::NotRun(Box::new(Arc::unwrap_or_clone(envelope))));
                    return Some(Exit::Lost);
                }
                self.metrics.handled(&self.unit, partition.category());
                let outcome = outcome.unwrap_or(CommandOutcome::Succeeded {
                    value: serde_json::Value::Null,
                });
                let _ = done.send(LocalDone::Ran(outcome));
                None
            }
            Ok(Err(failure)) => {
                warn!(id = envelope.id, error = %log_text(&failure.text()), "a command run in place failed; it goes through Redis, with retries");
                let _ = done.send(LocalDone::NotRun(Box::new(Arc::unwrap_or_clone(envelope))));
                None
            }
            Err(handled) => {
                let _ = done.send(LocalDone::NotRun(Box::new(Arc::unwrap_or_clone(envelope))));
                match handled {
                    Handled::Stop => Some(Exit::Released),
                    _ => Some(Exit::Lost),
                }
            }
        }
    }

    /// Tries to retire the idle partitions that have been idle long enough.
    async fn reap(&self, idle: &[(usize, Idle)], reap_after: &mut Option<Instant>) -> Option<Exit> {
        let settings = &self.shared.settings;
        // `reap_idle_ms = 0`: never reap (no timer calls this then, either).
        let reap_idle = settings.reap_idle?;
        let mut reaped = 0;
        for (index, _) in idle {
            let partition = &self.unit.partitions[*index];
            match self.held(partition).reap(reap_idle).await {
                Ok(ReapOutcome::Reaped) => {
                    info!(
                        event = ordo_core::contract::log_events::PARTITION_REAPED,
                        partition = partition.primary(),
                        "cold partition retired"
                    );
                    metrics::partition_reaped(&self.unit);
                    reaped += 1;
                }
                Ok(ReapOutcome::Busy { retry_in }) => {
                    debug!(
                        partition = partition.primary(),
                        ?retry_in,
                        "partition not ready to retire"
                    );
                    // Another group may still be behind: check again later.
                    *reap_after = Some(Instant::now() + retry_in.min(reap_idle));
                }
                Err(error) if error.is_fenced() => return Some(Exit::Lost),
                Err(error) => {
                    warn!(error = %ordo_core::contract::error::error_chain(&error), partition = partition.primary(), "retiring the partition failed")
                }
            }
        }
        // A retired partition took its lease with it; a process manager's
        // unit lease stays until none of its partitions is left.
        (reaped > 0 && self.unit.correlation.is_none()).then_some(Exit::Gone)
    }

    /// Runs a fenced operation until Redis answers it: transient failures
    /// (a connection down, a timeout) are retried with backoff, forever (the
    /// heartbeat kills this worker if Redis stays away for a lease TTL).
    /// Returns the answer (a success or a refusal: fenced, stale), or the
    /// reason to stop asking: killed (`Lost`), or asked to stop between
    /// messages (`Stop`, only when `stoppable`).
    pub(super) async fn until_answered<T, F, Fut>(
        &self,
        what: &'static str,
        stoppable: bool,
        mut operation: F,
    ) -> Result<Result<T, Error>, Handled>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let mut failures = 0;
        loop {
            let error = match operation().await {
                Err(error) if !error.is_fenced() && !matches!(error, Error::Stale { .. }) => error,
                answer => return Ok(answer),
            };
            failures += 1;
            warn!(error = %ordo_core::contract::error::error_chain(&error), failures, "{what} failed; retrying");
            let stop = async {
                if stoppable {
                    self.control.stop.cancelled().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = tokio::time::sleep(self.shared.settings.backoff.delay(failures)) => {}
                () = stop => return Err(Handled::Stop),
                () = self.control.kill.cancelled() => return Err(Handled::Lost),
            }
        }
    }

    /// Acknowledges one handled entry (closing its last attempt), and trims
    /// the lane with the last entry of a read batch; `None` when the lease
    /// is gone.
    pub(super) async fn ack(
        &self,
        slot: &Slot,
        acks: &Ack,
        entry: &StreamEntry,
        last_of_batch: bool,
    ) -> Option<bool> {
        let ack = self.ack_of(slot, acks, entry, last_of_batch);
        self.send_ack(ack).await
    }

    /// The handler's `ack_window` (0: none).
    pub(super) fn ack_window(&self) -> usize {
        let window = self.subscription.settings.config().ack_window().unwrap_or(0);
        usize::try_from(window).unwrap_or(usize::MAX)
    }

    /// The acknowledgement of `entry`, handled in `slot`: it takes what the
    /// slot noted about the run (whether to close its attempt, failures to
    /// clear, what its commits applied), so it is made before the slot's
    /// next message starts.
    pub(super) fn ack_of(&self, slot: &Slot, acks: &Ack, entry: &StreamEntry, last_of_batch: bool) -> Ack {
        let ids = [entry.id()];
        // Only an attempt that sent fenced commands can have one arrive late.
        let close = if slot.take_fence_used() {
            self.last_attempt()
        } else {
            0
        };
        let had_failures = slot.take_had_failures();
        let applied = slot.take_applied();
        acks.of(&ids, close, had_failures)
            .trimming(last_of_batch)
            .forgetting(applied.as_deref())
    }

    /// Sends `ack` until answered: whether the primary lane has entries
    /// waiting, or `None` when the lease is lost or the worker is stopping.
    pub(super) async fn send_ack(&self, ack: Ack) -> Option<bool> {
        let acked = self
            .until_answered("acknowledgement", false, || self.shared.acks.ack(ack.clone()))
            .await;
        match acked {
            Ok(Ok(waiting)) => Some(waiting),
            Ok(Err(error)) => {
                info!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), id = ack.first_id(), entries = ack.len(), "acknowledgement refused: lease lost");
                None
            }
            Err(_) => None,
        }
    }

    /// Runs the handler on one entry with retries; halts the partition when
    /// the retry policy gives up. Counted failures are recorded with the
    /// pending entry, so a worker stopped during the backoff leaves its
    /// successor only the retry budget that is left; a transient failure
    /// closes its attempt without counting.
    pub(super) async fn handle_entry(
        &self,
        slot: &Slot,
        partition: &PartitionKeys,
        entry: &StreamEntry,
        pending: bool,
    ) -> Handled {
        // The message whose runs committed is this one from here on: one
        // that ended without an acknowledgement (halted or parked, then
        // skipped or dead-lettered by an operator) keeps its record.
        slot.take_applied();
        // The key of the stream it sits in: the partition's own, or the
        // key of a hashed partition the entry was dispatched to.
        let key = slot.key().unwrap_or(partition.key());
        let command = self.subscription.kind() == HandlerKind::Command;
        let envelope = match entry.decode_for(partition.category(), Some(key)) {
            Ok(envelope) => Arc::new(envelope),
            // Not a command anybody can be answered about: dropped, so it
            // costs its key nothing (bad input never halts a command key).
            Err(error) if command => {
                error!(event = ordo_core::contract::log_events::COMMAND_DROPPED, id = entry.id(), partition = partition.primary(), error = %log_text(&ordo_core::contract::error::error_chain(&error)), "a command partition entry that is not a command was dropped");
                return Handled::Done;
            }
            // A message that cannot be decoded (or is not of this key) will
            // never succeed here: halt now.
            Err(error) => {
                let attempt = self.next_attempt();
                // The rare paths of a message are boxed, here and below:
                // inline, their Redis calls made every message's future
                // kilobytes larger, copied at each move (issue 31).
                return Box::pin(self.halt(
                    slot,
                    partition,
                    entry,
                    ordo_core::contract::error::error_chain(&error),
                    1,
                    attempt,
                ))
                .await;
            }
        };
        // A command of a type this instance does not know is the command
        // run's to answer (`UnknownType`), not to skip.
        if !command && !self.subscription.handles(&envelope) {
            return Handled::Done;
        }
        // A command delivered before (its owner died or stalled) may have
        // run to its outcome already: answer with that, never run it again.
        if command && pending {
            let key = partition.outcome(&envelope.id);
            let recorded = Box::pin(
                self.until_answered("looking for the command's outcome", true, || {
                    replies::outcome(self.shared.partitions.client(), &key)
                }),
            )
            .await;
            match recorded {
                Ok(Ok(Some(recorded))) => return Box::pin(self.push_reply(&envelope, recorded)).await,
                Ok(Ok(None)) => {}
                Ok(Err(_)) => return Handled::Lost,
                Err(stopped) => return stopped,
            }
        }
        let policy = self.subscription.retry_policy(&self.shared.settings.retry);
        let mut failed = 0;
        if pending {
            match Box::pin(self.until_answered("reading the failed attempts", true, || {
                self.held(partition).failed_attempts(entry.id())
            }))
            .await
            {
                Ok(Ok(count)) => {
                    failed = count;
                    if count > 0 {
                        slot.had_failures.store(true, Ordering::SeqCst);
                    }
                }
                Ok(Err(_)) => return Handled::Lost,
                Err(stopped) => return stopped,
            }
        }
        let key = slot.key().unwrap_or_else(|| partition.primary());
        let retries = policy.start(key, failed);
        if retries.exhausted() {
            // The halt is an act of its own (the failed attempts are closed).
            let halt = self.next_attempt();
            let error = format!("{failed} attempts failed before this owner (see the earlier logs)");
            return Box::pin(self.halt(slot, partition, entry, error, failed, halt)).await;
        }
        // A command partition's subscription routes to the command's handler, which names itself.
        let group = if command { "" } else { self.subscription.name() };
        let traced = trace::process(&envelope, "redis", group, self.lease.token());
        let mut hooks = EntryDelivery {
            worker: self,
            slot,
            partition,
            entry,
            envelope,
            policy: &policy,
            sequence: 0,
            reply: command.then(ReplySlot::new),
        };
        traced.run(deliver(retries, &mut hooks)).await
    }

    /// Records a command's outcome under its id (unless one is recorded:
    /// the first outcome wins) and sends the recorded one to its sender.
    async fn answer(
        &self,
        partition: &PartitionKeys,
        envelope: &Envelope,
        outcome: CommandOutcome,
    ) -> Handled {
        let text = match serde_json::to_string(&outcome) {
            Ok(text) => text,
            Err(error) => {
                error!(%error, id = envelope.id, "a command outcome cannot be serialised; its sender will time out");
                return Handled::Done;
            }
        };
        let key = partition.outcome(&envelope.id);
        let window = self.shared.settings.command_dedup_window;
        let recorded = self
            .until_answered("recording the command's outcome", false, || {
                replies::record_outcome(self.shared.partitions.client(), &key, &text, window)
            })
            .await;
        match recorded {
            Ok(Ok(recorded)) => self.push_reply(envelope, recorded).await,
            Ok(Err(_)) => Handled::Lost,
            Err(stopped) => stopped,
        }
    }

    /// Pushes `recorded`, a command's recorded outcome (JSON), to the reply
    /// list its sender named; nothing when it named none, or a name that
    /// is not a reply list (a forged entry cannot make the owner write
    /// elsewhere).
    async fn push_reply(&self, envelope: &Envelope, recorded: String) -> Handled {
        let Some(list) = envelope
            .metadata
            .get(REPLY_TO_METADATA)
            .filter(|list| keys::is_replies(list))
        else {
            return Handled::Done;
        };
        let id = serde_json::Value::String(envelope.id.clone());
        let reply = format!(r#"{{"id":{id},"outcome":{recorded}}}"#);
        let pushed = self
            .until_answered("sending the command's reply", false, || {
                replies::push_reply(self.shared.partitions.client(), list, &reply)
            })
            .await;
        match pushed {
            Ok(_) => Handled::Done,
            Err(stopped) => stopped,
        }
    }

    /// Halts on `entry` as the retry policy decided.
    async fn give_up(
        &self,
        slot: &Slot,
        partition: &PartitionKeys,
        entry: &StreamEntry,
        give_up: GiveUp,
    ) -> Handled {
        // The halt is an act of its own (the failed attempts are closed).
        let halt = self.next_attempt();
        let attempts = give_up.attempts();
        self.halt(
            slot,
            partition,
            entry,
            give_up.reason().to_owned(),
            attempts,
            halt,
        )
        .await
    }

    /// Makes sure the lease is still held before a message starts: when the
    /// heartbeat renewed it recently enough that it is valid for another
    /// heartbeat interval, at once; otherwise (the process was stalled, or
    /// renewals are failing) by asking Redis. A message read ahead before a
    /// stall is then never started by an owner whose lease lapsed meanwhile:
    /// after a failover only the message in flight runs again. `Some` when
    /// the message must not start here.
    async fn confirm_lease(&self) -> Option<Handled> {
        let margin = self.shared.settings.heartbeat_interval;
        let valid_until = self
            .shared
            .leases
            .valid_until(self.lease.key(), self.lease.value());
        if valid_until.is_some_and(|until| Instant::now() + margin < until) {
            return None;
        }
        // Boxed: the rare path's Redis call would otherwise make every
        // message's future (and each move of it) kilobytes larger.
        match Box::pin(
            self.until_answered("confirming the lease before a message", true, || {
                self.shared.partitions.check(&self.lease)
            }),
        )
        .await
        {
            Ok(Ok(())) => None,
            Ok(Err(error)) => {
                info!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), "lease lost before a message; not starting it");
                Some(Handled::Lost)
            }
            Err(stopped) => Some(stopped),
        }
    }

    /// Confirms the lease is still held before a retry (after the backoff),
    /// so a stale owner never runs the handler again (the heartbeat only
    /// notices a lost lease at its next beat). `Some` when the message must
    /// not be retried here.
    async fn before_retry(&self) -> Option<Handled> {
        // Without an answer the lease may be gone: never retry blind.
        match self
            .until_answered("confirming the lease before a retry", true, || {
                self.shared.partitions.check(&self.lease)
            })
            .await
        {
            Ok(Ok(())) => None,
            Ok(Err(error)) => {
                info!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), "lease lost before a retry; not retrying");
                Some(Handled::Lost)
            }
            Err(stopped) => Some(stopped),
        }
    }

    /// Runs the handler once through the shared attempt runner (its own
    /// task: a panic is a failure; a kill aborts it), once it has its
    /// permits and the lease is confirmed. `Err` when it must not run or
    /// finish here: the lease was lost meanwhile, or the worker was asked
    /// to stop while confirming the lease.
    #[allow(clippy::too_many_arguments)]
    async fn invoke(
        &self,
        slot: &Slot,
        envelope: &Arc<Envelope>,
        attempt: u32,
        sequence: u64,
        partition: &PartitionKeys,
        policy: &RetryPolicy,
        reply: Option<&ReplySlot>,
    ) -> Result<Result<(), Failure>, Handled> {
        let mut ctx = HandlerContext::shared(Arc::clone(envelope));
        if let Some(reply) = reply {
            ctx = ctx.with_reply(reply.clone());
        }
        let ctx = ctx
            .with_attempt(attempt)
            .with_fencing_token(self.lease.token())
            .with_process_correlation(self.unit.correlation.clone())
            .with_extension(slot.fence(&self.lease, sequence).handling(&envelope.id));
        // The handler's own slot (`[handlers.NAME] max_concurrency`) first:
        // waiting for it holds none of the process-wide permits.
        let own = tokio::select! {
            own = self.subscription.settings.acquire() => own,
            () = self.control.kill.cancelled() => return Err(Handled::Lost),
        };
        let permit = tokio::select! {
            permit = self.shared.handler_permits.clone().acquire_owned() => permit.ok(),
            () = self.control.kill.cancelled() => return Err(Handled::Lost),
        };
        // Waiting for the permits may have taken a while, or the process
        // may have been stalled: never start on a lease that may have lapsed.
        if let Some(stopped) = self.confirm_lease().await {
            return Err(stopped);
        }
        let permit = (permit, own);
        let started = Instant::now();
        // An abort ends a run at its next await; a run in blocking code goes
        // on, and then the lease is kept until it has ended (`run`). A run
        // past its timeout is waited for, the lease kept meanwhile.
        let outcome = Attempt::new(self.subscription.handler.clone(), envelope.clone(), ctx)
            .with_timeout(policy.timeout())
            .run(
                permit,
                &self.control.kill,
                self.shared.settings.heartbeat_interval,
            )
            .await;
        self.metrics
            .handler_duration(&self.unit, partition.category(), started.elapsed());
        match outcome {
            Outcome::Succeeded => Ok(Ok(())),
            Outcome::Failed(failure) => Ok(Err(failure)),
            Outcome::Cancelled(cancelled) => {
                if let Some(run) = cancelled.into_still_running() {
                    self.unfinished
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(run);
                }
                Err(Handled::Lost)
            }
            _ => Err(Handled::Lost),
        }
    }

    /// Records the halt under the fence, retrying transient failures.
    async fn halt(
        &self,
        slot: &Slot,
        partition: &PartitionKeys,
        entry: &StreamEntry,
        error: String,
        attempts: u32,
        sequence: u64,
    ) -> Handled {
        let reason = HaltReason {
            lane: entry.lane(),
            head: entry.id().to_owned(),
            error,
            attempts,
        };
        if slot.key().is_some() {
            return self.park(slot, partition, entry, reason, sequence).await;
        }
        let halted = self
            .until_answered("recording the halt", false, || {
                self.held(partition).halt_attempt(&reason, sequence)
            })
            .await;
        match halted {
            Ok(Ok(())) => {
                error!(event = ordo_core::contract::log_events::PARTITION_HALTED, head = %reason.head, error = %log_text(&reason.error), attempts, "partition halted until an operator resolves it (ordo inspect, then retry, skip or dlq)");
                metrics::halted(&self.unit, partition.category());
                Handled::Halted
            }
            // An earlier try of this very halt landed (its reply was lost):
            // the partition is halted, or resolved since.
            Ok(Err(Error::Stale { .. })) => Handled::Halted,
            Ok(Err(_)) | Err(_) => Handled::Lost,
        }
    }
}

impl Worker {
    /// Parks the key of `slot` (a key of a hashed partition) on `entry`,
    /// which failed every attempt: the key's other messages are held aside
    /// with it, the partition's other keys keep flowing.
    pub(super) async fn park(
        &self,
        slot: &Slot,
        partition: &PartitionKeys,
        entry: &StreamEntry,
        reason: HaltReason,
        sequence: u64,
    ) -> Handled {
        let (Some(key), Some(own)) = (slot.key(), slot.own()) else {
            return Handled::Lost;
        };
        let held = slot.is_held();
        let parked = self
            .until_answered("parking the key", false, || {
                self.held(partition)
                    .park(key, own, entry, held, &reason, sequence)
            })
            .await;
        match parked {
            Ok(Ok(head)) => {
                error!(event = ordo_core::contract::log_events::KEY_PARKED, key, %head, error = %ordo_core::contract::text::log_text(&reason.error), attempts = reason.attempts, "key parked until an operator resolves it (ordo inspect, then retry, skip or dlq)");
                metrics::halted(&self.unit, partition.category());
                Handled::Halted
            }
            // An earlier try of this very park landed (its reply was lost).
            Ok(Err(Error::Stale { .. })) => Handled::Halted,
            Ok(Err(_)) | Err(_) => Handled::Lost,
        }
    }
}

/// Whether `error`, or any error in its source chain, is the fence refusing
/// `lease`: a [`RedisFence`] commit ([`Error::Fenced`] naming this lease's
/// value) or a fenced process-state save ([`ProcessStoreError::Fenced`] at
/// this lease's token). A refusal of some other lease is an ordinary failure.
fn fenced_by(error: &(dyn std::error::Error + 'static), lease: &Lease) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(Error::Fenced { expected, .. }) = error.downcast_ref::<Error>()
            && expected == lease.value()
        {
            return true;
        }
        if let Some(ProcessStoreError::Fenced { fencing_token, .. }) =
            error.downcast_ref::<ProcessStoreError>()
            && *fencing_token == lease.token()
        {
            return true;
        }
        next = error.source();
    }
    false
}

/// A partition worker's part in the [delivery loop](deliver) of one entry:
/// every attempt runs under the confirmed lease, every failure is recorded
/// with the pending entry, a retry first confirms the lease, and giving up
/// halts the partition (or parks the key).
struct EntryDelivery<'a> {
    worker: &'a Worker,
    slot: &'a Slot,
    partition: &'a PartitionKeys,
    entry: &'a StreamEntry,
    envelope: Arc<Envelope>,
    policy: &'a RetryPolicy,
    /// The lease's number of the last attempt (see [`Worker::next_attempt`]).
    sequence: u64,
    /// A command's outcome, written by its run (`None` for other messages).
    reply: Option<ReplySlot>,
}

impl DeliveryHooks for EntryDelivery<'_> {
    type Output = Handled;

    async fn attempt(&mut self, attempt: u32) -> Result<Result<(), Failure>, Handled> {
        let worker = self.worker;
        self.sequence = worker.next_attempt();
        match worker
            .invoke(
                self.slot,
                &self.envelope,
                attempt,
                self.sequence,
                self.partition,
                self.policy,
                self.reply.as_ref(),
            )
            .await?
        {
            // The handler's fenced commit was refused: another instance
            // owns the partition now and may be running this very
            // message. Retrying (or halting) would be a stale owner's act.
            Err(failure) if fenced_by(&**failure.error(), &worker.lease) => {
                info!(event = ordo_core::contract::log_events::LEASE_LOST, id = self.entry.id(), attempt, error = %log_text(&failure.text()), "lease lost during the handler; not retrying");
                Err(Handled::Lost)
            }
            outcome => Ok(outcome),
        }
    }

    /// Closes the failed attempt as judged: a counted failure is counted
    /// with the pending entry (the count on record then bounds the
    /// retries), a transient one is not.
    async fn failed(
        &mut self,
        failed: &Failed,
        attempt: u32,
        retries: &mut Retries<'_>,
    ) -> Result<(), Handled> {
        let (worker, slot, partition, entry) = (self.worker, self.slot, self.partition, self.entry);
        failed.log(worker.subscription.name(), entry.id(), attempt);
        metrics::failed(&worker.unit, partition.category(), failed);
        let counted = failed.counted();
        if counted {
            slot.had_failures.store(true, Ordering::SeqCst);
        }
        let sequence = self.sequence;
        let recorded = Box::pin(worker.until_answered("recording the failed attempt", true, || {
            worker.held(partition).attempt_failed_in(
                slot.sequence(&worker.lease),
                counted.then(|| entry.id()),
                sequence,
            )
        }))
        .await?;
        match recorded {
            Ok(count) => {
                retries.counted_elsewhere(count);
                Ok(())
            }
            Err(error) => {
                info!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), "lease lost after a failed attempt; not retrying");
                Err(Handled::Lost)
            }
        }
    }

    async fn before_retry(&mut self) -> Result<(), Handled> {
        if let Some(stopped) = Box::pin(self.worker.before_retry()).await {
            return Err(stopped);
        }
        metrics::retried(&self.worker.unit, self.partition.category());
        Ok(())
    }

    async fn succeeded(&mut self) -> Handled {
        self.worker
            .metrics
            .handled(&self.worker.unit, self.partition.category());
        match &self.reply {
            Some(reply) => {
                let (outcome, error) = reply.take_with_error();
                // The fence refused the run's commit: another instance owns
                // the partition and runs the command; this run's failure is
                // not its outcome.
                if error.is_some_and(|error| fenced_by(&*error, &self.worker.lease)) {
                    info!(
                        event = ordo_core::contract::log_events::LEASE_LOST,
                        id = self.entry.id(),
                        "lease lost during the command; not answering it, the next owner runs it"
                    );
                    return Handled::Lost;
                }
                let outcome = outcome.unwrap_or(CommandOutcome::Succeeded {
                    value: serde_json::Value::Null,
                });
                Box::pin(self.worker.answer(self.partition, &self.envelope, outcome)).await
            }
            None => Handled::Done,
        }
    }

    async fn exhausted(&mut self, give_up: GiveUp) -> Handled {
        Box::pin(
            self.worker
                .give_up(self.slot, self.partition, self.entry, give_up),
        )
        .await
    }

    async fn cancelled(&self) -> Handled {
        tokio::select! {
            () = self.worker.control.stop.cancelled() => Handled::Stop,
            () = self.worker.control.kill.cancelled() => Handled::Lost,
        }
    }
}
