//! A broker's section of the configuration, read into the serde struct the
//! broker declares, and the range checks that the core and the brokers
//! share.
//!
//! The broker's struct is the one declaration of its keys: its fields are
//! the keys it reads ([`struct_fields`], what
//! [`Broker::partitioning_keys`](crate::contract::broker::Broker::partitioning_keys)
//! returns), and [`Config::broker_section`](super::Config::broker_section)
//! deserializes them with the errors of the rest of the file (a wrong type
//! is [`ConfigError::WrongType`] naming the key in full).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};

use super::error::{ConfigError, TomlError};
use super::schema::with_article;

/// The fields of the struct `T` (its keys), as serde's derive declares them.
///
/// # Panics
///
/// When `T` is not a struct deserialized with `#[derive(Deserialize)]`.
pub fn struct_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(FieldsOf) {
        Err(FieldsError::Found(fields)) => fields,
        _ => panic!("{} is not a struct", std::any::type_name::<T>()),
    }
}

/// Reads `value` (`None`: not set) as an integer greater than 0, else `default`.
///
/// # Errors
///
/// [`ConfigError::Invalid`] naming `key` for 0 or less.
pub fn positive_int(key: &'static str, value: Option<i64>, default: u64) -> Result<u64, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) if v > 0 => Ok(v.unsigned_abs()),
        Some(v) => Err(ConfigError::Invalid {
            key,
            reason: format!("must be greater than 0, got {v}"),
        }),
    }
}

/// Reads `value` (`None`: not set, `default`) as a number of seconds
/// greater than 0.
///
/// # Errors
///
/// [`ConfigError::Invalid`] naming `key` for 0 or less, a value that is
/// not finite, or one too large for a [`Duration`].
pub fn positive_seconds(
    key: &'static str,
    value: Option<f64>,
    default: f64,
) -> Result<Duration, ConfigError> {
    let seconds = value.unwrap_or(default);
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(ConfigError::Invalid {
            key,
            reason: format!("must be a finite number greater than 0, got {seconds}"),
        });
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| ConfigError::Invalid {
        key,
        reason: format!("is too large, got {seconds}"),
    })
}

/// Deserializes `T` from `table`, the keys of the table at `path`: a value
/// of the wrong type is [`ConfigError::WrongType`] naming `path.key`.
pub(super) fn deserialize_table<T: de::DeserializeOwned>(
    table: &toml::Table,
    path: &'static str,
) -> Result<T, ConfigError> {
    T::deserialize(Section { table, path }).map_err(|SectionError(error)| error)
}

/// What deserializing a section fails with: the configuration's error.
#[derive(Debug)]
struct SectionError(ConfigError);

impl fmt::Display for SectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SectionError {}

impl de::Error for SectionError {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Self(ConfigError::Parse(TomlError::from_message(msg.to_string())))
    }
}

/// A table of a section, as a map of its keys.
struct Section<'a> {
    table: &'a toml::Table,
    path: &'static str,
}

impl<'de> de::Deserializer<'de> for Section<'_> {
    type Error = SectionError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_map(Entries {
            entries: self.table.iter(),
            value: None,
            path: self.path,
        })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

struct Entries<'a, I> {
    entries: I,
    value: Option<(&'a str, &'a toml::Value)>,
    path: &'static str,
}

impl<'a, 'de, I: Iterator<Item = (&'a String, &'a toml::Value)>> MapAccess<'de> for Entries<'a, I> {
    type Error = SectionError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some((key, value));
        seed.deserialize(key.as_str().into_deserializer()).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        let (key, value) = self.value.take().expect("a value follows its key");
        seed.deserialize(Value {
            key: format!("{}.{key}", self.path),
            value,
        })
    }
}

/// One value of a section, and its key in full for errors.
struct Value<'a> {
    key: String,
    value: &'a toml::Value,
}

impl Value<'_> {
    fn wrong(self, expected: &'static str) -> SectionError {
        SectionError(ConfigError::WrongType {
            key: self.key,
            expected,
            found: with_article(self.value.type_str()),
        })
    }
}

impl<'de> de::Deserializer<'de> for Value<'_> {
    type Error = SectionError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            toml::Value::Integer(v) => visitor.visit_i64(*v),
            toml::Value::Float(v) => visitor.visit_f64(*v),
            toml::Value::Boolean(v) => visitor.visit_bool(*v),
            toml::Value::String(v) => visitor.visit_str(v),
            _ => Err(self.wrong("a value")),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            toml::Value::Boolean(v) => visitor.visit_bool(*v),
            _ => Err(self.wrong("a boolean")),
        }
    }

    fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            toml::Value::Integer(v) => visitor.visit_i64(*v),
            _ => Err(self.wrong("an integer")),
        }
    }

    fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_i64(visitor)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            toml::Value::Float(v) => visitor.visit_f64(*v),
            // Exact up to 2^53, far beyond any sensible setting.
            toml::Value::Integer(v) => visitor.visit_f64(*v as f64),
            _ => Err(self.wrong("a number")),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.value {
            toml::Value::String(v) => visitor.visit_str(v),
            _ => Err(self.wrong("a string")),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i128 u8 u16 u32 u128 f32 char bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

/// A deserializer that asks for a struct only to learn its fields.
struct FieldsOf;

#[derive(Debug)]
enum FieldsError {
    Found(&'static [&'static str]),
    Other(String),
}

impl fmt::Display for FieldsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Found(fields) => write!(f, "fields {fields:?}"),
            Self::Other(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for FieldsError {}

impl de::Error for FieldsError {
    fn custom<M: fmt::Display>(msg: M) -> Self {
        Self::Other(msg.to_string())
    }
}

impl<'de> de::Deserializer<'de> for FieldsOf {
    type Error = FieldsError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(FieldsError::Other("not a struct".to_owned()))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        Err(FieldsError::Found(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}
