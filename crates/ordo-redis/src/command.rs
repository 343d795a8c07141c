//! Sending commands to the owner of their key, and receiving their
//! outcomes: the Redis broker's [`CommandRouter`].
//!
//! A command is published to its command partition (`{order.commands:c-1}`)
//! with the publish script, its id as the message id: a resend of the same
//! id within the window is not appended twice. The partition's owner runs
//! it like a message of any partition (lease, fence, failover), records the
//! outcome under the id and pushes it to the sender's reply list
//! (`{ordo:replies:<instance>}`, named in the command's
//! [`REPLY_TO_METADATA`]). One task per broker reads that list with
//! `BLMPOP` on a connection of its own and hands each outcome to the call
//! waiting for it. A call also looks at the outcome record now and then:
//! a resend (from this instance or another) whose first send is still
//! running or done gets its outcome there, and so does a call whose reply
//! was lost (a Redis failover).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::{ClientLike, ListInterface};
use fred::types::lists::LMoveDirection;
use ordo_core::contract::broker::Publication;
use ordo_core::contract::command::{
    CommandOutcome, CommandRequest, CommandRouter, REPLY_TO_METADATA, SendFailure, SendFuture,
};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::broker::RedisBroker;
use crate::consumer::local::{LocalCommand, LocalDone, LocalOwners};
use crate::error::Result;
use crate::net::connection;
use crate::net::secret::SecretUrl;
use crate::net::tls::TlsFiles;
use crate::store::keys::{self, PartitionKeys};
use crate::store::replies;

/// One outcome on a reply list.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Reply {
    /// The command id.
    pub(crate) id: String,
    /// Its outcome.
    pub(crate) outcome: CommandOutcome,
}

/// The first look at the outcome record, after the reply had a fair
/// chance; later looks back off to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(100);
const POLL_MAX: Duration = Duration::from_secs(1);

/// How long one `BLMPOP` blocks (then the reader checks it is still wanted).
const BLOCK_SECONDS: f64 = 0.5;

/// Outcomes read per `BLMPOP`.
const POP_COUNT: i64 = 512;

/// The calls waiting for an outcome, by command id (several calls may wait
/// for one id: a caller's concurrent resends).
type Waiters = Mutex<HashMap<String, Vec<oneshot::Sender<CommandOutcome>>>>;

/// This instance's reply list and the calls waiting on it; the reader task
/// starts with the first call.
#[derive(Debug)]
pub(crate) struct Replies {
    list: String,
    waiters: Arc<Waiters>,
    url: SecretUrl,
    tls: TlsFiles,
    reader: Mutex<Option<Client>>,
    /// Per command partition, the sends through Redis still waiting for
    /// their outcome: while any is, a command of the partition is not run
    /// in place (it would overtake it).
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Replies {
    /// The replies of `instance`, read over `url`.
    pub(crate) fn new(instance: &str, url: SecretUrl, tls: TlsFiles) -> Self {
        Self {
            list: keys::replies(instance),
            waiters: Arc::default(),
            url,
            tls,
            reader: Mutex::new(None),
            in_flight: Arc::default(),
        }
    }

    /// Whether a send of `partition` through Redis waits for its outcome.
    fn in_flight(&self, partition: &str) -> bool {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(partition)
    }

    /// Counts a send of `partition` through Redis until the guard drops.
    fn sending(&self, partition: &str) -> Sending {
        *self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(partition.to_owned())
            .or_default() += 1;
        Sending {
            partition: partition.to_owned(),
            in_flight: Arc::clone(&self.in_flight),
        }
    }

    /// Registers a call waiting for `id`'s outcome; starts the reader.
    fn wait(&self, id: &str) -> Result<Waiting> {
        self.start_reader()?;
        let (sender, receiver) = oneshot::channel();
        self.waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(id.to_owned())
            .or_default()
            .push(sender);
        Ok(Waiting {
            id: id.to_owned(),
            receiver,
            waiters: Arc::clone(&self.waiters),
        })
    }

    fn start_reader(&self) -> Result<()> {
        let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        if reader.is_some() {
            return Ok(());
        }
        let client = connection::blocking_builder(self.url.expose(), &self.tls)?.build()?;
        connection::connect_in_background(&client);
        tokio::spawn(read(
            client.clone(),
            self.list.clone(),
            Arc::downgrade(&self.waiters),
        ));
        *reader = Some(client);
        Ok(())
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        let reader = self
            .reader
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(client) = reader
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            // Interrupts the blocked read; the task then finds nobody
            // waiting. Outside a runtime the reader's task is gone with it.
            runtime.spawn(async move {
                let _ = client.quit().await;
            });
        }
    }
}

/// A send through Redis waiting for its outcome (see [`Replies::sending`]).
struct Sending {
    partition: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for Sending {
    fn drop(&mut self) {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.partition) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.partition);
            }
        }
    }
}

/// One call's wait for an outcome; leaves the waiters when dropped.
struct Waiting {
    id: String,
    receiver: oneshot::Receiver<CommandOutcome>,
    waiters: Arc<Waiters>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut waiters = self.waiters.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(list) = waiters.get_mut(&self.id) {
            list.retain(|sender| !sender.is_closed());
            if list.is_empty() {
                waiters.remove(&self.id);
            }
        }
    }
}

