//! The unit of work: key extraction and validation at commit, atomic
//! appends, metadata, lanes, and routing through the domain.

use crate::support;

use std::sync::Arc;

use ordo_core::contract::broker::Capabilities;
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::{KeyRule, Lane};
use ordo_core::{CommitError, Config, Domain, InMemoryOutbox, OutboxStatus};
use support::*;

spec!(ByClient => handler("ByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
    on::<OrderRenamed>(Some(extractor!(OrderRenamed, client_id))),
]));

struct Fixture {
    domain: Domain,
    outbox: InMemoryOutbox,
    broker: RecordingBroker,
}

fn fixture_with(broker: RecordingBroker, config: Config) -> Fixture {
    let outbox = InMemoryOutbox::new();
    let probe = Probe::new("client_id").shared();
    let domain = Domain::builder()
        .broker(broker.clone())
        .outbox(outbox.clone())
        .config(config)
        .event_handler(Recorder::<ByClient>::new(&probe))
        .init()
        .unwrap();
    Fixture {
        domain,
        outbox,
        broker,
    }
}

fn fixture() -> Fixture {
    fixture_with(RecordingBroker::partitioning(), Config::default())
}

#[tokio::test]
async fn commit_stores_the_validated_key_on_row_and_envelope() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.raise(CustomerRegistered {
        customer_id: "cu-1".into(),
        amount: 2,
    })
    .unwrap();
    assert_eq!(uow.len(), 2);
    let receipt = uow.commit().await.unwrap();

    let rows = f.outbox.rows();
    assert_eq!(receipt.row_ids, rows.iter().map(|r| r.id).collect::<Vec<_>>());
    assert_eq!(
        receipt.message_ids,
        rows.iter().map(|r| r.envelope.id.clone()).collect::<Vec<_>>()
    );
    assert_eq!(rows[0].partition_key.as_deref(), Some("client-1"));
    assert_eq!(rows[0].envelope.partition_key.as_deref(), Some("client-1"));
    assert_eq!(rows[0].envelope.aggregate_id.as_deref(), Some("o-1"));
    assert_eq!(rows[1].partition_key, None, "customer is not partitioned");
    assert!(
        rows.iter()
            .all(|r| r.status == OutboxStatus::Pending && r.lane == Lane::Primary)
    );
}

#[tokio::test]
async fn an_oversized_payload_is_refused_at_commit_and_nothing_is_written() {
    let config = Config::from_toml_str("[outbox]\nmax_payload_bytes = 200\n").unwrap();
    let f = fixture_with(RecordingBroker::partitioning(), config);
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.raise(CustomerRegistered {
        customer_id: "x".repeat(300),
        amount: 2,
    })
    .unwrap();
    let error = uow.commit().await.unwrap_err();
    let CommitError::PayloadTooLarge {
        type_name,
        size,
        limit,
        ..
    } = &error
    else {
        panic!("expected PayloadTooLarge, got {error:?}");
    };
    assert_eq!((type_name.as_str(), *limit), ("CustomerRegistered", 200));
    assert!(*size > 300, "{size}");
    let text = error.to_string();
    assert!(
        text.contains("CustomerRegistered") && text.contains("max_payload_bytes"),
        "{text}"
    );
    assert!(f.outbox.rows().is_empty(), "nothing may be written");

    // At the limit, or under it, the same unit commits.
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-2", "client-1", 1)).unwrap();
    uow.commit().await.unwrap();
    assert_eq!(f.outbox.rows().len(), 1);
}

#[test]
fn the_payload_limit_defaults_to_four_mib_and_must_be_positive() {
    assert_eq!(Config::default().outbox().max_payload_bytes(), 4 * 1024 * 1024);
    for bad in ["0", "-1"] {
        let error = Config::from_toml_str(&format!("[outbox]\nmax_payload_bytes = {bad}\n")).unwrap_err();
        assert!(error.to_string().contains("outbox.max_payload_bytes"), "{error}");
    }
    let error = Config::from_toml_str("[outbox]\nmax_payload = 10\n").unwrap_err();
    assert!(error.to_string().contains("outbox.max_payload"), "{error}");
}

#[tokio::test]
async fn one_bad_key_fails_the_whole_commit_and_writes_nothing() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.raise(placed("o-2", "bad:key", 2)).unwrap();
    uow.raise(placed("o-3", "client-3", 3)).unwrap();
    let error = uow.commit().await.unwrap_err();
    assert!(
        matches!(&error, CommitError::InvalidKey { key, .. } if key.rule == KeyRule::ContainsColon),
        "{error:?}"
    );
    assert!(
        f.outbox.rows().is_empty(),
        "nothing of the failed commit entered the outbox"
    );
    assert_eq!(f.domain.publish_pending().await.unwrap().published, 0);
    assert!(f.broker.published().is_empty());
}

