//! The harness's own checks must be able to fail. Here the worker's handler
//! runs in process, under leases taken by hand, against a real Redis: two
//! runs of one key under one valid lease are counted as an overlap, runs
//! one after another are not, a new owner overwriting a stale owner's
//! marker is not, the stale owner's effect is refused by the fence, and a
//! run invoked under an already lost lease does not start.

use crate::support;

use std::time::Duration;

use fred::interfaces::KeysInterface as _;
use ordo_core::contract::handler::{EventHandler, HandlerContext};
use ordo_core::contract::message::Envelope;
use ordo_harness::keys;
use ordo_harness::tick::{GROUP, Tick};
use ordo_harness::worker::TickHandler;
use ordo_redis::RedisFence;
use ordo_redis::internals::{Lease, Partitions};
use support::Env;

fn envelope(key: &str, seq: u64, work_ms: u64) -> anyhow::Result<Envelope> {
    let tick = Tick {
        key: key.to_owned(),
        seq,
        poison: false,
        work_ms,
        linger_ms: 0,
    };
    let mut envelope = Envelope::new(&tick)?;
    envelope.partition_key = Some(key.to_owned());
    Ok(envelope)
}

fn context(envelope: &Envelope, lease: &Lease) -> HandlerContext {
    HandlerContext::new(envelope)
        .with_fencing_token(lease.token())
        .with_extension(RedisFence::new(lease))
}

/// The overlaps counted on this test's keys (it runs the handler directly,
/// without publishing, so `verify` has no published keys to sum over).
fn overlaps(env: &Env) -> anyhow::Result<u64> {
    counted(env, keys::overlaps)
}

/// The stale starts counted on this test's keys.
fn stale_starts(env: &Env) -> anyhow::Result<u64> {
    counted(env, keys::stale_starts)
}

fn counted(env: &Env, counter: fn(&str) -> String) -> anyhow::Result<u64> {
    let mut total = 0;
    for key in ["one", "two", "three"] {
        let count: Option<u64> = env.block_on(env.client().get(counter(key)))?;
        total += count.unwrap_or(0);
    }
    Ok(total)
}

#[test]
fn the_overlap_detector_fires_only_for_runs_under_a_valid_lease() -> anyhow::Result<()> {
    let env = Env::start()?;
    let ttl = Duration::from_secs(10);
    let owner_a = Partitions::new(env.client().clone(), "a", ttl);
    let owner_b = Partitions::new(env.client().clone(), "b", ttl);
    let handler = TickHandler::new(env.client().clone(), "in-process");

    // One after another under one lease: no overlap.
    let lease = env
        .block_on(owner_a.acquire(GROUP, &keys::partition("one")))?
        .expect("free");
    for seq in 0..2 {
        let message = envelope("one", seq, 10)?;
        env.block_on(handler.handle(&message, &context(&message, &lease)))
            .map_err(anyhow::Error::from_boxed)?;
    }
    assert_eq!(overlaps(&env)?, 0);

    // Two at once under the same valid lease: an overlap.
    let lease = env
        .block_on(owner_a.acquire(GROUP, &keys::partition("two")))?
        .expect("free");
    let (first, second) = (envelope("two", 0, 300)?, envelope("two", 1, 300)?);
    let (ctx_first, ctx_second) = (context(&first, &lease), context(&second, &lease));
    let (a, b) = env.block_on(async {
        tokio::join!(
            handler.handle(&first, &ctx_first),
            handler.handle(&second, &ctx_second)
        )
    });
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(
        overlaps(&env)?,
        1,
        "two concurrent runs under one lease went unnoticed"
    );

    // A stale owner still running when a new owner starts: not an overlap
    // (the new owner overwrites the stale marker), and the stale owner's
    // commit is refused.
    let stale = env
        .block_on(owner_a.acquire(GROUP, &keys::partition("three")))?
        .expect("free");
    let slow = envelope("three", 0, 500)?;
    let slow_ctx = context(&slow, &stale);
    let stale_handler = handler.clone();
    let stale_run = env.spawn(async move {
        let result = stale_handler.handle(&slow, &slow_ctx).await;
        result.map_err(|e| e.to_string())
    });
    ordo_testkit::wait_until(Duration::from_secs(5), "the stale run to start", || {
        env.block_on(marker_of(&env, "three")).is_some()
    })?;
    assert!(env.block_on(owner_a.release(&stale))?);
    let fresh = env
        .block_on(owner_b.acquire(GROUP, &keys::partition("three")))?
        .expect("released");
    assert!(fresh.token() > stale.token());
    let rerun = envelope("three", 0, 0)?;
    env.block_on(handler.handle(&rerun, &context(&rerun, &fresh)))
        .map_err(anyhow::Error::from_boxed)?;
    let refused = env.block_on(stale_run)?;
    let error = refused.expect_err("the stale owner's commit went through");
    assert!(error.starts_with("fenced"), "{error}");
    assert_eq!(
        overlaps(&env)?,
        1,
        "a stale owner's marker was counted as an overlap"
    );
    let applied: Vec<String> = env.block_on(fred::interfaces::ListInterface::lrange(
        env.client(),
        keys::applied("three"),
        0,
        -1,
    ))?;
    assert_eq!(
        applied,
        [format!("0:{}", fresh.token())],
        "only the new owner's effect may land"
    );

    // Invoked again under the lost lease, the handler does not start: it
    // neither counts a start nor touches the new owner's marker.
    let late = envelope("three", 1, 0)?;
    let marker = env.block_on(marker_of(&env, "three"));
    let outcome = env.block_on(handler.handle(&late, &context(&late, &stale)));
    assert!(outcome.is_err(), "a run under a lost lease started");
    assert_eq!(stale_starts(&env)?, 1);
    assert_eq!(overlaps(&env)?, 1);
    assert_eq!(env.block_on(marker_of(&env, "three")), marker);
    Ok(())
}

async fn marker_of(env: &Env, key: &str) -> Option<String> {
    fred::interfaces::KeysInterface::get(env.client(), keys::marker(key))
        .await
        .ok()
        .flatten()
}
