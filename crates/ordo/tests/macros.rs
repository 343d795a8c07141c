//! What the macros' generated code does at runtime: descriptors, key
//! extraction, dispatch and error conversion, message identities.

use std::sync::Mutex;

use ordo::contract::handler::HandlerKind;
use ordo::contract::message::{Envelope, MessageKind};
use ordo::contract::policy::ProcessingContext;
use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Aggregate)]
#[aggregate(category = "billing.invoices")]
struct Invoice;

#[derive(Aggregate)]
struct OrderLine;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
    amount: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Event)]
#[event(part_of = Order, name = "order.cancelled")]
struct OrderCancelled {
    order_id: String,
    client_id: String,
    reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Event)]
#[event(part_of = Invoice)]
struct InvoiceIssued {
    #[aggregate_id]
    invoice: u32,
    order_id: String,
    customer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct PlaceOrder {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct CancelOrder {
    #[aggregate_id]
    order_id: String,
    #[routing_key]
    client_id: String,
}

/// Records which method ran with what.
#[derive(Default)]
struct OrderProjector {
    seen: Mutex<Vec<String>>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.record(format!(
            "placed {} {} attempt {}",
            event.order_id,
            event.amount,
            ctx.attempt()
        ));
        Ok(())
    }

    #[handle]
    async fn on_cancelled(&self, event: &OrderCancelled) -> Result<(), std::io::Error> {
        if event.reason == "fail" {
            return Err(std::io::Error::other(format!("cannot cancel {}", event.order_id)));
        }
        self.record(format!("cancelled {}", event.order_id));
        Ok(())
    }

    /// Not a handler: left as it is.
    fn record(&self, line: String) {
        self.seen.lock().unwrap().push(line);
    }
}

struct Auditor;

#[event_handler]
#[sequencing_policy(per_aggregate)]
impl Auditor {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    #[sequencing_policy(metadata = "tenant")]
    async fn on_issued(&self, _event: &InvoiceIssued) -> anyhow::Result<()> {
        Err(anyhow::anyhow!("audit log unavailable"))
    }
}

struct Billing;

#[event_handler(part_of = Invoice, sequential_by = "customer")]
impl Billing {
    #[handle]
    async fn on_issued(&self, _event: &InvoiceIssued) -> anyhow::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Fulfillment {
    steps: Vec<String>,
}

#[process_manager(sequential_by)]
impl Fulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.steps
            .push(format!("placed {} via {}", event.order_id, ctx.category()));
        Ok(())
    }

    #[handle(correlate = "order_id")]
    async fn on_issued(&mut self, event: &InvoiceIssued) -> anyhow::Result<()> {
        self.steps.push(format!("invoiced {}", event.invoice));
        Ok(())
    }
}

#[derive(Default)]
struct OrderCommands {
    placed: Mutex<Vec<String>>,
}

#[command_handler(part_of = Order)]
#[sequencing_policy(with = ordo::contract::policy::ExtractionPolicy::new(|c: &CancelOrder| Some(c.client_id.clone())))]
impl OrderCommands {
    #[handle]
    #[sequencing_policy(routing_key)]
    async fn place(&self, command: &PlaceOrder) -> anyhow::Result<()> {
        self.placed.lock().unwrap().push(command.order_id.clone());
        Ok(())
    }

    #[handle]
    async fn cancel(&self, _command: &CancelOrder, _ctx: &HandlerContext) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Handler impls may be generic.
struct Counter<T> {
    seen: Mutex<Vec<T>>,
}

#[event_handler(part_of = Order, sequential_by = "order_id")]
impl<T: From<u64> + Send + 'static> Counter<T> {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> {
        self.seen.lock().unwrap().push(T::from(event.amount));
        Ok(())
    }
}

fn placed(order: &str, client: &str) -> OrderPlaced {
    OrderPlaced {
        order_id: order.into(),
        client_id: client.into(),
        amount: 10,
    }
}

fn issued(customer: Option<&str>) -> InvoiceIssued {
    InvoiceIssued {
        invoice: 42,
        order_id: "o-1".into(),
        customer: customer.map(Into::into),
    }
}

fn envelope<M: Message>(message: &M) -> Envelope {
    Envelope::new(message).unwrap()
}

#[test]
fn aggregate_categories_default_to_snake_case_and_can_be_overridden() {
    assert_eq!(<Order as Aggregate>::CATEGORY, "order");
    assert_eq!(<OrderLine as Aggregate>::CATEGORY, "order_line");
    assert_eq!(<Invoice as Aggregate>::CATEGORY, "billing.invoices");
}

