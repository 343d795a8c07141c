//! Fenced effects: a handler's Redis writes applied only while the lease it
//! runs under is still held at its token.
//!
//! The partition worker attaches a [`RedisFence`] to every
//! [`HandlerContext`]. A handler that writes its effects with
//! [`RedisFence::commit`] cannot land them after it lost the partition: a
//! stalled owner that wakes up mid-handler gets [`Error::Fenced`] and its
//! writes are not applied, so effects land in the new owner's order. And
//! they land once: a run of the message again (after a failover, a failed
//! attempt, an operator's retry) applies none of the commits an earlier
//! run of it applied.
//!
//! ```no_run
//! # use ordo_core::contract::handler::HandlerContext;
//! # use ordo_redis::{FencedWrite, RedisFence};
//! # async fn handle(ctx: &HandlerContext, redis: &fred::clients::Pool) -> Result<(), ordo_redis::Error> {
//! let fence = RedisFence::from_context(ctx).expect("handled by the Redis broker");
//! let writes = FencedWrite::new()
//!     .hset("balance:c-1", "amount", "42")
//!     .rpush("history:c-1", ctx.message_id());
//! fence.commit(redis, &writes).await?;
//! # Ok(()) }
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fred::interfaces::FunctionInterface;
use fred::types::Value;
use ordo_core::contract::handler::HandlerContext;

use crate::error::{Error, Result};
use crate::owner::lease::Lease;
use crate::store::calls;
use crate::store::calls::Fence;
use crate::store::calls::fence::{Commit, Write};
use crate::store::keys::KeyNames;
use crate::store::scripts::ALLOWED;

/// The lease a message is handled under, as the Redis broker attaches it to
/// the handler context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisFence {
    names: Arc<FenceNames>,
    token: u64,
    attempt: u64,
    /// The message the run handles, when the fence is a run's: its
    /// commits are applied once per message, whatever runs it again.
    message: Option<String>,
    commits: Commits,
    used: Used,
    /// Set to the message when a commit of it is sent: its
    /// acknowledgement then takes what it applied out of the marker.
    applied: Applied,
}

/// The keys and the lease value a fence's commits name: the same for every
/// run under one lease (and, in a hashed partition, one key), so a worker
/// makes them once and its runs' fences share them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FenceNames {
    lease_key: String,
    marker: String,
    sequence: String,
    value: String,
}

impl FenceNames {
    /// The names of `lease`; `own`: the commit marker and attempt sequence
    /// of one key of a hashed partition (`None`: the lease's).
    pub(crate) fn of(lease: &Lease, own: Option<&KeyNames>) -> Arc<Self> {
        Arc::new(Self {
            lease_key: lease.key().to_owned(),
            marker: own.map_or_else(|| lease.keys().commit.clone(), |own| own.commit.clone()),
            sequence: own.map_or_else(|| lease.keys().sequence.clone(), |own| own.sequence.clone()),
            value: lease.value().to_owned(),
        })
    }
}

/// The message a run's fence sent a commit of, shared with its worker.
#[derive(Debug, Clone, Default)]
pub(crate) struct Applied(Arc<Mutex<Option<String>>>);

impl Applied {
    /// The message a commit was sent for since the last call, if any.
    pub(crate) fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    fn set(&self, message: &str) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(message.to_owned());
    }
}

impl PartialEq for Applied {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Applied {}

/// The commit ids a run has used, in order: a commit's number in the run
/// is its id's place here (the same for a retry under the same id).
#[derive(Debug, Clone, Default)]
struct Commits(Arc<Mutex<Vec<String>>>);

impl Commits {
    /// The number (from 1) of the commit with `id` in the run.
    fn number(&self, id: &str) -> u64 {
        let mut ids = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = match ids.iter().position(|used| used == id) {
            Some(at) => at,
            None => {
                ids.push(id.to_owned());
                ids.len() - 1
            }
        };
        u64::try_from(at).map_or(u64::MAX, |at| at + 1)
    }
}

impl PartialEq for Commits {
    fn eq(&self, _: &Self) -> bool {
        // Bookkeeping of the run, not part of what a fence is.
        true
    }
}

impl Eq for Commits {}

/// Set when a fenced command was sent: the worker closes an attempt in its
/// acknowledgement only when the attempt may have commands in flight.
#[derive(Debug, Clone, Default)]
struct Used(Arc<AtomicBool>);

impl PartialEq for Used {
    fn eq(&self, _: &Self) -> bool {
        // Bookkeeping, not part of what a fence is.
        true
    }
}

impl Eq for Used {}

/// How long the last commit's marker is kept when the commit handles no
/// message: far longer than a client takes to reconnect and resend, and
/// bounded (one small key per lease, overwritten by each commit, deleted
/// when the partition is reaped). A run's commits are kept until the
/// message's acknowledgement deletes them.
const COMMIT_MARKER_TTL: Duration = Duration::from_secs(300);

impl RedisFence {
    /// The fence of `lease`, for commits outside any numbered attempt
    /// (they are checked against the lease only).
    pub fn new(lease: &Lease) -> Self {
        Self::for_attempt(lease, 0)
    }

