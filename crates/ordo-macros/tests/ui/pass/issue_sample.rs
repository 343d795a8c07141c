//! The sample from the foundation issue, complete.

use ordo::prelude::*;

#[derive(Aggregate)]
struct Order; // stream category "order"

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
    client_id: String,
    amount: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct PlaceOrder {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

struct OrderProjector;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        println!("{} {} {}", event.order_id, event.amount, ctx.message_id());
        Ok(())
    }
}

#[derive(Default, Serialize, Deserialize)]
struct OrderFulfillment {
    placed: u32,
}

#[process_manager(sequential_by)]
impl OrderFulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.placed += 1;
        println!("{} {}", event.order_id, ctx.fencing_token());
        Ok(())
    }
}

struct OrderCommands;

#[command_handler(part_of = Order, sequential_by = "client_id")]
impl OrderCommands {
    #[handle]
    async fn place(&self, cmd: &PlaceOrder, ctx: &HandlerContext) -> anyhow::Result<()> {
        println!("{} {}", cmd.order_id, ctx.attempt());
        Ok(())
    }
}

fn main() {
    assert_eq!(OrderProjector::descriptor().sequential_by, Some("client_id"));
    assert!(OrderFulfillment::descriptor().partitioned);
    assert_eq!(OrderCommands::descriptor().part_of, Some("order"));
}
