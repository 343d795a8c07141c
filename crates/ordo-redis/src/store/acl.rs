//! The least-privilege Redis ACL rules of Ordo's roles: the one place that
//! says which commands each kind of client may send, and on which keys.
//!
//! docs/OPERATIONS.md ("ACL users") shows [`AclRole::template`] of every
//! role, checked by a unit test, and the ACL test of `ordo-cli` creates
//! users with [`AclRole::rules`], runs a worker, a publisher and the `ordo`
//! tool under them on a real Redis (nothing may be refused), and tries what
//! each role must not do (everything must be refused), so neither the
//! documentation nor the rules can drift from what Ordo sends.
//!
//! # How a rule is built
//!
//! Redis checks every command a function runs against the caller's rules,
//! exactly as if the caller had sent it: a function can do nothing its
//! caller could not do by hand. So what a role may do is what its rules let
//! it send directly, and the rules are as narrow as the commands:
//!
//! - the **root** of the rule holds the commands that name no key
//!   (connecting, `TIME`, `SCAN`, `FCALL_RO` of the library's `loaded`
//!   check) and no key pattern at all;
//! - one **selector** (`(...)`, Redis 7) grants `FCALL` and the role's
//!   **reads** on every key of its categories and groups (coarse patterns:
//!   a function call names keys only for Redis Cluster routing, each
//!   command inside is checked on its own; reads change nothing). The
//!   reader calls no function and its selector is read-only (`%R~`);
//! - every **write** command goes in a selector with exactly the key
//!   patterns that command needs (commands needing the same patterns share
//!   one), e.g. a publisher's `DEL` only on doorbells and `SET` only on
//!   positions and the partitioning record;
//! - `SPUBLISH` (and the waker's `SSUBSCRIBE`) get the doorbell channels.
//!
//! Nobody may load code: no `EVAL`, `SCRIPT` or `FUNCTION LOAD` (an
//! administrator loads the library, `ordo setup`); `FCALL` is not limited
//! to Ordo's function names, since ACL first-argument rules are deprecated
//! and a function runs under its caller's rules anyway. No `SELECT` but of
//! the one database a scope names (`+select|N`).

use crate::store::keys::glob_escape;

/// What fred sends on every new connection besides `AUTH`/`HELLO` (which
/// need no permission): `CLIENT ID`, `INFO` (the server version; the engine
/// also checks `maxmemory-policy`), and on Redis Cluster `CLUSTER INFO` and
/// `CLUSTER SLOTS` (the cluster's health and topology). Every Ordo client
/// then checks that the function library is loaded (`FCALL_RO` of its
/// `loaded` function, which names no key). `SELECT` is added for a scope's
/// database.
const CONNECT: &[&str] = &[
    "+client|id",
    "+info",
    "+cluster|info",
    "+cluster|slots",
    "+fcall_ro",
];

/// Keyless commands of the worker: the scripts' clock (`TIME`, also sent
/// inside functions), a plain consumer's client checking its connection
/// (`PING`) and interrupting its own blocking `XREADGROUP` at shutdown
/// (`CLIENT UNBLOCK`, fred's `Blocking::Interrupt`; Redis cannot limit it
/// to the user's own connections), and the transaction a partition's read
/// runs in (`MULTI`, `EXEC`; it is sent as a pipeline, never discarded):
/// the commands inside it are checked on their own.
const WORKER_KEYLESS: &[&str] = &["+time", "+ping", "+client|unblock", "+multi", "+exec"];

/// Keyless commands of the publisher: the clock of the deduplication window.
const PUBLISHER_KEYLESS: &[&str] = &["+time"];

/// Keyless commands of the `ordo` tool: the clock, and `SCAN` to find
/// categories and dead-letter streams (`ordo status` without `--category`,
/// `watch`, `dlq list`). `SCAN` lists key names of the whole database, not
/// only the user's: name the categories (`--category`) to do without it.
const TOOL_KEYLESS: &[&str] = &["+time", "+scan"];

