//! Where everything lives in Redis: the one place that formats and parses
//! Redis key names.
//!
//! Every name a partition's scripts touch carries the partition's hash tag
//! `{category:key}` (its primary stream is exactly that tag), so on Redis
//! Cluster a partition's streams and bookkeeping live in one slot and each
//! per-partition script touches one slot. The structures shared by many
//! partitions (the category index, the halted set) are split into one
//! bucket per hash slot, each named with a [tag of that slot](slot_tag): a
//! partition is listed in the bucket of its own slot, and a per-category
//! (or global) directory lists the slots in use. The group registry and
//! the joining marker are per category, with a copy in every slot for the
//! publish script; the instance sets are per group.
//!
//! The table in docs/REDIS.md ("Where things live") is checked against
//! [`layout`] by a unit test, so the documentation cannot drift from the
//! names used here.

use ordo_core::contract::key::Lane;

/// The consumer name every partition owner reads under. Ownership is the
/// lease, not the consumer name, so the group's pending list is simply the
/// partition's: a new owner reads it back under its own lease, and nothing
/// accumulates per owner or generation.
pub(crate) const CONSUMER: &str = "ordo";

/// The token of a dead-letter stream (`{order:c-1}:dlq`, `order:dlq`).
const DLQ: &str = "dlq";

/// How many hash slots a Redis Cluster has; every slot is a bucket of the
/// structures shared by many partitions (the category index, the halted
/// set, the per-slot copies of the group registry).
pub(crate) const SLOTS: u16 = 16384;

/// The Redis Cluster hash slot of `name` (CRC16 of its hash tag, or of the
/// whole name without one), as a cluster computes it.
pub(crate) fn slot_of(name: &str) -> u16 {
    fred::types::cluster::ClusterRouting::hash_key(name.as_bytes())
}

/// A short hash tag (without its braces) that hashes to `slot`, so a name
/// starting with `{<slot_tag>}` lives in that slot: the first decimal number
/// (`0`, `1`, ...) whose CRC16 is the slot. Computed once for every slot
/// (one pass over about 200,000 numbers fills all 16,384).
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags: Vec<Option<String>> = vec![None; usize::from(SLOTS)];
        let mut missing = tags.len();
        let mut n: u64 = 0;
        while missing > 0 {
            let tag = n.to_string();
            let at = usize::from(slot_of(&tag));
            if tags[at].is_none() {
                tags[at] = Some(tag);
                missing -= 1;
            }
            n += 1;
        }
        tags.into_iter().flatten().collect()
    });
    &tags[usize::from(slot % SLOTS)]
}

/// The index of `category`'s live partitions in slot `slot` (a set of index
/// members): `{<slot_tag>}:order:__partitions__`. A partition is listed in
/// the bucket of its own slot, so publish and reap update it atomically.
pub fn index(category: &str, slot: u16) -> String {
    format!("{{{}}}:{category}:__partitions__", slot_tag(slot))
}

/// The slots whose [`index`] bucket of `category` may be non-empty (a set of
/// slot numbers): `{order}:__buckets__`. Only ever added to (a slot is added
/// before the first publish to it), so discovery can never miss a partition.
pub fn index_directory(category: &str) -> String {
    format!("{{{category}}}:__buckets__")
}

/// A counter of `category`'s index changes: `{order}:__index_version__`.
/// Incremented after a publish adds a partition to the index and after a
/// reap removes one, so discovery reads the index again only when it
/// changed (and, should an increment be lost, every few rounds anyway).
pub fn index_version(category: &str) -> String {
    format!("{{{category}}}:__index_version__")
}

/// A glob matching every category's index directory (for `SCAN`).
pub(crate) const INDEX_DIRECTORY_PATTERN: &str = "{*}:__buckets__";

/// The category of an index directory name, if `name` is one.
pub(crate) fn parse_index_directory(name: &str) -> Option<&str> {
    name.strip_prefix('{')?
        .strip_suffix("}:__buckets__")
        .filter(|c| !c.is_empty() && !c.contains(['{', '}', ':']))
}

/// The halt keys of `category`'s halted partitions in slot `slot` (and
/// the parked hashes of its hashed partitions there), for operators:
/// `{<slot_tag>}:order:__halted__`, in the slot of the partitions it lists.
/// Per category, so that an ACL user of one category neither reads nor
/// writes another's halts.
pub fn halted(category: &str, slot: u16) -> String {
    format!("{{{}}}:{category}:__halted__", slot_tag(slot))
}

/// The slots whose [`halted`] bucket of `category` may be non-empty (a set
/// of slot numbers), only ever added to: `{order}:__halted_buckets__`.
pub fn halted_directory(category: &str) -> String {
    format!("{{{category}}}:__halted_buckets__")
}

