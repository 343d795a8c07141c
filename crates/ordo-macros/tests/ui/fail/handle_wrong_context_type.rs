use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order)]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced, _ctx: &Envelope) -> anyhow::Result<()> {
        Ok(())
    }
}

// Aliases of the context type are fine.
type Ctx = HandlerContext;

struct Other;

#[event_handler(part_of = Order)]
impl Other {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced, _ctx: &Ctx) -> anyhow::Result<()> {
        Ok(())
    }
}

use ordo::contract::message::Envelope;

fn main() {}
