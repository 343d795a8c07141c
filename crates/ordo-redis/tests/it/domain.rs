//! A domain on the Redis broker, as a new user wires it: what it does
//! without being told (process store, publishing-only processes, shutdown).

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::interfaces::KeysInterface;
use ordo::prelude::*;
use ordo_core::contract::broker::{Broker, POSITION_METADATA, POSITION_SCOPE_METADATA, Publication};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::{Envelope, Metadata};
use ordo_redis::{RedisBroker, RedisProcessStore};
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
    let text = ordo_core::contract::error::error_chain(&error);
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
    let groups: Vec<String> = fred::interfaces::SetsInterface::smembers(
        &client,
        ordo_redis::internals::names::group_registry("shipment"),
    )
    .await?;
    assert!(
        groups.is_empty(),
        "a publisher registers no consumer group: {groups:?}"
    );
    Ok(())
}

#[derive(Aggregate)]
struct Account;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Account)]
struct Deposited {
    #[aggregate_id]
    account: String,
    n: u32,
}

/// Every deposit handled: its number and the metadata it came with.
#[derive(Clone, Default)]
struct Deposits(Arc<Mutex<Vec<(u32, Metadata)>>>);

#[event_handler(part_of = Account, sequential_by = "account")]
impl Deposits {
    #[handle]
    async fn on_deposited(&self, event: &Deposited, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.0.lock().unwrap().push((event.n, ctx.metadata().clone()));
        Ok(())
    }
}

impl Deposits {
    /// The metadata deposit `n` was handled with, once it was.
    fn handled(&self, n: u32) -> Option<Metadata> {
        let handled = self.0.lock().unwrap();
        handled
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, metadata)| metadata.clone())
    }

    /// Waits up to `within` for deposit `n`; its metadata.
    async fn wait(&self, n: u32, within: Duration) -> anyhow::Result<Metadata> {
        eventually(within, &format!("deposit {n} to be handled"), || {
            let found = self.handled(n).is_some();
            async move { Ok(found) }
        })
        .await?;
        Ok(self.handled(n).expect("handled"))
    }
}

/// A domain on `broker` with [`Deposits`] handling account `a`, and deposit
/// 0 handled: published as the PostgreSQL outbox's relay publishes it (at
/// position 7 of its key's scope, with the application's own `tenant`).
/// Returns the domain, its run, the handler and deposit 0's metadata as the
/// handler saw it.
async fn deposit_handled(
    broker: RedisBroker,
) -> anyhow::Result<(Domain, ordo::RunningDomain, Deposits, Metadata)> {
    let deposits = Deposits::default();
    let domain = Domain::builder()
        .aggregate::<Account>()
        .event_handler(deposits.clone())
        .broker(broker.clone())
        .init()?;
    let running = domain.start();
    let mut envelope = Envelope::new(&Deposited {
        account: "a".into(),
        n: 0,
    })?;
    envelope.partition_key = Some("a".into());
    for (key, value) in [
        (POSITION_SCOPE_METADATA, "account:a"),
        (POSITION_METADATA, "7"),
        ("tenant", "acme"),
    ] {
        envelope.metadata.insert(key.into(), value.into());
    }
    broker
        .publish(&[Publication::to_partition("a", Lane::Primary, envelope)])
        .await?;
    let handled = deposits.wait(0, Duration::from_secs(20)).await?;
    Ok((domain, running, deposits, handled))
}

/// A handler passes the metadata of the message it handles on to the event
/// it raises, copying every entry (issue 26.9). Copied along, the handled
/// message's outbox position made the broker drop the new event as already
/// published: committed, never handled, nothing logged. The commit is
/// refused now, naming the reserved key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handled_messages_outbox_position_copied_onto_a_new_event_is_refused_not_dropped()
-> anyhow::Result<()> {
    let redis = Redis::start()?;
    let broker = broker(&redis.url(), config(3_000, 3_600_000, 0)).await?;
    let (domain, running, deposits, handled) = deposit_handled(broker).await?;
    assert_eq!(handled.get(POSITION_METADATA).map(String::as_str), Some("7"));

    let mut uow = domain.unit_of_work();
    for (key, value) in &handled {
        uow.with_metadata(key, value);
    }
    uow.raise(Deposited {
        account: "a".into(),
        n: 1,
    })?;
    let committed = uow.commit().await;
    if committed.is_ok() {
        let fate = match deposits.wait(1, Duration::from_secs(5)).await {
            Ok(_) => "handled",
            Err(_) => "dropped as already published",
        };
        panic!(
            "a unit of work carrying `{POSITION_METADATA}` copied from a handled message was committed, \
             and its event was {fate}"
        );
    }
    let error = committed.unwrap_err().to_string();
    assert!(
        error.contains("metadata key `ordo.position` is reserved for Ordo"),
        "{error}"
    );
    running.shutdown().await?;
    Ok(())
}

/// `UnitOfWork::with_user_metadata` copies a handled message's metadata
/// but Ordo's own entries: the new event is handled, with the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handled_messages_user_metadata_is_passed_on_to_a_new_event() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let broker = broker(&redis.url(), config(3_000, 3_600_000, 0)).await?;
    let (domain, running, deposits, handled) = deposit_handled(broker).await?;

    let mut uow = domain.unit_of_work();
    uow.with_user_metadata(&handled);
    uow.raise(Deposited {
        account: "a".into(),
        n: 1,
    })?;
    uow.commit().await?;
    let passed_on = deposits.wait(1, Duration::from_secs(20)).await?;
    assert_eq!(passed_on.get("tenant").map(String::as_str), Some("acme"));
    assert!(
        !passed_on.keys().any(|key| key.starts_with("ordo.")),
        "Ordo's own entries were copied: {passed_on:?}"
    );
    running.shutdown().await?;
    Ok(())
}