/// The halted-set bucket of slot `slot` before it was per category
/// (`{<slot_tag>}:ordo:halted`, every category's halts), which
/// [`crate::store::setup`] moves to the per-category buckets.
pub(crate) fn legacy_halted(slot: u16) -> String {
    format!("{{{}}}:ordo:halted", slot_tag(slot))
}

/// The directory of the [`legacy_halted`] buckets.
pub(crate) const LEGACY_HALTED_DIRECTORY: &str = "{ordo}:__halted_buckets__";

/// The category of a halted-set member (a halt key `{order:c-1}:halt:G`,
/// or a parked hash `{order:__7__}:parked:G`): the text between its `{` and
/// the first `:`.
pub(crate) fn halted_member_category(member: &str) -> Option<&str> {
    let (category, _) = member.strip_prefix('{')?.split_once(':')?;
    (!category.is_empty() && !category.contains(['{', '}'])).then_some(category)
}

/// The member key of a process start, `identity` being `<instance>:<nonce>`:
/// `{ordo}:member:<instance>:<nonce>`, with a TTL its heartbeat renews
/// (`PEXPIRE`, which never re-creates it). Every lease it holds (without a
/// TTL of its own) is held for as long as this key exists. One hash tag for
/// every member, so the takeover's question (which holders are gone) is one
/// `MGET` on one node of a Redis Cluster.
pub fn member(identity: &str) -> String {
    format!("{{ordo}}:member:{identity}")
}

/// The holder's identity (`instance:nonce`) in a lease value
/// `instance:nonce:token`, when the value is one (an instance id may hold
/// `:`; a value Ordo did not write names nobody).
pub(crate) fn lease_holder(value: &str) -> Option<&str> {
    let (identity, token) = value.rsplit_once(':')?;
    let (_, nonce) = identity.rsplit_once(':')?;
    let token = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    (token && !nonce.is_empty()).then_some(identity)
}

/// The [member key](member) of the holder a lease value
/// `instance:nonce:token` names: the lease is held while it exists.
pub fn lease_member(value: &str) -> Option<String> {
    lease_holder(value).map(member)
}

/// The sorted set of live instances consuming `group` (score: expiry in ms).
pub fn instances(group: &str) -> String {
    format!("ordo:instances:{group}")
}

/// The hash of the instances on which `group` (a handler) is paused by its
/// circuit breaker, for `ordo status` and health: field instance id,
/// value `<expiry ms> <since ms> <failed probes> <reason>`.
pub fn paused(group: &str) -> String {
    format!("ordo:paused:{group}")
}

/// The set of consumer groups that consume `category`; a new stream of the
/// category gets each of them at id 0 when its first entry is published.
pub fn group_registry(category: &str) -> String {
    format!("{{{category}}}:__groups__")
}

/// The copy of `category`'s group registry kept in slot `slot`, for the
/// publish script of the partitions in that slot:
/// `{<slot_tag>}:order:__groups__`. Written with the registry itself.
pub fn group_registry_copy(category: &str, slot: u16) -> String {
    format!("{{{}}}:{category}:__groups__", slot_tag(slot))
}

/// How `category` is partitioned (`per_key`, or a number of hashed
/// partitions), recorded by the first process that publishes or consumes
/// it and changed only by `ordo repartition`: `{order}:__partitioning__`.
pub fn partitioning(category: &str) -> String {
    format!("{{{category}}}:__partitioning__")
}

/// A glob matching every category's group registry (for `SCAN`).
pub(crate) const REGISTRY_PATTERN: &str = "{*}:__groups__";

/// The category of a group registry name, if `name` is one.
pub(crate) fn parse_registry(name: &str) -> Option<&str> {
    name.strip_prefix('{')?
        .strip_suffix("}:__groups__")
        .filter(|c| !c.is_empty() && !c.contains(['{', '}', ':']))
}

/// Exists while a new consumer group joins the existing lanes of
/// `category`: publishes then give every lane the registered groups it
/// lacks. Same slot as the group registry.
pub fn joining(category: &str) -> String {
    format!("{{{category}}}:__joining__")
}

/// The copy of `category`'s joining marker kept in slot `slot`, next to
/// [`group_registry_copy`]: `{<slot_tag>}:order:__joining__`.
pub fn joining_copy(category: &str, slot: u16) -> String {
    format!("{{{}}}:{category}:__joining__", slot_tag(slot))
}

/// The streams of a category no handler partitions: one base stream.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct BaseKeys {
    stream: String,
}

