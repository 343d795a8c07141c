//! The keys `domain.toml` may hold, and the check that refuses any other.
//!
//! The keys are declared once, by the serde structs of the file (`RawFile`
//! and the tables beneath it, in `config.rs`): the tree [`SCHEMA`] is read
//! from them (the field names serde's derive hands to a deserializer), and
//! both [`check_keys`] (an unknown key named with its valid siblings, in the
//! order the structs declare them) and the environment layer (the path of
//! an `ORDO_` variable, the list of every variable) walk it. A field added
//! to a table's struct is a key, checked and with its variable.

use std::fmt;
use std::sync::LazyLock;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};

use super::error::ConfigError;
use super::file::RawFile;

/// The keys `domain.toml` may hold, table by table: the tables are checked
/// by [`check_keys`] before the values are read, so an unknown key gets a
/// message naming it and its valid siblings.
#[derive(Debug, PartialEq)]
pub(super) enum Node {
    Table(Vec<(&'static str, Node)>),
    /// A table of tables named freely (`[handlers.NAME]`), each with these keys.
    Named(Vec<(&'static str, Node)>),
    /// A table with these value keys, and any others for the broker to
    /// check (`[server.partitioning]`, see [`Config::broker_partitioning`](super::Config::broker_partitioning)).
    Open(Vec<&'static str>),
    Value,
}

/// The table whose keys a broker shares: its struct declares ordo-core's
/// keys, and any other key is the broker's ([`Node::Open`]).
const OPEN: &[&str] = &["server", "partitioning"];

/// The keys of every table, read from the serde structs of the file.
pub(super) static SCHEMA: LazyLock<Vec<(&'static str, Node)>> = LazyLock::new(|| {
    let Node::Table(mut tables) = probe::<RawFile>() else {
        unreachable!("the file is a struct")
    };
    open(&mut tables, OPEN);
    tables
});

/// The keys of `[server.partitioning]` that this crate reads (the fields of
/// its struct, checked by a test).
pub const PARTITIONING_KEYS: &[&str] = &[
    "poll_interval_seconds",
    "max_retries",
    "retry_backoff_initial_ms",
    "retry_backoff_max_ms",
    "max_concurrency",
    "handler_timeout_ms",
    "timeout_is_transient",
    "max_transient_ms",
    "pause_min_keys",
];

/// Turns the table at `path` into an [`Node::Open`] one with its keys.
fn open(tables: &mut [(&'static str, Node)], path: &[&str]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    let Some((_, node)) = tables.iter_mut().find(|(name, _)| name == first) else {
        unreachable!("the open table is declared")
    };
    match node {
        Node::Table(children) if !rest.is_empty() => open(children, rest),
        Node::Table(children) => {
            let keys = children.iter().map(|(name, _)| *name).collect();
            *node = Node::Open(keys);
        }
        _ => unreachable!("the open table is a struct"),
    }
}

/// The keys of `T` as serde's derive declares them: a struct is a
/// [`Node::Table`] of its fields, a map of structs a [`Node::Named`] table,
/// anything else a [`Node::Value`].
fn probe<'de, T: Deserialize<'de>>() -> Node {
    let mut node = Node::Value;
    T::deserialize(Probe { out: &mut node }).expect("a configuration struct can be probed");
    node
}

/// A deserializer that hands every field of a struct a placeholder value,
/// and records the struct's fields as it goes.
struct Probe<'a> {
    out: &'a mut Node,
}

/// The error of probing (never expected: every field gets a value its type takes).
#[derive(Debug)]
struct ProbeError(String);

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProbeError {}

impl de::Error for ProbeError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        *self.out = Node::Value;
        visitor.visit_i64(0)
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        *self.out = Node::Value;
        visitor.visit_bool(false)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        *self.out = Node::Value;
        visitor.visit_str("")
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        visitor.visit_some(self)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        let mut children: Vec<(&'static str, Node)> = fields.iter().map(|f| (*f, Node::Value)).collect();
        let value = visitor.visit_map(Fields {
            names: fields,
            children: &mut children,
            at: 0,
        })?;
        *self.out = Node::Table(children);
        Ok(value)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        // One entry, named `<NAME>`: its value's keys are every entry's.
        let mut children = vec![("<NAME>", Node::Value)];
        let value = visitor.visit_map(Fields {
            names: &["<NAME>"],
            children: &mut children,
            at: 0,
        })?;
        let Some((_, Node::Table(keys))) = children.pop() else {
            return Err(de::Error::custom("a named table holds tables"));
        };
        *self.out = Node::Named(keys);
        Ok(value)
    }

    serde::forward_to_deserialize_any! {
        i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf unit
        unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

/// The entries of a probed struct (its fields) or map (one named entry).
struct Fields<'a> {
    names: &'static [&'static str],
    children: &'a mut Vec<(&'static str, Node)>,
    at: usize,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = ProbeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Self::Error> {
        match self.names.get(self.at).copied() {
            Some(name) => seed.deserialize(name.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        let (_, out) = &mut self.children[self.at];
        self.at += 1;
        seed.deserialize(Probe { out })
    }
}

/// Rejects a key of `table` (at dotted path `path`) that `schema` does not
/// list, and a table where a value belongs or the reverse.
pub(super) fn check_keys(
    table: &toml::Table,
    path: &str,
    schema: &[(&'static str, Node)],
) -> Result<(), ConfigError> {
    for (key, value) in table {
        let full = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let Some((_, node)) = schema.iter().find(|(name, _)| name == key) else {
            return Err(ConfigError::UnknownKey {
                key: full,
                valid: schema.iter().map(|(name, _)| *name).collect(),
            });
        };
        match (node, value) {
            (Node::Table(children), toml::Value::Table(inner)) => check_keys(inner, &full, children)?,
            (Node::Open(values), toml::Value::Table(inner)) => {
                // The other keys are the broker's to check.
                let table = inner
                    .iter()
                    .find(|(key, value)| values.contains(&key.as_str()) && value.is_table());
                if let Some((key, _)) = table {
                    return Err(ConfigError::WrongType {
                        key: format!("{full}.{key}"),
                        expected: "a value",
                        found: "a table",
                    });
                }
            }
            (Node::Named(children), toml::Value::Table(inner)) => {
                for (name, value) in inner {
                    let named = format!("{full}.{name}");
                    match value {
                        toml::Value::Table(table) => check_keys(table, &named, children)?,
                        other => {
                            return Err(ConfigError::WrongType {
                                key: named,
                                expected: "a table",
                                found: with_article(other.type_str()),
                            });
                        }
                    }
                }
            }
            (Node::Table(_) | Node::Named(_) | Node::Open(_), other) => {
                return Err(ConfigError::WrongType {
                    key: full,
                    expected: "a table",
                    found: with_article(other.type_str()),
                });
            }
            (Node::Value, toml::Value::Table(_)) => {
                return Err(ConfigError::WrongType {
                    key: full,
                    expected: "a value",
                    found: "a table",
                });
            }
            (Node::Value, _) => {}
        }
    }
    Ok(())
}

/// `integer` → `an integer`, for messages.
pub(super) fn with_article(type_name: &'static str) -> &'static str {
    match type_name {
        "string" => "a string",
        "integer" => "an integer",
        "float" => "a float",
        "boolean" => "a boolean",
        "datetime" => "a datetime",
        "array" => "an array",
        "table" => "a table",
        _ => "another type",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_the_structs_fields() {
        let keys = |node: &Node| match node {
            Node::Table(children) | Node::Named(children) => children.iter().map(|(name, _)| *name).collect(),
            Node::Open(keys) => keys.clone(),
            Node::Value => Vec::new(),
        };
        let top: Vec<&str> = SCHEMA.iter().map(|(name, _)| *name).collect();
        assert_eq!(
            top,
            [
                "server",
                "handlers",
                "health",
                "outbox",
                "commands",
                "categories",
                "redis",
                "cli",
                "relay"
            ]
        );
        let (_, server) = &SCHEMA[0];
        let Node::Table(server) = server else {
            panic!("{server:?}")
        };
        assert_eq!(server[0].0, "partitioning");
        assert_eq!(keys(&server[0].1), PARTITIONING_KEYS);
        assert_eq!(keys(&server[1].1), ["enabled", "backfill_suffix", "threshold"]);
        assert!(
            matches!(&SCHEMA[1].1, Node::Named(keys) if keys.len() == 9),
            "{:?}",
            SCHEMA[1]
        );
        assert!(matches!(&SCHEMA[5].1, Node::Named(keys) if keys == &[("partitions", Node::Value)]));
    }

    /// docs/domain.toml, the reference file, writes every key of the schema
    /// (a named table's keys in each of its tables).
    #[test]
    fn the_reference_file_names_every_key() {
        fn missing(table: &toml::Table, path: &str, schema: &[(&'static str, Node)], out: &mut Vec<String>) {
            for (name, node) in schema {
                let full = if path.is_empty() {
                    (*name).to_owned()
                } else {
                    format!("{path}.{name}")
                };
                let value = table.get(*name);
                match (node, value.and_then(toml::Value::as_table)) {
                    (Node::Value, _) if value.is_some() => {}
                    (Node::Table(children), Some(inner)) => missing(inner, &full, children, out),
                    (Node::Open(keys), Some(inner)) => {
                        out.extend(
                            keys.iter()
                                .filter(|key| !inner.contains_key(**key))
                                .map(|key| format!("{full}.{key}")),
                        );
                    }
                    (Node::Named(children), Some(inner)) if !inner.is_empty() => {
                        for (named, value) in inner {
                            let named = format!("{full}.{named}");
                            match value.as_table() {
                                Some(one) => missing(one, &named, children, out),
                                None => out.push(named),
                            }
                        }
                    }
                    _ => out.push(full),
                }
            }
        }
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/domain.toml")).unwrap();
        let table: toml::Table = toml::from_str(&text).unwrap();
        let mut out = Vec::new();
        missing(&table, "", &SCHEMA, &mut out);
        assert!(out.is_empty(), "not in docs/domain.toml: {out:?}");
    }
}
