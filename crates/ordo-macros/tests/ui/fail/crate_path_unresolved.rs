//! A `crate` path that does not resolve is reported by rustc at the literal.

use ordo::prelude::*;

#[derive(Aggregate)]
#[aggregate(crate = "no_such_crate")]
struct Order;

struct Projector;

#[event_handler(crate = "crate::nowhere")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &Placed) -> anyhow::Result<()> {
        Ok(())
    }
}

#[derive(Aggregate)]
struct Shop;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Shop)]
struct Placed {
    id: String,
}

fn main() {}
