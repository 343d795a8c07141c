//! `ordo retry | skip | dlq --all [filters]`: one decision for every halted
//! partition (and parked key) that matches, e.g. retrying everything a
//! dependency outage halted once the dependency is back.
//!
//! The rules are the single action's, applied per key: the list is read
//! first, `--dry-run` prints it and stops, otherwise the operator confirms
//! the whole list (`--yes` in a script), and each key's decision lands only
//! if the key is still halted on the head listed (Redis compares and acts
//! in one step, [`ordo_redis::HeadAction::expecting`]): a key that changed
//! meanwhile is refused and left alone, the others go on. The summary says
//! what was done, refused and failed; the exit code is the worst of them
//! (1 failed, else 3 refused, else 0).

use ordo_redis::{Error, HaltedPartition};
use serde::Serialize;

use crate::cli::{Action, ActionOptions, BulkFilters};
use crate::commands::confirm;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::view::{HaltView, pretty};

/// One key's outcome.
#[derive(Debug, Serialize)]
struct KeyOutcome {
    category: String,
    key: String,
    group: String,
    /// The head the action was for (as listed).
    head: String,
    /// The error the head halted with.
    error: String,
    /// Whether it is a parked key of a hashed partition.
    parked: bool,
    /// `done`, `refused` (it changed since it was listed) or `failed`.
    outcome: &'static str,
    /// Why it was refused or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The dead-letter stream, for `dlq`.
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_letter_stream: Option<String>,
}

/// What a bulk action did.
#[derive(Debug, Serialize)]
struct Summary {
    action: &'static str,
    dry_run: bool,
    matched: usize,
    done: usize,
    refused: usize,
    failed: usize,
    keys: Vec<KeyOutcome>,
}

pub(crate) async fn run(
    ctx: &Context,
    action: Action,
    filters: &BulkFilters,
    options: &ActionOptions,
) -> Result<Verdict, Failure> {
    let now_ms = ctx.status.server_time_ms().await?;
    let halted: Vec<HaltedPartition> = ctx
        .admin
        .halted()
        .await?
        .into_iter()
        .filter(|halt| matches(filters, halt, now_ms))
        .collect();
    let listed = list(&halted, now_ms);
    if filters.dry_run || halted.is_empty() {
        let keys = halted
            .iter()
            .map(|halt| outcome(ctx, action, halt, "would", None))
            .collect();
        let summary = Summary {
            action: action.name(),
            dry_run: filters.dry_run,
            matched: halted.len(),
            done: 0,
            refused: 0,
            failed: 0,
            keys,
        };
        if options.json {
            print!("{}", pretty(&summary)?);
        } else if halted.is_empty() {
            println!("no halted partition matches: nothing to {}", action.name());
        } else {
            print!("{listed}");
            println!(
                "dry run: would {} {} (nothing changed)",
                action.name(),
                format::plural(halted.len() as u64, "halted partition")
            );
        }
        return Ok(Verdict::Ok);
    }
    if !options.yes {
        eprint!("{listed}");
    }
    let question = format!(
        "{} {} listed above? {}",
        capitalised(action.verb()),
        format::plural(halted.len() as u64, "halted partition"),
        action.consequence()
    );
    confirm(&question, options.yes, action.doing())?;

    let mut keys = Vec::with_capacity(halted.len());
    for halt in &halted {
        let head = ctx
            .admin
            .head(&halt.group, &halt.category, &halt.key)
            .expecting(&halt.head);
        let acted = match action {
            Action::Skip => head.skip().await,
            Action::DeadLetter => head.dead_letter().await,
            Action::Retry => head.retry().await,
        };
        keys.push(match acted {
            Ok(_) => outcome(ctx, action, halt, "done", None),
            Err(error @ (Error::NotHalted { .. } | Error::HeadChanged { .. })) => outcome(
                ctx,
                action,
                halt,
                "refused",
                Some(format!("{error} (changed since it was listed; left alone)")),
            ),
            Err(error) => outcome(
                ctx,
                action,
                halt,
                "failed",
                Some(ordo_core::contract::error::error_chain(&error)),
            ),
        });
    }
    let count = |what: &str| keys.iter().filter(|k| k.outcome == what).count();
    let summary = Summary {
        action: action.name(),
        dry_run: false,
        matched: keys.len(),
        done: count("done"),
        refused: count("refused"),
        failed: count("failed"),
        keys,
    };
    if options.json {
        print!("{}", pretty(&summary)?);
    } else {
        println!("{}", describe(action, &summary));
    }
    match (summary.failed, summary.refused) {
        (0, 0) => Ok(Verdict::Ok),
        (0, refused) => Err(Failure::Refused(format!(
            "{} changed since they were listed and were left alone (see above); list again",
            format::plural(refused as u64, "halted partition")
        ))),
        (failed, _) => Err(Failure::Error(anyhow::anyhow!(
            "{} failed (see above)",
            format::plural(failed as u64, "action")
        ))),
    }
}

