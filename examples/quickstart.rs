//! The whole Ordo flow on the inline broker, no server needed:
//! `cargo run --example quickstart`.
//!
//! 1. messages and handlers declared with the macros (the key field is
//!    checked at compile time);
//! 2. events raised in a unit of work and committed through the outbox;
//! 3. a bad partition key rejected at commit, with nothing written;
//! 4. per-key ordered handling: one client's orders in publish order, while
//!    different clients run in parallel;
//! 5. a process manager and a command, sequenced the same way; the command
//!    handler raises an event through its context, committed with its success.
//!
//! Ordo logs through `tracing`: nothing is printed unless the application
//! installs a subscriber, as `main` does here (`RUST_LOG=debug` for more).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo::prelude::*;

#[derive(Aggregate)]
struct Order; // stream category "order"

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
    amount: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderCancelled {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct CancelOrder {
    #[routing_key]
    order_id: String,
    client_id: String,
}

/// Keeps the (client, order) pairs in the order it handled them.
#[derive(Clone, Default)]
struct OrderProjector {
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        // Simulated work: the same client's orders never overlap, other
        // clients' orders run meanwhile.
        tokio::time::sleep(Duration::from_millis(5)).await;
        println!(
            "  handled {} for {} (partition key {:?}, {} cents)",
            event.order_id,
            event.client_id,
            ctx.partition_key().unwrap_or("-"),
            event.amount
        );
        self.seen
            .lock()
            .expect("not poisoned")
            .push((event.client_id.clone(), event.order_id.clone()));
        Ok(())
    }

    #[handle]
    async fn on_cancelled(&self, event: &OrderCancelled, _ctx: &HandlerContext) -> anyhow::Result<()> {
        println!("  {} cancelled {}", event.client_id, event.order_id);
        self.seen
            .lock()
            .expect("not poisoned")
            .push((event.client_id.clone(), format!("{} (cancelled)", event.order_id)));
        Ok(())
    }
}

/// One instance per order: counts what happened to it.
///
/// Not `#[process_manager(sequential_by)]`: the `order` category is already
/// partitioned by `client_id`, and a category has one key; `init()` would
/// reject a second one. Instances are still never run concurrently for one
/// correlation value.
#[derive(Debug, Default, Serialize, Deserialize)]
struct OrderFulfillment {
    placed: u32,
}

#[process_manager]
impl OrderFulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        self.placed += 1;
        println!("  fulfillment of {} started", event.order_id);
        Ok(())
    }
}

struct OrderCommands;

#[command_handler(part_of = Order)]
impl OrderCommands {
    #[handle]
    async fn cancel(&self, command: &CancelOrder, ctx: &HandlerContext) -> anyhow::Result<()> {
        println!("  cancelling {} (message {})", command.order_id, ctx.message_id());
        // Committed to the outbox when this handler returns Ok, discarded if
        // it fails: command → events, no domain handle needed.
        ctx.raise(OrderCancelled {
            order_id: command.order_id.clone(),
            client_id: command.client_id.clone(),
        })?;
        Ok(())
    }
}

fn placed(order_id: &str, client_id: &str, amount: u64) -> OrderPlaced {
    OrderPlaced {
        order_id: order_id.into(),
        client_id: client_id.into(),
        amount,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ordo reports retries, skipped messages and failures through `tracing`.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();

    let projector = OrderProjector::default();
    let domain = Domain::builder()
        .aggregate::<Order>()
        .event_handler(projector.clone())
        .process_manager::<OrderFulfillment>()
        .command_handler(OrderCommands)
        .init()?; // the inline broker and an in-memory outbox by default

    println!("1. six orders for three clients, committed in one unit of work");
    let mut uow = domain.unit_of_work();
    for (order, client) in [
        ("o-1", "alice"),
        ("o-2", "bob"),
        ("o-3", "alice"),
        ("o-4", "carol"),
    ] {
        uow.raise(placed(order, client, 1_000))?;
    }
    uow.raise(placed("o-5", "bob", 2_500))?;
    uow.raise(placed("o-6", "alice", 700))?;
    uow.commit().await?;
    domain.settle().await?;

    println!("2. a bad key fails the whole commit, and nothing is written");
    let mut uow = domain.unit_of_work();
    uow.raise(placed("o-7", "dave", 100))?;
    uow.raise(placed("o-8", "eve:admin", 100))?;
    match uow.commit().await {
        Ok(_) => anyhow::bail!("a key containing ':' must be rejected"),
        Err(error) => println!("  rejected: {error}"),
    }
    domain.settle().await?;

    println!("3. a command, sequenced by its routing key, raising an event");
    domain
        .dispatch(CancelOrder {
            order_id: "o-1".into(),
            client_id: "alice".into(),
        })
        .await?;
    domain.settle().await?;

    let seen = projector.seen.lock().expect("not poisoned").clone();
    for client in ["alice", "bob", "carol"] {
        let orders: Vec<&str> = seen
            .iter()
            .filter(|(c, _)| c == client)
            .map(|(_, o)| o.as_str())
            .collect();
        println!("{client}'s orders, in handling order: {}", orders.join(", "));
    }
    anyhow::ensure!(
        seen.len() == 7,
        "six orders and one cancellation; o-7 must not have been handled: its unit of work was rejected"
    );
    Ok(())
}
