//! The inline broker: per-key order without overlap, parallel keys,
//! retries and failure records.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::handler::HandlerKind;
use ordo_core::{Config, Domain, Envelope, InlineBroker};
use support::*;
use tokio_util::sync::CancellationToken;

spec!(ByClient => handler("ByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
    on::<OrderShipped>(Some(extractor!(OrderShipped, client_id))),
]));
spec!(PerAggregateA => handler("PerAggregateA", HandlerKind::Event, "order", None, vec![on::<OrderPlaced>(None)]));
spec!(PerAggregateB => handler("PerAggregateB", HandlerKind::Event, "order", None, vec![on::<OrderPlaced>(None)]));
spec!(Commands => handler("Commands", HandlerKind::Command, "order", None, vec![on::<PlaceOrder>(None)]));

fn fast_retries(max_retries: u32) -> Config {
    Config::from_toml_str(&format!(
        "[server.partitioning]\nmax_retries = {max_retries}\nretry_backoff_initial_ms = 1\nretry_backoff_max_ms = 2"
    ))
    .unwrap()
}

fn keyed_domain(probe: &Arc<Probe>, config: Config) -> Domain {
    Domain::builder()
        .config(config)
        .event_handler(Recorder::<ByClient>::new(probe))
        .init()
        .unwrap()
}

