//! The harness's errors.

/// What went wrong running a worker, publishing or verifying.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// The options do not make a valid domain configuration.
    #[error("invalid worker options")]
    Config(#[source] ordo_core::ConfigError),

    /// The domain refused the registrations.
    #[error("the domain could not be built")]
    Domain(#[source] ordo_core::IncorrectUsageError),

    /// The Redis broker failed (connecting, or an operation of its own).
    #[error("the Redis broker failed")]
    Broker(#[source] ordo_redis::Error),

    /// A Redis command of the harness failed.
    #[error("redis command failed: {what}")]
    Redis {
        /// What the harness was doing.
        what: String,
        /// The client's error.
        #[source]
        source: fred::error::Error,
    },

    /// Raising or committing events failed.
    #[error("committing events failed")]
    Commit(#[source] ordo_core::CommitError),

    /// The outbox still had pending rows at the publish deadline.
    #[error("events were still unpublished after {waited_ms} ms")]
    PublishTimeout {
        /// How long the publisher waited.
        waited_ms: u128,
    },

    /// Shutting the domain down failed.
    #[error("the domain did not shut down cleanly")]
    Shutdown(#[source] ordo_core::ShutdownError),

    /// The process could not listen for a termination signal.
    #[error("cannot listen for {signal}")]
    Signal {
        /// The signal, such as `SIGTERM`.
        signal: &'static str,
        /// The runtime's error.
        #[source]
        source: std::io::Error,
    },

    /// Something the workers recorded in Redis is not in the harness's format.
    #[error("unexpected record in `{key}`: {detail}")]
    Record {
        /// The Redis key.
        key: String,
        /// What was wrong with it.
        detail: String,
    },
}

impl HarnessError {
    /// A failed Redis command, with what the harness was doing.
    pub(crate) fn redis(what: impl Into<String>) -> impl FnOnce(fred::error::Error) -> Self {
        let what = what.into();
        move |source| Self::Redis { what, source }
    }
}

/// The result of the harness's operations.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
