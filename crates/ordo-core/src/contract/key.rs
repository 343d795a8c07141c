//! Partition keys: what may be one and how values are validated. The names
//! a broker gives partitions are the broker's (see ordo-redis `keys`).

use std::any::Any;
use std::borrow::Cow;
use std::fmt;

use crate::contract::message::Envelope;

/// The longest partition key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The reserved token of a partition's dead-letter stream.
pub const DLQ_TOKEN: &str = "dlq";

/// The default backfill lane suffix (`[server.priority_lanes] backfill_suffix`).
pub const DEFAULT_BACKFILL_SUFFIX: &str = "backfill";

/// The most partitions a hashed category may have (`partitions = N` in
/// `[categories.NAME]`).
pub const MAX_HASHED_PARTITIONS: u32 = 65_536;

/// The hashed partition (`0..partitions`) of a category configured with
/// `partitions = N`: the 64-bit FNV-1a hash of the key's UTF-8 bytes,
/// modulo N.
///
/// The hash is part of the data format: every process (publishers, workers,
/// the `ordo` tool, the PostgreSQL relay) must place a key in the same
/// partition, whatever its version or platform, so it is written out here
/// rather than taken from `std` (whose hashers may change between
/// releases).
pub fn hashed_partition(key: &str, partitions: std::num::NonZeroU32) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = key
        .bytes()
        .fold(OFFSET, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(PRIME));
    u32::try_from(hash % u64::from(partitions.get())).expect("below a u32")
}

/// A field type that can hold a partition key: strings, integers, UUIDs and
/// `Option`s of those (an `Option` that is `None` is a null key).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a partition key",
    label = "this field's type cannot be a partition key",
    note = "a partition key field is a string (`String`, `Box<str>`, `Cow<str>`), an integer (`u8` to `u128`, \
            `i8` to `i128`, `usize`, `isize`), a `uuid::Uuid`, or an `Option` of one of those",
    note = "for a newtype, implement `ordo::PartitionKey` for it: `impl ordo::PartitionKey for ClientId {{ fn \
            key_value(&self) -> Option<std::borrow::Cow<'_, str>> {{ self.0.key_value() }} }}`"
)]
pub trait PartitionKey {
    /// The key's text, or `None` for a null key.
    fn key_value(&self) -> Option<Cow<'_, str>>;
}

impl PartitionKey for String {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self))
    }
}

impl PartitionKey for str {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self))
    }
}

impl PartitionKey for Cow<'_, str> {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Borrowed(self))
    }
}

impl PartitionKey for uuid::Uuid {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Owned(self.hyphenated().to_string()))
    }
}

impl<T: PartitionKey + ?Sized> PartitionKey for &T {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        (**self).key_value()
    }
}

impl<T: PartitionKey> PartitionKey for Option<T> {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        self.as_ref().and_then(PartitionKey::key_value)
    }
}

impl<T: PartitionKey + ?Sized> PartitionKey for Box<T> {
    fn key_value(&self) -> Option<Cow<'_, str>> {
        (**self).key_value()
    }
}

macro_rules! integer_keys {
    ($($t:ty),*) => {$(
        impl PartitionKey for $t {
            fn key_value(&self) -> Option<Cow<'_, str>> {
                Some(Cow::Owned(self.to_string()))
            }
        }
    )*};
}
integer_keys!(u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize);

/// The rules a key value must pass; only the backfill suffix is configurable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRules {
    backfill_suffix: String,
}

impl Default for KeyRules {
    fn default() -> Self {
        Self {
            backfill_suffix: DEFAULT_BACKFILL_SUFFIX.to_owned(),
        }
    }
}

impl KeyRules {
    /// Rules with a custom backfill lane suffix.
    pub fn with_backfill_suffix(suffix: impl Into<String>) -> Self {
        Self {
            backfill_suffix: suffix.into(),
        }
    }

    /// The backfill lane suffix in force.
    pub fn backfill_suffix(&self) -> &str {
        &self.backfill_suffix
    }

    /// Validates a key value taken from `field`; `None` is a null key.
    ///
    /// Rejected: null or empty; containing `:` or a control character
    /// (a newline, a tab, NUL, ...); longer than
    /// [`MAX_KEY_LEN`] bytes; equal to `dlq` or the backfill suffix; of the
    /// reserved sentinel form `__name__`.
    pub fn validate(&self, field: &str, value: Option<&str>) -> Result<String, InvalidKey> {
        let reject = |rule| InvalidKey {
            field: field.to_owned(),
            value: value.map(str::to_owned),
            rule,
        };
        let Some(value) = value else {
            return Err(reject(KeyRule::Null));
        };
        if let Some(rule) = segment_rule(value) {
            return Err(reject(rule));
        }
        if value == self.backfill_suffix {
            return Err(reject(KeyRule::ReservedLaneToken));
        }
        Ok(value.to_owned())
    }
}

/// The rule `value` breaks as one segment of a stream name (a key, or the
/// configured backfill suffix), if any: every [`KeyRule`] but null and the
/// configured suffix itself.
pub(crate) fn segment_rule(value: &str) -> Option<KeyRule> {
    if value.is_empty() {
        Some(KeyRule::Empty)
    } else if value.contains(':') {
        Some(KeyRule::ContainsColon)
    } else if value.chars().any(char::is_control) {
        Some(KeyRule::ControlCharacter)
    } else if value.len() > MAX_KEY_LEN {
        Some(KeyRule::TooLong { len: value.len() })
    } else if value == DLQ_TOKEN {
        Some(KeyRule::ReservedLaneToken)
    } else if is_sentinel(value) {
        Some(KeyRule::ReservedSentinel)
    } else {
        None
    }
}

