//! The owner of a hashed partition (`[categories.NAME] partitions = N`):
//! many keys in one partition, each key's messages handled strictly in
//! order, one at a time, different keys side by side.
//!
//! One lease covers the partition, so coordination costs stay per
//! partition (N leases, N streams, N index entries), whatever the number of
//! keys. Inside, the worker reads ahead and gives each key a queue of its
//! own:
//!
//! - **Order per key.** A key runs one message at a time, acknowledging
//!   each before starting its next, so after a failover at most the
//!   in-flight message of each key runs again. Read-ahead that had not
//!   started is read back by the next owner as pending entries and runs
//!   once; no count is kept per delivery, only failed attempts count.
//! - **Fairness and memory.** A key's queue holds at most [`KEY_QUEUE`]
//!   entries; the reader moves on past a saturated key, keeping the key's
//!   later entries behind its queue, and the queue fills from them, in
//!   order, once it empties. Each entry is read from Redis once. A hot key
//!   cannot starve the others, and the partition keeps at most
//!   [`READ_AHEAD`] entries queued, at most [`MOVE_PAST`] entries and
//!   [`MOVE_PAST_BYTES`] moved past, and runs at most `max_concurrency`
//!   keys at once.
//! - **Parking.** A poison message parks its key, not the partition: it and
//!   the key's later messages move to the key's held stream (see
//!   [`crate::owner::parking`]), every other key keeps flowing, and the lanes can
//!   be trimmed. Once an operator resolves the key, its held messages run
//!   first, in order, then its newer ones.
//! - **Fencing.** Every read, acknowledgement, park and move is fenced by
//!   the lease, as in a per-key partition. The keys' attempts run side by
//!   side, so each key closes its attempts in a sequence of its own and
//!   commits under a marker of its own ([`PartitionKeys::key_names`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use fred::interfaces::StreamsInterface;
use fred::types::Value;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use ordo_core::contract::error::error_chain;
use ordo_core::contract::key::Lane;
use tracing::{info, warn};

use super::delivery::{Exit, Handled, Slot, Worker};
use crate::consumer::metrics;
use crate::error::Error;
use crate::owner::ack::Ack;
use crate::owner::parking::HeldNext;
use crate::owner::partition::{ReadOutcome, StreamEntry};
use crate::store::keys::PartitionKeys;

/// The most entries of one key kept in memory; the reader moves on past
/// a key whose queue is full.
pub(crate) const KEY_QUEUE: usize = 16;

/// The most entries of one partition kept in memory (queued or being
/// handled); the reader waits while there are more.
pub(crate) const READ_AHEAD: usize = 512;

/// The most entries of one partition the reader moves past (kept behind
/// their keys' full queues): beyond it the reader waits, so a partition
/// with one busy key is not read ahead without end.
pub(crate) const MOVE_PAST: usize = 2048;

/// The most bytes of entries ([`StreamEntry::size`]) one partition keeps
/// moved past (a bigger entry alone): [`MOVE_PAST`] of a few hundred bytes
/// each, fewer of bigger ones.
pub(crate) const MOVE_PAST_BYTES: usize = 1 << 20;

/// Acknowledgements between two trims of a lane.
const TRIM_EVERY: usize = 64;

/// The owner of one hashed partition, for the time its worker runs.
pub(super) struct Hashed<'w> {
    worker: &'w Worker,
    partition: &'w PartitionKeys,
    state: Mutex<State>,
    /// Rung when memory frees up for a reader that waits for it.
    room: Notify,
    /// The names of an acknowledgement of each lane (primary, backfill),
    /// built once; each key's closes its attempts in its own sequence.
    acks: [Ack; 2],
}

/// What the owner keeps in memory.
#[derive(Default)]
struct State {
    /// The keys with something queued, skipped, running or held aside.
    keys: HashMap<Arc<str>, Key>,
    /// Entries queued, or being handled.
    in_memory: usize,
    /// Acknowledgements so far (every [`TRIM_EVERY`]th trims).
    acked: usize,
    /// Entries the reader moved past, not queued yet.
    moved_past: usize,
    /// Their bytes ([`StreamEntry::size`]).
    moved_past_bytes: usize,
    /// Key runs going on.
    runs: usize,
    /// Keys with something to do, waiting for a run (at most
    /// `max_concurrency` runs per partition: a run waiting for a handler
    /// permit holds a few kilobytes).
    ready: VecDeque<Arc<str>>,
    /// Whether the reader waits for memory to free up.
    full: bool,
}

