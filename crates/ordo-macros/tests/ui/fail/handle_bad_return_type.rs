use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

struct Projector;

#[event_handler]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> Result<(), u32> {
        Ok(())
    }
}

fn main() {}
