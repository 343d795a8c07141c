//! Group commit of acknowledgements.
//!
//! Each partition worker still waits for its own acknowledgement before it
//! starts its next message, so after a failover only a key's in-flight
//! message runs again. What changes is how acknowledgements travel: the
//! ones that workers of different partitions have in flight at the same
//! moment go to Redis together, in one `ack.lua` call per node, each checked
//! against its own lease and done or refused on its own (see
//! [`crate::owner::ack`]), as databases commit the log records of many transactions
//! with one write.
//!
//! It never waits for company: an acknowledgement that finds a call slot
//! free and nobody queued is sent at once, alone, by its own worker (no
//! hand-over to another task: a lone acknowledgement costs what it did
//! before). Only while [`CALLS_IN_FLIGHT`] calls are out do
//! acknowledgements queue, and the committer task's next call takes all of
//! them (up to [`MAX_BATCH`]). So the batches grow with the load.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::owner::ack::{Ack, Acked};
use crate::owner::partition::Partitions;

/// Calls out at once before acknowledgements queue for the next one: two,
/// so one call's round trip overlaps Redis running the other.
pub(crate) const CALLS_IN_FLIGHT: usize = 2;

/// The most acknowledgements one call takes.
pub(crate) const MAX_BATCH: usize = 256;

/// A handle to the committer task, which every worker reaches through the
/// consumer's shared state.
#[derive(Debug, Clone)]
pub(crate) struct GroupCommit {
    requests: mpsc::UnboundedSender<Request>,
    /// The call slots, shared by the committer and the workers' lone calls.
    slots: Arc<Semaphore>,
    /// Acknowledgements sent to the committer and not yet taken into a call.
    queued: Arc<AtomicUsize>,
    partitions: Partitions,
}

#[derive(Debug)]
struct Request {
    ack: Ack,
    reply: oneshot::Sender<Acked>,
}

impl GroupCommit {
    /// Starts the committer, sending acknowledgements through `partitions`
    /// until `stop` is cancelled (once the workers stopped) or every handle
    /// is dropped.
    pub(crate) fn spawn(partitions: Partitions, stop: CancellationToken) -> (Self, JoinHandle<()>) {
        let (requests, receiver) = mpsc::unbounded_channel();
        let handle = Self {
            requests,
            slots: Arc::new(Semaphore::new(CALLS_IN_FLIGHT)),
            queued: Arc::default(),
            partitions,
        };
        // The committer holds no sender: the channel closes with the last handle.
        let committer = commit(
            handle.slots.clone(),
            handle.queued.clone(),
            handle.partitions.clone(),
            receiver,
        );
        let task = tokio::spawn(async move {
            tokio::select! {
                () = committer => {}
                () = stop.cancelled() => {}
            }
        });
        (handle, task)
    }

    /// Sends `ack` with whatever else is waiting and returns its own
    /// outcome: done (whether its primary lane has entries waiting), refused
    /// ([`Error::Fenced`]), or the error of the call that carried it (it may
    /// or may not be done; sending it again is harmless).
    pub(crate) async fn ack(&self, ack: Ack) -> Acked {
        if self.queued.load(Ordering::Acquire) == 0
            && let Ok(slot) = self.slots.clone().try_acquire_owned()
        {
            let outcome = Box::pin(self.partitions.acknowledge(std::slice::from_ref(&ack))).await;
            drop(slot);
            return outcome?
                .pop()
                .ok_or_else(|| Error::protocol("group commit", "no outcome for the acknowledgement"))?;
        }
        let (reply, answer) = oneshot::channel();
        self.queued.fetch_add(1, Ordering::AcqRel);
        if self.requests.send(Request { ack, reply }).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(stopped());
        }
        answer.await.map_err(|_| stopped())?
    }
}

/// The committer: takes every acknowledgement queued (at least one) as soon
/// as a call slot is free, and sends them in one call on a task of its own.
async fn commit(
    slots: Arc<Semaphore>,
    queued: Arc<AtomicUsize>,
    partitions: Partitions,
    mut requests: mpsc::UnboundedReceiver<Request>,
) {
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = requests.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match requests.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        queued.fetch_sub(batch.len(), Ordering::AcqRel);
        let (acks, replies): (Vec<Ack>, Vec<_>) = batch
            .into_iter()
            .map(|request| (request.ack, request.reply))
            .unzip();
        let partitions = partitions.clone();
        tokio::spawn(async move {
            let result = partitions.acknowledge(&acks).await;
            drop(slot);
            match result {
                Ok(outcomes) => {
                    for (reply, outcome) in replies.into_iter().zip(outcomes) {
                        // A worker that stopped waiting (killed) has no use for it.
                        let _ = reply.send(outcome);
                    }
                }
                Err(error) => {
                    for reply in replies {
                        let _ = reply.send(Err(error.again()));
                    }
                }
            }
        });
    }
}

