use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize)]
struct Routing {
    client_id: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderShipped {
    order_id: String,
    #[serde(flatten)]
    routing: Routing,
}

struct Projector;

// A key is a direct field; rustc would suggest `routing."client_id"`.
#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Projector {
    #[handle]
    async fn on_shipped(&self, _event: &OrderShipped) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
