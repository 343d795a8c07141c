//! A handler run that outlives a graceful shutdown keeps its key (issue
//! 26.10). `shutdown()` waits a lease TTL for the runs in flight, then
//! aborts them; a run in blocking code (a call without a timeout) goes on
//! regardless. The instance used to stop renewing its lease then: another
//! instance took the key one TTL later and ran the same message while the
//! first run was still going. Now the instance keeps renewing that lease
//! (from the heartbeat's thread, after `shutdown()` returned) until the run
//! has ended, and only then lets it go.
//!
//! Both workers run in blocking mode (`--blocking-work`): a run's work is
//! `std::thread::sleep` on the handler's own task, and each run records its
//! start by Redis's clock.

use crate::support;

use std::num::NonZeroU32;
use std::time::Duration;

use ordo_core::contract::key::hashed_partition;
use ordo_harness::line;
use support::Env;

/// How long the run works, in blocking code.
const WORK_MS: u64 = 4_000;

/// A 1 s lease renewed every 0.2 s; the shutdown grace is one TTL.
const TIMINGS: [&str; 5] = [
    "--lease-ttl-ms",
    "1000",
    "--heartbeat-ms",
    "200",
    "--blocking-work",
];

#[test]
fn a_run_that_outlives_a_graceful_shutdown_keeps_its_key_until_it_ends() -> anyhow::Result<()> {
    the_key_waits_for_the_run(&Env::start()?, "s")
}

/// The same with the key in one of two hashed partitions: one key's run
/// keeps the whole partition's lease.
#[test]
fn a_run_that_outlives_a_graceful_shutdown_keeps_its_hashed_partition_until_it_ends() -> anyhow::Result<()> {
    let env = Env::start_hashed(2)?;
    let two = NonZeroU32::new(2).expect("two partitions");
    // Some key of partition 1, to show it is not partition 0's doing.
    let key = (0..)
        .map(|i| format!("h{i}"))
        .find(|key| hashed_partition(key, two) == 1)
        .expect("a key of every partition");
    the_key_waits_for_the_run(&env, &key)
}

fn the_key_waits_for_the_run(env: &Env, key: &str) -> anyhow::Result<()> {
    let mut a = env.worker("a", &TIMINGS)?;
    let work = WORK_MS.to_string();
    env.publish(&["--key", key, "--events", "1", "--work-ms", &work])?;
    a.wait_for_line(|l| line::matches(l, line::START, key, 0), Duration::from_secs(20))?;
    let b = env.worker("b", &TIMINGS)?;
    // SIGTERM: a graceful shutdown, which gives up on the run after a TTL.
    a.terminate()?;

    let mut b = b;
    b.wait_for_line(|l| line::matches(l, line::START, key, 0), Duration::from_secs(30))?;
    let starts = env.blocking_starts(key)?;
    let [(first, _, started), (second, _, restarted)] = starts.as_slice() else {
        anyhow::bail!("one run on each instance expected, got {starts:?}");
    };
    assert_eq!((first.as_str(), second.as_str()), ("a", "b"), "{starts:?}");
    let after = restarted.saturating_sub(*started);
    println!("b started {key}/0 {after} ms after a's {WORK_MS} ms run of it began");
    assert!(
        after >= WORK_MS,
        "b started {key}/0 {after} ms after a's run of it began, while that run was still in its \
         {WORK_MS} ms of blocking work: two runs of one key at once"
    );
    Ok(())
}
