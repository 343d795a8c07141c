use ordo::prelude::*;

struct Projector;

#[event_handler]
impl Projector {
    #[handle]
    async fn on_placed(&self) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
