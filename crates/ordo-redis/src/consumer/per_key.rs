//! The runner of a partition of one key: reads under the lease and handles
//! one message at a time in id order (pending entries first: that is the
//! reclaim of a previous owner's unacknowledged entries), acknowledging each
//! message before starting the next (so after a crash only the in-flight
//! message runs again), checking the primary lane before every backfill
//! message. A poison message halts the partition. The hashed partitions'
//! runner ([`super::hashed`]) stands beside it over the same
//! [`super::delivery`].
//!
//! With the handler's `ack_window = N` (0 by default), it runs the next
//! message of its read batch while up to N acknowledgements are
//! unanswered, and reads again (or halts, or stops) only once every one is
//! answered: a hot key no longer waits a round trip between messages. The
//! acknowledgements go out half a window at a time, merged into one (one
//! fence check and one `XACK` of their ids), while it runs the next half;
//! after a failover up to N messages run again, in order, and what their
//! fenced commits applied is kept per message until its acknowledgement,
//! so those effects land once (`ordo-model check --config window`).

use std::time::Instant;

use futures_util::stream::{FuturesOrdered, StreamExt};
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::Lane;
use tracing::{debug, info, warn};

use super::delivery::{Exit, Handled, Slot, Worker};
use super::metrics;
use crate::error::Error;
use crate::owner::ack::Ack;
use crate::owner::partition::{Idle, ReadOutcome, StreamEntry};
use crate::store::keys::PartitionKeys;

/// The runner of a per-key partition (or of a process manager's unit), for
/// the time its worker runs.
pub(super) struct PerKey<'w> {
    worker: &'w Worker,
    /// The one sequence of messages of the partition.
    slot: Slot,
}

/// What handling a batch came to.
enum Flow {
    /// Keep reading.
    Continue,
    /// The partition halted on a poison message.
    Halted,
    /// Stop requested between messages.
    Stop,
    /// The lease is gone.
    Lost,
}

/// What one pass over the unit's partitions came to.
enum Pass {
    Worked,
    Halted,
    Idle(Vec<(usize, Idle)>),
    Gone,
    Exit(Exit),
}

impl<'w> PerKey<'w> {
    pub(super) fn new(worker: &'w Worker) -> Self {
        Self {
            worker,
            slot: Slot::default(),
        }
    }

