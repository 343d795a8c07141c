//! The chaos checker's PostgreSQL mode (`chaos --postgres`): the outbox in
//! PostgreSQL, a relay in every worker process (and in `--relays` relay-only
//! processes, which the `relay_kill` and `relay_stop` faults hit), and the
//! handlers' effects written to PostgreSQL through [`ordo_postgres::fenced`].
//!
//! - The publisher commits each tick's events with `commit_in` in a
//!   transaction of its own; it never publishes: the relays do.
//! - A run's effect is a row of `{schema}.chaos_effects` (key, seq, token),
//!   inserted in the transaction the fence locks, so an event applied
//!   already is skipped and a stale owner's transaction fails. Within a key,
//!   rows are inserted one transaction after another (the fence's row lock
//!   is taken first), so their ids are the key's commit order.
//! - The verifier is the harness's, on Redis: before each verification the
//!   effects are copied, per key in id order, to the applied lists it reads
//!   (`harness:applied:{key}`), which nothing else writes in this mode.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use fred::clients::Pool;
use fred::interfaces::{KeysInterface as _, ListInterface as _};
use ordo_core::contract::handler::{BoxFuture, HandlerContext};
use ordo_harness::keys;
use ordo_harness::line::{self, Line};
use ordo_harness::tick::{GROUP, Tick};
use ordo_harness::worker::{Committed, EffectError, EffectStore, TickHandler, WorkerOptions};
use ordo_postgres::sqlx::{self, AssertSqlSafe, PgPool};
use ordo_postgres::{Fence, PgOutbox, PgRelay};
use ordo_redis::RedisBroker;
use tokio_util::sync::CancellationToken;

/// Connections of one worker's pool: the relay's reads and marks, its
/// LISTEN, the slot leases, and a few concurrent handler transactions.
const WORKER_POOL: u32 = 8;

/// Where a run keeps its PostgreSQL state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgTarget {
    /// The database URL (shown with its password masked).
    pub url: ordo_redis::SecretUrl,
    /// The outbox schema (its tables and `chaos_effects`).
    pub schema: String,
}

impl PgTarget {
    /// A pool of `size` connections.
    pub async fn connect(&self, size: u32) -> Result<PgPool> {
        self.connect_with(size, &[]).await
    }

    /// A pool of `size` connections with these server settings.
    pub async fn connect_with(&self, size: u32, settings: &[(&str, &str)]) -> Result<PgPool> {
        self.connect_waiting(size, settings, Duration::from_secs(30))
            .await
    }

    /// [`PgTarget::connect_with`] whose callers wait at most `acquire` for
    /// a connection (while the database is down, they fail after it).
    pub async fn connect_waiting(
        &self,
        size: u32,
        settings: &[(&str, &str)],
        acquire: Duration,
    ) -> Result<PgPool> {
        let options: sqlx::postgres::PgConnectOptions = self
            .url
            .expose()
            .parse()
            .with_context(|| format!("`{}` is not a PostgreSQL URL", self.url))?;
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(acquire)
            .connect_with(options.options(settings.iter().copied()))
            .await
            .with_context(|| format!("could not connect to PostgreSQL at {}", self.url))
    }

    /// The outbox of relay `relay_id`, its slot leases living `lease_ttl`.
    pub fn outbox(&self, pool: &PgPool, relay_id: &str, lease_ttl: Duration) -> Result<PgOutbox> {
        Ok(PgOutbox::builder(pool.clone())
            .schema(&self.schema)
            .relay_id(relay_id)
            .lease_ttl(lease_ttl)
            .build()?)
    }

    /// Creates the outbox schema and the effects table (empty).
    pub async fn prepare(&self, pool: &PgPool) -> Result<()> {
        PgOutbox::builder(pool.clone())
            .schema(&self.schema)
            .build()?
            .migrate()
            .await
            .context("could not create the outbox schema")?;
        sqlx::query(AssertSqlSafe(format!(
            "CREATE TABLE IF NOT EXISTS \"{}\".chaos_effects \
             (id bigserial PRIMARY KEY, key text NOT NULL, seq int8 NOT NULL, token int8 NOT NULL)",
            self.schema
        )))
        .execute(pool)
        .await
        .context("could not create the effects table")?;
        Ok(())
    }

    /// Drops the run's schema.
    pub async fn drop_schema(&self, pool: &PgPool) -> Result<()> {
        sqlx::query(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
            self.schema
        )))
        .execute(pool)
        .await
        .with_context(|| format!("could not drop schema {}", self.schema))?;
        Ok(())
    }
}

/// The effects of [`Tick`] runs in PostgreSQL, through the fence.
#[derive(Debug, Clone)]
pub struct PgEffects {
    pool: PgPool,
    schema: String,
}

impl PgEffects {
    /// Effects in `schema` of `pool`'s database.
    pub fn new(pool: PgPool, schema: impl Into<String>) -> Self {
        Self {
            pool,
            schema: schema.into(),
        }
    }

