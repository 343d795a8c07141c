//! The least-privilege Redis ACL rules of Ordo's roles: the one place that
//! says which commands and keys each kind of client needs.
//!
//! docs/OPERATIONS.md ("ACL users") shows [`AclRole::template`] of every
//! role, checked by a unit test, and the ACL test of `ordo-cli` creates
//! users with [`AclRole::rules`] and runs a worker, a publisher and the
//! `ordo` tool under them on a real Redis, so neither the documentation nor
//! the rules can drift from what Ordo sends.
//!
//! Scripts run with `EVALSHA` (loaded with `SCRIPT LOAD` when the server
//! does not know them); every `redis.call` inside a script is checked
//! against the caller's rule too, so a role that runs a script is granted
//! the commands and keys the script touches.

use crate::keys::glob_escape;

/// What fred sends on every new connection besides `AUTH`/`HELLO` (which
/// need no permission): `CLIENT ID`, `INFO` (the server version; the engine
/// also checks `maxmemory-policy`), `SELECT` when the URL names a database,
/// and on Redis Cluster `CLUSTER INFO` and `CLUSTER SLOTS` (the cluster's
/// health and topology).
const CONNECT: &[&str] = &[
    "+client|id",
    "+info",
    "+select",
    "+cluster|info",
    "+cluster|slots",
];

/// Running Ordo's scripts: by hash, loading them when the server has none.
const SCRIPTS: &[&str] = &["+evalsha", "+script|load"];

/// Every publish (the publish script, and listing a new slot's bucket in the
/// category's directory): a new stream gets the registered groups, an
/// existing one the groups it lacks while a group joins the category; an
/// armed doorbell is deleted and rung on its slot's channel.
const PUBLISH: &[&str] = &[
    "+del",
    "+spublish",
    "+exists",
    "+smembers",
    "+scard",
    "+sadd",
    "+xgroup|create",
    "+xinfo|groups",
    "+xadd",
];

/// A publish with the message-id deduplication window (every publish but
/// `ordo dlq replay`'s): the ids recently appended, taken back when the
/// `XADD` fails.
const DEDUP: &[&str] = &[
    "+time",
    "+zadd",
    "+zrem",
    "+zremrangebyscore",
    "+zremrangebyrank",
    "+pexpire",
];

/// A publish with a position (the PostgreSQL outbox relay): the last
/// position published to its scope.
const POSITIONS: &[&str] = &["+get", "+set"];

/// Checking (and, on first use, recording) how a category is partitioned:
/// its record, and the category's index before hashed partitions are
/// first recorded.
const PARTITIONING: &[&str] = &["+get", "+set", "+smembers", "+sunion"];

/// What a worker sends besides [`CONNECT`], [`SCRIPTS`] and the publishing
/// groups: leases and their heartbeat, reads, acknowledgements, halts,
/// retries, reaping, discovery, the instance set, plain consumer groups
/// (and claiming a dead plain consumer's entries: `XINFO CONSUMERS`,
/// `XCLAIM`, `XGROUP DELCONSUMER`, `ZSCORE`), process managers' state.
/// The waker subscribes to the doorbell channels (`SSUBSCRIBE`, and
/// `SUNSUBSCRIBE` when it must subscribe anew) and arms doorbells (an
/// `XREVRANGE` per lane, then `SET`). `PING` and `CLIENT UNBLOCK`: a plain
/// consumer's client checks its connection, and a shutdown interrupts its
/// blocking `XREADGROUP` to quit (fred's `Blocking::Interrupt`). The owner
/// of a hashed partition also reads skipped entries back (`XRANGE`), and
/// parks keys: their records (`HKEYS`, `HMGET`, `HEXISTS`) and held
/// messages (`XRANGE`, `XDEL`). A paused handler's record
/// (`ordo:paused:<group>`) is written and pruned (`HGETALL`, `HLEN`), and
/// health reads it back.
const WORKER: &[&str] = &[
    "+ping",
    "+client|unblock",
    "+ssubscribe",
    "+sunsubscribe",
    "+xrevrange",
    "+get",
    "+set",
    "+pexpire",
    "+del",
    "+exists",
    "+hget",
    "+hset",
    "+hdel",
    "+hincrby",
    "+hkeys",
    "+hmget",
    "+hexists",
    "+hgetall",
    "+hlen",
    "+sismember",
    "+srem",
    "+sunion",
    "+time",
    "+xreadgroup",
    "+xack",
    "+xpending",
    "+xtrim",
    "+xrange",
    "+xdel",
    "+xinfo|stream",
    "+xinfo|consumers",
    "+xclaim",
    "+xgroup|delconsumer",
    "+zadd",
    "+zrange",
    "+zrem",
    "+zremrangebyscore",
    "+zscore",
];

