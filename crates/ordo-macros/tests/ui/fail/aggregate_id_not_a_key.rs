use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: (u32, u32),
}

fn main() {}
