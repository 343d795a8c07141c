//! Key validation: properties and examples. (The names a broker composes
//! from keys are tested with the broker: ordo-redis `keys`.)

use ordo_core::contract::key::{DEFAULT_BACKFILL_SUFFIX, DLQ_TOKEN, MAX_KEY_LEN};
use ordo_core::{InvalidKey, KeyRule, KeyRules};
use proptest::prelude::*;

/// Whether `value` is one of the values the default rules reserve.
fn reserved(value: &str, suffix: &str) -> bool {
    value == DLQ_TOKEN
        || value == suffix
        || (value.len() > 4 && value.starts_with("__") && value.ends_with("__"))
}

/// Typical identifiers: letters, digits, `-`, `_`, `.`, `@`, `/`, `+`; never a reserved value.
fn identifier_key() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_.@/+-]{1,100}".prop_filter("reserved", |k| !reserved(k, DEFAULT_BACKFILL_SUFFIX))
}

/// Any text without `:` or control characters that fits the length limit
/// and is not reserved (spaces and `/` included).
fn any_valid_key() -> impl Strategy<Value = String> {
    "[^:\\p{Cc}]{1,60}".prop_filter("valid", |k| {
        k.len() <= MAX_KEY_LEN && !reserved(k, DEFAULT_BACKFILL_SUFFIX)
    })
}

/// Values that break at least one rule, of every kind.
fn rejected_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        ".{0,40}:.{0,300}",
        "[^:]{256,300}".prop_filter("too long", |k| k.len() > MAX_KEY_LEN),
        Just(DLQ_TOKEN.to_owned()),
        Just(DEFAULT_BACKFILL_SUFFIX.to_owned()),
        "__[^:]{1,40}__",
        "[^:]{0,20}[\\p{Cc}][^:]{0,20}",
    ]
}

fn field() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,20}"
}

fn rule_of(rules: &KeyRules, value: Option<&str>) -> KeyRule {
    rules
        .validate("f", value)
        .expect_err("value should be rejected")
        .rule
}

/// The value as the error message shows it: quoted, and cut at 64 bytes.
fn shown_value(value: &str) -> String {
    if value.len() <= 64 {
        return format!("{value:?}");
    }
    let cut = (0..=64).rev().find(|i| value.is_char_boundary(*i)).unwrap_or(0);
    format!("{:?}…", &value[..cut])
}

proptest! {
    #[test]
    fn identifier_keys_are_accepted_unchanged(key in identifier_key()) {
        prop_assert_eq!(KeyRules::default().validate("client_id", Some(&key)), Ok(key.clone()));
    }

    #[test]
    fn any_short_colon_free_unreserved_text_is_accepted(key in any_valid_key()) {
        prop_assert_eq!(KeyRules::default().validate("client_id", Some(&key)), Ok(key.clone()));
    }

    #[test]
    fn anything_with_a_colon_is_rejected(before in ".{0,40}", after in ".{0,300}") {
        let value = format!("{before}:{after}");
        prop_assert_eq!(rule_of(&KeyRules::default(), Some(&value)), KeyRule::ContainsColon);
    }

    #[test]
    fn keys_longer_than_the_limit_are_rejected(
        key in prop_oneof!["[a-z0-9]{256,400}", "[é]{128,200}", "[\u{1F600}-\u{1F64F}]{64,80}"]
    ) {
        prop_assume!(key.len() > MAX_KEY_LEN);
        prop_assert_eq!(rule_of(&KeyRules::default(), Some(&key)), KeyRule::TooLong { len: key.len() });
    }

    #[test]
    fn a_configured_suffix_is_reserved_and_the_default_one_is_not(suffix in "[a-z]{1,20}") {
        prop_assume!(suffix != DLQ_TOKEN);
        let rules = KeyRules::with_backfill_suffix(suffix.clone());
        prop_assert_eq!(rule_of(&rules, Some(&suffix)), KeyRule::ReservedLaneToken);
        prop_assert_eq!(rule_of(&rules, Some(DLQ_TOKEN)), KeyRule::ReservedLaneToken);
        if suffix != DEFAULT_BACKFILL_SUFFIX {
            prop_assert_eq!(
                rules.validate("f", Some(DEFAULT_BACKFILL_SUFFIX)),
                Ok(DEFAULT_BACKFILL_SUFFIX.to_owned())
            );
        }
    }

    #[test]
    fn sentinel_forms_are_rejected(name in "[A-Za-z0-9_.-]{1,40}") {
        let value = format!("__{name}__");
        prop_assert_eq!(rule_of(&KeyRules::default(), Some(&value)), KeyRule::ReservedSentinel);
    }

    #[test]
    fn every_rejection_names_the_field_and_the_value(field in field(), value in rejected_value()) {
        let error = KeyRules::default().validate(&field, Some(&value)).expect_err("generated to be rejected");
        let message = error.to_string();
        prop_assert!(message.contains(&format!("`{field}`")), "{message}");
        prop_assert!(message.contains(&shown_value(&value)), "{message}");
        prop_assert!(message.contains(&error.rule.to_string()), "{message}");
        prop_assert_eq!(error.field, field);
        prop_assert_eq!(error.value, Some(value));
    }
}

