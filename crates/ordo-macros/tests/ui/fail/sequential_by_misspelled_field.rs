use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
    client_id: String,
}

struct Projector;

// rustc's "a field with a similar name exists" would suggest
// `sequential_by = client_id` (without quotes): no suggestion is better
// than a wrong one.
#[event_handler(part_of = Order, sequential_by = "clint_id")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