impl BaseKeys {
    /// The base stream of `category`.
    pub(crate) fn new(category: &str) -> Self {
        Self {
            stream: category.to_owned(),
        }
    }

    /// The base stream: `order`.
    pub(crate) fn stream(&self) -> &str {
        &self.stream
    }

    /// Its dead-letter stream: `order:dlq`.
    pub(crate) fn dlq(&self) -> String {
        format!("{}:{DLQ}", self.stream)
    }

    /// The message ids recently appended to it: `{order}:published`.
    pub(crate) fn published(&self) -> String {
        format!("{{{}}}:published", self.stream)
    }

    /// Each producer's last sequence appended to it (see
    /// `ordo_core::contract::broker::ProducerSequence`): `{order}:producers`.
    pub(crate) fn producers(&self) -> String {
        format!("{{{}}}:producers", self.stream)
    }

    /// The last position published to it (see
    /// `ordo_core::contract::broker::POSITION_SCOPE_METADATA`): `{order}:position`.
    pub(crate) fn position(&self) -> String {
        format!("{{{}}}:position", self.stream)
    }

    /// Its doorbell: `{order}:doorbell` (see [`PartitionKeys::doorbell`];
    /// no waker arms it, the publish script treats every stream alike).
    pub(crate) fn doorbell(&self) -> String {
        format!("{{{}}}:doorbell", self.stream)
    }

    /// The doorbell channel of its slot.
    pub(crate) fn doorbell_channel(&self) -> String {
        doorbell_channel(slot_of(&self.stream))
    }
}

/// The sharded Pub/Sub channel a publish rings when it lands on an armed
/// partition of slot `slot` (the message is the partition's
/// [doorbell](PartitionKeys::doorbell) key): `{<slot_tag>}:ordo:doorbell`.
/// A waker subscribes to the channels of the slots of the partitions it
/// watches.
pub fn doorbell_channel(slot: u16) -> String {
    format!("{{{}}}:ordo:doorbell", slot_tag(slot))
}

/// A partition of a category, as the consumer and the index know it: an
/// opaque id. Today a partition is one key ([`PartitionId::for_key`] is
/// where that is decided); its index member and the hash tag of every name
/// of the partition derive from the id alone.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionId {
    category: String,
    member: String,
}

impl PartitionId {
    /// The partition of `category` that `key`'s messages go to.
    pub fn for_key(category: &str, key: &str) -> Self {
        Self {
            category: category.to_owned(),
            member: key.to_owned(),
        }
    }

    /// Hashed partition `index` of `category` (configured with
    /// `partitions = N`; see [`Routing`]): its member is `__<index>__`, a
    /// form no key can have (keys of the reserved `__name__` form are
    /// refused), so it never names a key's own partition.
    pub fn hashed(category: &str, index: u32) -> Self {
        Self {
            category: category.to_owned(),
            member: format!("__{index}__"),
        }
    }

    /// Whether this is a hashed partition (many keys, each in order),
    /// rather than one key's own partition.
    pub fn is_hashed(&self) -> bool {
        self.member.len() > 4
            && self.member.starts_with("__")
            && self.member.ends_with("__")
            && self.member[2..self.member.len() - 2]
                .bytes()
                .all(|b| b.is_ascii_digit())
    }

    /// The partition whose index member (an entry of the category index)
    /// is `member`.
    pub(crate) fn from_member(category: &str, member: &str) -> Self {
        Self {
            category: category.to_owned(),
            member: member.to_owned(),
        }
    }

    /// The stream category.
    pub fn category(&self) -> &str {
        &self.category
    }

    /// The partition's entry in its category index (today: the key).
    pub fn member(&self) -> &str {
        &self.member
    }

    /// The hash tag of every name of the partition: `{order:c-1}`.
    fn tag(&self) -> String {
        format!("{{{}:{}}}", self.category, self.member)
    }
}

/// Where each category's keys go: each key its own partition (the
/// default), or one of the category's N hashed partitions
/// (`[categories.NAME] partitions = N`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Routing {
    hashed: std::collections::BTreeMap<String, std::num::NonZeroU32>,
}

impl Routing {
    /// The routing `config` sets.
    pub fn new(config: &ordo_core::Config) -> Self {
        let hashed = config
            .categories()
            .iter()
            .filter_map(|(category, partitions)| match partitions {
                ordo_core::Partitions::Hashed(n) => Some((category.clone(), *n)),
                ordo_core::Partitions::PerKey => None,
            })
            .collect();
        Self { hashed }
    }

    /// How `category` is partitioned.
    pub fn partitions(&self, category: &str) -> ordo_core::Partitions {
        self.hashed
            .get(category)
            .map_or(ordo_core::Partitions::PerKey, |n| {
                ordo_core::Partitions::Hashed(*n)
            })
    }