#[test]
fn messages_know_their_identity() {
    assert_eq!(<OrderPlaced as Message>::TYPE_NAME, "OrderPlaced");
    assert_eq!(<OrderPlaced as Message>::KIND, MessageKind::Event);
    assert_eq!(<OrderPlaced as Message>::CATEGORY, "order");
    assert_eq!(<OrderCancelled as Message>::TYPE_NAME, "order.cancelled");
    assert_eq!(<InvoiceIssued as Message>::CATEGORY, "billing.invoices");
    assert_eq!(<PlaceOrder as Message>::KIND, MessageKind::Command);
}

#[test]
fn aggregate_id_and_routing_key_read_the_marked_fields() {
    assert_eq!(placed("o-1", "c-1").aggregate_id().as_deref(), Some("o-1"));
    assert_eq!(issued(None).aggregate_id().as_deref(), Some("42"));
    let cancelled = OrderCancelled {
        order_id: "o-1".into(),
        client_id: "c".into(),
        reason: String::new(),
    };
    assert_eq!(cancelled.aggregate_id(), None, "no #[aggregate_id] field");

    let place = PlaceOrder {
        order_id: "o-1".into(),
        client_id: "c-1".into(),
    };
    assert_eq!(
        place.routing_key().as_deref(),
        Some("o-1"),
        "defaults to the aggregate id"
    );
    let cancel = CancelOrder {
        order_id: "o-1".into(),
        client_id: "c-1".into(),
    };
    assert_eq!(cancel.routing_key().as_deref(), Some("c-1"));
    assert_eq!(
        Envelope::command(&cancel).unwrap().routing_key.as_deref(),
        Some("c-1")
    );
}

#[test]
fn event_handler_descriptor_lists_every_handled_message() {
    let descriptor = OrderProjector::descriptor();
    assert_eq!(descriptor.name, "OrderProjector");
    assert_eq!(descriptor.kind, HandlerKind::Event);
    assert_eq!(descriptor.part_of, Some("order"));
    assert_eq!(descriptor.sequential_by, Some("client_id"));
    assert!(descriptor.partitioned);
    assert!(descriptor.policy.is_none());
    let handles: Vec<_> = descriptor
        .handles
        .iter()
        .map(|h| {
            (
                h.type_name,
                h.kind,
                h.category,
                h.method,
                h.key.map(|k| k.field()),
                h.start,
            )
        })
        .collect();
    assert_eq!(
        handles,
        [
            (
                "OrderPlaced",
                MessageKind::Event,
                "order",
                "on_placed",
                Some("client_id"),
                false
            ),
            (
                "order.cancelled",
                MessageKind::Event,
                "order",
                "on_cancelled",
                Some("client_id"),
                false
            ),
        ]
    );
    assert!(descriptor.handles.iter().all(|h| h.policy.is_none()));
}

#[test]
fn key_extractors_read_the_field_of_their_own_type_only() {
    let descriptor = OrderProjector::descriptor();
    let key = descriptor.handled("order", "OrderPlaced").unwrap().key.unwrap();
    assert_eq!(
        key.extract(&placed("o-1", "client-9")),
        Some(Some("client-9".to_owned()))
    );
    assert_eq!(key.extract(&issued(None)), None, "not an OrderPlaced");

    let billing = Billing::descriptor();
    let key = billing.handles[0].key.unwrap();
    assert_eq!(key.field(), "customer");
    assert_eq!(key.extract(&issued(Some("acme"))), Some(Some("acme".to_owned())));
    assert_eq!(key.extract(&issued(None)), Some(None), "a None key is a null key");
}

#[test]
fn handlers_without_key_have_no_extractor() {
    let descriptor = Auditor::descriptor();
    assert_eq!(descriptor.part_of, None);
    assert_eq!(descriptor.sequential_by, None);
    assert!(!descriptor.partitioned);
    assert!(descriptor.handles.iter().all(|h| h.key.is_none()));
    assert_eq!(descriptor.categories(), ["order", "billing.invoices"]);
}

#[test]
fn policies_on_the_impl_and_on_methods_are_kept_apart() {
    let descriptor = Auditor::descriptor();
    let mut placed_envelope = envelope(&placed("o-7", "c-1"));
    placed_envelope.metadata.insert("tenant".into(), "acme".into());
    let context = ProcessingContext::new("Auditor");

    let impl_policy = descriptor.policy.as_ref().expect("impl policy");
    let id = impl_policy.sequence_identifier(&placed_envelope, &context);
    assert_eq!(id.unwrap().as_str(), "o-7", "per-aggregate");

    assert!(
        descriptor
            .handled("order", "OrderPlaced")
            .unwrap()
            .policy
            .is_none()
    );
    let method_policy = descriptor
        .handled("billing.invoices", "InvoiceIssued")
        .unwrap()
        .policy
        .as_ref()
        .expect("method policy");
    let id = method_policy.sequence_identifier(&placed_envelope, &context);
    assert_eq!(id.unwrap().as_str(), "acme", "metadata policy on `tenant`");
}