/// Whether `halt` passes every filter.
fn matches(filters: &BulkFilters, halt: &HaltedPartition, now_ms: u64) -> bool {
    (filters.categories.is_empty() || filters.categories.contains(&halt.category))
        && (filters.handlers.is_empty() || filters.handlers.contains(&halt.group))
        && filters
            .error_matches
            .as_ref()
            .is_none_or(|regex| regex.is_match(&halt.error))
        && filters
            .halted_before
            .is_none_or(|cutoff| halt.halted_at_ms < cutoff.ms(now_ms))
}

fn outcome(
    ctx: &Context,
    action: Action,
    halt: &HaltedPartition,
    outcome: &'static str,
    reason: Option<String>,
) -> KeyOutcome {
    KeyOutcome {
        category: halt.category.clone(),
        key: halt.key.clone(),
        group: halt.group.clone(),
        head: halt.head.clone(),
        error: halt.error.clone(),
        parked: halt.parked,
        outcome,
        reason,
        dead_letter_stream: (action == Action::DeadLetter)
            .then(|| ctx.partition(&halt.category, &halt.key).dlq()),
    }
}

/// The matching halts as a table.
fn list(halted: &[HaltedPartition], now_ms: u64) -> String {
    let views: Vec<HaltView> = halted.iter().map(HaltView::from).collect();
    let table = super::status::halt_table(&views, now_ms);
    if table.is_empty() {
        String::new()
    } else {
        table.render()
    }
}

fn describe(action: Action, summary: &Summary) -> String {
    let mut lines: Vec<String> = summary
        .keys
        .iter()
        .map(|k| {
            let what = match (k.outcome, &k.reason) {
                ("done", _) => action.past().to_owned(),
                (outcome, Some(reason)) => format!("{outcome}: {reason}"),
                (outcome, None) => outcome.to_owned(),
            };
            format!("{}:{} ({}) entry {}: {what}", k.category, k.key, k.group, k.head)
        })
        .collect();
    lines.push(format!(
        "{} of {}: {} {}, {} refused, {} failed",
        action.name(),
        format::plural(summary.matched as u64, "halted partition"),
        summary.done,
        action.past(),
        summary.refused,
        summary.failed
    ));
    lines.join("\n")
}

fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map_or_else(String::new, |first| first.to_uppercase().chain(chars).collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::{Cutoff, parse_regex};

    fn halt(category: &str, group: &str, error: &str, halted_at_ms: u64) -> HaltedPartition {
        HaltedPartition {
            group: group.to_owned(),
            category: category.to_owned(),
            key: "k".to_owned(),
            lane: ordo_core::contract::key::Lane::Primary,
            head: "1-0".to_owned(),
            error: error.to_owned(),
            attempts: 3,
            owner: "w1".to_owned(),
            halted_at_ms,
            parked: false,
        }
    }

    #[test]
    fn every_filter_must_match() {
        let filters = BulkFilters {
            all: true,
            categories: vec!["order".to_owned()],
            handlers: vec![],
            error_matches: Some(parse_regex("(?i)pool timed out").unwrap()),
            halted_before: Some(Cutoff::Ago(Duration::from_secs(60))),
            dry_run: false,
        };
        let now = 1_000_000;
        assert!(matches(
            &filters,
            &halt("order", "P", "Pool timed out", now - 61_000),
            now
        ));
        assert!(!matches(
            &filters,
            &halt("order", "P", "Pool timed out", now - 59_000),
            now
        ));
        assert!(!matches(
            &filters,
            &halt("order", "P", "balance negative", now - 61_000),
            now
        ));
        assert!(!matches(
            &filters,
            &halt("invoice", "P", "pool timed out", now - 61_000),
            now
        ));
    }
}
