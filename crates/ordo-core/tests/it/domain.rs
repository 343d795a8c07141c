//! `init()` checks, policy resolution, start, settle and shutdown.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ordo_core::contract::broker::Capabilities;
use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::message::MessageKind;
use ordo_core::contract::policy::{FullConcurrencyPolicy, ProcessingContext, SEQUENTIAL_SEQUENCE_ID};
use ordo_core::{
    Domain, DomainBuilder, Envelope, IncorrectUsageError, InlineBroker, ShutdownError, UsageProblem,
};
use ordo_testkit::eventually;
use support::*;

spec!(ByClient => handler("ByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
    on::<OrderShipped>(Some(extractor!(OrderShipped, client_id))),
]));
spec!(AlsoByClient => handler("AlsoByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
]));
spec!(ByOrder => handler("ByOrder", HandlerKind::Event, "order", Some("order_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, order_id))),
]));
spec!(Unkeyed => handler("Unkeyed", HandlerKind::Event, "order", None, vec![
    on::<OrderPlaced>(None),
    on::<OrderShipped>(None),
]));
spec!(CustomerByClient => handler("CustomerByClient", HandlerKind::Event, "customer", Some("customer_id"), vec![
    on::<CustomerRegistered>(Some(extractor!(CustomerRegistered, customer_id))),
]));
spec!(CommandsByClient => handler("CommandsByClient", HandlerKind::Command, "order", Some("client_id"), vec![
    on::<PlaceOrder>(Some(extractor!(PlaceOrder, client_id))),
]));
spec!(CommandsByOrder => handler("CommandsByOrder", HandlerKind::Command, "order", Some("order_id"), vec![
    on::<CancelOrder>(Some(extractor!(CancelOrder, order_id))),
]));
spec!(OtherPlaceOrder => handler("OtherPlaceOrder", HandlerKind::Command, "order", None, vec![
    on::<PlaceOrder>(None),
]));
spec!(PartitionedPm => process_manager("PartitionedPm", true, vec![
    pm_on::<OrderPlaced>(extractor!(OrderPlaced, order_id), true),
    pm_on::<OrderShipped>(extractor!(OrderShipped, order_id), false),
]));
spec!(PlainPm => process_manager("PlainPm", false, vec![
    pm_on::<OrderPlaced>(extractor!(OrderPlaced, order_id), true),
]));
spec!(ForeignHandler => handler("ForeignHandler", HandlerKind::Event, "order", None, vec![
    on::<CustomerRegistered>(None),
]));
spec!(KeylessPartitioned => partitioned_without_key());
spec!(ClashingTypeName => handler("ClashingTypeName", HandlerKind::Event, "order", None, vec![
    {
        let mut clash = on::<OrderShipped>(None);
        clash.type_name = "OrderPlaced";
        clash
    },
]));

/// A partitioned handler whose descriptor names no key field.
fn partitioned_without_key() -> ordo_core::contract::handler::HandlerDescriptor {
    handler(
        "KeylessPartitioned",
        HandlerKind::Event,
        "order",
        None,
        vec![on::<OrderPlaced>(None)],
    )
    .with_partitioned(true)
}

fn probe() -> Arc<Probe> {
    Probe::new("client_id").shared()
}

fn problems(builder: DomainBuilder) -> (Vec<UsageProblem>, String) {
    let error: IncorrectUsageError = builder.init().expect_err("init should fail");
    (error.problems().to_vec(), error.to_string())
}

#[test]
fn handlers_with_different_keys_on_one_category_are_rejected_naming_both() {
    let p = probe();
    let builder = Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .event_handler(Recorder::<ByOrder>::new(&p));
    let (problems, message) = problems(builder);
    assert_eq!(
        problems,
        vec![UsageProblem::ConflictingKeys {
            category: "order",
            kind: MessageKind::Event,
            first_handler: "ByClient",
            first_key: "client_id",
            second_handler: "ByOrder",
            second_key: "order_id",
        }]
    );
    for needle in ["ByClient", "ByOrder", "`order`", "client_id", "order_id"] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }
}

