//! Commands run in place: when the instance that sends a command owns its
//! command partition, the command goes straight to the partition's worker,
//! with no Redis call at all.
//!
//! The worker of a command partition opens a door ([`LocalOwners::open`])
//! for as long as it holds the lease, open to offers while the partition
//! flows (not while it is halted). The router offers a command to the door
//! ([`LocalOwners::offer`]) only when no command of the same partition it
//! sent through Redis is still waiting for its outcome, so a command run in
//! place never overtakes one of its own sender's. The worker runs offered
//! commands before its next read of the stream (while it waits idle, at
//! once), one at a time with the stream's entries, under the lease: a
//! command run in place comes after every entry of the partition the
//! worker read before it was offered, and is concurrent with those still
//! being published. A command it could not run (the lease lost, a failed
//! attempt) goes back to the router, which sends it through Redis.
//!
//! Only commands with a generated id take this path: a caller's id may be
//! resent from another instance, and its deduplication lives with the
//! partition stream and the outcome record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ordo_core::contract::command::CommandOutcome;
use ordo_core::contract::message::Envelope;
use tokio::sync::{mpsc, oneshot};

/// A command offered to the worker of its partition.
#[derive(Debug)]
pub(crate) struct LocalCommand {
    /// The command, as it would be published.
    pub(crate) envelope: Box<Envelope>,
    /// Where its run's result goes.
    pub(crate) done: oneshot::Sender<LocalDone>,
}

/// What became of a [`LocalCommand`].
#[derive(Debug)]
pub(crate) enum LocalDone {
    /// It ran: its outcome.
    Ran(CommandOutcome),
    /// It did not run to an outcome here (the lease went, an attempt
    /// failed): send it through Redis.
    NotRun(Box<Envelope>),
}

/// One worker's door.
#[derive(Debug)]
struct Door {
    queue: mpsc::UnboundedSender<LocalCommand>,
    open: Arc<AtomicBool>,
    /// Tells this door from a later one of the same partition.
    number: u64,
}

/// The doors of the command partitions this instance's workers hold, by
/// primary stream name.
#[derive(Debug, Default)]
pub(crate) struct LocalOwners {
    doors: Mutex<HashMap<String, Door>>,
    opened: std::sync::atomic::AtomicU64,
}

/// A worker's side of its door: the queue it reads and whether it takes
/// offers. Dropping it closes the door (commands still queued go back).
#[derive(Debug)]
pub(crate) struct OpenDoor {
    owners: Arc<LocalOwners>,
    partition: String,
    number: u64,
    pub(crate) queue: mpsc::UnboundedReceiver<LocalCommand>,
    open: Arc<AtomicBool>,
}

impl LocalOwners {
    /// Opens the door of `partition` for its worker (replacing a door left
    /// by an earlier worker of it).
    pub(crate) fn open(self: &Arc<Self>, partition: &str) -> OpenDoor {
        let (sender, queue) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicBool::new(false));
        let number = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
        self.doors.lock().unwrap_or_else(PoisonError::into_inner).insert(
            partition.to_owned(),
            Door {
                queue: sender,
                open: Arc::clone(&open),
                number,
            },
        );
        OpenDoor {
            owners: Arc::clone(self),
            partition: partition.to_owned(),
            number,
            queue,
            open,
        }
    }

    /// Queues `command` for the worker of `partition` when one holds it
    /// here and takes offers; gives it back otherwise.
    pub(crate) fn offer(&self, partition: &str, command: LocalCommand) -> Result<(), LocalCommand> {
        let doors = self.doors.lock().unwrap_or_else(PoisonError::into_inner);
        match doors.get(partition) {
            Some(door) if door.open.load(Ordering::SeqCst) => door.queue.send(command).map_err(|e| e.0),
            _ => Err(command),
        }
    }
}

impl OpenDoor {
    /// Opens the door to offers, or closes it (a halted partition).
    pub(crate) fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::SeqCst);
    }
}

impl Drop for OpenDoor {
    fn drop(&mut self) {
        self.open.store(false, Ordering::SeqCst);
        {
            let mut doors = self.owners.doors.lock().unwrap_or_else(PoisonError::into_inner);
            if doors
                .get(&self.partition)
                .is_some_and(|door| door.number == self.number)
            {
                doors.remove(&self.partition);
            }
        }
        self.queue.close();
        while let Ok(command) = self.queue.try_recv() {
            let _ = command.done.send(LocalDone::NotRun(command.envelope));
        }
    }
}
