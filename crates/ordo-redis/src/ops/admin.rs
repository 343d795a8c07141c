//! The operator API for halted partitions.
//!
//! A partition halts when a message fails every attempt: the message stays
//! the pending head and the partition stops (for that group) until an
//! operator decides. Halts are recorded in Redis (`{S}:halt:{group}`) and
//! listed in the halted set's bucket of the partition's slot (whose slot is
//! listed in the never-shrinking halted directory), so they survive
//! failovers and never disappear from view. The owner polls the record
//! and resumes within one poll interval of a decision.
//!
//! In a hashed partition (`[categories.NAME] partitions = N`) a poison
//! message parks its key instead (see `parking`): the same API lists,
//! inspects and resolves a parked key by its category and key, as long as
//! the admin knows the category's partitioning ([`PartitionAdmin::with_routing`];
//! [`RedisBroker::admin`](crate::RedisBroker::admin) does). The head of a
//! parked key is the first of its held messages.

use fred::clients::Pool;
use fred::interfaces::{HashesInterface, SetsInterface, StreamsInterface};
use fred::types::Value;

use crate::error::{Error, Result};
use crate::ops::halts::{self, HaltedPartition};
use crate::ops::status::ClusterStatus;
use crate::owner::parking::held_entry;
use crate::owner::partition::StreamEntry;
use crate::store::calls;
use crate::store::calls::admin::Resolved;
use crate::store::keys::{PartitionId, PartitionKeys, Routing};
use crate::store::scripts::{array, parse_entries};

/// A halted partition's head, as an operator inspects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The halt record.
    pub halt: HaltedPartition,
    /// The head message (`None` if it was deleted from the stream).
    pub head: Option<StreamEntry>,
    /// How many times Redis delivered the head (reads across owners).
    pub deliveries: Option<u64>,
}

/// Operator actions on halted partitions.
#[derive(Debug, Clone)]
pub struct PartitionAdmin {
    client: Pool,
    backfill_suffix: String,
    routing: Routing,
}

/// The decisions an operator can take on a halted head.
#[derive(Debug, Clone, Copy)]
enum Action {
    Retry,
    Skip,
    DeadLetter,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Skip => "skip",
            Self::DeadLetter => "dead_letter",
        }
    }
}

impl PartitionAdmin {
    /// Operator actions through `client`; `backfill_suffix` is the
    /// configured backfill lane suffix.
    pub fn new(client: Pool, backfill_suffix: &str) -> Self {
        Self {
            client,
            backfill_suffix: backfill_suffix.to_owned(),
            routing: Routing::default(),
        }
    }

    /// The admin of categories partitioned as `routing` says (a hashed
    /// category's keys are parked in their partitions, not halted).
    #[must_use]
    pub fn with_routing(mut self, routing: Routing) -> Self {
        self.routing = routing;
        self
    }

    /// Every halted partition (and parked key), of every group and every
    /// category found (a `SCAN`, see [`ClusterStatus::categories`](crate::ClusterStatus::categories)).
    pub async fn halted(&self) -> Result<Vec<HaltedPartition>> {
        let status = ClusterStatus::new(self.client.clone(), &self.backfill_suffix);
        let mut halted = Vec::new();
        for category in status.categories().await? {
            halted.extend(self.halted_in(&category).await?);
        }
        halted.sort_by(|a, b| (&a.group, &a.category, &a.key).cmp(&(&b.group, &b.category, &b.key)));
        Ok(halted)
    }

    /// Every halted partition (and parked key) of `category`, of every
    /// group, sorted by group and key: its halted set reads nothing of any
    /// other category.
    pub async fn halted_in(&self, category: &str) -> Result<Vec<HaltedPartition>> {
        halts::halted_in(&self.client, category).await
    }