/// Reads `list` until nobody can wait on it any more, handing each
/// outcome to the calls waiting for its id.
async fn read(client: Client, list: String, waiters: Weak<Waiters>) {
    let mut failures = 0u32;
    loop {
        if waiters.strong_count() == 0 {
            let _ = client.quit().await;
            return;
        }
        let popped: std::result::Result<Option<(String, Vec<String>)>, fred::error::Error> = client
            .blmpop(
                BLOCK_SECONDS,
                list.as_str(),
                LMoveDirection::Left,
                Some(POP_COUNT),
            )
            .await;
        let replies = match popped {
            Ok(popped) => {
                failures = 0;
                popped.map(|(_, replies)| replies).unwrap_or_default()
            }
            // The client's own clock ran out on a block Redis was about to
            // end empty-handed: an idle wait, not a failure.
            Err(error) if *error.kind() == fred::error::ErrorKind::Timeout => continue,
            Err(error) => {
                let error = crate::error::Error::from(error);
                let Some(waiters) = waiters.upgrade() else { return };
                drop(waiters);
                failures = failures.saturating_add(1);
                warn!(error = %ordo_core::contract::error::error_chain(&error), failures, list, "reading command replies failed; retrying (waiting calls also look at the outcome records)");
                tokio::time::sleep(Duration::from_millis(100).saturating_mul(failures.min(20))).await;
                continue;
            }
        };
        let Some(waiters) = waiters.upgrade() else { return };
        for text in replies {
            let reply: Reply = match serde_json::from_str(&text) {
                Ok(reply) => reply,
                Err(error) => {
                    warn!(%error, list, "a command reply that does not decode was dropped");
                    continue;
                }
            };
            let senders = waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&reply.id);
            match senders {
                Some(senders) => {
                    for sender in senders {
                        let _ = sender.send(reply.outcome.clone());
                    }
                }
                None => debug!(
                    id = reply.id,
                    "a command reply nobody waits for (timed out) was dropped"
                ),
            }
        }
    }
}

/// The Redis broker's [`CommandRouter`].
#[derive(Debug, Clone)]
pub(crate) struct RedisCommands {
    broker: RedisBroker,
    replies: Arc<Replies>,
    locals: Arc<LocalOwners>,
}

impl RedisCommands {
    pub(crate) fn new(broker: RedisBroker, replies: Arc<Replies>, locals: Arc<LocalOwners>) -> Self {
        Self {
            broker,
            replies,
            locals,
        }
    }

    /// Runs `envelope` in place when this instance's worker holds its
    /// partition and may run it now (see [`crate::consumer::local`]):
    /// `Ok(Some)` with its outcome; `Ok(None)` (with the envelope given
    /// back) when it is to be sent through Redis.
    async fn in_place(
        &self,
        partition: &str,
        envelope: Envelope,
        timeout: Duration,
    ) -> std::result::Result<std::result::Result<CommandOutcome, Envelope>, SendFailure> {
        if self.replies.in_flight(partition) {
            return Ok(Err(envelope));
        }
        let (done, ran) = oneshot::channel();
        let kept = envelope.clone();
        let command = LocalCommand {
            envelope: Box::new(envelope),
            done,
        };
        if let Err(command) = self.locals.offer(partition, command) {
            return Ok(Err(*command.envelope));
        }
        match tokio::time::timeout(timeout, ran).await {
            Ok(Ok(LocalDone::Ran(outcome))) => Ok(Ok(outcome)),
            Ok(Ok(LocalDone::NotRun(envelope))) => Ok(Err(*envelope)),
            // The worker was aborted with it (a kill): it may have run.
            Ok(Err(_)) => Ok(Err(kept)),
            Err(_) => Err(SendFailure::TimedOut(timeout)),
        }
    }

    async fn send_now(&self, request: CommandRequest) -> std::result::Result<CommandOutcome, SendFailure> {
        let failed = |error: crate::error::Error| SendFailure::Broker(Box::new(error));
        let client: &Pool = self.broker.client();
        let partition = PartitionKeys::new(&request.category, &request.key, self.broker.backfill_suffix());
        let outcome_key = partition.outcome(&request.envelope.id);
        if request.caller_id
            && let Some(recorded) = replies::outcome(client, &outcome_key).await.map_err(failed)?
        {
            return serde_json::from_str(&recorded).map_err(SendFailure::Unreadable);
        }
        let mut envelope = request.envelope;
        if !request.caller_id {
            match self
                .in_place(partition.primary(), envelope, request.timeout)
                .await?
            {
                Ok(outcome) => return Ok(outcome),
                Err(back) => envelope = back,
            }
        }
        let _sending = self.replies.sending(partition.primary());
        let mut waiting = self.replies.wait(&envelope.id).map_err(failed)?;
        envelope
            .metadata
            .insert(REPLY_TO_METADATA.to_owned(), self.replies.list.clone());
        let publication = Publication::to_partition(request.key, Lane::Primary, envelope);
        self.broker
            .publish_command(&publication, request.dedup_window)
            .await
            .map_err(|error| SendFailure::Broker(Box::new(error)))?;
        let deadline = tokio::time::Instant::now() + request.timeout;
        let mut poll = POLL_FIRST;
        let mut open = true;
        loop {
            let look = tokio::time::Instant::now() + poll;
            tokio::select! {
                outcome = &mut waiting.receiver, if open => {
                    if let Ok(outcome) = outcome {
                        return Ok(outcome);
                    }
                    // The reader is gone: the outcome record still tells.
                    open = false;
                    continue;
                }
                () = tokio::time::sleep_until(look.min(deadline)) => {}
            }
            match replies::outcome(client, &outcome_key).await {
                Ok(Some(recorded)) => {
                    return serde_json::from_str(&recorded).map_err(SendFailure::Unreadable);
                }
                Ok(None) => {}
                Err(error) => {
                    debug!(error = %ordo_core::contract::error::error_chain(&error), "looking at a command's outcome record failed")
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(SendFailure::TimedOut(request.timeout));
            }
            poll = (poll * 2).min(POLL_MAX);
        }
    }
}

impl CommandRouter for RedisCommands {
    fn send(&self, request: CommandRequest) -> SendFuture<'_> {
        Box::pin(self.send_now(request))
    }
}
