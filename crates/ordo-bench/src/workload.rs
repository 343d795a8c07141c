//! The benchmark's messages: one aggregate, one event, keys `k0`..`kN`.
//!
//! Event number `seq` of a run goes to key `seq % keys` and is that key's
//! event number `seq / keys`, so every key's events carry consecutive
//! numbers from 0 that a checker can verify.
//!
//! Stream entries are laid out exactly as Ordo's publish script writes them
//! (`type` = the type name, `envelope` = the envelope as JSON), so a plain
//! consumer of these entries does the same decoding work as Ordo's consumer.

use anyhow::{Context as _, Result};
use ordo::contract::message::Envelope;
use ordo::{Aggregate, Event};
use serde::{Deserialize, Serialize};

/// The stream category of the benchmark's events.
pub const CATEGORY: &str = <BenchAggregate as ordo::Aggregate>::CATEGORY;

/// The aggregate the benchmark's events are part of.
#[derive(Debug, Clone, Copy, Default, Aggregate)]
#[aggregate(category = "bench")]
pub struct BenchAggregate;

/// The benchmark event: which key, and its number within that key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Event)]
#[event(part_of = BenchAggregate)]
pub struct BenchEvent {
    /// The key (and aggregate id), `k0`..`kN`.
    #[aggregate_id]
    pub key: String,
    /// The event's number within its key, from 0.
    pub seq: u64,
}

impl BenchEvent {
    /// Event number `seq` of a run over `keys` keys (`keys` > 0).
    pub fn nth(seq: u64, keys: usize) -> Self {
        let keys = keys as u64;
        Self {
            key: key_name((seq % keys) as usize),
            seq: seq / keys,
        }
    }
}

/// The name of key number `index`.
pub fn key_name(index: usize) -> String {
    format!("k{index}")
}

/// `event` in an envelope partitioned by its key, as Ordo publishes it.
pub fn envelope(event: &BenchEvent) -> Result<Envelope> {
    let mut envelope = Envelope::new(event).context("could not encode a benchmark event")?;
    envelope.partition_key = Some(event.key.clone());
    Ok(envelope)
}

/// The fields of a stream entry holding `envelope`, as Ordo's publish
/// script writes them: `type`, then `envelope` (JSON).
pub fn entry_fields(envelope: &Envelope) -> Result<Vec<(&'static str, String)>> {
    let json = serde_json::to_string(envelope).context("could not encode an envelope")?;
    Ok(vec![("type", envelope.type_name.clone()), ("envelope", json)])
}

/// Decodes the `envelope` field of an entry and the event inside it.
pub fn decode_entry(envelope_json: &str) -> Result<BenchEvent> {
    let envelope: Envelope = serde_json::from_str(envelope_json).context("entry holds no valid envelope")?;
    envelope.decode().context("envelope holds no BenchEvent")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_go_round_robin_with_consecutive_numbers_per_key() {
        let events: Vec<BenchEvent> = (0..6).map(|seq| BenchEvent::nth(seq, 3)).collect();
        let pairs: Vec<(&str, u64)> = events.iter().map(|e| (e.key.as_str(), e.seq)).collect();
        assert_eq!(
            pairs,
            [("k0", 0), ("k1", 0), ("k2", 0), ("k0", 1), ("k1", 1), ("k2", 1)]
        );
    }

    #[test]
    fn an_entry_round_trips_with_ordos_field_layout() {
        let event = BenchEvent::nth(7, 4);
        let envelope = envelope(&event).unwrap();
        assert_eq!(envelope.partition_key.as_deref(), Some("k3"));
        assert_eq!(envelope.aggregate_id.as_deref(), Some("k3"));
        assert_eq!(envelope.category, "bench");
        let fields = entry_fields(&envelope).unwrap();
        assert_eq!(fields[0], ("type", "BenchEvent".to_owned()));
        assert_eq!(fields[1].0, "envelope");
        assert_eq!(decode_entry(&fields[1].1).unwrap(), event);
        assert!(decode_entry("{}").is_err());
    }
}
