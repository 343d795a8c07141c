use ordo::prelude::*;

mod sales {
    use ordo::prelude::*;

    #[derive(Aggregate)]
    #[aggregate(category = "sales.order")]
    pub struct Order;

    #[derive(Serialize, Deserialize, Event)]
    #[event(part_of = Order)]
    pub struct Placed {
        pub order_id: String,
    }
}

mod billing {
    use ordo::prelude::*;

    #[derive(Aggregate)]
    #[aggregate(category = "billing.order")]
    pub struct Order;
}

struct Projector;

// Both aggregates are called `Order`: the message names them by path.
#[event_handler(part_of = billing::Order)]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &sales::Placed) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
