use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

struct Projector {
    count: u64,
}

#[event_handler(part_of = Order)]
impl Projector {
    #[handle]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        self.count += 1;
        Ok(())
    }
}

fn main() {}