#[test]
fn handlers_with_the_same_key_or_no_key_are_accepted() {
    let p = probe();
    let domain = Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .event_handler(Recorder::<AlsoByClient>::new(&p))
        .event_handler(Recorder::<Unkeyed>::new(&p))
        .init()
        .expect("same key and no key agree");
    assert_eq!(domain.partition_key_field("order"), Some("client_id"));
    assert_eq!(domain.partition_key_field("customer"), None);
}

#[test]
fn a_broker_without_capabilities_rejects_every_partitioned_handler_by_name() {
    let p = probe();
    let builder = Domain::builder()
        .broker(RecordingBroker::plain())
        .event_handler(Recorder::<ByOrder>::new(&p))
        .event_handler(Recorder::<Unkeyed>::new(&p))
        .event_handler(Recorder::<CustomerByClient>::new(&p))
        .command_handler(CommandRecorder::<CommandsByClient>::new(&p))
        .process_manager::<Fulfillment<PartitionedPm>>();
    let (problems, message) = problems(builder);
    let rejected: Vec<(&str, HandlerKind)> = problems
        .iter()
        .map(|p| match p {
            UsageProblem::BrokerCannotPartition {
                handler,
                handler_kind,
                broker,
            } => {
                assert_eq!(broker, "plain");
                (*handler, *handler_kind)
            }
            other => panic!("unexpected problem {other:?}"),
        })
        .collect();
    assert_eq!(
        rejected,
        vec![
            ("ByOrder", HandlerKind::Event),
            ("CustomerByClient", HandlerKind::Event),
            ("CommandsByClient", HandlerKind::Command),
            ("PartitionedPm", HandlerKind::ProcessManager),
        ]
    );
    assert!(message.contains("broker `plain`"), "{message}");
    assert!(
        message.contains("command handler `CommandsByClient`"),
        "{message}"
    );
}

#[test]
fn a_broker_without_capabilities_accepts_unpartitioned_handlers() {
    let p = probe();
    Domain::builder()
        .broker(RecordingBroker::plain())
        .event_handler(Recorder::<Unkeyed>::new(&p))
        .process_manager::<Fulfillment<PlainPm>>()
        .init()
        .expect("nothing is partitioned");
}

#[test]
fn inline_and_partitioning_brokers_accept_partitioned_handlers() {
    let p = probe();
    for builder in [
        Domain::builder(),
        Domain::builder().broker(InlineBroker::new()),
        Domain::builder().broker(Arc::new(InlineBroker::new())),
        Domain::builder().broker(RecordingBroker::partitioning()),
        Domain::builder().broker(RecordingBroker::new("ordered", Capabilities::ORDERED_IN_PROCESS)),
    ] {
        builder
            .event_handler(Recorder::<ByClient>::new(&p))
            .command_handler(CommandRecorder::<CommandsByClient>::new(&p))
            .process_manager::<Fulfillment<PlainPm>>()
            .init()
            .expect("the broker can honour sequential_by");
    }
}

#[test]
fn the_default_broker_and_an_inline_broker_passed_in_are_recognised_as_inline() {
    let inline = InlineBroker::new();
    assert!(Domain::builder().init().unwrap().inline_broker().is_some());
    assert!(
        Domain::builder()
            .broker(inline)
            .init()
            .unwrap()
            .inline_broker()
            .is_some()
    );
    let recording = Domain::builder()
        .broker(RecordingBroker::partitioning())
        .init()
        .unwrap();
    assert!(recording.inline_broker().is_none());
}

