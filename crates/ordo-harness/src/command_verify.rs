//! Checks what the command handlers and senders recorded (see
//! [`crate::commands`]).
//!
//! Per command key, the applied list holds the effects in commit order
//! (`{sender}:{seq}:{token}`, fenced) and the acked list the commands whose
//! sender got a success. A sender sends its next command of a key only once
//! it has the outcome of the previous one, so for each sender the seqs of
//! its effects must increase: a seq after a larger seq of the same sender is
//! an order violation. The same seq again is a rerun, allowed: the command
//! in flight at a failover, whose effect the old owner committed before its
//! outcome was recorded, runs again on the new owner. A command its sender
//! abandoned (a generated id, no outcome: it may still run, at any time)
//! may be applied late: after a larger seq of its sender it is only counted
//! (`abandoned_late`). A success whose effect
//! is missing is lost. A token below one applied before it on the key means
//! a stale owner's effect landed after its successor's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use fred::interfaces::{KeysInterface, ListInterface};
use serde::Serialize;

use crate::error::{HarnessError, Result};
use crate::keys::CommandRecords;

/// One command's effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandEffect {
    /// The command's sender.
    pub sender: String,
    /// Its seq among the sender's commands of the key.
    pub seq: u64,
    /// The fencing token it was committed under.
    pub token: u64,
}

/// What was recorded for one command key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CommandKeyReport {
    /// The effects, in commit order.
    pub effects: Vec<CommandEffect>,
    /// The commands whose sender got a success: `(sender, seq)`.
    pub acked: BTreeSet<(String, u64)>,
    /// Successes whose effect is missing: `(sender, seq)`.
    pub lost: Vec<(String, u64)>,
    /// Effects whose seq is below one of the same sender applied before them.
    pub order_violations: u64,
    /// Effects of a command applied again after its first application.
    pub reruns: u64,
    /// The commands their sender abandoned: `(sender, seq)`.
    pub abandoned: BTreeSet<(String, u64)>,
    /// Effects of abandoned commands applied after a larger seq of their sender.
    pub abandoned_late: u64,
    /// Effects whose token is below one applied before them.
    pub token_regressions: u64,
    /// The failure outcomes senders got: `{sender}:{seq} {reason}`.
    pub failed: Vec<String>,
    /// Failure outcomes of commands whose effect was applied all the same
    /// (by a run after the one that failed): the sender was told wrong.
    pub failed_but_applied: Vec<String>,
    /// The replies about another command than the one sent.
    pub wrong_replies: Vec<String>,
    /// Runs that started while another run of the key was in flight under
    /// a still-valid lease.
    pub overlaps: u64,
    /// Runs under a lease that was already lost (they did not start).
    pub stale_starts: u64,
    /// Sends of an id again after a timeout or a broker error.
    pub resends: u64,
}

/// The verdict over every command key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CommandVerdict {
    /// Command keys checked.
    pub keys: u64,
    /// Commands whose sender got a success.
    pub commands_ok: u64,
    /// Effects applied (reruns included).
    pub effects: u64,
    /// Overlapping runs.
    pub overlaps: u64,
    /// Effects out of their sender's send order.
    pub order_violations: u64,
    /// Successes without an effect.
    pub lost: u64,
    /// Effects applied again after a failover.
    pub reruns: u64,
    /// Commands abandoned by their senders (no outcome, a generated id).
    pub abandoned: u64,
    /// Of their effects, those applied after a larger seq of their sender.
    pub abandoned_late: u64,
    /// Effects of a stale token applied after a newer token's.
    pub token_regressions: u64,
    /// Failure outcomes the senders got.
    pub failed: u64,
    /// Failure outcomes of commands that were applied all the same.
    pub failed_but_applied: u64,
    /// Replies about another command than the one sent.
    pub wrong_replies: u64,
    /// Sends of an id again.
    pub resends: u64,
    /// Runs under a lease already lost.
    pub stale_starts: u64,
    /// The details, per key.
    pub per_key: BTreeMap<String, CommandKeyReport>,
}

