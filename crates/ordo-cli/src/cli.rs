//! The command line, as clap parses it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use ordo_redis::SecretUrl;

mod values;

pub(crate) use self::values::{Cutoff, parse_cutoff, parse_partitions, parse_regex};

const AFTER_HELP: &str = "\
Exit codes:
  0  ok
  1  error (Redis unreachable, unexpected data, failed action)
  2  usage (bad arguments, unknown category, ambiguous or unknown group)
  3  refused (partition not halted, head changed, not confirmed; with --all: a key
     changed since it was listed, and none failed)
  4  `status --check`: halted partitions exist
  5  `status --check`: a warning (too many partitions, partitions nobody consumes)

Redis: --redis-url, else the first line of --redis-url-file, else ORDO_REDIS_URL,
else REDIS_URL, else `[redis] url` in domain.toml (--config, else the file
ORDO_CONFIG names, else the nearest domain.toml from the current directory
upward), else redis://127.0.0.1:6379. Every setting of domain.toml can be
overridden by its ORDO_ environment variable (ORDO_CLI_WARN_PARTITIONS, ...). A URL with a password is best given by file or environment:
a command line is visible to every user of the host (`ps`). Passwords are shown as ***. A Redis Cluster is named by
its nodes: redis-cluster://host:port[,host:port...] (any one reachable node is enough).";