/// A key of `[server.partitioning]` that neither ordo-core nor the broker
/// reads is refused at `init()`: a typo of a broker's key, or (the inline
/// broker reads none) a key only another broker reads.
#[test]
fn a_partitioning_key_no_one_reads_is_rejected_naming_the_broker_and_the_valid_keys() {
    let config =
        |text: &str| ordo_core::Config::from_toml_str(&format!("[server.partitioning]\n{text}")).unwrap();
    let core_keys = vec![
        "poll_interval_seconds",
        "max_retries",
        "retry_backoff_initial_ms",
        "retry_backoff_max_ms",
        "max_concurrency",
        "handler_timeout_ms",
        "timeout_is_transient",
        "max_transient_ms",
        "pause_min_keys",
    ];
    for key in ["lease_tll_ms", "lease_ttl_ms"] {
        let inline_default = Domain::builder().config(config(&format!("{key} = 6000")));
        let inline_given = Domain::builder()
            .broker(InlineBroker::new())
            .config(config(&format!("{key} = 6000")));
        for builder in [inline_default, inline_given] {
            let (problems, message) = problems(builder);
            assert_eq!(
                problems,
                vec![UsageProblem::UnknownConfigKey {
                    key: format!("server.partitioning.{key}"),
                    broker: "inline".to_owned(),
                    valid: core_keys.clone(),
                }]
            );
            assert!(
                message.contains(&format!(
                    "unknown key `server.partitioning.{key}` in the domain configuration; valid keys in \
                     [server.partitioning] with broker `inline`: poll_interval_seconds, max_retries, \
                     retry_backoff_initial_ms, retry_backoff_max_ms, max_concurrency, handler_timeout_ms, \
                     timeout_is_transient, max_transient_ms, pause_min_keys"
                )),
                "{message}"
            );
        }
    }
    // A broker that declares the key reads it; a typo of it is still refused,
    // along with every other problem.
    let declaring = || RecordingBroker::partitioning().reading_partitioning_keys(&["lease_ttl_ms"]);
    Domain::builder()
        .broker(declaring())
        .config(config("lease_ttl_ms = 6000\nmax_retries = 1"))
        .init()
        .expect("the broker reads lease_ttl_ms");
    let p = probe();
    let (problems, _) = problems(
        Domain::builder()
            .broker(declaring())
            .config(config("lease_tll_ms = 6000"))
            .event_handler(Recorder::<ByClient>::new(&p))
            .event_handler(Recorder::<ByOrder>::new(&p)),
    );
    let mut valid = core_keys;
    valid.push("lease_ttl_ms");
    assert_eq!(
        problems[0],
        UsageProblem::UnknownConfigKey {
            key: "server.partitioning.lease_tll_ms".to_owned(),
            broker: "recording".to_owned(),
            valid,
        }
    );
    assert!(
        matches!(problems[1..], [UsageProblem::ConflictingKeys { .. }]),
        "{problems:?}"
    );
}

#[test]
fn command_handlers_with_different_keys_on_one_category_are_rejected() {
    let p = probe();
    let builder = Domain::builder()
        .command_handler(CommandRecorder::<CommandsByClient>::new(&p))
        .command_handler(CommandRecorder::<CommandsByOrder>::new(&p));
    let (problems, _) = problems(builder);
    assert_eq!(
        problems,
        vec![UsageProblem::ConflictingKeys {
            category: "order",
            kind: MessageKind::Command,
            first_handler: "CommandsByClient",
            first_key: "client_id",
            second_handler: "CommandsByOrder",
            second_key: "order_id",
        }]
    );
}

#[test]
fn events_and_commands_of_one_category_are_keyed_separately() {
    let p = probe();
    Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .command_handler(CommandRecorder::<CommandsByOrder>::new(&p))
        .init()
        .expect("commands never share the event streams");
}

