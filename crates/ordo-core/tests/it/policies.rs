//! The built-in sequencing policies, on hand-built envelopes.

use std::sync::Arc;

use ordo_core::contract::policy::{
    ExtractionPolicy, FullConcurrencyPolicy, HierarchicalPolicy, MetadataPolicy, PartitionKeyPolicy,
    PerAggregatePolicy, ProcessingContext, PropertyPolicy, RoutingKeyPolicy, SEQUENTIAL_SEQUENCE_ID,
    SequenceId, SequencingPolicy, SequentialPolicy, default_command_policy, default_event_policy,
};
use ordo_core::{Aggregate, Command, Envelope, Event, KeyRules, Message, MessageKind, Metadata};
use serde::{Deserialize, Serialize};

struct Order;

impl Aggregate for Order {
    const CATEGORY: &'static str = "order";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
    client_id: u64,
}

impl Message for OrderPlaced {
    const TYPE_NAME: &'static str = "OrderPlaced";
    const KIND: MessageKind = MessageKind::Event;
    const CATEGORY: &'static str = Order::CATEGORY;

    fn aggregate_id(&self) -> Option<String> {
        Some(self.order_id.clone())
    }
}

impl Event for OrderPlaced {
    type Aggregate = Order;
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ShipOrder {
    order_id: String,
    warehouse: String,
}

impl Message for ShipOrder {
    const TYPE_NAME: &'static str = "ShipOrder";
    const KIND: MessageKind = MessageKind::Command;
    const CATEGORY: &'static str = Order::CATEGORY;

    fn aggregate_id(&self) -> Option<String> {
        Some(self.order_id.clone())
    }
}

impl Command for ShipOrder {
    type Aggregate = Order;

