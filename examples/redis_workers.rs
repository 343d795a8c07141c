//! Watch partitions spread over engine instances and fail over, against a
//! local Redis (`REDIS_URL`, default `redis://127.0.0.1:6379`).
//!
//! In two or three terminals, start workers:
//!
//! ```text
//! cargo run -p ordo-redis --example redis_workers -- work
//! ```
//!
//! and in another, publish orders for a handful of clients:
//!
//! ```text
//! cargo run -p ordo-redis --example redis_workers -- publish 200
//! ```
//!
//! Each worker prints the orders it handles, with the partition (client) and
//! the fencing token of its lease. The clients spread evenly over the
//! workers; one client's orders always come in publish order, from one
//! worker at a time. Stop a worker with Ctrl-C: it finishes its message,
//! releases its leases, and the others take its clients over at once. Kill
//! one with `kill -9`: the others take over when its leases expire
//! (`lease_ttl_ms`, 15 s by default; set `ORDO_SERVER_PARTITIONING_LEASE_TTL_MS` to shorten it),
//! at a higher token, resuming where it stopped.

use std::time::Duration;

use ordo::prelude::*;
use ordo_redis::RedisBroker;

#[derive(Aggregate)]
struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
    number: u64,
}

struct OrderPrinter {
    instance: String,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderPrinter {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        // Some work, so hand-overs happen mid-stream.
        tokio::time::sleep(Duration::from_millis(50)).await;
        println!(
            "[{}] {:<10} order #{:<4} token {}",
            self.instance,
            event.client_id,
            event.number,
            ctx.fencing_token()
        );
        Ok(())
    }
}

/// Ctrl-C, or SIGTERM (what `kill`, systemd and container runtimes send).
async fn stop_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Ordo logs leases, hand-overs, halts and failures through `tracing`.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let mut args = std::env::args().skip(1);
    let mode = args.next();
    // The file ORDO_CONFIG names, if any, then ORDO_ variables
    // (ORDO_SERVER_PARTITIONING_LEASE_TTL_MS=3000 for faster failovers).
    let config = ordo::Config::load(None)?;
    let broker = RedisBroker::builder(&url).config(config).build().await?;
    let instance = broker.instance_id().to_owned();
    let builder = Domain::builder().aggregate::<Order>();
    let builder = match mode.as_deref() {
        // A publisher needs the handler's type (its partition key), not an instance.
        Some("publish") => builder.event_handler_type::<OrderPrinter>(),
        _ => builder.event_handler(OrderPrinter {
            instance: instance.clone(),
        }),
    };
    let domain = builder.broker(broker.clone()).init()?; // the domain uses the broker's Config

    match mode.as_deref() {
        Some("work") => {
            println!("[{instance}] working; Ctrl-C (or SIGTERM) to hand over and stop");
            let running = domain.start();
            stop_signal().await?;
            println!("[{instance}] releasing leases");
            running.shutdown().await?;
        }
        Some("publish") => {
            let count: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(100);
            // Publishes what is committed; never consumes (it registered the
            // handler's type only, for its partition key).
            let publisher = domain.start_publisher();
            let mut uow = domain.unit_of_work();
            for number in 0..count {
                uow.raise(OrderPlaced {
                    order_id: format!("o-{number}"),
                    client_id: format!("client-{}", number % 8),
                    number,
                })?;
            }
            uow.commit().await?;
            // Publishes everything committed, or fails naming what was left.
            publisher.shutdown().await?;
            println!("published {count} orders");
        }
        _ => anyhow::bail!("usage: redis_workers work | publish [COUNT]"),
    }
    Ok(())
}