fn stopped() -> Error {
    Error::protocol("group commit", "the committer stopped before answering")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fred::interfaces::{ClientLike, FunctionInterface, StreamsInterface};
    use ordo_core::contract::key::Lane;
    use ordo_testkit::Redis;
    use tokio::task::JoinSet;

    use super::*;
    use crate::owner::lease::Lease;
    use crate::store::keys::PartitionKeys;

    /// `calls` of `cmdstat_fcall` in `INFO commandstats`.
    async fn fcall_calls(partitions: &Partitions) -> u64 {
        let info: String = partitions
            .client()
            .info(Some(fred::types::InfoKind::CommandStats))
            .await
            .unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_fcall:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
    }

    /// The partitions of `redis` through a pool of `connections`.
    async fn partitions_of(redis: &Redis, connections: usize) -> Partitions {
        let pool = crate::net::connection::test_pool(&redis.url(), connections).await;
        Partitions::new(pool, "a", Duration::from_secs(60))
    }

    /// The number of entries of `partition`'s primary lane pending for `G`.
    async fn pending(partitions: &Partitions, partition: &PartitionKeys) -> Option<i64> {
        let pending: fred::types::Value = partitions
            .client()
            .xpending(partition.primary(), "G", ())
            .await
            .unwrap();
        pending.into_array().first().and_then(fred::types::Value::as_i64)
    }

    /// Owns `count` partitions with one entry each, read: ready to acknowledge.
    async fn owned(partitions: &Partitions, count: usize) -> Vec<(PartitionKeys, Lease, String)> {
        let mut owned = Vec::new();
        for n in 0..count {
            let partition = PartitionKeys::new("groupcommit", &format!("k{n}"), "backfill");
            let id: String = partitions
                .client()
                .xadd(partition.primary(), false, None, "*", ("type", "T"))
                .await
                .unwrap();
            let lease = partitions.acquire("G", &partition).await.unwrap().unwrap();
            partitions.read(&lease, "G", &partition, 1).await.unwrap();
            owned.push((partition, lease, id));
        }
        owned
    }

    fn ack((partition, lease, id): &(PartitionKeys, Lease, String)) -> Ack {
        Ack::new(lease, "G", partition, Lane::Primary, &[id.as_str()])
    }

    #[tokio::test]
    async fn acknowledgements_in_flight_together_travel_in_one_call() {
        let redis = Redis::start().unwrap();
        let partitions = partitions_of(&redis, 2).await;
        let mut owned = owned(&partitions, 65).await;
        let (commit, _task) = GroupCommit::spawn(partitions.clone(), CancellationToken::new());

        // A lone acknowledgement goes at once, alone (and loads the script).
        let lone = owned.pop().unwrap();
        assert!(!commit.ack(ack(&lone)).await.unwrap());
        let before = fcall_calls(&partitions).await;

        // 64 sent at the same moment (none answered before all are sent, on
        // this one-thread runtime): the first finds a call slot free and goes
        // alone, the others queue for the committer's call.
        let mut sent = JoinSet::new();
        for partition in &owned {
            let (commit, ack) = (commit.clone(), ack(partition));
            sent.spawn(async move { commit.ack(ack).await });
        }
        while let Some(outcome) = sent.join_next().await {
            assert!(!outcome.unwrap().unwrap());
        }
        assert_eq!(fcall_calls(&partitions).await - before, 2);
        for (partition, _, _) in &owned {
            assert_eq!(pending(&partitions, partition).await, Some(0));
        }
    }

    /// The acknowledgement makes its arguments again when the server lost
    /// the function library (a restart without persistence): it loads the
    /// library and is done, not refused or lost.
    #[tokio::test]
    async fn an_acknowledgement_after_the_library_was_lost_loads_it_and_is_done() {
        let redis = Redis::start().unwrap();
        let partitions = partitions_of(&redis, 1).await;
        let owned = owned(&partitions, 1).await;
        let (commit, _task) = GroupCommit::spawn(partitions.clone(), CancellationToken::new());
        let before = fcall_calls(&partitions).await;
        partitions
            .client()
            .next()
            .function_flush::<()>(false)
            .await
            .unwrap();

        assert!(!commit.ack(ack(&owned[0])).await.unwrap());
        assert_eq!(
            pending(&partitions, &owned[0].0).await,
            Some(0),
            "the entry is acknowledged"
        );
        // The refused call, then the call again once loaded.
        assert_eq!(fcall_calls(&partitions).await - before, 2);
    }
}
