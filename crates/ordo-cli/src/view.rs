//! What the commands print, as data: the `--json` output is these types
//! serialized, the text output is rendered from them.

use ordo_core::health::SubscriptionHealth;
use ordo_core::key::Lane;
use ordo_redis::{HaltedPartition, StreamEntry};
use serde::Serialize;
use serde_json::Value;

/// The cluster at one moment (`status`, `watch`).
#[derive(Debug, Serialize)]
pub(crate) struct Snapshot {
    /// The Redis server clock when the snapshot was taken (ms since the epoch).
    pub(crate) server_time_ms: u64,
    /// The partition-count warning threshold in force.
    pub(crate) warn_partitions: u64,
    pub(crate) categories: Vec<CategoryView>,
    /// Every halted partition of the categories shown.
    pub(crate) halted: Vec<HaltView>,
    /// Each consumer group's health, judged exactly as `RunningDomain::health()`
    /// judges it on Redis (`ordo_redis::health::group_health`, `[health]` thresholds).
    pub(crate) health: Vec<SubscriptionHealth>,
    pub(crate) warnings: Vec<String>,
    /// The PostgreSQL outbox, when `--database-url` is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) outbox: Option<OutboxView>,
}

/// The PostgreSQL outbox.
#[derive(Debug, Serialize)]
pub(crate) struct OutboxView {
    pub(crate) schema: String,
    pub(crate) pending: u64,
    pub(crate) oldest_pending_age_ms: u64,
    pub(crate) abandoned: u64,
    pub(crate) live_relays: u64,
    pub(crate) leased_slots: u64,
    /// Keys (position scopes) waiting behind a row Redis refused.
    pub(crate) refused: u64,
    /// Of those, keys whose positions Redis holds from another history of
    /// the database (`ordo-pg-relay adopt`).
    pub(crate) conflicts: u64,
}

/// One category.
#[derive(Debug, Serialize)]
pub(crate) struct CategoryView {
    pub(crate) category: String,
    /// Live partitions: the keys in the category's index.
    pub(crate) partitions: u64,
    /// Sums over the groups.
    pub(crate) lag: u64,
    pub(crate) pending: u64,
    pub(crate) halted: u64,
    pub(crate) groups: Vec<GroupView>,
}

/// One consumer group of a category.
#[derive(Debug, Serialize)]
pub(crate) struct GroupView {
    pub(crate) group: String,
    /// Entries published and not yet delivered to this group.
    pub(crate) lag: u64,
    /// Entries delivered and not acknowledged (in flight or halted heads).
    pub(crate) pending: u64,
    /// Partitions halted for this group.
    pub(crate) halted: u64,
    /// Partitions with an owner for this group.
    pub(crate) owned: u64,
    /// Live instances, and instances that still hold a lease without a
    /// live announcement.
    pub(crate) instances: Vec<InstanceView>,
}

/// An instance of a group.
#[derive(Debug, Serialize)]
pub(crate) struct InstanceView {
    pub(crate) instance: String,
    /// Whether its announcement is current.
    pub(crate) live: bool,
    /// Partitions of the category it owns for the group.
    pub(crate) owns: u64,
}

/// A halt record.
#[derive(Debug, Serialize)]
pub(crate) struct HaltView {
    pub(crate) group: String,
    pub(crate) category: String,
    pub(crate) key: String,
    pub(crate) lane: &'static str,
    /// The halted head's entry id (what `--expect-head` compares with).
    pub(crate) head: String,
    pub(crate) error: String,
    pub(crate) attempts: u32,
    /// The instance that halted it.
    pub(crate) owner: String,
    pub(crate) halted_at_ms: u64,
    /// A parked key of a hashed partition (its messages held aside, the
    /// partition's other keys flowing), rather than a halted partition.
    pub(crate) parked: bool,
}

impl From<&HaltedPartition> for HaltView {
    fn from(halt: &HaltedPartition) -> Self {
        Self {
            group: halt.group.clone(),
            category: halt.category.clone(),
            key: halt.key.clone(),
            lane: lane_name(halt.lane),
            head: halt.head.clone(),
            error: halt.error.clone(),
            attempts: halt.attempts,
            owner: halt.owner.clone(),
            halted_at_ms: halt.halted_at_ms,
            parked: halt.parked,
        }
    }
}

/// A stream entry holding a message.
#[derive(Debug, Serialize)]
pub(crate) struct EntryView {
    /// Its entry id in its lane.
    pub(crate) id: String,
    pub(crate) lane: &'static str,
    #[serde(rename = "type")]
    pub(crate) type_name: Option<String>,
    /// The envelope, with its `payload` decoded from its JSON text (when it
    /// is JSON); `null` when the entry holds no envelope.
    pub(crate) envelope: Option<Value>,
}

impl From<&StreamEntry> for EntryView {
    fn from(entry: &StreamEntry) -> Self {
        Self {
            id: entry.id().to_owned(),
            lane: lane_name(entry.lane()),
            type_name: entry.type_name().map(str::to_owned),
            envelope: entry.envelope_json().map(readable_envelope),
        }
    }
}

/// The envelope JSON with the payload (JSON text inside JSON) decoded, so
/// it prints as a nested object; text that is not JSON is kept as a string.
fn readable_envelope(json: &str) -> Value {
    let Ok(mut envelope) = serde_json::from_str::<Value>(json) else {
        return Value::String(json.to_owned());
    };
    if let Some(payload) = envelope.get_mut("payload")
        && let Some(decoded) = payload
            .as_str()
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
    {
        *payload = decoded;
    }
    envelope
}

/// How lanes are named in the output (as in halt records).
pub(crate) fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Primary => "primary",
        Lane::Backfill => "backfill",
    }
}

/// `value` as pretty JSON text, with a final newline.
pub(crate) fn pretty<T: Serialize>(value: &T) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_text_is_decoded_for_reading() {
        let envelope = r#"{"id":"m-1","payload":"{\"client_id\":\"bob\",\"amount\":3}"}"#;
        let readable = readable_envelope(envelope);
        assert_eq!(readable["payload"]["client_id"], "bob");
        assert_eq!(readable["payload"]["amount"], 3);
        assert_eq!(readable["id"], "m-1");
    }

    #[test]
    fn text_that_is_not_json_is_kept() {
        assert_eq!(readable_envelope("not json"), Value::String("not json".into()));
        let envelope = r#"{"payload":"plain text"}"#;
        assert_eq!(readable_envelope(envelope)["payload"], "plain text");
    }
}
