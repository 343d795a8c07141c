//! The errors of the PostgreSQL outbox.

/// What went wrong with the PostgreSQL outbox, relay or fence.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A PostgreSQL query failed (connection lost, constraint, server error).
    #[error("postgres query failed")]
    Postgres(#[from] sqlx::Error),

    /// Publishing from the outbox failed (reading rows or marking them).
    #[error("outbox relay failed")]
    Outbox(#[source] ordo_core::error::OutboxError),

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

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
