use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

#[derive(Default, Serialize, Deserialize)]
struct Fulfillment;

#[process_manager(sequential_by)]
impl Fulfillment {
    #[handle(start, correlate = "orderid")]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
