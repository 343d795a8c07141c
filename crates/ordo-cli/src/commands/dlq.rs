//! `ordo dlq list`, `inspect`, `replay` and `purge`: a partition's
//! dead-letter stream `{category}:{key}:dlq`, or (`--plain`) the one of a
//! category's plain (non-partitioned) consumer groups, `{category}:dlq`.
//!
//! Replay re-publishes each dead letter, oldest first, through the broker's
//! own publish path (the atomic stream-and-index script), so the partition
//! is re-created and re-indexed if it was reaped meanwhile; each entry is
//! removed from the dead-letter stream right after it was published. A
//! crash between the two leaves that one entry in both places: a second
//! replay publishes it again (at-least-once, like every delivery; the
//! message id is unchanged, so idempotent handlers see a duplicate, and a
//! PostgreSQL fence applies it once).
//!
//! A replayed letter goes back to the group that dead-lettered it only
//! (`RedisBroker::replay`): the category's other groups handled it the
//! first time and skip it. It keeps its position scope, not its position,
//! so `ordo_postgres::fenced` applies it once by message id.

use anyhow::{Context as _, anyhow};
use fred::interfaces::StreamsInterface;
use ordo_core::contract::broker::Publication;
use ordo_redis::{DeadLetter, DeadLetterPage, PartitionId};
use serde::Serialize;

use crate::cli::{DlqInspectArgs, DlqListArgs, DlqPurgeArgs, DlqReplayArgs, DlqStreamArgs};
use crate::commands::confirm;
use crate::context::Context;
use crate::exit::{Failure, Verdict};
use crate::format;
use crate::table::{Align, Table};
use crate::view::{EntryView, lane_name, pretty};

/// Errors are cut to this many characters in the table.
const ERROR_WIDTH: usize = 50;

/// Which dead-letter stream a command works on.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    /// A partition's: `{category}:{key}:dlq`.
    Partition { category: &'a str, key: &'a str },
    /// The category's plain consumer groups': `{category}:dlq`.
    Plain { category: &'a str },
}

impl<'a> Scope<'a> {
    fn of(args: &'a DlqStreamArgs) -> Self {
        match &args.key {
            Some(key) => Self::Partition {
                category: &args.category,
                key,
            },
            None => Self::Plain {
                category: &args.category,
            },
        }
    }

    fn category(self) -> &'a str {
        match self {
            Self::Partition { category, .. } | Self::Plain { category } => category,
        }
    }

    fn key(self) -> Option<&'a str> {
        match self {
            Self::Partition { key, .. } => Some(key),
            Self::Plain { .. } => None,
        }
    }

    /// The dead-letter stream's name.
    fn dlq(self, ctx: &Context) -> String {
        match self {
            Self::Partition { category, key } => ctx.partition(category, key).dlq(),
            Self::Plain { category } => ordo_redis::plain_dlq(category),
        }
    }

    /// What the messages go back to, for messages.
    fn target(self) -> String {
        match self {
            Self::Partition { category, key } => format!("partition `{category}:{key}`"),
            Self::Plain { category } => format!("the base stream `{category}`"),
        }
    }

    /// Every dead letter of the scope (read in chunks).
    async fn letters(self, ctx: &Context) -> Result<Vec<DeadLetter>, Failure> {
        Ok(match self {
            Self::Partition { category, key } => ctx.status.dead_letters(category, key).await?,
            Self::Plain { category } => ctx.status.plain_dead_letters(category).await?,
        })
    }

    /// At most `limit` dead letters of the scope after `after`.
    async fn page(self, ctx: &Context, after: Option<&str>, limit: usize) -> Result<DeadLetterPage, Failure> {
        Ok(match self {
            Self::Partition { category, key } => {
                ctx.status.dead_letters_page(category, key, after, limit).await?
            }
            Self::Plain { category } => ctx.status.plain_dead_letters_page(category, after, limit).await?,
        })
    }

    /// The dead letter `id` of the scope.
    async fn letter(self, ctx: &Context, id: &str) -> Result<Option<DeadLetter>, Failure> {
        Ok(match self {
            Self::Partition { category, key } => ctx.status.dead_letter(category, key, id).await?,
            Self::Plain { category } => ctx.status.plain_dead_letter(category, id).await?,
        })
    }

    /// The `ordo dlq list` arguments that name this scope.
    fn list_args(self) -> String {
        match self {
            Self::Partition { category, key } => {
                format!("{} {}", format::shell_word(category), format::shell_word(key))
            }
            Self::Plain { category } => format!("{} --plain", format::shell_word(category)),
        }
    }
}

