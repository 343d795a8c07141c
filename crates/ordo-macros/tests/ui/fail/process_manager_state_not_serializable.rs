use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

struct Fulfillment;

#[process_manager]
impl Fulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
