//! A `crate` that is not a path is reported at the literal; one that does
//! not resolve is reported by rustc at the literal too.

use ordo::prelude::*;

#[derive(Aggregate)]
#[aggregate(crate = "not a path")]
struct Order;

#[derive(Aggregate)]
#[aggregate(crate = "no_such_crate")]
struct Customer;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Customer, crate = "ordo::Vec<u8>")]
struct CustomerRegistered {
    customer_id: String,
}

fn main() {}