impl State {
    /// Whether the reader must wait: too much queued, or moved past.
    fn over(&self) -> bool {
        self.in_memory >= READ_AHEAD
            || self.moved_past >= MOVE_PAST
            || self.moved_past_bytes >= MOVE_PAST_BYTES
    }

    /// Whether a waiting reader may read again (half of each bound free).
    fn room(&self) -> bool {
        self.in_memory <= READ_AHEAD / 2
            && self.moved_past <= MOVE_PAST / 2
            && self.moved_past_bytes <= MOVE_PAST_BYTES / 2
    }
}

/// One key of the partition.
struct Key {
    queue: VecDeque<Queued>,
    /// Whether a run of the key is going on (at most one at a time).
    running: bool,
    /// Entries read once the queue was full (or behind such entries), in
    /// the order read: the queue fills from them once it is empty.
    moved_past: VecDeque<Queued>,
    mode: Mode,
    slot: Arc<Slot>,
}

/// A queued entry.
struct Queued {
    entry: StreamEntry,
    /// Delivered before this owner read it (may have failed attempts).
    pending: bool,
}

/// How a key's messages are handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Run as they come.
    Flowing,
    /// Parked on a poison message: held aside until an operator resolves it.
    Parked,
    /// Resolved: its held messages run first.
    Holding,
}

/// What a key's run does next (decided under the lock).
enum Step {
    Run(Queued),
    Hold(Lane, Vec<Queued>),
    Held,
    Rest,
}

/// How a key's run ended.
enum KeyEnd {
    /// Nothing left to do for now.
    Rested,
    /// Asked to stop between messages.
    Stop,
    /// The lease is gone.
    Lost,
}

/// What the owner waits for, besides the keys' runs.
enum Event {
    Read(Result<ReadOutcome, Error>),
    Woken,
    Retry,
    Resumed(Result<Vec<String>, Error>),
}

/// What the reader is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    Reading,
    /// Waiting for memory to free up.
    Full,
    /// Waiting for a doorbell.
    Waiting,
}

fn lane_index(lane: Lane) -> usize {
    match lane {
        Lane::Primary => 0,
        Lane::Backfill => 1,
    }
}

