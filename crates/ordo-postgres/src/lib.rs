//! The PostgreSQL transactional outbox for Ordo.
//!
//! - [`UnitOfWorkExt::commit_in`]: a unit of work's events are written in the
//!   application's own transaction, keys validated first; they exist if and
//!   only if the business write committed.
//! - [`PgRelay`]: any number of relays publish the outbox to the broker, each
//!   key's rows in commit order, by one relay at a time, none skipped and
//!   none published twice (positions make re-publishing a no-op).
//! - [`fenced`]: a handler's effects in PostgreSQL applied exactly once, and
//!   [`PgProcessStore`] for process-manager state, fenced by the lease token.
//!   Begin the handler's transaction with [`begin`]: while the database is
//!   down, its errors (and [`fenced`]'s) are transient
//!   ([`Error::Unavailable`]), retried without using up the message's
//!   attempts, so an outage does not halt the keys.
//!
//! ```no_run
//! # async fn example(pool: sqlx::PgPool, domain: ordo_core::Domain, event: impl ordo_core::Event)
//! # -> Result<(), Box<dyn std::error::Error>> {
//! use ordo_postgres::UnitOfWorkExt;
//!
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE account SET balance = balance + 10 WHERE id = 1").execute(&mut *tx).await?;
//! let mut uow = domain.unit_of_work();
//! uow.raise(event)?;
//! uow.commit_in(&mut tx).await?; // keys validated, rows inserted in tx
//! tx.commit().await?;            // the events exist iff the business write committed
//! # Ok(()) }
//! ```
//!
//! The design (positions versus `BIGSERIAL` ids, relay slots, the idempotent
//! broker side) is in docs/POSTGRES.md.

mod error;
mod fence;
mod outbox;
mod refused;
mod relay;
mod schema;
mod status;

pub use error::{Error, Result, is_transient};
pub use fence::{Fence, PgProcessStore, begin, fenced, fenced_in};
pub use outbox::{DEFAULT_LEASE_TTL, DEFAULT_MAX_ROW_BYTES, PgOutbox, PgOutboxBuilder, UnitOfWorkExt};
pub use refused::{AdoptedScope, RefusedScope};
pub use relay::{DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, DEFAULT_POLL_INTERVAL, DEFAULT_RETENTION, PgRelay};
pub use schema::DEFAULT_SCHEMA;
pub use sqlx;
pub use status::OutboxStatusReport;
