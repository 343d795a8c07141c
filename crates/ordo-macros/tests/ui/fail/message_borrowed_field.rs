use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: &'static str,
    tags: Vec<&'static str>,
}

#[derive(Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct PlaceOrder {
    order_id: Option<&'static str>,
}

fn main() {}
