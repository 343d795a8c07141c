use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct PlaceOrder {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order)]
impl Projector {
    #[handle]
    async fn on_place(&self, _command: &PlaceOrder) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