#[test]
fn with_policies_take_any_expression() {
    let descriptor = OrderCommands::descriptor();
    assert_eq!(descriptor.kind, HandlerKind::Command);
    assert_eq!(descriptor.part_of, Some("order"));
    let context = ProcessingContext::new("OrderCommands");
    let cancel = CancelOrder {
        order_id: "o-1".into(),
        client_id: "c-3".into(),
    };
    let id = descriptor
        .policy
        .as_ref()
        .unwrap()
        .sequence_identifier(&envelope(&cancel), &context);
    assert_eq!(id.unwrap().as_str(), "c-3", "extraction policy from `with = ...`");

    let place = Envelope::command(&PlaceOrder {
        order_id: "o-2".into(),
        client_id: "c-3".into(),
    })
    .unwrap();
    let routing = descriptor
        .handled("order", "PlaceOrder")
        .unwrap()
        .policy
        .as_ref()
        .unwrap();
    assert_eq!(
        routing.sequence_identifier(&place, &context).unwrap().as_str(),
        "o-2"
    );
}

#[test]
fn process_manager_descriptor_has_correlation_keys_and_start_flags() {
    let descriptor = Fulfillment::descriptor();
    assert_eq!(descriptor.name, "Fulfillment");
    assert_eq!(descriptor.kind, HandlerKind::ProcessManager);
    assert_eq!(descriptor.part_of, None);
    assert_eq!(descriptor.sequential_by, None);
    assert!(descriptor.partitioned, "the bare `sequential_by` flag");
    let starts: Vec<_> = descriptor.handles.iter().map(|h| (h.method, h.start)).collect();
    assert_eq!(starts, [("on_placed", true), ("on_issued", false)]);
    let key = descriptor
        .handled("billing.invoices", "InvoiceIssued")
        .unwrap()
        .key
        .unwrap();
    assert_eq!(key.field(), "order_id");
    assert_eq!(key.extract(&issued(None)), Some(Some("o-1".to_owned())));
}

#[tokio::test]
async fn handle_dispatches_to_the_method_of_the_message_type() {
    let projector = OrderProjector::default();
    let first = envelope(&placed("o-1", "c-1"));
    let ctx = HandlerContext::new(&first).with_attempt(3);
    projector.handle(&first, &ctx).await.unwrap();
    let cancelled = envelope(&OrderCancelled {
        order_id: "o-2".into(),
        client_id: "c-1".into(),
        reason: "changed mind".into(),
    });
    projector
        .handle(&cancelled, &HandlerContext::new(&cancelled))
        .await
        .unwrap();
    let unrelated = envelope(&issued(None));
    projector
        .handle(&unrelated, &HandlerContext::new(&unrelated))
        .await
        .unwrap();
    assert_eq!(
        *projector.seen.lock().unwrap(),
        ["placed o-1 10 attempt 3", "cancelled o-2"]
    );
}

#[tokio::test]
async fn handle_returns_the_methods_error() {
    let projector = OrderProjector::default();
    let failing = envelope(&OrderCancelled {
        order_id: "o-3".into(),
        client_id: "c-1".into(),
        reason: "fail".into(),
    });
    let error = projector
        .handle(&failing, &HandlerContext::new(&failing))
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "cannot cancel o-3");
    assert!(
        error.downcast_ref::<std::io::Error>().is_some(),
        "the error itself, boxed"
    );

    let audit = envelope(&issued(None));
    let error = Auditor
        .handle(&audit, &HandlerContext::new(&audit))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "audit log unavailable",
        "anyhow errors convert too"
    );
}

#[tokio::test]
async fn handle_reports_a_payload_that_does_not_decode() {
    let mut broken = envelope(&placed("o-1", "c-1"));
    broken.payload = r#"{"order_id": 5}"#.into();
    let error = OrderProjector::default()
        .handle(&broken, &HandlerContext::new(&broken))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("cannot decode message"), "{error}");
}

#[tokio::test]
async fn process_manager_methods_update_the_instance() {
    let mut fulfillment = Fulfillment::default();
    let first = envelope(&placed("o-1", "c-1"));
    fulfillment
        .handle(&first, &HandlerContext::new(&first))
        .await
        .unwrap();
    let second = envelope(&issued(None));
    fulfillment
        .handle(&second, &HandlerContext::new(&second))
        .await
        .unwrap();
    assert_eq!(fulfillment.steps, ["placed o-1 via order", "invoiced 42"]);
}

#[tokio::test]
async fn generic_handlers_work_like_any_other() {
    let descriptor = Counter::<u64>::descriptor();
    assert_eq!(descriptor.name, "Counter");
    assert_eq!(descriptor.handles[0].key.unwrap().field(), "order_id");
    let counter = Counter::<u64> {
        seen: Mutex::new(Vec::new()),
    };
    let event = envelope(&placed("o-1", "c-1"));
    counter
        .handle(&event, &HandlerContext::new(&event))
        .await
        .unwrap();
    assert_eq!(*counter.seen.lock().unwrap(), [10]);
}

