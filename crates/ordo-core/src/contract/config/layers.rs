//! The layers of the domain configuration and where each setting came from:
//! the file, then the environment (`ORDO_` variables), then code (what the
//! application sets on the builders, applied after loading).
//!
//! Every key of `domain.toml` has one environment variable: `ORDO_`, then
//! the key's dotted path in upper case with `_` for `.`
//! (`server.partitioning.lease_ttl_ms` is `ORDO_SERVER_PARTITIONING_LEASE_TTL_MS`).
//! The name of a `[handlers.NAME]` or `[categories.NAME]` table is written
//! as it is, case kept: `ORDO_HANDLERS_OrderProjector_MAX_RETRIES`,
//! `ORDO_CATEGORIES_order_PARTITIONS`. A value is read as a TOML value (a
//! number, `true`, `"quoted text"`), else as text (`redis://...`,
//! `per_key`); an empty value is no value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::error::{ConfigError, Origin};
use super::schema::{self, Node, SCHEMA};

/// The prefix of every environment variable of the domain configuration.
pub const ENV_PREFIX: &str = "ORDO_";

/// The environment variable naming the configuration file, when no path is
/// given in code (or on the command line).
pub const CONFIG_FILE_ENV: &str = "ORDO_CONFIG";

/// Where the settings of one loaded configuration came from, by dotted key.
/// Where a setting came from never makes two configurations differ.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    /// The file's text and path, for the line of a key.
    file: Option<(Option<PathBuf>, String)>,
    /// The keys set by the environment, and by which variable.
    env: BTreeMap<String, String>,
}

impl PartialEq for Origins {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Origins {
    /// Where `key` (dotted, like `server.partitioning.max_retries`) was set:
    /// the environment variable that set it, else its line in the file.
    pub(crate) fn of(&self, key: &str) -> Option<Origin> {
        if let Some(var) = self.env.get(key) {
            return Some(Origin::Env { var: var.clone() });
        }
        let (path, text) = self.file.as_ref()?;
        let segments: Vec<&str> = key.split('.').collect();
        line_of(text, &segments).map(|line| Origin::File {
            path: path.clone(),
            line,
        })
    }

    /// Where `key` was set, else where its nearest enclosing table was (a
    /// rule about a key left at its default, in a table the file writes).
    fn of_or_enclosing(&self, key: &str) -> Option<Origin> {
        let segments: Vec<&str> = key.split('.').collect();
        (1..=segments.len())
            .rev()
            .find_map(|len| self.of(&segments[..len].join(".")))
    }