    async fn apply(&self, tick: &Tick, ctx: &HandlerContext) -> Result<Committed, EffectError> {
        // A database outage (a pool timeout, a lost connection) is transient:
        // the broker retries the run without using up an attempt.
        let failed = |e: ordo_postgres::Error| {
            let text = ordo_core::contract::error::error_chain(&e);
            if e.is_transient() {
                EffectError::Unavailable(text)
            } else {
                EffectError::Failed(text)
            }
        };
        let query = |e: sqlx::Error| failed(e.into());
        let mut tx = ordo_postgres::begin(&self.pool).await.map_err(failed)?;
        let fence = match ordo_postgres::fenced_in(&self.schema, &mut tx, GROUP, ctx).await {
            Ok(fence) => fence,
            Err(error @ ordo_postgres::Error::Fenced { .. }) => {
                return Err(EffectError::Fenced(error.to_string()));
            }
            Err(error) => return Err(failed(error)),
        };
        if fence == Fence::AlreadyApplied {
            return Ok(Committed::AlreadyApplied);
        }
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{}\".chaos_effects (key, seq, token) VALUES ($1, $2, $3)",
            self.schema
        )))
        .bind(&tick.key)
        .bind(i64::try_from(tick.seq).unwrap_or(i64::MAX))
        .bind(i64::try_from(ctx.fencing_token()).unwrap_or(i64::MAX))
        .execute(&mut *tx)
        .await
        .map_err(query)?;
        tx.commit().await.map_err(query)?;
        Ok(Committed::Applied)
    }

    /// Copies the effects to the harness's applied lists in Redis (see the
    /// module documentation); returns how many.
    pub async fn mirror(&self, client: &Pool, keys: &[String]) -> Result<u64> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT key, seq, token FROM \"{}\".chaos_effects ORDER BY key, id",
            self.schema
        )))
        .fetch_all(&self.pool)
        .await
        .context("could not read the effects")?;
        let copied = rows.len() as u64;
        let mut per_key: BTreeMap<String, Vec<String>> =
            keys.iter().map(|k| (k.clone(), Vec::new())).collect();
        for (key, seq, token) in rows {
            per_key.entry(key).or_default().push(format!("{seq}:{token}"));
        }
        for (key, entries) in per_key {
            let list = keys::applied(&key);
            let _: i64 = client
                .del(&list)
                .await
                .context("could not reset an applied list")?;
            for chunk in entries.chunks(1_000) {
                let _: i64 = client
                    .rpush(&list, chunk.to_vec())
                    .await
                    .context("could not copy the effects")?;
            }
        }
        Ok(copied)
    }
}

impl EffectStore for PgEffects {
    fn commit<'a>(
        &'a self,
        tick: &'a Tick,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, Result<Committed, EffectError>> {
        Box::pin(self.apply(tick, ctx))
    }
}

/// Runs a worker of the PostgreSQL mode until `shutdown`: the engine with
/// effects in PostgreSQL and a relay, or (`relay_only`) a relay alone.
/// Prints `ready` and `stopped` like the harness's worker.
pub async fn run_worker(
    options: &WorkerOptions,
    target: &PgTarget,
    relay_only: bool,
    shutdown: CancellationToken,
) -> Result<()> {
    let config = options.config()?;
    // A worker stopped inside a handler's transaction holds its key's
    // fence row lock: the server ends such a transaction well within a
    // lease, so the key's next owner is not held up (see docs/POSTGRES.md).
    let idle = format!("{}", (options.lease_ttl_ms / 2).max(100));
    // Handlers wait at most a lease TTL for a connection: in a database
    // outage they fail (transiently) rather than hang.
    let pool = target
        .connect_waiting(
            WORKER_POOL,
            &[("idle_in_transaction_session_timeout", idle.as_str())],
            Duration::from_millis(options.lease_ttl_ms.max(500)),
        )
        .await?;
    // The relays' slot leases live as long as the engine's, so a killed or
    // stalled relay's keys move within the same time as its partitions.
    let lease_ttl = Duration::from_millis(options.lease_ttl_ms);
    let outbox = target.outbox(&pool, &options.instance, lease_ttl)?;
    let broker = RedisBroker::builder(&options.redis_url)
        .tls(options.tls.clone())
        .config(config.clone())
        .instance_id(&options.instance)
        .build()
        .await
        .context("could not connect to Redis")?;
    let poll = lease_ttl / 4;
    let ready = || println!("{}", Line::new(line::READY).field("instance", &options.instance));
    if relay_only {
        let relay = PgRelay::new(outbox, Arc::new(broker), &config).poll_interval(poll);
        ready();
        relay.run(shutdown).await?;
    } else {
        let effects = Arc::new(PgEffects::new(pool.clone(), target.schema.clone()));
        let handler = TickHandler::with_effects(broker.client().clone(), &options.instance, effects);
        let domain = ordo_harness::worker::domain(broker, handler, config)?;
        let relay = PgRelay::for_domain(outbox, &domain).poll_interval(poll);
        let running = domain.start();
        ready();
        relay.run(shutdown).await?;
        running
            .shutdown()
            .await
            .context("the engine did not shut down cleanly")?;
    }
    println!(
        "{}",
        Line::new(line::STOPPED).field("instance", &options.instance)
    );
    Ok(())
}
