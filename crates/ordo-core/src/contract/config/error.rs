//! The configuration's errors, and where a setting at fault came from.

use std::fmt;
use std::path::PathBuf;

/// Where a setting came from, named by the errors about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// A line of the configuration file (`path` is `None` for text that was
    /// not read from a file).
    File {
        /// The file.
        path: Option<PathBuf>,
        /// The line, from 1.
        line: usize,
    },
    /// An environment variable.
    Env {
        /// Its name, like `ORDO_SERVER_PARTITIONING_LEASE_TTL_MS`.
        var: String,
    },
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File {
                path: Some(path),
                line,
            } => write!(f, "{}:{line}", path.display()),
            Self::File { path: None, line } => write!(f, "line {line} of the domain configuration"),
            Self::Env { var } => write!(f, "environment variable {var}"),
        }
    }
}

/// An invalid or unreadable configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not valid TOML or has a value of the wrong type (the
    /// parser's message names it, quoting the line with its secrets masked).
    #[error("cannot parse the domain configuration")]
    Parse(#[source] TomlError),
    /// A key that `domain.toml` does not have, at any level.
    #[error("unknown key `{key}` in the domain configuration; valid keys {}: {}", unknown_key_place(key), valid.join(", "))]
    UnknownKey {
        /// The full dotted key, like `server.partioning`.
        key: String,
        /// The valid keys at that level.
        valid: Vec<&'static str>,
    },
    /// A table where a value belongs, or a value where a table belongs.
    #[error("`{key}` in the domain configuration must be {expected}, got {found}")]
    WrongType {
        /// The full dotted key.
        key: String,
        /// What belongs there (`a table`, `a value`).
        expected: &'static str,
        /// The TOML type found, with its article (`an integer`).
        found: &'static str,
    },
    /// A `[handlers.NAME]` value is out of range.
    #[error("handlers.{handler}.{key} {reason}")]
    InvalidHandlerSetting {
        /// The handler name (the table's name).
        handler: String,
        /// The key in the table, like `max_retries`.
        key: &'static str,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A `[categories.NAME]` value is out of range.
    #[error("categories.{category}.{key} {reason}")]
    InvalidCategorySetting {
        /// The category (the table's name).
        category: String,
        /// The key in the table, like `partitions`.
        key: &'static str,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A value is out of range.
    #[error("{key} {reason}")]
    Invalid {
        /// The full key, like `server.partitioning.max_retries`.
        key: &'static str,
        /// What is wrong, with the value found.
        reason: String,
    },
    /// A setting that is wrong (`error`), and where it was set: a file's
    /// line or an environment variable (see `Config::load`).
    #[error("bad setting in {origin}")]
    At {
        /// Where the setting came from.
        origin: Origin,
        /// What is wrong with it.
        #[source]
        error: Box<ConfigError>,
    },
    /// An `ORDO_` environment variable under a table of the configuration
    /// (`ORDO_SERVER_...`, `ORDO_HEALTH_...`) that names no setting: a typo
    /// is never silently ignored.
    #[error("environment variable {var} names no setting of the domain configuration; the names there: {}", valid.join(", "))]
    UnknownEnvVar {
        /// The variable.
        var: String,
        /// The valid names under the same table.
        valid: Vec<String>,
    },
}

/// Where the valid keys of an unknown key's level are: `at the top level`
/// or `in [server]`.
fn unknown_key_place(key: &str) -> String {
    match key.rsplit_once('.') {
        Some((table, _)) => format!("in [{table}]"),
        None => "at the top level".to_owned(),
    }
}

/// A TOML parse error, as the parser words it (where, the line it quotes,
/// what was expected) with the passwords of the URLs in it masked
/// ([`redact_secrets`](crate::contract::text::redact_secrets)): a malformed
/// `url = ...` line is quoted without its password. Neither its `Display`
/// nor its `Debug` holds the configuration text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TomlError {
    message: String,
}

impl TomlError {
    /// The parser's message, secrets masked.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// A message of a deserializer other than the parser's, secrets masked.
    pub(crate) fn from_message(message: String) -> Self {
        Self {
            message: crate::contract::text::redact_secrets(message.trim_end()),
        }
    }
}

impl From<toml::de::Error> for TomlError {
    fn from(error: toml::de::Error) -> Self {
        Self {
            message: crate::contract::text::redact_secrets(error.to_string().trim_end()),
        }
    }
}

impl ConfigError {
    /// The configuration key at fault, for [`ConfigError::Invalid`] (also
    /// when it is wrapped in [`ConfigError::At`]).
    pub fn key(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { key, .. } => Some(key),
            Self::At { error, .. } => error.key(),
            _ => None,
        }
    }

    /// Where the setting at fault came from, for [`ConfigError::At`].
    pub fn origin(&self) -> Option<&Origin> {
        match self {
            Self::At { origin, .. } => Some(origin),
            _ => None,
        }
    }

    /// The error itself, without where it was set ([`ConfigError::At`]).
    pub fn innermost(&self) -> &ConfigError {
        match self {
            Self::At { error, .. } => error.innermost(),
            other => other,
        }
    }

    /// The dotted key this error is about, if it names one.
    pub(crate) fn dotted_key(&self) -> Option<String> {
        match self {
            Self::UnknownKey { key, .. } | Self::WrongType { key, .. } => Some(key.clone()),
            Self::Invalid { key, .. } => Some((*key).to_owned()),
            Self::InvalidHandlerSetting { handler, key, .. } => Some(format!("handlers.{handler}.{key}")),
            Self::InvalidCategorySetting { category, key, .. } => {
                Some(format!("categories.{category}.{key}"))
            }
            // A type error found while reading a merged table ends with
            // "in `server.partitioning.max_retries`".
            Self::Parse(error) => {
                let text = error.to_string();
                let (_, after) = text.rsplit_once("in `")?;
                let (key, _) = after.split_once('`')?;
                Some(key.to_owned())
            }
            Self::Io { .. } | Self::At { .. } | Self::UnknownEnvVar { .. } => None,
        }
    }
}