#[test]
fn a_partitioned_process_manager_keys_its_categories_by_its_correlate_fields() {
    let p = probe();
    let builder = Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .process_manager::<Fulfillment<PartitionedPm>>();
    let (problems, message) = problems(builder);
    assert!(
        problems.contains(&UsageProblem::ConflictingKeys {
            category: "order",
            kind: MessageKind::Event,
            first_handler: "ByClient",
            first_key: "client_id",
            second_handler: "PartitionedPm",
            second_key: "order_id",
        }),
        "{problems:?}"
    );
    assert!(message.contains("PartitionedPm"), "{message}");

    let agreeing = Domain::builder()
        .event_handler(Recorder::<ByOrder>::new(&p))
        .process_manager::<Fulfillment<PartitionedPm>>()
        .init()
        .expect("the handler's key is the correlate field");
    assert_eq!(agreeing.partition_key_field("order"), Some("order_id"));
}

#[test]
fn an_unpartitioned_process_manager_does_not_claim_a_key() {
    let p = probe();
    Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .process_manager::<Fulfillment<PlainPm>>()
        .init()
        .expect("a process manager without sequential_by partitions nothing");
}

#[test]
fn every_problem_is_reported_at_once() {
    let p = probe();
    let builder = Domain::builder()
        .aggregate::<Order>()
        .aggregate::<OrderAgain>()
        .broker(RecordingBroker::plain())
        .event_handler(Recorder::<ByClient>::new(&p))
        .event_handler(Recorder::<ByOrder>::new(&p))
        .event_handler(Recorder::<ByOrder>::new(&p))
        .event_handler(Recorder::<ForeignHandler>::new(&p))
        .event_handler(Recorder::<KeylessPartitioned>::new(&p))
        .event_handler(Recorder::<ClashingTypeName>::new(&p))
        .command_handler(CommandRecorder::<CommandsByClient>::new(&p))
        .command_handler(CommandRecorder::<OtherPlaceOrder>::new(&p));
    let (problems, message) = problems(builder);
    let has = |wanted: &dyn Fn(&UsageProblem) -> bool| problems.iter().any(wanted);
    assert!(has(&|p| matches!(
        p,
        UsageProblem::DuplicateCategory {
            category: "order",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::DuplicateHandler {
            handler: "ByOrder",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::ConflictingKeys {
            second_handler: "ByOrder",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::ForeignMessage {
            handler: "ForeignHandler",
            type_name: "CustomerRegistered",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::UnknownCategory {
            handler: "ForeignHandler",
            category: "customer",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::MissingKey {
            handler: "KeylessPartitioned",
            type_name: "OrderPlaced",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::DuplicateTypeName {
            type_name: "OrderPlaced",
            category: "order",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::DuplicateCommandHandler {
            type_name: "PlaceOrder",
            second_handler: "OtherPlaceOrder",
            ..
        }
    )));
    assert!(has(&|p| matches!(
        p,
        UsageProblem::BrokerCannotPartition {
            handler: "CommandsByClient",
            ..
        }
    )));
    assert!(message.starts_with(&format!(
        "the domain cannot start: {} problems found",
        problems.len()
    )));
    assert_eq!(message.lines().count(), problems.len() + 1, "{message}");
}

#[test]
fn registered_aggregates_are_optional_but_checked_when_present() {
    let p = probe();
    Domain::builder()
        .event_handler(Recorder::<CustomerByClient>::new(&p))
        .init()
        .expect("aggregates are optional");
    Domain::builder()
        .aggregate::<Order>()
        .aggregate::<Order>()
        .aggregate::<Customer>()
        .event_handler(Recorder::<CustomerByClient>::new(&p))
        .init()
        .expect("the customer category is registered; registering a type twice is harmless");
    let (problems, _) = problems(
        Domain::builder()
            .aggregate::<Order>()
            .event_handler(Recorder::<CustomerByClient>::new(&p)),
    );
    assert_eq!(
        problems,
        vec![UsageProblem::UnknownCategory {
            handler: "CustomerByClient",
            handler_kind: HandlerKind::Event,
            category: "customer",
        }]
    );
}

#[test]
fn a_process_manager_with_a_sequencing_policy_is_rejected() {
    spec!(PmWithPolicy => process_manager(
        "PmWithPolicy",
        false,
        vec![pm_on::<OrderPlaced>(extractor!(OrderPlaced, order_id), true)],
    )
    .with_policy(Some(Arc::new(FullConcurrencyPolicy))));
    let (problems, _) = problems(Domain::builder().process_manager::<Fulfillment<PmWithPolicy>>());
    assert_eq!(
        problems,
        vec![UsageProblem::ProcessManagerPolicy {
            handler: "PmWithPolicy"
        }]
    );
}

fn envelope(aggregate_id: Option<&str>, partition_key: Option<&str>) -> Envelope {
    let mut envelope = Envelope::new(&placed("o-1", "c-1", 1)).unwrap();
    envelope.aggregate_id = aggregate_id.map(str::to_owned);
    envelope.partition_key = partition_key.map(str::to_owned);
    envelope
}

fn sequence(domain: &Domain, handler: &str, envelope: &Envelope) -> Option<String> {
    let subscription = domain
        .subscriptions()
        .iter()
        .find(|s| s.name() == handler)
        .unwrap();
    subscription
        .policy_for(&envelope.category, &envelope.type_name)
        .sequence_identifier(envelope, &ProcessingContext::new(handler))
        .map(|id| id.as_str().to_owned())
}

#[test]
fn policies_resolve_override_then_sequential_by_then_kind_default() {
    let p = probe();
    let domain = Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .event_handler(Recorder::<Unkeyed>::new(&p))
        .event_handler_with_policy(Recorder::<AlsoByClient>::new(&p), FullConcurrencyPolicy)
        .process_manager::<Fulfillment<PlainPm>>()
        .init()
        .unwrap();
    let keyed = envelope(Some("o-1"), Some("c-1"));
    let anonymous = envelope(None, None);
    assert_eq!(sequence(&domain, "ByClient", &keyed).as_deref(), Some("c-1"));
    assert_eq!(sequence(&domain, "Unkeyed", &keyed).as_deref(), Some("o-1"));
    assert_eq!(
        sequence(&domain, "Unkeyed", &anonymous).as_deref(),
        Some(SEQUENTIAL_SEQUENCE_ID)
    );
    assert_eq!(sequence(&domain, "AlsoByClient", &keyed), None);
    assert!(
        domain
            .subscriptions()
            .iter()
            .any(|s| s.name() == "AlsoByClient" && s.policy_overridden)
    );
    // The process manager is sequenced by its correlation value, read from the payload.
    assert_eq!(sequence(&domain, "PlainPm", &anonymous).as_deref(), Some("o-1"));
}

#[test]
fn command_handlers_are_not_broker_subscriptions() {
    let p = probe();
    let domain = Domain::builder()
        .event_handler(Recorder::<Unkeyed>::new(&p))
        .command_handler(CommandRecorder::<CommandsByClient>::new(&p))
        .init()
        .unwrap();
    let names = |subs: &[ordo_core::Subscription]| subs.iter().map(|s| s.name()).collect::<Vec<_>>();
    assert_eq!(names(domain.subscriptions()), vec!["Unkeyed"]);
    assert_eq!(names(domain.command_handlers()), vec!["CommandsByClient"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_started_domain_publishes_commits_without_being_asked() {
    let p = probe();
    let domain = Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .init()
        .unwrap();
    let running = domain.start();
    let mut uow = domain.unit_of_work();
    uow.raise(placed("o-1", "c-1", 1)).unwrap();
    uow.raise(shipped("o-1", "c-1", 2)).unwrap();
    uow.commit().await.unwrap();
    let probe = Arc::clone(&p);
    eventually(Duration::from_secs(5), "both events handled", || async {
        Ok(probe.runs() == 2)
    })
    .await
    .unwrap();
    assert_eq!(p.amounts_for("c-1"), vec![1, 2]);
    running.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn settle_publishes_and_waits_for_handlers_without_start() {
    let p = Probe::new("client_id")
        .with_delay(Duration::from_millis(5))
        .shared();
    let domain = Domain::builder()
        .event_handler(Recorder::<Unkeyed>::new(&p))
        .init()
        .unwrap();
    let mut uow = domain.unit_of_work();
    for amount in 0..10 {
        uow.raise(placed(&format!("o-{amount}"), "c-1", amount)).unwrap();
    }
    uow.commit().await.unwrap();
    domain.settle().await.unwrap();
    assert_eq!(p.runs(), 10);
    assert!(domain.outbox().pending(10).await.unwrap().is_empty());
}

#[tokio::test]
async fn shutdown_reports_a_broker_that_stopped_with_an_error() {
    let domain = Domain::builder()
        .broker(RecordingBroker::failing_run("lost the connection"))
        .init()
        .unwrap();
    let error = domain.start().shutdown().await.expect_err("the broker failed");
    assert!(
        matches!(&error, ShutdownError::Broker { broker, .. } if broker == "broken"),
        "{error:?}"
    );
    assert_eq!(
        chain(&error),
        "broker `broken` stopped with an error: lost the connection"
    );
}

/// Hand-written aggregates are held to the rules `#[derive(Aggregate)]`
/// checks at compile time: a category names streams (`{category}:{key}`).
#[test]
fn reserved_or_malformed_categories_are_rejected_at_init() {
    macro_rules! aggregate {
        ($name:ident, $category:expr) => {
            struct $name;
            impl ordo_core::contract::message::Aggregate for $name {
                const CATEGORY: &'static str = $category;
            }
        };
    }
    aggregate!(DeadLetters, "dlq");
    aggregate!(Partitions, "__partitions__");
    aggregate!(Multiline, "order\nline");
    aggregate!(WithColon, "shop:order");
    aggregate!(Empty, "");
    aggregate!(Spaced, "order line");
    let builder = Domain::builder()
        .aggregate::<DeadLetters>()
        .aggregate::<Partitions>()
        .aggregate::<Multiline>()
        .aggregate::<WithColon>()
        .aggregate::<Empty>()
        .aggregate::<Spaced>();
    let (problems, message) = problems(builder);
    let rejected: Vec<(&str, &str)> = problems
        .iter()
        .map(|problem| match problem {
            UsageProblem::InvalidCategory { category, reason, .. } => (*category, *reason),
            other => panic!("unexpected problem: {other}"),
        })
        .collect();
    assert_eq!(
        rejected,
        [
            ("dlq", "is the reserved dead-letter lane token `dlq`"),
            ("__partitions__", "has the reserved sentinel form `__name__`"),
            ("order\nline", "contains control characters"),
            ("shop:order", "contains `:` (the stream-name separator)"),
            ("", "is empty"),
        ]
    );
    assert!(
        message.contains("aggregate `it::domain::reserved_or_malformed_categories_are_rejected_at_init::Multiline` has category \"order\\nline\", which contains control characters"),
        "{message}"
    );
}

/// Two aggregate types with one name get one default category; the error
/// says so and how to fix it.
#[test]
fn two_same_named_aggregates_are_told_apart_with_a_fix() {
    mod sales {
        pub(super) struct Order;
        impl ordo_core::contract::message::Aggregate for Order {
            const CATEGORY: &'static str = "order";
        }
    }
    mod billing {
        pub(super) struct Order;
        impl ordo_core::contract::message::Aggregate for Order {
            const CATEGORY: &'static str = "order";
        }
    }
    let builder = Domain::builder()
        .aggregate::<sales::Order>()
        .aggregate::<billing::Order>();
    let (problems, message) = problems(builder);
    assert!(
        matches!(
            problems.as_slice(),
            [UsageProblem::DuplicateCategory {
                category: "order",
                ..
            }]
        ),
        "{problems:?}"
    );
    assert!(message.contains("sales::Order` and `"), "{message}");
    assert!(
        message.contains("billing::Order` both claim category `order`"),
        "{message}"
    );
    assert!(
        message.contains("give one of them its own with `#[aggregate(category = \"...\")]`"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_publishes_what_is_still_pending() {
    let broker = RecordingBroker::partitioning();
    let domain = Domain::builder()
        .broker(broker.clone())
        .event_handler(Recorder::<ByClient>::new(&probe()))
        .init()
        .unwrap();
    let running = domain.start();
    // The first publish fails: the processor waits out its backoff, and the
    // rows are still pending when shutdown begins.
    broker.fail_next_after(0);
    let mut uow = domain.unit_of_work();
    for amount in 0..3 {
        uow.raise(placed(&format!("o-{amount}"), "c-1", amount)).unwrap();
    }
    uow.commit().await.unwrap();
    running.shutdown().await.expect("the outbox drains");
    assert_eq!(broker.published().len(), 3);
    assert!(domain.outbox().pending(10).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_names_how_many_rows_it_could_not_publish() {
    let broker = RecordingBroker::partitioning();
    broker.refuse_all();
    let domain = Domain::builder()
        .broker(broker.clone())
        .event_handler(Recorder::<ByClient>::new(&probe()))
        .init()
        .unwrap();
    let running = domain.start();
    let mut uow = domain.unit_of_work();
    uow.raise(placed("o-1", "c-1", 1)).unwrap();
    uow.raise(placed("o-2", "c-2", 2)).unwrap();
    uow.commit().await.unwrap();
    let error = running
        .shutdown_within(Duration::from_millis(300))
        .await
        .expect_err("the broker refuses every row");
    assert!(
        matches!(error, ShutdownError::Unpublished { rows: Some(2), .. }),
        "{error:?}"
    );
    assert_eq!(
        chain(&error),
        "2 rows left unpublished in the outbox after draining for 300ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_publishes_and_shuts_down_without_consuming() {
    let broker = RecordingBroker::partitioning();
    let domain = Domain::builder()
        .broker(broker.clone())
        .event_handler(Recorder::<ByClient>::new(&probe()))
        .init()
        .unwrap();
    let publisher = domain.start_publisher();
    let mut uow = domain.unit_of_work();
    uow.raise(placed("o-1", "c-1", 1)).unwrap();
    uow.commit().await.unwrap();
    publisher.shutdown().await.expect("clean shutdown");
    assert_eq!(broker.published().len(), 1);
    assert_eq!(broker.runs(), 0, "a publisher never starts the consumer");
    domain.start().shutdown().await.unwrap();
    assert_eq!(broker.runs(), 1);
}

/// `[categories.NAME] partitions = N` is for a category some event handler
/// partitions, consumed by no `sequential_by` process manager (its unit is
/// one correlation value), on a broker that runs hashed partitions (or
/// orders every key in process, where the setting changes nothing).
#[test]
fn hashed_partitions_are_checked_against_the_category_its_consumers_and_the_broker() {
    use std::num::NonZeroU32;

    use ordo_core::{Config, Partitions};

    let n = Partitions::Hashed(NonZeroU32::new(8).unwrap());
    let hashed = |category: &str| Config::default().with_partitions(category, n);
    let p = probe();
    Domain::builder()
        .config(hashed("order"))
        .event_handler(Recorder::<ByClient>::new(&p))
        .init()
        .expect("the inline broker orders every key in process");
    Domain::builder()
        .broker(RecordingBroker::new(
            "hashing",
            Capabilities::STREAM_PARTITIONING.with_hashed_partitions(),
        ))
        .config(hashed("order"))
        .event_handler(Recorder::<ByClient>::new(&p))
        .init()
        .expect("a broker that runs hashed partitions");

    let (found, message) = problems(
        Domain::builder()
            .broker(RecordingBroker::partitioning())
            .config(hashed("order"))
            .event_handler(Recorder::<ByClient>::new(&p)),
    );
    assert_eq!(
        found,
        vec![UsageProblem::BrokerCannotHash {
            category: "order".to_owned(),
            partitions: n,
            broker: "recording".to_owned(),
        }]
    );
    assert!(
        message.contains(
            "`[categories.order] partitions = 8`, but broker `recording` does not support hashed partitions"
        ),
        "{message}"
    );

    let (found, message) = problems(
        Domain::builder()
            .config(hashed("customer"))
            .event_handler(Recorder::<Unkeyed>::new(&p)),
    );
    assert_eq!(
        found,
        vec![UsageProblem::PartitionsOfUnpartitionedCategory {
            category: "customer".to_owned(),
            partitions: n,
        }]
    );
    assert!(
        message.contains("no registered event handler partitions category `customer`"),
        "{message}"
    );

    let (found, message) = problems(
        Domain::builder()
            .config(hashed("order"))
            .process_manager::<Fulfillment<PartitionedPm>>(),
    );
    assert_eq!(
        found,
        vec![UsageProblem::HashedProcessManager {
            handler: "PartitionedPm",
            category: "order".to_owned(),
            partitions: n,
        }]
    );
    assert!(message.contains("must stay `per_key`"), "{message}");
    // `per_key` is the default, and always accepted.
    Domain::builder()
        .config(Config::default().with_partitions("order", Partitions::PerKey))
        .process_manager::<Fulfillment<PartitionedPm>>()
        .init()
        .expect("per_key");
}

/// `ack_window` runs a key's messages ahead of their acknowledgements: only
/// a `sequential_by` event handler on per-key partitions has that order to
/// keep; `init()` names the handler and why anywhere else, and the file's
/// value is bounded.
#[test]
fn an_acknowledgement_window_is_accepted_only_where_it_applies() {
    use std::num::NonZeroU32;

    use ordo_core::contract::config::HandlerConfig;
    use ordo_core::{Config, Partitions};

    let p = probe();
    let window = |n| HandlerConfig::new().with_ack_window(n);
    Domain::builder()
        .event_handler(Recorder::<ByClient>::new(&p))
        .handler_settings("ByClient", window(64))
        .init()
        .expect("a sequential_by handler on per-key partitions");

    let (found, message) = problems(
        Domain::builder()
            .event_handler(Recorder::<Unkeyed>::new(&p))
            .handler_settings("Unkeyed", window(8)),
    );
    assert!(
        matches!(&found[..], [UsageProblem::AckWindow { handler, window: 8, .. }] if handler == "Unkeyed"),
        "{found:?}"
    );
    assert!(message.contains("`sequential_by` handlers only"), "{message}");

    let hashed = Config::default().with_partitions("order", Partitions::Hashed(NonZeroU32::new(8).unwrap()));
    let (found, message) = problems(
        Domain::builder()
            .config(hashed)
            .event_handler(Recorder::<ByClient>::new(&p))
            .handler_settings("ByClient", window(8)),
    );
    assert!(
        matches!(&found[..], [UsageProblem::AckWindow { .. }]),
        "{found:?}"
    );
    assert!(message.contains("per-key partitions"), "{message}");

    let (found, message) = problems(
        Domain::builder()
            .event_handler(Recorder::<ByClient>::new(&p))
            .handler_settings("ByClient", window(5_000)),
    );
    assert!(
        matches!(&found[..], [UsageProblem::AckWindow { .. }]),
        "{found:?}"
    );
    assert!(message.contains("the largest window is 1024"), "{message}");

    let error = Config::from_toml_str("[handlers.ByClient]\nack_window = -1\n").expect_err("negative");
    assert!(
        error.to_string().contains("ack_window") && error.to_string().contains("between 0 and 1024"),
        "{error}"
    );
    let config = Config::from_toml_str("[handlers.ByClient]\nack_window = 16\n").expect("valid");
    assert_eq!(config.handlers()["ByClient"].ack_window(), Some(16));
}
