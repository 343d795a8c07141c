//! SIGKILL of a partition's owner in the middle of a handler run: once its
//! lease expires another instance takes the partition over at a higher
//! token, reclaims the unacknowledged message and resumes in order. Only
//! the message that was in flight runs again; nothing is lost, and no
//! fenced effect lands twice.

use crate::support;

use std::time::{Duration, Instant};

use ordo_harness::line::{self, Line};
use support::{Env, wait_for_any};

const TTL_MS: u64 = 2_000;

#[test]
fn a_killed_owner_is_replaced_after_its_lease_expires_and_only_the_in_flight_event_reruns()
-> anyhow::Result<()> {
    let env = Env::start()?;
    let timings = ["--lease-ttl-ms", "2000", "--heartbeat-ms", "300"];
    let mut workers = [env.worker("w1", &timings)?, env.worker("w2", &timings)?];
    // Load on other keys, and key `x`: seqs 0..3 quick, seq 3 long, 4..10 quick.
    env.publish(&["--keys", "8", "--events", "10", "--work-ms", "5"])?;
    env.publish(&["--key", "x", "--events", "3"])?;
    env.publish(&[
        "--key",
        "x",
        "--first-seq",
        "3",
        "--events",
        "1",
        "--work-ms",
        "3000",
    ])?;
    env.publish(&["--key", "x", "--first-seq", "4", "--events", "6"])?;

    let refs: Vec<_> = workers.iter().collect();
    let (owner, started) = wait_for_any(&refs, Duration::from_secs(20), "a start of x/3", |l| {
        l.is(line::START, "x", 3)
    })?;
    let old_token = started.token().expect("start lines carry a token");
    workers[owner].kill()?;
    // Nobody renews the lease any more: it expires in `remaining`.
    let killed_at = Instant::now();
    let pttl = env.lease_pttl("x")?;
    anyhow::ensure!(
        pttl > 0,
        "the killed owner's lease had already lapsed (PTTL {pttl})"
    );
    let remaining = Duration::from_millis(pttl.unsigned_abs());
    let holder = env.lease_holder("x")?.map(|(instance, _)| instance);
    assert_eq!(holder.as_deref(), Some(if owner == 0 { "w1" } else { "w2" }));
    let survivor = 1 - owner;

    let rerun = workers[survivor].wait_for_line(
        |l| line::matches(l, line::START, "x", 3),
        Duration::from_millis(TTL_MS) + Duration::from_secs(10),
    )?;
    let takeover = killed_at.elapsed();
    let new_token = Line::parse(&rerun)
        .and_then(|l| l.token())
        .expect("start lines carry a token");
    assert!(
        new_token > old_token,
        "the new owner's token {new_token} is not above {old_token}"
    );
    // An earlier takeover would have meant two owners at once (PTTL is
    // rounded down to the millisecond).
    assert!(
        takeover + Duration::from_millis(2) >= remaining,
        "taken over after {takeover:?}, before the lease expired ({remaining:?})"
    );

    let verdict = env.wait_all_applied(Duration::from_secs(30))?;
    env.assert_sound(&verdict);
    let x = verdict.key("x");
    assert_eq!(
        x.applied_seqs(),
        (0..10).collect::<Vec<_>>(),
        "x applied in publish order, once each"
    );
    assert_eq!(
        x.starts_of(3),
        2,
        "x/3 ran on the killed owner and again on its successor"
    );
    for seq in (0..10).filter(|s| *s != 3) {
        assert_eq!(
            x.starts_of(seq),
            1,
            "x/{seq} was not in flight at the kill, yet ran again"
        );
    }
    assert!(
        x.applied
            .iter()
            .filter(|a| a.seq >= 3)
            .all(|a| a.token == new_token)
    );
    // On every other key, at most the one event in flight at the kill ran
    // twice, and its effect landed once (a run again applies none of the
    // fenced commits an earlier run of its message applied).
    for (key, report) in &verdict.per_key {
        let rerun: Vec<_> = report.starts.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            rerun.len() <= 1,
            "{key}: more than the in-flight event ran again: {rerun:?}"
        );
        assert!(
            report.duplicates.is_empty(),
            "{key}: effects applied twice {:?}",
            report.duplicates
        );
    }
    Ok(())
}

