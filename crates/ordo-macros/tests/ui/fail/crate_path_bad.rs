//! A `crate` that is not a path is reported at the literal.

use ordo::prelude::*;

#[derive(Aggregate)]
#[aggregate(crate = "not a path")]
struct Order;

#[derive(Aggregate)]
struct Customer;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Customer, crate = "ordo::Vec<u8>")]
struct CustomerRegistered {
    customer_id: String,
}

fn main() {}
