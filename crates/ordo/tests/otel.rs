//! Traces through the broker (the `otel` feature): a request's trace goes
//! on through the events it raises, the handlers that run them, a command
//! one of them sends and the event that command's handler raises, on the
//! inline broker, across Redis (per-key and hashed partitions, a Cluster), through
//! the PostgreSQL outbox, and from one process to another; each handler run is a `process` span
//! (kind consumer) child of its message's `publish` span (kind producer),
//! with the messaging conventions' attributes; a run that fails for good
//! has an error status. Spans are exported by the SDK's in-memory exporter;
//! the conventions' metrics are read as Prometheus renders them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use opentelemetry::trace::{SpanKind, Status, TraceId};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use ordo::otel::Otel;
use ordo::prelude::*;
use ordo_postgres::UnitOfWorkExt as _;
use ordo_redis::RedisBroker;
use tracing::Instrument;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The exporter every test of this binary exports to (the tracer provider,
/// the subscriber and the metrics recorder are process-wide).
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let _ = metrics_handle();
        let exporter = InMemorySpanExporter::default();
        let otel = Otel::with_exporter(exporter.clone());
        tracing_subscriber::registry()
            .with(otel.layer())
            // What goes wrong shows in a failed test's output.
            .with(
                tracing_subscriber::fmt::layer()
                    .with_test_writer()
                    .with_filter(tracing_subscriber::filter::LevelFilter::WARN),
            )
            .init();
        // Spans are exported as they end (a simple exporter); the provider lives as long as the process.
        std::mem::forget(otel);
        exporter
    })
}

/// The Prometheus rendering of the metrics recorded in this process.
fn metrics_handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("the only metrics recorder of this process")
    })
}

/// The sum of the samples of metric `name` (as Prometheus names it) whose
/// labels include every one of `labels`. (The tests of this binary share
/// one recorder when they share a process, as under `cargo test`: they
/// check for at least what they did.)
fn metric(name: &str, labels: &[(&str, &str)]) -> f64 {
    metrics_handle()
        .render()
        .lines()
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name
                && labels
                    .iter()
                    .all(|(key, value)| rest.contains(&format!("{key}=\"{value}\""))))
            .then(|| value.parse::<f64>().ok())
            .flatten()
        })
        .sum()
}

/// The exported spans of trace `trace`.
fn spans_of(trace: TraceId) -> Vec<SpanData> {
    exporter()
        .get_finished_spans()
        .expect("the in-memory exporter answers")
        .into_iter()
        .filter(|span| span.span_context.trace_id() == trace)
        .collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

/// The spans named `name` whose `messaging.message.id` is `id`.
fn named<'a>(spans: &'a [SpanData], name: &str, id: &str) -> Vec<&'a SpanData> {
    spans
        .iter()
        .filter(|span| span.name == name && attribute(span, "messaging.message.id").as_deref() == Some(id))
        .collect()
}

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

/// The ids of what the handlers ran, by what.
type Ran = Arc<Mutex<HashMap<&'static str, Vec<String>>>>;

/// Ships each placed order with a command sent from its handler.
#[derive(Clone)]
struct Shipping {
    ran: Ran,
    domain: Arc<OnceLock<Domain>>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Shipping {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, ctx: &HandlerContext) -> anyhow::Result<()> {
        anyhow::ensure!(
            event.order_id != "poison",
            "order {} cannot be shipped",
            event.order_id
        );
        self.ran
            .lock()
            .unwrap()
            .entry("placed")
            .or_default()
            .push(ctx.message_id().to_owned());
        let domain = self.domain.get().expect("set before anything is raised");
        let ship = ShipOrder {
            order_id: event.order_id.clone(),
            client_id: event.client_id.clone(),
        };
        let _: () = domain
            .send_with(ship, SendOptions::new().id(format!("ship-{}", event.order_id)))
            .await?;
        Ok(())
    }
}

