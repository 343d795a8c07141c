//! Exit codes scripts can rely on.
//!
//! | code | meaning |
//! |------|---------|
//! | 0 | ok |
//! | 1 | error: Redis unreachable, unexpected data, a failed action (`--all`: any of them) |
//! | 2 | usage: bad arguments (clap's own code), unknown category, ambiguous or unknown group |
//! | 3 | refused: partition not halted, head changed, not confirmed (`--all`: some keys changed since listed, none failed) |
//! | 4 | `status --check`: halted partitions exist |
//! | 5 | `status --check`: a warning (a paused handler among them) and no halted partition |
//!
//! A bulk action (`retry | skip | dlq --all`) that matches nothing, or a
//! `--dry-run`, exits 0.

use std::fmt;
use std::process::ExitCode;

/// Said after an error Redis's ACL refused: a command (`NOPERM`), or a
/// command inside one of Ordo's functions (Redis says so in other words).
const NOPERM_HINT: &str = "the Redis ACL user of this URL lacks a permission this command needs: \
     docs/OPERATIONS.md (\"ACL users\") gives the rule of each role (the reader's cannot skip, \
     retry, dlq, replay or purge)";

/// A command that did not do what was asked.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Something went wrong (exit 1).
    Error(anyhow::Error),
    /// The arguments do not name something that exists or are ambiguous
    /// (exit 2).
    Usage(String),
    /// The action was refused: nothing was changed (exit 3).
    Refused(String),
}

/// How a command that ran to the end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Exit 0.
    Ok,
    /// `--check` found halted partitions (exit 4).
    Halted,
    /// `--check` found a warning (exit 5).
    Warning,
}

impl Failure {
    pub(crate) fn code(&self) -> ExitCode {
        ExitCode::from(match self {
            Self::Error(_) => 1,
            Self::Usage(_) => 2,
            Self::Refused(_) => 3,
        })
    }

    /// Prints the failure to stderr, each line escaped (an error may quote
    /// text from Redis).
    pub(crate) fn report(&self) {
        for line in self.to_string().lines() {
            eprintln!("{}", crate::format::text(line));
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `{:#}` prints the chain of causes on one line.
            Self::Error(error) => {
                let text = format!("{error:#}");
                write!(f, "error: {text}")?;
                if text.contains("NOPERM") || text.contains("The user executing the script can't") {
                    write!(f, "\nhint: {NOPERM_HINT}")?;
                }
                Ok(())
            }
            Self::Usage(message) => write!(f, "error: {message}"),
            Self::Refused(message) => write!(f, "refused: {message}"),
        }
    }
}

impl Verdict {
    pub(crate) fn code(self) -> ExitCode {
        ExitCode::from(match self {
            Self::Ok => 0,
            Self::Halted => 4,
            Self::Warning => 5,
        })
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Self {
        Self::Error(error)
    }
}

impl From<ordo_redis::Error> for Failure {
    fn from(error: ordo_redis::Error) -> Self {
        Self::Error(error.into())
    }
}