    /// The partition of `category` that `key`'s messages go to.
    pub fn partition_of(&self, category: &str, key: &str) -> PartitionId {
        match self.hashed.get(category) {
            Some(n) => PartitionId::hashed(category, ordo_core::contract::key::hashed_partition(key, *n)),
            None => PartitionId::for_key(category, key),
        }
    }
}

/// The streams and bookkeeping keys of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionKeys {
    id: PartitionId,
    primary: String,
    backfill: String,
}

impl PartitionKeys {
    /// The partition of `category` for `key`, with the configured backfill suffix.
    pub fn new(category: &str, key: &str, backfill_suffix: &str) -> Self {
        Self::of(PartitionId::for_key(category, key), backfill_suffix)
    }

    /// The names of partition `id`, with the configured backfill suffix.
    pub fn of(id: PartitionId, backfill_suffix: &str) -> Self {
        let primary = id.tag();
        let backfill = format!("{primary}:{backfill_suffix}");
        Self {
            id,
            primary,
            backfill,
        }
    }

    /// The partition's id.
    pub fn id(&self) -> &PartitionId {
        &self.id
    }

    /// The stream category.
    pub fn category(&self) -> &str {
        self.id.category()
    }

    /// The partition key value (the index member).
    pub fn key(&self) -> &str {
        self.id.member()
    }

    /// How messages for people name the partition: `order:c-1`.
    pub fn label(&self) -> String {
        format!("{}:{}", self.category(), self.key())
    }

    /// The primary lane: `{order:c-1}`, also the partition's hash tag.
    pub fn primary(&self) -> &str {
        &self.primary
    }

    /// The backfill lane: `{order:c-1}:backfill`.
    pub fn backfill(&self) -> &str {
        &self.backfill
    }

    /// The lane stream of `lane`.
    pub fn lane(&self, lane: Lane) -> &str {
        match lane {
            Lane::Primary => &self.primary,
            Lane::Backfill => &self.backfill,
        }
    }

    /// The outcome of command `id` of a command partition, kept for the
    /// deduplication window: `{order.commands:c-1}:outcome:<id>`.
    pub fn outcome(&self, id: &str) -> String {
        format!("{}:outcome:{id}", self.primary)
    }

    /// The dead-letter stream: `{order:c-1}:dlq`.
    pub fn dlq(&self) -> String {
        format!("{}:{DLQ}", self.primary)
    }

    /// The message ids recently appended to `lane` (a sorted set scored by
    /// the time they were appended), so a publish retried within the
    /// window is not appended twice: `{order:c-1}:published`,
    /// `{order:c-1}:backfill:published`.
    pub fn published(&self, lane: Lane) -> String {
        format!("{}:published", self.lane(lane))
    }

    /// Each producer's last sequence appended to `lane` (a hash, producer
    /// id → `<sequence>:<ms>`, see
    /// `ordo_core::contract::broker::ProducerSequence`), so a publish
    /// retried within the window is not appended twice:
    /// `{order:c-1}:producers`, `{order:c-1}:backfill:producers`.
    pub fn producers(&self, lane: Lane) -> String {
        format!("{}:producers", self.lane(lane))
    }

    /// The last position published to `lane` (its position scope, see
    /// `ordo_core::contract::broker::POSITION_SCOPE_METADATA`). Kept when the
    /// partition is reaped, so a stalled relay can never publish an old
    /// position again: `{order:c-1}:position`, `{order:c-1}:backfill:position`.
    pub fn position(&self, lane: Lane) -> String {
        format!("{}:position", self.lane(lane))
    }

    /// The partition's doorbell, set ("armed") by a waker whose worker has
    /// read every lane up to its end and waits: the next publish to the
    /// partition deletes it and rings the [channel](Self::doorbell_channel)
    /// of its slot: `{order:c-1}:doorbell`.
    pub fn doorbell(&self) -> String {
        format!("{}:doorbell", self.primary)
    }

    /// The doorbell channel of the partition's slot.
    pub fn doorbell_channel(&self) -> String {
        doorbell_channel(self.slot())
    }

    /// The partition's hash slot: the bucket of the shared structures
    /// (index, halted set, registry copy) it is listed in.
    pub fn slot(&self) -> u16 {
        slot_of(&self.primary)
    }

    /// The category index bucket that lists this partition (in its slot).
    pub fn index(&self) -> String {
        index(self.category(), self.slot())
    }

    /// The halted-set bucket that lists this partition's halts (its
    /// category's, in its slot).
    pub fn halted(&self) -> String {
        halted(self.category(), self.slot())
    }

