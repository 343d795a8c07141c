//! The worker: a domain on the Redis broker with one partitioned handler
//! for [`Tick`] events, and the handler itself.
//!
//! Each run of the handler
//! 1. begins (`begin.lua`): if its lease is already lost it stops there
//!    (a stale start, printed as `stale`); otherwise it checks for an
//!    overlapping run of the same key (another run's in-flight marker under
//!    the same, still valid, lease), counts its start and marks itself in
//!    flight;
//! 2. fails at once if the event is poison;
//! 3. works for the event's `work_ms` (in blocking code, in blocking mode);
//! 4. commits its effect under the lease's fence ([`RedisFence`] with one
//!    [`FencedWrite`]: append `{seq}:{token}` to the key's applied list,
//!    count the committed run, clear the marker; a run again of a message
//!    whose effect is in already applies none of it, so the marker is
//!    cleared again after the commit). A refused commit is printed as
//!    `fenced` and returned as a handler error.
//!
//! With an [`EffectStore`] ([`TickHandler::with_effects`]), step 4 commits
//! the effect there instead (e.g. in PostgreSQL through its own fence), then
//! clears the marker.
//!
//! The run executes on a task of its own that the broker cannot abort: when
//! a worker loses its lease, the broker aborts the handler, but a real
//! handler stuck in blocking code would carry on regardless. Letting the
//! run carry on models that worst case, so that the fence, not the abort,
//! is what must keep a stale owner's effect out.
//!
//! In **blocking mode** ([`WorkerOptions::blocking_work`], `--blocking-work`)
//! the run is the handler's own task instead and works in blocking code
//! (`std::thread::sleep`), as a handler calling a blocking API without a
//! timeout does: the broker's abort cannot end it, and it knows so. Each
//! run records its start (instance, token, Redis time) in
//! [`Records::blocking_starts`], so a test can check that no run of a key
//! started while another one's blocking work was going on.

use std::fmt;
use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fred::clients::Pool;
use fred::interfaces::LuaInterface;
use fred::types::Value;
use ordo::contract::handler::{BoxFuture, HandlerContext, HandlerError, HandlerResult};
use ordo::event_handler;
use ordo_core::contract::config::Config;
use ordo_core::contract::error::error_chain;
use ordo_core::runtime::domain::Domain;
use ordo_redis::{FencedWrite, RedisBroker, RedisFence, Routing};
use tokio::signal::unix::SignalKind;
use tokio_util::sync::CancellationToken;

use crate::commands::{PokeHandler, Senders, command_key_names};
use crate::error::{HarnessError, Result};
use crate::keys::{CommandRecords, Records};
use crate::line::{self, Line};
use crate::tick::{CATEGORY, Chaos, Tick};

/// How long a run keeps retrying a Redis command that fails for a reason
/// other than its fence (Redis restarting, a connection dropping).
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(30);

/// The pause between two such retries.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

pub(crate) const BEGIN: &str = include_str!("lua/begin.lua");
/// How long the ended runs of a key are remembered (far longer than any
/// command stays in flight).
pub(crate) const ENDED_TTL_S: u64 = 600;
pub(crate) const CLEAR: &str = include_str!("lua/clear.lua");
const STARTED: &str = include_str!("lua/started.lua");