#[test]
fn null_and_empty_values_are_rejected() {
    let rules = KeyRules::default();
    let null = rules.validate("client_id", None).unwrap_err();
    assert_eq!(null.rule, KeyRule::Null);
    assert_eq!(null.value, None);
    assert_eq!(
        null.to_string(),
        "invalid partition key in field `client_id` (value null): a partition key must not be null"
    );
    let empty = rules.validate("client_id", Some("")).unwrap_err();
    assert_eq!(empty.rule, KeyRule::Empty);
    assert_eq!(
        empty.to_string(),
        "invalid partition key in field `client_id` (value \"\"): a partition key must not be empty"
    );
}

#[test]
fn a_colon_is_rejected() {
    let error = KeyRules::default()
        .validate("client_id", Some("a:b"))
        .unwrap_err();
    assert_eq!(error.rule, KeyRule::ContainsColon);
    assert!(error.to_string().contains("\"a:b\""), "{error}");
    assert_eq!(rule_of(&KeyRules::default(), Some(":")), KeyRule::ContainsColon);
}

#[test]
fn control_characters_are_rejected_spaces_and_slashes_are_not() {
    let rules = KeyRules::default();
    for bad in [
        "a\nb",
        "line\n",
        "\r",
        "tab\there",
        "nul\0",
        "esc\u{1b}[0m",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        assert_eq!(rule_of(&rules, Some(bad)), KeyRule::ControlCharacter, "{bad:?}");
    }
    let error = rules.validate("client_id", Some("a\nb")).unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid partition key in field `client_id` (value \"a\\nb\"): a partition key must not contain \
         control characters (such as a newline or a tab)"
    );
    for fine in [
        "a b",
        "  padded  ",
        "tenant/42",
        "/",
        "a/b/c",
        "é ü",
        "emoji \u{1F600}",
    ] {
        assert_eq!(rules.validate("f", Some(fine)), Ok(fine.to_owned()), "{fine:?}");
    }
}

#[test]
fn the_length_limit_is_in_bytes_and_inclusive() {
    let rules = KeyRules::default();
    let longest = "k".repeat(MAX_KEY_LEN);
    assert_eq!(rules.validate("f", Some(&longest)), Ok(longest.clone()));
    let too_long = "k".repeat(MAX_KEY_LEN + 1);
    assert_eq!(rule_of(&rules, Some(&too_long)), KeyRule::TooLong { len: 256 });
    // 128 two-byte characters: 128 chars, 256 bytes.
    let wide = "é".repeat(128);
    assert_eq!(rule_of(&rules, Some(&wide)), KeyRule::TooLong { len: 256 });
    let error = rules.validate("f", Some(&too_long)).unwrap_err();
    assert!(
        error.to_string().contains("at most 255 bytes (this one is 256)"),
        "{error}"
    );
    assert!(
        error.to_string().contains('…'),
        "long values are shortened: {error}"
    );
}

#[test]
fn lane_tokens_are_reserved() {
    let rules = KeyRules::default();
    assert_eq!(rules.backfill_suffix(), "backfill");
    assert_eq!(rule_of(&rules, Some("dlq")), KeyRule::ReservedLaneToken);
    assert_eq!(rule_of(&rules, Some("backfill")), KeyRule::ReservedLaneToken);
    // Only the exact tokens: stream names are case-sensitive.
    assert_eq!(rules.validate("f", Some("DLQ")), Ok("DLQ".to_owned()));
    assert_eq!(rules.validate("f", Some("dlq2")), Ok("dlq2".to_owned()));

    let custom = KeyRules::with_backfill_suffix("low");
    assert_eq!(rule_of(&custom, Some("low")), KeyRule::ReservedLaneToken);
    assert_eq!(rule_of(&custom, Some("dlq")), KeyRule::ReservedLaneToken);
    assert_eq!(custom.validate("f", Some("backfill")), Ok("backfill".to_owned()));
}

#[test]
fn sentinels_are_reserved() {
    let rules = KeyRules::default();
    for sentinel in ["__partitions__", "__sequential__", "__x__", "_____"] {
        assert_eq!(
            rule_of(&rules, Some(sentinel)),
            KeyRule::ReservedSentinel,
            "{sentinel}"
        );
    }
    for ordinary in ["__x", "x__", "_x_", "__", "___", "a__b__", "__a__b"] {
        assert_eq!(
            rules.validate("f", Some(ordinary)),
            Ok(ordinary.to_owned()),
            "{ordinary}"
        );
    }
}

#[test]
fn the_first_broken_rule_is_reported() {
    // A colon wins over length and reservation: the value could never name a stream.
    let long_with_colon = format!("{}:", "k".repeat(300));
    assert_eq!(
        rule_of(&KeyRules::default(), Some(&long_with_colon)),
        KeyRule::ContainsColon
    );
    assert_eq!(
        rule_of(&KeyRules::default(), Some("__a:b__")),
        KeyRule::ContainsColon
    );
}

#[test]
fn invalid_key_is_a_std_error() {
    fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
    assert_error::<InvalidKey>();
}
