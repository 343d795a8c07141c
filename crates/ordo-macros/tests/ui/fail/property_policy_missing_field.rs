use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
    region: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderShipped {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order)]
#[sequencing_policy(property = "region")]
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