async fn commit(domain: &Domain, events: impl IntoIterator<Item = OrderPlaced>) {
    let mut uow = domain.unit_of_work();
    for event in events {
        uow.raise(event).unwrap();
    }
    uow.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_events_run_in_commit_order_and_never_overlap() {
    let probe = Probe::new("client_id")
        .with_delay(Duration::from_millis(2))
        .shared();
    let domain = keyed_domain(&probe, Config::default());
    for round in 0..10 {
        // Several commits, interleaving keys, each published separately.
        commit(
            &domain,
            ["a", "b", "c"].map(|key| placed(&format!("o-{round}-{key}"), key, round)),
        )
        .await;
        domain.publish_pending().await.unwrap();
    }
    domain.settle().await.unwrap();
    assert_eq!(probe.runs(), 30);
    assert_eq!(probe.overlaps(), 0, "two runs of one key overlapped");
    for key in ["a", "b", "c"] {
        assert_eq!(
            probe.amounts_for(key),
            (0..10).collect::<Vec<_>>(),
            "order of key {key}"
        );
    }
    assert!(
        probe
            .seen()
            .iter()
            .all(|s| s.partition_key.as_deref() == Some(s.key.as_str()))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn different_keys_run_in_parallel() {
    // Each run waits until three runs are in progress at once.
    let probe = Probe::new("client_id").with_barrier(3).shared();
    let domain = keyed_domain(&probe, Config::default());
    commit(
        &domain,
        [
            placed("o-1", "a", 1),
            placed("o-2", "b", 2),
            placed("o-3", "c", 3),
        ],
    )
    .await;
    domain.settle().await.unwrap();
    assert_eq!(probe.runs(), 3);
    assert_eq!(
        probe.barrier_timeouts(),
        0,
        "the three keys did not run at the same time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handlers_do_not_wait_for_each_other() {
    // One event, two handlers with the same (per-aggregate) sequence id: the
    // ids are scoped to the handler, so both run at once.
    let probe = Probe::new("order_id").with_barrier(2).shared();
    let domain = Domain::builder()
        .event_handler(Recorder::<PerAggregateA>::new(&probe))
        .event_handler(Recorder::<PerAggregateB>::new(&probe))
        .init()
        .unwrap();
    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    assert_eq!(probe.runs(), 2);
    assert_eq!(probe.barrier_timeouts(), 0);
}

#[tokio::test]
async fn a_failing_handler_is_retried_until_it_succeeds() {
    let probe = Probe::new("client_id").failing_first(2).shared();
    let domain = keyed_domain(&probe, fast_retries(3));
    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    let attempts: Vec<u32> = probe.seen().iter().map(|s| s.attempt).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert!(domain.inline_broker().unwrap().failures().is_empty());
}

#[tokio::test]
async fn a_handler_failing_every_retry_is_recorded_and_halts_its_key() {
    let probe = Probe::new("client_id").failing_first(3).shared();
    let domain = keyed_domain(&probe, fast_retries(2));
    commit(&domain, [placed("o-1", "a", 1), placed("o-2", "a", 2)]).await;
    domain.settle().await.unwrap();
    let runs: Vec<(u64, u32)> = probe.seen().iter().map(|s| (s.amount, s.attempt)).collect();
    assert_eq!(
        runs,
        vec![(1, 1), (1, 2), (1, 3)],
        "o-2 waits behind the halted o-1"
    );
    let inline = domain.inline_broker().unwrap();
    let failures = inline.failures();
    assert_eq!(inline.failure_count(), 1);
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].handler, "ByClient");
    assert_eq!(failures[0].type_name, "OrderPlaced");
    assert_eq!(failures[0].attempts, 3);
    assert_eq!(failures[0].error, "induced failure in ByClient");
    let rows = domain.outbox().pending(10).await.unwrap();
    assert!(rows.is_empty(), "handler failures do not keep rows pending");

    // A retry runs the head again (it succeeds now), then the key resumes.
    inline.retry("ByClient", "a").unwrap();
    domain.settle().await.unwrap();
    let runs: Vec<(u64, u32)> = probe.seen().iter().map(|s| (s.amount, s.attempt)).collect();
    assert_eq!(runs, vec![(1, 1), (1, 2), (1, 3), (1, 1), (2, 1)]);
    assert!(inline.halted().is_empty());
}

#[tokio::test]
async fn a_panicking_handler_counts_as_a_failed_attempt() {
    let probe = Probe::new("client_id").panicking_first(1).shared();
    let domain = keyed_domain(&probe, fast_retries(0));
    commit(&domain, [placed("o-1", "a", 1), placed("o-2", "a", 2)]).await;
    domain.settle().await.unwrap();
    let inline = domain.inline_broker().unwrap();
    let failures = inline.failures();
    assert_eq!(failures.len(), 1);
    assert_eq!(
        failures[0].error,
        "the handler panicked: induced panic in ByClient"
    );
    assert_eq!(
        inline.halted()[0].error,
        "the handler panicked: induced panic in ByClient"
    );
    assert_eq!(probe.amounts_for("a"), vec![1]);
}

/// A domain whose `ByClient` handler fails on the message of amount 2 for
/// key `a`: a:1, a:2 (poison), a:3, and b:10, b:11 interleaved.
async fn poisoned_domain() -> (Arc<Probe>, Domain) {
    let probe = Probe::new("client_id").poisoned_by(2).shared();
    let domain = keyed_domain(&probe, fast_retries(1));
    commit(
        &domain,
        [
            placed("o-1", "a", 1),
            placed("o-10", "b", 10),
            placed("o-2", "a", 2),
            placed("o-11", "b", 11),
            placed("o-3", "a", 3),
        ],
    )
    .await;
    tokio::time::timeout(Duration::from_secs(10), domain.settle())
        .await
        .expect("settle returns while a key is halted")
        .expect("settle() outside handlers");
    (probe, domain)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_halts_its_key_while_other_keys_go_on() {
    let (probe, domain) = poisoned_domain().await;
    assert_eq!(probe.amounts_for("b"), vec![10, 11]);
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2], "a:3 never overtakes a:2");
    let inline = domain.inline_broker().unwrap();
    let halted = inline.halted();
    assert_eq!(halted.len(), 1);
    let halt = &halted[0];
    assert_eq!((halt.handler, halt.key.as_str()), ("ByClient", "a"));
    assert_eq!(halt.category, "order");
    assert_eq!(halt.head.aggregate_id.as_deref(), Some("o-2"));
    assert_eq!(halt.attempts, 2);
    assert_eq!(halt.error, "poison message 2 in ByClient");
    assert_eq!(halt.waiting, 1);

    // Later messages of the halted key wait too.
    commit(&domain, [placed("o-4", "a", 4)]).await;
    domain.settle().await.unwrap();
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2]);
    assert_eq!(inline.halted()[0].waiting, 2);
    assert!(matches!(
        inline.skip("ByClient", "b"),
        Err(ordo_core::ResolveError::NotHalted { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_the_head_resumes_the_key_in_order() {
    let (probe, domain) = poisoned_domain().await;
    let inline = domain.inline_broker().unwrap();
    let head = inline.halted()[0].head.id.clone();
    assert_eq!(inline.skip("ByClient", "a").unwrap(), head);
    domain.settle().await.unwrap();
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2, 3]);
    assert!(inline.halted().is_empty());
    assert!(inline.dead_letters().is_empty());
    assert!(matches!(
        inline.skip("ByClient", "a"),
        Err(ordo_core::ResolveError::NotHalted { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_lettering_the_head_keeps_it_and_resumes_the_key() {
    let (probe, domain) = poisoned_domain().await;
    let inline = domain.inline_broker().unwrap();
    let head = inline.dead_letter("ByClient", "a").unwrap();
    domain.settle().await.unwrap();
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2, 3]);
    let dead = inline.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].handler, dead[0].message.id.as_str()),
        ("ByClient", head.as_str())
    );
    assert_eq!(dead[0].error, "poison message 2 in ByClient");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_head_that_fails_again_halts_the_key_again() {
    let (probe, domain) = poisoned_domain().await;
    let inline = domain.inline_broker().unwrap();
    inline.retry("ByClient", "a").unwrap();
    domain.settle().await.unwrap();
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2, 2, 2]);
    assert_eq!(inline.halted().len(), 1, "halted again, a:3 still waiting");
    probe.cure();
    inline.retry("ByClient", "a").unwrap();
    domain.settle().await.unwrap();
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2, 2, 2, 2, 3]);
    assert!(inline.halted().is_empty());
}

