//! The fenced acknowledgement, of one partition lane or of many at once.
//!
//! `ack.lua` takes any number of acknowledgements, each checked against its
//! own lease and done or refused on its own. [`acknowledge`] sends them with
//! one script call per Redis node; the consumer's group commit
//! ([`crate::consumer::group_commit`]) gathers what partition workers have in
//! flight at the same moment into one such call.

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::clients::Client;
use fred::interfaces::FunctionInterface;
use ordo_core::contract::key::Lane;

use crate::error::Result;
use crate::net::nodes;
use crate::owner::lease::Lease;
use crate::store::calls;
use crate::store::keys::{KeyNames, PartitionKeys};

/// One acknowledgement: handled entries of one partition lane, under a
/// lease (for [`Partitions::acknowledge`](crate::internals::Partitions::acknowledge)).
///
/// Cheap to clone: the names are shared (a worker builds them once per read
/// batch and derives each message's acknowledgement from them).
#[derive(Debug, Clone)]
pub struct Ack {
    names: Arc<Names>,
    /// The attempt the acknowledgement closes (0: none).
    attempt: u64,
    /// Whether the ids may have failed attempts on record (to clear).
    had_failures: bool,
    /// Whether to trim what every group has acknowledged from the lane.
    trim: bool,
    ids: Vec<Str>,
    /// The message whose fenced commits the commit marker keeps (empty:
    /// none to take out).
    message: Str,
}

/// The names an acknowledgement of one lane touches.
#[derive(Debug, Clone)]
struct Names {
    lease_key: Str,
    lease_value: Str,
    lane: Str,
    primary: Str,
    sequence: Str,
    marker: Str,
    failures: Str,
    group: Str,
}

impl Ack {
    /// Acknowledges `ids` of `partition`'s `lane` for `group` under `lease`.
    pub fn new(lease: &Lease, group: &str, partition: &PartitionKeys, lane: Lane, ids: &[&str]) -> Self {
        Self {
            names: Arc::new(Names {
                lease_key: Str::from(lease.key()),
                lease_value: Str::from(lease.value()),
                lane: Str::from(partition.lane(lane)),
                primary: Str::from(partition.primary()),
                sequence: Str::from(lease.keys().sequence.as_str()),
                marker: Str::from(lease.keys().commit.as_str()),
                failures: Str::from(partition.attempts(group)),
                group: Str::from(group),
            }),
            attempt: 0,
            had_failures: true,
            trim: true,
            ids: ids.iter().map(|&id| Str::from(id)).collect(),
            message: Str::new(),
        }
    }

    /// The acknowledgement of `ids` of the same lane under the same lease,
    /// closing every attempt up to `attempt` of the lease's holder (see
    /// [`Partitions::ack_attempt`](crate::internals::Partitions::ack_attempt); 0 closes
    /// nothing); `had_failures`: whether the ids may have failed attempts
    /// on record (to clear).
    pub(crate) fn of(&self, ids: &[&str], attempt: u64, had_failures: bool) -> Self {
        Self {
            names: self.names.clone(),
            attempt,
            had_failures,
            trim: true,
            ids: ids.iter().map(|&id| Str::from(id)).collect(),
            message: Str::new(),
        }
    }

    /// The acknowledgement closing every attempt up to `attempt` of the
    /// lease's holder (see
    /// [`Partitions::ack_attempt`](crate::internals::Partitions::ack_attempt)).
    pub fn closing(mut self, attempt: u64) -> Self {
        self.attempt = attempt;
        self
    }

    /// The acknowledgement also taking what message `message_id`'s fenced
    /// commits applied out of the commit marker (see
    /// [`RedisFence::handling`](crate::RedisFence::handling)): the
    /// partition worker's acknowledgement of a message whose runs
    /// committed does.
    pub fn forgetting(mut self, message_id: Option<&str>) -> Self {
        self.message = message_id.map_or_else(Str::new, Str::from);
        self
    }

    /// The acknowledgement closing its attempt in `own`'s sequence, and
    /// taking what it applied out of `own`'s commit marker (one key's own,
    /// in a hashed partition), rather than the lease's.
    pub(crate) fn closing_in(mut self, own: &KeyNames) -> Self {
        let mut names = (*self.names).clone();
        names.sequence = Str::from(own.sequence.as_str());
        names.marker = Str::from(own.commit.as_str());
        self.names = Arc::new(names);
        self
    }

    /// Whether the acknowledgement also trims what every group has
    /// acknowledged from the lane (the default). Trimming reads every
    /// group's position: about half the cost of an acknowledgement, so a
    /// worker trims once per read batch, with its last acknowledgement.
    pub fn trimming(mut self, trim: bool) -> Self {
        self.trim = trim;
        self
    }