/// How a worker runs: where, as whom, and its timings.
///
/// Its `Debug` shows the Redis URL with its password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct WorkerOptions {
    /// The Redis URL.
    pub redis_url: String,
    /// The instance id (unique among live workers).
    pub instance: String,
    /// `server.partitioning.lease_ttl_ms`.
    pub lease_ttl_ms: u64,
    /// `server.partitioning.heartbeat_interval_seconds`, in ms.
    pub heartbeat_ms: u64,
    /// `server.partitioning.poll_interval_seconds`, in ms.
    pub poll_ms: u64,
    /// `server.partitioning.discovery_interval_seconds`, in ms.
    pub discovery_ms: u64,
    /// `server.partitioning.reap_idle_ms`.
    pub reap_idle_ms: u64,
    /// `server.partitioning.max_retries`.
    pub max_retries: u32,
    /// `server.partitioning.retry_backoff_initial_ms`.
    pub backoff_initial_ms: u64,
    /// `server.partitioning.retry_backoff_max_ms`.
    pub backoff_max_ms: u64,
    /// The TLS files of a `rediss://` URL (none: the system's CAs).
    pub tls: ordo_redis::TlsFiles,
    /// `[categories.chaos] partitions`: `None` for a partition per key (the
    /// default), or that many hashed partitions.
    pub hashed_partitions: Option<NonZeroU32>,
    /// `server.partitioning.max_concurrency`: handler runs at once in the
    /// process (`None`: the default).
    pub max_concurrency: Option<NonZeroUsize>,
    /// `[handlers.TickRecorder] ack_window`: messages a key's worker runs
    /// ahead of their acknowledgements (0: none).
    pub ack_window: u32,
    /// Blocking mode: each run is the handler's own task and does its work
    /// in blocking code (see the module documentation).
    pub blocking_work: bool,
    /// Commands: with `N > 0` the worker runs the [`Poke`](crate::commands::Poke)
    /// handler and sends commands for the shared keys `c0`..`c{N-1}` (see
    /// [`crate::commands`]); 0: no commands.
    pub command_keys: usize,
}

impl std::fmt::Debug for WorkerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerOptions")
            .field("redis_url", &ordo_redis::redact_url(&self.redis_url))
            .field("instance", &self.instance)
            .field("lease_ttl_ms", &self.lease_ttl_ms)
            .field("heartbeat_ms", &self.heartbeat_ms)
            .field("poll_ms", &self.poll_ms)
            .field("discovery_ms", &self.discovery_ms)
            .field("reap_idle_ms", &self.reap_idle_ms)
            .field("max_retries", &self.max_retries)
            .field("backoff_initial_ms", &self.backoff_initial_ms)
            .field("backoff_max_ms", &self.backoff_max_ms)
            .field("tls", &self.tls)
            .field("hashed_partitions", &self.hashed_partitions)
            .field("max_concurrency", &self.max_concurrency)
            .field("ack_window", &self.ack_window)
            .field("blocking_work", &self.blocking_work)
            .field("command_keys", &self.command_keys)
            .finish()
    }
}

impl WorkerOptions {
    /// Options for instance `instance` on `redis_url`, with timings short
    /// enough for tests: a 2 s lease renewed every 0.3 s.
    pub fn new(redis_url: impl Into<String>, instance: impl Into<String>) -> Self {
        Self {
            redis_url: redis_url.into(),
            instance: instance.into(),
            lease_ttl_ms: 2_000,
            heartbeat_ms: 300,
            poll_ms: 100,
            discovery_ms: 200,
            reap_idle_ms: 3_600_000,
            max_retries: 2,
            backoff_initial_ms: 20,
            backoff_max_ms: 200,
            tls: ordo_redis::TlsFiles::new(),
            hashed_partitions: None,
            max_concurrency: None,
            ack_window: 0,
            blocking_work: false,
            command_keys: 0,
        }
    }

    /// The domain configuration these options describe (validated as
    /// `domain.toml` would be for the Redis broker, its keys by
    /// `ordo_redis::RedisSettings`).
    pub fn config(&self) -> Result<Config> {
        let mut text = format!(
            "[server.partitioning]\n\
             lease_ttl_ms = {}\n\
             heartbeat_interval_seconds = {}\n\
             poll_interval_seconds = {}\n\
             discovery_interval_seconds = {}\n\
             reap_idle_ms = {}\n\
             max_retries = {}\n\
             retry_backoff_initial_ms = {}\n\
             retry_backoff_max_ms = {}\n",
            self.lease_ttl_ms,
            seconds(self.heartbeat_ms),
            seconds(self.poll_ms),
            seconds(self.discovery_ms),
            self.reap_idle_ms,
            self.max_retries,
            self.backoff_initial_ms,
            self.backoff_max_ms,
        );
        if let Some(max) = self.max_concurrency {
            text.push_str(&format!("max_concurrency = {max}\n"));
        }
        if let Some(partitions) = self.hashed_partitions {
            text.push_str(&format!("[categories.{CATEGORY}]\npartitions = {partitions}\n"));
        }
        if self.ack_window > 0 {
            text.push_str(&format!(
                "[handlers.TickRecorder]\nack_window = {}\n",
                self.ack_window
            ));
        }
        let config = Config::from_toml_str(&text).map_err(HarnessError::Config)?;
        ordo_redis::RedisSettings::from_config(&config).map_err(HarnessError::Config)?;
        Ok(config)
    }
}