impl CommandVerdict {
    /// Whether the guarantee held: no overlap, no effect out of send order,
    /// no success without its effect, no stale effect, no wrong reply.
    pub fn is_sound(&self) -> bool {
        self.overlaps == 0
            && self.order_violations == 0
            && self.lost == 0
            && self.token_regressions == 0
            && self.wrong_replies == 0
    }
}

impl fmt::Display for CommandVerdict {
    /// `name: value` lines.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command_keys: {}", self.keys)?;
        writeln!(f, "commands_ok: {}", self.commands_ok)?;
        writeln!(f, "command_effects: {}", self.effects)?;
        writeln!(f, "command_overlaps: {}", self.overlaps)?;
        writeln!(f, "command_order_violations: {}", self.order_violations)?;
        writeln!(f, "command_lost: {}", self.lost)?;
        writeln!(f, "command_reruns: {}", self.reruns)?;
        writeln!(f, "command_abandoned: {}", self.abandoned)?;
        writeln!(f, "command_abandoned_late: {}", self.abandoned_late)?;
        writeln!(f, "command_token_regressions: {}", self.token_regressions)?;
        writeln!(f, "commands_failed: {}", self.failed)?;
        writeln!(f, "commands_failed_but_applied: {}", self.failed_but_applied)?;
        writeln!(f, "command_wrong_replies: {}", self.wrong_replies)?;
        writeln!(f, "command_resends: {}", self.resends)?;
        write!(f, "command_stale_starts: {}", self.stale_starts)
    }
}

/// Reads the records of every key of `keys`, where `records` names them,
/// and checks them, key by key.
pub async fn verify_commands<C>(
    client: &C,
    records: &CommandRecords,
    keys: &[String],
) -> Result<CommandVerdict>
where
    C: KeysInterface + ListInterface + Send + Sync,
{
    let mut verdict = CommandVerdict::default();
    for key in keys {
        let list = |name: String| async move {
            client
                .lrange::<Vec<String>, _>(&name, 0, -1)
                .await
                .map_err(HarnessError::redis(format!("read `{name}`")))
        };
        let counter = |name: String| async move {
            client
                .get::<Option<u64>, _>(&name)
                .await
                .map(Option::unwrap_or_default)
                .map_err(HarnessError::redis(format!("read `{name}`")))
        };
        let applied_key = records.applied(key);
        let effects = list(applied_key.clone())
            .await?
            .iter()
            .map(|entry| parse_effect(&applied_key, entry))
            .collect::<Result<Vec<_>>>()?;
        let acked_key = records.acked(key);
        let acked = list(acked_key.clone())
            .await?
            .iter()
            .map(|entry| parse_acked(&acked_key, entry))
            .collect::<Result<BTreeSet<_>>>()?;
        let abandoned_key = records.abandoned(key);
        let abandoned = list(abandoned_key.clone())
            .await?
            .iter()
            .map(|entry| parse_acked(&abandoned_key, entry))
            .collect::<Result<BTreeSet<_>>>()?;
        let mut report = check(effects, acked, abandoned);
        report.failed = list(records.failed(key)).await?;
        report.failed_but_applied = report
            .failed
            .iter()
            .filter(|entry| {
                let command = entry
                    .split_once(' ')
                    .map_or(entry.as_str(), |(command, _)| command);
                report
                    .effects
                    .iter()
                    .any(|e| format!("{}:{}", e.sender, e.seq) == command)
            })
            .cloned()
            .collect();
        report.wrong_replies = list(records.wrong_replies(key)).await?;
        report.overlaps = counter(records.overlaps(key)).await?;
        report.stale_starts = counter(records.stale_starts(key)).await?;
        report.resends = counter(records.resends(key)).await?;
        verdict.keys += 1;
        verdict.commands_ok += report.acked.len() as u64;
        verdict.effects += report.effects.len() as u64;
        verdict.overlaps += report.overlaps;
        verdict.order_violations += report.order_violations;
        verdict.lost += report.lost.len() as u64;
        verdict.reruns += report.reruns;
        verdict.abandoned += report.abandoned.len() as u64;
        verdict.abandoned_late += report.abandoned_late;
        verdict.token_regressions += report.token_regressions;
        verdict.failed += report.failed.len() as u64;
        verdict.failed_but_applied += report.failed_but_applied.len() as u64;
        verdict.wrong_replies += report.wrong_replies.len() as u64;
        verdict.resends += report.resends;
        verdict.stale_starts += report.stale_starts;
        verdict.per_key.insert(key.clone(), report);
    }
    Ok(verdict)
}

