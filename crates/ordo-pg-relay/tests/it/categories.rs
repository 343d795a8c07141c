//! The relay binary on a category in hashed partitions.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{commit, count_status, deposit, pg_pool, redis_pool, xlen};
use fred::interfaces::{ClientLike, KeysInterface};
use ordo::prelude::*;
use ordo_core::contract::config::Config;
use ordo_postgres::{OutboxStatusReport, UnitOfWorkExt};
use ordo_testkit::{Postgres, Process, Redis, eventually};

const TTL: Duration = Duration::from_secs(5);

/// A second partitioned category for the relay-binary test.
#[derive(Aggregate)]
struct Topic;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Topic)]
struct Noted {
    topic: String,
    n: u64,
}

struct Notes;

#[event_handler(part_of = Topic, sequential_by = "topic")]
impl Notes {
    #[handle]
    async fn on_noted(&self, _event: &Noted, _ctx: &HandlerContext) -> anyhow::Result<()> {
        Ok(())
    }
}

fn spawn_relay(
    pg: &Postgres,
    redis: &Redis,
    schema: &str,
    config: Option<&std::path::Path>,
) -> anyhow::Result<Process> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ordo-pg-relay"));
    command
        .env("DATABASE_URL", pg.url())
        .env("REDIS_URL", redis.url())
        .env("ORDO_OUTBOX_SCHEMA", schema)
        .env("ORDO_RELAY_LEASE_TTL_MS", "1500")
        .env("ORDO_RELAY_POLL_MS", "200")
        .env("RUST_LOG", "error")
        .env_remove("ORDO_CONFIG")
        .current_dir(std::env::temp_dir())
        .stderr(Stdio::piped());
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let mut relay = Process::spawn(command)?;
    relay.wait_for_line(|line| line.starts_with("relay ready"), Duration::from_secs(30))?;
    Ok(relay)
}

/// `ordo-pg-relay` on a category recorded in Redis as hashed partitions:
/// without the domain's configuration its rows are refused, and that
/// category never holds back another one; given the configuration
/// (`--config`), it publishes them to their hashed partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_binary_publishes_hashed_categories_and_one_refused_category_blocks_no_other()
-> anyhow::Result<()> {
    let pg = Postgres::start_local()?;
    let redis = Redis::start_local()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "binary", TTL).await?;
    let client = redis_pool(&redis.url()).await?;
    // The workers recorded `account` as 4 hashed partitions.
    let _: () = client
        .set("{account}:__partitioning__", "4", None, None, false)
        .await?;
    let domain = Domain::builder()
        .aggregate::<common::Account>()
        .event_handler(common::Ledger)
        .aggregate::<Topic>()
        .event_handler(Notes)
        .init()?;
    // The `account` row first: the oldest pending row.
    commit(&pool, &outbox, &domain, vec![deposit("a", 1)]).await?;
    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    for n in 1..=3 {
        uow.raise(Noted {
            topic: "t".to_owned(),
            n,
        })?;
    }
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;

    let topic_stream = ordo_redis::PartitionKeys::new("topic", "t", "backfill")
        .primary()
        .to_owned();
    let mut unconfigured = spawn_relay(&pg, &redis, outbox.schema(), None)?;
    // Published, then marked so: the `account` row alone stays pending
    // (refused, not lost).
    eventually(
        Duration::from_secs(20),
        "the other category to be published and marked, the `account` row pending",
        || async { Ok(xlen(&client, &topic_stream).await? == 3 && count_status(&outbox, 0).await? == 1) },
    )
    .await?;
    let status = OutboxStatusReport::read(&outbox).await?;
    assert_eq!((status.refused, status.conflicts), (1, 0), "{status}");
    let refused = outbox.refused().await?;
    assert!(
        refused[0]
            .reason
            .contains("partitioned `4` in Redis but `per_key`"),
        "{refused:?}"
    );
    unconfigured.terminate()?;
    unconfigured.wait_timeout(Duration::from_secs(10))?;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("domain.toml");
    std::fs::write(&path, "[categories.account]\npartitions = 4\n")?;
    let _configured = spawn_relay(&pg, &redis, outbox.schema(), Some(&path))?;
    let config = Config::from_file(&path)?;
    let hashed = ordo_redis::PartitionKeys::of(
        ordo_redis::Routing::new(&config).partition_of("account", "a"),
        "backfill",
    );
    eventually(
        Duration::from_secs(20),
        "the `account` row to be published",
        || async { Ok(count_status(&outbox, 0).await? == 0) },
    )
    .await?;
    assert_eq!(
        xlen(&client, hashed.primary()).await?,
        1,
        "in its hashed partition"
    );
    assert_eq!(
        xlen(&client, &common::account_stream("a")).await?,
        0,
        "never in a partition of its own"
    );
    drop(client.quit().await);
    Ok(())
}
