//! Generated code cannot meet the user's names: a lifetime `'a` on the
//! handler type, and a `const message`, `struct envelope` and `const ctx` in
//! scope of the expansion.
#![allow(non_upper_case_globals, non_camel_case_types, dead_code)]

use std::marker::PhantomData;

use ordo::prelude::*;

const message: u8 = 1;
const ctx: u8 = 2;
struct envelope;
struct extract;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    client_id: String,
}

struct Projector<'a> {
    marker: PhantomData<&'a str>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl<'a: 'static> Projector<'a> {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, context: &HandlerContext) -> anyhow::Result<()> {
        let _ = (event, context, message, ctx);
        Ok(())
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Tracker {
    placed: u32,
}

#[process_manager(sequential_by)]
impl Tracker {
    #[handle(start, correlate = "client_id")]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        self.placed += 1;
        Ok(())
    }
}

struct ByClient;

#[event_handler(part_of = Order)]
#[sequencing_policy(property = "client_id")]
impl ByClient {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {
    let _ = Domain::builder()
        .event_handler(Projector::<'static> { marker: PhantomData })
        .event_handler(ByClient)
        .process_manager::<Tracker>()
        .init()
        .expect("a valid domain");
}
