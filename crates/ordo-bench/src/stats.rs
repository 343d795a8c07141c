//! [`RedisStats`]: what the server itself counted, read from `INFO`.
//!
//! A snapshot holds `total_commands_processed` and the per-command `calls` of
//! `INFO commandstats`; [`RedisStats::since`] turns two snapshots into
//! a [`StatsDelta`] over the window between them.
//!
//! What these counters count: every command the server *executed*, including
//! the commands a Lua script runs with `redis.call`. On Redis 7.0 that is true
//! of `total_commands_processed` too (an `EVAL` whose script runs five `INCR`
//! adds six to it and `calls=5` to `cmdstat_incr`). So a delta is the load an
//! instance puts on Redis, not the number of commands it sends; for that
//! (`idle_redis_cmds_per_s`: one `FCALL` is one command, whatever it runs)
//! use [`crate::monitor::CommandMonitor`].

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use fred::prelude::ClientLike;
use fred::types::{ClusterHash, CustomCommand};

use crate::report::rate;

/// A snapshot of the server's command counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisStats {
    /// When the snapshot was read (local clock).
    pub at: Instant,
    /// `total_commands_processed`: every command executed so far.
    pub total_commands: u64,
    /// `calls` per command of `INFO commandstats`, by name as Redis writes it
    /// (lower case, subcommands as `client|setname`).
    pub calls: BTreeMap<String, u64>,
}

impl RedisStats {
    /// Reads a snapshot with one `INFO stats commandstats` command.
    pub async fn read<C: ClientLike>(client: &C) -> Result<Self> {
        let info: String = client
            .custom(
                CustomCommand::new_static("INFO", ClusterHash::FirstKey, false),
                vec!["stats", "commandstats"],
            )
            .await
            .context("INFO stats commandstats failed")?;
        Self::parse(&info, Instant::now())
    }

    /// Parses the text of `INFO stats commandstats` read at `at`.
    pub fn parse(info: &str, at: Instant) -> Result<Self> {
        let mut total_commands = None;
        let mut calls = BTreeMap::new();
        for line in info.lines().map(str::trim) {
            if let Some(total) = line.strip_prefix("total_commands_processed:") {
                total_commands = Some(total.parse().with_context(|| format!("bad INFO line {line:?}"))?);
            } else if let Some(stat) = line.strip_prefix("cmdstat_") {
                let (name, count) = parse_cmdstat(stat).with_context(|| format!("bad INFO line {line:?}"))?;
                calls.insert(name.to_owned(), count);
            }
        }
        Ok(Self {
            at,
            total_commands: total_commands.context("INFO has no total_commands_processed")?,
            calls,
        })
    }

    /// What the server executed between `earlier` and this snapshot, minus
    /// the one `INFO` that read `earlier` (Redis counts a command after it
    /// runs, so that call lands in this window; this one's does not).
    pub fn since(&self, earlier: &RedisStats) -> StatsDelta {
        let mut calls: BTreeMap<String, u64> = self
            .calls
            .iter()
            .map(|(name, &count)| {
                let before = earlier.calls.get(name).copied().unwrap_or(0);
                (name.clone(), count.saturating_sub(before))
            })
            .collect();
        if let Some(info) = calls.get_mut("info") {
            *info = info.saturating_sub(1);
        }
        calls.retain(|_, count| *count > 0);
        StatsDelta {
            elapsed: self.at.saturating_duration_since(earlier.at),
            commands: self
                .total_commands
                .saturating_sub(earlier.total_commands)
                .saturating_sub(1),
            calls,
        }
    }
}

/// The commands executed over a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsDelta {
    /// The window's length.
    pub elapsed: Duration,
    /// Commands executed, script-internal ones included.
    pub commands: u64,
    /// Commands executed per command name (only those that ran).
    pub calls: BTreeMap<String, u64>,
}

impl StatsDelta {
    /// Commands executed per second over the window.
    pub fn commands_per_s(&self) -> f64 {
        rate(self.commands, self.elapsed)
    }

    /// Calls of `command` (a name as in [`RedisStats::calls`]) over the window.
    pub fn calls_of(&self, command: &str) -> u64 {
        self.calls.get(command).copied().unwrap_or(0)
    }
}

/// Measures what the server executes during `window`.
pub async fn measure<C: ClientLike>(client: &C, window: Duration) -> Result<StatsDelta> {
    let before = RedisStats::read(client).await?;
    tokio::time::sleep(window).await;
    Ok(RedisStats::read(client).await?.since(&before))
}

/// `xadd:calls=5,usec=...` -> `("xadd", 5)`.
fn parse_cmdstat(stat: &str) -> Option<(&str, u64)> {
    let (name, fields) = stat.split_once(':')?;
    let calls = fields.split(',').find_map(|field| field.strip_prefix("calls="))?;
    Some((name, calls.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Stats\r\ntotal_connections_received:5\r\ntotal_commands_processed:9\r\n\
        instantaneous_ops_per_sec:0\r\n\r\n# Commandstats\r\n\
        cmdstat_info:calls=2,usec=53,usec_per_call=26.50,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_eval:calls=1,usec=78,usec_per_call=78.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_client|setname:calls=3,usec=3,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn parses_the_total_and_the_calls_per_command() {
        let stats = RedisStats::parse(INFO, Instant::now()).unwrap();
        assert_eq!(stats.total_commands, 9);
        assert_eq!(
            stats.calls,
            BTreeMap::from([
                ("client|setname".to_owned(), 3),
                ("eval".to_owned(), 1),
                ("info".to_owned(), 2)
            ])
        );
    }

    #[test]
    fn an_info_without_the_total_is_an_error() {
        let error = RedisStats::parse("# Stats\r\n", Instant::now()).unwrap_err();
        assert_eq!(error.to_string(), "INFO has no total_commands_processed");
    }

    #[test]
    fn a_delta_excludes_the_info_that_read_the_earlier_snapshot() {
        let start = Instant::now();
        let earlier = RedisStats::parse(INFO, start).unwrap();
        let later_info = INFO
            .replace("total_commands_processed:9", "total_commands_processed:16")
            .replace("cmdstat_info:calls=2", "cmdstat_info:calls=3")
            .replace("cmdstat_eval:calls=1", "cmdstat_eval:calls=2")
            + "cmdstat_incr:calls=5,usec=11\r\n";
        let later = RedisStats::parse(&later_info, start + Duration::from_secs(2)).unwrap();
        let delta = later.since(&earlier);
        assert_eq!(delta.commands, 6);
        assert_eq!(
            delta.calls,
            BTreeMap::from([("eval".to_owned(), 1), ("incr".to_owned(), 5)])
        );
        assert_eq!(delta.calls_of("incr"), 5);
        assert_eq!(delta.calls_of("info"), 0);
        assert_eq!(delta.commands_per_s(), 3.0);
    }
}
