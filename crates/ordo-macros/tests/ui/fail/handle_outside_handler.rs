use ordo::prelude::*;

struct Projector;

impl Projector {
    #[handle]
    async fn on_placed(&self) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {}
