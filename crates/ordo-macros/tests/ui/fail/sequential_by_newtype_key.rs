use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize)]
struct ClientId(String);

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
    client_id: ClientId,
}

struct Projector;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