/// The key patterns of the rules, `<category>`, `<group>` and
/// `<backfill>` standing for a category's name, a consumer group's name
/// (a handler or process manager) and the backfill suffix (see
/// docs/REDIS.md for the names).
mod pattern {
    /// A partition's lanes: `{order:c-1}`, `{order:c-1}:backfill`.
    pub(super) const LANES: &[&str] = &["{<category>:*}", "{<category>:*}:<backfill>"];
    /// A plain category's base stream.
    pub(super) const BASE: &[&str] = &["<category>"];
    /// A partition's dead letters.
    pub(super) const DLQ: &[&str] = &["{<category>:*}:dlq"];
    /// A plain category's dead letters.
    pub(super) const BASE_DLQ: &[&str] = &["<category>:dlq"];
    /// The message ids a lane or base stream recently got (deduplication).
    pub(super) const PUBLISHED: &[&str] = &[
        "{<category>:*}:published",
        "{<category>:*}:<backfill>:published",
        "{<category>}:published",
    ];
    /// Each producer's last sequence appended to a lane or base stream
    /// (deduplication).
    pub(super) const PRODUCERS: &[&str] = &[
        "{<category>:*}:producers",
        "{<category>:*}:<backfill>:producers",
        "{<category>}:producers",
    ];
    /// The last outbox position published to a lane or base stream.
    pub(super) const POSITIONS: &[&str] = &[
        "{<category>:*}:position",
        "{<category>:*}:<backfill>:position",
        "{<category>}:position",
    ];
    /// The doorbells a publish deletes (rings) and a waker sets (arms).
    pub(super) const DOORBELLS: &[&str] = &["{<category>:*}:doorbell", "{<category>}:doorbell"];
    /// Leases and their generations (fencing tokens).
    pub(super) const LEASES: &[&str] = &["{<category>:*}:lease:*", "{__pm__:<group>:*}:lease:<group>"];
    /// The member keys of process starts (one per process start, named by
    /// its instance id and nonce, which the rules cannot know: every
    /// instance's).
    pub(super) const MEMBERS: &[&str] = &["{ordo}:member:*"];
    /// The generations of the leases.
    pub(super) const GENERATIONS: &[&str] = &["{<category>:*}:gen:*", "{__pm__:<group>:*}:gen:<group>"];
    /// Fenced-commit markers and attempt sequences.
    pub(super) const COMMITS: &[&str] = &[
        "{<category>:*}:commit:*",
        "{<category>:*}:seq:*",
        "{__pm__:<group>:*}:commit:<group>",
        "{__pm__:<group>:*}:seq:<group>",
    ];
    /// A process manager's state.
    pub(super) const PM_STATE: &[&str] = &["{__pm__:<group>:*}:state"];
    /// Halt records.
    pub(super) const HALTS: &[&str] = &["{<category>:*}:halt:*"];
    /// Failed-attempt counts.
    pub(super) const ATTEMPTS: &[&str] = &["{<category>:*}:attempts:*"];
    /// The operator action logs.
    pub(super) const LOGS: &[&str] = &["{<category>:*}:log:*"];
    /// A hashed partition's parked keys.
    pub(super) const PARKED: &[&str] = &["{<category>:*}:parked:*"];
    /// A hashed partition's keys holding messages aside.
    pub(super) const HOLDING: &[&str] = &["{<category>:*}:holding:*"];
    /// A parked key's held messages.
    pub(super) const HELD: &[&str] = &["{<category>:*}:held:*"];
    /// The category index's buckets and their directory.
    pub(super) const INDEX: &[&str] = &["{*}:<category>:__partitions__", "{<category>}:__buckets__"];
    /// The counter of the category index's changes.
    pub(super) const INDEX_VERSION: &[&str] = &["{<category>}:__index_version__"];
    /// The category's halted set's buckets and their directory.
    pub(super) const HALTED: &[&str] = &["{*}:<category>:__halted__", "{<category>}:__halted_buckets__"];
    /// The group registry and its per-slot copies.
    pub(super) const REGISTRY: &[&str] = &["{<category>}:__groups__", "{*}:<category>:__groups__"];
    /// The joining marker and its per-slot copies.
    pub(super) const JOINING: &[&str] = &["{<category>}:__joining__", "{*}:<category>:__joining__"];
    /// How the category is partitioned.
    pub(super) const PARTITIONING: &[&str] = &["{<category>}:__partitioning__"];
    /// A group's live instances.
    pub(super) const INSTANCES: &[&str] = &["ordo:instances:<group>"];
    /// The instances a group's handler is paused on (its circuit breaker).
    pub(super) const PAUSED: &[&str] = &["ordo:paused:<group>"];
    /// A command partition's outcome records (`<category>` is then the
    /// command stream category, `order.commands`).
    pub(super) const OUTCOMES: &[&str] = &["{<category>:*}:outcome:*"];
    /// The instances' command reply lists. An instance's own is named by
    /// its id, which the rules cannot know: every reply list.
    pub(super) const REPLIES: &[&str] = &["{ordo:replies:*}"];