    fn routing_key(&self) -> Option<String> {
        Some(self.warehouse.clone())
    }
}

/// An envelope with the given payload and no routing facts.
fn envelope(payload: &str) -> Envelope {
    Envelope {
        id: "m-1".to_owned(),
        kind: MessageKind::Event,
        type_name: "Untyped".to_owned(),
        category: "order".to_owned(),
        aggregate_id: None,
        routing_key: None,
        partition_key: None,
        metadata: Metadata::new(),
        occurred_at: None,
        correlation_id: None,
        causation_id: None,
        payload: payload.into(),
    }
}

fn placed(order_id: &str, client_id: u64) -> OrderPlaced {
    OrderPlaced {
        order_id: order_id.to_owned(),
        client_id,
    }
}

fn id_of(policy: &dyn SequencingPolicy, message: &Envelope) -> Option<String> {
    policy
        .sequence_identifier(message, &ProcessingContext::new("test-handler"))
        .map(|id| id.as_str().to_owned())
}

fn some(text: &str) -> Option<String> {
    Some(text.to_owned())
}

#[test]
fn per_aggregate_uses_the_aggregate_id() {
    let message = Envelope::new(&placed("order-7", 1)).unwrap();
    assert_eq!(id_of(&PerAggregatePolicy, &message), some("order-7"));
    assert_eq!(id_of(&PerAggregatePolicy, &envelope("{}")), None);
}

#[test]
fn property_reads_scalar_top_level_fields_as_text() {
    let message =
        envelope(r#"{"s":"abc","i":42,"neg":-3,"f":1.5,"t":true,"n":null,"o":{"s":"x"},"a":[1],"empty":""}"#);
    let read = |field: &str| id_of(&PropertyPolicy::new(field), &message);
    assert_eq!(read("s"), some("abc"));
    assert_eq!(read("i"), some("42"));
    assert_eq!(read("neg"), some("-3"));
    assert_eq!(read("f"), some("1.5"));
    assert_eq!(read("t"), some("true"));
    assert_eq!(read("empty"), some(""));
    assert_eq!(read("n"), None, "null");
    assert_eq!(read("o"), None, "object");
    assert_eq!(read("a"), None, "array");
    assert_eq!(read("missing"), None, "missing");
    assert_eq!(read("o.s"), None, "no nested paths");
}

#[test]
fn property_on_a_typed_message_and_on_odd_payloads() {
    let message = Envelope::new(&placed("order-7", 99)).unwrap();
    assert_eq!(id_of(&PropertyPolicy::new("client_id"), &message), some("99"));
    assert_eq!(id_of(&PropertyPolicy::new("order_id"), &message), some("order-7"));
    for payload in ["[1,2]", "\"text\"", "7", "not json", ""] {
        assert_eq!(
            id_of(&PropertyPolicy::new("x"), &envelope(payload)),
            None,
            "payload {payload:?}"
        );
    }
    assert_eq!(
        PropertyPolicy::new(String::from("client_id")).field(),
        "client_id"
    );
}

#[test]
fn metadata_reads_one_entry() {
    let mut message = envelope("{}");
    message.metadata.insert("tenant".to_owned(), "acme".to_owned());
    assert_eq!(id_of(&MetadataPolicy::new("tenant"), &message), some("acme"));
    assert_eq!(id_of(&MetadataPolicy::new("region"), &message), None);
    assert_eq!(MetadataPolicy::new("tenant").key(), "tenant");
}

#[test]
fn sequential_gives_every_message_the_reserved_sentinel() {
    let a = Envelope::new(&placed("order-1", 1)).unwrap();
    let b = envelope("{}");
    assert_eq!(id_of(&SequentialPolicy, &a), some(SEQUENTIAL_SEQUENCE_ID));
    assert_eq!(id_of(&SequentialPolicy, &b), some(SEQUENTIAL_SEQUENCE_ID));
    // No validated partition key can land in the global sequence by accident.
    assert!(
        KeyRules::default()
            .validate("key", Some(SEQUENTIAL_SEQUENCE_ID))
            .is_err()
    );
}

#[test]
fn full_concurrency_never_sequences() {
    let mut message = Envelope::new(&placed("order-1", 1)).unwrap();
    message.routing_key = Some("r".to_owned());
    message.partition_key = Some("p".to_owned());
    assert_eq!(id_of(&FullConcurrencyPolicy, &message), None);
}

#[test]
fn hierarchical_falls_back_only_when_the_primary_yields_none() {
    let policy = HierarchicalPolicy::new(PropertyPolicy::new("client_id"), PerAggregatePolicy);
    let with_client = Envelope::new(&placed("order-1", 5)).unwrap();
    assert_eq!(id_of(&policy, &with_client), some("5"));

    let mut without_client = envelope(r#"{"client_id":null}"#);
    without_client.aggregate_id = Some("order-2".to_owned());
    assert_eq!(id_of(&policy, &without_client), some("order-2"));

    assert_eq!(id_of(&policy, &envelope("{}")), None, "both yield none");
    assert_eq!(policy.primary().field(), "client_id");
}

#[test]
fn hierarchical_accepts_shared_trait_objects() {
    let primary: Arc<dyn SequencingPolicy> = Arc::new(FullConcurrencyPolicy);
    let policy = HierarchicalPolicy::new(primary, MetadataPolicy::new("tenant"));
    let mut message = envelope("{}");
    message.metadata.insert("tenant".to_owned(), "acme".to_owned());
    assert_eq!(id_of(&policy, &message), some("acme"));
}

#[test]
fn extraction_decodes_the_payload_of_its_type() {
    let policy = ExtractionPolicy::new::<OrderPlaced, u64>(|e| Some(e.client_id * 10));
    assert_eq!(policy.type_name(), "OrderPlaced");
    let message = Envelope::new(&placed("order-1", 4)).unwrap();
    assert_eq!(id_of(&policy, &message), some("40"));
}

#[test]
fn extraction_prefers_the_typed_message_in_the_context() {
    let policy = ExtractionPolicy::new(|e: &OrderPlaced| Some(e.order_id.clone()));
    // The payload says one thing, the attached typed message another: the typed one is used,
    // even though the envelope's type name does not match (no decoding happens).
    let typed = placed("from-context", 1);
    let message = envelope("not json at all");
    let context = ProcessingContext::new("h").with_typed(&typed);
    let id = policy.sequence_identifier(&message, &context);
    assert_eq!(id, Some(SequenceId::from("from-context")));

    // A typed value of another type is ignored and the payload decoded instead.
    let other = 17_u32;
    let message = Envelope::new(&placed("from-payload", 1)).unwrap();
    let context = ProcessingContext::new("h").with_typed(&other);
    let id = policy.sequence_identifier(&message, &context);
    assert_eq!(id, Some(SequenceId::from("from-payload")));
}

#[test]
fn extraction_ignores_other_types_and_bad_payloads() {
    let policy = ExtractionPolicy::new(|e: &OrderPlaced| Some(e.order_id.clone()));
    let command = ShipOrder {
        order_id: "order-1".to_owned(),
        warehouse: "w".to_owned(),
    };
    assert_eq!(
        id_of(&policy, &Envelope::command(&command).unwrap()),
        None,
        "other type"
    );

    let mut corrupt = envelope(r#"{"order_id": 5}"#);
    corrupt.type_name = OrderPlaced::TYPE_NAME.to_owned();
    assert_eq!(id_of(&policy, &corrupt), None, "undecodable payload");

    let declines = ExtractionPolicy::new(|_: &OrderPlaced| None::<String>);
    assert_eq!(
        id_of(&declines, &Envelope::new(&placed("o", 1)).unwrap()),
        None,
        "closure says none"
    );
}

#[test]
fn extraction_debug_names_the_message_type() {
    let policy = ExtractionPolicy::new(|e: &OrderPlaced| Some(e.client_id));
    assert!(format!("{policy:?}").contains("OrderPlaced"));
}

#[test]
fn routing_key_uses_the_commands_routing_key() {
    let command = ShipOrder {
        order_id: "order-1".to_owned(),
        warehouse: "north".to_owned(),
    };
    let message = Envelope::command(&command).unwrap();
    assert_eq!(id_of(&RoutingKeyPolicy, &message), some("north"));
    assert_eq!(id_of(&RoutingKeyPolicy, &envelope("{}")), None);
}

#[test]
fn partition_key_uses_the_validated_key() {
    let mut message = Envelope::new(&placed("order-1", 1)).unwrap();
    assert_eq!(id_of(&PartitionKeyPolicy, &message), None);
    message.partition_key = Some("client-1".to_owned());
    assert_eq!(id_of(&PartitionKeyPolicy, &message), some("client-1"));
}

#[test]
fn default_event_policy_is_per_aggregate_then_sequential() {
    let policy = default_event_policy();
    let message = Envelope::new(&placed("order-9", 1)).unwrap();
    assert_eq!(id_of(&*policy, &message), some("order-9"));
    assert_eq!(id_of(&*policy, &envelope("{}")), some(SEQUENTIAL_SEQUENCE_ID));
}

#[test]
fn default_command_policy_is_the_routing_key() {
    let policy = default_command_policy();
    let command = ShipOrder {
        order_id: "order-1".to_owned(),
        warehouse: "south".to_owned(),
    };
    assert_eq!(
        id_of(&*policy, &Envelope::command(&command).unwrap()),
        some("south")
    );
    assert_eq!(
        id_of(&*policy, &envelope("{}")),
        None,
        "no routing key: unconstrained"
    );
}

#[test]
fn context_carries_the_handler_name() {
    #[derive(Debug)]
    struct ByHandler;
    impl SequencingPolicy for ByHandler {
        fn sequence_identifier(&self, _: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId> {
            Some(SequenceId::from(context.handler()))
        }
    }
    assert_eq!(id_of(&ByHandler, &envelope("{}")), some("test-handler"));
}
