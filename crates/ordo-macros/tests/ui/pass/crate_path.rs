//! `crate = "..."` names where Ordo is when it is not `::ordo`: under
//! another name at the crate root, or re-exported by a module. (The macros'
//! unit tests check that every generated path goes through the given one.)

extern crate ordo as renamed_ordo;

mod reexport {
    pub use ::ordo as ordo_again;
}

// `#[handle]` and `#[sequencing_policy]` are consumed by the handler
// attributes, so they need not be in scope.
use renamed_ordo::prelude::HandlerContext;
use renamed_ordo::{Aggregate, Command, Event, command_handler, event_handler, process_manager};
use serde::{Deserialize, Serialize};

#[derive(Aggregate)]
#[aggregate(crate = "renamed_ordo")]
struct Order;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order, crate = "crate::reexport::ordo_again")]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

#[derive(Serialize, Deserialize, Command)]
#[command(crate = "::renamed_ordo", part_of = Order)]
struct PlaceOrder {
    #[aggregate_id]
    order_id: String,
}

struct Projector;

#[event_handler(part_of = Order, sequential_by = "client_id", crate = "renamed_ordo")]
impl Projector {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced, _ctx: &HandlerContext) -> Result<(), std::io::Error> {
        Ok(())
    }
}

struct Placer;

#[command_handler(crate = "reexport::ordo_again", part_of = Order)]
#[sequencing_policy(property = "order_id")]
impl Placer {
    #[handle]
    async fn on_place(&self, _command: &PlaceOrder) -> Result<(), std::io::Error> {
        Ok(())
    }
}

#[derive(Default, Serialize, Deserialize)]
struct Fulfillment;

#[process_manager(sequential_by, crate = "renamed_ordo")]
impl Fulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> Result<(), std::io::Error> {
        Ok(())
    }
}

fn main() {
    use renamed_ordo::prelude::{CommandHandler, EventHandler, Message, ProcessManager};
    assert_eq!(<OrderPlaced as Message>::CATEGORY, "order");
    assert_eq!(Projector::descriptor().sequential_by, Some("client_id"));
    assert!(Placer::descriptor().policy.is_some());
    assert!(Fulfillment::descriptor().partitioned);
}