    /// Every key of a category, coarsely: what a role reads, and names in
    /// its function calls. A category's names are its base stream and dead
    /// letters, its partitions' names (`{<category>:`...), its
    /// category-wide names (`{<category>}:...`) and its per-slot buckets
    /// and copies (`{<slot_tag>}:<category>:__...__`).
    pub(super) const EVERY_CATEGORY_KEY: &[&str] = &[
        "<category>",
        "<category>:dlq",
        "{<category>:*",
        "{<category>}:*",
        "{*}:<category>:__*__",
    ];
    /// Every key of a group: the member keys (whose leases are held), its
    /// instance set, its pause records and its process manager's names
    /// (state, leases).
    pub(super) const EVERY_GROUP_KEY: &[&str] = &[
        "{ordo}:member:*",
        "ordo:instances:<group>",
        "ordo:paused:<group>",
        "{__pm__:<group>:*",
    ];
}

use pattern::*;

/// Write commands and the keys they may write.
struct Writes {
    commands: &'static [&'static str],
    keys: &'static [&'static [&'static str]],
}

/// What every publish writes (the publish function, and listing a new
/// slot's index bucket in the directory): the stream and its consumer
/// groups (a new stream gets the registered groups; an existing one the
/// groups it lacks while a group joins), the index, an armed doorbell
/// (deleted, and rung on its channel), and the index version (incremented
/// after a publish that indexed a partition, and by a worker's reap).
const PUBLISH: &[Writes] = &[
    Writes {
        commands: &["+xadd", "+xgroup|create"],
        keys: &[LANES, BASE],
    },
    Writes {
        commands: &["+sadd"],
        keys: &[INDEX],
    },
    Writes {
        commands: &["+incr"],
        keys: &[INDEX_VERSION],
    },
    Writes {
        commands: &["+del"],
        keys: &[DOORBELLS],
    },
];

/// A publish with the deduplication window (every publish but `ordo dlq
/// replay`'s): each producer's last sequence (recorded, its stale producers
/// trimmed, expiring), and for publications without a producer the ids
/// recently appended (taken back when the `XADD` fails, trimmed and
/// expiring).
const DEDUP: &[Writes] = &[
    Writes {
        commands: &["+hset", "+hdel", "+pexpire"],
        keys: &[PRODUCERS],
    },
    Writes {
        commands: &[
            "+zadd",
            "+zrem",
            "+zremrangebyscore",
            "+zremrangebyrank",
            "+pexpire",
        ],
        keys: &[PUBLISHED],
    },
];

/// A publish with a position (the PostgreSQL outbox relay): the last
/// position published to its scope (a hash in a hashed partition).
const POSITION: &[Writes] = &[Writes {
    commands: &["+set", "+hset"],
    keys: &[POSITIONS],
}];

/// Recording how a category is partitioned (the first process that
/// publishes or consumes it, or `ordo repartition`).
const RECORD_PARTITIONING: &[Writes] = &[Writes {
    commands: &["+set"],
    keys: &[PARTITIONING],
}];

