//! Exactly-once effects in PostgreSQL: the partition's last applied
//! position and fencing token, recorded in the handler's own transaction.

use ordo_core::contract::broker::{POSITION_METADATA, POSITION_SCOPE_METADATA, REPLAY_GROUP_METADATA};
use ordo_core::contract::error::ProcessStoreError;
use ordo_core::contract::handler::{BoxFuture, HandlerContext};
use ordo_core::contract::process::ProcessStore;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Transaction};

/// Begins a handler's transaction on `pool`, its failure classified: a pool
/// timeout or a lost connection is [`Error::Unavailable`], which the broker
/// retries without using up an attempt (a database outage is not a poison
/// message). The transaction to pass to [`fenced`].
pub async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>> {
    Ok(pool.begin().await?)
}

use crate::error::{Error, Result};
use crate::schema::{DEFAULT_SCHEMA, Schema};

/// What [`fenced`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an already applied message must not be applied again"]
pub enum Fence {
    /// The message is next: apply its effects in the same transaction and commit.
    Apply,
    /// The message was already applied (a redelivery): skip its effects.
    AlreadyApplied,
}

/// Fences the handler transaction `tx` of `consumer` (the handler's name)
/// for the message of `ctx`, in schema `ordo` (see [`fenced_in`]).
pub async fn fenced(
    tx: &mut Transaction<'_, Postgres>,
    consumer: &str,
    ctx: &HandlerContext,
) -> Result<Fence> {
    let schema = Schema::new(DEFAULT_SCHEMA)?;
    fence(&schema, tx, consumer, ctx).await
}

/// Fences the handler transaction `tx` in the outbox schema `schema`.
///
/// Locks the record of (`consumer`, the message's position scope) for the
/// rest of `tx`, then:
/// - a newer fencing token already recorded → [`Error::Fenced`]: this run's
///   lease is stale; roll back (the new owner has it);
/// - the message's position already applied → [`Fence::AlreadyApplied`];
/// - otherwise records the position and token and returns [`Fence::Apply`]:
///   write the effects in `tx` and commit. If `tx` rolls back, nothing was
///   recorded and a re-run applies it.
///
/// So every message's effects land exactly once, in position order, whatever
/// the redeliveries and failovers. The message must come from the
/// PostgreSQL outbox's relay (it carries its position), else
/// [`Error::NoPosition`].
///
/// The message must have been handled under a partition lease, as a
/// `sequential_by` handler's messages are on the Redis broker (one owner
/// per key, in position order): without one (fencing token 0: a handler
/// without `sequential_by`, the inline broker) the fence refuses it with
/// [`Error::NotLeased`], since a later position applied first would make
/// an earlier one look already applied and its effects would be skipped.
///
/// A dead letter replayed by an operator (`ordo dlq replay`, marked with
/// [`REPLAY_GROUP_METADATA`]) has no position (the scope's position has
/// moved past it): it is applied once per `consumer` and message id, still
/// refused to a stale owner. A skipped or dead-lettered position leaves a
/// gap the next position passes.
pub async fn fenced_in(
    schema: &str,
    tx: &mut Transaction<'_, Postgres>,
    consumer: &str,
    ctx: &HandlerContext,
) -> Result<Fence> {
    fence(&Schema::new(schema)?, tx, consumer, ctx).await
}