/// Milliseconds as a TOML float of seconds.
fn seconds(ms: u64) -> String {
    format!("{:?}", Duration::from_millis(ms).as_secs_f64())
}

/// Runs a worker until `shutdown` is cancelled, then shuts it down
/// gracefully (in-flight runs finish, leases are released). Prints `ready`
/// once the consumer runs and `stopped` at the end.
pub async fn run(options: &WorkerOptions, shutdown: CancellationToken) -> Result<()> {
    let config = options.config()?;
    let broker = RedisBroker::builder(&options.redis_url)
        .tls(options.tls.clone())
        .config(config.clone())
        .instance_id(&options.instance)
        .build()
        .await
        .map_err(HarnessError::Broker)?;
    let client = broker.client().clone();
    let mut handler =
        TickHandler::new(client.clone(), &options.instance).with_records(Records::new(Routing::new(&config)));
    if options.blocking_work {
        handler = handler.with_blocking_work();
    }
    let commands = (options.command_keys > 0).then(|| CommandRecords::new(Routing::new(&config)));
    let pokes = commands
        .as_ref()
        .map(|records| PokeHandler::new(client.clone(), &options.instance, records.clone()));
    let domain = domain_with(broker, handler, pokes, config)?;
    let running = domain.start();
    let senders = commands.map(|records| {
        let keys = command_key_names(options.command_keys);
        Senders::start(&domain, &client, &records, &options.instance, &keys)
    });
    emit(&Line::new(line::READY).field("instance", &options.instance));
    shutdown.cancelled().await;
    // The senders first: their sends need the domain running.
    if let Some(senders) = senders {
        senders.stop().await;
    }
    running.shutdown().await.map_err(HarnessError::Shutdown)?;
    emit(&Line::new(line::STOPPED).field("instance", &options.instance));
    Ok(())
}

/// A token cancelled on the first SIGTERM or SIGINT: how a worker process
/// (`ordo-worker run`, `ordo-bench worker`) is told to shut down gracefully.
/// Call it inside a Tokio runtime.
pub fn shutdown_on_signal() -> Result<CancellationToken> {
    let listen = |kind: SignalKind, signal: &'static str| {
        tokio::signal::unix::signal(kind).map_err(|source| HarnessError::Signal { signal, source })
    };
    let mut terminate = listen(SignalKind::terminate(), "SIGTERM")?;
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = interrupt.recv() => {}
        }
        on_signal.cancel();
    });
    Ok(shutdown)
}

/// The harness's domain: aggregate [`Chaos`] and `handler` on `broker`.
pub fn domain(broker: RedisBroker, handler: TickHandler, config: Config) -> Result<Domain> {
    domain_with(broker, handler, None, config)
}

/// [`domain`], with the [`Poke`](crate::commands::Poke) commands' handler
/// `commands` when given.
pub fn domain_with(
    broker: RedisBroker,
    handler: TickHandler,
    commands: Option<PokeHandler>,
    config: Config,
) -> Result<Domain> {
    let mut builder = Domain::builder().aggregate::<Chaos>().event_handler(handler);
    if let Some(commands) = commands {
        builder = builder.command_handler(commands);
    }
    builder
        .broker(broker)
        .config(config)
        .init()
        .map_err(HarnessError::Domain)
}

/// Prints one output line.
pub(crate) fn emit(line: &Line) {
    println!("{line}");
}

/// What an [`EffectStore`] did with a run's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// The effect was applied by this run.
    Applied,
    /// The store had applied this event already (a redelivery): nothing written.
    AlreadyApplied,
}

/// Why an [`EffectStore`] did not commit a run's effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectError {
    /// The store's fence refused it: the run's lease is stale.
    Fenced(String),
    /// Anything else: the run retries for a while.
    Failed(String),
    /// The store is unreachable for now (a database outage): the run fails
    /// transiently at once, and the broker retries it without using up an
    /// attempt ([`ordo_core::contract::retry::Transient`]).
    Unavailable(String),
}