/// What a worker writes besides publishing: its member key (register,
/// renew, leave), leases (acquire, take over, release), reads (`XREADGROUP` moves the group; a lane without the group
/// gets it), acknowledgements and trimming, attempt sequences and fenced
/// commits, failed-attempt counts, halts and the halted set, parked keys
/// and held messages, arming doorbells, reaping (the lanes, and every
/// group's bookkeeping of the partition), registering the worker's groups
/// (the registry, the joining marker, every slot's copies), announcing its
/// instance, plain consumer groups (reads, dead letters, claiming a dead
/// consumer's entries and forgetting it), dropping the consumer of a
/// drained lane when arming its doorbell, process managers' state.
const WORKER: &[Writes] = &[
    Writes {
        commands: &["+set"],
        keys: &[
            MEMBERS,
            LEASES,
            GENERATIONS,
            COMMITS,
            DOORBELLS,
            PM_STATE,
            JOINING,
        ],
    },
    // `PEXPIRE` on leases: the renewals of an instance of the earlier
    // release (a TTL per lease), while a rolling upgrade runs both.
    Writes {
        commands: &["+pexpire"],
        keys: &[MEMBERS, LEASES, PAUSED],
    },
    Writes {
        commands: &["+del"],
        keys: &[
            MEMBERS,
            LANES,
            PUBLISHED,
            LEASES,
            GENERATIONS,
            COMMITS,
            ATTEMPTS,
            HELD,
        ],
    },
    Writes {
        commands: &["+xreadgroup", "+xack", "+xtrim"],
        keys: &[LANES, BASE],
    },
    Writes {
        commands: &["+xadd"],
        keys: &[HELD, BASE_DLQ],
    },
    Writes {
        commands: &["+xdel"],
        keys: &[HELD],
    },
    Writes {
        commands: &["+xclaim"],
        keys: &[BASE],
    },
    Writes {
        commands: &["+xgroup|delconsumer"],
        keys: &[LANES, BASE],
    },
    Writes {
        commands: &["+hset"],
        keys: &[HALTS, PARKED],
    },
    Writes {
        commands: &["+hdel", "+hincrby"],
        keys: &[ATTEMPTS],
    },
    Writes {
        commands: &["+sadd"],
        keys: &[HALTED, HOLDING, REGISTRY],
    },
    Writes {
        commands: &["+srem"],
        keys: &[INDEX, HOLDING],
    },
    Writes {
        commands: &["+zadd", "+zrem", "+zremrangebyscore"],
        keys: &[INSTANCES],
    },
    Writes {
        commands: &["+hset", "+hdel"],
        keys: &[PAUSED],
    },
];

/// Sending commands to the owner of their key: popping this instance's
/// outcomes from its reply list (the outcome records are read like any key
/// of the command stream category).
const SEND_COMMANDS: &[Writes] = &[Writes {
    commands: &["+blmpop"],
    keys: &[REPLIES],
}];

/// Running commands sent from any instance: recording each outcome once
/// under its id, pushing it to its sender's reply list (which then expires
/// a minute later).
const RUN_COMMANDS: &[Writes] = &[
    Writes {
        commands: &["+set"],
        keys: &[OUTCOMES],
    },
    Writes {
        commands: &["+rpush", "+pexpire"],
        keys: &[REPLIES],
    },
];

/// What the operator's write commands write besides a replay's publish
/// (without deduplication or position) and recording a category's
/// partitioning (`repartition`): the resolve functions (`skip`, `retry`,
/// `dlq`: the dead letter, the action log, acknowledging and trimming the
/// head, the failed-attempt count, the halt record or parked key and the
/// halted set; a parked key's held head) and `dlq purge`.
const OPERATOR: &[Writes] = &[
    Writes {
        commands: &["+xadd"],
        keys: &[DLQ, LOGS],
    },
    Writes {
        commands: &["+xack", "+xtrim"],
        keys: &[LANES],
    },
    Writes {
        commands: &["+xdel"],
        keys: &[HELD, DLQ, BASE_DLQ],
    },
    Writes {
        commands: &["+hdel"],
        keys: &[ATTEMPTS, PARKED],
    },
    Writes {
        commands: &["+del"],
        keys: &[HALTS],
    },
    Writes {
        commands: &["+srem"],
        keys: &[HALTED],
    },
];

