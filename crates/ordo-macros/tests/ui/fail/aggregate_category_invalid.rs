use ordo::prelude::*;

#[derive(Aggregate)]
#[aggregate(category = "shop:order")]
struct Order;

#[derive(Aggregate)]
#[aggregate(category = "")]
struct Payment;

fn main() {}
