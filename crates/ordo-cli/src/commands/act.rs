//! `ordo skip | dlq | retry CATEGORY KEY`: an operator's decision on a
//! halted head (`--all` with filters: on every matching one, see
//! [`super::bulk`]).
//!
//! The decision is about one message, so it must not land on another one:
//! the action is refused when the partition is not halted, or when its
//! halted head is not the one the operator saw (`--expect-head`, or the
//! head shown in the confirmation question).
//!
//! The head shown is the expected head of the action itself
//! ([`ordo_redis::HeadAction::expecting`]): Redis compares it and applies
//! the decision in one atomic step, so however long the question stays open
//! and whatever other operators do meanwhile, the action lands on that entry
//! or changes nothing (exit 3).

use ordo_redis::{Error, Inspection};
use serde::Serialize;

use crate::cli::{Acting, Action, ActionArgs, PartitionTarget};
use crate::commands::confirm;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::view::pretty;

/// What an action did.
#[derive(Debug, Serialize)]
pub(crate) struct Acted {
    action: &'static str,
    category: String,
    key: String,
    group: String,
    /// The entry id the action resolved.
    head: String,
    /// The error the head halted with.
    error: String,
    /// The dead-letter stream, for `dlq`.
    dead_letter_stream: Option<String>,
}

pub(crate) async fn run(ctx: &Context, action: Action, args: &ActionArgs) -> Result<Verdict, Failure> {
    match args.acting() {
        Acting::One(target) => one(ctx, action, &target, args).await,
        Acting::All(filters) => super::bulk::run(ctx, action, filters, &args.options).await,
    }
}

/// The decision on one partition's halted head.
async fn one(
    ctx: &Context,
    action: Action,
    target: &PartitionTarget,
    args: &ActionArgs,
) -> Result<Verdict, Failure> {
    let (category, key) = (target.category.as_str(), target.key.as_str());
    let group = ctx.resolve_group(category, key, target.group.as_deref()).await?;
    let seen = halted(ctx, action, &group, category, key).await?;
    let expected = seen.halt.head.clone();
    // Refuse before asking about a head the operator did not mean.
    if let Some(wanted) = &args.options.expect_head
        && *wanted != expected
    {
        return Err(head_changed(category, key, &group, wanted, &expected));
    }
    let type_name = seen
        .head
        .as_ref()
        .and_then(|h| h.type_name())
        .unwrap_or("unknown type");
    let entry = format!(
        "entry {expected} ({type_name}, halted after {}: {}) of `{category}:{key}` for group `{group}`",
        format::plural(u64::from(seen.halt.attempts), "attempt"),
        format::truncate(&seen.halt.error, 80),
    );
    let question = match action {
        Action::Skip => format!("Skip {entry}? It is acknowledged without being handled."),
        Action::DeadLetter => format!(
            "Move {entry} to the dead-letter stream `{}`?",
            ctx.partition(category, key).dlq()
        ),
        Action::Retry => format!("Retry {entry}?"),
    };
    confirm(&question, args.options.yes, action.doing())?;

    // The question may have been open for a while: the action applies only
    // if the partition is still halted on the head it showed.
    let acted = apply(ctx, action, category, key, group, &expected, seen.halt.error).await?;
    if args.options.json {
        print!("{}", pretty(&acted)?);
    } else {
        for line in describe(action, &acted).lines() {
            println!("{}", crate::format::text(line));
        }
    }
    Ok(Verdict::Ok)
}

/// `action` on the halted head of `category:key` for `group` (the
/// category's only group when `None`), applied only while that head is
/// `expected` (the console's actions: the operator saw `expected`).
pub(crate) async fn decide(
    ctx: &Context,
    action: Action,
    category: &str,
    key: &str,
    group: Option<&str>,
    expected: &str,
) -> Result<Acted, Failure> {
    let group = ctx.resolve_group(category, key, group).await?;
    let seen = halted(ctx, action, &group, category, key).await?;
    apply(ctx, action, category, key, group, expected, seen.halt.error).await
}

