//! What an operator wants to know about the outbox.

use std::fmt;
use std::time::Duration;

use sqlx::AssertSqlSafe;

use crate::error::Result;
use crate::outbox::PgOutbox;

/// The state of a PostgreSQL outbox.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct OutboxStatusReport {
    /// Rows not published yet.
    pub pending: u64,
    /// Age of the oldest pending row (zero when none is pending).
    pub oldest_pending_age: Duration,
    /// Rows given up for good (an invalid key), kept for inspection.
    pub abandoned: u64,
    /// Relays alive (registered within their lease TTL).
    pub live_relays: u64,
    /// Relay slots currently leased (of 64).
    pub leased_slots: u64,
    /// Position scopes (keys' lanes) whose next row the broker refused:
    /// their rows wait, with the reason in the refused row's `last_error`
    /// (see [`PgOutbox::refused`]).
    pub refused: u64,
    /// Of those, the scopes whose positions the broker holds from another
    /// history of this outbox (a restored or re-created database): they
    /// wait for an operator to adopt the broker's positions
    /// ([`PgOutbox::adopt`], `ordo-pg-relay adopt`).
    pub conflicts: u64,
}

impl OutboxStatusReport {
    /// Reads the status of `outbox`.
    pub async fn read(outbox: &PgOutbox) -> Result<Self> {
        let (pending, oldest, abandoned, relays, slots, refused, conflicts): (
            i64,
            f64,
            i64,
            i64,
            i64,
            i64,
            i64,
        ) = sqlx::query_as(AssertSqlSafe(outbox.sql().status.clone()))
            .fetch_one(outbox.pool())
            .await?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Ok(Self {
            pending: count(pending),
            oldest_pending_age: Duration::try_from_secs_f64(oldest).unwrap_or_default(),
            abandoned: count(abandoned),
            live_relays: count(relays),
            leased_slots: count(slots),
            refused: count(refused),
            conflicts: count(conflicts),
        })
    }

    /// Records the status as gauges through the `metrics` facade:
    /// `ordo_outbox_pending`, `ordo_outbox_oldest_pending_seconds`,
    /// `ordo_outbox_abandoned`, `ordo_outbox_live_relays`,
    /// `ordo_outbox_refused_scopes`, `ordo_outbox_history_conflicts`.
    pub fn record_metrics(&self) {
        metrics::gauge!("ordo_outbox_refused_scopes").set(self.refused as f64);
        metrics::gauge!("ordo_outbox_history_conflicts").set(self.conflicts as f64);
        metrics::gauge!("ordo_outbox_pending").set(self.pending as f64);
        metrics::gauge!("ordo_outbox_oldest_pending_seconds").set(self.oldest_pending_age.as_secs_f64());
        metrics::gauge!("ordo_outbox_abandoned").set(self.abandoned as f64);
        metrics::gauge!("ordo_outbox_live_relays").set(self.live_relays as f64);
    }
}

impl fmt::Display for OutboxStatusReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outbox: {} pending (oldest {:.1}s), {} abandoned; {} live relays leasing {} of 64 slots",
            self.pending,
            self.oldest_pending_age.as_secs_f64(),
            self.abandoned,
            self.live_relays,
            self.leased_slots
        )?;
        if self.refused > 0 {
            write!(
                f,
                "; {} keys wait behind a row the broker refused ({} of them hold positions of another history \
                 of this outbox: see `ordo-pg-relay adopt`)",
                self.refused, self.conflicts
            )?;
        }
        Ok(())
    }
}
