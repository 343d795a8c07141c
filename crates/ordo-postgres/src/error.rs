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
    /// PostgreSQL outbox's relay, so its effects cannot be fenced by position.
    #[error(
        "message {message_id} carries no outbox position (metadata `ordo.position.scope`/`ordo.position`): \
         only messages published from the PostgreSQL outbox can be fenced"
    )]
    NoPosition {
        /// The message id.
        message_id: String,
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
