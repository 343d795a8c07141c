//! One top-level field of a JSON payload, read as text without loss.
//!
//! The fallback of key extraction when no typed extractor knows the message
//! type, and what [`PropertyPolicy`](crate::contract::policy::PropertyPolicy) reads.
//! Numbers keep their exact text (`1180591620717411303424` stays that, it
//! does not become a float), so two keys differ here exactly when they differ
//! in the payload.

use std::collections::HashMap;

use serde_json::value::RawValue;

/// What a payload holds in one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldValue {
    /// The payload has no such field.
    Missing,
    /// `null`.
    Null,
    /// A string, unescaped.
    Text(String),
    /// An integer, as written.
    Integer(String),
    /// A number with a fraction or exponent, as written.
    Float(String),
    /// `true` or `false`.
    Bool(bool),
    /// An array or an object: `"a JSON array"`, `"a JSON object"`.
    Composite(&'static str),
}

/// Why a payload's field could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the payload is not a JSON object: {0}")]
pub(crate) struct NotAnObject(pub(crate) String);

/// Reads the top-level field `field` of `payload`.
pub(crate) fn read_field(payload: &str, field: &str) -> Result<FieldValue, NotAnObject> {
    let object: HashMap<String, &RawValue> =
        serde_json::from_str(payload).map_err(|error| NotAnObject(error.to_string()))?;
    let Some(raw) = object.get(field) else {
        return Ok(FieldValue::Missing);
    };
    let text = raw.get();
    Ok(match text.as_bytes().first() {
        Some(b'"') => {
            FieldValue::Text(serde_json::from_str(text).map_err(|error| NotAnObject(error.to_string()))?)
        }
        Some(b'n') => FieldValue::Null,
        Some(b't') => FieldValue::Bool(true),
        Some(b'f') => FieldValue::Bool(false),
        Some(b'[') => FieldValue::Composite("a JSON array"),
        Some(b'{') => FieldValue::Composite("a JSON object"),
        _ if text.bytes().all(|b| b == b'-' || b.is_ascii_digit()) => FieldValue::Integer(text.to_owned()),
        _ => FieldValue::Float(text.to_owned()),
    })
}

impl FieldValue {
    /// The value as a partition key: strings and integers are keys, `null`
    /// is a null key, anything else is refused with what it is (the types
    /// the macros refuse at compile time are refused here too).
    pub(crate) fn into_key(self) -> Result<Option<String>, KeyFieldError> {
        match self {
            Self::Text(text) | Self::Integer(text) => Ok(Some(text)),
            Self::Null => Ok(None),
            Self::Missing => Err(KeyFieldError::Missing),
            Self::Float(_) => Err(KeyFieldError::Unsupported("a floating-point number")),
            Self::Bool(_) => Err(KeyFieldError::Unsupported("a boolean")),
            Self::Composite(what) => Err(KeyFieldError::Unsupported(what)),
        }
    }

    /// The value as sequence text: any scalar, `None` for missing, null,
    /// arrays and objects.
    pub(crate) fn into_text(self) -> Option<String> {
        match self {
            Self::Text(text) | Self::Integer(text) | Self::Float(text) => Some(text),
            Self::Bool(flag) => Some(flag.to_string()),
            Self::Missing | Self::Null | Self::Composite(_) => None,
        }
    }
}

/// Why a field cannot give a partition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyFieldError {
    /// The payload has no such field.
    Missing,
    /// The field holds a value of this kind.
    Unsupported(&'static str),
}

/// Reads `field` of `payload` as a partition key.
pub(crate) fn read_key(payload: &str, field: &str) -> Result<Option<String>, KeyReadError> {
    read_field(payload, field)
        .map_err(KeyReadError::NotAnObject)?
        .into_key()
        .map_err(KeyReadError::Field)
}

/// Why [`read_key`] found no key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyReadError {
    /// The payload is not a JSON object.
    NotAnObject(NotAnObject),
    /// The field is missing or of a kind that cannot be a key.
    Field(KeyFieldError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_keep_their_exact_text() {
        let payload = r#"{"id": 1180591620717411303425, "small": -7}"#;
        assert_eq!(read_key(payload, "id"), Ok(Some("1180591620717411303425".into())));
        assert_eq!(read_key(payload, "small"), Ok(Some("-7".into())));
        assert_ne!(
            read_key(r#"{"id": 1180591620717411303424}"#, "id"),
            read_key(payload, "id")
        );
    }

    #[test]
    fn strings_are_unescaped_and_null_is_a_null_key() {
        assert_eq!(read_key(r#"{"k": "a\u0062"}"#, "k"), Ok(Some("ab".into())));
        assert_eq!(read_key(r#"{"k": null}"#, "k"), Ok(None));
    }

    #[test]
    fn what_the_macros_refuse_is_refused() {
        let unsupported = |payload, what| {
            assert_eq!(
                read_key(payload, "k"),
                Err(KeyReadError::Field(KeyFieldError::Unsupported(what)))
            );
        };
        unsupported(r#"{"k": 1.5}"#, "a floating-point number");
        unsupported(r#"{"k": 1e3}"#, "a floating-point number");
        unsupported(r#"{"k": true}"#, "a boolean");
        unsupported(r#"{"k": [1]}"#, "a JSON array");
        unsupported(r#"{"k": {}}"#, "a JSON object");
        assert_eq!(
            read_key(r#"{"j": 1}"#, "k"),
            Err(KeyReadError::Field(KeyFieldError::Missing))
        );
        assert!(matches!(read_key("[1]", "k"), Err(KeyReadError::NotAnObject(_))));
    }

    #[test]
    fn sequence_text_takes_any_scalar() {
        let text = |payload| read_field(payload, "k").unwrap().into_text();
        assert_eq!(text(r#"{"k": 1.50}"#), Some("1.50".into()));
        assert_eq!(text(r#"{"k": false}"#), Some("false".into()));
        assert_eq!(text(r#"{"k": null}"#), None);
        assert_eq!(text(r#"{"k": []}"#), None);
    }
}
