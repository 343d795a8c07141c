//! `#[sequencing_policy]` in every form, on impls and on methods.

use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct Placed {
    #[aggregate_id]
    order_id: String,
    region: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct Shipped {
    order_id: String,
    region: String,
}

#[derive(Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct Ship {
    #[aggregate_id]
    order_id: String,
}

struct PerRegion;

#[event_handler(part_of = Order)]
#[sequencing_policy(property = "region")]
impl PerRegion {
    #[handle]
    async fn placed(&self, _event: &Placed) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    #[sequencing_policy(per_aggregate)]
    async fn shipped(&self, _event: &Shipped) -> anyhow::Result<()> {
        Ok(())
    }
}

struct Mixed;

#[event_handler]
impl Mixed {
    #[handle]
    #[sequencing_policy(sequential)]
    async fn placed(&self, _event: &Placed) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    #[sequencing_policy(full_concurrency)]
    async fn shipped(&self, _event: &Shipped) -> anyhow::Result<()> {
        Ok(())
    }
}

struct Tenanted;

#[event_handler]
#[sequencing_policy(metadata = "tenant")]
impl Tenanted {
    #[handle]
    #[sequencing_policy(partition_key)]
    async fn placed(&self, _event: &Placed) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn shipped(&self, _event: &Shipped) -> anyhow::Result<()> {
        Ok(())
    }
}

struct Shipping;

#[command_handler(part_of = Order)]
#[sequencing_policy(with = HierarchicalPolicy::new(RoutingKeyPolicy, SequentialPolicy))]
impl Shipping {
    #[handle]
    #[sequencing_policy(routing_key)]
    async fn ship(&self, _command: &Ship) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {
    let descriptor = PerRegion::descriptor();
    assert!(descriptor.policy.is_some());
    assert!(descriptor.handles[0].policy.is_none());
    assert!(descriptor.handles[1].policy.is_some());
    assert!(Mixed::descriptor().handles.iter().all(|h| h.policy.is_some()));
    assert!(Tenanted::descriptor().policy.is_some());
    assert!(Shipping::descriptor().policy.is_some());
}
