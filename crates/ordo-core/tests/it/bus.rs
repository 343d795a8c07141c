//! The command bus: routing, errors, and sequencing by routing key.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ordo_core::contract::handler::HandlerKind;
use ordo_core::contract::key::KeyRule;
use ordo_core::{DispatchError, Domain, FullConcurrencyPolicy};
use support::*;

spec!(OrderCommands => handler("OrderCommands", HandlerKind::Command, "order", None, vec![
    on::<PlaceOrder>(None),
    on::<CancelOrder>(None),
]));
spec!(ClientCommands => handler("ClientCommands", HandlerKind::Command, "order", Some("client_id"), vec![
    on::<PlaceOrder>(Some(extractor!(PlaceOrder, client_id))),
]));

fn place(order_id: &str, client_id: &str, amount: u64) -> PlaceOrder {
    PlaceOrder {
        order_id: order_id.into(),
        client_id: client_id.into(),
        amount,
    }
}

fn domain(probe: &Arc<Probe>) -> Domain {
    Domain::builder()
        .command_handler(CommandRecorder::<OrderCommands>::new(probe))
        .init()
        .unwrap()
}

#[tokio::test]
async fn a_command_reaches_its_handler_with_its_routing_key() {
    let probe = Probe::new("order_id").shared();
    domain(&probe).dispatch(place("o-1", "c-1", 7)).await.unwrap();
    let seen = probe.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (seen[0].type_name.as_str(), seen[0].key.as_str(), seen[0].amount),
        ("PlaceOrder", "o-1", 7)
    );
}