    /// The directory of the category's halted-set buckets.
    pub fn halted_directory(&self) -> String {
        halted_directory(self.category())
    }

    /// The copy of the category's group registry in this partition's slot.
    pub fn registry(&self) -> String {
        group_registry_copy(self.category(), self.slot())
    }

    /// The copy of the category's joining marker in this partition's slot.
    pub fn joining(&self) -> String {
        joining_copy(self.category(), self.slot())
    }

    /// The lease of `group` on this partition.
    pub fn lease(&self, group: &str) -> LeaseKeys {
        LeaseKeys::new(&self.primary, group)
    }

    /// The halt record of `group` on this partition.
    pub fn halt(&self, group: &str) -> String {
        format!("{}:halt:{group}", self.primary)
    }

    /// How many attempts of each pending entry of `group` failed (a hash:
    /// entry id to count), so a worker stopped during the backoff does not
    /// give the entry a fresh retry budget to its successor.
    pub fn attempts(&self, group: &str) -> String {
        format!("{}:attempts:{group}", self.primary)
    }

    /// The capped log of operator actions of `group` on this partition.
    pub fn log(&self, group: &str) -> String {
        format!("{}:log:{group}", self.primary)
    }

    /// The keys of a hashed partition that `group` parked on a poison
    /// message (a hash: key to its park record, JSON).
    pub fn parked(&self, group: &str) -> String {
        format!("{}:parked:{group}", self.primary)
    }

    /// The keys of a hashed partition whose messages `group` holds aside
    /// (a set): parked keys, and resolved ones whose held messages have not
    /// all run yet.
    pub fn holding(&self, group: &str) -> String {
        format!("{}:holding:{group}", self.primary)
    }

    /// The messages of `key` that `group` holds aside, in order (a stream):
    /// the poison message first, then every later message of the key, moved
    /// out of the partition's lanes so that they can be trimmed while the
    /// key is parked.
    pub fn held(&self, group: &str, key: &str) -> String {
        format!("{}:held:{group}:{key}", self.primary)
    }

    /// The commit marker and attempt sequence of `key` in a hashed
    /// partition (its keys commit and close attempts side by side under
    /// the one lease of `group`, so each has its own).
    pub(crate) fn key_names(&self, group: &str, key: &str) -> KeyNames {
        let lease = self.lease(group);
        KeyNames {
            commit: format!("{}:{key}", lease.commit),
            sequence: format!("{}:{key}", lease.sequence),
        }
    }
}

/// The names one key of a hashed partition commits and closes its attempts
/// under (see [`PartitionKeys::key_names`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyNames {
    /// Its last fenced commit.
    pub(crate) commit: String,
    /// Its attempt sequence.
    pub(crate) sequence: String,
}

/// A glob matching the dead-letter streams of `category`'s partitions.
pub(crate) fn dlq_pattern(category: &str) -> String {
    format!("{{{}:*}}:{DLQ}", glob_escape(category))
}

/// The partition key of a dead-letter stream of `category`, if `name` is one.
pub(crate) fn parse_dlq<'a>(category: &str, name: &'a str) -> Option<&'a str> {
    let key = name
        .strip_prefix('{')?
        .strip_prefix(category)?
        .strip_prefix(':')?
        .strip_suffix(":dlq")?
        .strip_suffix('}')?;
    (!key.is_empty() && !key.contains(':')).then_some(key)
}

/// `text` with the glob metacharacters of `SCAN MATCH` escaped.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// A lease and the bookkeeping that goes with it, all tagged like the unit
/// the lease covers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseKeys {
    /// The lease: `{instance}:{nonce}:{token}`, without a TTL: held while
    /// the holder's [member key](member) exists.
    pub lease: String,
    /// The token of the lease's last release (expires a while after it).
    pub generation: String,
    /// The last fenced commit made under this lease key (its id and
    /// replies, short-lived), so a commit the client sends twice is
    /// applied once.
    pub commit: String,
    /// The attempt sequence of the lease's holder: the lease value it
    /// belongs to and the last attempt the holder closed (acknowledged,
    /// retried or halted). A late command of a closed attempt is refused,
    /// so it can never land after the effects of a later one.
    pub sequence: String,
}

impl LeaseKeys {
    /// The lease of `group` over the unit whose names start with `tag`
    /// (a hash tag, braces included).
    fn new(tag: &str, group: &str) -> Self {
        Self {
            lease: format!("{tag}:lease:{group}"),
            generation: format!("{tag}:gen:{group}"),
            commit: format!("{tag}:commit:{group}"),
            sequence: format!("{tag}:seq:{group}"),
        }
    }