#[tokio::test]
async fn command_handlers_dispatch_commands() {
    let commands = OrderCommands::default();
    let place = Envelope::command(&PlaceOrder {
        order_id: "o-5".into(),
        client_id: "c-1".into(),
    })
    .unwrap();
    commands
        .handle(&place, &HandlerContext::new(&place))
        .await
        .unwrap();
    assert_eq!(*commands.placed.lock().unwrap(), ["o-5"]);
}

/// One handler type per output stream: `Projector<Stdout>` and
/// `Projector<Stderr>` share the last path segment `Projector`.
struct Stdout;
struct Stderr;

struct Projector<W> {
    seen: std::sync::Arc<Mutex<Vec<String>>>,
    _writer: std::marker::PhantomData<fn() -> W>,
}

impl<W> Projector<W> {
    fn new(seen: &std::sync::Arc<Mutex<Vec<String>>>) -> Self {
        Self {
            seen: seen.clone(),
            _writer: std::marker::PhantomData,
        }
    }
}

#[event_handler(part_of = Order, name = "projector.stdout")]
impl Projector<Stdout> {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("stdout {}", event.order_id));
        Ok(())
    }
}

#[event_handler(part_of = Order, name = "projector.stderr")]
impl Projector<Stderr> {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced) -> anyhow::Result<()> {
        self.seen
            .lock()
            .unwrap()
            .push(format!("stderr {}", event.order_id));
        Ok(())
    }
}

mod billing {
    use ordo::prelude::*;

    #[derive(Default)]
    pub(super) struct Projector;

    #[event_handler(part_of = super::Order)]
    impl Projector {
        #[handle]
        async fn on_placed(&self, _event: &super::OrderPlaced) -> anyhow::Result<()> {
            Ok(())
        }
    }

    #[derive(Default)]
    pub(super) struct NamedProjector;

    #[derive(Default, Serialize, Deserialize)]
    pub(super) struct Fulfillment;

    #[process_manager(name = "billing-fulfillment")]
    impl Fulfillment {
        #[handle(start, correlate = "order_id")]
        async fn on_cancelled(&mut self, _event: &super::OrderCancelled) -> anyhow::Result<()> {
            Ok(())
        }
    }

    #[command_handler(part_of = super::Order, name = "billing_commands")]
    impl NamedProjector {
        #[handle]
        async fn place(&self, _command: &super::PlaceOrder) -> anyhow::Result<()> {
            Ok(())
        }
    }
}

mod shipping {
    use ordo::prelude::*;

    #[derive(Default)]
    pub(super) struct Projector;

    #[event_handler(part_of = super::Order)]
    impl Projector {
        #[handle]
        async fn on_placed(&self, _event: &super::OrderPlaced) -> anyhow::Result<()> {
            Ok(())
        }
    }
}

#[test]
fn name_sets_the_handler_name_of_every_handler_kind() {
    assert_eq!(Projector::<Stdout>::descriptor().name, "projector.stdout");
    assert_eq!(Projector::<Stderr>::descriptor().name, "projector.stderr");
    assert_eq!(
        <billing::NamedProjector as CommandHandler>::descriptor().name,
        "billing_commands"
    );
    assert_eq!(
        <billing::Fulfillment as ProcessManager>::descriptor().name,
        "billing-fulfillment"
    );
    // Without `name`, the last path segment of the type.
    assert_eq!(
        <billing::Projector as EventHandler>::descriptor().name,
        "Projector"
    );
}

#[tokio::test]
async fn two_instantiations_of_one_generic_handler_run_side_by_side_under_their_names() {
    let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
    let domain = Domain::builder()
        .event_handler(Projector::<Stdout>::new(&seen))
        .event_handler(Projector::<Stderr>::new(&seen))
        .init()
        .expect("distinct names register side by side");
    let mut uow = domain.unit_of_work();
    uow.raise(placed("o-1", "c-1")).unwrap();
    uow.commit().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(30), domain.settle())
        .await
        .expect("settles")
        .expect("settle() outside handlers");
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, ["stderr o-1", "stdout o-1"]);
}

#[test]
fn same_named_handlers_without_name_are_reported_at_init_with_the_fix() {
    let Err(error) = Domain::builder()
        .event_handler(billing::Projector)
        .event_handler(shipping::Projector)
        .init()
    else {
        panic!("two handlers named `Projector` were accepted");
    };
    let message = error.to_string();
    assert!(
        message.contains("the name `Projector` is registered more than once"),
        "{message}"
    );
    assert!(
        message.contains("`name = \"...\"` on its handler attribute"),
        "{message}"
    );
}
