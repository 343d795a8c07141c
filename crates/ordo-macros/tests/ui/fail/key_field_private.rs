use ordo::prelude::*;

mod sales {
    use ordo::prelude::*;

    #[derive(Aggregate)]
    pub struct Order;

    #[derive(Serialize, Deserialize, Event)]
    #[event(part_of = Order)]
    pub struct OrderPlaced {
        pub order_id: String,
        client_id: String,
    }
}

struct Projector;

#[event_handler(part_of = sales::Order, sequential_by = "client_id")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &sales::OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
