//! SIGSTOP of a partition's owner mid-handler for longer than its lease,
//! then SIGCONT: meanwhile another instance took over at a higher token and
//! moved on. The woken owner's effect commit is refused (it prints
//! `fenced`), nothing it does lands in the applied list, it cannot move the
//! partition, and the new owner's order stays intact.

use crate::support;

use std::num::NonZeroU32;
use std::time::Duration;

use ordo_core::contract::key::hashed_partition;
use ordo_harness::line::{self, Line};
use support::{Env, lines, wait_for_any};

#[test]
fn a_stalled_owner_that_wakes_up_is_fenced_and_the_new_owner_keeps_order() -> anyhow::Result<()> {
    let env = Env::start()?;
    let timings = ["--lease-ttl-ms", "1500", "--heartbeat-ms", "300"];
    let mut workers = [env.worker("w1", &timings)?, env.worker("w2", &timings)?];
    env.publish(&["--keys", "6", "--events", "10", "--work-ms", "5"])?;
    // Key `s`: seqs 0..2 quick, seq 2 long, 3..8 quick.
    env.publish(&["--key", "s", "--events", "2"])?;
    env.publish(&[
        "--key",
        "s",
        "--first-seq",
        "2",
        "--events",
        "1",
        "--work-ms",
        "2500",
    ])?;
    env.publish(&["--key", "s", "--first-seq", "3", "--events", "5"])?;

    let refs: Vec<_> = workers.iter().collect();
    let (owner, started) = wait_for_any(&refs, Duration::from_secs(20), "a start of s/2", |l| {
        l.is(line::START, "s", 2)
    })?;
    workers[owner].pause()?;
    let stale_token = started.token().expect("start lines carry a token");
    let other = 1 - owner;

    // The lease expires during the stall; the other instance takes over,
    // runs s/2 again and goes on with s/3.. .
    let rerun =
        workers[other].wait_for_line(|l| line::matches(l, line::START, "s", 2), Duration::from_secs(15))?;
    let new_token = Line::parse(&rerun)
        .and_then(|l| l.token())
        .expect("start lines carry a token");
    assert!(new_token > stale_token);
    workers[other].wait_for_line(|l| line::matches(l, line::DONE, "s", 7), Duration::from_secs(15))?;
    let stalled_lines = workers[owner].lines().len();

    // The stalled owner's run of s/2 finished its work while stopped: on
    // waking it tries to commit, under a lease it no longer holds.
    workers[owner].resume()?;
    workers[owner].wait_for_line(
        |l| Line::parse(l).is_some_and(|l| l.is(line::FENCED, "s", 2) && l.token() == Some(stale_token)),
        Duration::from_secs(10),
    )?;
    // More events for `s` after the wake-up: the new owner (or a later one)
    // handles them in order, whatever the woken instance does.
    env.publish(&["--key", "s", "--first-seq", "8", "--events", "4"])?;

    let verdict = env.wait_all_applied(Duration::from_secs(30))?;
    env.assert_sound(&verdict);
    let s = verdict.key("s");
    assert_eq!(
        s.applied_seqs(),
        (0..12).collect::<Vec<_>>(),
        "s applied in publish order, once each"
    );
    assert!(
        s.applied
            .iter()
            .filter(|a| a.seq >= 2)
            .all(|a| a.token >= new_token),
        "an effect of the stale token landed: {:?}",
        s.applied
    );
    assert_eq!(s.runs.get(&2), Some(&1), "s/2 committed once, by the new owner");
    // After waking, the old owner never invoked its handler on `s` again
    // under its lost lease (a `start`, or a `stale` refusal at the start).
    let woken: Vec<Line> = lines(&workers[owner]).into_iter().skip(stalled_lines).collect();
    let stale_starts: Vec<&Line> = woken
        .iter()
        .filter(|l| matches!(l.kind(), line::START | line::STALE))
        .filter(|l| l.key() == Some("s") && l.token() == Some(stale_token))
        .collect();
    assert!(
        stale_starts.is_empty(),
        "the woken owner invoked its handler on `s` again under its lost lease (a retry after the \
         fenced error?): {stale_starts:?}"
    );
    Ok(())
}