    /// The fence of attempt `attempt` under `lease` (the partition worker
    /// numbers the handler attempts it runs under a lease from 1). Its
    /// commits are refused with [`Error::Stale`] once the lease's holder
    /// closed the attempt ([`Partitions::close_attempt`](crate::internals::Partitions::close_attempt),
    /// [`Partitions::ack_attempt`](crate::internals::Partitions::ack_attempt)): a commit
    /// delayed on its connection past its client's timeout, or resent after
    /// a reconnect, can never land after a later attempt's effects.
    pub fn for_attempt(lease: &Lease, attempt: u64) -> Self {
        Self::tracked(
            FenceNames::of(lease, None),
            lease.token(),
            attempt,
            Arc::default(),
            Applied::default(),
        )
    }

    /// [`RedisFence::for_attempt`] that sets `used` when it sends a command,
    /// and `applied` to its message when it sends a commit of one.
    /// `names`: those of the lease at `token`, or of one key of a hashed
    /// partition, whose keys commit side by side under one lease
    /// ([`FenceNames::of`]).
    pub(crate) fn tracked(
        names: Arc<FenceNames>,
        token: u64,
        attempt: u64,
        used: Arc<AtomicBool>,
        applied: Applied,
    ) -> Self {
        Self {
            names,
            token,
            attempt,
            message: None,
            commits: Commits::default(),
            used: Used(used),
            applied,
        }
    }

    /// This fence for a run of message `message_id` (the partition worker
    /// builds it so): the n-th commit of the run is applied once for the
    /// message, whatever runs it again. A later run's n-th commit that
    /// finds the message's n-th commit applied (the effects of an earlier
    /// run whose acknowledgement did not land: the owner crashed or
    /// stalled, the handler failed after committing, an operator retried
    /// it) applies nothing and returns the first one's replies. Kept in
    /// the commit marker until the message's acknowledgement takes it out
    /// (the partition worker's; an acknowledgement made by hand leaves it,
    /// until the partition is reaped).
    #[must_use]
    pub fn handling(mut self, message_id: &str) -> Self {
        self.message = Some(message_id.to_owned()).filter(|id| !id.is_empty());
        self
    }

    /// The message this fence's commits are applied once for, when the
    /// fence is a run's ([`RedisFence::handling`]).
    pub fn message_id(&self) -> Option<&str> {
        self.message.as_deref()
    }

    /// The attempt this fence belongs to (0: none).
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The fence attached to `ctx`, when the message came from the Redis broker.
    pub fn from_context(ctx: &HandlerContext) -> Option<&Self> {
        ctx.extension::<Self>()
    }

    /// The lease key.
    pub fn lease_key(&self) -> &str {
        &self.names.lease_key
    }

    /// The fencing token (also [`HandlerContext::fencing_token`]).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Applies `writes` if the lease is still held at this fence's token;
    /// otherwise applies nothing and returns [`Error::Fenced`]. Returns the
    /// reply of each command.
    ///
    /// `client` must be connected to the broker's Redis: the lease check and
    /// the writes run in one script, so no other command runs between them.
    ///
    /// Applied at most once per call: when the connection drops with the
    /// commit in flight, the client sends it again after reconnecting
    /// without knowing whether it ran; a commit that did run is not applied
    /// again, and the resent call gets the replies of the first run.
    ///
    /// Applied once per message, on the fence the partition worker attaches
    /// ([`RedisFence::handling`]): delivery is at-least-once (a handler
    /// that fails after committing, or whose owner crashes or stalls before
    /// acknowledging, runs again, on this owner or the next one), but the
    /// n-th commit of a run again finds the message's n-th commit applied
    /// and returns its replies without applying anything. So commit in the
    /// same order on every run of a message (the usual case: a handler is a
    /// function of its message), and write the effects of one run with one
    /// commit where you can. Only what goes through the fence is
    /// exactly-once: effects elsewhere run again.
    ///
    /// What this does not make idempotent:
    /// - **A failing command.** Every command is validated before any runs,
    ///   but a command that fails when it runs (`WRONGTYPE`) stops the
    ///   script with the writes before it applied, as in any Redis script.
    ///
    /// A commit of an attempt the worker has closed (see
    /// [`RedisFence::for_attempt`]) is refused with [`Error::Stale`].
    ///
    /// To retry a commit whose outcome is unknown (a timeout, a lost reply),
    /// use [`RedisFence::commit_as`] with one id for every try.
    pub async fn commit<C>(&self, client: &C, writes: &FencedWrite) -> Result<Vec<Value>>
    where
        C: FunctionInterface + Send + Sync,
    {
        let id = uuid::Uuid::new_v4().simple().to_string();
        self.commit_as(client, writes, &id).await
    }