/// What a publisher reads: whether streams and the joining marker exist,
/// positions, producers' last sequences (and, to trim them, the producer
/// hash), the registry copies, a stream's groups, the partitioning record
/// and the index (before hashed partitions are first recorded).
const PUBLISHER_READS: &[&str] = &[
    "+exists",
    "+get",
    "+hget",
    "+hgetall",
    "+hlen",
    "+smembers",
    "+scard",
    "+sunion",
    "+xinfo|groups",
];

/// What a worker reads: a publisher's reads, and the lease checks (which
/// holders' member keys are gone: one `MGET`; a check of many leases: one
/// `MGET` per call), halt and park
/// records, held messages, pending entries, stream and group state (reads,
/// trimming, reaping, the health check, the waker's re-check: one `XREAD`
/// over many lanes), discovery, the registration checks, the instance
/// sets, pause records (`HGETALL`, `HLEN`), process managers' state.
const WORKER_READS: &[&str] = &[
    "+exists",
    "+get",
    "+hget",
    "+hgetall",
    "+hlen",
    "+hkeys",
    "+hmget",
    "+mget",
    "+pttl",
    "+hexists",
    "+smembers",
    "+sismember",
    "+scard",
    "+sunion",
    "+xinfo|groups",
    "+xinfo|stream",
    "+xinfo|consumers",
    "+xpending",
    "+xrange",
    "+xrevrange",
    "+xread",
    "+xlen",
    "+zrange",
    "+zscore",
];

/// What the read-only views (`ordo status`, `partitions`, `inspect`,
/// `watch`, `dlq list`, `dlq inspect`) read; the worker's health check reads
/// the same (a lease's holder and whether it has a TTL, whether the
/// holders' member keys exist: `PTTL`, `MGET`).
const READER_READS: &[&str] = &[
    "+get",
    "+mget",
    "+pttl",
    "+hget",
    "+hgetall",
    "+smembers",
    "+sunion",
    "+zrangebyscore",
    "+xinfo|groups",
    "+xinfo|stream",
    "+xlen",
    "+xpending",
    "+xrange",
];

/// What the operator's write commands read besides [`READER_READS`]: a
/// replay's publish, a parked key's count of held ones, and the held keys
/// `repartition` checks.
const OPERATOR_READS: &[&str] = &["+exists", "+scard", "+hlen"];

/// The sharded Pub/Sub channels of the doorbells (one per hash slot), which
/// every publish may ring and the waker subscribes to.
const DOORBELL_CHANNELS: &str = "&{*}:ordo:doorbell";

/// Who connects to Redis, and so which ACL rule it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AclRole {
    /// An engine that runs handlers: the fenced partition consumer, plain
    /// consumer groups, process managers, the heartbeat, the waker, the
    /// reaper, discovery and the health check. It also publishes (what
    /// handlers raise, and an outbox relay it runs).
    Worker,
    /// A client that only publishes: `UnitOfWork::commit` to Redis, the
    /// PostgreSQL outbox relay, and sends commands (`Domain::send`) that
    /// other instances run.
    Publisher,
    /// The `ordo` tool with its write commands: `skip`, `retry`, `dlq`,
    /// `dlq replay`, `dlq purge`, `repartition`, and every read-only view.
    Operator,
    /// The `ordo` tool's read-only views: `status`, `partitions`,
    /// `inspect`, `watch`, `dlq list`, `dlq inspect`. Keys are readable
    /// only (`%R~`).
    Reader,
}

/// What one ACL user works on: the categories, the consumer groups, the
/// database and the backfill suffix its rules name.
///
/// - **categories**: for a worker, the categories its handlers consume and
///   the ones they publish to; for a publisher, the ones it publishes to;
///   for the `ordo` tool, the ones it looks at and acts on.
/// - **groups**: the consumer groups (handler and process-manager names)
///   of those categories, for their instance sets and process managers'
///   state and leases: a worker's own groups; for the `ordo` tool every
///   group of its categories (`ordo status` reads each one's instances).
///   A publisher needs none.
/// - **database**: the database the client's URL names (`/N`): its
///   `SELECT` is allowed, and no other. None: the URL names none
///   (database 0, no `SELECT`).
/// - **backfill suffix**: `[server.priority_lanes] backfill_suffix`
///   (default `backfill`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclScope {
    categories: Vec<String>,
    groups: Vec<String>,
    database: Option<u32>,
    backfill_suffix: String,
}