#[tokio::test]
async fn a_command_without_a_handler_is_refused() {
    let probe = Probe::new("order_id").shared();
    let domain = Domain::builder().init().unwrap();
    let error = domain.dispatch(place("o-1", "c-1", 1)).await.unwrap_err();
    assert!(
        matches!(
            error,
            DispatchError::NoHandler {
                type_name: "PlaceOrder"
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "no command handler is registered for `PlaceOrder`"
    );
    assert_eq!(probe.runs(), 0);
}

#[tokio::test]
async fn a_failing_handler_returns_its_error_as_the_source() {
    let probe = Probe::new("order_id").failing_first(1).shared();
    let error = domain(&probe).dispatch(place("o-1", "c-1", 1)).await.unwrap_err();
    assert!(
        matches!(
            &error,
            DispatchError::Handler {
                handler: "OrderCommands",
                type_name: "PlaceOrder",
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        chain(&error),
        "command handler `OrderCommands` failed on `PlaceOrder`: induced failure in OrderCommands"
    );
    // The message alone says why: a caller printing `{error}` is told.
    assert_eq!(
        error.to_string(),
        "command handler `OrderCommands` failed on `PlaceOrder`: induced failure in OrderCommands"
    );
}

#[tokio::test]
async fn a_panicking_handler_is_reported_as_aborted() {
    let probe = Probe::new("order_id").panicking_first(1).shared();
    let domain = domain(&probe);
    let error = domain.dispatch(place("o-1", "c-1", 1)).await.unwrap_err();
    assert!(
        matches!(
            error,
            DispatchError::Aborted {
                handler: "OrderCommands",
                ..
            }
        ),
        "{error:?}"
    );
    domain
        .dispatch(place("o-1", "c-1", 2))
        .await
        .expect("the routing key is not wedged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_with_one_routing_key_never_overlap() {
    let probe = Probe::new("order_id")
        .with_delay(Duration::from_millis(2))
        .shared();
    let domain = domain(&probe);
    let mut tasks = Vec::new();
    for amount in 0..20 {
        let domain = domain.clone();
        tasks.push(tokio::spawn(async move {
            domain.dispatch(place("o-1", "c-1", amount)).await
        }));
        tokio::task::yield_now().await;
    }
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(probe.runs(), 20);
    assert_eq!(probe.overlaps(), 0, "two commands for one routing key overlapped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_with_one_routing_key_keep_dispatch_order() {
    let probe = Probe::new("order_id")
        .with_delay(Duration::from_millis(1))
        .shared();
    let domain = domain(&probe);
    for amount in 0..10 {
        domain.dispatch(place("o-1", "c-1", amount)).await.unwrap();
    }
    let (first, second) = tokio::join!(
        domain.dispatch(place("o-1", "c-1", 10)),
        domain.dispatch(CancelOrder {
            order_id: "o-1".into(),
            client_id: "c-1".into(),
            amount: 11,
        }),
    );
    first.unwrap();
    second.unwrap();
    assert_eq!(probe.amounts_for("o-1"), (0..12).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commands_with_different_routing_keys_run_in_parallel() {
    let probe = Probe::new("order_id").with_barrier(3).shared();
    let domain = domain(&probe);
    let (a, b, c) = tokio::join!(
        domain.dispatch(place("o-1", "c-1", 1)),
        domain.dispatch(place("o-2", "c-1", 2)),
        domain.dispatch(place("o-3", "c-1", 3)),
    );
    a.unwrap();
    b.unwrap();
    c.unwrap();
    assert_eq!(
        probe.barrier_timeouts(),
        0,
        "the three routing keys did not run at the same time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_registration_policy_overrides_the_routing_key() {
    let probe = Probe::new("amount").with_barrier(2).shared();
    let domain = Domain::builder()
        .command_handler_with_policy(
            CommandRecorder::<OrderCommands>::new(&probe),
            FullConcurrencyPolicy,
        )
        .init()
        .unwrap();
    let (a, b) = tokio::join!(
        domain.dispatch(place("o-1", "c-1", 1)),
        domain.dispatch(place("o-1", "c-1", 2))
    );
    a.unwrap();
    b.unwrap();
    assert_eq!(
        probe.barrier_timeouts(),
        0,
        "full concurrency still serialised one routing key"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sequential_by_sequences_commands_by_their_validated_key() {
    let probe = Probe::new("client_id")
        .with_delay(Duration::from_millis(2))
        .shared();
    let domain = Domain::builder()
        .command_handler(CommandRecorder::<ClientCommands>::new(&probe))
        .init()
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for n in 0..10 {
        let domain = domain.clone();
        tasks.spawn(async move { domain.dispatch(place(&format!("o-{n}"), "c-1", n)).await });
    }
    for result in tasks.join_all().await {
        result.unwrap();
    }
    assert_eq!(probe.overlaps(), 0, "one client's commands overlapped");
    assert!(
        probe
            .seen()
            .iter()
            .all(|s| s.partition_key.as_deref() == Some("c-1"))
    );

    let error = domain.dispatch(place("o-x", "bad:key", 1)).await.unwrap_err();
    let DispatchError::InvalidKey { key, handler, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        (key.field.as_str(), key.rule.clone(), *handler),
        ("client_id", KeyRule::ContainsColon, "ClientCommands")
    );
    assert!(error.to_string().contains("\"bad:key\""), "{error}");
    assert_eq!(probe.runs(), 10, "the invalid command never ran");
}

#[tokio::test]
async fn a_routing_key_used_as_the_sequence_key_is_validated_like_a_partition_key() {
    let probe = Probe::new("order_id").shared();
    let error = domain(&probe).dispatch(place("o:1", "c-1", 1)).await.unwrap_err();
    let DispatchError::InvalidKey { key, handler, .. } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(
        (key.field.as_str(), key.rule.clone(), *handler),
        ("routing_key", KeyRule::ContainsColon, "OrderCommands")
    );
    assert_eq!(probe.runs(), 0, "the invalid command never ran");

    // Not used as a key (full concurrency): nothing to validate.
    let domain = Domain::builder()
        .command_handler_with_policy(
            CommandRecorder::<OrderCommands>::new(&probe),
            FullConcurrencyPolicy,
        )
        .init()
        .unwrap();
    domain.dispatch(place("o:1", "c-1", 1)).await.unwrap();
    assert_eq!(probe.runs(), 1);
}