/// The overlap log of every key of `keys`: `{their marker} vs {my marker}`
/// per overlap.
pub async fn command_overlap_log<C>(
    client: &C,
    records: &CommandRecords,
    keys: &[String],
) -> Result<Vec<String>>
where
    C: ListInterface + Send + Sync,
{
    let mut log = Vec::new();
    for key in keys {
        let entries: Vec<String> = client
            .lrange(records.overlap_log(key), 0, -1)
            .await
            .map_err(HarnessError::redis("read a command overlap log"))?;
        log.extend(entries.into_iter().map(|entry| format!("{key}: {entry}")));
    }
    Ok(log)
}

/// The checks themselves, on one key's effects, successes and abandoned
/// commands.
fn check(
    effects: Vec<CommandEffect>,
    acked: BTreeSet<(String, u64)>,
    abandoned: BTreeSet<(String, u64)>,
) -> CommandKeyReport {
    let mut report = CommandKeyReport::default();
    let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
    let mut applied: BTreeSet<(&str, u64)> = BTreeSet::new();
    let mut max_token = 0;
    for effect in &effects {
        let max = highest.get(effect.sender.as_str()).copied();
        let first = !applied.contains(&(effect.sender.as_str(), effect.seq));
        if !first {
            report.reruns += 1;
        }
        if max.is_some_and(|max| effect.seq < max) {
            if abandoned.contains(&(effect.sender.clone(), effect.seq)) {
                report.abandoned_late += 1;
            } else {
                report.order_violations += 1;
            }
        } else {
            highest.insert(&effect.sender, effect.seq);
        }
        if effect.token < max_token {
            report.token_regressions += 1;
        }
        max_token = max_token.max(effect.token);
        applied.insert((&effect.sender, effect.seq));
    }
    report.lost = acked
        .iter()
        .filter(|(sender, seq)| !applied.contains(&(sender.as_str(), *seq)))
        .cloned()
        .collect();
    report.effects = effects;
    report.acked = acked;
    report.abandoned = abandoned;
    report
}

/// `{sender}:{seq}:{token}`.
fn parse_effect(key: &str, entry: &str) -> Result<CommandEffect> {
    let parsed = entry.rsplit_once(':').and_then(|(rest, token)| {
        let (sender, seq) = rest.rsplit_once(':')?;
        Some(CommandEffect {
            sender: sender.to_owned(),
            seq: seq.parse().ok()?,
            token: token.parse().ok()?,
        })
    });
    parsed.ok_or_else(|| HarnessError::Record {
        key: key.to_owned(),
        detail: format!("entry `{entry}` is not `{{sender}}:{{seq}}:{{token}}`"),
    })
}

