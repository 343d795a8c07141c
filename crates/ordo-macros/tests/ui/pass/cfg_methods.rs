//! `#[cfg]` on a `#[handle]` method is honoured: a method compiled out is
//! not referenced, and cfg alternatives for one type are not duplicates.

use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

/// Exists only under a cfg that is never set.
#[cfg(any())]
#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderAudited {
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order, sequential_by = "order_id")]
impl Projector {
    #[handle]
    #[cfg(any())]
    async fn on_audited(&self, _event: &OrderAudited, _ctx: &HandlerContext) -> anyhow::Result<()> {
        Ok(())
    }

    #[cfg(not(any()))]
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    #[cfg(any())]
    #[handle]
    async fn on_placed_v2(&self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Fulfillment;

#[process_manager(sequential_by)]
impl Fulfillment {
    #[handle(start, correlate = "order_id")]
    #[cfg(all())]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle(start, correlate = "missing_field")]
    #[cfg(any())]
    async fn on_placed_elsewhere(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {
    let descriptor = Projector::descriptor();
    assert_eq!(descriptor.handles.len(), 1);
    assert_eq!(descriptor.handles[0].method, "on_placed");
    let descriptor = Fulfillment::descriptor();
    assert_eq!(descriptor.handles.len(), 1);
    assert_eq!(descriptor.handles[0].method, "on_placed");
}
