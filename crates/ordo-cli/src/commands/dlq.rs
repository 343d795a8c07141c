//! `ordo dlq list` and `ordo dlq replay`: a partition's dead-letter stream.
//!
//! Replay re-publishes each dead letter, oldest first, through the broker's
//! own publish path (the atomic stream-and-index script), so the partition
//! is re-created and re-indexed if it was reaped meanwhile; each entry is
//! removed from the dead-letter stream right after it was published. A
//! crash between the two leaves that one entry in both places: a second
//! replay publishes it again (at-least-once, like every delivery; the
//! message id is unchanged, so idempotent handlers see a duplicate).

use anyhow::{Context as _, anyhow};
use fred::interfaces::StreamsInterface;
use ordo_core::broker::Publication;
use ordo_redis::DeadLetter;
use serde::Serialize;

use crate::cli::{DlqListArgs, DlqReplayArgs};
use crate::commands::confirm;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::table::{Align, Table};
use crate::view::{EntryView, lane_name, pretty};

/// Errors are cut to this many characters in the table.
const ERROR_WIDTH: usize = 50;

/// A dead letter, as listed.
#[derive(Debug, Serialize)]
struct DeadLetterView {
    key: String,
    /// The entry id in the dead-letter stream.
    id: String,
    group: String,
    error: String,
    attempts: u32,
    /// The message, with its original entry id and lane.
    message: EntryView,
}

/// A dead letter put back on its partition.
#[derive(Debug, Serialize)]
struct Replayed {
    /// The entry id it had in the dead-letter stream (now removed).
    dead_letter_id: String,
    /// The entry id it had originally.
    source_id: String,
    /// The message id (unchanged).
    message_id: String,
    lane: &'static str,
}

/// What a replay did.
#[derive(Debug, Serialize)]
struct ReplayReport {
    category: String,
    key: String,
    replayed: Vec<Replayed>,
    /// Every group consuming the category: each gets the replayed messages.
    groups: Vec<String>,
}

pub(crate) async fn list(ctx: &Context, args: &DlqListArgs) -> Result<Verdict, Failure> {
    let keys = match &args.key {
        Some(key) => vec![key.clone()],
        None => ctx.status.dead_letter_keys(&args.category).await?,
    };
    let mut letters = Vec::new();
    for key in &keys {
        for letter in ctx.status.dead_letters(&args.category, key).await? {
            letters.push(DeadLetterView {
                key: key.clone(),
                message: EntryView::from(&letter.message),
                id: letter.id,
                group: letter.group,
                error: letter.error,
                attempts: letter.attempts,
            });
        }
    }
    if args.json {
        print!("{}", pretty(&letters)?);
    } else if letters.is_empty() {
        let scope = match &args.key {
            Some(key) => format!("partition `{}:{key}`", args.category),
            None => format!("category `{}`", args.category),
        };
        println!("no dead letters in {scope}");
    } else {
        print!("{}", table(&letters).render());
    }
    Ok(Verdict::Ok)
}

fn table(letters: &[DeadLetterView]) -> Table {
    let mut table = Table::new(&[
        ("KEY", Align::Left),
        ("DLQ ID", Align::Left),
        ("SOURCE ID", Align::Left),
        ("LANE", Align::Left),
        ("GROUP", Align::Left),
        ("ATTEMPTS", Align::Right),
        ("TYPE", Align::Left),
        ("ERROR", Align::Left),
    ]);
    for letter in letters {
        table.row(vec![
            letter.key.clone(),
            letter.id.clone(),
            letter.message.id.clone(),
            letter.message.lane.to_owned(),
            letter.group.clone(),
            letter.attempts.to_string(),
            letter.message.type_name.clone().unwrap_or_else(|| "-".to_owned()),
            format::truncate(&letter.error, ERROR_WIDTH),
        ]);
    }
    table
}

pub(crate) async fn replay(ctx: &Context, args: &DlqReplayArgs) -> Result<Verdict, Failure> {
    let (category, key) = (args.category.as_str(), args.key.as_str());
    let partition = ctx.partition(category, key);
    let letters: Vec<DeadLetter> = ctx
        .status
        .dead_letters(category, key)
        .await?
        .into_iter()
        .filter(|letter| args.group.as_ref().is_none_or(|group| *group == letter.group))
        .collect();
    if letters.is_empty() {
        println!("no dead letters to replay in `{}`", partition.dlq());
        return Ok(Verdict::Ok);
    }
    let publications = letters
        .iter()
        .map(|letter| publication(category, key, letter))
        .collect::<Result<Vec<_>, _>>()?;
    let groups = ctx.status.groups(category).await?;
    if groups.len() > 1 && !args.json {
        eprintln!(
            "note: {} groups consume `{category}` ({}): each of them gets the replayed messages, \
             including those that handled them before",
            groups.len(),
            groups.join(", ")
        );
    }
    let question = format!(
        "Re-publish {} of `{category}:{key}` to the partition, oldest first, and remove them from `{}`?",
        format::plural(letters.len() as u64, "dead letter"),
        partition.dlq()
    );
    confirm(&question, args.yes, "replaying")?;

    let mut replayed = Vec::with_capacity(letters.len());
    for (letter, publication) in letters.iter().zip(publications) {
        let message_id = publication.envelope.id.clone();
        ctx.broker
            .republish(std::slice::from_ref(&publication))
            .await
            .map_err(|e| anyhow!(e))
            .with_context(|| {
                format!(
                    "cannot re-publish dead letter {} of `{}`",
                    letter.id,
                    partition.dlq()
                )
            })?;
        let _: i64 = ctx
            .broker
            .client()
            .xdel(partition.dlq(), letter.id.as_str())
            .await
            .with_context(|| {
                format!(
                    "dead letter {} was re-published but could not be removed from `{}`; remove it \
                     by hand (XDEL) before replaying again",
                    letter.id,
                    partition.dlq()
                )
            })?;
        replayed.push(Replayed {
            dead_letter_id: letter.id.clone(),
            source_id: letter.message.id().to_owned(),
            message_id,
            lane: lane_name(letter.message.lane()),
        });
    }
    let report = ReplayReport {
        category: category.to_owned(),
        key: key.to_owned(),
        replayed,
        groups,
    };
    if args.json {
        print!("{}", pretty(&report)?);
    } else {
        println!(
            "replayed {} of `{category}:{key}` to the partition and removed them from `{}`",
            format::plural(report.replayed.len() as u64, "dead letter"),
            partition.dlq()
        );
    }
    Ok(Verdict::Ok)
}

/// The publication that puts `letter` back on its lane of `category:key`;
/// an error when it does not hold a message of that partition.
fn publication(category: &str, key: &str, letter: &DeadLetter) -> Result<Publication, Failure> {
    let envelope = letter
        .message
        .decode()
        .with_context(|| format!("dead letter {} cannot be replayed", letter.id))?;
    if envelope.category != category || envelope.partition_key.as_deref() != Some(key) {
        return Err(Failure::Error(anyhow!(
            "dead letter {} holds a message of `{}:{}`, not of `{category}:{key}`; not replaying",
            letter.id,
            envelope.category,
            envelope.partition_key.as_deref().unwrap_or("(no key)"),
        )));
    }
    let lane = letter.message.lane();
    Ok(Publication::to_partition(key, lane, envelope))
}
