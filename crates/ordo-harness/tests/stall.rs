//! SIGSTOP of a partition's owner mid-handler for longer than its lease,
//! then SIGCONT: meanwhile another instance took over at a higher token and
//! moved on. The woken owner's effect commit is refused (it prints
//! `fenced`), nothing it does lands in the applied list, it cannot move the
//! partition, and the new owner's order stays intact.

mod support;

use std::time::Duration;

use ordo_harness::line::{self, Line};
use support::{Env, assert_sound, lines, wait_for_any};

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
    assert_sound(&verdict);
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
    // After waking, the old owner never ran `s` again under its stale token.
    let woken: Vec<Line> = lines(&workers[owner]).into_iter().skip(stalled_lines).collect();
    let stale_starts: Vec<&Line> = woken
        .iter()
        .filter(|l| l.kind() == line::START && l.key() == Some("s") && l.token() == Some(stale_token))
        .collect();
    assert!(
        stale_starts.is_empty(),
        "the woken owner ran `s` again under its lost lease: {stale_starts:?}"
    );
    Ok(())
}
