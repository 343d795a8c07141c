//! The Redis broker's important log lines carry their stable `event` names
//! (`ordo_core::contract::log_events`). Its own binary: the capturing subscriber is
//! global, since the heartbeat logs from its own thread.

use crate::common;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::key::Lane;
use ordo_core::contract::log_events;
use ordo_testkit::Redis;
use tracing_subscriber::layer::SubscriberExt;

use common::{Outcome, Recorder, Running, broker, config, envelope, publication, subscribe};
use ordo_testkit::eventually;

/// Collects the `event` field of every log line.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<BTreeSet<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Visit<'a>(&'a Mutex<BTreeSet<String>>);
        impl tracing::field::Visit for Visit<'_> {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "event" {
                    self.0.lock().unwrap().insert(value.to_owned());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        event.record(&mut Visit(&self.0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halts_reaps_leases_and_dead_letters_are_logged_with_their_event_names() -> anyhow::Result<()> {
    let events = Events::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(events.clone()))?;
    let redis = Redis::start()?;
    let url = redis.url();
    let keyed = common::category("keyed");
    let plain = common::category("plain");
    let poison = Recorder::with(Arc::new(|key, _, _| {
        if key == "bad" {
            Outcome::Fail
        } else {
            Outcome::Succeed
        }
    }));
    let failing = Recorder::with(Arc::new(|_, _, _| Outcome::Fail));
    let redis_broker = broker(&url, config(3_000, 200, 1)).await?;
    let run = Running::start(
        &redis_broker,
        vec![
            subscribe::partitioned("Keyed", &keyed, &poison),
            subscribe::plain("Plain", &plain, &failing),
        ],
    );
    redis_broker
        .publish(&[
            publication(&keyed, "good", 0, Lane::Primary),
            publication(&keyed, "bad", 0, Lane::Primary),
            Publication::to_base(envelope(&plain, "Happened", None, 0)),
        ])
        .await?;
    let expected = [
        log_events::LEASE_ACQUIRED,
        log_events::HANDLER_FAILED,
        log_events::PARTITION_HALTED,
        log_events::PARTITION_REAPED,
        log_events::MESSAGE_DEAD_LETTERED,
    ];
    eventually(Duration::from_secs(15), "every expected event name", || {
        let events = events.clone();
        async move {
            let names = events.0.lock().unwrap().clone();
            Ok(expected.iter().all(|name| names.contains(*name)))
        }
    })
    .await?;
    let names = events.0.lock().unwrap().clone();
    assert!(
        names.iter().all(|name| log_events::ALL.contains(&name.as_str())),
        "{names:?}"
    );
    run.stop().await?;
    Ok(())
}
