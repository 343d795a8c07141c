use ordo::prelude::*;

#[derive(Aggregate)]
#[aggregate(category = "dlq")]
struct DeadLetters;

#[derive(Aggregate)]
#[aggregate(category = "__partitions__")]
struct Partitions;

#[derive(Aggregate)]
#[aggregate(category = "order\nline")]
struct OrderLine;

// The default category (`dlq`) is checked too.
#[derive(Aggregate)]
struct Dlq;

fn main() {}
