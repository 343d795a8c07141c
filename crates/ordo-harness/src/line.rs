//! The machine-readable lines a worker prints on stdout, one per event:
//! a kind, then `name=value` fields, e.g.
//!
//! ```text
//! ready instance=w1
//! start instance=w1 key=k3 seq=17 token=1712345678901234 attempt=1 overlap=0
//! done instance=w1 key=k3 seq=17 token=1712345678901234
//! fenced instance=w1 key=k3 seq=17 token=1712345678901234
//! stale instance=w1 key=k3 seq=18 token=1712345678901234
//! failed instance=w1 key=k3 seq=17 token=1712345678901234 reason=poison
//! stopped instance=w1
//! cmd_fenced instance=w2 key=c3 sender=w1 seq=40 token=1712345678901234
//! sent_failed instance=w1 key=c3 seq=40 reason=the handler failed: ...
//! ```
//!
//! Values hold no whitespace, except `reason`, which is always last and
//! runs to the end of the line.

use std::collections::BTreeMap;
use std::fmt;

/// `ready`: the worker's consumer is running.
pub const READY: &str = "ready";
/// `start`: a handler run began (after the overlap check).
pub const START: &str = "start";
/// `done`: a run's effect was committed under its fence.
pub const DONE: &str = "done";
/// `fenced`: a run's effect was refused because its lease is gone.
pub const FENCED: &str = "fenced";
/// `stale`: a run did not start because its lease was already lost.
pub const STALE: &str = "stale";
/// `failed`: a run failed (poison, or Redis errors), with a `reason`.
pub const FAILED: &str = "failed";
/// `stopped`: the worker shut down gracefully.
pub const STOPPED: &str = "stopped";

/// `cmd_overlap`: a command run began while another run of its key was in
/// flight under the same valid lease.
pub const CMD_OVERLAP: &str = "cmd_overlap";
/// `cmd_fenced`: a command run's effect was refused because its lease is gone.
pub const CMD_FENCED: &str = "cmd_fenced";
/// `cmd_stale`: a command run did not start because its lease was already lost.
pub const CMD_STALE: &str = "cmd_stale";
/// `cmd_failed`: a command run failed (Redis errors), with a `reason`.
pub const CMD_FAILED: &str = "cmd_failed";
/// `sent_failed`: a sender got a failure outcome for its command, with a `reason`.
pub const SENT_FAILED: &str = "sent_failed";
/// `sent_wrong`: a sender got a reply about another command, with the reply
/// as `reason`.
pub const SENT_WRONG: &str = "sent_wrong";

/// The field that runs to the end of the line.
const REST_FIELD: &str = "reason";

/// One output line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    kind: String,
    fields: Vec<(String, String)>,
}

impl Line {
    /// A line of `kind` without fields.
    pub fn new(kind: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            fields: Vec::new(),
        }
    }

    /// Appends a field (whitespace in a value other than `reason`'s is
    /// replaced, so the line stays parseable).
    #[must_use]
    pub fn field(mut self, name: &str, value: impl fmt::Display) -> Self {
        let mut value = value.to_string();
        if name != REST_FIELD {
            value = value.split_whitespace().collect::<Vec<_>>().join("_");
        } else {
            value = value.replace(['\n', '\r'], " ");
        }
        self.fields.push((name.to_owned(), value));
        self
    }

    /// Parses a line; `None` when it is not in this format (a log line).
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (kind, mut rest) = text.split_once(' ').unwrap_or((text, ""));
        if kind.is_empty() || kind.contains('=') {
            return None;
        }
        let mut fields = Vec::new();
        while !rest.is_empty() {
            let (name, after) = rest.split_once('=')?;
            if name.is_empty() || name.contains(' ') {
                return None;
            }
            if name == REST_FIELD {
                fields.push((name.to_owned(), after.to_owned()));
                break;
            }
            let (value, next) = after.split_once(' ').unwrap_or((after, ""));
            fields.push((name.to_owned(), value.to_owned()));
            rest = next.trim_start();
        }
        Some(Self {
            kind: kind.to_owned(),
            fields,
        })
    }

    /// The kind (`start`, `done`, ...).
    pub fn kind(&self) -> &str {
        &self.kind
    }

    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every field, by name.
    pub fn fields(&self) -> BTreeMap<&str, &str> {
        self.fields
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect()
    }

    /// The `instance` field.
    pub fn instance(&self) -> Option<&str> {
        self.get("instance")
    }

    /// The `key` field.
    pub fn key(&self) -> Option<&str> {
        self.get("key")
    }

    /// The `seq` field.
    pub fn seq(&self) -> Option<u64> {
        self.get("seq")?.parse().ok()
    }

    /// The `token` field: the fencing token the run was under.
    pub fn token(&self) -> Option<u64> {
        self.get("token")?.parse().ok()
    }

    /// Whether this is a `kind` line about event `seq` of `key`.
    pub fn is(&self, kind: &str, key: &str, seq: u64) -> bool {
        self.kind == kind && self.key() == Some(key) && self.seq() == Some(seq)
    }
}

impl fmt::Display for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.kind)?;
        for (name, value) in &self.fields {
            write!(f, " {name}={value}")?;
        }
        Ok(())
    }
}

/// Whether `text` is a `kind` line about event `seq` of `key`.
pub fn matches(text: &str, kind: &str, key: &str, seq: u64) -> bool {
    Line::parse(text).is_some_and(|line| line.is(kind, key, seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_round_trips() {
        let line = Line::new(START)
            .field("instance", "w1")
            .field("key", "k3")
            .field("seq", 17)
            .field("token", 42_u64);
        let text = line.to_string();
        assert_eq!(text, "start instance=w1 key=k3 seq=17 token=42");
        let parsed = Line::parse(&text).unwrap();
        assert_eq!(parsed, line);
        assert!(parsed.is(START, "k3", 17));
        assert_eq!(parsed.token(), Some(42));
        assert!(!parsed.is(DONE, "k3", 17));
        assert!(!parsed.is(START, "k3", 18));
    }

    #[test]
    fn the_reason_runs_to_the_end_of_the_line() {
        let line = Line::new(FAILED)
            .field("key", "a b")
            .field("reason", "redis command failed: IO");
        let text = line.to_string();
        assert_eq!(text, "failed key=a_b reason=redis command failed: IO");
        assert_eq!(
            Line::parse(&text).unwrap().get("reason"),
            Some("redis command failed: IO")
        );
    }

    #[test]
    fn other_text_is_not_a_line() {
        assert_eq!(Line::parse("2024-01-01T00:00:00 WARN something happened"), None);
        assert_eq!(Line::parse("key=value"), None);
        assert_eq!(Line::parse("ready").unwrap().kind(), READY);
    }
}
