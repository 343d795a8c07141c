use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

struct Projector;

// A handler's name names its consumer groups: no `:`, spaces or braces.
#[event_handler(part_of = Order, name = "billing:projector")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

struct Other;

#[event_handler(part_of = Order, name = "")]
impl Other {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