/// Operate Ordo's Redis runtime: partitions, owners, lag, stuck keys and
/// dead letters.
#[derive(Debug, Parser)]
#[command(name = "ordo", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: GlobalArgs,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Where to find Redis and the domain configuration.
#[derive(Debug, Args)]
pub(crate) struct GlobalArgs {
    /// The Redis to operate on (`redis://host:port/db`, or a Redis Cluster:
    /// `redis-cluster://host:port[,host:port...]`); default: ORDO_REDIS_URL,
    /// else REDIS_URL, else `[redis] url` of domain.toml.
    #[arg(long, global = true, value_name = "URL")]
    pub(crate) redis_url: Option<SecretUrl>,
    /// A file whose first line is the Redis URL (keeps a password off the
    /// command line, where `ps` shows it).
    #[arg(long, global = true, value_name = "PATH", conflicts_with = "redis_url")]
    pub(crate) redis_url_file: Option<PathBuf>,
    /// rediss:// only: the CA certificates (PEM) to trust instead of the
    /// system's (default: `[redis] tls_ca_file` of domain.toml).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) tls_ca_file: Option<PathBuf>,
    /// rediss:// only: the client certificate (PEM) of mutual TLS, with
    /// `--tls-key-file` (default: `[redis] tls_cert_file`).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) tls_cert_file: Option<PathBuf>,
    /// rediss:// only: the client certificate's private key (PEM)
    /// (default: `[redis] tls_key_file`).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) tls_key_file: Option<PathBuf>,
    /// The domain.toml to read `[redis]`, `[cli]` and `[server.*]` from
    /// (default: the file ORDO_CONFIG names, else the nearest domain.toml
    /// from the current directory upward).
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Per category: live partitions, instances and what each owns, lag,
    /// pending and halted partitions; warnings.
    Status(StatusArgs),
    /// One row per partition (and consumer group): owner, generation, lag,
    /// pending, idle time, lanes, halt.
    Partitions(PartitionsArgs),
    /// A partition's head message, its attempts and its halt record.
    Inspect(InspectArgs),
    /// Acknowledge a halted head without handling it; the partition resumes
    /// with the next message. `--all` (with filters): every matching halted
    /// partition.
    Skip(ActionArgs),
    /// Run a halted head again, with a fresh set of attempts. `--all` (with
    /// filters): every matching halted partition, e.g. after an outage.
    Retry(ActionArgs),
    /// Move a halted head to the partition's dead-letter stream
    /// (`ordo dlq CATEGORY KEY`, or `--all` with filters), or list / replay
    /// that stream.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Dlq(DlqArgs),
    /// A live view, refreshed in place: lag per category and the halted
    /// partitions. Ctrl-C to exit.
    Watch(WatchArgs),
    /// Change how a drained category is partitioned (`per_key`, or a number
    /// of hashed partitions): refused unless every message of the category
    /// is handled. Stop its publishers first; start its processes with the
    /// new `[categories.NAME] partitions` after.
    Repartition(RepartitionArgs),
    /// Prepare Redis for this release, as a Redis user that may load
    /// functions (an administrator): load Ordo's function library on every
    /// primary, list (or delete) other releases' libraries, move halts out
    /// of the old shared halted set. Idempotent.
    Setup(SetupArgs),
    /// An operator console in the browser: lag, owners, halted and parked
    /// keys, dead letters; with `--allow-actions`, retry, skip, dead-letter
    /// and replay from the page (token in ORDO_CONSOLE_TOKEN).
    Console(ConsoleArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ConsoleArgs {
    /// Where to listen (localhost only by default).
    #[arg(long, default_value = "127.0.0.1:9797", value_name = "ADDR")]
    pub(crate) listen: std::net::SocketAddr,
    /// Let the page act on halted keys and dead letters (retry, skip,
    /// dead-letter, replay). Each action needs the token in the
    /// environment variable ORDO_CONSOLE_TOKEN (at least 16 characters).
    #[arg(long)]
    pub(crate) allow_actions: bool,
    /// Warn when a category has more live partitions than this.
    #[arg(long, value_name = "N")]
    pub(crate) warn_partitions: Option<u64>,
}

#[derive(Debug, Args)]
pub(crate) struct SetupArgs {
    /// Also delete the function libraries of other Ordo releases (only once
    /// no process of those releases runs: they would fail).
    #[arg(long)]
    pub(crate) delete_old_libraries: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct RepartitionArgs {
    /// The stream category.
    pub(crate) category: String,
    /// `per_key`, or the number of hashed partitions (1 to 65536).
    #[arg(long, value_name = "N|per_key", value_parser = parse_partitions)]
    pub(crate) to: ordo_core::Partitions,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Only these categories (repeatable); default: every category found
    /// (a `SCAN` of the keyspace).
    #[arg(long = "category", value_name = "CATEGORY")]
    pub(crate) categories: Vec<String>,
    /// Warn when a category has more live partitions than this (default:
    /// `[cli] warn_partitions` of domain.toml, else 10000).
    #[arg(long, value_name = "N")]
    pub(crate) warn_partitions: Option<u64>,
    /// Exit 4 when a partition is halted, 5 when there is a warning.
    #[arg(long)]
    pub(crate) check: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also show the PostgreSQL outbox in this database (pending rows, the
    /// oldest pending row's age, abandoned rows, live relays); abandoned
    /// rows are a warning.
    #[arg(long, value_name = "URL")]
    pub(crate) database_url: Option<SecretUrl>,
    /// A file whose first line is the `--database-url` (keeps a password
    /// off the command line, where `ps` shows it).
    #[arg(long, value_name = "PATH", conflicts_with = "database_url")]
    pub(crate) database_url_file: Option<PathBuf>,
    /// The PostgreSQL outbox's schema (with `--database-url`).
    #[arg(long, value_name = "SCHEMA", default_value = "ordo")]
    pub(crate) outbox_schema: String,
}

#[derive(Debug, Args)]
pub(crate) struct PartitionsArgs {
    /// The stream category.
    pub(crate) category: String,
    /// Only this consumer group.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Only halted partitions.
    #[arg(long)]
    pub(crate) halted: bool,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `CATEGORY KEY [--group GROUP]`: the partition a command looks at or acts
/// on, and which consumer group's view of it.
#[derive(Debug, Args)]
pub(crate) struct PartitionTarget {
    /// The stream category.
    pub(crate) category: String,
    /// The partition key.
    pub(crate) key: String,
    /// The consumer group (handler name); optional when one group consumes
    /// the category.
    #[arg(long)]
    pub(crate) group: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    pub(crate) target: PartitionTarget,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The decisions on a halted head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Skip,
    DeadLetter,
    Retry,
}

impl Action {
    /// The command's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::DeadLetter => "dlq",
            Self::Retry => "retry",
        }
    }

    /// What it does, for the question and refusals.
    pub(crate) fn doing(self) -> &'static str {
        match self {
            Self::Skip => "skipping",
            Self::DeadLetter => "moving to the dead-letter stream",
            Self::Retry => "retrying",
        }
    }

    /// What it does, as a verb (for questions).
    pub(crate) fn verb(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::DeadLetter => "dead-letter",
            Self::Retry => "retry",
        }
    }

    /// What it did (for summaries).
    pub(crate) fn past(self) -> &'static str {
        match self {
            Self::Skip => "skipped",
            Self::DeadLetter => "dead-lettered",
            Self::Retry => "retried",
        }
    }

