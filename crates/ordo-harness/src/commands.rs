//! Commands in the chaos runs: [`Poke`], sent by every worker for a few
//! shared keys and run by whichever worker owns the key's command
//! partition, and the workers' senders.
//!
//! Each run of [`PokeHandler`], like a run of the events' handler
//! ([`TickHandler`](crate::worker::TickHandler)):
//! 1. begins with `begin.lua` on the command key's records
//!    ([`CommandRecords`], apart from the events'): if its lease is already
//!    lost it stops there (and fails); otherwise it counts an overlap when
//!    another run of the key is in flight under the same, still valid,
//!    lease, and marks itself in flight;
//! 2. works for the command's `work_ms`;
//! 3. commits its effect under the lease's fence ([`RedisFence`]):
//!    `{sender}:{seq}:{token}` appended to the key's applied list, its
//!    marker cleared. A refused commit is the handler's error, as in any
//!    handler that writes through the fence;
//! 4. replies with what it ran ([`Poked`]).
//!
//! The run goes on in a task of its own, which the broker's abort does not
//! end: the fence, not the abort, must keep a stale owner's effect out.
//!
//! Each [`Senders`] task sends seq 1, 2, 3... of one key, one command at a
//! time. On the odd keys (`c1`, `c3`...) each command has the id
//! `{sender}-{key}-{seq}`: after a timeout or a broker error the sender
//! sends the same id again until it gets an outcome (a resend gets the
//! first outcome without a second run). On the even keys the ids are
//! generated, so a command whose sender owns the key's partition runs in
//! place, without Redis; a timeout or a broker error leaves such a command
//! unknown (it may still run, at any later time: a publish the client gave
//! up on can reach Redis late), so the sender records it as abandoned
//! ([`CommandRecords::abandoned`]) and goes on with the next seq. Otherwise
//! it records the outcome: a success in [`CommandRecords::acked`], a
//! failure in [`CommandRecords::failed`].
//! The success is recorded after the effect in Redis's own order, so a
//! Redis that loses its last writes in a crash cannot keep the record and
//! lose the effect. A sender killed with its process simply stops; a
//! restarted process must be a new instance (as in the chaos runs, which
//! never reuse a name), and so a new sender: a sender that started again
//! from seq 1 under its old name would look like one applying out of order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{KeysInterface, ListInterface, LuaInterface};
use fred::types::Value;
use ordo::contract::handler::{HandlerContext, HandlerError};
use ordo::{Command, command_handler};
use ordo_core::contract::error::error_chain;
use ordo_core::runtime::domain::Domain;
use ordo_core::{DispatchError, SendOptions};
use ordo_redis::{FencedWrite, RedisFence};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::keys::CommandRecords;
use crate::line::{self, Line};
use crate::tick::Chaos;
use crate::worker::{BEGIN, ENDED_TTL_S, clear_marker, commit_fenced, emit, retrying};

/// How long a sender waits for one send's outcome before sending the same
/// id again.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(3);

/// The pause between two commands of one sender: commands leave the
/// events room on a small machine.
const SEND_PAUSE: Duration = Duration::from_millis(25);

/// The pause before sending a command again after a broker error.
const RESEND_PAUSE: Duration = Duration::from_millis(200);

/// How long recording a resend may take (it is a tally, not a record the
/// verdict depends on).
const TALLY_WITHIN: Duration = Duration::from_millis(500);

/// The shared command keys: `c0`, `c1`, ...
pub fn command_key_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("c{i}")).collect()
}

/// How long the run of command `seq` works: most briefly, every tenth for
/// a while, so that faults land mid-run.
pub fn work_ms(seq: u64) -> u64 {
    if seq.is_multiple_of(10) { 200 } else { 10 }
}

/// Command number `seq` of `sender` for `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Command)]
#[command(part_of = Chaos)]
pub struct Poke {
    /// The routing key, shared by every sender.
    #[routing_key]
    pub key: String,
    /// Who sent it: the sending worker's instance id.
    pub sender: String,
    /// Its number among `sender`'s commands of `key`, from 1, in send order.
    pub seq: u64,
    /// How long each run of it works before committing its effect.
    pub work_ms: u64,
}

/// The reply to a [`Poke`]: what the run that committed it ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Poked {
    /// The command's key.
    pub key: String,
    /// The command's sender.
    pub sender: String,
    /// The command's seq.
    pub seq: u64,
    /// The fencing token its effect was committed under.
    pub token: u64,
}

/// The handler of [`Poke`] commands (see the module documentation).
#[derive(Debug, Clone)]
pub struct PokeHandler {
    inner: Arc<HandlerInner>,
}

#[derive(Debug)]
struct HandlerInner {
    client: Pool,
    instance: String,
    /// Numbers this instance's runs, for unique in-flight markers.
    runs: AtomicU64,
    records: CommandRecords,
}

