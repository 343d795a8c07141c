use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Aggregate)]
struct Payment;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Payment)]
struct Refunded {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order)]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn on_refunded(&self, _event: &Refunded) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
