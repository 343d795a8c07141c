//! Figures read from Redis's `INFO`, summed over every node (the one server,
//! or every primary of a cluster), and the bench process's own memory.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result};
use fred::clients::Client;
use fred::prelude::ClientLike as _;
use fred::types::{ClusterHash, CustomCommand};

/// The CPU time Redis has used so far (`used_cpu_sys` + `used_cpu_user` of
/// `INFO cpu`: its main thread and any others).
pub async fn cpu(client: &Client) -> Result<Duration> {
    let seconds = sum(client, "cpu", &["used_cpu_sys", "used_cpu_user"]).await?;
    Ok(Duration::from_secs_f64(seconds))
}

/// The bytes Redis holds (`used_memory` of `INFO memory`).
pub async fn memory(client: &Client) -> Result<u64> {
    Ok(sum(client, "memory", &["used_memory"]).await? as u64)
}

/// How often `command` ran, and the microseconds it took, so far
/// (`cmdstat_<command>` of `INFO commandstats`; a script command's time
/// includes the commands its script ran).
pub async fn command_stats(client: &Client, command: &str) -> Result<CommandStats> {
    let mut total = CommandStats::default();
    for info in per_node(client, "commandstats").await? {
        let prefix = format!("cmdstat_{command}:");
        let Some(line) = info.lines().find_map(|line| line.trim().strip_prefix(&prefix)) else {
            continue;
        };
        for field in line.split(',') {
            match field.split_once('=') {
                Some(("calls", calls)) => {
                    total.calls += calls
                        .parse::<u64>()
                        .with_context(|| format!("bad {prefix}{line}"))?;
                }
                Some(("usec", usec)) => {
                    total.usec += usec
                        .parse::<u64>()
                        .with_context(|| format!("bad {prefix}{line}"))?;
                }
                _ => {}
            }
        }
    }
    Ok(total)
}

/// Every command's counters in `INFO commandstats` so far, by command name
/// (lower case, as Redis names them), summed over the nodes.
pub async fn all_command_stats(client: &Client) -> Result<BTreeMap<String, CommandStats>> {
    let mut all: BTreeMap<String, CommandStats> = BTreeMap::new();
    for info in per_node(client, "commandstats").await? {
        for line in info.lines() {
            let Some((command, fields)) = line
                .trim()
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            else {
                continue;
            };
            let stats = parse_command_stats(fields).with_context(|| format!("bad line {line}"))?;
            let total = all.entry(command.to_owned()).or_default();
            total.calls += stats.calls;
            total.usec += stats.usec;
        }
    }
    Ok(all)
}

/// What ran between `earlier` and `later` ([`all_command_stats`]), the
/// commands that took the most time first.
pub fn busiest_commands(
    later: &BTreeMap<String, CommandStats>,
    earlier: &BTreeMap<String, CommandStats>,
) -> Vec<(String, CommandStats)> {
    let mut ran: Vec<(String, CommandStats)> = later
        .iter()
        .map(|(command, stats)| {
            let before = earlier.get(command).copied().unwrap_or_default();
            (command.clone(), stats.since(before))
        })
        .filter(|(_, stats)| stats.calls > 0)
        .collect();
    ran.sort_by(|a, b| b.1.usec.cmp(&a.1.usec).then_with(|| a.0.cmp(&b.0)));
    ran
}

/// `calls=3,usec=120,...` of one `cmdstat_` line.
fn parse_command_stats(fields: &str) -> Result<CommandStats> {
    let mut stats = CommandStats::default();
    for field in fields.split(',') {
        match field.split_once('=') {
            Some(("calls", calls)) => stats.calls = calls.parse().context("calls is not a number")?,
            Some(("usec", usec)) => stats.usec = usec.parse().context("usec is not a number")?,
            _ => {}
        }
    }
    Ok(stats)
}

