//! A dependency outage is not a poison message, on the inline broker:
//! transient failures retry without using up `max_retries`, a handler
//! most of whose keys fail transiently pauses and resumes by itself, a
//! very long outage halts with a reason that says so, and an attempt
//! that hangs is cancelled at its timeout.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ordo_core::contract::handler::HandlerKind;
use ordo_core::{Config, Domain, HealthState};
use support::*;

spec!(ByClient => handler("ByClient", HandlerKind::Event, "order", Some("client_id"), vec![
    on::<OrderPlaced>(Some(extractor!(OrderPlaced, client_id))),
]));

/// `max_retries = 1`, a quick backoff unless `extra` sets one, and `extra`.
fn config(extra: &str) -> Config {
    let backoff = if extra.contains("retry_backoff") {
        ""
    } else {
        "retry_backoff_initial_ms = 5\nretry_backoff_max_ms = 20\n"
    };
    Config::from_toml_str(&format!(
        "[server.partitioning]\nmax_retries = 1\n{backoff}{extra}"
    ))
    .unwrap()
}

fn domain(probe: &Arc<Probe>, config: Config) -> Domain {
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

/// Waits (up to `deadline`) until `condition` holds.
async fn until(deadline: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(started.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_retried_in_order_without_halting_and_heals_by_itself() {
    let probe = Probe::new("client_id").in_outage().shared();
    let domain = domain(&probe, config("pause_min_keys = 0"));
    commit(
        &domain,
        [
            placed("o-1", "a", 1),
            placed("o-2", "a", 2),
            placed("o-3", "b", 3),
        ],
    )
    .await;
    domain.publish_pending().await.unwrap();
    // Far more attempts than max_retries = 1 allows for a poison message.
    until(Duration::from_secs(10), "ten failed attempts", || {
        probe.runs() >= 10
    })
    .await;
    let inline = domain.inline_broker().unwrap();
    assert!(
        inline.halted().is_empty(),
        "an outage halted {:?}",
        inline.halted()
    );
    assert!(inline.failures().is_empty());
    assert!(
        probe.seen().iter().all(|s| s.attempt == 1),
        "transient failures used up attempts"
    );
    assert!(
        probe.amounts_for("a").iter().all(|amount| *amount == 1),
        "a:2 overtook a:1"
    );

    probe.end_outage();
    domain.settle().await.unwrap();
    let a = probe.amounts_for("a");
    assert_eq!(
        &a[a.len() - 2..],
        &[1, 2],
        "a's messages ran once the outage ended, in order"
    );
    assert_eq!(probe.amounts_for("b").last(), Some(&3));
    assert!(inline.halted().is_empty());
    assert_eq!(probe.overlaps(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_max_transient_halts_saying_so() {
    let probe = Probe::new("client_id").in_outage().shared();
    let domain = domain(&probe, config("pause_min_keys = 0\nmax_transient_ms = 300"));
    commit(&domain, [placed("o-1", "a", 1)]).await;
    domain.settle().await.unwrap();
    let halted = domain.inline_broker().unwrap().halted();
    assert_eq!(halted.len(), 1, "the outage outlived max_transient_ms");
    assert!(
        halted[0].error.contains("past max_transient_ms = 300")
            && halted[0]
                .error
                .ends_with("last error: connection refused (the database is down)"),
        "{}",
        halted[0].error
    );
    assert!(probe.runs() > 2, "only {} attempts", probe.runs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn most_keys_failing_transiently_pause_the_handler_until_a_probe_succeeds() {
    let probe = Probe::new("client_id").in_outage().shared();
    let domain = domain(
        &probe,
        config("pause_min_keys = 3\nretry_backoff_initial_ms = 100\nretry_backoff_max_ms = 100"),
    );
    commit(
        &domain,
        (1..=6).map(|n| placed(&format!("o-{n}"), &format!("k{n}"), n)),
    )
    .await;
    domain.publish_pending().await.unwrap();
    let running = domain.start();
    let paused = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let health = running.health().await;
            let subscription = health.subscription("ByClient").unwrap().clone();
            if subscription.state == HealthState::Paused {
                return subscription;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the handler never paused");
    assert!(
        paused.reasons[0].contains("keys failed transiently")
            && paused.reasons[0].contains("connection refused"),
        "{:?}",
        paused.reasons
    );
    // Paused: one probe at a time, at a growing interval (100 ms, 200 ms,
    // 400 ms, ...), where six keys retrying every 50-100 ms would make
    // some 80 attempts in these 1.2 s.
    let before = probe.runs();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let during = probe.runs() - before;
    assert!(during <= 6, "{during} attempts in 1.2 s while paused");
    assert!(domain.inline_broker().unwrap().halted().is_empty());

    probe.end_outage();
    tokio::time::timeout(Duration::from_secs(10), domain.settle())
        .await
        .expect("the handler resumed and drained")
        .unwrap();
    let health = running.health().await;
    assert_eq!(health.subscription("ByClient").unwrap().state, HealthState::Ok);
    for n in 1..=6 {
        assert_eq!(probe.amounts_for(&format!("k{n}")).last(), Some(&n));
    }
    running.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_that_hangs_is_cancelled_at_its_timeout_and_counts() {
    let probe = Probe::new("client_id").hanging_on(2).shared();
    let domain = domain(&probe, config("handler_timeout_ms = 100"));
    commit(
        &domain,
        [
            placed("o-1", "a", 1),
            placed("o-2", "a", 2),
            placed("o-3", "a", 3),
            placed("o-4", "b", 4),
        ],
    )
    .await;
    domain.publish_pending().await.unwrap();
    let inline = domain.inline_broker().unwrap();
    until(
        Duration::from_secs(10),
        "the hanging message to halt its key",
        || !inline.halted().is_empty(),
    )
    .await;
    let halt = &inline.halted()[0];
    assert_eq!(halt.key, "a");
    assert_eq!(halt.attempts, 2, "max_retries = 1: two attempts, each cancelled");
    assert_eq!(
        halt.error,
        "the handler did not finish within its timeout of 100 ms and was cancelled"
    );
    assert_eq!(probe.amounts_for("a"), vec![1, 2, 2]);
    assert_eq!(probe.amounts_for("b"), vec![4]);
}