/// Where runs commit their effects when not in Redis (the default): the
/// store must apply each event's effect at most once, and refuse the
/// effect of a run whose lease was superseded.
pub trait EffectStore: fmt::Debug + Send + Sync + 'static {
    /// Commits the effect of `tick`, handled under `ctx`.
    fn commit<'a>(
        &'a self,
        tick: &'a Tick,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, std::result::Result<Committed, EffectError>>;
}

/// The handler of [`Tick`] events, partitioned by `key`.
#[derive(Debug, Clone)]
pub struct TickHandler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Pool,
    instance: String,
    /// Numbers this instance's runs, for unique in-flight markers.
    runs: AtomicU64,
    /// Where effects are committed; `None`: in Redis, under the lease's fence.
    effects: Option<Arc<dyn EffectStore>>,
    /// Where the records of each key are (beside its partition).
    records: Records,
    /// Blocking mode (see the module documentation).
    blocking: bool,
}

impl TickHandler {
    /// A handler recording through `client` (connected to the broker's
    /// Redis), printing lines as `instance`.
    pub fn new(client: Pool, instance: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                instance: instance.into(),
                runs: AtomicU64::new(0),
                effects: None,
                records: Records::default(),
                blocking: false,
            }),
        }
    }

    /// A handler like [`TickHandler::new`] whose runs commit their effects in
    /// `effects` (the in-flight markers and start counts stay in Redis).
    pub fn with_effects(client: Pool, instance: impl Into<String>, effects: Arc<dyn EffectStore>) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                instance: instance.into(),
                runs: AtomicU64::new(0),
                effects: Some(effects),
                records: Records::default(),
                blocking: false,
            }),
        }
    }

    /// This handler keeping its records where `records` names them (by
    /// default beside a partition per key): the records of a key must be
    /// in its partition's slot, so they follow the category's routing.
    pub fn with_records(self, records: Records) -> Self {
        self.changed(|inner| inner.records = records)
    }

    /// This handler in blocking mode (see the module documentation).
    pub fn with_blocking_work(self) -> Self {
        self.changed(|inner| inner.blocking = true)
    }

    /// This handler with its settings changed by `change`.
    fn changed(self, change: impl FnOnce(&mut Inner)) -> Self {
        let inner = &self.inner;
        let mut changed = Inner {
            client: inner.client.clone(),
            instance: inner.instance.clone(),
            runs: AtomicU64::new(inner.runs.load(Ordering::Relaxed)),
            effects: inner.effects.clone(),
            records: inner.records.clone(),
            blocking: inner.blocking,
        };
        change(&mut changed);
        Self {
            inner: Arc::new(changed),
        }
    }

    /// Prepares one run of `tick`.
    fn prepare(&self, tick: &Tick, ctx: &HandlerContext) -> Result<Run, HandlerError> {
        let fence = RedisFence::from_context(ctx)
            .ok_or("no lease fence on the handler context: not run by the Redis broker")?
            .clone();
        let number = self.inner.runs.fetch_add(1, Ordering::Relaxed);
        Ok(Run {
            inner: Arc::clone(&self.inner),
            marker: format!("{}:{}:{number}", fence.token(), self.inner.instance),
            attempt: ctx.attempt(),
            tick: tick.clone(),
            fence,
            ctx: ctx.clone(),
        })
    }
}

#[event_handler(part_of = Chaos, sequential_by = "key", name = "TickRecorder")]
impl TickHandler {
    #[handle]
    async fn on_tick(&self, tick: &Tick, ctx: &HandlerContext) -> HandlerResult {
        let run = self.prepare(tick, ctx)?;
        if self.inner.blocking {
            // The handler's own run (on a task of its own once it first
            // waited, for Redis), stuck in blocking code while it works.
            return run.execute().await;
        }
        // On a task of its own, which aborting this future does not stop
        // (see the module documentation).
        match tokio::spawn(run.execute()).await {
            Ok(result) => result,
            Err(join) => Err(format!("the run's task failed: {join}").into()),
        }
    }
}

/// How a run began.
enum Begin {
    /// It started; `overlap` when another run of its key was in flight
    /// under the same lease.
    Started { overlap: bool },
    /// Its lease was already lost: it did not start.
    Stale,
}

/// One run of the handler on one event.
struct Run {
    inner: Arc<Inner>,
    tick: Tick,
    fence: RedisFence,
    attempt: u32,
    /// `{token}:{run id}`: what the in-flight marker holds during this run.
    marker: String,
    /// The context, for an [`EffectStore`].
    ctx: HandlerContext,
}