/// Whether `value` has the reserved `__name__` form.
fn is_sentinel(value: &str) -> bool {
    value.len() > 4 && value.starts_with("__") && value.ends_with("__")
}

/// Why a key value was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyRule {
    /// The value is missing or null.
    Null,
    /// The value is the empty string.
    Empty,
    /// The value contains `:`, the stream-name separator.
    ContainsColon,
    /// The value contains a control character (a newline, a tab, NUL, ...):
    /// it would make stream names, logs and operator commands ambiguous.
    /// Spaces, `/` and other printable characters are fine.
    ControlCharacter,
    /// The value is longer than [`MAX_KEY_LEN`] bytes.
    TooLong {
        /// The value's length in bytes.
        len: usize,
    },
    /// The value equals a reserved lane token (`dlq` or the backfill suffix).
    ReservedLaneToken,
    /// The value has the reserved `__name__` sentinel form.
    ReservedSentinel,
}

impl fmt::Display for KeyRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Null => f.write_str("a partition key must not be null"),
            Self::Empty => f.write_str("a partition key must not be empty"),
            Self::ContainsColon => f.write_str("a partition key must not contain ':'"),
            Self::ControlCharacter => f.write_str(
                "a partition key must not contain control characters (such as a newline or a tab)",
            ),
            Self::TooLong { len } => write!(
                f,
                "a partition key must be at most {MAX_KEY_LEN} bytes (this one is {len})"
            ),
            Self::ReservedLaneToken => f.write_str(
                "a partition key must not be a reserved lane token (`dlq` or the backfill suffix)",
            ),
            Self::ReservedSentinel => {
                f.write_str("a partition key must not have the reserved `__name__` form")
            }
        }
    }
}

/// A key value that cannot name a partition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid partition key in field `{field}` (value {}): {rule}", DisplayValue(.value.as_deref()))]
pub struct InvalidKey {
    /// The key field the value came from.
    pub field: String,
    /// The offending value (`None` when null).
    pub value: Option<String>,
    /// The rule it breaks.
    pub rule: KeyRule,
}

struct DisplayValue<'a>(Option<&'a str>);

impl fmt::Display for DisplayValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            None => f.write_str("null"),
            Some(v) if v.len() > 64 => {
                let cut = (0..=64).rev().find(|i| v.is_char_boundary(*i)).unwrap_or(0);
                write!(f, "{:?}…", &v[..cut])
            }
            Some(v) => write!(f, "{v:?}"),
        }
    }
}

/// The lane of a partition: primary traffic or low-priority backfill.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// The partition's main stream.
    #[default]
    Primary,
    /// The partition's low-priority lane, drained after the primary one.
    Backfill,
}

/// Reads one key field from a typed message.
///
/// Generated by the macros for `sequential_by`, `correlate` and
/// `#[sequencing_policy(property = ..)]`: `extract` receives the raised
/// message as `&dyn Any` and returns `None` when it is not of the expected
/// type, `Some(None)` for a null key, `Some(Some(v))` otherwise. `decode`
/// does the same from an envelope, decoding the payload as the typed message
/// first, so that a key is the same text whether it is read before the
/// message is published or after it is delivered (serde renames, integers
/// above 2^53 and custom serialisations included).
#[derive(Clone, Copy)]
pub struct KeyExtractor {
    field: &'static str,
    extract: fn(&dyn Any) -> Option<Option<String>>,
    decode: Option<DecodeKey>,
}

/// Reads a key from an envelope through its typed message.
type DecodeKey = fn(&Envelope) -> Option<Option<String>>;

impl KeyExtractor {
    /// An extractor of `field` implemented by `extract`.
    pub const fn new(field: &'static str, extract: fn(&dyn Any) -> Option<Option<String>>) -> Self {
        Self {
            field,
            extract,
            decode: None,
        }
    }

    /// An extractor that can also read the key from an envelope: `decode`
    /// returns `None` when the envelope does not hold the extractor's type or
    /// its payload does not decode.
    pub const fn with_decode(mut self, decode: DecodeKey) -> Self {
        self.decode = Some(decode);
        self
    }

    /// The field's name.
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The key value of `message`, if it is of the extractor's type.
    pub fn extract(&self, message: &dyn Any) -> Option<Option<String>> {
        (self.extract)(message)
    }

    /// The key value of the message `envelope` holds, read through the typed
    /// message; `None` when the envelope holds another type, its payload does
    /// not decode, or the extractor has no decoder.
    pub fn decode(&self, envelope: &Envelope) -> Option<Option<String>> {
        self.decode.and_then(|decode| decode(envelope))
    }
}

impl fmt::Debug for KeyExtractor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyExtractor")
            .field("field", &self.field)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use super::hashed_partition;

    fn n(partitions: u32) -> NonZeroU32 {
        NonZeroU32::new(partitions).unwrap()
    }

    #[test]
    fn the_hashed_partition_is_fnv1a_64_modulo_n() {
        // Published FNV-1a 64-bit test vectors: a change of hash would move
        // every key of every hashed category to another partition.
        let max = n(u32::MAX);
        assert_eq!(
            hashed_partition("", max),
            (0xcbf2_9ce4_8422_2325_u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            hashed_partition("a", max),
            (0xaf63_dc4c_8601_ec8c_u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            hashed_partition("foobar", max),
            (0x8594_4171_f739_67e8_u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(hashed_partition("c-1", n(1)), 0);
    }

    #[test]
    fn keys_spread_evenly_over_the_partitions() {
        let partitions = 256;
        let mut counts = vec![0_u32; partitions];
        for key in 0..256_000 {
            counts[hashed_partition(&format!("client-{key}"), n(partitions as u32)) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(
            *min > 850 && *max < 1150,
            "uneven spread: {min}..{max} per partition"
        );
    }
}
