//! Where everything lives in Redis.
//!
//! Streams keep the names of the contract (`{category}:{key}`, its backfill
//! lane `{category}:{key}:{suffix}`, its dead-letter stream
//! `{category}:{key}:dlq`, the index `{category}:__partitions__`). Every
//! per-partition bookkeeping key uses the partition's primary stream name as
//! its Redis Cluster hash tag (`{order:c-1}:lease:{group}`), so it lives in
//! the primary stream's slot.

use ordo_core::key::{Lane, stream};

/// The consumer name every partition owner reads under. Ownership is the
/// lease, not the consumer name, so the group's pending list is simply the
/// partition's: a new owner reads it back under its own lease, and nothing
/// accumulates per owner or generation.
pub(crate) const CONSUMER: &str = "ordo";

/// The set of halt keys of every halted partition, for operators.
pub(crate) const HALTED: &str = "ordo:halted";

/// The sorted set of live instances consuming `group` (score: expiry in ms).
pub(crate) fn instances(group: &str) -> String {
    format!("ordo:instances:{group}")
}

/// The message ids recently appended to `stream` (a sorted set scored by
/// the time they were appended), so a publish retried within the window is
/// not appended twice. Tagged with the stream's name: same slot.
pub(crate) fn recently_published(stream: &str) -> String {
    format!("{{{stream}}}:published")
}

/// Exists while a new consumer group joins the existing lanes of
/// `category`: publishes then give every lane the registered groups it
/// lacks. Tagged with the category's name.
pub(crate) fn joining(category: &str) -> String {
    format!("{{{category}}}:__joining__")
}

/// The set of consumer groups that consume `category`; a new stream of the
/// category gets each of them at id 0 when its first entry is published.
pub(crate) fn group_registry(category: &str) -> String {
    format!("{category}:__groups__")
}

/// The last position published for a position scope (see
/// `ordo_core::broker::POSITION_SCOPE_METADATA`), hash-tagged with the scope
/// (the publication's partition stream). Kept when the partition is reaped,
/// so a stalled relay can never publish an old position again.
pub(crate) fn position(scope: &str) -> String {
    format!("{{{scope}}}:position")
}

/// The streams and bookkeeping keys of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionKeys {
    category: String,
    key: String,
    primary: String,
    backfill: String,
}

impl PartitionKeys {
    /// The partition of `category` for `key`, with the configured backfill suffix.
    pub fn new(category: &str, key: &str, backfill_suffix: &str) -> Self {
        Self {
            category: category.to_owned(),
            key: key.to_owned(),
            primary: stream::partition(category, key),
            backfill: stream::lane(category, key, Lane::Backfill, backfill_suffix),
        }
    }

    /// The stream category.
    pub fn category(&self) -> &str {
        &self.category
    }

    /// The partition key value.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The primary lane: `{category}:{key}`.
    pub fn primary(&self) -> &str {
        &self.primary
    }

    /// The backfill lane: `{category}:{key}:{suffix}`.
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

    /// The dead-letter stream: `{category}:{key}:dlq`.
    pub fn dlq(&self) -> String {
        stream::dlq(&self.category, &self.key)
    }

    /// The category's partition index.
    pub fn index(&self) -> String {
        stream::partitions_index(&self.category)
    }

    /// The lease of `group` on this partition.
    pub fn lease(&self, group: &str) -> LeaseKeys {
        LeaseKeys::new(&self.primary, group)
    }

    /// The halt record of `group` on this partition.
    pub fn halt(&self, group: &str) -> String {
        format!("{{{}}}:halt:{group}", self.primary)
    }

    /// How many attempts of each pending entry of `group` failed (a hash:
    /// entry id to count), so a worker stopped during the backoff does not
    /// give the entry a fresh retry budget to its successor.
    pub fn attempts(&self, group: &str) -> String {
        format!("{{{}}}:attempts:{group}", self.primary)
    }

    /// The capped log of operator actions of `group` on this partition.
    pub fn log(&self, group: &str) -> String {
        format!("{{{}}}:log:{group}", self.primary)
    }
}

/// A lease and its generation counter.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseKeys {
    /// The lease: `{instance}:{token}`, with a TTL.
    pub lease: String,
    /// The last token handed out (expires a while after the lease).
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
    /// The lease of `group` over the unit tagged `tag`.
    pub(crate) fn new(tag: &str, group: &str) -> Self {
        Self {
            lease: format!("{{{tag}}}:lease:{group}"),
            generation: format!("{{{tag}}}:gen:{group}"),
            commit: format!("{{{tag}}}:commit:{group}"),
            sequence: format!("{{{tag}}}:seq:{group}"),
        }
    }

    /// The lease of process manager `group` over one correlation value,
    /// covering that value's partition in each category it consumes.
    pub fn process(group: &str, correlation: &str) -> Self {
        Self::new(&format!("__pm__:{group}:{correlation}"), group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookkeeping_is_tagged_with_the_primary_stream() {
        let p = PartitionKeys::new("order", "c-1", "backfill");
        assert_eq!(p.primary(), "order:c-1");
        assert_eq!(p.backfill(), "order:c-1:backfill");
        assert_eq!(p.dlq(), "order:c-1:dlq");
        assert_eq!(p.index(), "order:__partitions__");
        assert_eq!(p.lease("Projector").lease, "{order:c-1}:lease:Projector");
        assert_eq!(p.lease("Projector").generation, "{order:c-1}:gen:Projector");
        assert_eq!(p.lease("Projector").commit, "{order:c-1}:commit:Projector");
        assert_eq!(p.lease("Projector").sequence, "{order:c-1}:seq:Projector");
        assert_eq!(p.halt("Projector"), "{order:c-1}:halt:Projector");
    }
}
