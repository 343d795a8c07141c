//! What an operator sees at info level: the connection, the consumer of each
//! handler, partitions taken and let go (one line per round, not per
//! partition), the stop; a default instance id naming host and process; and
//! a failed Redis command's cause (refused, timeout, auth) in the log line.
//! Its own binary: the capturing subscriber is global, since the heartbeat
//! logs from its own thread.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo_core::contract::broker::Broker;
use ordo_core::contract::key::Lane;
use ordo_core::contract::log_events;
use ordo_testkit::{Redis, eventually};

use common::{Recorder, Running, config, publication, subscribe};

/// Every formatted log line at info and above.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines carrying `event = name`.
    fn of(&self, name: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| line.contains(&format!("event=\"{name}\"")))
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_ownership_and_shutdown_are_logged_at_info_with_causes() -> anyhow::Result<()> {
    let lines = Lines::default();
    let writer = lines.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )?;
    let mut redis = Redis::start_local()?;
    let broker = common::broker(&redis.url(), config(3_000, 60_000, 0)).await?;

    // The default instance id names the host and the process.
    let id = broker.instance_id().to_owned();
    let pid = std::process::id().to_string();
    let parts: Vec<&str> = id.rsplitn(3, '-').collect();
    assert!(
        parts.len() == 3 && parts[1] == pid && parts[0].len() == 6 && !parts[2].is_empty(),
        "instance id {id:?} is not <hostname>-<pid>-<random>"
    );
    let connected = lines.of(log_events::REDIS_CONNECTED);
    assert!(
        connected.len() == 1 && connected[0].contains(&id) && connected[0].contains("connected to Redis"),
        "{connected:?}"
    );

    let category = common::category("seen");
    let recorder = Recorder::new();
    let run = Running::start(
        &broker,
        vec![subscribe::partitioned("Watcher", &category, &recorder)],
    );
    broker
        .publish(&[
            publication(&category, "a", 0, Lane::Primary),
            publication(&category, "b", 0, Lane::Primary),
            publication(&category, "c", 0, Lane::Primary),
        ])
        .await?;
    eventually(Duration::from_secs(30), "the three keys handled", || {
        let handled = recorder.handled().len();
        async move { Ok(handled == 3) }
    })
    .await?;
    let started = lines.of(log_events::CONSUMER_STARTED);
    assert!(
        started.len() == 1 && started[0].contains("consumer started for handler Watcher"),
        "{started:?}"
    );
    // The partitions taken, summed up per round: fewer lines than partitions,
    // and no line per lease at info.
    let acquired = lines.of(log_events::PARTITIONS_ACQUIRED);
    assert!(!acquired.is_empty() && acquired.len() < 3, "{acquired:?}");
    assert!(
        lines.of(log_events::LEASE_ACQUIRED).is_empty(),
        "{}",
        lines.text()
    );

    // Redis goes away: the failed discovery round says why, not only that a
    // command failed.
    redis.kill()?;
    eventually(Duration::from_secs(30), "a failed discovery round logged", || {
        let failed = lines.of(log_events::DISCOVERY_FAILED);
        async move { Ok(!failed.is_empty()) }
    })
    .await?;
    let failed = lines.of(log_events::DISCOVERY_FAILED);
    assert!(
        failed.iter().all(|line| line.contains("redis command failed: ")),
        "the cause is missing: {failed:?}"
    );

    redis.restart()?;
    run.stop().await?;
    let released = lines.of(log_events::PARTITIONS_RELEASED);
    assert!(
        released.iter().any(|line| line.contains("reason=\"shutdown\"")),
        "{released:?}"
    );
    assert_eq!(
        lines.of(log_events::CONSUMER_STOPPED).len(),
        1,
        "{}",
        lines.text()
    );
    Ok(())
}