/// `action` on the halted head of `category:key` for `group`, which halted
/// with `error`: Redis compares the head with `expected` and applies the
/// decision in the same step, or changes nothing (a refusal).
async fn apply(
    ctx: &Context,
    action: Action,
    category: &str,
    key: &str,
    group: String,
    expected: &str,
    error: String,
) -> Result<Acted, Failure> {
    let head = ctx.admin.head(&group, category, key).expecting(expected);
    let resolved = match action {
        Action::Skip => head.skip().await,
        Action::DeadLetter => head.dead_letter().await,
        Action::Retry => head.retry().await,
    }
    .map_err(|error| refusal(error, action, &group, category, key))?;
    Ok(Acted {
        action: action.name(),
        category: category.to_owned(),
        key: key.to_owned(),
        dead_letter_stream: (action == Action::DeadLetter).then(|| ctx.partition(category, key).dlq()),
        group,
        head: resolved,
        error,
    })
}

/// The halt record and head, or a refusal when the partition is not halted.
async fn halted(
    ctx: &Context,
    action: Action,
    group: &str,
    category: &str,
    key: &str,
) -> Result<Inspection, Failure> {
    ctx.admin
        .inspect(group, category, key)
        .await
        .map_err(|error| refusal(error, action, group, category, key))
}

/// [`Error::NotHalted`] and [`Error::HeadChanged`] as refusals (exit 3:
/// nothing was changed); anything else as an error.
fn refusal(error: Error, action: Action, group: &str, category: &str, key: &str) -> Failure {
    match error {
        Error::NotHalted { .. } => Failure::Refused(format!(
            "partition `{category}:{key}` is not halted for group `{group}`: nothing to {} \
             (`ordo status` lists the halted partitions)",
            action.name()
        )),
        Error::HeadChanged { expected, actual, .. } => head_changed(category, key, group, &expected, &actual),
        other => other.into(),
    }
}

fn head_changed(category: &str, key: &str, group: &str, expected: &str, actual: &str) -> Failure {
    Failure::Refused(format!(
        "the halted head of `{category}:{key}` for group `{group}` is {actual}, not {expected}: it \
         changed since it was inspected; inspect it again (`ordo inspect {} {} --group {}`)",
        format::shell_word(category),
        format::shell_word(key),
        format::shell_word(group),
    ))
}

fn describe(action: Action, acted: &Acted) -> String {
    let entry = format!(
        "entry {} of `{}:{}` for group `{}`",
        acted.head, acted.category, acted.key, acted.group
    );
    match action {
        Action::Skip => {
            format!(
                "skipped {entry} (acknowledged, not handled); the partition resumes with the next message"
            )
        }
        Action::DeadLetter => format!(
            "moved {entry} to `{}`; the partition resumes with the next message\n\
             (`ordo dlq list {category} {key}` shows it, `ordo dlq replay {category} {key}` re-publishes it)",
            acted.dead_letter_stream.as_deref().unwrap_or("?"),
            category = format::shell_word(&acted.category),
            key = format::shell_word(&acted.key),
        ),
        Action::Retry => format!("released {entry}: it runs again, with a fresh set of attempts"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_changed_under_the_action_is_a_refusal_naming_both_heads() {
        let error = Error::HeadChanged {
            group: "Projector".to_owned(),
            partition: "order:bob".to_owned(),
            expected: "1-0".to_owned(),
            actual: "2-0".to_owned(),
        };
        match refusal(error, Action::Skip, "Projector", "order", "bob") {
            Failure::Refused(message) => {
                assert!(message.contains("is 2-0, not 1-0"), "{message}");
                assert!(
                    message.contains("ordo inspect order bob --group Projector"),
                    "{message}"
                );
            }
            other => panic!("expected a refusal (exit 3), got {other:?}"),
        }
    }

    #[test]
    fn a_partition_not_halted_is_a_refusal_and_other_errors_are_errors() {
        let not_halted = Error::NotHalted {
            group: "Projector".to_owned(),
            partition: "order:bob".to_owned(),
        };
        assert!(matches!(
            refusal(not_halted, Action::Retry, "Projector", "order", "bob"),
            Failure::Refused(message) if message.contains("not halted")
        ));
        let config = Error::Config {
            key: "url",
            reason: "is not valid".to_owned(),
        };
        assert!(matches!(
            refusal(config, Action::Retry, "Projector", "order", "bob"),
            Failure::Error(_)
        ));
    }
}