impl<'w> Hashed<'w> {
    pub(super) fn new(worker: &'w Worker) -> Self {
        let partition = &worker.unit.partitions[0];
        let acks = [Lane::Primary, Lane::Backfill]
            .map(|lane| Ack::new(&worker.lease, &worker.unit.group, partition, lane, &[]));
        Self {
            worker,
            partition,
            state: Mutex::default(),
            room: Notify::new(),
            acks,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_key(&self, key: &str, mode: Mode) -> Key {
        let own = self.partition.key_names(&self.worker.unit.group, key);
        Key {
            queue: VecDeque::new(),
            running: false,
            moved_past: VecDeque::new(),
            mode,
            slot: Arc::new(Slot::of_key(Arc::from(key), own)),
        }
    }

    /// Runs until stopped, killed, or the partition is gone.
    pub(super) async fn run(&self) -> Exit {
        let w = self.worker;
        let mut runs: FuturesUnordered<BoxFuture<'_, KeyEnd>> = FuturesUnordered::new();
        let mut others: FuturesUnordered<BoxFuture<'_, Event>> = FuturesUnordered::new();
        match self.take_over().await {
            Ok(resumed) => runs.extend(self.admit(resumed).into_iter().map(|key| self.run_key(key))),
            Err(Handled::Stop) => return Exit::Released,
            Err(_) => return Exit::Lost,
        }
        // The last entry this owner got from each lane: every read hands
        // out the pending entries after it first (from id 0: a previous
        // owner's read-ahead; later, what a read delivered without the
        // owner getting it: a lost reply, a read resent after a reconnect).
        let mut after = ["0".to_owned(), "0".to_owned()];
        others.push(self.read(after.clone()));
        let mut reader = Reader::Reading;
        let mut first = true;
        let mut failures = 0;
        let mut polling = false;
        let mut stopping = false;
        let mut lost = false;
        let mut reap_after: Option<Instant> = None;
        loop {
            if (stopping || lost) && runs.is_empty() {
                return if lost { Exit::Lost } else { Exit::Released };
            }
            tokio::select! {
                biased;
                () = w.control.kill.cancelled(), if !lost => {
                    lost = true;
                    others.clear();
                }
                () = w.control.stop.cancelled(), if !stopping && !lost => {
                    stopping = true;
                    others.clear();
                    w.shared.waker.unwatch(w.watcher);
                }
                Some(end) = runs.next() => {
                    // Keys waiting for a run get this one's place.
                    let next = self.run_ended();
                    if !stopping && !lost {
                        runs.extend(next.into_iter().map(|key| self.run_key(key)));
                    }
                    match end {
                        KeyEnd::Lost => {
                            // The lease is gone for every key: stop them all.
                            w.control.kill.cancel();
                        }
                        KeyEnd::Stop => {}
                        KeyEnd::Rested => {
                            let empty = self.state().keys.is_empty();
                            // Everything done: read again, to wait with the
                            // reap timer when still idle.
                            let read = reader == Reader::Waiting && empty && runs.is_empty();
                            if read && !stopping && !lost {
                                others.clear();
                                polling = false;
                                w.shared.waker.unwatch(w.watcher);
                                reader = Reader::Reading;
                                others.push(self.read(after.clone()));
                            } else if reader == Reader::Waiting && !polling {
                                // A key parked after the reader went idle:
                                // watch for its resolution from now on.
                                polling = self.poll_resumed(&others);
                            }
                        }
                    }
                }
                Some(event) = others.next() => match event {
                    Event::Read(Ok(ReadOutcome::Entries { lane, entries, pending })) => {
                        failures = 0;
                        if let Some(last) = entries.last() {
                            last.id().clone_into(&mut after[lane_index(lane)]);
                        }
                        if pending && first {
                            info!(entries = entries.len(), partition = self.partition.primary(), "reclaimed pending entries");
                            metrics::reclaimed(&w.unit, self.partition.category(), entries.len());
                        }
                        let (entries, foreign) = self.sort_out(entries);
                        if !foreign.is_empty() && !self.dead_letter_foreign(lane, foreign).await {
                            w.control.kill.cancel();
                            continue;
                        }
                        let (start, full) = self.dispatch(entries, pending);
                        runs.extend(self.admit(start).into_iter().map(|key| self.run_key(key)));
                        if full {
                            reader = Reader::Full;
                            others.push(Box::pin(async move {
                                self.room.notified().await;
                                Event::Retry
                            }));
                        } else {
                            others.push(self.read(after.clone()));
                        }
                    }
                    Event::Read(Ok(ReadOutcome::Idle(idle))) => {
                        failures = 0;
                        first = false;
                        let quiet = runs.is_empty() && self.state().keys.is_empty();
                        if quiet {
                            // Nothing in memory, nothing parked: wait like a
                            // per-key partition, and retire it when cold.
                            if let Some(exit) = w.wait_idle(&[(0, idle)], &mut reap_after, None).await {
                                return exit;
                            }
                            others.push(self.read(after.clone()));
                        } else {
                            reader = Reader::Waiting;
                            w.shared.waker.watch(w.watcher, w.bells(&[(0, idle)]), w.wake.clone());
                            others.push(Box::pin(async move {
                                w.wake.notified().await;
                                Event::Woken
                            }));
                            if !polling {
                                polling = self.poll_resumed(&others);
                            }
                        }
                    }
                    Event::Read(Ok(ReadOutcome::Gone | ReadOutcome::Halted { .. })) => {
                        if runs.is_empty() {
                            return Exit::Gone;
                        }
                        stopping = true;
                    }
                    Event::Read(Err(error)) if error.is_fenced() => {
                        info!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), "lease lost");
                        w.control.kill.cancel();
                    }
                    Event::Read(Err(error)) => {
                        failures += 1;
                        warn!(error = %ordo_core::contract::error::error_chain(&error), failures, "partition read failed; backing off");
                        let delay = w.shared.settings.backoff.delay(failures);
                        others.push(Box::pin(async move {
                            tokio::time::sleep(delay).await;
                            Event::Retry
                        }));
                    }
                    Event::Woken | Event::Retry => {
                        reader = Reader::Reading;
                        polling = false;
                        others.clear();
                        others.push(self.read(after.clone()));
                    }
                    Event::Resumed(resumed) => {
                        polling = false;
                        match resumed {
                            Ok(keys) => {
                                let start = self.resume(keys);
                                runs.extend(self.admit(start).into_iter().map(|key| self.run_key(key)));
                            }
                            Err(error) => warn!(error = %ordo_core::contract::error::error_chain(&error), "checking the parked keys failed"),
                        }
                        if reader == Reader::Waiting {
                            polling = self.poll_resumed(&others);
                        }
                    }
                },
                else => {
                    // Nothing to wait for: read.
                    reader = Reader::Reading;
                    others.push(self.read(after.clone()));
                }
            }
        }
    }

