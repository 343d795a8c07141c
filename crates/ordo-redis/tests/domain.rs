//! A domain on the Redis broker, as a new user wires it: what it does
//! without being told (process store, publishing-only processes, shutdown).

mod common;

use std::time::Duration;

use fred::interfaces::KeysInterface;
use ordo::prelude::*;
use ordo_redis::RedisProcessStore;
use ordo_testkit::Redis;

use common::topology::TestRedis;
use common::{broker, config, pool};
use ordo_testkit::eventually;

#[derive(Aggregate)]
struct Shipment;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Shipment)]
struct ShipmentBooked {
    #[aggregate_id]
    shipment_id: String,
    order_id: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Tracking {
    booked: u32,
}

#[process_manager]
impl Tracking {
    #[handle(start, correlate = "order_id")]
    async fn on_booked(&mut self, _event: &ShipmentBooked, _ctx: &HandlerContext) -> anyhow::Result<()> {
        self.booked += 1;
        Ok(())
    }
}

fn booked(shipment_id: &str, order_id: &str) -> ShipmentBooked {
    ShipmentBooked {
        shipment_id: shipment_id.into(),
        order_id: order_id.into(),
    }
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    process_managers_keep_their_state_in_redis_without_being_told
);

async fn process_managers_keep_their_state_in_redis_without_being_told(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
    // No `.process_store(broker.process_store())`: the broker's store is the default.
    let domain = Domain::builder()
        .aggregate::<Shipment>()
        .process_manager::<Tracking>()
        .broker(broker)
        .config(config(3_000, 3_600_000, 0))
        .init()?;
    let running = domain.start();
    let mut uow = domain.unit_of_work();
    uow.raise(booked("s-1", "o-1"))?;
    uow.raise(booked("s-2", "o-1"))?;
    uow.commit().await?;

    let client = pool(&url).await?;
    let key = RedisProcessStore::key("Tracking", "o-1");
    eventually(
        Duration::from_secs(20),
        "the instance state saved in Redis",
        || {
            let client = client.clone();
            let key = key.clone();
            async move {
                let state: Option<String> = client.get(&key).await?;
                Ok(state.as_deref() == Some(r#"{"booked":2}"#))
            }
        },
    )
    .await?;
    running.shutdown().await?;
    Ok(())
}

#[tokio::test]
async fn a_connection_error_names_the_url_it_tried() -> anyhow::Result<()> {
    // Port 1 on loopback: nothing listens there.
    let url = "redis://127.0.0.1:1/0";
    let error = ordo_redis::RedisBroker::builder(url)
        .build()
        .await
        .expect_err("nothing listens on port 1");
    let text = ordo_core::error::error_chain(&error);
    assert!(
        text.starts_with("cannot connect to Redis at redis://127.0.0.1:1/0: "),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn the_domain_uses_the_config_the_broker_was_built_with_and_refuses_another() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let built_with = config(3_000, 60_000, 1);
    let broker = broker(&url, built_with.clone()).await?;
    let domain = Domain::builder()
        .process_manager::<Tracking>()
        .broker(broker.clone())
        .init()?;
    assert_eq!(domain.config(), &built_with);

    // The same Config again is fine; a different one is refused, naming why.
    Domain::builder()
        .broker(broker.clone())
        .config(built_with)
        .init()?;
    let error = Domain::builder()
        .broker(broker)
        .config(ordo::Config::default())
        .init()
        .expect_err("a Config different from the broker's");
    assert!(
        error
            .to_string()
            .contains("the domain's Config differs from the one broker `redis` was built with"),
        "{error}"
    );
    Ok(())
}

/// The new user's publisher: start, commit, shut down at once. Every
/// committed event reaches Redis, and the publisher never joined a group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_that_shuts_down_right_after_committing_loses_nothing() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let url = redis.url();
    let broker = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let domain = Domain::builder()
        .aggregate::<Shipment>()
        .process_manager::<Tracking>()
        .broker(broker)
        .init()?;
    let publisher = domain.start_publisher();
    for n in 0..50 {
        let mut uow = domain.unit_of_work();
        uow.raise(booked(&format!("s-{n}"), &format!("o-{}", n % 5)))?;
        uow.commit().await?;
    }
    publisher.shutdown().await?;

    let client = pool(&url).await?;
    let length: u64 = fred::interfaces::StreamsInterface::xlen(&client, "shipment").await?;
    assert_eq!(length, 50, "every committed event is in the stream");
    let groups: Vec<String> =
        fred::interfaces::SetsInterface::smembers(&client, ordo_redis::names::group_registry("shipment"))
            .await?;
    assert!(
        groups.is_empty(),
        "a publisher registers no consumer group: {groups:?}"
    );
    Ok(())
}