/// What the read-only views (`ordo status`, `partitions`, `inspect`,
/// `watch`, `dlq list`, `dlq inspect`) send besides [`CONNECT`].
const READER: &[&str] = &[
    "+scan",
    "+get",
    "+hget",
    "+hgetall",
    "+smembers",
    "+sunion",
    "+zrangebyscore",
    "+xinfo|groups",
    "+xinfo|stream",
    "+xpending",
    "+xrange",
    "+time",
];

/// What the operator's write commands (`skip`, `retry`, `dlq`, `dlq
/// replay`, `dlq purge`, `repartition`) send besides [`READER`],
/// [`SCRIPTS`] and [`PUBLISH`] (a replay is published without the
/// deduplication window or a position): the resolve scripts, `XDEL` for a
/// purge, and recording a category's partitioning.
const OPERATOR: &[&str] = &[
    "+del", "+hdel", "+hlen", "+srem", "+xack", "+xtrim", "+xdel", "+set",
];

/// The keys of one category, `<category>` standing for its name (glob
/// metacharacters escaped): the base stream of a plain category, the
/// category-wide names `{<category>}:*` (its group registry, joining
/// marker, bucket directory; a plain category's published ids and
/// position), every name of every partition `{<category>:<key>}...`, and
/// the category's index bucket in each hash slot.
const CATEGORY_KEYS: &[&str] = &[
    "<category>",
    "{<category>}:*",
    "{<category>:*",
    "{*}:<category>:__partitions__",
];

/// A plain category's dead letters (written by a worker, read and replayed
/// by the operator's tool).
const CATEGORY_DLQ: &[&str] = &["<category>:dlq"];

/// The copies of the category's group registry and joining marker in each
/// hash slot, which the publish script reads.
const CATEGORY_COPIES: &[&str] = &["{*}:<category>:__groups__", "{*}:<category>:__joining__"];

/// The keys shared by every category: the halted sets and their
/// directory, the instance sets and pause records of the consumer groups,
/// the process managers' state and leases.
const ORDO_KEYS: &[&str] = &[
    "{*}:ordo:halted",
    "{ordo}:__halted_buckets__",
    "ordo:instances:*",
    "ordo:paused:*",
    "{__pm__:*",
];

/// The sharded Pub/Sub channels of the doorbells (one per hash slot), which
/// every publish may ring and the waker subscribes to.
const DOORBELL_CHANNELS: &str = "&{*}:ordo:doorbell";

/// Who connects to Redis, and so which ACL rule it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AclRole {
    /// An engine that runs handlers: the fenced partition consumer, plain
    /// consumer groups, process managers, the heartbeat, the waker, the
    /// reaper and discovery. It also publishes (what handlers raise).
    Worker,
    /// A client that only publishes: `UnitOfWork::commit` to Redis, the
    /// PostgreSQL outbox relay.
    Publisher,
    /// The `ordo` tool with its write commands: `skip`, `retry`, `dlq`,
    /// `dlq replay`, `dlq purge`, and every read-only view.
    Operator,
    /// The `ordo` tool's read-only views: `status`, `partitions`,
    /// `inspect`, `watch`, `dlq list`, `dlq inspect`. Keys are readable
    /// only (`%R~`).
    Reader,
}

impl AclRole {
    /// Every role, in the order docs/OPERATIONS.md lists them.
    pub const ALL: [AclRole; 4] = [
        AclRole::Worker,
        AclRole::Publisher,
        AclRole::Operator,
        AclRole::Reader,
    ];

