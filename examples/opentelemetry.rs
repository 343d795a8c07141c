//! Traces through the broker: a checkout request raises orders; a handler
//! ships each with a command; the command's handler raises `OrderShipped`;
//! another handler tracks it. Everything runs on the Redis broker, and one
//! trace per request shows it all: the request, each publication
//! (`publish order`, kind producer) and each handler run (`process order`,
//! `process order.commands`, kind consumer), exported over OTLP/HTTP.
//!
//! ```text
//! cargo run -p ordo --example opentelemetry --features otel
//! ```
//!
//! Uses the Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`) and the
//! standard OpenTelemetry variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (default
//! `http://localhost:4318`, a collector or Jaeger's OTLP port),
//! `OTEL_SERVICE_NAME` (default `ordo-example` here). It flushes the spans
//! and exits 0 once the three orders are tracked.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use ordo::otel::Otel;
use ordo::otel::opentelemetry::trace::TraceContextExt as _;
use ordo::otel::tracing_opentelemetry::OpenTelemetrySpanExt as _;
use ordo::prelude::*;
use ordo_redis::RedisBroker;
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Aggregate)]
struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Command)]
#[command(part_of = Order)]
struct ShipOrder {
    #[routing_key]
    order_id: String,
    client_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderShipped {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

/// Ships each placed order: a command, sent from the handler, whose trace
/// goes on from this run.
#[derive(Clone)]
struct Shipping {
    domain: Arc<OnceLock<Domain>>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Shipping {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        let domain = self.domain.get().expect("set before anything is raised");
        domain
            .dispatch(ShipOrder {
                order_id: event.order_id.clone(),
                client_id: event.client_id.clone(),
            })
            .await?;
        Ok(())
    }
}

struct Warehouse;

#[command_handler(part_of = Order)]
impl Warehouse {
    #[handle]
    async fn ship(&self, command: &ShipOrder, ctx: &HandlerContext) -> anyhow::Result<()> {
        tracing::info!(order = %command.order_id, "shipping");
        ctx.raise(OrderShipped {
            order_id: command.order_id.clone(),
            client_id: command.client_id.clone(),
        })?;
        Ok(())
    }
}

/// Tracks the shipments, with each one's conversation and cause.
#[derive(Clone, Default)]
struct Tracking {
    shipped: Arc<Mutex<Vec<String>>>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Tracking {
    #[handle]
    async fn on_shipped(&self, event: &OrderShipped, ctx: &HandlerContext) -> anyhow::Result<()> {
        tracing::info!(
            order = %event.order_id,
            correlation_id = ctx.correlation_id(),
            causation_id = ctx.causation_id().unwrap_or("-"),
            "shipped"
        );
        self.shipped
            .lock()
            .expect("not poisoned")
            .push(event.order_id.clone());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let otel = Otel::from_env_named(Some("ordo-example"))?;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer())
        .with(otel.layer())
        .init();

    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let config = Config::from_toml_str(
        "[server.partitioning]\nlease_ttl_ms = 3000\ndiscovery_interval_seconds = 0.2\n",
    )?;
    let cell = Arc::new(OnceLock::new());
    let tracking = Tracking::default();
    let domain = Domain::builder()
        .aggregate::<Order>()
        .event_handler(Shipping { domain: cell.clone() })
        .command_handler(Warehouse)
        .event_handler(tracking.clone())
        .broker(RedisBroker::builder(&url).config(config.clone()).build().await?)
        .config(config)
        .init()?;
    cell.set(domain.clone())
        .map_err(|_| anyhow::anyhow!("the domain is set once"))?;
    let running = domain.start();

    let run = uuid::Uuid::new_v4().simple().to_string();
    let orders: Vec<String> = (1..=3).map(|n| format!("{}-{n}", &run[..8])).collect();
    let checkout = tracing::info_span!("checkout", client = "alice");
    let trace_id = checkout.context().span().span_context().trace_id();
    async {
        let mut uow = domain.unit_of_work();
        for order in &orders {
            uow.raise(OrderPlaced {
                order_id: order.clone(),
                client_id: "alice".into(),
            })?;
        }
        uow.commit().await.map(drop)
    }
    .instrument(checkout)
    .await?;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let shipped = tracking.shipped.lock().expect("not poisoned").clone();
        if orders.iter().all(|order| shipped.contains(order)) {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the orders were not all shipped within 60 s (shipped: {shipped:?}); is Redis at {url} reachable?"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.shutdown().await?;
    otel.shutdown()?;
    println!("trace {trace_id}: checkout, 3 orders placed, shipped and tracked");
    Ok(())
}
