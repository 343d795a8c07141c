//! Every kind of partition key field: strings, integers, UUIDs, `Option`s of
//! those, and a field whose name is a keyword.

use ordo::prelude::*;

#[derive(Aggregate)]
struct Account;

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Opened {
    #[aggregate_id]
    id: uuid::Uuid,
    region: Option<String>,
    branch: u16,
    r#type: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Closed {
    #[aggregate_id]
    id: uuid::Uuid,
    region: Option<String>,
    branch: u16,
    r#type: String,
}

#[derive(Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Moved {
    id: i64,
    region: Option<u64>,
}

struct ByRegion;

#[event_handler(part_of = Account, sequential_by = "region")]
impl ByRegion {
    #[handle]
    async fn opened(&self, _event: &Opened) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn closed(&self, _event: &Closed) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn moved(&self, _event: &Moved) -> Result<(), HandlerError> {
        Ok(())
    }
}

struct ByBranch;

#[event_handler(sequential_by = "branch")]
impl ByBranch {
    #[handle]
    async fn opened(&self, _event: &Opened) -> anyhow::Result<()> {
        Ok(())
    }
}

struct ById;

#[event_handler(sequential_by = "id")]
impl ById {
    #[handle]
    async fn opened(&self, _event: &Opened) -> anyhow::Result<()> {
        Ok(())
    }

    #[handle]
    async fn moved(&self, _event: &Moved) -> anyhow::Result<()> {
        Ok(())
    }
}

struct ByType;

#[event_handler(sequential_by = "type")]
impl ByType {
    #[handle]
    async fn opened(&self, _event: &Opened) -> anyhow::Result<()> {
        Ok(())
    }
}

fn main() {
    let key = ByType::descriptor().handles[0].key.unwrap();
    assert_eq!(key.field(), "type");
    for descriptor in [ByRegion::descriptor(), ByBranch::descriptor(), ById::descriptor()] {
        assert!(descriptor.handles.iter().all(|h| h.key.is_some()));
    }
}
