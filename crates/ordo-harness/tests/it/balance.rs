//! Fair share across processes: two workers split 16 partitions evenly, a
//! third joining gets its share, and one leaving on SIGTERM hands its
//! partitions over well before its leases could have expired, finishing
//! the run it is in first.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ordo_harness::line;
use ordo_testkit::wait_until;
use support::{Env, key_names, lines, wait_for_any};

const TTL_MS: u64 = 4_000;

/// Whether `counts` gives each of `workers` its share of 16 partitions,
/// within `slack`, and leaves none unowned.
fn fair(counts: &BTreeMap<String, usize>, workers: &[&str], slack: usize) -> bool {
    let share = 16 / workers.len();
    let owned: usize = workers.iter().map(|w| counts.get(*w).copied().unwrap_or(0)).sum();
    owned == 16
        && workers
            .iter()
            .all(|w| counts.get(*w).is_some_and(|n| n.abs_diff(share) <= slack))
}

#[test]
fn partitions_spread_evenly_and_a_leaving_worker_hands_over_before_its_ttl() -> anyhow::Result<()> {
    let env = Env::start()?;
    let keys = key_names(16);
    let ttl = TTL_MS.to_string();
    let timings = ["--lease-ttl-ms", ttl.as_str(), "--heartbeat-ms", "500"];
    let mut w1 = env.worker("w1", &timings)?;
    let _w2 = env.worker("w2", &timings)?;
    env.publish(&["--keys", "16", "--events", "3"])?;

    let mut counts = BTreeMap::new();
    let two = wait_until(
        Duration::from_secs(15),
        "w1 and w2 to own 8±2 partitions each",
        || {
            counts = env.lease_counts(&keys).unwrap_or_default();
            fair(&counts, &["w1", "w2"], 2)
        },
    );
    anyhow::ensure!(two.is_ok(), "{two:?}; last lease counts: {counts:?}");

    let _w3 = env.worker("w3", &timings)?;
    let three = wait_until(
        Duration::from_secs(15),
        "w1, w2 and w3 to own 5±2 partitions each",
        || {
            counts = env.lease_counts(&keys).unwrap_or_default();
            fair(&counts, &["w1", "w2", "w3"], 2)
        },
    );
    anyhow::ensure!(three.is_ok(), "{three:?}; last lease counts: {counts:?}");
    let w1_owned = counts["w1"];

    // Graceful leave: w1 releases its leases and leaves; the others take
    // its partitions over at once instead of waiting out the TTL.
    w1.terminate()?;
    let terminated_at = Instant::now();
    let handover = wait_until(
        Duration::from_secs(15),
        "w2 and w3 to own all 16 partitions",
        || {
            counts = env.lease_counts(&keys).unwrap_or_default();
            counts.get("w2").copied().unwrap_or(0) + counts.get("w3").copied().unwrap_or(0) == 16
        },
    );
    let took = terminated_at.elapsed();
    anyhow::ensure!(handover.is_ok(), "{handover:?}; last lease counts: {counts:?}");
    assert!(
        took < Duration::from_millis(TTL_MS / 2),
        "w1's {w1_owned} partitions took {took:?} to be taken over, with a lease TTL of {TTL_MS} ms"
    );
    let status = w1.wait_timeout(Duration::from_secs(10))?;
    assert!(
        status.is_some_and(|s| s.success()),
        "w1 did not exit cleanly on SIGTERM: {status:?}"
    );
    w1.wait_for_line(|l| l.starts_with("stopped "), Duration::from_secs(1))?;

    let rebalanced = wait_until(
        Duration::from_secs(15),
        "w2 and w3 to own 8±2 partitions each",
        || {
            counts = env.lease_counts(&keys).unwrap_or_default();
            fair(&counts, &["w2", "w3"], 2)
        },
    );
    anyhow::ensure!(
        rebalanced.is_ok(),
        "{rebalanced:?}; last lease counts: {counts:?}"
    );
    env.assert_sound(&env.wait_all_applied(Duration::from_secs(10))?);
    Ok(())
}

#[test]
fn a_worker_stopped_mid_run_finishes_it_before_handing_over() -> anyhow::Result<()> {
    let env = Env::start()?;
    let ttl = TTL_MS.to_string();
    let timings = ["--lease-ttl-ms", ttl.as_str(), "--heartbeat-ms", "500"];
    let mut workers = [env.worker("w1", &timings)?, env.worker("w2", &timings)?];
    env.publish(&["--key", "g", "--events", "1", "--work-ms", "1000"])?;
    env.publish(&["--key", "g", "--first-seq", "1", "--events", "3"])?;
    let refs: Vec<_> = workers.iter().collect();
    let (owner, _) = wait_for_any(&refs, Duration::from_secs(15), "a start of g/0", |l| {
        l.is(line::START, "g", 0)
    })?;

    // SIGTERM mid-run: the run completes and is acknowledged before the
    // lease is released, so the next owner starts at g/1.
    workers[owner].terminate()?;
    let status = workers[owner].wait_timeout(Duration::from_secs(10))?;
    assert!(
        status.is_some_and(|s| s.success()),
        "the worker did not exit cleanly: {status:?}"
    );
    let output = lines(&workers[owner]);
    let done = output.iter().position(|l| l.is(line::DONE, "g", 0));
    let stopped = output.iter().position(|l| l.kind() == line::STOPPED);
    assert!(
        done.is_some() && done < stopped,
        "g/0 did not finish before the worker stopped"
    );

    let verdict = env.wait_all_applied(Duration::from_secs(15))?;
    env.assert_sound(&verdict);
    let g = verdict.key("g");
    assert_eq!(g.applied_seqs(), [0, 1, 2, 3]);
    assert_eq!(
        g.reruns(),
        0,
        "a graceful stop made an event run twice: {:?}",
        g.starts
    );
    Ok(())
}
