//! The errors of the PostgreSQL outbox.

/// What went wrong with the PostgreSQL outbox, relay or fence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PostgreSQL query failed (constraint, server error, bad data).
    #[error("postgres query failed")]
    Postgres(#[source] sqlx::Error),

    /// PostgreSQL could not be reached or could not serve the query for
    /// now: the pool timed out waiting for a connection, a connection was
    /// lost or refused, the server is starting, shutting down or out of
    /// connections. The source carries the
    /// [`Transient`](ordo_core::contract::retry::Transient) marker, so a handler that
    /// returns it is retried without using up an attempt (see
    /// [`is_transient`](crate::is_transient)).
    #[error("PostgreSQL is unavailable for now")]
    Unavailable(#[source] ordo_core::contract::retry::Transient),

    /// Publishing from the outbox failed (reading rows or marking them).
    #[error("outbox relay failed")]
    Outbox(#[source] ordo_core::contract::error::OutboxError),

    /// The task marking a published batch's rows panicked or was cancelled
    /// (the rows stay pending; their re-publish is dropped by position).
    #[error("the task marking published outbox rows did not finish: {0}")]
    MarkTask(String),

    /// A configuration value is unusable.
    #[error("invalid outbox setting `{key}`: {reason}")]
    Config {
        /// The setting.
        key: &'static str,
        /// What is wrong with its value.
        reason: String,
    },

    /// A stored row cannot be read back (written by something else, or by
    /// an incompatible version).
    #[error("outbox row {id} is unreadable: {reason}")]
    CorruptRow {
        /// The row id.
        id: i64,
        /// What is wrong with it.
        reason: String,
    },

    /// The message has no outbox position: it was not published by the
    /// PostgreSQL outbox's relay (or, replayed from a dead-letter stream,
    /// has no position scope), so its effects cannot be fenced by position.
    #[error(
        "message {message_id} carries no outbox position (metadata `ordo.position.scope`/`ordo.position`): \
         only messages published from the PostgreSQL outbox (or their dead letters replayed with \
         `ordo dlq replay`) can be fenced"
    )]
    NoPosition {
        /// The message id.
        message_id: String,
    },

    /// The message was handled without a partition lease (fencing token 0):
    /// a handler without `sequential_by` (a plain consumer group, any
    /// instance, any order), or the inline broker. Positions of one scope
    /// may then run out of order, and a position fence would take an
    /// earlier one for a redelivery once a later one is applied, skipping
    /// its effects for good; so it refuses to fence it.
    #[error(
        "`{consumer}` cannot fence message {message_id} of `{category}` by its outbox position: it was \
         handled without a partition lease (fencing token 0), so messages of its key may run in any order \
         and on several instances at once, and a later one applied first would make this one look already \
         applied; declare `sequential_by` on the handler (on the Redis broker) to fence its effects"
    )]
    NotLeased {
        /// The handler (consumer group) name.
        consumer: String,
        /// The message id.
        message_id: String,
        /// The message's category.
        category: String,
    },

    /// A newer owner of the partition already wrote through the fence: this
    /// handler runs under a stale lease and its transaction must roll back.
    #[error(
        "fenced: `{consumer}` on `{scope}` holds fencing token {fencing_token}, \
         but token {current} already wrote there"
    )]
    Fenced {
        /// The handler (consumer group) name.
        consumer: String,
        /// The position scope (partition lane).
        scope: String,
        /// The stale token of this handler run.
        fencing_token: u64,
        /// The newer token recorded.
        current: u64,
    },
}

impl From<sqlx::Error> for Error {
    /// A connection-class error as [`Error::Unavailable`], any other as
    /// [`Error::Postgres`].
    fn from(error: sqlx::Error) -> Self {
        if is_transient(&error) {
            Self::Unavailable(ordo_core::contract::retry::Transient::new(error))
        } else {
            Self::Postgres(error)
        }
    }
}

impl Error {
    /// Whether PostgreSQL was unreachable or could not serve the query for
    /// now ([`Error::Unavailable`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }
}

/// Whether `error` is of the kind a retry later cures: the pool timed out
/// waiting for a connection or is closed, a connection failed or was lost
/// (I/O, TLS, a dead connection worker), or the server refused the query
/// for its own state: SQLSTATE class `08` (connection exception), `57P01`
/// to `57P03` (shutting down, crashed, starting up), `53300` (too many
/// connections).
///
/// A handler that runs its own queries marks their errors with it:
///
/// ```no_run
/// # async fn handle(pool: &sqlx::PgPool) -> Result<(), ordo_core::contract::handler::HandlerError> {
/// let mut tx = ordo_postgres::begin(pool).await?; // classified already
/// sqlx::query("UPDATE account SET balance = balance + 1")
///     .execute(&mut *tx)
///     .await
///     .map_err(ordo_postgres::Error::from)?; // transient when the database went away
/// tx.commit().await.map_err(ordo_postgres::Error::from)?;
/// # Ok(()) }
/// ```
pub fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(database) => database.code().is_some_and(|code| {
            code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03" | "53300")
        }),
        _ => false,
    }
}

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
