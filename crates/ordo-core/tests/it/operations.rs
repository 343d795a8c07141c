//! What operators rely on, on the inline broker: per-handler settings,
//! priority routing by number, health as data and the
//! stable log event names.

use crate::support;

use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ordo_core::contract::backoff::Backoff;
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::Lane;
use ordo_core::contract::log_events;
use ordo_core::runtime::uow::priority;
use ordo_core::{
    Config, ConfigError, Domain, HandlerConfig, HealthState, InMemoryOutbox, NewOutboxRow, Outbox,
    OutboxProcessor, UsageProblem,
};
use support::*;
use tracing_subscriber::layer::SubscriberExt;

spec!(ByClient => handler("ByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
]));
spec!(PerAggregate => handler("PerAggregate", HandlerKind::Event, "order", None, vec![on::<OrderPlaced>(None)]));
spec!(Commands => handler("Commands", HandlerKind::Command, "order", None, vec![on::<PlaceOrder>(None)]));

fn config(text: &str) -> Config {
    let base =
        "[server.partitioning]\nmax_retries = 3\nretry_backoff_initial_ms = 1\nretry_backoff_max_ms = 2\n";
    Config::from_toml_str(&format!("{base}{text}")).unwrap()
}

async fn commit(domain: &Domain, events: impl IntoIterator<Item = OrderPlaced>) {
    let mut uow = domain.unit_of_work();
    for event in events {
        uow.raise(event).unwrap();
    }
    uow.commit().await.unwrap();
}

fn attempts(probe: &Probe, handler: &str) -> Vec<u32> {
    probe
        .seen()
        .iter()
        .filter(|s| s.handler == handler)
        .map(|s| s.attempt)
        .collect()
}

// ------------------------------------------------------------ per handler

#[tokio::test]
async fn a_handler_table_overrides_max_retries_for_that_handler_only() {
    let probe = Probe::new("client_id").poisoned_by(1).shared();
    let domain = Domain::builder()
        .config(config("[handlers.ByClient]\nmax_retries = 1\n"))
        .event_handler(Recorder::<ByClient>::new(&probe))
        .event_handler(Recorder::<PerAggregate>::new(&probe))
        .init()
        .unwrap();
    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    // max_retries = N: N + 1 attempts, on every handler.
    assert_eq!(attempts(&probe, "ByClient"), [1, 2]);
    assert_eq!(attempts(&probe, "PerAggregate"), [1, 2, 3, 4]);
    let inline = domain.inline_broker().unwrap();
    assert_eq!(inline.halted()[0].attempts, 2);
    assert_eq!(inline.dead_letters()[0].attempts, 4);
}

