use ordo::prelude::*;

struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

fn main() {}
