//! The test event: `Tick`, of aggregate `Chaos`, partitioned by `key`.

use std::num::NonZeroU32;

use ordo::{Aggregate, Event};
use ordo_core::Partitions;
use ordo_core::contract::config::Config;
use serde::{Deserialize, Serialize};

/// The stream category of [`Tick`] events.
pub const CATEGORY: &str = <Chaos as ordo::Aggregate>::CATEGORY;

/// The handler's name: the consumer group of the `chaos` partitions (the
/// `name` of [`TickHandler`](crate::worker::TickHandler)'s `#[event_handler]`).
pub const GROUP: &str = "TickRecorder";

/// The default configuration with [`CATEGORY`] in `hashed_partitions`
/// hashed partitions (`None`: a partition per key): what a publisher and
/// the checker need to agree with the workers on.
pub fn config(hashed_partitions: Option<NonZeroU32>) -> Config {
    match hashed_partitions {
        Some(n) => Config::default().with_partitions(CATEGORY, Partitions::Hashed(n)),
        None => Config::default(),
    }
}

/// The aggregate that owns the `chaos` category.
#[derive(Debug, Clone, Copy, Default, Aggregate)]
#[aggregate(category = "chaos")]
pub struct Chaos;

/// Event number `seq` of key `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(part_of = Chaos)]
pub struct Tick {
    /// The partition key (and aggregate id).
    #[aggregate_id]
    pub key: String,
    /// The event's number within its key, from 0, in publish order.
    pub seq: u64,
    /// A poison event: every run of it fails.
    pub poison: bool,
    /// How long each run of it works before committing its effect, so a
    /// test can catch a worker mid-run.
    pub work_ms: u64,
    /// How long each run of it lingers after committing its effect, before
    /// it returns (and the broker acknowledges it), so a test can catch a
    /// worker between a commit and its acknowledgement.
    #[serde(default)]
    pub linger_ms: u64,
}