#[tokio::test]
async fn builder_settings_win_over_the_file_setting_by_setting() {
    let probe = Probe::new("client_id").poisoned_by(1).shared();
    let backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(1)).unwrap();
    let domain = Domain::builder()
        .config(config(
            "[handlers.ByClient]\nmax_retries = 5\nmax_concurrency = 2\n",
        ))
        .event_handler(Recorder::<ByClient>::new(&probe))
        .handler_settings("ByClient", HandlerConfig::new().with_max_retries(0))
        .handler_settings("ByClient", HandlerConfig::new().with_backoff(backoff))
        .handler_settings(
            "PerAggregate",
            HandlerConfig::new().with_max_concurrency(NonZeroUsize::MIN),
        )
        .event_handler(Recorder::<PerAggregate>::new(&Probe::new("order_id").shared()))
        .init()
        .unwrap();
    let settings = domain.subscriptions()[0].settings.config().clone();
    assert_eq!(settings.max_retries(), Some(0), "the builder's");
    assert_eq!(
        settings.backoff(),
        Some(backoff),
        "the later builder call adds to the earlier one"
    );
    assert_eq!(settings.max_concurrency(), Some(2), "the file's, not overridden");
    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    assert_eq!(attempts(&probe, "ByClient"), [1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_max_concurrency_bounds_its_parallel_runs() {
    // Two runs of different keys meet at a barrier only when they run at once.
    for (table, bounded) in [
        ("", false),
        ("[handlers.PerAggregate]\nmax_concurrency = 1\n", true),
    ] {
        let probe = Probe::new("order_id").with_barrier(2).shared();
        let domain = Domain::builder()
            .config(config(table))
            .event_handler(Recorder::<PerAggregate>::new(&probe))
            .init()
            .unwrap();
        commit(&domain, [placed("o-1", "a", 1), placed("o-2", "b", 2)]).await;
        domain.settle().await.unwrap();
        assert_eq!(probe.completed(), 2);
        assert_eq!(probe.barrier_timeouts() > 0, bounded, "with {table:?}");
    }
}

#[test]
fn settings_for_an_unknown_handler_are_an_error_naming_it() {
    let probe = Probe::new("client_id").shared();
    let error = Domain::builder()
        .config(config("[handlers.OrderProjectr]\nmax_retries = 5\n"))
        .event_handler(Recorder::<ByClient>::new(&probe))
        .command_handler(CommandRecorder::<Commands>::new(&probe))
        .handler_settings("Commands", HandlerConfig::new().with_max_retries(1))
        .init()
        .unwrap_err();
    let problems = error.problems();
    assert!(problems.contains(&UsageProblem::CommandHandlerSettings { handler: "Commands" }));
    assert!(problems.contains(&UsageProblem::UnknownHandlerSettings {
        name: "OrderProjectr".to_owned(),
        registered: vec!["ByClient"],
    }));
    let text = error.to_string();
    assert!(
        text.contains("`OrderProjectr`") && text.contains("registered: ByClient"),
        "{text}"
    );
}

#[test]
fn handler_tables_are_checked_key_by_key() {
    let unknown = Config::from_toml_str("[handlers.ByClient]\nretries = 5\n").unwrap_err();
    assert!(
        matches!(&unknown, ConfigError::UnknownKey { key, .. } if key == "handlers.ByClient.retries"),
        "{unknown}"
    );
    assert!(
        unknown
            .to_string()
            .contains("max_retries, retry_backoff_initial_ms"),
        "{unknown}"
    );
    let negative = Config::from_toml_str("[handlers.ByClient]\nmax_retries = -1\n").unwrap_err();
    assert_eq!(
        negative.to_string(),
        "handlers.ByClient.max_retries must be between 0 and 4294967295, got -1"
    );
    let backoff =
        Config::from_toml_str("[handlers.ByClient]\nretry_backoff_initial_ms = 9000\n").unwrap_err();
    assert_eq!(
        backoff.to_string(),
        "handlers.ByClient.retry_backoff_max_ms must be at least the initial delay (9000 ms), got 5000 ms"
    );
    let zero = Config::from_toml_str("[handlers.ByClient]\nmax_concurrency = 0\n").unwrap_err();
    assert_eq!(
        zero.to_string(),
        "handlers.ByClient.max_concurrency must be greater than 0, got 0"
    );
    let not_a_table = Config::from_toml_str("[handlers]\nByClient = 5\n").unwrap_err();
    assert!(
        matches!(not_a_table, ConfigError::WrongType { .. }),
        "{not_a_table}"
    );
    let config = Config::from_toml_str(
        "[handlers.ByClient]\nmax_retries = 0\nretry_backoff_max_ms = 700\nmax_concurrency = 3\n",
    )
    .unwrap();
    let handler = &config.handlers()["ByClient"];
    assert_eq!(handler.max_retries(), Some(0));
    let backoff = handler.backoff().unwrap();
    assert_eq!(
        (backoff.initial(), backoff.max()),
        (Duration::from_millis(100), Duration::from_millis(700))
    );
    assert_eq!(handler.max_concurrency(), Some(3));
    let negative = Config::from_toml_str("[handlers.ByClient]\ntimeout_ms = -1\n").unwrap_err();
    assert_eq!(
        negative.to_string(),
        "handlers.ByClient.timeout_ms must be 0 (no limit) or more, got -1"
    );
}

#[tokio::test]
async fn a_handler_table_sets_its_own_timeout_outage_limit_and_pausing() {
    let config = config(
        "handler_timeout_ms = 1000\nmax_transient_ms = 7000\n\
         [handlers.ByClient]\ntimeout_ms = 0\ntimeout_is_transient = true\nmax_transient_ms = 0\npause_min_keys = 9\n",
    );
    let probe = Probe::new("client_id").shared();
    let domain = Domain::builder()
        .config(config.clone())
        .event_handler(Recorder::<ByClient>::new(&probe))
        .event_handler(Recorder::<PerAggregate>::new(&probe))
        .init()
        .unwrap();
    let defaults = config.partitioning();
    let own = domain.subscriptions()[0].retry_policy(defaults);
    assert_eq!(own.timeout(), None, "timeout_ms = 0: no timeout for ByClient");
    assert!(own.timeout_is_transient());
    assert_eq!(own.max_transient(), None, "max_transient_ms = 0: no limit");
    assert!(own.breaker().enabled());
    let other = domain.subscriptions()[1].retry_policy(defaults);
    assert_eq!(other.timeout(), Some(Duration::from_secs(1)));
    assert!(!other.timeout_is_transient());
    assert_eq!(other.max_transient(), Some(Duration::from_secs(7)));
    let builder = HandlerConfig::new()
        .with_timeout(Duration::from_millis(250))
        .with_max_transient(Duration::ZERO)
        .with_pause_min_keys(0);
    assert_eq!(builder.timeout(), Some(Some(Duration::from_millis(250))));
    assert_eq!(builder.max_transient(), Some(None));
    assert_eq!(builder.pause_min_keys(), Some(0));
}

// -------------------------------------------------------------- priority

async fn lanes_of(lanes: &str, raise: impl Fn(&mut ordo_core::UnitOfWork)) -> Vec<Lane> {
    let probe = Probe::new("client_id").shared();
    let domain = Domain::builder()
        .config(Config::from_toml_str(lanes).unwrap())
        .event_handler(Recorder::<ByClient>::new(&probe))
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    raise(&mut uow);
    let rows = uow.validated_rows().unwrap();
    rows.iter().map(|row| row.lane).collect()
}

#[tokio::test]
async fn a_priority_below_the_threshold_routes_to_the_backfill_lane() {
    let enabled = "[server.priority_lanes]\nenabled = true\n";
    let low = |uow: &mut ordo_core::UnitOfWork| {
        uow.raise(placed("o-1", "a", 1)).unwrap();
        uow.with_priority(priority::LOW);
        uow.raise(placed("o-2", "a", 2)).unwrap();
    };
    assert_eq!(
        lanes_of(enabled, low).await,
        [Lane::Backfill, Lane::Backfill],
        "the whole unit"
    );
    let normal = |uow: &mut ordo_core::UnitOfWork| {
        uow.with_priority(priority::NORMAL);
        uow.raise(placed("o-1", "a", 1)).unwrap();
        uow.raise_backfill(placed("o-2", "a", 2)).unwrap();
    };
    assert_eq!(lanes_of(enabled, normal).await, [Lane::Primary, Lane::Backfill]);
    let raised = "[server.priority_lanes]\nenabled = true\nthreshold = 60\n";
    let high = |uow: &mut ordo_core::UnitOfWork| {
        uow.with_priority(priority::HIGH);
        uow.raise(placed("o-1", "a", 1)).unwrap();
    };
    assert_eq!(lanes_of(raised, high).await, [Lane::Backfill], "50 < 60");
    assert_eq!(
        lanes_of("", low).await,
        [Lane::Primary, Lane::Primary],
        "lanes disabled"
    );
    let overflow = Config::from_toml_str("[server.priority_lanes]\nthreshold = 3000000000\n").unwrap_err();
    assert_eq!(overflow.key(), Some("server.priority_lanes.threshold"));
}

#[tokio::test]
async fn a_low_priority_unit_is_published_to_the_backfill_stream() {
    let broker = RecordingBroker::partitioning();
    let probe = Probe::new("client_id").shared();
    let domain = Domain::builder()
        .config(Config::from_toml_str("[server.priority_lanes]\nenabled = true\n").unwrap())
        .broker(broker.clone())
        .event_handler(Recorder::<ByClient>::new(&probe))
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    uow.with_priority(priority::BULK);
    uow.raise(placed("o-1", "a", 1)).unwrap();
    uow.commit().await.unwrap();
    commit(&domain, [placed("o-2", "a", 2)]).await;
    domain.publish_pending().await.unwrap();
    assert_eq!(broker.streams(), ["order:a:backfill", "order:a"]);
}

// ---------------------------------------------------------------- health

#[tokio::test]
async fn health_reports_a_halted_key_until_it_is_resolved() {
    let probe = Probe::new("client_id").poisoned_by(1).shared();
    let domain = Domain::builder()
        .config(config(""))
        .event_handler(Recorder::<ByClient>::new(&probe))
        .event_handler(Recorder::<PerAggregate>::new(&Probe::new("order_id").shared()))
        .init()
        .unwrap();
    let running = domain.start();
    let health = running.health().await;
    assert_eq!(health.state(), HealthState::Ok);
    assert!(health.live() && health.ready());

    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    let health = running.health().await;
    assert_eq!(health.broker, "inline");
    let by_client = health.subscription("ByClient").unwrap();
    assert_eq!(by_client.state, HealthState::Halted);
    assert!(
        by_client.reasons[0].starts_with("key `a` halted"),
        "{:?}",
        by_client.reasons
    );
    assert_eq!(
        health.subscription("PerAggregate").unwrap().state,
        HealthState::Ok
    );
    assert_eq!(health.state(), HealthState::Halted);
    assert!(
        health.live() && health.ready(),
        "a halt needs an operator, not a restart"
    );
    let json = serde_json::to_value(&health).unwrap();
    assert_eq!(json["subscriptions"][0]["state"], "halted");

    probe.cure();
    domain.inline_broker().unwrap().retry("ByClient", "a").unwrap();
    domain.settle().await.unwrap();
    assert_eq!(running.health().await.state(), HealthState::Ok);
    running.shutdown().await.unwrap();
}

#[test]
fn health_thresholds_are_read_from_the_health_table() {
    let defaults = Config::default();
    assert_eq!(defaults.health().max_lag(), 10_000);
    assert_eq!(defaults.health().max_pending_age(), Duration::from_secs(300));
    let set = Config::from_toml_str("[health]\nmax_lag = 0\nmax_pending_age_ms = 1500\n").unwrap();
    assert_eq!(set.health().max_lag(), 0);
    assert_eq!(set.health().max_pending_age(), Duration::from_millis(1500));
    let typo = Config::from_toml_str("[health]\nmax_lagg = 1\n").unwrap_err();
    assert!(
        matches!(typo, ConfigError::UnknownKey { ref key, .. } if key == "health.max_lagg"),
        "{typo}"
    );
}

// ------------------------------------------------------------ log events

/// Collects the `event` field of every log line.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Events {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Visit<'a>(&'a Mutex<Vec<String>>);
        impl tracing::field::Visit for Visit<'_> {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "event" {
                    self.0.lock().unwrap().push(value.to_owned());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        event.record(&mut Visit(&self.0));
    }
}