/// `{sender}:{seq}`.
fn parse_acked(key: &str, entry: &str) -> Result<(String, u64)> {
    entry
        .rsplit_once(':')
        .and_then(|(sender, seq)| Some((sender.to_owned(), seq.parse().ok()?)))
        .ok_or_else(|| HarnessError::Record {
            key: key.to_owned(),
            detail: format!("entry `{entry}` is not `{{sender}}:{{seq}}`"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(entries: &[(&str, u64, u64)]) -> Vec<CommandEffect> {
        entries
            .iter()
            .map(|&(sender, seq, token)| CommandEffect {
                sender: sender.to_owned(),
                seq,
                token,
            })
            .collect()
    }

    fn acked(entries: &[(&str, u64)]) -> BTreeSet<(String, u64)> {
        entries.iter().map(|&(s, q)| (s.to_owned(), q)).collect()
    }

    #[test]
    fn senders_interleaved_in_their_own_order_pass() {
        let r = check(
            effects(&[
                ("w1", 1, 1),
                ("w2", 1, 1),
                ("w2", 2, 1),
                ("w1", 2, 4),
                ("w1", 3, 4),
            ]),
            acked(&[("w1", 1), ("w1", 2), ("w2", 1), ("w2", 2)]),
            acked(&[]),
        );
        assert_eq!((r.order_violations, r.reruns, r.token_regressions), (0, 0, 0));
        assert!(r.lost.is_empty());
    }

    #[test]
    fn a_command_run_again_after_a_failover_is_a_rerun_not_a_violation() {
        let r = check(
            effects(&[
                ("w1", 1, 1),
                ("w1", 2, 1),
                ("w2", 7, 4),
                ("w1", 2, 4),
                ("w1", 3, 4),
            ]),
            acked(&[("w1", 2)]),
            acked(&[]),
        );
        assert_eq!((r.order_violations, r.reruns), (0, 1));
    }

    #[test]
    fn a_seq_after_a_larger_one_of_its_sender_is_a_violation() {
        let r = check(
            effects(&[("w1", 1, 1), ("w1", 3, 1), ("w1", 2, 1), ("w2", 1, 1)]),
            acked(&[]),
            acked(&[]),
        );
        assert_eq!(r.order_violations, 1);
        // Another sender's lower seq is no violation.
        assert_eq!(r.reruns, 0);
    }

    #[test]
    fn a_success_without_its_effect_is_lost_and_an_effect_without_success_is_not() {
        let r = check(
            effects(&[("w1", 1, 1), ("w1", 3, 1)]),
            acked(&[("w1", 1), ("w1", 2), ("w2", 1)]),
            acked(&[]),
        );
        assert_eq!(r.lost, [("w1".to_owned(), 2), ("w2".to_owned(), 1)]);
    }

    #[test]
    fn an_abandoned_command_applied_late_is_counted_not_a_violation() {
        // w1 gave up on 2 (no outcome) and went on; 2 ran after 3 and 4.
        let r = check(
            effects(&[
                ("w1", 1, 1),
                ("w1", 3, 1),
                ("w1", 4, 1),
                ("w1", 2, 1),
                ("w1", 5, 1),
            ]),
            acked(&[("w1", 1), ("w1", 3), ("w1", 4), ("w1", 5)]),
            acked(&[("w1", 2)]),
        );
        assert_eq!((r.order_violations, r.abandoned_late), (0, 1));
        // One that was not, applied after an abandoned later one, is a
        // violation (it had its outcome before the later one was sent).
        let r = check(
            effects(&[("w1", 1, 1), ("w1", 3, 1), ("w1", 2, 1)]),
            acked(&[]),
            acked(&[("w1", 3)]),
        );
        assert_eq!((r.order_violations, r.abandoned_late), (1, 0));
    }

    #[test]
    fn a_stale_token_after_a_newer_one_is_a_regression() {
        let r = check(effects(&[("w1", 1, 5), ("w2", 1, 3)]), acked(&[]), acked(&[]));
        assert_eq!(r.token_regressions, 1);
    }

    #[test]
    fn entries_parse_with_senders_that_hold_colons() {
        assert_eq!(
            parse_effect("k", "w:1:4:9").unwrap(),
            CommandEffect {
                sender: "w:1".to_owned(),
                seq: 4,
                token: 9
            }
        );
        assert!(parse_effect("k", "w1:4").is_err());
        assert_eq!(parse_acked("k", "w1:4").unwrap(), ("w1".to_owned(), 4));
        assert!(parse_acked("k", "w1").is_err());
    }
}
