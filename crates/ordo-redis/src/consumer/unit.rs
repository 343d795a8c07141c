//! Units of ownership: what one lease covers.
//!
//! For an event or command handler a unit is one partition (`order:c-1`).
//! For a process manager declared `sequential_by` it is one correlation
//! value, covering that value's partition in every category the manager
//! consumes, so no two messages of one process instance ever run at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use ordo_core::contract::broker::Subscription;
use ordo_core::contract::handler::HandlerKind;

use crate::store::keys::{LeaseKeys, PartitionId, PartitionKeys};

/// One unit of ownership of one group.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    /// The consumer group: the subscription's name.
    pub(crate) group: Arc<str>,
    /// The unit's identity within its group (`order:c-1`, or a correlation value).
    pub(crate) id: String,
    /// The lease over the unit.
    pub(crate) lease: LeaseKeys,
    /// The partitions the unit covers.
    pub(crate) partitions: Vec<PartitionKeys>,
    /// A process manager's correlation value.
    pub(crate) correlation: Option<String>,
    /// The categories, for metric labels.
    pub(crate) label: Arc<str>,
}

/// How one subscription is consumed.
#[derive(Debug, Clone)]
pub(crate) struct GroupPlan {
    pub(crate) subscription: Subscription,
    pub(crate) group: Arc<str>,
    /// Categories consumed per partition (partitioned by some handler).
    pub(crate) partitioned: Vec<String>,
    /// Categories consumed from their base stream.
    pub(crate) base: Vec<String>,
    /// Whether units are correlation values (a `sequential_by` process manager).
    pub(crate) by_correlation: bool,
}

impl GroupPlan {
    /// The plans of `subscriptions`. A category is partitioned when any
    /// subscription partitions it (the registry makes them agree on the
    /// key); every subscription then consumes it per partition.
    pub(crate) fn all(subscriptions: &[Subscription]) -> Vec<Self> {
        let partitioned: BTreeSet<&str> = subscriptions
            .iter()
            .filter(|s| s.partitioned())
            .flat_map(|s| s.categories())
            .collect();
        subscriptions
            .iter()
            .map(|subscription| {
                let (on_partitions, on_base): (Vec<&str>, Vec<&str>) = subscription
                    .categories()
                    .into_iter()
                    .partition(|c| partitioned.contains(c));
                Self {
                    group: Arc::from(subscription.name()),
                    by_correlation: subscription.kind() == HandlerKind::ProcessManager
                        && subscription.partitioned(),
                    partitioned: on_partitions.into_iter().map(str::to_owned).collect(),
                    base: on_base.into_iter().map(str::to_owned).collect(),
                    subscription: subscription.clone(),
                }
            })
            .collect()
    }

    /// How many units [`GroupPlan::units`] would make of `indexed`, without
    /// making them: a discovery round needs only the count for the fair
    /// share, and makes the units only when it acquires (an instance at its
    /// share then allocates nothing per partition, round after round).
    pub(crate) fn unit_count(&self, indexed: &BTreeMap<String, BTreeSet<String>>) -> usize {
        let members = self.partitioned.iter().filter_map(|c| indexed.get(c));
        if self.by_correlation {
            members.flatten().collect::<BTreeSet<&String>>().len()
        } else {
            // A unit per member of each category: the categories' partitions are distinct.
            members.map(BTreeSet::len).sum()
        }
    }

    /// The units of this group, given the index members per category.
    ///
    /// A process manager's unit is a correlation value: the partition of
    /// that value in each category, which holds while a partition is one key
    /// (see [`PartitionId::for_key`]).
    pub(crate) fn units(
        &self,
        indexed: &BTreeMap<String, BTreeSet<String>>,
        backfill_suffix: &str,
    ) -> BTreeMap<String, Unit> {
        let mut units = BTreeMap::new();
        if self.by_correlation {
            let values: BTreeSet<&String> = self
                .partitioned
                .iter()
                .filter_map(|c| indexed.get(c))
                .flatten()
                .collect();
            let label: Arc<str> = Arc::from(self.partitioned.join(","));
            for value in values {
                let unit = Unit {
                    group: self.group.clone(),
                    id: value.clone(),
                    lease: LeaseKeys::process(&self.group, value),
                    partitions: self
                        .partitioned
                        .iter()
                        .map(|c| PartitionKeys::of(PartitionId::for_key(c, value), backfill_suffix))
                        .collect(),
                    correlation: Some(value.clone()),
                    label: label.clone(),
                };
                units.insert(unit.id.clone(), unit);
            }
        } else {
            for category in &self.partitioned {
                let label: Arc<str> = Arc::from(category.as_str());
                for member in indexed.get(category).into_iter().flatten() {
                    let partition =
                        PartitionKeys::of(PartitionId::from_member(category, member), backfill_suffix);
                    let unit = Unit {
                        group: self.group.clone(),
                        id: partition.primary().to_owned(),
                        lease: partition.lease(&self.group),
                        partitions: vec![partition],
                        correlation: None,
                        label: label.clone(),
                    };
                    units.insert(unit.id.clone(), unit);
                }
            }
        }
        units
    }
}