    /// The role's name, as the docs' user names use it (`ordo-worker`).
    pub fn name(self) -> &'static str {
        match self {
            AclRole::Worker => "worker",
            AclRole::Publisher => "publisher",
            AclRole::Operator => "operator",
            AclRole::Reader => "reader",
        }
    }

    /// The commands the role is granted (`+command`, `+command|subcommand`),
    /// in order, without duplicates.
    pub fn commands(self) -> Vec<&'static str> {
        let groups: &[&[&str]] = match self {
            AclRole::Worker => &[CONNECT, SCRIPTS, PUBLISH, DEDUP, PARTITIONING, WORKER],
            AclRole::Publisher => &[CONNECT, SCRIPTS, PUBLISH, DEDUP, POSITIONS, PARTITIONING],
            AclRole::Operator => &[CONNECT, READER, SCRIPTS, PUBLISH, PARTITIONING, OPERATOR],
            AclRole::Reader => &[CONNECT, READER],
        };
        let mut commands: Vec<&'static str> = Vec::new();
        for command in groups.iter().copied().flatten() {
            if !commands.contains(command) {
                commands.push(command);
            }
        }
        commands
    }

    /// The key patterns the role is granted, `<category>` standing for a
    /// category's name: repeated for each category the client works on.
    fn key_templates(self) -> Vec<&'static str> {
        let groups: &[&[&str]] = match self {
            AclRole::Worker | AclRole::Operator => &[CATEGORY_KEYS, CATEGORY_DLQ, CATEGORY_COPIES, ORDO_KEYS],
            AclRole::Publisher => &[CATEGORY_KEYS, CATEGORY_COPIES],
            AclRole::Reader => &[CATEGORY_KEYS, CATEGORY_DLQ, ORDO_KEYS],
        };
        groups.iter().copied().flatten().copied().collect()
    }

    /// How a key pattern is granted: read and write (`~`), or read only.
    fn key_prefix(self) -> &'static str {
        match self {
            AclRole::Reader => "%R~",
            AclRole::Worker | AclRole::Publisher | AclRole::Operator => "~",
        }
    }

    /// The `ACL SETUSER` rules of the role for a client working on
    /// `categories` (after the user name, `on` and the password): no keys,
    /// channels or commands but the role's (every role but the reader may
    /// use the doorbell channels). A pattern shared by every
    /// category is listed once.
    pub fn rules<S: AsRef<str>>(self, categories: &[S]) -> Vec<String> {
        let mut rules = vec![
            "resetkeys".to_owned(),
            "resetchannels".to_owned(),
            "-@all".to_owned(),
        ];
        rules.extend(self.commands().into_iter().map(str::to_owned));
        if self != AclRole::Reader {
            rules.push(DOORBELL_CHANNELS.to_owned());
        }
        let mut patterns: Vec<String> = Vec::new();
        for category in categories {
            let escaped = glob_escape(category.as_ref());
            for template in self.key_templates() {
                let pattern = format!(
                    "{}{}",
                    self.key_prefix(),
                    template.replace("<category>", &escaped)
                );
                if !patterns.contains(&pattern) {
                    patterns.push(pattern);
                }
            }
        }
        rules.extend(patterns);
        rules
    }

    /// The role's rules as docs/OPERATIONS.md shows them: with the
    /// placeholder `<category>` (its patterns are repeated for each
    /// category), on one line.
    pub fn template(self) -> String {
        self.rules(&["<category>"]).join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_acl_rules_are_the_roles_templates() {
        let docs = include_str!("../../../docs/OPERATIONS.md");
        let begin = docs
            .find("<!-- acl:begin -->")
            .expect("docs/OPERATIONS.md has <!-- acl:begin -->");
        let end = docs
            .find("<!-- acl:end -->")
            .expect("docs/OPERATIONS.md has <!-- acl:end -->");
        let documented: Vec<&str> = docs[begin..end]
            .lines()
            .filter_map(|line| line.strip_prefix("ACL SETUSER "))
            .collect();
        let expected: Vec<String> = AclRole::ALL
            .iter()
            .map(|role| format!("ordo-{} on >PASSWORD {}", role.name(), role.template()))
            .collect();
        assert_eq!(
            documented, expected,
            "docs/OPERATIONS.md's ACL rules (between the acl markers) must be AclRole::template() of every role"
        );
    }

    #[test]
    fn categories_are_escaped_and_shared_patterns_listed_once() {
        let rules = AclRole::Worker.rules(&["order", "a*b"]);
        assert!(rules.contains(&"~order".to_owned()), "{rules:?}");
        assert!(rules.contains(&"~{a\\*b:*".to_owned()), "{rules:?}");
        let halted = rules.iter().filter(|rule| *rule == "~{*}:ordo:halted").count();
        assert_eq!(halted, 1, "{rules:?}");
        assert!(
            AclRole::Reader
                .rules(&["order"])
                .iter()
                .filter(|rule| rule.contains('~'))
                .all(|rule| rule.starts_with("%R~")),
            "the reader reads keys only"
        );
    }
}
