use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = "Order")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = 42)]
struct OrderShipped {
    order_id: String,
}

fn main() {}