    /// What it means for the keys, in the question.
    pub(crate) fn consequence(self) -> &'static str {
        match self {
            Self::Skip => {
                "Each head is acknowledged without being handled; its key resumes with the next message."
            }
            Self::DeadLetter => {
                "Each head moves to its partition's dead-letter stream; its key resumes with the next message."
            }
            Self::Retry => "Each head runs again, with a fresh set of attempts.",
        }
    }
}

/// `CATEGORY KEY [--group GROUP]`, or `--all` with filters: the halted
/// partitions an action is for.
#[derive(Debug, Args)]
pub(crate) struct ActionArgs {
    /// The stream category.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub(crate) category: Option<String>,
    /// The partition key.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub(crate) key: Option<String>,
    /// The consumer group (handler name); optional when one group consumes
    /// the category.
    #[arg(long, conflicts_with = "all")]
    pub(crate) group: Option<String>,
    #[command(flatten)]
    pub(crate) bulk: BulkFilters,
    #[command(flatten)]
    pub(crate) options: ActionOptions,
}

/// What an action acts on.
#[derive(Debug)]
pub(crate) enum Acting<'a> {
    /// One partition.
    One(PartitionTarget),
    /// Every halted partition (and parked key) the filters match.
    All(&'a BulkFilters),
}

impl ActionArgs {
    /// One partition, or every matching one (`--all`).
    pub(crate) fn acting(&self) -> Acting<'_> {
        match (&self.category, &self.key) {
            (Some(category), Some(key)) if !self.bulk.all => Acting::One(PartitionTarget {
                category: category.clone(),
                key: key.clone(),
                group: self.group.clone(),
            }),
            _ => Acting::All(&self.bulk),
        }
    }
}

/// `--all` and its filters: every halted partition (and parked key of a
/// hashed partition) that matches all of them.
#[derive(Debug, Clone, Args)]
pub(crate) struct BulkFilters {
    /// Act on every halted partition matching the filters below, each only
    /// if still halted on the head listed (exit 3 for one that changed).
    #[arg(long)]
    pub(crate) all: bool,
    /// With --all: only this category (repeatable).
    #[arg(long = "category", value_name = "CATEGORY", requires = "all")]
    pub(crate) categories: Vec<String>,
    /// With --all: only this handler's (consumer group's) halts (repeatable).
    #[arg(long = "handler", value_name = "NAME", requires = "all")]
    pub(crate) handlers: Vec<String>,
    /// With --all: only halts whose error matches this regular expression
    /// (Rust `regex` syntax, unanchored: `pool timed out`, `(?i)timeout`).
    #[arg(long, value_name = "REGEX", requires = "all", value_parser = parse_regex)]
    pub(crate) error_matches: Option<regex::Regex>,
    /// With --all: only halts older than this: a duration ago (`30s`,
    /// `15m`, `2h`, `1h30m`) or an instant (`2026-05-01T12:00:00Z`).
    #[arg(long, value_name = "WHEN", requires = "all", value_parser = parse_cutoff)]
    pub(crate) halted_before: Option<Cutoff>,
    /// With --all: list what would be done, change nothing.
    #[arg(long, requires = "all")]
    pub(crate) dry_run: bool,
}

