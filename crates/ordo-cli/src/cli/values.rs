//! The values of options that clap parses with a function of ours.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use ordo_core::Partitions;
use regex::Regex;

/// Parses `per_key` or a number of partitions (as `[categories.NAME]
/// partitions` takes them).
pub(crate) fn parse_partitions(text: &str) -> Result<Partitions, String> {
    if text == "per_key" {
        return Ok(Partitions::PerKey);
    }
    text.parse::<u32>()
        .ok()
        .filter(|n| *n <= ordo_core::contract::key::MAX_HASHED_PARTITIONS)
        .and_then(std::num::NonZeroU32::new)
        .map(Partitions::Hashed)
        .ok_or_else(|| {
            format!(
                "`{text}` is neither `per_key` nor a number of partitions between 1 and {}",
                ordo_core::contract::key::MAX_HASHED_PARTITIONS
            )
        })
}

/// `--halted-before`: halts older than this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cutoff {
    /// Halted longer ago than this (measured on the Redis server's clock).
    Ago(Duration),
    /// Halted before this instant (ms since the Unix epoch).
    At(u64),
}

impl Cutoff {
    /// The cutoff in ms since the Unix epoch, at server time `now_ms`.
    pub(crate) fn ms(self, now_ms: u64) -> u64 {
        match self {
            Self::Ago(ago) => now_ms.saturating_sub(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX)),
            Self::At(at) => at,
        }
    }
}

/// Parses `--error-matches`.
pub(crate) fn parse_regex(text: &str) -> Result<Regex, String> {
    Regex::new(text).map_err(|error| format!("`{text}` is not a regular expression: {error}"))
}

/// Parses `--halted-before`: a duration ago (`15m`, `2h`, `1h30m`, `90s`)
/// or an RFC 3339 instant (`2026-05-01T12:00:00Z`).
pub(crate) fn parse_cutoff(text: &str) -> Result<Cutoff, String> {
    let text = text.trim();
    if let Ok(at) = text.parse::<Timestamp>() {
        return u64::try_from(at.as_millisecond())
            .map(Cutoff::At)
            .map_err(|_| format!("`{text}` is before 1970"));
    }
    match text.parse::<SignedDuration>() {
        Ok(ago) if !ago.is_negative() => Ok(Cutoff::Ago(ago.unsigned_abs())),
        _ => Err(format!(
            "`{text}` is neither a duration ago (30s, 15m, 2h, 1h30m) nor an instant \
             (2026-05-01T12:00:00Z)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_per_key_or_a_number_in_range() {
        assert_eq!(
            parse_partitions("per_key").unwrap(),
            ordo_core::Partitions::PerKey
        );
        assert_eq!(parse_partitions("256").unwrap().to_string(), "256");
        for bad in ["0", "-1", "65537", "hashed", ""] {
            let error = parse_partitions(bad).unwrap_err();
            assert!(error.contains(&format!("`{bad}`")), "{error}");
        }
    }

    #[test]
    fn a_cutoff_is_a_duration_ago_or_an_instant() {
        assert_eq!(parse_cutoff("15m"), Ok(Cutoff::Ago(Duration::from_secs(900))));
        assert_eq!(parse_cutoff("1h30m"), Ok(Cutoff::Ago(Duration::from_secs(5_400))));
        assert_eq!(parse_cutoff("1970-01-01T00:00:01Z"), Ok(Cutoff::At(1_000)));
        assert_eq!(Cutoff::Ago(Duration::from_secs(2)).ms(10_000), 8_000);
        assert!(
            parse_cutoff("soon")
                .unwrap_err()
                .contains("neither a duration ago")
        );
        assert!(parse_cutoff("-5m").is_err());
    }
}
