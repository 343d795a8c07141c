//! Process managers on the inline broker: start, continue, persist, skip,
//! and one instance never running twice at once.

use crate::support;

use std::sync::Arc;

use ordo_core::contract::handler::{HandlerContext, HandlerKind};
use ordo_core::contract::policy::{ProcessingContext, SequencingPolicy};
use ordo_core::{Config, CorrelationPolicy, Domain, Envelope, InMemoryProcessStore, ProcessStore};
use support::*;

spec!(PlainFulfillment => process_manager("PlainFulfillment", false, vec![
    pm_on::<OrderPlaced>(extractor!(OrderPlaced, order_id), true),
    pm_on::<OrderShipped>(extractor!(OrderShipped, order_id), false),
]));
spec!(KeyedFulfillment => process_manager("KeyedFulfillment", true, vec![
    pm_on::<OrderPlaced>(extractor!(OrderPlaced, order_id), true),
    pm_on::<OrderShipped>(extractor!(OrderShipped, order_id), false),
]));
spec!(ClientProjector => handler("ClientProjector", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
]));

type Plain = Fulfillment<PlainFulfillment>;
type Keyed = Fulfillment<KeyedFulfillment>;

fn fast_failures() -> Config {
    Config::from_toml_str("[server.partitioning]\nmax_retries = 0").unwrap()
}

/// An event to raise: the manager handles two types.
enum Raise {
    Placed(OrderPlaced),
    Shipped(OrderShipped),
}

async fn commit(domain: &Domain, events: Vec<Raise>) {
    let mut uow = domain.unit_of_work();
    for event in events {
        match event {
            Raise::Placed(event) => uow.raise(event).unwrap(),
            Raise::Shipped(event) => uow.raise(event).unwrap(),
        }
    }
    uow.commit().await.unwrap();
}

fn raise_placed(order: &str, client: &str, amount: u64) -> Raise {
    Raise::Placed(placed(order, client, amount))
}

fn raise_shipped(order: &str, client: &str, amount: u64) -> Raise {
    Raise::Shipped(shipped(order, client, amount))
}

fn state(store: &InMemoryProcessStore, manager: &str, order: &str) -> Option<serde_json::Value> {
    store
        .state(manager, order)
        .map(|json| serde_json::from_str(&json).unwrap())
}