    /// [`RedisFence::commit`] under the caller's commit id `commit_id`: a
    /// caller that retries after an error whose outcome it cannot know (a
    /// timeout, a reply lost with its connection) passes the same id again,
    /// and the writes are applied at most once; the retry gets the replies
    /// of the run that applied them. Use a fresh id (a UUID) per logical
    /// commit; only the last commit under each lease is remembered (for a
    /// few minutes, or, on a run's fence, until the message is
    /// acknowledged). A retry under the same id keeps the commit's number
    /// in the run ([`RedisFence::handling`]).
    pub async fn commit_as<C>(&self, client: &C, writes: &FencedWrite, commit_id: &str) -> Result<Vec<Value>>
    where
        C: FunctionInterface + Send + Sync,
    {
        if commit_id.is_empty() {
            return Err(Error::Config {
                key: "commit_id",
                reason: "must not be empty".to_owned(),
            });
        }
        let id = commit_id;
        if let Some(op) = writes
            .ops
            .iter()
            .find(|op| !ALLOWED.contains(&op.command.as_str()))
        {
            return Err(Error::CommandNotAllowed {
                command: op.command.clone(),
            });
        }
        let writes: Vec<Write<'_>> = writes
            .ops
            .iter()
            .map(|op| Write {
                command: &op.command,
                key: &op.key,
                args: &op.args,
            })
            .collect();
        let commit = Commit {
            fence: Fence {
                lease: &self.names.lease_key,
                value: &self.names.value,
            },
            marker: &self.names.marker,
            sequence: &self.names.sequence,
            id,
            marker_ttl: COMMIT_MARKER_TTL,
            attempt: self.attempt,
            message: self.message.as_deref().unwrap_or(""),
            number: self.commits.number(id),
            writes: &writes,
        };
        self.used.0.store(true, Ordering::SeqCst);
        if let Some(message) = &self.message {
            self.applied.set(message);
        }
        // A lost connection or a timeout is transient (the chain carries
        // the marker): the worker retries the handler without counting it.
        calls::fence::commit(client, commit).await
    }
}

/// One write of a [`FencedWrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
struct WriteOp {
    command: String,
    key: String,
    args: Vec<String>,
}

/// Redis writes to apply together under a fence, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FencedWrite {
    ops: Vec<WriteOp>,
}

impl FencedWrite {
    /// No writes yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Any allowed command on `key`, with `args` after the key (for
    /// example `command("ZADD", "scores", ["1", "a"])`).
    #[must_use]
    pub fn command<I, A>(mut self, command: &str, key: impl Into<String>, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<String>,
    {
        self.ops.push(WriteOp {
            command: command.to_ascii_uppercase(),
            key: key.into(),
            args: args.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// `SET key value`.
    #[must_use]
    pub fn set(self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.command("SET", key, [value.into()])
    }

    /// `DEL key`.
    #[must_use]
    pub fn del(self, key: impl Into<String>) -> Self {
        self.command("DEL", key, Vec::<String>::new())
    }

    /// `INCRBY key by`.
    #[must_use]
    pub fn incr_by(self, key: impl Into<String>, by: i64) -> Self {
        self.command("INCRBY", key, [by.to_string()])
    }

    /// `HSET key field value`.
    #[must_use]
    pub fn hset(self, key: impl Into<String>, field: impl Into<String>, value: impl Into<String>) -> Self {
        self.command("HSET", key, [field.into(), value.into()])
    }

    /// `SADD key member`.
    #[must_use]
    pub fn sadd(self, key: impl Into<String>, member: impl Into<String>) -> Self {
        self.command("SADD", key, [member.into()])
    }

    /// `RPUSH key value`.
    #[must_use]
    pub fn rpush(self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.command("RPUSH", key, [value.into()])
    }

    /// `XADD key * field value...`.
    #[must_use]
    pub fn xadd<F, V>(self, key: impl Into<String>, fields: impl IntoIterator<Item = (F, V)>) -> Self
    where
        F: Into<String>,
        V: Into<String>,
    {
        let mut args = vec!["*".to_owned()];
        for (field, value) in fields {
            args.push(field.into());
            args.push(value.into());
        }
        self.command("XADD", key, args)
    }
}