    /// Changes how `category` is partitioned (`[categories.NAME]
    /// partitions`) to `to`: the offline step between draining the category
    /// and starting its processes with the new setting. Refused with
    /// [`Error::NotDrained`] unless every consumer group has handled every
    /// message of every partition of the category (nothing undelivered, in
    /// flight, halted, parked or held aside). Returns how it was
    /// partitioned before (`None`: not recorded).
    ///
    /// Every key's last published outbox position (see
    /// `ordo_core::contract::broker::POSITION_SCOPE_METADATA`) is carried over to its
    /// new partition first, so a relay that re-publishes rows it published
    /// before the switch (killed before marking them) has them dropped,
    /// not delivered again after the key's later events.
    ///
    /// Processes with the old setting refuse to publish or consume the
    /// category from then on ([`Error::PartitioningMismatch`]; a publisher
    /// left running notices within 5 seconds), so stop them first: a
    /// message one of them publishes after the check would otherwise land
    /// in an old partition while the key's next ones go to a new one.
    pub async fn repartition(
        &self,
        category: &str,
        to: ordo_core::Partitions,
    ) -> Result<Option<ordo_core::Partitions>> {
        let status = ClusterStatus::new(self.client.clone(), &self.backfill_suffix);
        let groups = status.groups(category).await?;
        let (mut undelivered, mut in_flight, mut busy) = (0, 0, 0);
        let partitions = status.partitions(category, &groups).await?;
        for partition in &partitions {
            // Without a group yet, every entry waits for the first one
            // (a group registering reads its lanes from the start).
            let lag: u64 = if groups.is_empty() {
                partition.lanes.iter().map(|lane| lane.length).sum()
            } else {
                partition.groups.iter().map(|g| g.lag).sum()
            };
            let pending: u64 = partition.groups.iter().map(|g| g.pending).sum();
            undelivered += lag;
            in_flight += pending;
            busy += usize::from(lag + pending > 0);
        }
        let stuck = self.halted_in(category).await?.len();
        let mut holding = 0;
        for partition in &partitions {
            let partition = PartitionKeys::of(
                PartitionId::from_member(category, &partition.key),
                &self.backfill_suffix,
            );
            for group in &groups {
                let held: u64 = self.client.scard(partition.holding(group)).await?;
                holding += held;
            }
        }
        if busy > 0 || stuck > 0 || holding > 0 {
            return Err(Error::NotDrained {
                category: category.to_owned(),
                what: format!(
                    "{busy} of its {} partitions hold {undelivered} messages not yet delivered and {in_flight} \
                     in flight; {stuck} halted partitions or parked keys; {holding} keys with messages held aside",
                    partitions.len()
                ),
            });
        }
        let before = crate::store::partitioning::recorded(&self.client, category).await?;
        // Before the switch, so a failure leaves the old partitioning
        // recorded and the repartition can be run again.
        crate::store::positions::carry(
            &self.client,
            category,
            before.unwrap_or_default(),
            to,
            &self.backfill_suffix,
        )
        .await?;
        crate::store::partitioning::record(&self.client, category, to).await?;
        Ok(before)
    }

    /// The halt record and head message of `group`'s halted partition
    /// `category:key`.
    pub async fn inspect(&self, group: &str, category: &str, key: &str) -> Result<Inspection> {
        let partition = self.partition(category, key);
        if partition.id().is_hashed() {
            return self.inspect_parked(group, &partition, key).await;
        }
        let halt = halts::record(&self.client, &partition.halt(group))
            .await?
            .ok_or_else(|| not_halted(group, &partition))?;
        let lane = partition.lane(halt.lane);
        let entries: Value = self
            .client
            .xrange(lane, halt.head.as_str(), halt.head.as_str(), None)
            .await?;
        let head = parse_entries("XRANGE", entries)?
            .into_iter()
            .next()
            .map(|raw| StreamEntry::from_raw(raw, halt.lane));
        let deliveries = self.deliveries(lane, group, &halt.head).await?;
        Ok(Inspection {
            halt,
            head,
            deliveries,
        })
    }

    /// The halted head of `group`'s partition `category:key`, to decide on.
    /// Add [`HeadAction::expecting`] to act only if the partition is still
    /// halted on the entry the operator inspected:
    ///
    /// ```no_run
    /// # async fn example(admin: &ordo_redis::PartitionAdmin) -> Result<(), ordo_redis::Error> {
    /// let inspected = admin.inspect("OrderProjector", "order", "bob").await?;
    /// // ... the operator reads the head and decides ...
    /// admin
    ///     .head("OrderProjector", "order", "bob")
    ///     .expecting(&inspected.halt.head)
    ///     .dead_letter()
    ///     .await?; // Error::HeadChanged if it is halted on another entry now
    /// # Ok(()) }
    /// ```
    pub fn head<'a>(&'a self, group: &'a str, category: &'a str, key: &'a str) -> HeadAction<'a> {
        HeadAction {
            admin: self,
            group,
            category,
            key,
            expected: None,
        }
    }

    /// Skips whatever head `group`'s partition `category:key` is halted on:
    /// [`HeadAction::skip`] without an expected head.
    pub async fn skip(&self, group: &str, category: &str, key: &str) -> Result<String> {
        self.head(group, category, key).skip().await
    }

    /// Dead-letters whatever head `group`'s partition `category:key` is
    /// halted on: [`HeadAction::dead_letter`] without an expected head.
    pub async fn dead_letter(&self, group: &str, category: &str, key: &str) -> Result<String> {
        self.head(group, category, key).dead_letter().await
    }

    /// Retries whatever head `group`'s partition `category:key` is halted
    /// on: [`HeadAction::retry`] without an expected head.
    pub async fn retry(&self, group: &str, category: &str, key: &str) -> Result<String> {
        self.head(group, category, key).retry().await
    }

