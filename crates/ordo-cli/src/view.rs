//! What the commands print, as data: the `--json` output is these types
//! serialized, the text output is rendered from them.

use ordo_core::contract::health::SubscriptionHealth;
use ordo_core::contract::key::Lane;
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
    /// Entries read and acknowledged over the live partitions (Redis's
    /// `entries-read` minus pending): its rate is the group's throughput.
    pub(crate) handled: u64,
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
    /// Which of the entry's fields are not UTF-8 text (shown above with
    /// their bytes replaced by `\u{fffd}`); absent for a readable entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) unreadable: Option<String>,
}

impl From<&StreamEntry> for EntryView {
    fn from(entry: &StreamEntry) -> Self {
        let lossy = |name: &str| {
            entry
                .binary_fields()
                .find(|(field, _)| *field == name)
                .map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned())
        };
        let unreadable: Vec<String> = entry
            .binary_fields()
            .map(|(name, bytes)| format!("`{name}` ({} bytes) is not UTF-8 text", bytes.len()))
            .collect();
        Self {
            id: entry.id().to_owned(),
            lane: lane_name(entry.lane()),
            type_name: entry.type_name().map(str::to_owned).or_else(|| lossy("type")),
            envelope: entry
                .envelope_json()
                .map(readable_envelope)
                .or_else(|| lossy("envelope").map(Value::String)),
            unreadable: (!unreadable.is_empty()).then(|| unreadable.join("; ")),
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
    let mut text = json(value, serde_json::ser::PrettyFormatter::new())?;
    text.push('\n');
    Ok(text)
}

/// `value` as JSON text on one line (`watch --json`'s frames).
pub(crate) fn compact<T: Serialize>(value: &T) -> anyhow::Result<String> {
    json(value, serde_json::ser::CompactFormatter)
}

fn json<T: Serialize, F: serde_json::ser::Formatter>(value: &T, formatter: F) -> anyhow::Result<String> {
    let mut out = Vec::new();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        &mut out,
        InertJson(formatter),
    ))?;
    Ok(String::from_utf8(out)?)
}

/// A JSON formatter that also writes as `\uXXXX` escapes the characters
/// serde_json leaves as they are but a terminal acts on (DEL, C1 controls,
/// bidi controls, line separators; see `ordo_core::contract::text::is_hostile`): the
/// JSON means the same, and printing it cannot drive the terminal.
struct InertJson<F>(F);

impl<F: serde_json::ser::Formatter> serde_json::ser::Formatter for InertJson<F> {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(ordo_core::contract::text::is_hostile) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let c = rest[at..].chars().next().expect("a character at `at`");
            let mut units = [0_u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }

    fn begin_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, writer: &mut W) -> std::io::Result<()> {
        self.0.end_object_value(writer)
    }
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
    fn json_output_escapes_what_a_terminal_acts_on_and_means_the_same() {
        let value = serde_json::json!({"error": "a\u{1b}[2J\u{9b}\u{7f}\u{202e}b\n😀", "n": [1, 2]});
        let text = pretty(&value).unwrap();
        assert!(
            !text.contains(['\u{1b}', '\u{9b}', '\u{7f}', '\u{202e}']),
            "{text}"
        );
        assert!(text.contains("\\u202e") && text.contains("\\u009b"), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), value);
        assert_eq!(
            serde_json::from_str::<Value>(&compact(&value).unwrap()).unwrap(),
            value
        );
    }

    #[test]
    fn text_that_is_not_json_is_kept() {
        assert_eq!(readable_envelope("not json"), Value::String("not json".into()));
        let envelope = r#"{"payload":"plain text"}"#;
        assert_eq!(readable_envelope(envelope)["payload"], "plain text");
    }
}