#[tokio::test]
async fn a_handler_without_a_key_dead_letters_a_poison_message_and_goes_on() {
    let probe = Probe::new("client_id").poisoned_by(2).shared();
    let domain = Domain::builder()
        .config(fast_retries(0))
        .event_handler(Recorder::<PerAggregateA>::new(&probe))
        .init()
        .unwrap();
    commit(
        &domain,
        [
            placed("o-1", "a", 1),
            placed("o-2", "a", 2),
            placed("o-3", "a", 3),
        ],
    )
    .await;
    domain.settle().await.unwrap();
    let inline = domain.inline_broker().unwrap();
    assert!(inline.halted().is_empty());
    let dead = inline.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].message.aggregate_id.as_deref(), Some("o-2"));
    let mut amounts: Vec<u64> = probe.seen().iter().map(|s| s.amount).collect();
    amounts.sort_unstable();
    assert_eq!(amounts, vec![1, 2, 3]);
}

fn publication() -> Publication {
    Publication::to_base(Envelope::new(&placed("o-1", "a", 1)).unwrap())
}

#[tokio::test]
async fn publishing_before_any_subscription_is_attached_fails_for_a_retry() {
    let error = InlineBroker::new().publish(&[publication()]).await.unwrap_err();
    assert_eq!(error.published, 0);
    assert!(error.source.to_string().contains("no subscriptions"), "{error}");
}

#[tokio::test]
async fn run_returns_after_shutdown_once_handlers_are_done() {
    let probe = Probe::new("client_id")
        .with_delay(Duration::from_millis(50))
        .shared();
    let subscriptions = keyed_domain(&probe, Config::default()).subscriptions().clone();
    let broker = InlineBroker::new();
    let shutdown = CancellationToken::new();
    let run = broker.run(subscriptions, shutdown.clone());
    broker.publish(&[publication()]).await.unwrap();
    shutdown.cancel();
    run.await.unwrap();
    assert_eq!(
        probe.completed(),
        1,
        "run returned before the in-flight handler finished"
    );
}

#[tokio::test]
async fn command_handlers_are_never_run_by_the_broker() {
    let probe = Probe::new("client_id").shared();
    let broker = InlineBroker::new();
    let domain = Domain::builder()
        .broker(broker.clone())
        .command_handler(CommandRecorder::<Commands>::new(&probe))
        .init()
        .unwrap();
    // Even handed every subscription, the broker skips command handlers.
    let mut all = domain.subscriptions().to_vec();
    all.extend(domain.command_handlers().iter().cloned());
    broker.attach(all.into());
    let command = PlaceOrder {
        order_id: "o-1".into(),
        client_id: "a".into(),
        amount: 1,
    };
    let envelope = Envelope::command(&command).unwrap();
    broker.publish(&[Publication::to_base(envelope)]).await.unwrap();
    broker.idle().await;
    assert_eq!(probe.runs(), 0);
}