    async fn resolve(&self, target: &HeadAction<'_>, action: Action) -> Result<String> {
        let HeadAction {
            group,
            category,
            key,
            expected,
            ..
        } = *target;
        let partition = self.partition(category, key);
        if partition.id().is_hashed() {
            return self
                .resolve_parked(group, &partition, key, expected, action)
                .await;
        }
        let expected_head = expected.unwrap_or_default();
        match calls::admin::resolve(&self.client, &partition, group, action.name(), expected_head).await? {
            Resolved::Ok(head) => Ok(head),
            Resolved::NotHalted => Err(not_halted(group, &partition)),
            Resolved::HeadChanged(actual) => Err(Error::HeadChanged {
                group: group.to_owned(),
                partition: partition.label(),
                expected: expected_head.to_owned(),
                actual,
            }),
        }
    }

    fn partition(&self, category: &str, key: &str) -> PartitionKeys {
        PartitionKeys::of(self.routing.partition_of(category, key), &self.backfill_suffix)
    }

    async fn inspect_parked(&self, group: &str, partition: &PartitionKeys, key: &str) -> Result<Inspection> {
        let name = partition.parked(group);
        let record: Option<String> = self.client.hget(&name, key).await?;
        let halt = match record {
            Some(record) => {
                halts::parse_parked_record(&name, partition.category(), group, key.to_owned(), &record)?
            }
            None => return Err(not_halted_key(group, partition, key)),
        };
        let entries: Value = self
            .client
            .xrange(
                partition.held(group, key),
                halt.head.as_str(),
                halt.head.as_str(),
                None,
            )
            .await?;
        let head = parse_entries("XRANGE", entries)?
            .into_iter()
            .next()
            .map(held_entry)
            .transpose()?;
        Ok(Inspection {
            halt,
            head,
            deliveries: None,
        })
    }

    async fn resolve_parked(
        &self,
        group: &str,
        partition: &PartitionKeys,
        key: &str,
        expected: Option<&str>,
        action: Action,
    ) -> Result<String> {
        let expected_head = expected.unwrap_or_default();
        let resolved =
            calls::admin::resolve_parked(&self.client, partition, group, key, action.name(), expected_head)
                .await?;
        match resolved {
            Resolved::Ok(head) => Ok(head),
            Resolved::NotHalted => Err(not_halted_key(group, partition, key)),
            Resolved::HeadChanged(actual) => Err(Error::HeadChanged {
                group: group.to_owned(),
                partition: format!("{}:{key}", partition.category()),
                expected: expected_head.to_owned(),
                actual,
            }),
        }
    }

    /// The delivery count of a pending entry (`XPENDING` extended form).
    async fn deliveries(&self, stream: &str, group: &str, id: &str) -> Result<Option<u64>> {
        let pending: Value = self.client.xpending(stream, group, (id, id, 1)).await?;
        // [[id, consumer, idle ms, deliveries]]
        Ok(array(pending)
            .into_iter()
            .next()
            .and_then(|entry| array(entry).get(3).and_then(Value::as_u64)))
    }
}

/// An operator decision on the halted head of one partition, made with
/// [`PartitionAdmin::head`]. Each action checks, in the same atomic step
/// that applies it, that the partition is halted (else
/// [`Error::NotHalted`]) and, with [`expecting`](Self::expecting), that it
/// is halted on that entry (else [`Error::HeadChanged`]); when refused,
/// nothing is changed.
#[derive(Debug, Clone, Copy)]
#[must_use = "nothing happens until `skip`, `dead_letter` or `retry` is awaited"]
pub struct HeadAction<'a> {
    admin: &'a PartitionAdmin,
    group: &'a str,
    category: &'a str,
    key: &'a str,
    expected: Option<&'a str>,
}

impl<'a> HeadAction<'a> {
    /// Acts only if the halted head is the entry `head` (an id as
    /// [`PartitionAdmin::inspect`] and [`PartitionAdmin::halted`] report it).
    pub fn expecting(mut self, head: &'a str) -> Self {
        self.expected = Some(head);
        self
    }

    /// Acknowledges the halted head without handling it (recorded in the
    /// partition's log), then clears the halt: the owner resumes with the
    /// next message. Returns the skipped entry id.
    pub async fn skip(self) -> Result<String> {
        self.admin.resolve(&self, Action::Skip).await
    }

    /// Copies the halted head to the partition's dead-letter stream
    /// (`{category}:{key}:dlq`, with the error, group and attempts),
    /// acknowledges it, then clears the halt. Returns the entry id.
    pub async fn dead_letter(self) -> Result<String> {
        self.admin.resolve(&self, Action::DeadLetter).await
    }

    /// Clears the halt: the owner runs the head again, with a fresh set of
    /// attempts. Returns the head's entry id.
    pub async fn retry(self) -> Result<String> {
        self.admin.resolve(&self, Action::Retry).await
    }
}

fn not_halted_key(group: &str, partition: &PartitionKeys, key: &str) -> Error {
    Error::NotHalted {
        group: group.to_owned(),
        partition: format!("{}:{key}", partition.category()),
    }
}

fn not_halted(group: &str, partition: &PartitionKeys) -> Error {
    Error::NotHalted {
        group: group.to_owned(),
        partition: partition.label(),
    }
}
