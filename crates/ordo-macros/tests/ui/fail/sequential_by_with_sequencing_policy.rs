use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

struct Projector;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Projector {
    #[handle]
    #[sequencing_policy(per_aggregate)]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
