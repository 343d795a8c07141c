//! The keys `domain.toml` may hold, and the check that refuses any other.

use super::error::ConfigError;

/// The keys `domain.toml` may hold, table by table: the tables are checked
/// by [`check_keys`] before the values are read, so an unknown key gets a
/// message naming it and its valid siblings.
pub(super) enum Node {
    Table(&'static [(&'static str, Node)]),
    /// A table of tables named freely (`[handlers.NAME]`), each with these keys.
    Named(&'static [(&'static str, Node)]),
    /// A table with these value keys, and any others for the broker to
    /// check (`[server.partitioning]`, see [`Config::broker_partitioning`](super::Config::broker_partitioning)).
    Open(&'static [&'static str]),
    Value,
}

pub(super) const SCHEMA: &[(&str, Node)] = &[
    (
        "server",
        Node::Table(&[
            ("partitioning", Node::Open(PARTITIONING_KEYS)),
            (
                "priority_lanes",
                Node::Table(&[
                    ("enabled", Node::Value),
                    ("backfill_suffix", Node::Value),
                    ("threshold", Node::Value),
                ]),
            ),
        ]),
    ),
    (
        "handlers",
        Node::Named(&[
            ("max_retries", Node::Value),
            ("retry_backoff_initial_ms", Node::Value),
            ("retry_backoff_max_ms", Node::Value),
            ("max_concurrency", Node::Value),
            ("timeout_ms", Node::Value),
            ("timeout_is_transient", Node::Value),
            ("max_transient_ms", Node::Value),
            ("pause_min_keys", Node::Value),
        ]),
    ),
    (
        "health",
        Node::Table(&[("max_lag", Node::Value), ("max_pending_age_ms", Node::Value)]),
    ),
    (
        "outbox",
        Node::Table(&[("max_payload_bytes", Node::Value), ("schema", Node::Value)]),
    ),
    ("categories", Node::Named(&[("partitions", Node::Value)])),
    (
        "redis",
        Node::Table(&[
            ("url", Node::Value),
            ("tls_ca_file", Node::Value),
            ("tls_cert_file", Node::Value),
            ("tls_key_file", Node::Value),
        ]),
    ),
    ("cli", Node::Table(&[("warn_partitions", Node::Value)])),
    (
        "relay",
        Node::Table(&[
            ("lease_ttl_ms", Node::Value),
            ("poll_ms", Node::Value),
            ("retention_s", Node::Value),
            ("batch_bytes", Node::Value),
            ("publish_call_bytes", Node::Value),
            ("max_row_bytes", Node::Value),
        ]),
    ),
];

/// The keys of `[server.partitioning]` that this crate reads.
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

/// Rejects a key of `table` (at dotted path `path`) that `schema` does not
/// list, and a table where a value belongs or the reverse.
pub(super) fn check_keys(
    table: &toml::Table,
    path: &str,
    schema: &'static [(&'static str, Node)],
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