/// How an operator action is confirmed and reported.
#[derive(Debug, Args)]
pub(crate) struct ActionOptions {
    /// Refuse unless the halted head is this entry id (as printed by
    /// `ordo inspect`). With --all, each key's head is the one listed.
    #[arg(long, value_name = "ID", conflicts_with = "all")]
    pub(crate) expect_head: Option<String>,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DlqArgs {
    #[command(subcommand)]
    pub(crate) command: Option<DlqCommand>,
    #[command(flatten)]
    pub(crate) action: DlqActionArgs,
}

/// `ordo dlq CATEGORY KEY` (or `--all`): the same arguments as the other
/// actions, but optional to clap because `ordo dlq list ...` has none of
/// them (a flattened `Option<ActionArgs>` is not filled in under
/// `args_conflicts_with_subcommands`).
#[derive(Debug, Args)]
pub(crate) struct DlqActionArgs {
    /// The stream category.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub(crate) category: Option<String>,
    /// The partition key.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub(crate) key: Option<String>,
    /// The consumer group (handler name); optional when one group consumes
    /// the category.
    #[arg(long, conflicts_with = "all")]
    pub(crate) group: Option<String>,
    #[command(flatten)]
    pub(crate) bulk: BulkFilters,
    #[command(flatten)]
    pub(crate) options: ActionOptions,
}

impl DlqActionArgs {
    /// The action's arguments, when both positionals (or `--all`) were given.
    pub(crate) fn into_action(self) -> Option<ActionArgs> {
        if !self.bulk.all && (self.category.is_none() || self.key.is_none()) {
            return None;
        }
        Some(ActionArgs {
            category: self.category,
            key: self.key,
            group: self.group,
            bulk: self.bulk,
            options: self.options,
        })
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum DlqCommand {
    /// The dead letters of a partition, of the category's plain consumer
    /// groups (`--plain`), or of both for every key of a category.
    List(DlqListArgs),
    /// One dead letter in full: its error, attempts and message.
    Inspect(DlqInspectArgs),
    /// Re-publish a partition's dead letters to it (or, with `--plain`, the
    /// category's to its base stream), oldest first, then remove them from
    /// the dead-letter stream.
    Replay(DlqReplayArgs),
    /// Remove dead letters for good: some (`--id`) or all of a dead-letter
    /// stream.
    Purge(DlqPurgeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct DlqListArgs {
    /// The stream category.
    pub(crate) category: String,
    /// The partition key; default: every key of the category with a
    /// dead-letter stream (a `SCAN` of the keyspace) and the category's plain
    /// dead letters.
    #[arg(conflicts_with = "plain")]
    pub(crate) key: Option<String>,
    /// Only the dead letters of the category's plain (non-partitioned)
    /// consumer groups (`{category}:dlq`).
    #[arg(long)]
    pub(crate) plain: bool,
    /// List at most this many dead letters (a page; the next page is
    /// `--after` the last one shown).
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// Start after this dead letter (its DLQ ID): the next page. Needs KEY
    /// or `--plain` (one dead-letter stream).
    #[arg(long, value_name = "ID")]
    pub(crate) after: Option<String>,
    /// Print JSON (with each message's envelope).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Which dead-letter stream: a partition's (`KEY`) or the category's plain
/// consumer groups' (`--plain`).
#[derive(Debug, Args)]
pub(crate) struct DlqStreamArgs {
    /// The stream category.
    pub(crate) category: String,
    /// The partition key.
    #[arg(required_unless_present = "plain", conflicts_with = "plain")]
    pub(crate) key: Option<String>,
    /// The dead letters of the category's plain (non-partitioned) consumer
    /// groups (`{category}:dlq`) instead of a partition's.
    #[arg(long)]
    pub(crate) plain: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DlqInspectArgs {
    #[command(flatten)]
    pub(crate) stream: DlqStreamArgs,
    /// The dead letter's entry id (the DLQ ID of `ordo dlq list`).
    #[arg(long, value_name = "ID")]
    pub(crate) id: String,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DlqPurgeArgs {
    #[command(flatten)]
    pub(crate) stream: DlqStreamArgs,
    /// Only these dead letters (repeatable; DLQ IDs); default: all of them.
    #[arg(long = "id", value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct DlqReplayArgs {
    #[command(flatten)]
    pub(crate) stream: DlqStreamArgs,
    /// Only the dead letters this consumer group gave up on.
    #[arg(long)]
    pub(crate) group: Option<String>,
    /// Do not ask for confirmation (required when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub(crate) interval: f64,
    /// Only these categories (repeatable); default: every category found.
    #[arg(long = "category", value_name = "CATEGORY")]
    pub(crate) categories: Vec<String>,
    /// Warn when a category has more live partitions than this.
    #[arg(long, value_name = "N")]
    pub(crate) warn_partitions: Option<u64>,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,
    /// Print one JSON snapshot per line instead of the live view.
    #[arg(long)]
    pub(crate) json: bool,
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::{Acting, Cli, Command, DlqCommand};

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from(std::iter::once("ordo").chain(args.iter().copied()))
            .unwrap_or_else(|error| panic!("{args:?}: {error}"))
            .command
    }

    #[test]
    fn the_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_partition_command_takes_the_same_target() {
        let Command::Inspect(inspect) = parse(&["inspect", "order", "bob", "--group", "g"]) else {
            panic!("not inspect");
        };
        let Command::Skip(skip) = parse(&["skip", "order", "bob", "--group", "g", "--yes"]) else {
            panic!("not skip");
        };
        let Command::Dlq(dlq) = parse(&["dlq", "order", "bob", "--group", "g", "--expect-head", "1-0"])
        else {
            panic!("not dlq");
        };
        let dlq = dlq.action.into_action().expect("dlq CATEGORY KEY is an action");
        let (Acting::One(skip_target), Acting::One(dlq_target)) = (skip.acting(), dlq.acting()) else {
            panic!("one partition each");
        };
        for target in [&inspect.target, &skip_target, &dlq_target] {
            assert_eq!(
                (
                    target.category.as_str(),
                    target.key.as_str(),
                    target.group.as_deref()
                ),
                ("order", "bob", Some("g"))
            );
        }
        assert!(skip.options.yes);
        assert_eq!(dlq.options.expect_head.as_deref(), Some("1-0"));
    }

    #[test]
    fn all_takes_filters_instead_of_a_partition() {
        let Command::Retry(retry) = parse(&[
            "retry",
            "--all",
            "--category",
            "order",
            "--handler",
            "Projector",
            "--error-matches",
            "pool timed out",
            "--halted-before",
            "10m",
            "--dry-run",
        ]) else {
            panic!("not retry");
        };
        let Acting::All(filters) = retry.acting() else {
            panic!("--all is every matching partition");
        };
        assert_eq!(filters.categories, ["order"]);
        assert_eq!(filters.handlers, ["Projector"]);
        assert!(
            filters
                .error_matches
                .as_ref()
                .unwrap()
                .is_match("the pool timed out while")
        );
        assert!(filters.dry_run);
        let Command::Dlq(dlq) = parse(&["dlq", "--all", "--yes"]) else {
            panic!("not dlq");
        };
        assert!(matches!(
            dlq.action.into_action().unwrap().acting(),
            Acting::All(_)
        ));
        for refused in [
            &["retry", "order", "bob", "--all"][..],
            &["retry", "--category", "order"],
            &["skip", "--all", "--expect-head", "1-0"],
            &["retry", "--all", "--error-matches", "("],
            &["retry", "--all", "--halted-before", "soon"],
            &["retry"],
        ] {
            assert!(
                Cli::try_parse_from(std::iter::once("ordo").chain(refused.iter().copied())).is_err(),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn dlq_subcommands_take_no_action() {
        let Command::Dlq(dlq) = parse(&["dlq", "list", "order"]) else {
            panic!("not dlq");
        };
        assert!(dlq.action.into_action().is_none());
        assert!(matches!(dlq.command, Some(DlqCommand::List(_))));
        assert!(
            Cli::try_parse_from(["ordo", "dlq", "order"]).is_err(),
            "a category without a key"
        );
    }
}