    /// Runs until stopped, killed, or the partition is gone.
    pub(super) async fn run(&self) -> Exit {
        let mut failures = 0;
        // No reap attempt before this (set when one found the partition busy).
        let mut reap_after: Option<Instant> = None;
        // The first pass after acquiring reclaims what a previous owner left.
        let mut first = true;
        // Per partition, whether its last read filled its batch: its next
        // read is then tried as a transaction first (see `Held::read`).
        let mut full = vec![false; self.worker.unit.partitions.len()];
        // A command partition's door: its instance's own commands, run in
        // place (see `super::local`).
        let mut door = (self.worker.subscription.kind() == HandlerKind::Command).then(|| {
            self.worker
                .shared
                .locals
                .open(self.worker.unit.partitions[0].primary())
        });
        loop {
            if self.worker.control.kill.is_cancelled() {
                return Exit::Lost;
            }
            if self.worker.control.stop.is_cancelled() {
                return Exit::Released;
            }
            // Offered while the partition was idle: before anything read later.
            if let Some(door) = door.as_mut()
                && let Some(exit) = Box::pin(self.worker.run_queued(door)).await
            {
                return exit;
            }
            // Boxed while it runs (once per read batch): an idle worker's
            // task then keeps only the small state of its wait, not the
            // pass's (the read, the handler's attempt, the acknowledgements):
            // about 2 KB instead of 12 KB per idle owned partition.
            let passed = Box::pin(self.pass(&mut first, &mut full)).await;
            // Offers are taken while the partition flows (they run before
            // the next read), not while it is halted.
            if let Some(door) = door.as_ref() {
                door.set_open(!matches!(passed, Ok(Pass::Halted)));
            }
            match passed {
                Ok(Pass::Worked) => failures = 0,
                Ok(Pass::Halted) => {
                    failures = 0;
                    // The operator's decision clears the halt record; the
                    // next read sees it.
                    self.worker.pause(self.worker.shared.settings.poll_interval).await;
                }
                Ok(Pass::Idle(idle)) => {
                    failures = 0;
                    if let Some(exit) = self.worker.wait_idle(&idle, &mut reap_after, door.as_mut()).await {
                        return exit;
                    }
                }
                Ok(Pass::Gone) => return Exit::Gone,
                Ok(Pass::Exit(exit)) => return exit,
                Err(error) if error.is_fenced() => {
                    info!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), "lease lost");
                    return Exit::Lost;
                }
                Err(error) => {
                    failures += 1;
                    warn!(error = %ordo_core::contract::error::error_chain(&error), failures, "partition read failed; backing off");
                    self.worker
                        .pause(self.worker.shared.settings.backoff.delay(failures))
                        .await;
                }
            }
        }
    }

    /// One read of every partition of the unit, handling what it returns.
    async fn pass(&self, first: &mut bool, full: &mut [bool]) -> Result<Pass, Error> {
        let mut worked = false;
        // Kept while the worker waits for a ring: sized to the partitions,
        // not grown (to four) as it is filled.
        let mut idle: Vec<(usize, Idle)> = Vec::with_capacity(self.worker.unit.partitions.len());
        let mut gone = 0;
        let batch = self.worker.shared.settings.read_batch;
        for (index, partition) in self.worker.unit.partitions.iter().enumerate() {
            let outcome = self.worker.held(partition).read(batch, full[index]).await?;
            full[index] = matches!(&outcome, ReadOutcome::Entries { entries, .. } if entries.len() >= batch);
            match outcome {
                ReadOutcome::Entries {
                    lane,
                    entries,
                    pending,
                } => {
                    if pending && *first {
                        info!(
                            entries = entries.len(),
                            partition = partition.primary(),
                            "reclaimed pending entries"
                        );
                        metrics::reclaimed(&self.worker.unit, partition.category(), entries.len());
                    }
                    match self.handle_batch(partition, lane, entries, pending).await {
                        Flow::Continue => worked = true,
                        Flow::Halted => return Ok(Pass::Halted),
                        Flow::Stop => return Ok(Pass::Exit(Exit::Released)),
                        Flow::Lost => return Ok(Pass::Exit(Exit::Lost)),
                    }
                }
                ReadOutcome::Halted { head } => {
                    debug!(%head, partition = partition.primary(), "partition is halted");
                    return Ok(Pass::Halted);
                }
                ReadOutcome::Idle(state) => idle.push((index, state)),
                ReadOutcome::Gone => gone += 1,
            }
        }
        *first = false;
        if worked {
            Ok(Pass::Worked)
        } else if gone == self.worker.unit.partitions.len() {
            Ok(Pass::Gone)
        } else {
            Ok(Pass::Idle(idle))
        }
    }

    /// Handles a batch in order, acknowledging each message before the next.
    /// `pending`: the entries were delivered before (and may have failed
    /// attempts on record).
    async fn handle_batch(
        &self,
        partition: &PartitionKeys,
        lane: Lane,
        entries: Vec<StreamEntry>,
        pending: bool,
    ) -> Flow {
        let mut primary_waiting = false;
        // The names every acknowledgement of this batch touches, built once.
        let acks = Ack::new(&self.worker.lease, &self.worker.unit.group, partition, lane, &[]);
        let window = self.worker.ack_window();
        // With a window: the acknowledgements of handled messages not sent
        // yet, merged into one (one `XACK` of their ids, one fence check);
        // the ones sent and not answered yet, each with how many messages
        // it acknowledges; and how many messages are in either.
        let mut open: Option<Ack> = None;
        let mut unanswered = FuturesOrdered::new();
        let mut unconfirmed = 0;
        let send = |ack: Ack| {
            let messages = ack.len();
            async move { (self.worker.send_ack(ack).await, messages) }
        };
        let last = entries.len().saturating_sub(1);
        let flow = 'batch: {
            for (index, entry) in entries.into_iter().enumerate() {
                if self.worker.control.stop.is_cancelled() {
                    break 'batch Flow::Stop;
                }
                // The read checked the primary lane before the first backfill
                // entry; each acknowledgement checks it before the next one.
                if lane == Lane::Backfill && primary_waiting {
                    break 'batch Flow::Continue;
                }
                let handling = self.worker.handle_entry(&self.slot, partition, &entry, pending);
                let handled = if unanswered.is_empty() {
                    handling.await
                } else {
                    // Answers are taken as they come, while the handler
                    // runs: a call's slot (group commit) is free for other
                    // partitions' acknowledgements once it is answered, not
                    // once this worker looks again.
                    tokio::pin!(handling);
                    let mut lost = false;
                    let handled = loop {
                        tokio::select! {
                            biased;
                            handled = &mut handling => break handled,
                            Some((answer, messages)) = unanswered.next() => {
                                unconfirmed -= messages;
                                match answer {
                                    Some(waiting) => primary_waiting = waiting,
                                    None => lost = true,
                                }
                            }
                        }
                    };
                    if lost {
                        break 'batch Flow::Lost;
                    }
                    handled
                };
                match handled {
                    Handled::Done => {}
                    Handled::Halted => break 'batch Flow::Halted,
                    Handled::Stop => break 'batch Flow::Stop,
                    Handled::Lost => break 'batch Flow::Lost,
                }
                let ack = self.worker.ack_of(&self.slot, &acks, &entry, index == last);
                if window == 0 {
                    // Answered before the next message starts.
                    match self.worker.send_ack(ack).await {
                        Some(waiting) => primary_waiting = waiting,
                        None => break 'batch Flow::Lost,
                    }
                    continue;
                }
                unconfirmed += 1;
                let merged = match open.take() {
                    None => ack,
                    Some(mut merged) => match merged.merge(ack) {
                        Ok(()) => merged,
                        Err(ack) => {
                            unanswered.push_back(send(merged));
                            ack
                        }
                    },
                };
                // Half a window goes out while the worker runs the other
                // half (the call goes out when the next handler run starts,
                // beside which the answers are awaited).
                if merged.len() >= window.div_ceil(2) {
                    unanswered.push_back(send(merged));
                } else {
                    open = Some(merged);
                }
                // Waiting for the oldest half sent: the messages not sent yet
                // stay together (they go out alone only when nothing is out,
                // which a half window sent as soon as it was full rules out).
                while unconfirmed > window {
                    if unanswered.is_empty()
                        && let Some(merged) = open.take()
                    {
                        unanswered.push_back(send(merged));
                    }
                    match unanswered.next().await {
                        Some((Some(waiting), messages)) => {
                            primary_waiting = waiting;
                            unconfirmed -= messages;
                        }
                        _ => break 'batch Flow::Lost,
                    }
                }
            }
            Flow::Continue
        };
        // Every acknowledgement is sent and answered before the worker reads
        // again, halts or lets the lease go.
        if let Some(merged) = open.take() {
            unanswered.push_back(send(merged));
        }
        let mut lost = false;
        while let Some((answer, _)) = unanswered.next().await {
            lost |= answer.is_none();
        }
        if lost { Flow::Lost } else { flow }
    }
}