impl Default for AclScope {
    fn default() -> Self {
        Self {
            categories: Vec::new(),
            groups: Vec::new(),
            database: None,
            backfill_suffix: "backfill".to_owned(),
        }
    }
}

impl AclScope {
    /// An empty scope: no category, no group, no database, the default
    /// backfill suffix.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds categories.
    #[must_use]
    pub fn categories<S: AsRef<str>>(mut self, categories: impl IntoIterator<Item = S>) -> Self {
        self.categories
            .extend(categories.into_iter().map(|c| c.as_ref().to_owned()));
        self
    }

    /// Adds consumer groups (handler and process-manager names).
    #[must_use]
    pub fn groups<S: AsRef<str>>(mut self, groups: impl IntoIterator<Item = S>) -> Self {
        self.groups
            .extend(groups.into_iter().map(|g| g.as_ref().to_owned()));
        self
    }

    /// The database the client selects (its URL's `/N`).
    #[must_use]
    pub fn database(mut self, database: u32) -> Self {
        self.database = Some(database);
        self
    }

    /// The backfill lane suffix, when not the default `backfill`.
    #[must_use]
    pub fn backfill_suffix(mut self, suffix: impl Into<String>) -> Self {
        self.backfill_suffix = suffix.into();
        self
    }

    /// `template` for every category and group of the scope (escaped for
    /// a glob), in order: a template without a placeholder once.
    fn expand(&self, template: &str) -> Vec<String> {
        let backfill = glob_escape(&self.backfill_suffix);
        let template = template.replace("<backfill>", &backfill);
        let mut out = vec![template];
        for (placeholder, values) in [("<category>", &self.categories), ("<group>", &self.groups)] {
            if !out[0].contains(placeholder) {
                continue;
            }
            out = out
                .iter()
                .flat_map(|pattern| {
                    values
                        .iter()
                        .map(move |value| pattern.replace(placeholder, &glob_escape(value)))
                })
                .collect();
        }
        out
    }

    /// The patterns of every template of `groups`, in order, once each.
    fn patterns(&self, groups: &[&[&str]]) -> Vec<String> {
        let mut patterns: Vec<String> = Vec::new();
        for template in groups.iter().copied().flatten() {
            for pattern in self.expand(template) {
                if !patterns.contains(&pattern) {
                    patterns.push(pattern);
                }
            }
        }
        patterns
    }
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