impl Run {
    async fn execute(self) -> HandlerResult {
        let Begin::Started { overlap } = self.retrying("record the run's start", || self.begin()).await?
        else {
            emit(&self.line(line::STALE));
            return Err(format!(
                "event {} of key {}: the lease was lost before the run began",
                self.tick.seq, self.tick.key
            )
            .into());
        };
        if self.inner.blocking {
            self.retrying("record the run's start", || self.started()).await?;
        }
        emit(
            &self
                .line(line::START)
                .field("attempt", self.attempt)
                .field("overlap", u8::from(overlap)),
        );
        if self.tick.poison {
            return self.fail("poison").await;
        }
        let work = Duration::from_millis(self.tick.work_ms);
        if self.inner.blocking {
            // Blocking mode: what an abort cannot interrupt.
            std::thread::sleep(work);
        } else {
            tokio::time::sleep(work).await;
        }
        if let Some(effects) = self.inner.effects.clone() {
            return self.commit_in(&*effects).await;
        }
        match self.commit().await {
            Ok(()) => {
                // A run again of a message whose effect is in already
                // applies nothing, its marker's deletion included.
                self.clear().await?;
                emit(&self.line(line::DONE));
                // Between the commit and the acknowledgement, for a test
                // to catch.
                tokio::time::sleep(Duration::from_millis(self.tick.linger_ms)).await;
                Ok(())
            }
            Err(error) if error.is_fenced() => {
                emit(&self.line(line::FENCED));
                Err(error.into())
            }
            Err(error) => self.fail(&error_chain(&error)).await,
        }
    }