#[tokio::test]
async fn each_key_rule_surfaces_with_field_value_and_rule() {
    let f = fixture();
    let long = "k".repeat(256);
    let cases: [(&str, KeyRule, &str); 6] = [
        ("", KeyRule::Empty, "must not be empty"),
        ("a:b", KeyRule::ContainsColon, "must not contain ':'"),
        ("dlq", KeyRule::ReservedLaneToken, "reserved lane token"),
        ("backfill", KeyRule::ReservedLaneToken, "reserved lane token"),
        ("__partitions__", KeyRule::ReservedSentinel, "`__name__`"),
        (&long, KeyRule::TooLong { len: 256 }, "at most 255 bytes"),
    ];
    for (value, rule, text) in cases {
        let mut uow = f.domain.unit_of_work();
        uow.raise(placed("o-1", value, 1)).unwrap();
        let error = uow.commit().await.unwrap_err();
        let CommitError::InvalidKey {
            message_id,
            type_name,
            key,
        } = &error
        else {
            panic!("{value:?}: {error:?}");
        };
        assert_eq!(
            (key.field.as_str(), key.value.as_deref(), &key.rule),
            ("client_id", Some(value), &rule)
        );
        assert_eq!(type_name, "OrderPlaced");
        let message = error.to_string();
        for needle in [message_id.as_str(), "OrderPlaced", "`client_id`", text] {
            assert!(message.contains(needle), "{needle} missing from: {message}");
        }
    }
    assert!(f.outbox.rows().is_empty());
}

#[tokio::test]
async fn types_no_handler_handles_take_their_key_from_the_payload() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(OrderNoted {
        order_id: "o-1".into(),
        client_id: Some("client-9".into()),
    })
    .unwrap();
    uow.commit().await.unwrap();
    assert_eq!(f.outbox.rows()[0].partition_key.as_deref(), Some("client-9"));

    let mut uow = f.domain.unit_of_work();
    uow.raise(OrderNoted {
        order_id: "o-2".into(),
        client_id: None,
    })
    .unwrap();
    let error = uow.commit().await.unwrap_err();
    assert!(
        matches!(&error, CommitError::InvalidKey { key, .. } if key.rule == KeyRule::Null && key.value.is_none()),
        "{error:?}"
    );
    assert!(error.to_string().contains("(value null)"), "{error}");
}

#[tokio::test]
async fn a_handlers_typed_extractor_is_used_when_there_is_one() {
    // The JSON field is `clientRef`: only the typed extractor finds `client_id`.
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(OrderRenamed {
        order_id: "o-1".into(),
        client_id: "client-7".into(),
    })
    .unwrap();
    uow.commit().await.unwrap();
    assert_eq!(f.outbox.rows()[0].partition_key.as_deref(), Some("client-7"));
}

#[tokio::test]
async fn a_key_field_holding_an_object_is_refused() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(OrderTagged {
        order_id: "o-1".into(),
        client_id: [("a".to_owned(), "b".to_owned())].into(),
    })
    .unwrap();
    let error = uow.commit().await.unwrap_err();
    assert!(matches!(
        error,
        CommitError::UnsupportedKeyValue {
            field: "client_id",
            found: "a JSON object",
            ..
        }
    ));
    assert!(f.outbox.rows().is_empty());
}

#[tokio::test]
async fn an_unserializable_event_is_refused_when_raised() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    let error = uow
        .raise(Unserializable {
            order_id: "o-1".into(),
            bad: [((1, 2), 3)].into(),
        })
        .unwrap_err();
    assert!(
        matches!(
            error,
            CommitError::Serialization {
                type_name: "Unserializable",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        chain(&error).starts_with("cannot serialize event `Unserializable`: "),
        "{}",
        chain(&error)
    );
    assert!(uow.is_empty());
}

#[tokio::test]
async fn metadata_applies_to_every_event_of_the_unit_of_work() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.with_metadata("tenant", "acme").with_metadata("trace", "t-1");
    uow.raise(placed("o-2", "client-1", 2)).unwrap();
    uow.commit().await.unwrap();
    for row in f.outbox.rows() {
        assert_eq!(
            row.envelope.metadata.get("tenant").map(String::as_str),
            Some("acme")
        );
        assert_eq!(
            row.envelope.metadata.get("trace").map(String::as_str),
            Some("t-1")
        );
    }
}

