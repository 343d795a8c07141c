use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order, aggregate = Order)]
struct OrderPlaced {
    client_id: String,
}

struct Projector;

#[event_handler(part_of = Order, sequential = "client_id")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