    /// `begin.lua`.
    async fn begin(&self) -> Result<Begin, fred::error::Error> {
        let key = &self.tick.key;
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
            Value::from(self.tick.seq.to_string()),
        ];
        let outcome: i64 = self.inner.client.eval(BEGIN, keys, args).await?;
        Ok(match outcome {
            // 3 (a late copy of an ended run) cannot answer a live caller.
            2 | 3 => Begin::Stale,
            overlap => Begin::Started {
                overlap: overlap == 1,
            },
        })
    }

    /// `started.lua`: the run's start in blocking mode.
    async fn started(&self) -> Result<(), fred::error::Error> {
        let _: i64 = self
            .inner
            .client
            .eval(
                STARTED,
                vec![self.inner.records.blocking_starts(&self.tick.key)],
                vec![self.inner.instance.clone(), self.fence.token().to_string()],
            )
            .await?;
        Ok(())
    }

    /// The fenced commit of the run's effect, retrying while Redis fails
    /// (but not when the fence refuses it).
    async fn commit(&self) -> Result<(), ordo_redis::Error> {
        let key = &self.tick.key;
        let records = &self.inner.records;
        let seq = self.tick.seq.to_string();
        let writes = FencedWrite::new()
            .rpush(records.applied(key), format!("{seq}:{}", self.fence.token()))
            .command("HINCRBY", records.runs(key), [seq, "1".to_owned()])
            .del(records.marker(key))
            .sadd(records.ended(key), self.marker.as_str())
            .command("EXPIRE", records.ended(key), [ENDED_TTL_S.to_string()]);
        commit_fenced(&self.inner.client, &self.fence, &writes, &self.marker, key).await
    }

    /// Commits the effect in `effects` (retrying its failures for
    /// [`RETRY_FOR`]), then clears the marker; the line says how it went.
    async fn commit_in(&self, effects: &dyn EffectStore) -> HandlerResult {
        let started = Instant::now();
        let outcome = loop {
            match effects.commit(&self.tick, &self.ctx).await {
                Err(EffectError::Failed(error)) if started.elapsed() < RETRY_FOR => {
                    tracing::warn!(%error, key = %self.tick.key, "committing the effect failed; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                outcome => break outcome,
            }
        };
        match outcome {
            Ok(committed) => {
                self.clear().await?;
                let skipped = u8::from(committed == Committed::AlreadyApplied);
                emit(&self.line(line::DONE).field("skipped", skipped));
                Ok(())
            }
            Err(EffectError::Fenced(reason)) => {
                self.clear().await?;
                emit(&self.line(line::FENCED));
                Err(reason.into())
            }
            Err(EffectError::Failed(reason)) => self.fail(&reason).await,
            Err(EffectError::Unavailable(reason)) => {
                self.clear().await?;
                emit(
                    &self
                        .line(line::FAILED)
                        .field("reason", format!("unavailable: {reason}")),
                );
                Err(ordo_core::contract::retry::transient(format!(
                    "event {} of key {}: the effect store is unavailable: {reason}",
                    self.tick.seq, self.tick.key
                )))
            }
        }
    }

    /// Clears the in-flight marker if it is still this run's (retrying
    /// while Redis fails).
    async fn clear(&self) -> Result<(), HandlerError> {
        let records = &self.inner.records;
        let (marker, ended) = (records.marker(&self.tick.key), records.ended(&self.tick.key));
        self.retrying("clear the in-flight marker", || {
            clear_marker(&self.inner.client, &marker, &ended, &self.marker)
        })
        .await
    }

    /// Ends a failed run: clears its marker (so a retry under the same
    /// lease is not mistaken for an overlap), prints `failed`, returns the
    /// error.
    async fn fail(&self, reason: &str) -> HandlerResult {
        self.clear().await?;
        emit(&self.line(line::FAILED).field("reason", reason));
        Err(format!(
            "event {} of key {} failed: {reason}",
            self.tick.seq, self.tick.key
        )
        .into())
    }

    /// Runs `operation` until it succeeds or [`RETRY_FOR`] passes; prints
    /// `failed` when it gives up.
    async fn retrying<T, F, Fut>(&self, what: &str, operation: F) -> Result<T, HandlerError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, fred::error::Error>>,
    {
        let result = retrying(&self.tick.key, what, operation).await;
        if let Err(reason) = &result {
            emit(&self.line(line::FAILED).field("reason", reason.to_string()));
        }
        result
    }

    /// A `kind` line about this run: instance, key, seq and token.
    fn line(&self, kind: &str) -> Line {
        Line::new(kind)
            .field("instance", &self.inner.instance)
            .field("key", &self.tick.key)
            .field("seq", self.tick.seq)
            .field("token", self.fence.token())
    }
}

/// The fenced commit of `writes` as `marker` (one commit id for every
/// try: a try that timed out but reaches Redis later is not applied a
/// second time), retried while Redis fails for [`RETRY_FOR`], never when
/// the fence refuses it.
pub(crate) async fn commit_fenced(
    client: &Pool,
    fence: &RedisFence,
    writes: &FencedWrite,
    marker: &str,
    key: &str,
) -> Result<(), ordo_redis::Error> {
    let started = Instant::now();
    loop {
        match fence.commit_as(client, writes, marker).await {
            Err(error @ (ordo_redis::Error::Redis(_) | ordo_redis::Error::Unavailable(_)))
                if started.elapsed() < RETRY_FOR =>
            {
                tracing::warn!(%error, key, "committing the effect failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            result => return result.map(drop),
        }
    }
}

/// Clears the in-flight marker `marker_key` if it still holds `marker`,
/// noting the run in `ended_key`.
pub(crate) async fn clear_marker(
    client: &Pool,
    marker_key: &str,
    ended_key: &str,
    marker: &str,
) -> std::result::Result<(), fred::error::Error> {
    let _: i64 = client
        .eval(
            CLEAR,
            vec![marker_key.to_owned(), ended_key.to_owned()],
            vec![marker.to_owned(), ENDED_TTL_S.to_string()],
        )
        .await?;
    Ok(())
}

/// Runs `operation` until it succeeds or [`RETRY_FOR`] passes.
pub(crate) async fn retrying<T, F, Fut>(key: &str, what: &str, mut operation: F) -> Result<T, HandlerError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, fred::error::Error>>,
{
    let started = Instant::now();
    loop {
        match operation().await {
            Ok(value) => return Ok(value),
            Err(error) if started.elapsed() < RETRY_FOR => {
                tracing::warn!(%error, key, "{what} failed; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(error) => return Err(format!("could not {what}: {error}").into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use ordo::contract::handler::EventHandler as _;

    use super::TickHandler;
    use crate::tick::GROUP;

    #[test]
    fn the_group_is_the_handler_name() {
        assert_eq!(TickHandler::descriptor().name, GROUP);
    }
}
