//! What this features generate compiles without a warning under
//! strict lints and without the implicit prelude: handler names, cfg'd
//! methods (including the only one taking the context), the context
//! parameter check, the key extractors and a process manager's
//! per-category correlation check.

#![deny(warnings, unused, rust_2018_idioms, unused_qualifications)]

mod strict {
    #![no_implicit_prelude]

    use ::ordo::prelude::*;

    #[derive(Aggregate)]
    pub struct Order;

    #[derive(Aggregate)]
    pub struct Payment;

    #[derive(Serialize, Deserialize, Event)]
    #[event(part_of = Order)]
    pub struct OrderPlaced {
        #[aggregate_id]
        pub order_id: ::std::string::String,
        pub client_id: ::std::string::String,
    }

    #[derive(Serialize, Deserialize, Event)]
    #[event(part_of = Payment)]
    pub struct PaymentReceived {
        pub reference: ::std::string::String,
        pub order_id: ::std::string::String,
    }

    pub struct Projector;

    #[event_handler(part_of = Order, sequential_by = "client_id", name = "strict.projector")]
    impl Projector {
        #[handle]
        #[cfg(not(any()))]
        async fn on_placed(&self, _event: &OrderPlaced) -> ::anyhow::Result<()> {
            ::core::result::Result::Ok(())
        }

        #[handle]
        #[cfg(any())]
        async fn on_placed_with_context(&self, _event: &OrderPlaced, _ctx: &HandlerContext) -> ::anyhow::Result<()> {
            ::core::result::Result::Ok(())
        }
    }

    #[derive(Default, Serialize, Deserialize)]
    pub struct Fulfillment;

    #[process_manager(sequential_by, name = "strict-fulfillment")]
    impl Fulfillment {
        #[handle(start, correlate = "order_id")]
        async fn on_placed(&mut self, _event: &OrderPlaced, _ctx: &HandlerContext) -> ::anyhow::Result<()> {
            ::core::result::Result::Ok(())
        }

        #[handle(correlate = "reference")]
        async fn on_paid(&mut self, _event: &PaymentReceived) -> ::anyhow::Result<()> {
            ::core::result::Result::Ok(())
        }
    }
}

fn main() {
    use ordo::contract::handler::{EventHandler, ProcessManager};
    assert_eq!(strict::Projector::descriptor().name, "strict.projector");
    assert_eq!(strict::Fulfillment::descriptor().name, "strict-fulfillment");
}
