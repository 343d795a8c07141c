use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
    client_id: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderShipped {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn on_shipped(&self, _event: &OrderShipped) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
