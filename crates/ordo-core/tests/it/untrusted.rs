//! Stream content is untrusted input: whatever bytes arrive where an
//! envelope should be, decoding fails with an error (which halts the
//! partition with that reason) or yields an envelope; it never panics, and
//! a decoded envelope's payload decodes or fails the same way.
//!
//! Bounded property tests (proptest's default of 256 cases each, a few
//! seconds in all), run by the normal test suite.

use ordo_core::{Envelope, MessageKind, Metadata};
use proptest::prelude::*;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[expect(dead_code, reason = "only decoded, to exercise the payload decoder")]
struct Placed {
    order_id: String,
    amount: i64,
}

fn valid() -> String {
    with_payload(r#"{"order_id":"o-1","amount":3}"#)
}

fn with_payload(payload: &str) -> String {
    serde_json::to_string(&Envelope {
        id: "m-1".into(),
        kind: MessageKind::Event,
        type_name: "Placed".into(),
        category: "order".into(),
        aggregate_id: Some("o-1".into()),
        routing_key: None,
        partition_key: Some("c-1".into()),
        metadata: Metadata::new(),
        occurred_at: None,
        correlation_id: None,
        causation_id: None,
        payload: payload.into(),
    })
    .expect("serialisable")
}

/// Decodes `text` as the brokers do, then the payload as a handler would.
fn decode(text: &str) {
    if let Ok(envelope) = serde_json::from_str::<Envelope>(text) {
        let decoded = envelope.decode::<Placed>();
        if let Err(error) = decoded {
            // The error names the message, for the halt reason.
            assert!(error.to_string().contains(&envelope.id), "{error}");
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics_the_decoder(text in ".{0,400}") {
        decode(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        decode(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn a_mangled_envelope_never_panics_the_decoder(
        cut in 0usize..400, at in 0usize..400, byte in any::<u8>()
    ) {
        let mut bytes = valid().into_bytes();
        let at = at % bytes.len();
        bytes[at] = byte;
        bytes.truncate(cut.max(1));
        decode(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn any_payload_text_comes_back_as_it_was_sent(payload in "\\PC{0,200}") {
        let envelope: Envelope = serde_json::from_str(&with_payload(&payload)).expect("a valid envelope");
        prop_assert_eq!(&*envelope.payload, payload.as_str());
    }

    #[test]
    fn deeply_nested_payloads_are_refused_not_overflowed(depth in 129usize..5_000) {
        let payload = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let envelope: Envelope = serde_json::from_str(&with_payload(&payload)).expect("a valid envelope");
        // Past the decoder's recursion limit (128): an error, not a stack overflow.
        prop_assert!(envelope.decode::<serde_json::Value>().is_err());
    }
}

#[test]
fn a_payload_that_is_not_text_is_refused_naming_what_was_expected() {
    let mut envelope: serde_json::Value = serde_json::from_str(&valid()).expect("valid JSON");
    envelope["payload"] = serde_json::json!({"order_id": "o-1", "amount": 3});
    let text = envelope.to_string();
    let error = serde_json::from_str::<Envelope>(&text).expect_err("a payload that is an object");
    assert!(error.to_string().contains("expected a string"), "{error}");
}