impl Events {
    fn names(&self) -> BTreeSet<String> {
        self.0.lock().unwrap().iter().cloned().collect()
    }
}

#[tokio::test]
async fn the_important_log_lines_carry_their_event_names() {
    let events = Events::default();
    let _guard = tracing::subscriber::set_default(tracing_subscriber::registry().with(events.clone()));

    let probe = Probe::new("client_id").poisoned_by(1).shared();
    let domain = Domain::builder()
        .config(config("[handlers.ByClient]\nmax_retries = 1\n"))
        .event_handler(Recorder::<ByClient>::new(&probe))
        .event_handler(Recorder::<PerAggregate>::new(&probe))
        .init()
        .unwrap();
    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    domain.inline_broker().unwrap().skip("ByClient", "a").unwrap();
    domain.settle().await.unwrap();

    let outbox = InMemoryOutbox::new();
    let mut envelope = ordo_core::Envelope::new(&placed("o-2", "a", 2)).unwrap();
    envelope.partition_key = Some("a:b".to_owned());
    outbox
        .append(vec![NewOutboxRow::new(envelope, Lane::Primary)])
        .await
        .unwrap();
    let processor = OutboxProcessor::new(
        Arc::new(outbox.clone()),
        Arc::new(RecordingBroker::partitioning()),
        &Config::default(),
    )
    .with_partitioned_categories([("order", "client_id")]);
    processor.publish_pending().await.unwrap();

    let names = events.names();
    for expected in [
        log_events::HANDLER_FAILED,
        log_events::PARTITION_HALTED,
        log_events::PARTITION_RESUMED,
        log_events::MESSAGE_DEAD_LETTERED,
        log_events::OUTBOX_ROW_ABANDONED,
    ] {
        assert!(names.contains(expected), "{expected} not emitted; got {names:?}");
    }
    assert!(
        names.iter().all(|name| log_events::ALL.contains(&name.as_str())),
        "{names:?}"
    );
}