    /// `error` with where its key was set, when it names a key that was set.
    pub(crate) fn locate(&self, error: ConfigError) -> ConfigError {
        let origin = match error.dotted_key() {
            Some(key) => self.of_or_enclosing(&key),
            None => None,
        };
        match origin {
            Some(origin) => ConfigError::At {
                origin,
                error: Box::new(error),
            },
            None => error,
        }
    }
}

/// The merged table of the file and the environment, and where its settings
/// came from.
pub(crate) struct Layered {
    pub(crate) table: toml::Table,
    pub(crate) origins: Origins,
}

/// Reads `file` (its path and text), then overlays the `ORDO_` variables of
/// `env`. A syntax error names the file and line; a variable under a table
/// of the configuration that names no key is an error listing the names.
pub(crate) fn layer(
    file: Option<(Option<&Path>, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Layered, ConfigError> {
    let mut origins = Origins::default();
    let mut table = toml::Table::new();
    if let Some((path, text)) = file {
        table = toml::from_str(text).map_err(|error| {
            let line = error.span().map_or(1, |span| {
                text[..span.start.min(text.len())].matches('\n').count() + 1
            });
            ConfigError::At {
                origin: Origin::File {
                    path: path.map(Path::to_owned),
                    line,
                },
                error: Box::new(ConfigError::Parse(error.into())),
            }
        })?;
        origins.file = Some((path.map(Path::to_owned), text.to_owned()));
        // The file's own unknown keys and misplaced tables, named at their line.
        schema::check_keys(&table, "", &SCHEMA).map_err(|error| origins.locate(error))?;
    }
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(var, value)| var.starts_with(ENV_PREFIX) && var != CONFIG_FILE_ENV && !value.is_empty())
        .collect();
    vars.sort();
    for (var, value) in vars {
        let rest = &var[ENV_PREFIX.len()..];
        let Some(path) = resolve(rest, &SCHEMA) else {
            if let Some(valid) = guarded(rest) {
                return Err(ConfigError::UnknownEnvVar { var, valid });
            }
            continue;
        };
        set(&mut table, &path, parse_value(&value))
            .map_err(|error| origins_with(&origins, &var, &path).locate(error))?;
        origins.env.insert(path.join("."), var);
    }
    Ok(Layered { table, origins })
}

/// `origins` with `path` set by `var` (for an error while setting it).
fn origins_with(origins: &Origins, var: &str, path: &[String]) -> Origins {
    let mut with = origins.clone();
    with.env.insert(path.join("."), var.to_owned());
    with
}

/// An environment value as TOML: a number, a boolean, a quoted string, an
/// array or inline table; anything else is text.
fn parse_value(value: &str) -> toml::Value {
    value
        .parse::<toml::Value>()
        .unwrap_or_else(|_| toml::Value::String(value.to_owned()))
}

/// Sets `path` in `table` to `value`, creating the tables on the way; a
/// value where a table belongs is [`ConfigError::WrongType`].
fn set(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), ConfigError> {
    let (last, tables) = path.split_last().expect("a key has a name");
    let mut current = table;
    let mut dotted = String::new();
    for segment in tables {
        if !dotted.is_empty() {
            dotted.push('.');
        }
        dotted.push_str(segment);
        let entry = current
            .entry(segment.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        current = match entry {
            toml::Value::Table(inner) => inner,
            other => {
                return Err(ConfigError::WrongType {
                    key: dotted,
                    expected: "a table",
                    found: schema::with_article(other.type_str()),
                });
            }
        };
    }
    current.insert(last.clone(), value);
    Ok(())
}

/// The dotted path `rest` (a variable's name after `ORDO_`) names in
/// `schema`, if any.
fn resolve(rest: &str, schema: &[(&'static str, Node)]) -> Option<Vec<String>> {
    for (name, node) in schema {
        let upper = name.to_ascii_uppercase();
        if let Node::Value = node {
            if rest == upper {
                return Some(vec![(*name).to_owned()]);
            }
            continue;
        }
        let Some(tail) = rest.strip_prefix(&upper).and_then(|t| t.strip_prefix('_')) else {
            continue;
        };
        let found = match node {
            Node::Table(children) => resolve(tail, children).map(|mut path| {
                path.insert(0, (*name).to_owned());
                path
            }),
            // The broker's keys too: whatever the name, the broker checks it.
            Node::Open(_) if !tail.is_empty() => Some(vec![(*name).to_owned(), tail.to_ascii_lowercase()]),
            Node::Named(children) => children.iter().find_map(|(child, _)| {
                let suffix = format!("_{}", child.to_ascii_uppercase());
                let table = tail.strip_suffix(&suffix).filter(|t| !t.is_empty())?;
                Some(vec![(*name).to_owned(), table.to_owned(), (*child).to_owned()])
            }),
            Node::Open(_) | Node::Value => None,
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The tables whose variables are all settings: a variable under one of
/// them that names no key is a typo (others, like `ORDO_REDIS_SERVER` of the
/// test kit or `ORDO_CONFIG`, are not the configuration's).
const GUARDED: &[&str] = &["SERVER", "HANDLERS", "HEALTH", "CATEGORIES", "CLI", "RELAY"];

/// The valid names under the guarded table `rest` starts with, if any.
fn guarded(rest: &str) -> Option<Vec<String>> {
    let table = GUARDED
        .iter()
        .find(|table| rest.strip_prefix(**table).is_some_and(|t| t.starts_with('_')))?;
    let (name, node) = SCHEMA.iter().find(|(name, _)| name.eq_ignore_ascii_case(table))?;
    let mut valid = Vec::new();
    names(
        &format!("{ENV_PREFIX}{}", name.to_ascii_uppercase()),
        node,
        &mut valid,
    );
    Some(valid)
}

/// Every variable name under `prefix` for `node`.
fn names(prefix: &str, node: &Node, out: &mut Vec<String>) {
    match node {
        Node::Value => out.push(prefix.to_owned()),
        Node::Table(children) => {
            for (child, node) in children {
                names(&format!("{prefix}_{}", child.to_ascii_uppercase()), node, out);
            }
        }
        Node::Open(values) => {
            out.extend(
                values
                    .iter()
                    .map(|v| format!("{prefix}_{}", v.to_ascii_uppercase())),
            );
            out.push(format!("{prefix}_<BROKER_KEY>"));
        }
        Node::Named(children) => {
            out.extend(
                children
                    .iter()
                    .map(|(child, _)| format!("{prefix}_<NAME>_{}", child.to_ascii_uppercase())),
            );
        }
    }
}

/// Every environment variable of the configuration, in schema order (named
/// tables as `<NAME>`, the broker's keys of `[server.partitioning]` as
/// `<BROKER_KEY>`), for documentation and tests.
pub fn env_var_names() -> Vec<String> {
    let mut out = Vec::new();
    for (name, node) in SCHEMA.iter() {
        names(
            &format!("{ENV_PREFIX}{}", name.to_ascii_uppercase()),
            node,
            &mut out,
        );
    }
    out
}

/// The line (from 1) where the key at `segments` is written in `text`.
fn line_of(text: &str, segments: &[&str]) -> Option<usize> {
    let document = toml::de::DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let mut start = None;
    for (n, segment) in segments.iter().enumerate() {
        let (key, value) = table.iter().find(|(key, _)| key.get_ref().as_ref() == *segment)?;
        start = Some(key.span().start);
        if n + 1 < segments.len() {
            match value.get_ref() {
                toml::de::DeValue::Table(inner) => table = inner,
                _ => return None,
            }
        }
    }
    let start = start?.min(text.len());
    Some(text[..start].matches('\n').count() + 1)
}
