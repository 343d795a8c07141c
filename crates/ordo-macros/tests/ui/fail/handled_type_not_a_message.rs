use ordo::prelude::*;

#[derive(Serialize, Deserialize)]
struct OrderPlaced {
    order_id: String,
}

struct Projector;

#[event_handler]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
