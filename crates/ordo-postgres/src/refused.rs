//! What the broker refused, and what an operator does about a history
//! conflict: [`PgOutbox::refused`], [`PgOutbox::adopt`], [`PgOutbox::epoch`].
//!
//! Every publication carries the outbox's epoch (its identity and what
//! changes when the database's history forks, see docs/POSTGRES.md), and
//! Redis keeps it with each scope's last position. When the database hands
//! out a position Redis already holds *from another epoch* (a restore, a
//! point-in-time recovery, a promoted asynchronous replica, a re-created
//! schema, a fresh database against a used Redis), the publication is
//! refused rather than dropped as a duplicate: the row stays pending, the
//! scope records Redis's last position, and nothing of the key is published
//! until an operator decides. [`PgOutbox::adopt`] is that decision: this
//! database's pending rows of each such scope are renumbered to follow
//! Redis's last position, so they are published as the new events they
//! are. Rows that Redis had from the earlier history (published before a
//! restore, say) are then published a second time: nothing is lost,
//! duplicates are possible, and the operator is the one who knows.

use sqlx::AssertSqlSafe;

use crate::error::Result;
use crate::outbox::PgOutbox;

/// A position scope (a key's lane) whose next row the broker refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusedScope {
    /// The scope (`category:key`, `category:key:backfill`, or the category).
    pub scope: String,
    /// Why the broker refused it (also the refused row's `last_error`).
    pub reason: String,
    /// For a position of another history: the broker's last position of
    /// the scope, which [`PgOutbox::adopt`] continues from.
    pub broker_position: Option<u64>,
    /// Its rows waiting.
    pub pending: u64,
    /// Whether relays still leave it out of their fetches (they try it
    /// again a few seconds after each refusal).
    pub held: bool,
}

/// A scope [`PgOutbox::adopt`] renumbered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdoptedScope {
    /// The scope.
    pub scope: String,
    /// The broker's last position, which its pending rows now follow.
    pub broker_position: u64,
    /// How far its pending rows' positions moved.
    pub shift: u64,
    /// How many rows wait to be published.
    pub pending: u64,
}

/// A row of `refused_scopes`: scope, reason, broker position, published
/// and last positions, held.
type RefusedRow = (String, Option<String>, Option<i64>, i64, i64, Option<bool>);

impl PgOutbox {
    /// The scopes whose next row the broker refused, with rows pending.
    pub async fn refused(&self) -> Result<Vec<RefusedScope>> {
        let rows: Vec<RefusedRow> = sqlx::query_as(AssertSqlSafe(self.sql().refused_scopes.clone()))
            .fetch_all(self.pool())
            .await?;
        Ok(rows
            .into_iter()
            .map(|(scope, reason, broker, published, last, held)| RefusedScope {
                scope,
                reason: reason.unwrap_or_default(),
                broker_position: broker.and_then(|p| u64::try_from(p).ok()),
                pending: u64::try_from(last - published).unwrap_or(0),
                held: held.unwrap_or(false),
            })
            .collect())
    }

    /// Adopts the broker's positions where it holds them from another
    /// history of this outbox (see the module documentation): the pending
    /// rows of each such scope move past the broker's last position,
    /// which the relays then publish them after. In one transaction, the
    /// scopes locked as writers lock them, so commits of those keys wait
    /// for it. Returns what moved.
    pub async fn adopt(&self) -> Result<Vec<AdoptedScope>> {
        let sql = self.sql();
        let mut tx = self.pool().begin().await?;
        let conflicts: Vec<(String, i64, i64, i64)> = sqlx::query_as(AssertSqlSafe(sql.adopt_lock.clone()))
            .fetch_all(&mut *tx)
            .await?;
        let mut scopes = Vec::with_capacity(conflicts.len());
        let mut published = Vec::with_capacity(conflicts.len());
        let mut shifts = Vec::with_capacity(conflicts.len());
        let mut adopted = Vec::with_capacity(conflicts.len());
        for (scope, published_seq, broker_seq, last_seq) in conflicts {
            let shift = (broker_seq - published_seq).max(0);
            adopted.push(AdoptedScope {
                scope: scope.clone(),
                broker_position: u64::try_from(broker_seq).unwrap_or(0),
                shift: u64::try_from(shift).unwrap_or(0),
                pending: u64::try_from(last_seq - published_seq).unwrap_or(0),
            });
            scopes.push(scope);
            published.push(published_seq);
            shifts.push(shift);
        }
        sqlx::query(AssertSqlSafe(sql.adopt_apart.clone()))
            .bind(&scopes)
            .bind(&published)
            .bind(&shifts)
            .execute(&mut *tx)
            .await?;
        sqlx::query(AssertSqlSafe(sql.adopt_back.clone()))
            .bind(&scopes)
            .execute(&mut *tx)
            .await?;
        sqlx::query(AssertSqlSafe(sql.adopt_positions.clone()))
            .bind(&scopes)
            .bind(&shifts)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        for scope in &adopted {
            tracing::warn!(scope = %scope.scope, broker_position = scope.broker_position, shift = scope.shift,
                pending = scope.pending, "adopted the broker's positions: the scope's pending rows follow them");
        }
        Ok(adopted)
    }

    /// This outbox's epoch as relays publish it now (16 hex digits; see
    /// docs/POSTGRES.md). Needs a primary.
    pub async fn epoch(&self) -> Result<String> {
        Ok(sqlx::query_scalar(AssertSqlSafe(self.sql().identity.clone()))
            .fetch_one(self.pool())
            .await?)
    }
}
