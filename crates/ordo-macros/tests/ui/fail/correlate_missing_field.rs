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
#[event(part_of = Payment)]
struct PaymentReceived {
    payment_id: String,
    order: String,
}

#[derive(Default, Serialize, Deserialize)]
struct Fulfillment {
    paid: bool,
}

#[process_manager(sequential_by)]
impl Fulfillment {
    #[handle(start, correlate = "order_id")]
    async fn on_placed(&mut self, _event: &OrderPlaced) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle(correlate = "order_id")]
    async fn on_paid(&mut self, _event: &PaymentReceived) -> anyhow::Result<()> {
        self.paid = true;
        Ok(())
    }
}

fn main() {}
