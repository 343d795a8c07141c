use ordo::prelude::*;

#[derive(Aggregate)]
struct Order;

#[derive(Aggregate)]
struct Payment;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    order_id: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderShipped {
    id: String,
    order_id: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Payment)]
struct PaymentReceived {
    reference: String,
}

#[derive(Default, Serialize, Deserialize)]
struct Fulfillment;

#[process_manager(sequential_by)]
impl Fulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    // Same category as `OrderPlaced`, another field: an error.
    #[handle(correlate = "id")]
    async fn on_shipped(&mut self, _event: &OrderShipped) -> anyhow::Result<()> {
        Ok(())
    }

    // Another category: its own field is fine.
    #[handle(correlate = "reference")]
    async fn on_paid(&mut self, _event: &PaymentReceived) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