    /// The lease of process manager `group` over one correlation value,
    /// covering that value's partition in each category it consumes.
    pub fn process(group: &str, correlation: &str) -> Self {
        Self::new(&process_tag(group, correlation), group)
    }
}

/// The hash tag of a process manager's instance for one correlation value.
fn process_tag(manager: &str, correlation: &str) -> String {
    format!("{{__pm__:{manager}:{correlation}}}")
}

/// The state of `manager`'s instance for `correlation` (JSON); it shares
/// the hash tag of the manager's lease on the value.
pub(crate) fn process_state(manager: &str, correlation: &str) -> String {
    format!("{}:state", process_tag(manager, correlation))
}

/// The prefix of every instance's reply list.
const REPLIES_PREFIX: &str = "{ordo:replies:";

/// The list an instance's command outcomes are pushed to:
/// `{ordo:replies:<instance>}`.
pub(crate) fn replies(instance: &str) -> String {
    format!("{REPLIES_PREFIX}{instance}}}")
}

/// Whether `name` is a reply list ([`replies`]): an owner pushes a command's
/// outcome only to such a name, whatever a message's metadata says.
pub(crate) fn is_replies(name: &str) -> bool {
    name.strip_prefix(REPLIES_PREFIX)
        .and_then(|rest| rest.strip_suffix('}'))
        .is_some_and(|instance| !instance.is_empty() && !instance.contains(['{', '}']))
}

/// Every documented name, as (the pattern docs/REDIS.md shows, the name
/// this module formats for the sample values of the pattern's
/// placeholders: category `order`, key `c-1`, group and manager `G`,
/// correlation `o-9`, backfill suffix `backfill`, hashed partition `7`,
/// command id `I`, instance `N`,
/// slot tag: the one of the slot of `{order:c-1}`).
pub fn layout() -> Vec<(&'static str, String)> {
    let p = PartitionKeys::new("order", "c-1", "backfill");
    let c = PartitionKeys::new("order.commands", "c-1", "backfill");
    let h = PartitionKeys::of(PartitionId::hashed("order", 7), "backfill");
    let own = h.key_names("G", "c-1");
    let base = BaseKeys::new("order");
    let lease = p.lease("G");
    let pm = LeaseKeys::process("G", "o-9");
    let slot = p.slot();
    vec![
        ("{<category>:<key>}", p.primary().to_owned()),
        ("{<category>:<key>}:<backfill_suffix>", p.backfill().to_owned()),
        ("{<category>:<key>}:dlq", p.dlq()),
        ("{<category>:<key>}:published", p.published(Lane::Primary)),
        (
            "{<category>:<key>}:<backfill_suffix>:published",
            p.published(Lane::Backfill),
        ),
        ("{<category>:<key>}:producers", p.producers(Lane::Primary)),
        (
            "{<category>:<key>}:<backfill_suffix>:producers",
            p.producers(Lane::Backfill),
        ),
        ("{<category>:<key>}:position", p.position(Lane::Primary)),
        (
            "{<category>:<key>}:<backfill_suffix>:position",
            p.position(Lane::Backfill),
        ),
        ("{<category>:<key>}:lease:<group>", lease.lease),
        ("{<category>:<key>}:gen:<group>", lease.generation),
        ("{<category>:<key>}:commit:<group>", lease.commit),
        ("{<category>:<key>}:seq:<group>", lease.sequence),
        ("{<category>:<key>}:halt:<group>", p.halt("G")),
        ("{<category>:<key>}:attempts:<group>", p.attempts("G")),
        ("{<category>:<key>}:log:<group>", p.log("G")),
        ("{<category>:<key>}:doorbell", p.doorbell()),
        ("{<category>.commands:<key>}", c.primary().to_owned()),
        ("{<category>.commands:<key>}:outcome:<id>", c.outcome("I")),
        ("{ordo:replies:<instance>}", replies("N")),
        ("{<category>:__<n>__}", h.primary().to_owned()),
        ("{<category>:__<n>__}:position", h.position(Lane::Primary)),
        ("{<category>:__<n>__}:parked:<group>", h.parked("G")),
        ("{<category>:__<n>__}:holding:<group>", h.holding("G")),
        ("{<category>:__<n>__}:held:<group>:<key>", h.held("G", "c-1")),
        ("{<category>:__<n>__}:commit:<group>:<key>", own.commit),
        ("{<category>:__<n>__}:seq:<group>:<key>", own.sequence),
        ("<category>", base.stream().to_owned()),
        ("<category>:dlq", base.dlq()),
        ("{<category>}:published", base.published()),
        ("{<category>}:producers", base.producers()),
        ("{<category>}:position", base.position()),
        ("{<category>}:doorbell", base.doorbell()),
        ("{<slot_tag>}:<category>:__partitions__", index("order", slot)),
        ("{<category>}:__buckets__", index_directory("order")),
        ("{<category>}:__index_version__", index_version("order")),
        ("{<category>}:__groups__", group_registry("order")),
        (
            "{<slot_tag>}:<category>:__groups__",
            group_registry_copy("order", slot),
        ),
        ("{<category>}:__joining__", joining("order")),
        ("{<slot_tag>}:<category>:__joining__", joining_copy("order", slot)),
        ("{<category>}:__partitioning__", partitioning("order")),
        ("{<slot_tag>}:<category>:__halted__", halted("order", slot)),
        ("{<category>}:__halted_buckets__", halted_directory("order")),
        ("{<slot_tag>}:ordo:doorbell", doorbell_channel(slot)),
        ("{ordo}:member:<instance>:<nonce>", member("N:5e2f")),
        ("ordo:instances:<group>", instances("G")),
        ("ordo:paused:<group>", paused("G")),
        (
            "{__pm__:<manager>:<correlation>}:state",
            process_state("G", "o-9"),
        ),
        ("{__pm__:<manager>:<correlation>}:lease:<manager>", pm.lease),
        ("{__pm__:<manager>:<correlation>}:gen:<manager>", pm.generation),
        ("{__pm__:<manager>:<correlation>}:commit:<manager>", pm.commit),
        ("{__pm__:<manager>:<correlation>}:seq:<manager>", pm.sequence),
    ]
}