/// Keys starting with `ordo.` are Ordo's own (the outbox position of a
/// handled message): a unit of work given one is refused, naming it, and
/// writes nothing, whichever way it is committed; `with_user_metadata`
/// copies everything else.
#[tokio::test]
async fn reserved_metadata_is_refused_naming_the_key_and_user_metadata_is_copied() {
    let f = fixture();
    let handled: ordo_core::Metadata = [
        ("ordo.position", "7"),
        ("ordo.position.scope", "order:client-1"),
        ("ordo.anything-later", "x"),
        ("tenant", "acme"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for reserved in ["ordo.position.scope", "ordo.anything-later"] {
        let mut uow = f.domain.unit_of_work();
        uow.raise(placed("o-1", "client-1", 1)).unwrap();
        uow.with_metadata("tenant", "acme").with_metadata(reserved, "x");
        let error = uow.validated_rows().unwrap_err();
        assert!(
            matches!(&error, CommitError::ReservedMetadata { key } if key == reserved),
            "{error:?}"
        );
        assert!(
            error.to_string().contains(&format!("`{reserved}` is reserved")),
            "{error}"
        );
        let error = uow.commit().await.unwrap_err();
        assert!(matches!(error, CommitError::ReservedMetadata { .. }), "{error:?}");
    }
    assert!(f.outbox.rows().is_empty(), "a refused commit wrote nothing");

    let mut uow = f.domain.unit_of_work();
    uow.with_user_metadata(&handled);
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.commit().await.unwrap();
    let rows = f.outbox.rows();
    let copied: Vec<&String> = rows[0].envelope.metadata.keys().collect();
    assert_eq!(copied, ["tenant"]);
}

#[tokio::test]
async fn dropping_an_uncommitted_unit_of_work_discards_its_events() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    drop(uow);
    assert!(f.outbox.rows().is_empty());
    let empty = f.domain.unit_of_work().commit().await.unwrap();
    assert!(empty.row_ids.is_empty());
}

#[tokio::test]
async fn commits_are_routed_to_partition_streams() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.raise(placed("o-2", "client-2", 2)).unwrap();
    uow.raise(CustomerRegistered {
        customer_id: "cu-1".into(),
        amount: 3,
    })
    .unwrap();
    uow.commit().await.unwrap();
    let report = f.domain.publish_pending().await.unwrap();
    assert_eq!(report.published, 3);
    assert_eq!(
        f.broker.streams(),
        vec!["order:client-1", "order:client-2", "customer"]
    );
}

#[tokio::test]
async fn backfill_events_use_the_backfill_lane_when_lanes_are_enabled() {
    let config = Config::from_toml_str("[server.priority_lanes]\nenabled = true").unwrap();
    let f = fixture_with(RecordingBroker::partitioning(), config);
    let mut uow = f.domain.unit_of_work();
    uow.raise_backfill(placed("o-1", "client-1", 1)).unwrap();
    uow.raise(placed("o-2", "client-1", 2)).unwrap();
    uow.commit().await.unwrap();
    assert_eq!(f.outbox.rows()[0].lane, Lane::Backfill);
    f.domain.publish_pending().await.unwrap();
    assert_eq!(
        f.broker.streams(),
        vec!["order:client-1:backfill", "order:client-1"]
    );
}

#[tokio::test]
async fn backfill_events_fall_back_to_the_primary_lane_when_lanes_are_disabled() {
    let f = fixture();
    let mut uow = f.domain.unit_of_work();
    uow.raise_backfill(placed("o-1", "client-1", 1)).unwrap();
    uow.commit().await.unwrap();
    assert_eq!(f.outbox.rows()[0].lane, Lane::Primary);
    f.domain.publish_pending().await.unwrap();
    assert_eq!(f.broker.streams(), vec!["order:client-1"]);
}

#[tokio::test]
async fn the_configured_backfill_suffix_is_a_reserved_key() {
    let config = Config::from_toml_str("[server.priority_lanes]\nbackfill_suffix = \"slow\"").unwrap();
    let f = fixture_with(RecordingBroker::partitioning(), config);
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "slow", 1)).unwrap();
    let error = uow.commit().await.unwrap_err();
    assert!(matches!(error, CommitError::InvalidKey { key, .. } if key.rule == KeyRule::ReservedLaneToken));
}

#[tokio::test]
async fn brokers_without_partitioning_get_the_base_stream() {
    let broker = RecordingBroker::new("ordered", Capabilities::ORDERED_IN_PROCESS);
    let f = fixture_with(broker, Config::default());
    let mut uow = f.domain.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.commit().await.unwrap();
    f.domain.publish_pending().await.unwrap();
    let published = f.broker.published();
    assert_eq!(f.broker.streams(), vec!["order"]);
    assert_eq!(published[0].envelope.partition_key.as_deref(), Some("client-1"));
}

#[tokio::test]
async fn a_clone_of_the_domain_shares_the_outbox() {
    let f = fixture();
    let clone = f.domain.clone();
    let mut uow = clone.unit_of_work();
    uow.raise(placed("o-1", "client-1", 1)).unwrap();
    uow.commit().await.unwrap();
    assert_eq!(f.outbox.rows().len(), 1);
    assert!(Arc::ptr_eq(f.domain.outbox(), clone.outbox()));
}
