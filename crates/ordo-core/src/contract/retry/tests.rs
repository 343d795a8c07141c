use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::contract::config::Config;

fn policy(toml: &str, name: &str) -> RetryPolicy {
    let config = Config::from_toml_str(&format!("[server.partitioning]\n{toml}")).expect("valid config");
    let defaults = config.partitioning();
    let breaker = Arc::new(Breaker::new(name, defaults.pause_min_keys(), defaults.backoff()));
    RetryPolicy::new(defaults, breaker)
}

fn transient_failure() -> Failure {
    Failure::new(transient(std::io::Error::other("pool timed out")))
}

fn failure() -> Failure {
    Failure::new("balance went negative".into())
}

#[tokio::test(start_paused = true)]
async fn transient_failures_do_not_use_up_attempts() {
    let policy = policy("max_retries = 1\npause_min_keys = 0", "H");
    let mut retries = policy.start("k", 0);
    for _ in 0..50 {
        retries.admit().await.unwrap();
        assert_eq!(retries.attempt(), 1);
        let failed = retries.failed(&transient_failure());
        assert!(failed.transient() && !failed.counted());
        let Next::Retry { delay } = retries.next() else {
            panic!("a transient failure gave up");
        };
        // Capped at the backoff's cap.
        assert!(delay <= Duration::from_secs(5));
        retries.wait(delay).await;
    }
    assert!(retries.failed(&failure()).counted());
    assert_eq!(retries.attempt(), 2);
    assert!(matches!(retries.next(), Next::Retry { .. }));
    retries.failed(&failure());
    let Next::GiveUp(give_up) = retries.next() else {
        panic!("two counted failures with max_retries = 1 must give up");
    };
    assert_eq!(give_up.attempts(), 2);
    assert_eq!(give_up.reason(), "balance went negative");
    assert!(!give_up.outage());
}

#[tokio::test(start_paused = true)]
async fn an_outage_longer_than_max_transient_gives_up_saying_so() {
    let policy = policy("max_transient_ms = 10000\npause_min_keys = 0", "H");
    let mut retries = policy.start("k", 0);
    let give_up = loop {
        retries.failed(&transient_failure());
        match retries.next() {
            Next::Retry { delay } => retries.wait(delay).await,
            Next::GiveUp(give_up) => break give_up,
        }
    };
    assert!(give_up.outage());
    assert!(
        give_up.reason().contains("past max_transient_ms = 10000")
            && give_up.reason().ends_with("last error: pool timed out"),
        "{}",
        give_up.reason()
    );
}

#[tokio::test(start_paused = true)]
async fn no_limit_means_an_outage_is_waited_out() {
    let policy = policy("max_transient_ms = 0\npause_min_keys = 0", "H");
    let mut retries = policy.start("k", 0);
    for _ in 0..2_000 {
        retries.failed(&transient_failure());
        let Next::Retry { delay } = retries.next() else {
            panic!("gave up without a limit");
        };
        retries.wait(delay).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_counts_unless_configured_transient() {
    let timed_out = || Failure::timed_out_after(Duration::from_secs(1));
    let counted = policy("", "H");
    assert!(!counted.is_transient(&timed_out()));
    let transient = policy("timeout_is_transient = true", "H");
    assert!(transient.is_transient(&timed_out()));
}

#[tokio::test(start_paused = true)]
async fn most_keys_failing_transiently_pause_the_handler_until_a_probe_succeeds() {
    let policy = policy(
        "pause_min_keys = 3\nretry_backoff_initial_ms = 1000\nretry_backoff_max_ms = 1000",
        "H",
    );
    // One key succeeding, then three failing transiently: paused.
    policy.start("ok", 0).succeeded();
    for key in ["a", "b"] {
        policy.start(key, 0).failed(&transient_failure());
        assert!(policy.breaker().status().is_none(), "paused after {key}");
    }
    policy.start("c", 0).failed(&transient_failure());
    let pause = policy
        .breaker()
        .status()
        .expect("three keys failing transiently pause the handler");
    assert!(
        pause.reason.starts_with("3 keys failed transiently"),
        "{}",
        pause.reason
    );

    // Nothing starts but one probe, after the probe interval.
    let started = tokio::time::Instant::now();
    let mut probe = policy.start("d", 0);
    probe.admit().await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the probe did not wait"
    );
    let mut waiting = tokio::spawn({
        let policy = policy.clone();
        async move {
            let mut retries = policy.start("e", 0);
            retries.admit().await.unwrap();
            tokio::time::Instant::now()
        }
    });
    tokio::select! {
        _ = &mut waiting => panic!("a second attempt started while the probe ran"),
        () = tokio::time::sleep(Duration::from_secs(120)) => {}
    }
    // A failed probe waits longer; the next one succeeds and resumes everyone.
    probe.failed(&transient_failure());
    assert_eq!(policy.breaker().status().unwrap().probes, 1);
    let mut second = policy.start("f", 0);
    let before = tokio::time::Instant::now();
    second.admit().await.unwrap();
    assert!(before.elapsed() > Duration::ZERO);
    second.succeeded();
    assert!(policy.breaker().status().is_none(), "a successful probe resumes");
    let resumed_at = waiting.await.unwrap();
    assert!(resumed_at >= before);
}

#[tokio::test(start_paused = true)]
async fn a_key_waiting_out_a_pause_gives_up_past_its_outage_limit() {
    let policy = policy(
        "pause_min_keys = 1\nmax_transient_ms = 60000\nretry_backoff_initial_ms = 1000\nretry_backoff_max_ms = 1000",
        "H",
    );
    let mut retries = policy.start("a", 0);
    retries.admit().await.unwrap();
    retries.failed(&transient_failure());
    assert!(policy.breaker().status().is_some());
    // Another attempt holds the probe for ever.
    let mut prober = policy.start("b", 0);
    prober.admit().await.unwrap();
    let started = tokio::time::Instant::now();
    let give_up = retries.admit().await.expect_err("waited past max_transient_ms");
    assert!(give_up.outage());
    assert!(started.elapsed() <= Duration::from_secs(60));
    drop(prober);
}

#[tokio::test(start_paused = true)]
async fn a_few_failing_keys_among_many_succeeding_do_not_pause() {
    let policy = policy("pause_min_keys = 3", "H");
    for n in 0..100 {
        policy.start(&format!("ok-{n}"), 0).succeeded();
    }
    for key in ["a", "b", "c", "d"] {
        policy.start(key, 0).failed(&transient_failure());
    }
    assert!(policy.breaker().status().is_none());
}
