//! Ordo's metrics on a Prometheus endpoint, with a Redis domain producing
//! them: `cargo run -p ordo-cli --example prometheus` (Redis from
//! `REDIS_URL`, default `redis://127.0.0.1:6379`), then
//! `curl -s http://127.0.0.1:9898/metrics | grep ordo_`.
//!
//! The domain publishes orders for a handful of clients, partitioned by
//! client; every 25th order is poison and halts its client's partition,
//! so `ordo_partitions_halted_total` moves and `ordo status` shows work
//! for an operator (`ordo inspect order <client>`, then `ordo skip ...`).
//!
//! The broker counts what it does through the `metrics` facade; the
//! cluster-wide gauges (lag, pending, halted, partitions) are read from
//! Redis by [`collect`] below, which a service can copy as is.
//!
//! Options (environment): `ORDO_METRICS_ADDR` (default `127.0.0.1:9898`),
//! `ORDO_EXAMPLE_SECONDS` (run time, default until Ctrl-C).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use metrics_exporter_prometheus::PrometheusBuilder;
use ordo::prelude::*;
use ordo_redis::{ClusterStatus, RedisBroker};

#[derive(Aggregate)]
struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
    poison: bool,
}

struct OrderProjector;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        anyhow::ensure!(!event.poison, "order {} is poison", event.order_id);
        tokio::time::sleep(Duration::from_millis(5)).await;
        Ok(())
    }
}

const CLIENTS: [&str; 6] = ["alice", "bob", "carol", "dave", "erin", "frank"];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let addr: SocketAddr = std::env::var("ORDO_METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9898".to_owned())
        .parse()
        .context("ORDO_METRICS_ADDR must be host:port")?;
    let run_for = match std::env::var("ORDO_EXAMPLE_SECONDS") {
        Ok(seconds) => Some(Duration::from_secs(
            seconds.parse().context("ORDO_EXAMPLE_SECONDS")?,
        )),
        Err(_) => None,
    };

    // The exporter: everything recorded through `metrics` is served here.
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .context("cannot start the Prometheus listener")?;
    println!("metrics on http://{addr}/metrics (Redis {redis_url}); Ctrl-C to stop");

    let config =
        Config::from_toml_str("[server.partitioning]\nmax_retries = 2\nretry_backoff_initial_ms = 50\n")?;
    let broker = RedisBroker::builder(redis_url)
        .config(config.clone())
        .build()
        .await?;
    let domain = Domain::builder()
        .aggregate::<Order>()
        .event_handler(OrderProjector)
        .broker(broker.clone())
        .config(config.clone())
        .init()?;
    let running = domain.start();
    let status = ClusterStatus::new(broker.client().clone(), config.priority_lanes().backfill_suffix());
    let collector = tokio::spawn(collect(status, Duration::from_secs(5)));

    let publishing = async {
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        for n in 1_u64.. {
            ticker.tick().await;
            let mut uow = domain.unit_of_work();
            uow.raise(OrderPlaced {
                order_id: format!("o-{n}"),
                client_id: CLIENTS[(n % CLIENTS.len() as u64) as usize].to_owned(),
                poison: n % 25 == 0,
            })?;
            uow.commit().await?;
        }
        anyhow::Ok(())
    };
    let stop = async {
        match run_for {
            Some(duration) => tokio::time::sleep(duration).await,
            // Ctrl-C, or SIGTERM (what `kill` and container runtimes send).
            None => {
                let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("a SIGTERM handler");
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            }
        }
    };
    tokio::select! {
        result = publishing => result?,
        () = stop => {}
    }
    collector.abort();
    running.shutdown().await?;
    Ok(())
}

/// Every `interval`, sets the cluster-wide gauges from Redis: per category
/// and group `ordo_lag_entries`, `ordo_pending_entries`,
/// `ordo_halted_partitions`; per category `ordo_partitions`. Any one
/// process may run it (each run reads the whole cluster).
async fn collect(status: ClusterStatus, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    loop {
        ticker.tick().await;
        if let Err(error) = collect_once(&status).await {
            eprintln!("cannot collect the cluster gauges: {error}");
        }
    }
}

async fn collect_once(status: &ClusterStatus) -> anyhow::Result<()> {
    for category in status.categories().await? {
        let groups = status.groups(&category).await?;
        let partitions = status.partitions(&category, &groups).await?;
        metrics::gauge!("ordo_partitions", "category" => category.clone()).set(partitions.len() as f64);
        for (i, group) in groups.iter().enumerate() {
            let positions = partitions.iter().filter_map(|p| p.groups.get(i));
            let (mut lag, mut pending, mut halted) = (0, 0, 0);
            for position in positions {
                lag += position.lag;
                pending += position.pending;
                halted += u64::from(position.halt.is_some());
            }
            let labels = [("category", category.clone()), ("group", group.clone())];
            metrics::gauge!("ordo_lag_entries", &labels).set(lag as f64);
            metrics::gauge!("ordo_pending_entries", &labels).set(pending as f64);
            metrics::gauge!("ordo_halted_partitions", &labels).set(halted as f64);
        }
    }
    Ok(())
}