    /// Takes `next`, the acknowledgement of later entries of the same lane
    /// under the same lease (derived from the same [`Ack::of`] names), into
    /// this one: one `XACK` of every id and one fence check, closing the
    /// later attempt, clearing failures and trimming if either does. An
    /// acknowledgement takes at most one message's fenced commits out of
    /// the commit marker, so when either has one to take out, `next` is
    /// given back, unmerged.
    pub(crate) fn merge(&mut self, next: Ack) -> std::result::Result<(), Ack> {
        if !Arc::ptr_eq(&self.names, &next.names) || !self.message.is_empty() || !next.message.is_empty() {
            return Err(next);
        }
        self.attempt = self.attempt.max(next.attempt);
        self.had_failures |= next.had_failures;
        self.trim |= next.trim;
        self.ids.extend(next.ids);
        Ok(())
    }

    /// How many entries it acknowledges.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The first entry it acknowledges (for the logs; empty when none).
    pub(crate) fn first_id(&self) -> &str {
        self.ids.first().map_or("", |id| id)
    }

    /// The lease key (which routes the acknowledgement on a cluster).
    pub fn lease_key(&self) -> &str {
        &self.names.lease_key
    }

    /// The acknowledgement as `ack.lua` takes it.
    fn call(&self) -> calls::ack::Ack<'_> {
        let names = &self.names;
        calls::ack::Ack {
            lease: &names.lease_key,
            lease_value: &names.lease_value,
            lane: &names.lane,
            primary: &names.primary,
            sequence: &names.sequence,
            marker: &names.marker,
            message: &self.message,
            failures: &names.failures,
            group: &names.group,
            attempt: self.attempt,
            had_failures: self.had_failures,
            trim: self.trim,
            ids: &self.ids,
        }
    }
}

/// What one acknowledgement came to: whether its partition's primary lane
/// has entries waiting (so a backfill batch yields to it), or
/// [`Error::Fenced`](crate::Error::Fenced) when its lease is no longer held.
pub type Acked = Result<bool>;

/// Acknowledges `acks` with one script call per Redis node (calls to
/// different nodes at once) and returns each one's outcome, in order. An
/// outer error means a call failed: some of its acknowledgements may be done
/// and others not, and sending them again is harmless (acknowledging an
/// entry twice, closing an attempt twice, changes nothing).
pub(crate) async fn acknowledge(client: &Client, sequence_ttl: Duration, acks: &[Ack]) -> Result<Vec<Acked>> {
    if acks.is_empty() {
        return Ok(Vec::new());
    }
    nodes::once_more_if_moved(client, "acknowledge", || {
        nodes::per_node(client, acks, Ack::lease_key, |node, group| {
            acknowledge_on(node, sequence_ttl, group)
        })
    })
    .await
}

/// One call for `acks`, all served by the node `client` reaches.
async fn acknowledge_on<C>(client: C, sequence_ttl: Duration, acks: Vec<Ack>) -> Result<Vec<Acked>>
where
    C: FunctionInterface + Send + Sync,
{
    let calls: Vec<calls::ack::Ack<'_>> = acks.iter().map(Ack::call).collect();
    calls::ack::ack(&client, sequence_ttl, &calls).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> (Lease, PartitionKeys) {
        let partition = PartitionKeys::new("c", "k", "backfill");
        (Lease::new(partition.lease("G"), "i", 7), partition)
    }

    #[test]
    fn acknowledgements_of_one_lane_merge_into_one_and_keep_what_each_asked() {
        let (lease, partition) = names();
        let acks = Ack::new(&lease, "G", &partition, Lane::Primary, &[]);
        let mut merged = acks.of(&["1-0"], 3, false).trimming(false);
        merged.merge(acks.of(&["2-0"], 0, true).trimming(false)).unwrap();
        merged.merge(acks.of(&["3-0"], 0, false).trimming(true)).unwrap();
        assert_eq!(merged.ids, ["1-0", "2-0", "3-0"]);
        assert_eq!(
            (merged.attempt, merged.had_failures, merged.trim),
            (3, true, true)
        );
        assert_eq!((merged.len(), merged.first_id()), (3, "1-0"));
    }

    #[test]
    fn an_acknowledgement_keeps_its_own_commits_and_its_own_lane() {
        let (lease, partition) = names();
        let acks = Ack::new(&lease, "G", &partition, Lane::Primary, &[]);
        let mut plain = acks.of(&["1-0"], 0, false);
        let committed = acks.of(&["2-0"], 2, false).forgetting(Some("m2"));
        let committed = plain.merge(committed).unwrap_err();
        assert_eq!(committed.message, "m2");
        let mut committed = committed;
        assert!(committed.merge(acks.of(&["3-0"], 0, false)).is_err());
        let other_lane = Ack::new(&lease, "G", &partition, Lane::Backfill, &[]);
        assert!(plain.merge(other_lane.of(&["3-0"], 0, false)).is_err());
        assert_eq!(plain.ids, ["1-0"]);
    }
}
