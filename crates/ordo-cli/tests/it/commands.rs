//! Commands waiting per key, as `ordo status` and `ordo partitions` show
//! them: a command partition is a partition of the command stream category
//! (`<aggregate>.commands`), listed like an event category's.

use crate::common;

use std::sync::Arc;

use common::{WAIT, ordo_on};
use ordo::prelude::*;
use ordo_redis::RedisBroker;
use ordo_testkit::{Redis, eventually};
use tokio::sync::Semaphore;

/// The aggregate of the commands.
#[derive(Debug, Aggregate)]
pub struct Kitchen;

/// A command sent across instances.
#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Kitchen)]
pub struct Cook {
    /// The routing key.
    #[routing_key]
    pub table: String,
    /// The dish.
    pub dish: u32,
}

/// Cooks one dish per permit the test hands out.
#[derive(Debug)]
pub struct Cooks {
    permits: Arc<Semaphore>,
}

#[command_handler(part_of = Kitchen)]
impl Cooks {
    #[handle]
    async fn cook(&self, command: &Cook) -> anyhow::Result<u32> {
        self.permits.acquire().await?.forget();
        Ok(command.dish)
    }
}

const CONFIG: &str = "\
[server.partitioning]
lease_ttl_ms = 3000
heartbeat_interval_seconds = 0.5
poll_interval_seconds = 0.05
discovery_interval_seconds = 0.1
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_partitions_show_the_commands_waiting_per_key() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let dir = tempfile::tempdir()?;
    let config = Config::from_toml_str(CONFIG)?;
    let permits = Arc::new(Semaphore::new(0));
    let owner = Domain::builder()
        .aggregate::<Kitchen>()
        .command_handler(Cooks {
            permits: Arc::clone(&permits),
        })
        .broker(
            RedisBroker::builder(redis.url())
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config.clone())
        .init()?;
    let running = owner.start();
    let sender = Domain::builder()
        .aggregate::<Kitchen>()
        .command_handler_type::<Cooks>()
        .broker(
            RedisBroker::builder(redis.url())
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config)
        .init()?;
    // Table t-1 gets four dishes: the first one cooks (blocked), three wait.
    let mut sends = Vec::new();
    for dish in 1..=4 {
        let sender = sender.clone();
        sends.push(tokio::spawn(async move {
            sender
                .send::<_, u32>(Cook {
                    table: "t-1".into(),
                    dish,
                })
                .await
        }));
    }
    let url = redis.url();
    let path = dir.path().to_owned();
    eventually(WAIT, "four commands of t-1 shown waiting", || {
        let url = url.clone();
        let path = path.clone();
        async move {
            let output = ordo_on(&url, &path, &["partitions", "kitchen.commands", "--json"])
                .await
                .map_err(|e| e.to_string())?;
            let Ok(rows) = serde_json::from_str::<serde_json::Value>(&output.stdout) else {
                return Ok(false);
            };
            let waiting = rows
                .as_array()
                .and_then(|rows| rows.iter().find(|row| row["key"] == "t-1"))
                .map(|row| row["lag"].as_u64().unwrap_or(0) + row["pending"].as_u64().unwrap_or(0));
            Ok(waiting == Some(4))
        }
    })
    .await?;
    let status = ordo_on(&url, &path, &["status"]).await?.expect_code(0)?.stdout;
    assert!(
        status.lines().any(|line| line.starts_with("kitchen.commands")),
        "the command category is listed: {status}"
    );
    permits.add_permits(4);
    for (dish, send) in (1..=4).zip(sends) {
        assert_eq!(send.await??, dish);
    }
    running.shutdown().await?;
    Ok(())
}