/// SIGKILL of a partition's owner after its handler committed an effect
/// and before the broker acknowledged the message (the run lingers there):
/// the next owner runs the message again, and its fenced commit, finding
/// the message's commit applied, applies nothing. The effect lands once.
/// (Before, the run again committed again: `x` had seq 2 twice.)
#[test]
fn an_owner_killed_between_a_commit_and_its_acknowledgement_leaves_the_effect_applied_once()
-> anyhow::Result<()> {
    let env = Env::start()?;
    let timings = ["--lease-ttl-ms", "2000", "--heartbeat-ms", "300"];
    let mut workers = [env.worker("w1", &timings)?, env.worker("w2", &timings)?];
    env.publish(&["--key", "x", "--events", "2"])?;
    env.publish(&[
        "--key",
        "x",
        "--first-seq",
        "2",
        "--events",
        "1",
        "--linger-ms",
        "5000",
    ])?;
    env.publish(&["--key", "x", "--first-seq", "3", "--events", "3"])?;

    let refs: Vec<_> = workers.iter().collect();
    let (owner, committed) = wait_for_any(&refs, Duration::from_secs(20), "x/2 committed", |l| {
        l.is(line::DONE, "x", 2)
    })?;
    let old_token = committed.token().expect("done lines carry a token");
    workers[owner].kill()?;
    let survivor = 1 - owner;
    let rerun = workers[survivor].wait_for_line(
        |l| line::matches(l, line::DONE, "x", 2),
        Duration::from_millis(TTL_MS) + Duration::from_secs(10),
    )?;
    let new_token = Line::parse(&rerun)
        .and_then(|l| l.token())
        .expect("done lines carry a token");
    assert!(
        new_token > old_token,
        "x/2 ran again under the next owner's lease"
    );

    let verdict = env.wait_all_applied(Duration::from_secs(30))?;
    env.assert_sound(&verdict);
    let x = verdict.key("x");
    assert_eq!(
        x.starts_of(2),
        2,
        "x/2 ran on the killed owner and again on its successor"
    );
    assert_eq!(
        x.applied_seqs(),
        (0..6).collect::<Vec<_>>(),
        "x applied in publish order, once each"
    );
    assert!(x.duplicates.is_empty(), "{:?}", x.duplicates);
    let x2: Vec<u64> = x.applied.iter().filter(|a| a.seq == 2).map(|a| a.token).collect();
    assert_eq!(
        x2,
        [old_token],
        "x/2's effect is the killed owner's, applied once"
    );
    Ok(())
}

/// SIGKILL of a key's owner in the middle of a fast run of messages with an
/// acknowledgement window of 8 (`[handlers.TickRecorder] ack_window`): the
/// owner runs up to 8 messages ahead of their acknowledgements, so the next
/// owner runs again what it had handled without an answered
/// acknowledgement, in order, at most the window and the message in
/// flight; and every effect, committed through the fence, lands once.
#[test]
fn with_an_acknowledgement_window_a_killed_owner_s_window_runs_again_and_applies_once() -> anyhow::Result<()>
{
    let env = Env::start()?;
    let timings = [
        "--lease-ttl-ms",
        "2000",
        "--heartbeat-ms",
        "300",
        "--ack-window",
        "8",
    ];
    let mut workers = [env.worker("w1", &timings)?, env.worker("w2", &timings)?];
    env.publish(&["--key", "x", "--events", "400"])?;

    let refs: Vec<_> = workers.iter().collect();
    let (owner, _) = wait_for_any(&refs, Duration::from_secs(20), "x/150 done", |l| {
        l.is(line::DONE, "x", 150)
    })?;
    workers[owner].kill()?;
    let survivor = 1 - owner;
    workers[survivor].wait_for_line(
        |l| line::matches(l, line::DONE, "x", 399),
        Duration::from_millis(TTL_MS) + Duration::from_secs(30),
    )?;

    let verdict = env.wait_all_applied(Duration::from_secs(30))?;
    env.assert_sound(&verdict);
    let x = verdict.key("x");
    assert_eq!(
        x.applied_seqs(),
        (0..400).collect::<Vec<_>>(),
        "x applied in publish order, once each"
    );
    assert!(x.duplicates.is_empty(), "{:?}", x.duplicates);
    let reran: Vec<u64> = (0..400).filter(|seq| x.starts_of(*seq) > 1).collect();
    assert!(
        reran.len() <= 9,
        "more than the window and the message in flight ran again: {reran:?}"
    );
    assert!(
        reran.windows(2).all(|pair| pair[1] == pair[0] + 1),
        "what ran again is one run of messages: {reran:?}"
    );
    eprintln!("ran again after the kill: {reran:?}");
    Ok(())
}