async fn fence(
    schema: &Schema,
    tx: &mut Transaction<'_, Postgres>,
    consumer: &str,
    ctx: &HandlerContext,
) -> Result<Fence> {
    if ctx.fencing_token() == 0 {
        return Err(Error::NotLeased {
            consumer: consumer.to_owned(),
            message_id: ctx.message_id().to_owned(),
            category: ctx.category().to_owned(),
        });
    }
    let metadata = ctx.metadata();
    let replayed = metadata.contains_key(REPLAY_GROUP_METADATA);
    let position = metadata
        .get(POSITION_METADATA)
        .and_then(|p| p.parse::<i64>().ok());
    let (Some(scope), true) = (
        metadata.get(POSITION_SCOPE_METADATA),
        replayed || position.is_some(),
    ) else {
        return Err(Error::NoPosition {
            message_id: ctx.message_id().to_owned(),
        });
    };
    let token = i64::try_from(ctx.fencing_token()).unwrap_or(i64::MAX);
    let sql = &schema.sql;
    sqlx::query(AssertSqlSafe(sql.fence_insert.clone()))
        .bind(consumer)
        .bind(scope)
        .execute(&mut **tx)
        .await?;
    let (applied, current): (i64, i64) = sqlx::query_as(AssertSqlSafe(sql.fence_lock.clone()))
        .bind(consumer)
        .bind(scope)
        .fetch_one(&mut **tx)
        .await?;
    if current > token {
        return Err(Error::Fenced {
            consumer: consumer.to_owned(),
            scope: scope.clone(),
            fencing_token: ctx.fencing_token(),
            current: u64::try_from(current).unwrap_or(0),
        });
    }
    let Some(position) = position.filter(|_| !replayed) else {
        return replay(sql, tx, consumer, scope, token, ctx).await;
    };
    if applied >= position {
        return Ok(Fence::AlreadyApplied);
    }
    sqlx::query(AssertSqlSafe(sql.fence_update.clone()))
        .bind(consumer)
        .bind(scope)
        .bind(position)
        .bind(token)
        .bind(ctx.message_id())
        .execute(&mut **tx)
        .await?;
    Ok(Fence::Apply)
}

/// The fence of a replayed dead letter, the scope's record locked: applied
/// once per consumer and message id.
async fn replay(
    sql: &crate::schema::Sql,
    tx: &mut Transaction<'_, Postgres>,
    consumer: &str,
    scope: &str,
    token: i64,
    ctx: &HandlerContext,
) -> Result<Fence> {
    let first: Option<i32> = sqlx::query_scalar(AssertSqlSafe(sql.fence_replay.clone()))
        .bind(consumer)
        .bind(scope)
        .bind(ctx.message_id())
        .bind(token)
        .fetch_optional(&mut **tx)
        .await?;
    if first.is_none() {
        return Ok(Fence::AlreadyApplied);
    }
    sqlx::query(AssertSqlSafe(sql.fence_token.clone()))
        .bind(consumer)
        .bind(scope)
        .bind(token)
        .execute(&mut **tx)
        .await?;
    Ok(Fence::Apply)
}

/// Process-manager state in PostgreSQL, fenced like the Redis store: a save
/// carrying an older fencing token than the one stored is refused
/// ([`ProcessStoreError::Fenced`]), so a stalled owner cannot overwrite the
/// state its successor wrote.
#[derive(Debug, Clone)]
pub struct PgProcessStore {
    pool: PgPool,
    schema: Schema,
}

impl PgProcessStore {
    /// A store in `pool`'s database, in the outbox schema `schema` (created by
    /// [`PgOutbox::migrate`](crate::PgOutbox::migrate)).
    pub fn new(pool: PgPool, schema: &str) -> Result<Self> {
        Ok(Self {
            pool,
            schema: Schema::new(schema)?,
        })
    }
}

fn store_error(manager: &str, correlation: &str, error: sqlx::Error) -> ProcessStoreError {
    ProcessStoreError::Storage {
        manager: manager.to_owned(),
        correlation: correlation.to_owned(),
        source: Box::new(Error::from(error)),
    }
}

impl ProcessStore for PgProcessStore {
    fn load<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProcessStoreError>> {
        Box::pin(async move {
            sqlx::query_scalar(AssertSqlSafe(self.schema.sql.process_load.clone()))
                .bind(manager)
                .bind(correlation)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| store_error(manager, correlation, e))
        })
    }

    fn save<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
        state: String,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, Result<(), ProcessStoreError>> {
        Box::pin(async move {
            let token = i64::try_from(ctx.fencing_token()).unwrap_or(i64::MAX);
            let saved: Option<i64> = sqlx::query_scalar(AssertSqlSafe(self.schema.sql.process_save.clone()))
                .bind(manager)
                .bind(correlation)
                .bind(state)
                .bind(token)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| store_error(manager, correlation, e))?;
            match saved {
                Some(_) => Ok(()),
                None => Err(ProcessStoreError::Fenced {
                    manager: manager.to_owned(),
                    correlation: correlation.to_owned(),
                    fencing_token: ctx.fencing_token(),
                }),
            }
        })
    }
}