impl PokeHandler {
    /// A handler recording through `client` (connected to the broker's
    /// Redis) where `records` names it, printing lines as `instance`.
    pub fn new(client: Pool, instance: impl Into<String>, records: CommandRecords) -> Self {
        Self {
            inner: Arc::new(HandlerInner {
                client,
                instance: instance.into(),
                runs: AtomicU64::new(0),
                records,
            }),
        }
    }
}

#[command_handler(part_of = Chaos)]
impl PokeHandler {
    #[handle]
    async fn poke(&self, poke: &Poke, ctx: &HandlerContext) -> Result<Poked, HandlerError> {
        let fence = RedisFence::from_context(ctx)
            .ok_or("no lease fence on the handler context: not run by the Redis broker")?
            .clone();
        let number = self.inner.runs.fetch_add(1, Ordering::Relaxed);
        let run = PokeRun {
            inner: Arc::clone(&self.inner),
            marker: format!("{}:{}:c{number}", fence.token(), self.inner.instance),
            poke: poke.clone(),
            fence,
        };
        // On a task of its own, which aborting this future does not stop.
        match tokio::spawn(run.execute()).await {
            Ok(result) => result,
            Err(join) => Err(format!("the run's task failed: {join}").into()),
        }
    }
}

/// One run of the handler on one command.
struct PokeRun {
    inner: Arc<HandlerInner>,
    poke: Poke,
    fence: RedisFence,
    /// `{token}:{instance}:c{run number}`: the in-flight marker of this run.
    marker: String,
}

impl PokeRun {
    async fn execute(self) -> Result<Poked, HandlerError> {
        let key = &self.poke.key;
        let Some(overlap) = retrying(key, "record the command's start", || self.begin()).await? else {
            emit(&self.line(line::CMD_STALE));
            return Err(format!(
                "command {}:{} of key {key}: the lease was lost before the run began",
                self.poke.sender, self.poke.seq
            )
            .into());
        };
        if overlap {
            emit(&self.line(line::CMD_OVERLAP));
        }
        tokio::time::sleep(Duration::from_millis(self.poke.work_ms)).await;
        match self.commit().await {
            // A run again of a command whose effect is in already applies
            // nothing, its marker's deletion included: cleared here too.
            Ok(()) => self.clear().await.map(|()| Poked {
                key: key.clone(),
                sender: self.poke.sender.clone(),
                seq: self.poke.seq,
                token: self.fence.token(),
            }),
            Err(error) if error.is_fenced() => {
                emit(&self.line(line::CMD_FENCED));
                Err(error.into())
            }
            Err(error) => {
                self.clear().await?;
                emit(&self.line(line::CMD_FAILED).field("reason", error_chain(&error)));
                Err(error.into())
            }
        }
    }

    /// `begin.lua` on the command key's records: `None` when the lease was
    /// already lost, else whether another run was in flight.
    async fn begin(&self) -> Result<Option<bool>, fred::error::Error> {
        let key = &self.poke.key;
        let records = &self.inner.records;
        let keys = vec![
            records.marker(key),
            self.fence.lease_key().to_owned(),
            records.overlaps(key),
            records.starts(key),
            records.overlap_log(key),
            records.stale_starts(key),
            records.ended(key),
        ];
        let args = vec![
            Value::from(self.marker.as_str()),
            Value::from(format!("{}:{}", self.poke.sender, self.poke.seq)),
        ];
        let outcome: i64 = self.inner.client.eval(BEGIN, keys, args).await?;
        // 3 (a late copy of a run that ended) cannot answer a live caller.
        Ok((outcome < 2).then_some(outcome == 1))
    }

    /// The fenced commit of the effect, retrying while Redis fails (not
    /// when the fence refuses it), under one commit id for every try.
    async fn commit(&self) -> Result<(), ordo_redis::Error> {
        let key = &self.poke.key;
        let records = &self.inner.records;
        let effect = format!("{}:{}:{}", self.poke.sender, self.poke.seq, self.fence.token());
        let writes = FencedWrite::new()
            .rpush(records.applied(key), effect)
            .del(records.marker(key))
            .sadd(records.ended(key), self.marker.as_str())
            .command("EXPIRE", records.ended(key), [ENDED_TTL_S.to_string()]);
        commit_fenced(&self.inner.client, &self.fence, &writes, &self.marker, key).await
    }

    /// Clears the in-flight marker if it is still this run's.
    async fn clear(&self) -> Result<(), HandlerError> {
        let key = &self.poke.key;
        let (marker, ended) = (self.inner.records.marker(key), self.inner.records.ended(key));
        retrying(key, "clear the in-flight marker", || {
            clear_marker(&self.inner.client, &marker, &ended, &self.marker)
        })
        .await
    }

    /// A `kind` line about this run.
    fn line(&self, kind: &str) -> Line {
        Line::new(kind)
            .field("instance", &self.inner.instance)
            .field("key", &self.poke.key)
            .field("sender", &self.poke.sender)
            .field("seq", self.poke.seq)
            .field("token", self.fence.token())
    }
}

