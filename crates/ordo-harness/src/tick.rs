//! The test event: `Tick`, of aggregate `Chaos`, partitioned by `key`.
//!
//! The traits are implemented by hand (what `#[derive(Aggregate)]` and
//! `#[derive(Event)]` generate), so the harness depends on ordo-core and
//! ordo-redis only.

use ordo_core::message::{Aggregate, Event, Message, MessageKind, PartOf};
use serde::{Deserialize, Serialize};

/// The stream category of [`Tick`] events.
pub const CATEGORY: &str = "chaos";

/// The aggregate that owns the `chaos` category.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chaos;

impl Aggregate for Chaos {
    const CATEGORY: &'static str = CATEGORY;
}

/// Event number `seq` of key `key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// The partition key (and aggregate id).
    pub key: String,
    /// The event's number within its key, from 0, in publish order.
    pub seq: u64,
    /// A poison event: every run of it fails.
    pub poison: bool,
    /// How long each run of it works before committing its effect, so a
    /// test can catch a worker mid-run.
    pub work_ms: u64,
}

impl Message for Tick {
    const TYPE_NAME: &'static str = "Tick";
    const KIND: MessageKind = MessageKind::Event;
    const CATEGORY: &'static str = CATEGORY;

    fn aggregate_id(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

impl PartOf<Chaos> for Tick {}

impl Event for Tick {
    type Aggregate = Chaos;
}