/// The Redis Cluster hash tag of `name`: the text between its first `{`
/// and the first `}` after it, when not empty; else the whole name.
#[cfg(test)]
pub(crate) fn hash_tag(name: &str) -> &str {
    if let Some(open) = name.find('{')
        && let Some(len) = name[open + 1..].find('}')
        && len > 0
    {
        return &name[open + 1..open + 1 + len];
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fills a documented pattern's placeholders with the sample values
    /// [`layout`] uses.
    fn sample(pattern: &str) -> String {
        pattern
            .replace("<category>", "order")
            .replace("<key>", "c-1")
            .replace("<group>", "G")
            .replace("<manager>", "G")
            .replace("<correlation>", "o-9")
            .replace("<backfill_suffix>", "backfill")
            .replace("<n>", "7")
            .replace("<id>", "I")
            .replace("<instance>", "N")
            .replace("<nonce>", "5e2f")
            .replace(
                "<slot_tag>",
                slot_tag(PartitionKeys::new("order", "c-1", "backfill").slot()),
            )
    }

    #[test]
    fn every_documented_pattern_is_the_name_formatted() {
        for (pattern, name) in layout() {
            assert_eq!(sample(pattern), name, "pattern `{pattern}`");
        }
    }

    #[test]
    fn the_docs_key_table_is_the_layout() {
        let docs = include_str!("../../../../docs/REDIS.md");
        let begin = docs
            .find("<!-- keys:begin -->")
            .expect("docs/REDIS.md has <!-- keys:begin -->");
        let end = docs
            .find("<!-- keys:end -->")
            .expect("docs/REDIS.md has <!-- keys:end -->");
        let documented: Vec<&str> = docs[begin..end]
            .lines()
            .filter(|line| line.starts_with("| `"))
            .map(|line| {
                let cell = line.trim_start_matches("| `");
                &cell[..cell.find('`').expect("a closing backtick")]
            })
            .collect();
        let formatted: Vec<&str> = layout().into_iter().map(|(pattern, _)| pattern).collect();
        assert_eq!(
            documented, formatted,
            "docs/REDIS.md's key table (between the keys markers) must list keys::layout() in order"
        );
    }

    #[test]
    fn a_partition_names_share_one_hash_tag() {
        let p = PartitionKeys::new("order", "c-1", "backfill");
        let lease = p.lease("G");
        for name in [
            p.primary().to_owned(),
            p.backfill().to_owned(),
            p.dlq(),
            p.published(Lane::Primary),
            p.published(Lane::Backfill),
            p.position(Lane::Primary),
            p.position(Lane::Backfill),
            lease.lease,
            lease.generation,
            lease.commit,
            lease.sequence,
            p.halt("G"),
            p.attempts("G"),
            p.log("G"),
        ] {
            assert_eq!(hash_tag(&name), "order:c-1", "{name}");
        }
        let pm = LeaseKeys::process("G", "o-9");
        for name in [
            pm.lease,
            pm.generation,
            pm.commit,
            pm.sequence,
            process_state("G", "o-9"),
        ] {
            assert_eq!(hash_tag(&name), "__pm__:G:o-9", "{name}");
        }
        assert_eq!(hash_tag(&group_registry("order")), hash_tag(&joining("order")));
    }

    #[test]
    fn every_slot_has_a_tag_that_hashes_to_it() {
        for slot in 0..SLOTS {
            let tag = slot_tag(slot);
            assert_eq!(slot_of(tag), slot, "tag `{tag}`");
            assert!(tag.len() <= 7, "tag `{tag}` of slot {slot} is short");
            assert_eq!(slot_of(&format!("{{{tag}}}:order:__partitions__")), slot);
        }
    }

    #[test]
    fn slots_match_the_crc16_redis_cluster_uses() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot_of("123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
    }

    #[test]
    fn a_partition_shared_entries_are_in_its_own_slot() {
        for key in ["c-1", "c-2", "a much longer key", "ü"] {
            let p = PartitionKeys::new("order", key, "backfill");
            let slot = slot_of(p.primary());
            assert_eq!(p.slot(), slot);
            for name in [p.index(), p.halted(), p.registry(), p.joining()] {
                assert_eq!(slot_of(&name), slot, "{name} with {}", p.primary());
                assert_ne!(hash_tag(&name), hash_tag(p.primary()), "{name}");
            }
        }
        // The base stream, the master registry and the directory share a slot.
        let base = BaseKeys::new("order");
        assert_eq!(slot_of(base.stream()), slot_of(&group_registry("order")));
        assert_eq!(slot_of(&joining("order")), slot_of(&index_directory("order")));
    }

    #[test]
    fn names_parse_back() {
        assert_eq!(parse_index_directory(&index_directory("order")), Some("order"));
        assert_eq!(parse_index_directory("{order:c-1}"), None);
        assert_eq!(parse_index_directory(&halted_directory("order")), None);
        assert_eq!(parse_registry(&halted_directory("order")), None);
        let p = PartitionKeys::new("order", "c-1", "backfill");
        assert_eq!(halted_member_category(&p.halt("G")), Some("order"));
        let h = PartitionKeys::of(PartitionId::hashed("order", 7), "backfill");
        assert_eq!(halted_member_category(&h.parked("G")), Some("order"));
        assert_eq!(halted_member_category("order:c-1"), None);
        assert_eq!(parse_registry(&group_registry_copy("order", 7)), None);
        assert_eq!(parse_registry(&group_registry("order")), Some("order"));
        assert_eq!(parse_registry("{order:c-1}:__groups__"), None);
        let p = PartitionKeys::new("order", "c-1", "backfill");
        assert_eq!(parse_dlq("order", &p.dlq()), Some("c-1"));
        assert_eq!(parse_dlq("order", &BaseKeys::new("order").dlq()), None);
        assert_eq!(parse_dlq("ord", &p.dlq()), None);
        assert_eq!(dlq_pattern("a*b"), "{a\\*b:*}:dlq");
    }

    proptest::proptest! {
        /// Valid keys (no `:`, no control characters; reserved values do
        /// not matter here) of one category never share a name, and never
        /// take the name of a category-wide structure.
        #[test]
        fn names_of_distinct_keys_never_collide(
            a in "[^:\\p{Cc}]{1,40}", b in "[^:\\p{Cc}]{1,40}", cat in "[a-z][a-z0-9_]{0,20}"
        ) {
            let names = |key: &str| {
                let p = PartitionKeys::new(&cat, key, "backfill");
                let lease = p.lease("G");
                vec![
                    p.primary().to_owned(), p.backfill().to_owned(), p.dlq(),
                    p.published(Lane::Primary), p.published(Lane::Backfill),
                    p.position(Lane::Primary), p.position(Lane::Backfill),
                    lease.lease, lease.generation, lease.commit, lease.sequence,
                    p.halt("G"), p.attempts("G"), p.log("G"),
                ]
            };
            let base = BaseKeys::new(&cat);
            let shared = [
                index(&cat, 0), halted(&cat, 0), group_registry(&cat), joining(&cat),
                index_directory(&cat), halted_directory(&cat),
                group_registry_copy(&cat, 0), joining_copy(&cat, 0),
                base.stream().to_owned(), base.dlq(), base.published(), base.position(),
            ];
            let (of_a, of_b) = (names(&a), names(&b));
            proptest::prop_assert!(of_a.iter().all(|name| !shared.contains(name)), "{:?}", of_a);
            if a != b {
                proptest::prop_assert!(of_a.iter().all(|name| !of_b.contains(name)), "{:?} vs {:?}", of_a, of_b);
            }
        }
    }

    #[test]
    fn glob_metacharacters_are_escaped() {
        assert_eq!(glob_escape("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:");
    }
}