    /// The commands the role sends that name no key.
    fn keyless(self) -> Vec<&'static str> {
        let extra = match self {
            AclRole::Worker => WORKER_KEYLESS,
            AclRole::Publisher => PUBLISHER_KEYLESS,
            AclRole::Operator | AclRole::Reader => TOOL_KEYLESS,
        };
        CONNECT.iter().chain(extra).copied().collect()
    }

    /// The role's read commands.
    fn reads(self) -> Vec<&'static str> {
        let groups: &[&[&str]] = match self {
            AclRole::Worker => &[WORKER_READS],
            AclRole::Publisher => &[PUBLISHER_READS],
            AclRole::Operator => &[READER_READS, OPERATOR_READS],
            AclRole::Reader => &[READER_READS],
        };
        let mut reads: Vec<&'static str> = Vec::new();
        for command in groups.iter().copied().flatten() {
            if !reads.contains(command) {
                reads.push(command);
            }
        }
        reads
    }

    /// The role's writes.
    fn writes(self) -> Vec<&'static Writes> {
        let groups: &[&[Writes]] = match self {
            AclRole::Worker => &[
                PUBLISH,
                DEDUP,
                POSITION,
                RECORD_PARTITIONING,
                WORKER,
                SEND_COMMANDS,
                RUN_COMMANDS,
            ],
            AclRole::Publisher => &[PUBLISH, DEDUP, POSITION, RECORD_PARTITIONING, SEND_COMMANDS],
            AclRole::Operator => &[PUBLISH, RECORD_PARTITIONING, OPERATOR],
            AclRole::Reader => &[],
        };
        groups.iter().copied().flatten().collect()
    }

    /// The `ACL SETUSER` rules of the role for a client working on `scope`
    /// (after the user name, `on` and the password): a root of keyless
    /// commands and selectors for the rest (see the module docs). Each
    /// selector is one item, `(...)`.
    pub fn rules(self, scope: &AclScope) -> Vec<String> {
        let mut rules = vec![
            "resetkeys".to_owned(),
            "resetchannels".to_owned(),
            "-@all".to_owned(),
            "clearselectors".to_owned(),
        ];
        rules.extend(self.keyless().into_iter().map(str::to_owned));
        if let Some(database) = scope.database {
            rules.push(format!("+select|{database}"));
        }
        let selector = |commands: &[&str], prefix: &str, patterns: &[String]| {
            let mut parts: Vec<String> = commands.iter().map(|c| (*c).to_owned()).collect();
            parts.extend(patterns.iter().map(|p| format!("{prefix}{p}")));
            format!("({})", parts.join(" "))
        };
        // Reads, and the keys function calls name, on every key of the
        // scope: read-only for the reader, who calls no function.
        let every_key = match self {
            AclRole::Publisher => scope.patterns(&[EVERY_CATEGORY_KEY]),
            _ => scope.patterns(&[EVERY_CATEGORY_KEY, EVERY_GROUP_KEY]),
        };
        let mut reads = self.reads();
        if self == AclRole::Reader {
            rules.push(selector(&reads, "%R~", &every_key));
        } else {
            reads.insert(0, "+fcall");
            rules.push(selector(&reads, "~", &every_key));
        }
        // Each write command with the union of its patterns; commands with
        // the same patterns share a selector, in the order they first come.
        let mut commands: Vec<(&str, Vec<String>)> = Vec::new();
        for writes in self.writes() {
            let patterns = scope.patterns(writes.keys);
            for command in writes.commands {
                match commands.iter_mut().find(|(c, _)| c == command) {
                    Some((_, known)) => {
                        for pattern in &patterns {
                            if !known.contains(pattern) {
                                known.push(pattern.clone());
                            }
                        }
                    }
                    None => commands.push((command, patterns.clone())),
                }
            }
        }
        let mut selectors: Vec<(Vec<&str>, Vec<String>)> = Vec::new();
        for (command, patterns) in commands {
            match selectors.iter_mut().find(|(_, p)| *p == patterns) {
                Some((shared, _)) => shared.push(command),
                None => selectors.push((vec![command], patterns)),
            }
        }
        for (commands, patterns) in selectors {
            rules.push(selector(&commands, "~", &patterns));
        }
        let channels: &[&str] = match self {
            AclRole::Worker => &["+spublish", "+ssubscribe", "+sunsubscribe"],
            AclRole::Publisher | AclRole::Operator => &["+spublish"],
            AclRole::Reader => &[],
        };
        if !channels.is_empty() {
            let mut parts: Vec<&str> = channels.to_vec();
            parts.push(DOORBELL_CHANNELS);
            rules.push(format!("({})", parts.join(" ")));
        }
        rules
    }

    /// The role's rules as docs/OPERATIONS.md shows them, on one line:
    /// `<category>` and `<group>` placeholders (their patterns are repeated
    /// for each category and group), the default backfill suffix, no
    /// database.
    pub fn template(self) -> String {
        self.rules(&AclScope::new().categories(["<category>"]).groups(["<group>"]))
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_acl_rules_are_the_roles_templates() {
        let docs = include_str!("../../../../docs/OPERATIONS.md");
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
    fn names_are_escaped_and_repeated_per_category_and_group() {
        let scope = AclScope::new()
            .categories(["order", "a*b"])
            .groups(["G1", "G2"])
            .backfill_suffix("late");
        let rules = AclRole::Worker.rules(&scope).join(" ");
        for pattern in [
            "~{order:*}",
            "~{a\\*b:*}",
            "~{order:*}:late",
            "~{__pm__:G1:*}:state",
            "~{__pm__:G2:*}:state",
            "~ordo:instances:G2",
        ] {
            assert!(rules.contains(&format!("{pattern} ")), "{pattern} in {rules}");
        }
        assert!(!rules.contains(":backfill"), "{rules}");
        assert!(!rules.contains("<"), "every placeholder filled: {rules}");
    }

    #[test]
    fn no_role_may_load_code_or_select_another_database() {
        for role in AclRole::ALL {
            let rules = role.rules(&AclScope::new().categories(["order"]).database(3));
            let text = rules.join(" ");
            for forbidden in [
                "+eval",
                "+script",
                "+function",
                "+@",
                "+select ",
                "+keys",
                "+flush",
                "+config",
            ] {
                assert!(!text.contains(forbidden), "{role:?} grants {forbidden}: {text}");
            }
            assert!(rules.contains(&"+select|3".to_owned()), "{role:?}: {text}");
            assert!(rules[..4] == ["resetkeys", "resetchannels", "-@all", "clearselectors"]);
            // The root names no key: every key pattern is in a selector.
            let root: Vec<&String> = rules.iter().filter(|rule| !rule.starts_with('(')).collect();
            assert!(root.iter().all(|rule| !rule.contains('~')), "{role:?}: {root:?}");
        }
    }

    /// The selector of each write command (a publisher's `DEL` is its
    /// doorbells', nothing else), and reads read-only.
    #[test]
    fn a_write_command_is_granted_on_its_keys_only() {
        let scope = AclScope::new().categories(["order"]);
        let selector_of = |role: AclRole, command: &str| -> String {
            role.rules(&scope)
                .into_iter()
                .find(|rule| {
                    rule.starts_with('(')
                        && rule
                            .split(' ')
                            .any(|part| part.trim_start_matches('(') == command)
                })
                .unwrap_or_default()
        };
        assert_eq!(
            selector_of(AclRole::Publisher, "+del"),
            "(+del ~{order:*}:doorbell ~{order}:doorbell)"
        );
        assert!(
            selector_of(AclRole::Publisher, "+set").contains("~{order}:__partitioning__")
                && !selector_of(AclRole::Publisher, "+set").contains(":gen:")
                && !selector_of(AclRole::Publisher, "+set").contains(":lease:"),
            "{}",
            selector_of(AclRole::Publisher, "+set")
        );
        // A publisher deletes hash fields of producer hashes only (trimming
        // idle producers), never failed-attempt counts or pause records.
        let hdel = selector_of(AclRole::Publisher, "+hdel");
        assert!(
            hdel.contains("~{order:*}:producers")
                && hdel
                    .split(" ~")
                    .skip(1)
                    .all(|pattern| pattern.trim_end_matches(')').ends_with(":producers")),
            "{hdel}"
        );
        // Only a worker writes member keys (a publisher or an operator
        // could end a worker's membership otherwise).
        for role in [AclRole::Publisher, AclRole::Operator, AclRole::Reader] {
            assert!(
                role.rules(&scope).iter().all(|rule| rule.contains("%R~")
                    || rule.starts_with("(+fcall ")
                    || !rule.contains("{ordo}:member:")),
                "{role:?} may write member keys"
            );
        }
        for command in ["+set", "+pexpire", "+del"] {
            assert!(
                selector_of(AclRole::Worker, command).contains("~{ordo}:member:*"),
                "{command}"
            );
        }
        assert!(selector_of(AclRole::Publisher, "+get").starts_with("(+fcall "));
        assert!(selector_of(AclRole::Publisher, "+get").contains(" ~{order:* "));
        assert!(selector_of(AclRole::Reader, "+get").contains("%R~"));
        for role in AclRole::ALL {
            for rule in role.rules(&scope) {
                let writes = !rule.contains("%R~") && rule.contains('~') && !rule.starts_with("(+fcall ");
                assert!(
                    !(writes && READER_READS.iter().any(|read| rule.contains(&format!("{read} ")))),
                    "{role:?}: a read among writes: {rule}"
                );
            }
        }
    }
}
