use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced(String);

#[derive(Serialize, Deserialize, Event)]
struct OrderShipped {
    order_id: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct Generic<T> {
    order_id: T,
}

fn main() {}