/// The keys Redis holds (`keys=` of every database in `INFO keyspace`),
/// summed over the nodes.
pub async fn key_count(client: &Client) -> Result<u64> {
    let mut total = 0;
    for info in per_node(client, "keyspace").await? {
        for line in info.lines().filter(|line| line.starts_with("db")) {
            let keys = line
                .split_once(':')
                .and_then(|(_, fields)| fields.split(',').find_map(|f| f.strip_prefix("keys=")))
                .with_context(|| format!("bad INFO keyspace line {line}"))?;
            total += keys
                .trim()
                .parse::<u64>()
                .with_context(|| format!("bad INFO keyspace line {line}"))?;
        }
    }
    Ok(total)
}

/// One command's counters in `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandStats {
    /// Calls that ran (not those refused before running).
    pub calls: u64,
    /// Microseconds they took, in all.
    pub usec: u64,
}

impl CommandStats {
    /// What ran between `earlier` and `self`.
    pub fn since(self, earlier: CommandStats) -> CommandStats {
        CommandStats {
            calls: self.calls.saturating_sub(earlier.calls),
            usec: self.usec.saturating_sub(earlier.usec),
        }
    }
}

/// This process's resident memory (`VmRSS` of `/proc/self/status`), in
/// bytes; `None` where there is no such file.
pub fn resident_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|kib| kib * 1024)
}

/// The CPU time this process has used so far (user and system, from
/// `/proc/self/stat`, whose times are in Linux's fixed 100 ticks a second);
/// `None` where there is no such file.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) may hold spaces; fields count from after it.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |index: usize| fields.get(index)?.parse::<u64>().ok();
    // utime and stime are fields 14 and 15, the 12th and 13th after the name.
    Some(Duration::from_millis((ticks(11)? + ticks(12)?) * 10))
}

/// This process's peak resident memory so far (`VmHWM` of
/// `/proc/self/status`), in bytes; `None` where there is no such file.
pub fn peak_resident_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// A `kB` field of `/proc/self/status`.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The sum over every node of the numeric `INFO <section>` fields `names`.
async fn sum(client: &Client, section: &str, names: &[&str]) -> Result<f64> {
    let mut total = 0.0;
    for info in per_node(client, section).await? {
        for name in names {
            let prefix = format!("{name}:");
            let value = info
                .lines()
                .find_map(|line| line.trim().strip_prefix(&prefix))
                .with_context(|| format!("INFO {section} has no {name}"))?;
            total += value
                .parse::<f64>()
                .with_context(|| format!("bad INFO line {name}:{value}"))?;
        }
    }
    Ok(total)
}

/// `INFO <section>` of every node.
async fn per_node(client: &Client, section: &str) -> Result<Vec<String>> {
    crate::engine::on_every_primary(client, async |node: &Client| info(node, section).await).await
}

async fn info(client: &Client, section: &str) -> Result<String> {
    client
        .custom(
            CustomCommand::new_static("INFO", ClusterHash::FirstKey, false),
            vec![section.to_owned()],
        )
        .await
        .with_context(|| format!("INFO {section} failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_stats_fields_parse_and_the_busiest_come_first() {
        let stats = parse_command_stats("calls=12,usec=340,usec_per_call=28.33,rejected_calls=0").unwrap();
        assert_eq!(stats, CommandStats { calls: 12, usec: 340 });
        assert!(parse_command_stats("calls=x,usec=1").is_err());
        let of = |pairs: &[(&str, u64, u64)]| -> BTreeMap<String, CommandStats> {
            pairs
                .iter()
                .map(|&(name, calls, usec)| (name.to_owned(), CommandStats { calls, usec }))
                .collect()
        };
        let earlier = of(&[("evalsha", 10, 100), ("xadd", 5, 50)]);
        let later = of(&[("evalsha", 30, 400), ("xadd", 5, 50), ("get", 2, 500)]);
        let busiest = busiest_commands(&later, &earlier);
        assert_eq!(
            busiest,
            [
                ("get".to_owned(), CommandStats { calls: 2, usec: 500 }),
                ("evalsha".to_owned(), CommandStats { calls: 20, usec: 300 }),
            ]
        );
    }
}