#[tokio::test]
async fn a_start_message_creates_an_instance_that_later_messages_continue() {
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .process_store(store.clone())
        .process_manager::<Plain>()
        .init()
        .unwrap();
    commit(&domain, vec![raise_placed("pm-start-1", "c-1", 10)]).await;
    domain.settle().await.unwrap();
    let started = state(&store, "PlainFulfillment", "pm-start-1").expect("started");
    assert_eq!(started["placed"], 1);
    assert_eq!(started["order_id"], "pm-start-1");

    commit(&domain, vec![raise_shipped("pm-start-1", "c-1", 11)]).await;
    domain.settle().await.unwrap();
    let continued = state(&store, "PlainFulfillment", "pm-start-1").unwrap();
    assert_eq!(
        (continued["placed"].as_u64(), continued["shipped"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(continued["amounts"], serde_json::json!([10, 11]));
    assert!(domain.inline_broker().unwrap().failures().is_empty());
}

#[tokio::test]
async fn a_message_for_an_instance_that_never_started_is_skipped() {
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .process_store(store.clone())
        .process_manager::<Plain>()
        .init()
        .unwrap();
    commit(&domain, vec![raise_shipped("pm-skip-1", "c-1", 1)]).await;
    domain.settle().await.unwrap();
    assert!(store.is_empty());
    assert!(
        domain.inline_broker().unwrap().failures().is_empty(),
        "skipping is not a failure"
    );
}

#[tokio::test]
async fn a_partitioned_manager_correlates_by_the_validated_partition_key() {
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .process_store(store.clone())
        .process_manager::<Keyed>()
        .init()
        .unwrap();
    assert_eq!(domain.partition_key_field("order"), Some("order_id"));
    commit(
        &domain,
        vec![
            raise_placed("pm-keyed-1", "c-1", 1),
            raise_shipped("pm-keyed-1", "c-1", 2),
        ],
    )
    .await;
    domain.settle().await.unwrap();
    let saved = state(&store, "KeyedFulfillment", "pm-keyed-1").unwrap();
    assert_eq!(saved["amounts"], serde_json::json!([1, 2]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_instance_never_handles_two_messages_at_once() {
    // A client-keyed projector shares the category: the manager still
    // correlates by order_id (read from the payload), not the partition key.
    let store = InMemoryProcessStore::new();
    let probe = Probe::new("client_id").shared();
    let domain = Domain::builder()
        .process_store(store.clone())
        .event_handler(Recorder::<ClientProjector>::new(&probe))
        .process_manager::<Plain>()
        .init()
        .unwrap();
    let overlaps_before = pm_overlaps();
    let mut events = vec![
        raise_placed("pm-serial-1", "c-1", 0),
        raise_placed("pm-serial-2", "c-2", 0),
    ];
    for amount in 1..=30 {
        events.push(raise_shipped("pm-serial-1", "c-1", amount));
        events.push(raise_shipped("pm-serial-2", "c-2", amount));
    }
    commit(&domain, events).await;
    domain.settle().await.unwrap();
    assert_eq!(pm_overlaps(), overlaps_before, "one instance ran twice at once");
    for order in ["pm-serial-1", "pm-serial-2"] {
        let saved = state(&store, "PlainFulfillment", order).unwrap();
        // A lost update (two runs from one loaded state) would drop shipments.
        assert_eq!(saved["shipped"], 30, "{order}");
        assert_eq!(
            saved["amounts"],
            serde_json::json!((0..=30).collect::<Vec<_>>()),
            "{order}"
        );
    }
}

#[tokio::test]
async fn a_message_without_a_correlation_value_is_a_recorded_failure() {
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .config(fast_failures())
        .process_store(store.clone())
        .process_manager::<Plain>()
        .init()
        .unwrap();
    // An envelope whose payload lacks `order_id`, published directly.
    let mut envelope = Envelope::new(&placed("ignored", "c-1", 1)).unwrap();
    envelope.payload = r#"{"client_id":"c-1","amount":1}"#.into();
    let subscription = domain.subscriptions()[0].clone();
    let error = subscription
        .handler
        .handle(&envelope, &HandlerContext::new(&envelope))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("correlate field `order_id` is missing or null"),
        "{error}"
    );
    assert!(store.is_empty());
}

#[tokio::test]
async fn a_handler_failure_leaves_the_saved_state_untouched() {
    let store = InMemoryProcessStore::new();
    let domain = Domain::builder()
        .config(fast_failures())
        .process_store(store.clone())
        .process_manager::<Plain>()
        .init()
        .unwrap();
    commit(&domain, vec![raise_placed("pm-fail-1", "c-1", 1)]).await;
    domain.settle().await.unwrap();
    let before = store.state("PlainFulfillment", "pm-fail-1").unwrap();
    // A payload the manager cannot decode makes its handler fail.
    let mut envelope = Envelope::new(&shipped("pm-fail-1", "c-1", 2)).unwrap();
    envelope.payload = r#"{"order_id":"pm-fail-1","amount":"not a number"}"#.into();
    let handler = &domain.subscriptions()[0].handler;
    assert!(
        handler
            .handle(&envelope, &HandlerContext::new(&envelope))
            .await
            .is_err()
    );
    assert_eq!(store.state("PlainFulfillment", "pm-fail-1").unwrap(), before);
}

#[tokio::test]
async fn the_in_memory_store_round_trips_states() {
    let store = InMemoryProcessStore::new();
    let envelope = Envelope::new(&placed("o-1", "c-1", 1)).unwrap();
    let ctx = HandlerContext::new(&envelope);
    assert_eq!(store.load("m", "o-1").await.unwrap(), None);
    store.save("m", "o-1", "{\"n\":1}".into(), &ctx).await.unwrap();
    store.save("m", "o-1", "{\"n\":2}".into(), &ctx).await.unwrap();
    assert_eq!(
        store.load("m", "o-1").await.unwrap().as_deref(),
        Some("{\"n\":2}")
    );
    assert_eq!(store.load("other", "o-1").await.unwrap(), None);
    assert_eq!(store.len(), 1);
}

#[test]
fn the_correlation_policy_reads_the_correlate_field() {
    let domain = Domain::builder().process_manager::<Plain>().init().unwrap();
    let policy = CorrelationPolicy::new(Arc::clone(&domain.subscriptions()[0].descriptor));
    let envelope = Envelope::new(&placed("o-42", "c-1", 1)).unwrap();
    let id = policy.sequence_identifier(&envelope, &ProcessingContext::new("PlainFulfillment"));
    assert_eq!(id.unwrap().as_str(), "o-42");
    let unhandled = Envelope::new(&CustomerRegistered {
        customer_id: "cu-1".into(),
        amount: 1,
    })
    .unwrap();
    assert!(
        policy
            .sequence_identifier(&unhandled, &ProcessingContext::new("PlainFulfillment"))
            .is_none()
    );
}