    /// Reads the parked and holding keys a previous owner left; returns
    /// the resolved keys whose held messages are to run.
    async fn take_over(&self) -> Result<Vec<Arc<str>>, Handled> {
        let w = self.worker;
        let parking = w
            .until_answered("reading the parked keys", true, || {
                w.held(self.partition).parking()
            })
            .await?
            .map_err(|_| Handled::Lost)?;
        let mut state = self.state();
        let mut start = Vec::new();
        for key in parking.holding {
            let mode = if parking.parked.contains(&key) {
                Mode::Parked
            } else {
                Mode::Holding
            };
            let mut entry = self.new_key(&key, mode);
            let key: Arc<str> = Arc::from(key);
            if mode == Mode::Holding {
                entry.running = true;
                start.push(key.clone());
            }
            state.keys.insert(key, entry);
        }
        Ok(start)
    }

    /// One fenced read: the pending entries after `after` (per lane, the
    /// last entry this owner got), then new ones.
    fn read(&self, after: [String; 2]) -> BoxFuture<'_, Event> {
        let w = self.worker;
        Box::pin(async move {
            let read = w
                .held(self.partition)
                .read_hashed(w.shared.settings.read_batch, &after)
                .await;
            Event::Read(read)
        })
    }

    /// The key of this partition that `entry` belongs to: its `key` field
    /// (the publish script writes it), else its envelope's key. `Err`,
    /// saying why, when it names none of this partition's keys (no key, a
    /// key that is not text, a key of another partition): it is in no
    /// key's order here, and can never run here.
    fn key_of(&self, entry: &StreamEntry) -> Result<Arc<str>, String> {
        let key = match entry.key() {
            Some(key) => key.to_owned(),
            None if entry.binary_fields().any(|(name, _)| name == "key") => {
                return Err("its `key` field is not UTF-8 text".to_owned());
            }
            None => match entry.decode() {
                Ok(envelope) => envelope
                    .partition_key
                    .ok_or_else(|| "it has no `key` field and its envelope names no key".to_owned())?,
                Err(error) => return Err(format!("it has no `key` field, and {}", error_chain(&error))),
            },
        };
        let home = self
            .worker
            .shared
            .settings
            .routing
            .partition_of(self.partition.category(), &key);
        if home != *self.partition.id() {
            return Err(format!(
                "its key `{}` belongs to partition `{}:{}`",
                ordo_core::contract::text::escaped(&key),
                home.category(),
                home.member()
            ));
        }
        Ok(Arc::from(key))
    }

    /// `entries` with the key of this partition each belongs to, and the
    /// entries of no key (with why).
    #[allow(clippy::type_complexity)]
    fn sort_out(
        &self,
        entries: Vec<StreamEntry>,
    ) -> (Vec<(Arc<str>, StreamEntry)>, Vec<(StreamEntry, String)>) {
        let mut keyed = Vec::with_capacity(entries.len());
        let mut foreign = Vec::new();
        for entry in entries {
            match self.key_of(&entry) {
                Ok(key) => keyed.push((key, entry)),
                Err(why) => foreign.push((entry, why)),
            }
        }
        (keyed, foreign)
    }

    /// Moves entries of no key of this partition (see [`Hashed::key_of`])
    /// to the partition's dead-letter stream, their fields as they were,
    /// and acknowledges them: like a plain consumer's unreadable entry, it
    /// is in no key's order, so nobody's key waits for an operator. A copy
    /// written by an owner that then lost its lease is written again by
    /// the next owner (at least once). `false` when the lease is gone.
    async fn dead_letter_foreign(&self, lane: Lane, foreign: Vec<(StreamEntry, String)>) -> bool {
        let w = self.worker;
        let dlq = self.partition.dlq();
        let acks = &self.acks[lane_index(lane)];
        for (entry, why) in foreign {
            let error = format!(
                "stream entry {} belongs to no key of hashed partition `{}`: {why}; dead-lettered without \
                 running",
                entry.id(),
                self.partition.label(),
            );
            let mut fields = vec![
                ("source_id", Value::from(entry.id())),
                ("group", Value::from(&*w.unit.group)),
                ("lane", Value::from(crate::owner::partition::lane_name(lane))),
                ("attempts", Value::from(0)),
                (
                    "error",
                    Value::from(
                        ordo_core::contract::text::capped(&error, ordo_core::contract::text::MAX_ERROR_TEXT)
                            .as_ref(),
                    ),
                ),
            ];
            fields.extend(crate::owner::parking::field_pairs(&entry));
            let added = w
                .until_answered("dead-lettering an entry of no key", false, || {
                    let fields = fields.clone();
                    let dlq = dlq.as_str();
                    async move {
                        let _: Value = w
                            .shared
                            .partitions
                            .client()
                            .xadd(dlq, false, None::<()>, "*", fields)
                            .await?;
                        Ok(())
                    }
                })
                .await;
            if !matches!(added, Ok(Ok(()))) {
                return false;
            }
            warn!(event = ordo_core::contract::log_events::MESSAGE_DEAD_LETTERED, id = entry.id(), dlq = %dlq,
                error = %ordo_core::contract::text::log_text(&error), "an entry of no key of this partition was dead-lettered");
            if w.ack(&Slot::default(), acks, &entry, false).await.is_none() {
                return false;
            }
        }
        true
    }

    /// Queues `entries` to their keys (or moves past them, for a key whose
    /// queue is full); returns the keys to start a run for, and whether
    /// memory is full (the reader then waits for [`Hashed::room`]).
    fn dispatch(&self, entries: Vec<(Arc<str>, StreamEntry)>, pending: bool) -> (Vec<Arc<str>>, bool) {
        let mut guard = self.state();
        let State {
            keys,
            in_memory,
            moved_past,
            moved_past_bytes,
            ..
        } = &mut *guard;
        let mut start = Vec::new();
        for (key, entry) in entries {
            // Queued, it may wait a while: in buffers of its own.
            let entry = entry.detached();
            let state = match keys.get_mut(&key) {
                Some(state) => state,
                None => keys
                    .entry(key.clone())
                    .or_insert(self.new_key(&key, Mode::Flowing)),
            };
            if state.queue.len() >= KEY_QUEUE || !state.moved_past.is_empty() {
                // Full, or behind entries moved past before.
                *moved_past += 1;
                *moved_past_bytes += entry.size();
                state.moved_past.push_back(Queued { entry, pending });
            } else {
                state.queue.push_back(Queued { entry, pending });
                *in_memory += 1;
            }
            if !state.running {
                state.running = true;
                start.push(key);
            }
        }
        guard.full = guard.over();
        (start, guard.full)
    }

    /// Of `keys` (their runs due), the ones whose run starts now, within
    /// the partition's bound on runs; the others wait their turn.
    fn admit(&self, keys: Vec<Arc<str>>) -> Vec<Arc<str>> {
        let mut state = self.state();
        state.ready.extend(keys);
        self.take_ready(&mut state)
    }

    /// A run ended: the keys whose run starts in its place.
    fn run_ended(&self) -> Vec<Arc<str>> {
        let mut state = self.state();
        state.runs = state.runs.saturating_sub(1);
        self.take_ready(&mut state)
    }

    fn take_ready(&self, state: &mut State) -> Vec<Arc<str>> {
        let bound = self.worker.shared.settings.max_concurrency.max(1);
        let mut start = Vec::new();
        while state.runs < bound {
            let Some(key) = state.ready.pop_front() else { break };
            state.runs += 1;
            start.push(key);
        }
        start
    }

    /// Marks `keys` resolved (their held messages run next); returns the
    /// ones to start a run for.
    fn resume(&self, keys: Vec<String>) -> Vec<Arc<str>> {
        let mut state = self.state();
        let mut start = Vec::new();
        for key in keys {
            let key: Arc<str> = Arc::from(key);
            if let Some(entry) = state.keys.get_mut(&key)
                && entry.mode == Mode::Parked
            {
                info!(key = %key, partition = self.partition.primary(), "parked key resolved; running its held messages");
                entry.mode = Mode::Holding;
                if !entry.running {
                    entry.running = true;
                    start.push(key);
                }
            }
        }
        start
    }

    /// Schedules a check of which parked keys an operator resolved, after
    /// the poll interval; `false` when no key is parked.
    fn poll_resumed(&self, others: &FuturesUnordered<BoxFuture<'w, Event>>) -> bool
    where
        Self: 'w,
    {
        let parked: Vec<String> = self
            .state()
            .keys
            .iter()
            .filter(|(_, key)| key.mode == Mode::Parked)
            .map(|(key, _)| key.to_string())
            .collect();
        if parked.is_empty() {
            return false;
        }
        let w = self.worker;
        let partition = self.partition;
        others.push(Box::pin(async move {
            tokio::time::sleep(w.shared.settings.poll_interval).await;
            let still = w.held(partition).still_parked(&parked).await;
            Event::Resumed(still.map(|still| {
                parked
                    .into_iter()
                    .zip(still)
                    .filter_map(|(key, parked)| (!parked).then_some(key))
                    .collect()
            }))
        }));
        true
    }

    /// What `key`'s run does next; a run that rests lets go of the key
    /// (and forgets a key with nothing left).
    fn next_step(&self, key: &Arc<str>) -> Step {
        let mut guard = self.state();
        let state = &mut *guard;
        let Some(mut entry) = state.keys.get_mut(key) else {
            return Step::Rest;
        };
        if entry.queue.is_empty() && !entry.moved_past.is_empty() {
            // The next queue's worth of the entries moved past, in order.
            let up = entry.moved_past.len().min(KEY_QUEUE);
            for queued in entry.moved_past.drain(..up) {
                state.moved_past -= 1;
                state.moved_past_bytes -= queued.entry.size();
                state.in_memory += 1;
                entry.queue.push_back(queued);
            }
            self.notify_room(state);
            entry = state.keys.get_mut(key).expect("the key whose queue just filled");
        }
        if let Some(front) = entry.queue.front() {
            if entry.mode == Mode::Flowing {
                return Step::Run(entry.queue.pop_front().expect("a front"));
            }
            // Parked or resolved and holding: behind what it holds.
            let lane = front.entry.lane();
            let mut batch = Vec::new();
            while entry.queue.front().is_some_and(|q| q.entry.lane() == lane) {
                batch.extend(entry.queue.pop_front());
            }
            return Step::Hold(lane, batch);
        }
        match entry.mode {
            Mode::Holding => Step::Held,
            Mode::Parked => {
                entry.running = false;
                Step::Rest
            }
            Mode::Flowing => {
                state.keys.remove(key);
                Step::Rest
            }
        }
    }

    /// `count` entries left memory (handled, or held aside).
    fn forget(&self, count: usize) {
        let mut state = self.state();
        state.in_memory = state.in_memory.saturating_sub(count);
        self.notify_room(&mut state);
    }

    /// Lets a reader waiting for room read again, when there is.
    fn notify_room(&self, state: &mut State) {
        if state.full && state.room() {
            state.full = false;
            self.room.notify_one();
        }
    }

    fn set_mode(&self, key: &Arc<str>, mode: Mode) {
        if let Some(entry) = self.state().keys.get_mut(key) {
            entry.mode = mode;
        }
    }

    /// Runs `key`'s messages one at a time, until it has nothing left to do.
    fn run_key(&self, key: Arc<str>) -> BoxFuture<'_, KeyEnd> {
        Box::pin(async move {
            let w = self.worker;
            let Some(slot) = self.state().keys.get(&key).map(|k| k.slot.clone()) else {
                return KeyEnd::Rested;
            };
            loop {
                if w.control.kill.is_cancelled() {
                    return KeyEnd::Lost;
                }
                if w.control.stop.is_cancelled() {
                    return KeyEnd::Stop;
                }
                match self.next_step(&key) {
                    Step::Rest => return KeyEnd::Rested,
                    Step::Run(queued) => {
                        let handled = w
                            .handle_entry(&slot, self.partition, &queued.entry, queued.pending)
                            .await;
                        match handled {
                            Handled::Done => {
                                if !self.ack(&slot, &queued.entry).await {
                                    return KeyEnd::Lost;
                                }
                            }
                            Handled::Halted => self.set_mode(&key, Mode::Parked),
                            Handled::Stop => return KeyEnd::Stop,
                            Handled::Lost => return KeyEnd::Lost,
                        }
                        self.forget(1);
                    }
                    Step::Hold(lane, batch) => {
                        let entries: Vec<&StreamEntry> = batch.iter().map(|q| &q.entry).collect();
                        let held = w
                            .until_answered("holding a parked key's messages", true, || {
                                w.held(self.partition).hold(&key, lane, &entries)
                            })
                            .await;
                        match held {
                            Ok(Ok(())) => self.forget(batch.len()),
                            Ok(Err(_)) | Err(Handled::Lost) => return KeyEnd::Lost,
                            Err(_) => return KeyEnd::Stop,
                        }
                    }
                    Step::Held => {
                        if let Some(end) = self.run_held(&key, &slot).await {
                            return end;
                        }
                    }
                }
            }
        })
    }

    /// Runs the next held message of resolved `key` (or finds it holds no
    /// more, and lets it flow).
    async fn run_held(&self, key: &Arc<str>, slot: &Slot) -> Option<KeyEnd> {
        let w = self.worker;
        let own = slot.own().expect("a key's slot");
        // An attempt of the key: a copy of this call that lands late (after
        // it was answered and the key went on) is refused, since the held
        // message's acknowledgement (or the end of the holding) closes it.
        let attempt = w.next_attempt();
        let next = w
            .until_answered("reading a resolved key's held messages", true, || {
                w.held(self.partition).held_next(key, own, attempt)
            })
            .await;
        let entry = match next {
            Ok(Ok(HeldNext::Entry(entry))) => entry,
            Ok(Ok(HeldNext::Parked)) => {
                self.set_mode(key, Mode::Parked);
                return None;
            }
            Ok(Ok(HeldNext::Done)) => {
                info!(key = %key, partition = self.partition.primary(), "resolved key's held messages all ran; it flows again");
                self.set_mode(key, Mode::Flowing);
                return None;
            }
            Ok(Err(_)) | Err(Handled::Lost) => return Some(KeyEnd::Lost),
            Err(_) => return Some(KeyEnd::Stop),
        };
        slot.set_held(true);
        let handled = w.handle_entry(slot, self.partition, &entry, true).await;
        slot.set_held(false);
        match handled {
            Handled::Done => {
                // Always closed (not only after a fenced command, as in the
                // lanes): the held-next call that fetched it is of this
                // attempt or an earlier one, and must not land after it.
                slot.take_fence_used();
                let close = w.last_attempt();
                slot.take_had_failures();
                let applied = slot.take_applied();
                let acked = w
                    .until_answered("acknowledging a held message", false, || {
                        w.held(self.partition)
                            .ack_held(key, own, entry.id(), close, applied.as_deref())
                    })
                    .await;
                match acked {
                    Ok(Ok(())) => None,
                    _ => Some(KeyEnd::Lost),
                }
            }
            Handled::Halted => {
                self.set_mode(key, Mode::Parked);
                None
            }
            Handled::Stop => Some(KeyEnd::Stop),
            Handled::Lost => Some(KeyEnd::Lost),
        }
    }

    /// Acknowledges a handled lane entry of a key (trimming the lane every
    /// [`TRIM_EVERY`] acknowledgements); `false` when the lease is gone.
    async fn ack(&self, slot: &Slot, entry: &StreamEntry) -> bool {
        let w = self.worker;
        let trim = {
            let mut state = self.state();
            state.acked += 1;
            state.acked.is_multiple_of(TRIM_EVERY)
        };
        let mut names = self.acks[lane_index(entry.lane())].clone();
        if let Some(own) = slot.own() {
            names = names.closing_in(own);
        }
        w.ack(slot, &names, entry, trim).await.is_some()
    }
}