#[test]
fn the_operations_guide_lists_exactly_the_event_names_in_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/OPERATIONS.md");
    let guide = std::fs::read_to_string(path).unwrap();
    let section = guide
        .split("<!-- log-events:start -->")
        .nth(1)
        .and_then(|rest| rest.split("<!-- log-events:end -->").next())
        .expect("docs/OPERATIONS.md has the log-events table between its markers");
    let documented: Vec<&str> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|line| line.split('`').next())
        .collect();
    assert_eq!(
        documented,
        log_events::ALL,
        "docs/OPERATIONS.md and ordo_core::contract::log_events::ALL differ"
    );
}

// -------------------------------------------------------------- migrating

#[test]
fn the_documented_configuration_is_valid_and_every_key_is_mapped_for_migrating_users() {
    let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/");
    let concepts = std::fs::read_to_string(format!("{docs}CONCEPTS.md")).unwrap();
    let example = concepts
        .split("## Configuration (`domain.toml`)")
        .nth(1)
        .and_then(|rest| rest.split("```toml\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("docs/CONCEPTS.md has a domain.toml example under its Configuration heading");
    let config = Config::from_toml_str(example).unwrap_or_else(|e| panic!("the documented domain.toml: {e}"));
    assert_eq!(config.handlers()["OrderProjector"].max_retries(), Some(5));
    let migrating = std::fs::read_to_string(format!("{docs}MIGRATING.md")).unwrap();
    let table: toml::Table = toml::from_str(example).unwrap();
    let mut keys = Vec::new();
    collect_keys(&table, &mut keys);
    for key in keys {
        assert!(
            migrating.contains(&format!("`{key}")) || migrating.contains(&format!(" {key}`")),
            "docs/MIGRATING.md does not map `{key}`"
        );
    }
}

fn collect_keys(table: &toml::Table, keys: &mut Vec<String>) {
    for (key, value) in table {
        match value {
            toml::Value::Table(inner) => collect_keys(inner, keys),
            _ => keys.push(key.clone()),
        }
    }
}
