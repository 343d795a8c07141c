//! Redis restarts (with its append-only file) while events flow, once
//! gracefully and once by a crash with an outage longer than the lease
//! TTL: the workers reconnect and carry on, and events published after
//! each restart flow too. Nothing is lost, reordered or overlapping.

use crate::support;

use std::time::Duration;

use ordo_testkit::{Redis, wait_until};
use support::Env;

/// The workers' default lease TTL.
const TTL_MS: u64 = 2_000;

#[test]
fn workers_survive_a_redis_restart_and_lose_nothing() -> anyhow::Result<()> {
    let mut env = Env::with(Redis::builder().append_only(true).start()?)?;
    let mut workers = [env.worker("w1", &[])?, env.worker("w2", &[])?];
    env.publish(&["--keys", "8", "--events", "30", "--work-ms", "20"])?;
    wait_until(Duration::from_secs(20), "some events to be applied", || {
        env.verify().is_ok_and(|v| v.applied >= 40)
    })?;
    let before = env.verify()?;
    assert!(
        before.applied < before.events,
        "everything was applied before the restart: nothing tested"
    );

    env.redis.restart()?;
    env.publish(&["--keys", "8", "--events", "10", "--first-seq", "30"])?;
    env.assert_sound(&env.wait_all_applied(Duration::from_secs(45))?);

    // A crash in the middle of a batch, down for longer than a lease: every
    // lease expires, and the workers must take their partitions back.
    env.publish(&[
        "--keys",
        "8",
        "--events",
        "30",
        "--first-seq",
        "40",
        "--work-ms",
        "20",
    ])?;
    wait_until(
        Duration::from_secs(20),
        "some of the next batch to be applied",
        || env.verify().is_ok_and(|v| v.applied >= 8 * 40 + 40),
    )?;
    env.redis.kill()?;
    // The outage itself is the fault being injected, not a wait for a condition.
    std::thread::sleep(Duration::from_millis(TTL_MS + 1_000));
    env.redis.restart()?;
    env.publish(&["--keys", "8", "--events", "10", "--first-seq", "70"])?;

    let verdict = env.wait_all_applied(Duration::from_secs(45))?;
    assert_eq!(verdict.events, 8 * 80);
    env.assert_sound(&verdict);
    for worker in &mut workers {
        assert!(
            worker.wait_timeout(Duration::ZERO)?.is_none(),
            "a worker exited across the restart"
        );
    }
    Ok(())
}

#[test]
fn workers_survive_a_redis_stall_longer_than_a_lease() -> anyhow::Result<()> {
    let mut env = Env::start()?;
    let _workers = [env.worker("w1", &[])?, env.worker("w2", &[])?];
    env.publish(&["--keys", "8", "--events", "30", "--work-ms", "20"])?;
    wait_until(Duration::from_secs(20), "some events to be applied", || {
        env.verify().is_ok_and(|v| v.applied >= 40)
    })?;
    // Redis answers nothing for longer than a lease: every lease lapses.
    env.redis.pause()?;
    std::thread::sleep(Duration::from_millis(TTL_MS + 1_000));
    env.redis.resume()?;
    env.publish(&["--keys", "8", "--events", "10", "--first-seq", "30"])?;

    let verdict = env.wait_all_applied(Duration::from_secs(45))?;
    assert_eq!(verdict.events, 8 * 40);
    env.assert_sound(&verdict);
    Ok(())
}