/// A dead letter, as listed.
#[derive(Debug, Serialize)]
pub(crate) struct DeadLetterView {
    /// The partition key; `null` for a plain consumer group's dead letter.
    pub(crate) key: Option<String>,
    /// The entry id in the dead-letter stream.
    pub(crate) id: String,
    pub(crate) group: String,
    pub(crate) error: String,
    pub(crate) attempts: u32,
    /// The message, with its original entry id and lane.
    pub(crate) message: EntryView,
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
pub(crate) struct ReplayReport {
    category: String,
    /// `null` for the plain consumer groups' dead letters.
    key: Option<String>,
    replayed: Vec<Replayed>,
    /// Every group consuming the category; each replayed message goes to
    /// the group that dead-lettered it only.
    groups: Vec<String>,
}

pub(crate) async fn list(ctx: &Context, args: &DlqListArgs) -> Result<Verdict, Failure> {
    let category = args.category.as_str();
    if args.after.is_some() && args.key.is_none() && !args.plain {
        return Err(Failure::Usage(
            "--after names a dead letter of one dead-letter stream: give KEY (or --plain) with it".to_owned(),
        ));
    }
    let keys = match (&args.key, args.plain) {
        (Some(key), _) => vec![key.clone()],
        (None, true) => Vec::new(),
        (None, false) => ctx.status.dead_letter_keys(category).await?,
    };
    let mut scopes: Vec<Scope<'_>> = keys
        .iter()
        .map(|key| Scope::Partition { category, key })
        .collect();
    if args.key.is_none() {
        scopes.push(Scope::Plain { category });
    }
    // One page over every scope: never more than `--limit` letters read.
    let mut left = usize::try_from(args.limit).unwrap_or(usize::MAX);
    let mut letters = Vec::new();
    let mut more = None;
    for scope in scopes {
        if left == 0 {
            more = Some((scope, None));
            break;
        }
        let page = scope.page(ctx, args.after.as_deref(), left).await?;
        left -= page.letters.len();
        letters.extend(page.letters.into_iter().map(|letter| view(scope, letter)));
        if page.next.is_some() {
            more = Some((scope, page.next));
            break;
        }
    }
    if args.json {
        print!("{}", pretty(&letters)?);
    } else if letters.is_empty() {
        let scope = match (&args.key, args.plain) {
            (Some(key), _) => format!("partition `{category}:{key}`"),
            (None, true) => format!("the plain consumer groups of `{category}`"),
            (None, false) => format!("category `{category}`"),
        };
        println!("{}", format::text(&format!("no dead letters in {scope}")));
    } else {
        print!("{}", table(&letters).render());
    }
    // On stderr, so the table and the JSON stay what scripts parse.
    match more {
        Some((scope, Some(next))) if args.key.is_some() || args.plain => eprintln!(
            "{}",
            format::text(&format!(
                "more dead letters follow; the next page: ordo dlq list {} --after {next}",
                scope.list_args()
            ))
        ),
        Some((scope, _)) => eprintln!(
            "{}",
            format::text(&format!(
                "more dead letters follow; list one dead-letter stream a page at a time (with --after): \
                 ordo dlq list {}",
                scope.list_args()
            ))
        ),
        None => {}
    }
    Ok(Verdict::Ok)
}

fn view(scope: Scope<'_>, letter: DeadLetter) -> DeadLetterView {
    // A hashed partition's stream holds many keys' letters: each says its own.
    let key = match scope.key() {
        Some(key) if !PartitionId::for_key(scope.category(), key).is_hashed() => Some(key.to_owned()),
        Some(_) => letter.message.key().map(str::to_owned),
        None => None,
    };
    DeadLetterView {
        key,
        message: EntryView::from(&letter.message),
        id: letter.id,
        group: letter.group,
        error: letter.error,
        attempts: letter.attempts,
    }
}

/// `ordo dlq inspect`: one dead letter, whole.
pub(crate) async fn inspect(ctx: &Context, args: &DlqInspectArgs) -> Result<Verdict, Failure> {
    let scope = Scope::of(&args.stream);
    let Some(letter) = scope.letter(ctx, &args.id).await? else {
        return Err(Failure::Usage(format!(
            "no dead letter `{}` in `{}` (see `ordo dlq list`)",
            args.id,
            scope.dlq(ctx)
        )));
    };
    let view = view(scope, letter);
    if args.json {
        print!("{}", pretty(&view)?);
    } else {
        let text = format::text;
        println!("dead letter {} of `{}`", text(&view.id), text(&scope.dlq(ctx)));
        println!(
            "  key:       {}",
            text(view.key.as_deref().unwrap_or("- (plain consumer group)"))
        );
        println!("  group:     {}", text(&view.group));
        println!("  attempts:  {}", view.attempts);
        println!("  error:     {}", text(&view.error));
        println!(
            "  source id: {} ({} lane)",
            text(&view.message.id),
            view.message.lane
        );
        println!(
            "  type:      {}",
            text(view.message.type_name.as_deref().unwrap_or("-"))
        );
        if let Some(unreadable) = &view.message.unreadable {
            println!("  unreadable: {}", text(unreadable));
        }
        match &view.message.envelope {
            Some(envelope) => {
                println!("  envelope:");
                for line in pretty(envelope)?.lines() {
                    println!("{}", text(line));
                }
            }
            None => println!("  envelope:  (none)"),
        }
    }
    Ok(Verdict::Ok)
}

/// What a purge removed.
#[derive(Debug, Serialize)]
struct PurgeReport {
    dlq: String,
    purged: Vec<String>,
}

/// `ordo dlq purge`: removes dead letters for good.
pub(crate) async fn purge(ctx: &Context, args: &DlqPurgeArgs) -> Result<Verdict, Failure> {
    let scope = Scope::of(&args.stream);
    let dlq = scope.dlq(ctx);
    let letters = scope.letters(ctx).await?;
    let ids: Vec<String> = if args.ids.is_empty() {
        letters.iter().map(|l| l.id.clone()).collect()
    } else {
        if let Some(missing) = args.ids.iter().find(|id| !letters.iter().any(|l| &&l.id == id)) {
            return Err(Failure::Usage(format!(
                "no dead letter `{missing}` in `{dlq}` (see `ordo dlq list`); nothing purged"
            )));
        }
        args.ids.clone()
    };
    if ids.is_empty() {
        println!("no dead letters to purge in `{dlq}`");
        return Ok(Verdict::Ok);
    }
    let question = format!(
        "Remove {} from `{dlq}` for good (they will not be handled)?",
        format::plural(ids.len() as u64, "dead letter")
    );
    confirm(&question, args.yes, "purging")?;
    let _: i64 = ctx
        .broker
        .client()
        .xdel(dlq.as_str(), ids.clone())
        .await
        .with_context(|| format!("cannot remove dead letters from `{dlq}`"))?;
    let report = PurgeReport { dlq, purged: ids };
    if args.json {
        print!("{}", pretty(&report)?);
    } else {
        println!(
            "purged {} from `{}`",
            format::plural(report.purged.len() as u64, "dead letter"),
            report.dlq
        );
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
            letter.key.clone().unwrap_or_else(|| "-".to_owned()),
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
    let scope = Scope::of(&args.stream);
    let category = scope.category();
    let dlq = scope.dlq(ctx);
    let (letters, publications) = replayable(ctx, scope, args.group.as_deref()).await?;
    if letters.is_empty() {
        println!("no dead letters to replay in `{dlq}`");
        return Ok(Verdict::Ok);
    }
    let groups = ctx.status.groups(category).await?;
    let question = format!(
        "Re-publish {} to {}, oldest first, and remove them from `{dlq}`?",
        format::plural(letters.len() as u64, "dead letter"),
        scope.target()
    );
    confirm(&question, args.yes, "replaying")?;

    let replayed = republish(ctx, &dlq, &letters, publications).await?;
    let report = ReplayReport {
        category: category.to_owned(),
        key: scope.key().map(str::to_owned),
        replayed,
        groups,
    };
    if args.json {
        print!("{}", pretty(&report)?);
    } else {
        println!(
            "replayed {} to {} and removed them from `{dlq}`",
            format::plural(report.replayed.len() as u64, "dead letter"),
            scope.target()
        );
    }
    Ok(Verdict::Ok)
}

/// Re-publishes `letters` of dead-letter stream `dlq` (their
/// `publications`), oldest first, each removed from `dlq` once published.
async fn republish(
    ctx: &Context,
    dlq: &str,
    letters: &[DeadLetter],
    publications: Vec<Publication>,
) -> Result<Vec<Replayed>, Failure> {
    let mut replayed = Vec::with_capacity(letters.len());
    for (letter, publication) in letters.iter().zip(publications) {
        let message_id = publication.envelope.id.clone();
        ctx.broker
            .replay(&letter.group, std::slice::from_ref(&publication))
            .await
            .map_err(|e| anyhow!(e))
            .with_context(|| format!("cannot re-publish dead letter {} of `{dlq}`", letter.id))?;
        let _: i64 = ctx
            .broker
            .client()
            .xdel(dlq, letter.id.as_str())
            .await
            .with_context(|| {
                format!(
                    "dead letter {} was re-published but could not be removed from `{dlq}`; remove it \
                     by hand (XDEL) before replaying again",
                    letter.id,
                )
            })?;
        replayed.push(Replayed {
            dead_letter_id: letter.id.clone(),
            source_id: letter.message.id().to_owned(),
            message_id,
            lane: lane_name(letter.message.lane()),
        });
    }
    Ok(replayed)
}

/// The console's replay: every dead letter of partition `category:key`
/// (of `group` only, when given) put back, as `ordo dlq replay` does.
pub(crate) async fn replay_partition(
    ctx: &Context,
    category: &str,
    key: &str,
    group: Option<&str>,
) -> Result<ReplayReport, Failure> {
    let scope = Scope::Partition { category, key };
    let dlq = scope.dlq(ctx);
    let (letters, publications) = replayable(ctx, scope, group).await?;
    Ok(ReplayReport {
        category: category.to_owned(),
        key: Some(key.to_owned()),
        replayed: republish(ctx, &dlq, &letters, publications).await?,
        groups: ctx.status.groups(category).await?,
    })
}

/// The dead letters of `scope` (of `group` only, when given), oldest
/// first, and the publications that put them back; an error when one
/// cannot be put back.
async fn replayable(
    ctx: &Context,
    scope: Scope<'_>,
    group: Option<&str>,
) -> Result<(Vec<DeadLetter>, Vec<Publication>), Failure> {
    let letters: Vec<DeadLetter> = scope
        .letters(ctx)
        .await?
        .into_iter()
        .filter(|letter| group.is_none_or(|group| group == letter.group))
        .collect();
    let publications = letters
        .iter()
        .map(|letter| publication(scope, letter))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((letters, publications))
}

/// The console's list: at most `limit` dead letters of `category`, over
/// its partitions' dead-letter streams and its plain groups' one.
pub(crate) async fn listed(
    ctx: &Context,
    category: &str,
    limit: usize,
) -> Result<Vec<DeadLetterView>, Failure> {
    let keys = ctx.status.dead_letter_keys(category).await?;
    let mut scopes: Vec<Scope<'_>> = keys
        .iter()
        .map(|key| Scope::Partition { category, key })
        .collect();
    scopes.push(Scope::Plain { category });
    let mut letters = Vec::new();
    for scope in scopes {
        let left = limit.saturating_sub(letters.len());
        if left == 0 {
            break;
        }
        let page = scope.page(ctx, None, left).await?;
        letters.extend(page.letters.into_iter().map(|letter| view(scope, letter)));
    }
    Ok(letters)
}

/// The publication that puts `letter` back where it came from: its lane of
/// the partition, or the category's base stream; an error when it does not
/// hold a message of that partition (or category).
fn publication(scope: Scope<'_>, letter: &DeadLetter) -> Result<Publication, Failure> {
    let envelope = letter
        .message
        .decode()
        .with_context(|| format!("dead letter {} cannot be replayed", letter.id))?;
    let category = scope.category();
    let fits = envelope.category == category
        && scope
            .key()
            .is_none_or(|key| envelope.partition_key.as_deref() == Some(key));
    if !fits {
        return Err(Failure::Error(anyhow!(
            "dead letter {} holds a message of `{}:{}`, not of {}; not replaying",
            letter.id,
            envelope.category,
            envelope.partition_key.as_deref().unwrap_or("(no key)"),
            scope.target(),
        )));
    }
    let lane = letter.message.lane();
    Ok(match scope {
        Scope::Partition { key, .. } => Publication::to_partition(key, lane, envelope),
        Scope::Plain { .. } => Publication::to_base(envelope),
    })
}