/// Records the shipments (a handler of its own: `Shipping` holds the
/// client's key while its command runs).
#[derive(Clone)]
struct Tracking {
    ran: Ran,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl Tracking {
    #[handle]
    async fn on_shipped(&self, _event: &OrderShipped, ctx: &HandlerContext) -> anyhow::Result<()> {
        self.ran
            .lock()
            .unwrap()
            .entry("shipped")
            .or_default()
            .push(ctx.message_id().to_owned());
        Ok(())
    }
}

struct Warehouse;

#[command_handler(part_of = Order)]
impl Warehouse {
    #[handle]
    async fn ship(&self, command: &ShipOrder, ctx: &HandlerContext) -> anyhow::Result<()> {
        ctx.raise(OrderShipped {
            order_id: command.order_id.clone(),
            client_id: command.client_id.clone(),
        })?;
        Ok(())
    }
}

/// The Redis broker's settings, quick to start.
const PARTITIONING: &str = "[server.partitioning]\nlease_ttl_ms = 3000\nheartbeat_interval_seconds = 0.6\n\
                            poll_interval_seconds = 0.1\ndiscovery_interval_seconds = 0.1\n";

/// [`PARTITIONING`]; `Shipping` gives up at its first failure.
fn config() -> anyhow::Result<Config> {
    Ok(Config::from_toml_str(&format!(
        "{PARTITIONING}[handlers.Shipping]\nmax_retries = 0\n"
    ))?)
}

/// The domain of these tests: `Shipping`, `Tracking` and `Warehouse`, on
/// the Redis at `redis` (the inline broker without one).
async fn domain(ran: &Ran, redis: Option<&str>) -> anyhow::Result<Domain> {
    domain_with(ran, redis, config()?).await
}

/// [`domain`] with `config` on Redis.
async fn domain_with(ran: &Ran, redis: Option<&str>, config: Config) -> anyhow::Result<Domain> {
    let cell = Arc::new(OnceLock::new());
    let mut builder = Domain::builder()
        .aggregate::<Order>()
        .event_handler(Shipping {
            ran: ran.clone(),
            domain: cell.clone(),
        })
        .event_handler(Tracking { ran: ran.clone() })
        .command_handler(Warehouse);
    if let Some(redis) = redis {
        builder = builder
            .broker(RedisBroker::builder(redis).config(config.clone()).build().await?)
            .config(config);
    }
    let domain = builder.init()?;
    assert!(cell.set(domain.clone()).is_ok());
    Ok(domain)
}

/// The trace of `span`.
fn trace_of(span: &tracing::Span) -> TraceId {
    use opentelemetry::trace::TraceContextExt as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt as _;
    span.context().span().span_context().trace_id()
}

/// Raises `order` of client `client` in a request's span; the request's trace.
async fn raise_in_request(domain: &Domain, order: &str, client: &str) -> anyhow::Result<TraceId> {
    let span = tracing::info_span!("request", order);
    let trace = trace_of(&span);
    async {
        let mut uow = domain.unit_of_work();
        uow.raise(OrderPlaced {
            order_id: order.into(),
            client_id: client.into(),
        })?;
        uow.commit().await.map(drop)
    }
    .instrument(span)
    .await?;
    Ok(trace)
}

/// Raises one order in a request's span, waits until `done` says the
/// chain ran, and returns the request's trace.
async fn request(domain: &Domain, order_id: &str, ran: &Ran, done: &'static str) -> anyhow::Result<TraceId> {
    let trace = raise_in_request(domain, order_id, "c-1").await?;
    let handled = ordo_testkit::eventually(Duration::from_secs(30), "the chain handled", || {
        let finished = ran.lock().unwrap().get(done).is_some_and(|ids| !ids.is_empty());
        async move { Ok(finished) }
    })
    .await;
    if let Err(error) = handled {
        anyhow::bail!("{error}; ran: {:?}", ran.lock().unwrap());
    }
    // A run's span ends once its delivery has (acknowledged, after the handler returned).
    let exported =
        ordo_testkit::eventually(Duration::from_secs(30), "the three runs' spans exported", || {
            let runs = spans_of(trace)
                .iter()
                .filter(|span| span.name.starts_with("process "))
                .count();
            async move { Ok(runs >= 3) }
        })
        .await;
    if let Err(error) = exported {
        let names: Vec<(String, Option<String>)> = spans_of(trace)
            .iter()
            .map(|span| (span.name.to_string(), attribute(span, "messaging.message.id")))
            .collect();
        anyhow::bail!("{error}; exported: {names:?}");
    }
    Ok(trace)
}

/// Checks the chain of spans of one request: request → publish order
/// (the event) → process order (its handler) → publish order (the
/// command) → process order (the command's handler) → publish order (its
/// event) → process order (that event's handler), one trace throughout.
fn check_chain(spans: &[SpanData], ran: &Ran, system: &str) {
    let ran = ran.lock().unwrap();
    let (placed, shipped) = (&ran["placed"][0], &ran["shipped"][0]);
    let parent_of = |child: &SpanData| -> &SpanData {
        spans
            .iter()
            .find(|span| span.span_context.span_id() == child.parent_span_id)
            .unwrap_or_else(|| {
                panic!(
                    "the parent of {} ({:?}) was not exported: {spans:#?}",
                    child.name, child.attributes
                )
            })
    };
    for (id, group) in [(placed.as_str(), "Shipping"), (shipped.as_str(), "Tracking")] {
        let process = named(spans, "process order", id);
        assert_eq!(process.len(), 1, "one process span for {id}: {spans:#?}");
        let process = process[0];
        assert_eq!(process.span_kind, SpanKind::Consumer);
        assert_eq!(attribute(process, "messaging.system").as_deref(), Some(system));
        assert_eq!(
            attribute(process, "messaging.operation.type").as_deref(),
            Some("process")
        );
        assert_eq!(
            attribute(process, "messaging.destination.name").as_deref(),
            Some("order")
        );
        assert_eq!(
            attribute(process, "messaging.consumer.group.name").as_deref(),
            Some(group)
        );
        assert_eq!(attribute(process, "ordo.partition_key").as_deref(), Some("c-1"));
        assert_eq!(attribute(process, "ordo.attempt").as_deref(), Some("1"));
        let publish = parent_of(process);
        assert_eq!(
            publish.name, "publish order",
            "a handler's run is the child of its message's publication"
        );
        assert_eq!(publish.span_kind, SpanKind::Producer);
        assert_eq!(attribute(publish, "messaging.message.id").as_deref(), Some(id));
    }
    // The command: published from the first handler's run, handled, and its event published from there.
    let shipped_publish = parent_of(named(spans, "process order", shipped)[0]);
    let command_run = parent_of(shipped_publish);
    // On Redis the command travels in its category's command partitions.
    let command_destination = if system == "redis" {
        "order.commands"
    } else {
        "order"
    };
    assert_eq!(
        command_run.name,
        format!("process {command_destination}"),
        "the shipped event was raised in the command's run"
    );
    assert_eq!(command_run.span_kind, SpanKind::Consumer);
    assert_eq!(
        attribute(command_run, "messaging.consumer.group.name").as_deref(),
        Some("Warehouse")
    );
    let command_id = attribute(command_run, "messaging.message.id").expect("the command's id");
    assert!(command_id.starts_with("ship-"), "{command_id}");
    let command_publish = parent_of(command_run);
    assert_eq!(command_publish.name, format!("publish {command_destination}"));
    assert_eq!(
        attribute(command_publish, "messaging.message.id"),
        Some(command_id)
    );
    let placed_run = parent_of(command_publish);
    assert_eq!(
        attribute(placed_run, "messaging.message.id").as_deref(),
        Some(placed.as_str()),
        "the command was sent from the placed event's run"
    );
    let request = parent_of(parent_of(placed_run));
    assert_eq!(request.name, "request", "the chain starts at the request");
    for span in spans {
        for secret in ["c-1\"", "payload"] {
            assert!(
                !span
                    .attributes
                    .iter()
                    .any(|kv| kv.value.to_string().contains(secret)),
                "{} records a payload: {:?}",
                span.name,
                span.attributes
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_a_request_through_events_and_a_command_on_the_inline_broker()
-> anyhow::Result<()> {
    exporter();
    let ran = Ran::default();
    let domain = domain(&ran, None).await?;
    let running = domain.start();
    let trace = request(&domain, "o-1", &ran, "shipped").await?;
    running.shutdown().await?;
    check_chain(&spans_of(trace), &ran, "inline");
    // The conventions' metrics: one delivery and one successful attempt per handler.
    for (system, group) in [
        ("inline", "Shipping"),
        ("inline", "Tracking"),
        ("ordo", "Warehouse"),
    ] {
        let labels = [
            ("messaging_system", system),
            ("messaging_destination_name", "order"),
            ("messaging_consumer_group_name", group),
            ("messaging_operation_name", "process"),
        ];
        assert!(
            metric("messaging_client_consumed_messages", &labels) >= 1.0,
            "{group}'s deliveries:\n{}",
            metrics_handle().render()
        );
        if system == "inline" {
            assert!(
                metric("messaging_process_duration_count", &labels) >= 1.0,
                "{group}'s attempts"
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_a_request_through_events_and_a_command_across_redis() -> anyhow::Result<()> {
    exporter();
    let redis = ordo_testkit::Redis::start()?;
    let ran = Ran::default();
    let domain = domain(&ran, Some(&redis.url())).await?;
    let running = domain.start();
    let trace = request(&domain, "o-2", &ran, "shipped").await?;
    running.shutdown().await?;
    let spans = spans_of(trace);
    check_chain(&spans, &ran, "redis");
    let process = named(&spans, "process order", &ran.lock().unwrap()["placed"][0])[0].clone();
    let token: u64 = attribute(&process, "ordo.fencing_token")
        .expect("a fencing token")
        .parse()?;
    assert!(token > 0, "the run is under its lease's token");
    // The conventions' metrics name the command's handler, routed by its partition's delivery.
    for (destination, group) in [
        ("order", "Shipping"),
        ("order", "Tracking"),
        ("order.commands", "Warehouse"),
    ] {
        let labels = [
            ("messaging_system", "redis"),
            ("messaging_destination_name", destination),
            ("messaging_consumer_group_name", group),
        ];
        assert!(
            metric("messaging_client_consumed_messages", &labels) >= 1.0,
            "{group}'s deliveries:\n{}",
            metrics_handle().render()
        );
        assert!(
            metric("messaging_process_duration_count", &labels) >= 1.0,
            "{group}'s attempts"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_through_hashed_partitions() -> anyhow::Result<()> {
    exporter();
    let redis = ordo_testkit::Redis::start()?;
    let ran = Ran::default();
    let config = Config::from_toml_str(&format!(
        "{PARTITIONING}[handlers.Shipping]\nmax_retries = 0\n[categories.order]\npartitions = 4\n"
    ))?;
    let domain = domain_with(&ran, Some(&redis.url()), config).await?;
    let running = domain.start();
    let trace = request(&domain, "o-4", &ran, "shipped").await?;
    running.shutdown().await?;
    check_chain(&spans_of(trace), &ran, "redis");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_across_a_redis_cluster() -> anyhow::Result<()> {
    exporter();
    let cluster = ordo_testkit::RedisCluster::start()?;
    let ran = Ran::default();
    let domain = domain(&ran, Some(&cluster.url())).await?;
    let running = domain.start();
    let trace = request(&domain, "o-5", &ran, "shipped").await?;
    running.shutdown().await?;
    check_chain(&spans_of(trace), &ran, "redis");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_fails_for_good_has_an_error_status_and_its_halt_is_an_event() -> anyhow::Result<()> {
    exporter();
    let redis = ordo_testkit::Redis::start()?;
    let ran = Ran::default();
    let domain = domain(&ran, Some(&redis.url())).await?;
    let running = domain.start();
    let trace = raise_in_request(&domain, "poison", "c-9").await?;
    ordo_testkit::eventually(Duration::from_secs(30), "the failed run's span exported", || {
        let done = spans_of(trace).iter().any(|span| span.name == "process order");
        async move { Ok(done) }
    })
    .await?;
    running.shutdown().await?;
    let spans = spans_of(trace);
    let process = spans
        .iter()
        .find(|span| span.name == "process order")
        .expect("exported");
    match &process.status {
        Status::Error { description } => {
            assert!(
                description.contains("order poison cannot be shipped"),
                "{description}"
            )
        }
        other => panic!("the failed run's status is {other:?}"),
    }
    let events: Vec<String> = process
        .events
        .events
        .iter()
        .map(|e| format!("{} {:?}", e.name, e.attributes))
        .collect();
    assert!(
        events.iter().any(|event| event.contains("partition.halted")),
        "the halt is an event of the run's span: {events:#?}"
    );
    let failed = [
        ("messaging_system", "redis"),
        ("messaging_consumer_group_name", "Shipping"),
        ("error_type", "handler_error"),
    ];
    assert!(
        metric("messaging_process_duration_count", &failed) >= 1.0,
        "the failed attempt, with its error type:\n{}",
        metrics_handle().render()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_crosses_the_postgresql_outbox_and_its_relay() -> anyhow::Result<()> {
    exporter();
    let pg = ordo_testkit::Postgres::start()?;
    let redis = ordo_testkit::Redis::start()?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(pg.url())
        .await?;
    let outbox = ordo_postgres::PgOutbox::builder(pool.clone())
        .schema("otel")
        .build()?;
    outbox.migrate().await?;
    let ran = Ran::default();
    let domain = domain(&ran, Some(&redis.url())).await?;
    let running = domain.start();

    // Committed in the caller's transaction, inside its request.
    let span = tracing::info_span!("request", order = "o-pg");
    let trace = trace_of(&span);
    async {
        let mut tx = pool.begin().await?;
        let mut uow = domain.unit_of_work();
        uow.raise(OrderPlaced {
            order_id: "o-pg".into(),
            client_id: "c-pg".into(),
        })?;
        uow.commit_in_outbox(&outbox, &mut tx).await?;
        tx.commit().await?;
        anyhow::Ok(())
    }
    .instrument(span)
    .await?;
    // The relay publishes it later, outside any span.
    let broker = RedisBroker::builder(redis.url()).build().await?;
    let relay = ordo_postgres::PgRelay::new(outbox.clone(), Arc::new(broker), &Config::default());
    assert_eq!(relay.publish_pending().await?.published, 1);
    ordo_testkit::eventually(
        Duration::from_secs(30),
        "the relayed event's run exported",
        || {
            let done = spans_of(trace).iter().any(|span| span.name == "process order");
            async move { Ok(done) }
        },
    )
    .await?;
    running.shutdown().await?;

    let spans = spans_of(trace);
    let placed = &ran.lock().unwrap()["placed"][0];
    let process = named(&spans, "process order", placed);
    let [process] = &process[..] else {
        anyhow::bail!("one run of {placed}: {spans:#?}");
    };
    let publish = spans
        .iter()
        .find(|span| span.span_context.span_id() == process.parent_span_id)
        .expect("the publication's span");
    assert_eq!(publish.name, "publish order");
    let request = spans
        .iter()
        .find(|span| span.span_context.span_id() == publish.parent_span_id)
        .expect("the request's span");
    assert_eq!(
        request.name, "request",
        "the trace went through the outbox row and the relay"
    );
    Ok(())
}

/// The environment variable that makes
/// [`one_trace_crosses_two_processes_through_redis`] the worker it runs: the
/// Redis URL to work on.
const WORKER_REDIS: &str = "ORDO_OTEL_TEST_WORKER_REDIS";

/// One line per span a worker process exported: name, trace id, parent
/// span id, message id.
fn span_line(span: &SpanData) -> String {
    format!(
        "SPAN {}|{}|{}|{}",
        span.name,
        span.span_context.trace_id(),
        span.parent_span_id,
        attribute(span, "messaging.message.id").unwrap_or_default()
    )
}

/// The worker of [`one_trace_crosses_two_processes_through_redis`], run by
/// it as a process of its own: handles the chain on the Redis at `url`,
/// then prints the spans it exported.
async fn worker(url: &str) -> anyhow::Result<()> {
    let ran = Ran::default();
    let domain = domain(&ran, Some(url)).await?;
    let running = domain.start();
    println!("READY");
    ordo_testkit::eventually(
        Duration::from_secs(60),
        "the worker's three runs exported",
        || {
            let runs = exporter()
                .get_finished_spans()
                .map(|spans| {
                    spans
                        .iter()
                        .filter(|span| span.name.starts_with("process "))
                        .count()
                })
                .unwrap_or(0);
            async move { Ok(runs >= 3) }
        },
    )
    .await?;
    running.shutdown().await?;
    for span in exporter().get_finished_spans()? {
        println!("{}", span_line(&span));
    }
    Ok(())
}

/// The request runs in this process, which only publishes; its handlers
/// run in a worker process (this test again, told so by [`WORKER_REDIS`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_crosses_two_processes_through_redis() -> anyhow::Result<()> {
    use std::io::BufRead as _;

    exporter();
    if let Ok(url) = std::env::var(WORKER_REDIS) {
        return worker(&url).await;
    }
    let redis = ordo_testkit::Redis::start()?;
    let worker = std::process::Command::new(std::env::current_exe()?)
        .args([
            "--exact",
            "one_trace_crosses_two_processes_through_redis",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(WORKER_REDIS, redis.url())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    // Killed if this test fails before the worker is done.
    struct Worker(std::process::Child);
    impl Drop for Worker {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut worker = Worker(worker);
    let stdout = worker.0.stdout.take().expect("piped");
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let next = |what: &str| -> anyhow::Result<Option<String>> {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match received.recv_timeout(left) {
            Ok(line) => Ok(Some(line)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Ok(None),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                anyhow::bail!("the worker did not {what} in time")
            }
        }
    };
    // (libtest prints the test's name on the line its output starts.)
    while !next("start")?
        .ok_or_else(|| anyhow::anyhow!("the worker exited before it started"))?
        .ends_with("READY")
    {}

    // This process only publishes: the handlers' types (which partition the
    // category), none of their instances.
    let config = Config::from_toml_str(PARTITIONING)?;
    let producer = Domain::builder()
        .aggregate::<Order>()
        .event_handler_type::<Shipping>()
        .event_handler_type::<Tracking>()
        .broker(
            RedisBroker::builder(redis.url())
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config)
        .init()?;
    let running = producer.start();
    let trace = raise_in_request(&producer, "o-9", "c-1").await?;
    let mut worker_spans = Vec::new();
    while let Some(line) = next("finish")? {
        if let Some((_, span)) = line.split_once("SPAN ") {
            worker_spans.push(span.split('|').map(str::to_owned).collect::<Vec<_>>());
        }
    }
    let status = worker.0.wait()?;
    running.shutdown().await?;
    assert!(status.success(), "the worker failed: {status}");

    let publish = spans_of(trace)
        .into_iter()
        .find(|span| span.name == "publish order")
        .expect("this process published the event in the request's trace");
    let id = attribute(&publish, "messaging.message.id").expect("the event's id");
    let handled = worker_spans
        .iter()
        .find(|span| span[0] == "process order" && span[3] == id)
        .unwrap_or_else(|| panic!("the worker ran {id}: {worker_spans:?}"));
    assert_eq!(
        handled[1],
        trace.to_string(),
        "the worker's run is in the request's trace"
    );
    assert_eq!(
        handled[2],
        publish.span_context.span_id().to_string(),
        "the worker's run is the child of this process's publication"
    );
    // The rest of the chain, in the worker, stays in the trace.
    let in_trace = worker_spans
        .iter()
        .filter(|span| span[1] == trace.to_string())
        .count();
    assert!(
        in_trace >= 5,
        "the command and the shipped event stay in the trace: {worker_spans:?}"
    );
    Ok(())
}
