//! Every message says when it happened and where it came from: an event
//! raised outside a handler starts a conversation (its own id is its
//! correlation id); what a handler raises or sends carries the
//! conversation on (`correlation_id`) and names the message it handled
//! (`causation_id`), through events, a command and the events its handler
//! raises, as Axon's correlation data does.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use ordo::contract::message::{Envelope, Timestamp};
use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct ShipOrder {
    #[routing_key]
    order_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderShipped {
    #[aggregate_id]
    order_id: String,
}

/// What a handler saw of one message.
#[derive(Debug, Clone)]
struct Seen {
    what: &'static str,
    id: String,
    correlation: String,
    causation: Option<String>,
    occurred_at: Option<Timestamp>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn record(log: &Log, what: &'static str, ctx: &HandlerContext) {
    log.lock().expect("not poisoned").push(Seen {
        what,
        id: ctx.message_id().to_owned(),
        correlation: ctx.correlation_id().to_owned(),
        causation: ctx.causation_id().map(str::to_owned),
        occurred_at: ctx.occurred_at(),
    });
}

/// Ships each placed order (a command sent from an event handler), and
/// records the shipments.
#[derive(Clone)]
struct Shipping {
    log: Log,
    domain: Arc<OnceLock<Domain>>,
}

#[event_handler(part_of = Order)]
impl Shipping {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        record(&self.log, "placed", ctx);
        let domain = self
            .domain
            .get()
            .expect("the domain is set before anything is raised");
        domain
            .dispatch(ShipOrder {
                order_id: event.order_id.clone(),
            })
            .await?;
        Ok(())
    }

    #[handle]
    async fn on_shipped(&self, _event: &OrderShipped, ctx: &HandlerContext) -> anyhow::Result<()> {
        record(&self.log, "shipped", ctx);
        Ok(())
    }
}

struct Warehouse {
    log: Log,
}

#[command_handler(part_of = Order)]
impl Warehouse {
    #[handle]
    async fn ship(&self, command: &ShipOrder, ctx: &HandlerContext) -> anyhow::Result<()> {
        record(&self.log, "ship", ctx);
        ctx.raise(OrderShipped {
            order_id: command.order_id.clone(),
        })?;
        Ok(())
    }
}

#[tokio::test]
async fn a_conversation_is_carried_from_handler_to_handler_and_each_message_names_its_cause()
-> anyhow::Result<()> {
    let log = Log::default();
    let cell = Arc::new(OnceLock::new());
    let domain = Domain::builder()
        .aggregate::<Order>()
        .event_handler(Shipping {
            log: log.clone(),
            domain: cell.clone(),
        })
        .command_handler(Warehouse { log: log.clone() })
        .init()?;
    assert!(cell.set(domain.clone()).is_ok());

    let before = Timestamp::now();
    let mut uow = domain.unit_of_work();
    uow.raise(OrderPlaced {
        order_id: "o-1".into(),
    })?;
    uow.raise(OrderPlaced {
        order_id: "o-2".into(),
    })?;
    uow.commit().await?;
    domain.settle().await?;
    let after = Timestamp::from(SystemTime::now());

    let seen = log.lock().expect("not poisoned").clone();
    assert_eq!(
        seen.len(),
        6,
        "two orders, each placed, shipped by a command, shipped: {seen:#?}"
    );
    let placed: Vec<&Seen> = seen.iter().filter(|s| s.what == "placed").collect();
    for root in &placed {
        // Raised outside a handler: a conversation of its own.
        assert_eq!(root.correlation, root.id, "{root:?}");
        assert_eq!(root.causation, None, "{root:?}");
        let ship: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.what == "ship" && s.causation.as_deref() == Some(&root.id))
            .collect();
        assert_eq!(ship.len(), 1, "one command caused by {}: {seen:#?}", root.id);
        assert_eq!(
            ship[0].correlation, root.id,
            "the command carries the conversation on"
        );
        let shipped: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.what == "shipped" && s.causation.as_deref() == Some(&ship[0].id))
            .collect();
        assert_eq!(
            shipped.len(),
            1,
            "one event caused by the command {}: {seen:#?}",
            ship[0].id
        );
        assert_eq!(
            shipped[0].correlation, root.id,
            "the command's event carries it on too"
        );
    }
    assert_ne!(
        placed[0].correlation, placed[1].correlation,
        "two requests, two conversations"
    );
    for message in &seen {
        let at = message
            .occurred_at
            .unwrap_or_else(|| panic!("{message:?} carries no occurred_at"));
        assert!(
            before <= at && at <= after,
            "{message:?} did not occur during the test"
        );
    }
    Ok(())
}

#[test]
fn an_envelope_written_before_ordo_carried_its_lineage_still_decodes() -> anyhow::Result<()> {
    let old = r#"{"id":"m-1","kind":"event","type_name":"OrderPlaced","category":"order","payload":"{\"order_id\":\"o-1\"}"}"#;
    let envelope: Envelope = serde_json::from_str(old)?;
    assert_eq!(envelope.occurred_at, None);
    assert_eq!(envelope.correlation(), "m-1", "it starts its own conversation");
    assert_eq!(envelope.causation_id, None);
    Ok(())
}

#[test]
fn an_envelope_with_a_malformed_occurred_at_is_refused_naming_it() -> anyhow::Result<()> {
    let envelope = |at: &str| {
        format!(
            r#"{{"id":"m-1","kind":"event","type_name":"OrderPlaced","category":"order","occurred_at":{at},"payload":"{{}}"}}"#
        )
    };
    for (at, named) in [
        (r#""yesterday\u001b[2J""#, r#"string "yesterday\u{1b}[2J""#),
        ("-5", "integer `-5`"),
        ("99999999999999999", "integer `99999999999999999`"),
    ] {
        let error = serde_json::from_str::<Envelope>(&envelope(at))
            .expect_err("not a time")
            .to_string();
        assert!(error.contains(named), "{error}");
        assert!(
            error.contains("expected milliseconds since the Unix epoch"),
            "{error}"
        );
    }
    let good: Envelope = serde_json::from_str(&envelope("1796329800123"))?;
    assert_eq!(
        good.occurred_at.map(|at| at.to_string()).as_deref(),
        Some("2026-12-03T20:30:00.123Z")
    );
    Ok(())
}