/// One worker's command senders: a task per shared key.
#[derive(Debug)]
pub struct Senders {
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Senders {
    /// Starts a sender named `sender` for each of `keys`, sending through
    /// `domain` (started) and recording through `client` where `records`
    /// names it.
    pub fn start(
        domain: &Domain,
        client: &Pool,
        records: &CommandRecords,
        sender: &str,
        keys: &[String],
    ) -> Self {
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for (index, key) in keys.iter().enumerate() {
            let sender = Sender {
                caller_ids: index % 2 == 1,
                domain: domain.clone(),
                client: client.clone(),
                records: records.clone(),
                sender: sender.to_owned(),
                key: key.clone(),
                stop: stop.clone(),
            };
            tasks.spawn(sender.run());
        }
        Self { stop, tasks }
    }

    /// Stops every sender (a send under way is abandoned, its outcome not
    /// recorded) and waits for them.
    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// What became of one command of a sender.
enum Sent {
    /// Its outcome.
    Outcome(Result<Poked, DispatchError>),
    /// Unknown: a command with a generated id got no outcome (it may still run).
    Abandoned,
}

/// One sender of one key.
struct Sender {
    domain: Domain,
    client: Pool,
    records: CommandRecords,
    sender: String,
    key: String,
    /// Ids of the sender's (`{sender}-{key}-{seq}`, resent as they are);
    /// else generated ones (a command may then run in place).
    caller_ids: bool,
    stop: CancellationToken,
}

impl Sender {
    async fn run(self) {
        for seq in 1.. {
            let sent = tokio::select! {
                () = self.stop.cancelled() => return,
                sent = self.send(seq) => sent,
            };
            let record = match sent {
                Sent::Abandoned => (
                    self.records.abandoned(&self.key),
                    format!("{}:{seq}", self.sender),
                ),
                Sent::Outcome(Ok(reply))
                    if reply.key == self.key && reply.sender == self.sender && reply.seq == seq =>
                {
                    (self.records.acked(&self.key), format!("{}:{seq}", self.sender))
                }
                Sent::Outcome(Ok(reply)) => {
                    emit(
                        &self
                            .line(line::SENT_WRONG, seq)
                            .field("reason", format!("{reply:?}")),
                    );
                    (
                        self.records.wrong_replies(&self.key),
                        format!("{}:{seq} {reply:?}", self.sender),
                    )
                }
                Sent::Outcome(Err(error)) => {
                    let reason = error_chain(&error);
                    emit(&self.line(line::SENT_FAILED, seq).field("reason", &reason));
                    (
                        self.records.failed(&self.key),
                        format!("{}:{seq} {reason}", self.sender),
                    )
                }
            };
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = self.record(&record.0, &record.1) => {}
            }
            tokio::select! {
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep(SEND_PAUSE) => {}
            }
        }
    }

    /// Sends command `seq` until it has an outcome: after a timeout or a
    /// broker error, again under the same id; without caller ids, it is
    /// abandoned then instead.
    async fn send(&self, seq: u64) -> Sent {
        let poke = Poke {
            key: self.key.clone(),
            sender: self.sender.clone(),
            seq,
            work_ms: work_ms(seq),
        };
        let mut options = SendOptions::new().timeout(SEND_TIMEOUT);
        if self.caller_ids {
            options = options.id(format!("{}-{}-{seq}", self.sender, self.key));
        }
        loop {
            match self.domain.send_with(poke.clone(), options.clone()).await {
                Err(error @ (DispatchError::Timeout { .. } | DispatchError::Broker { .. })) => {
                    if !self.caller_ids {
                        tracing::debug!(error = %error_chain(&error), key = self.key, seq, "no outcome; abandoned");
                        return Sent::Abandoned;
                    }
                    tracing::debug!(error = %error_chain(&error), key = self.key, seq, "no outcome; sending again");
                    let tally = self.client.incr::<i64, _>(self.records.resends(&self.key));
                    let _ = tokio::time::timeout(TALLY_WITHIN, tally).await;
                    if matches!(error, DispatchError::Broker { .. }) {
                        tokio::time::sleep(RESEND_PAUSE).await;
                    }
                }
                outcome => return Sent::Outcome(outcome),
            }
        }
    }

    /// Appends `entry` to `list`, retrying while Redis fails (for
    /// [`RETRY_FOR`]; an outcome that cannot be recorded is not checked).
    async fn record(&self, list: &str, entry: &str) {
        let recorded = retrying(list, "record a command's outcome", || {
            self.client.rpush::<i64, _, _>(list, entry)
        })
        .await;
        if let Err(error) = recorded {
            tracing::error!(%error, list, entry, "a command's outcome could not be recorded");
        }
    }

    /// A `kind` line about command `seq` of this sender.
    fn line(&self, kind: &str, seq: u64) -> Line {
        Line::new(kind)
            .field("instance", &self.sender)
            .field("key", &self.key)
            .field("seq", seq)
    }
}