#[test]
fn partitions_of_a_stalled_idle_owner_move_on_and_it_rejoins_after_waking() -> anyhow::Result<()> {
    let env = Env::start()?;
    let keys = support::key_names(8);
    let timings = ["--lease-ttl-ms", "1500", "--heartbeat-ms", "300"];
    let mut workers = [env.worker("w1", &timings)?, env.worker("w2", &timings)?];
    env.publish(&["--keys", "8", "--events", "5"])?;
    env.wait_all_applied(Duration::from_secs(15))?;
    ordo_testkit::wait_until(Duration::from_secs(10), "both workers to own partitions", || {
        env.lease_counts(&keys)
            .is_ok_and(|c| c.contains_key("w1") && c.contains_key("w2"))
    })?;

    // w1 stalls while idle; events published meanwhile on every key are
    // handled by w2 once w1's leases expire.
    workers[0].pause()?;
    env.publish(&["--keys", "8", "--events", "5", "--first-seq", "5"])?;
    env.wait_all_applied(Duration::from_secs(20))?;
    assert_eq!(env.lease_counts(&keys)?.get("w2"), Some(&8));

    // Awake again, w1 gets its share back and handles new events.
    workers[0].resume()?;
    ordo_testkit::wait_until(Duration::from_secs(15), "w1 to own partitions again", || {
        env.lease_counts(&keys).is_ok_and(|c| c.contains_key("w1"))
    })?;
    env.publish(&["--keys", "8", "--events", "5", "--first-seq", "10"])?;
    let verdict = env.wait_all_applied(Duration::from_secs(20))?;
    env.assert_sound(&verdict);
    assert_eq!(verdict.events, 8 * 15);
    assert_eq!(
        verdict.duplicates, 0,
        "nothing was in flight at the stall:\n{verdict}"
    );
    Ok(())
}

/// SIGSTOP of an owner that has read a message (`b/0`, in a partition of
/// its own) waiting for the only handler permit, held by `a/0`'s long run,
/// for longer than the leases; then SIGCONT. `a/0` ends (its commit
/// refused) and frees the permit: the woken owner must not start `b/0`,
/// read before the stall, under the lease it lost meanwhile, whatever its
/// heartbeat has noticed yet. The other instance runs both.
///
/// Without the lease confirmation before a start, the woken owner started
/// `b/0` in 2 of 8 runs: in the others its heartbeat, on a thread of its
/// own, found the leases lost first and stopped the waiting worker. With
/// it, `b/0` never starts there.
#[test]
fn a_woken_owner_starts_no_message_it_read_before_the_stall() -> anyhow::Result<()> {
    a_woken_owner_starts_nothing_it_read_before(Env::start()?, ["a", "b"])
}

/// [`a_woken_owner_starts_no_message_it_read_before_the_stall`] with the
/// keys in two hashed partitions.
#[test]
fn a_woken_owner_of_hashed_partitions_starts_no_message_it_read_before_the_stall() -> anyhow::Result<()> {
    let two = NonZeroU32::new(2).expect("two partitions");
    let in_partition = |n: u32| {
        (0..)
            .map(|i| format!("k{i}"))
            .find(|key| hashed_partition(key, two) == n)
            .expect("a key of every partition")
    };
    let (a, b) = (in_partition(0), in_partition(1));
    a_woken_owner_starts_nothing_it_read_before(Env::start_hashed(2)?, [&a, &b])
}

fn a_woken_owner_starts_nothing_it_read_before(env: Env, [a, b]: [&str; 2]) -> anyhow::Result<()> {
    let timings = [
        "--lease-ttl-ms",
        "1500",
        "--heartbeat-ms",
        "300",
        "--max-concurrency",
        "1",
    ];
    let mut w1 = env.worker("w1", &timings)?;
    env.publish(&["--key", a, "--events", "1", "--work-ms", "2500"])?;
    w1.wait_for_line(|l| line::matches(l, line::START, a, 0), Duration::from_secs(15))?;
    env.publish(&["--key", b, "--events", "1"])?;
    // w1 owns `b`'s partition and has read `b/0`: it waits for the permit.
    ordo_testkit::wait_until(Duration::from_secs(10), "w1 to read b/0", || {
        env.lease_holder(b)
            .ok()
            .flatten()
            .is_some_and(|(holder, _)| holder == "w1")
            && env.pending(b).is_ok_and(|pending| pending == 1)
    })?;
    w1.pause()?;
    let stalled_lines = w1.lines().len();

    // Once w2 has run both, `a/0`'s work in the stalled w1 (which began
    // earlier) is over too: on waking, w1 commits it at once.
    let w2 = env.worker("w2", &timings)?;
    ordo_testkit::wait_until(Duration::from_secs(15), "w2 to run a/0 and b/0", || {
        let done = lines(&w2);
        [a, b]
            .iter()
            .all(|key| done.iter().any(|l| l.is(line::DONE, key, 0)))
    })?;
    w1.resume()?;
    w1.wait_for_line(|l| line::matches(l, line::FENCED, a, 0), Duration::from_secs(10))?;
    let verdict = env.wait_all_applied(Duration::from_secs(20))?;
    env.assert_sound(&verdict);
    let woken: Vec<Line> = lines(&w1).into_iter().skip(stalled_lines).collect();
    let started: Vec<&Line> = woken
        .iter()
        .filter(|l| matches!(l.kind(), line::START | line::STALE) && l.key() == Some(b))
        .collect();
    assert!(
        started.is_empty() && verdict.stale_starts == 0,
        "the woken owner started {b}/0 under its lost lease: {started:?}\n{verdict}"
    );
    Ok(())
}
