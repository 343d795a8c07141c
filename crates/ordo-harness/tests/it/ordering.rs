//! Three worker processes share 16 keys while partitions move between
//! them: every key's effects land in publish order, and no two runs of one
//! key are ever in flight at once (checked by the in-handler detector).

use crate::support;

use std::time::Duration;

use support::{Env, key_names, lines};

#[test]
fn three_workers_keep_each_key_in_order_without_overlap() -> anyhow::Result<()> {
    let env = Env::start()?;
    let keys = key_names(16);
    let w1 = env.worker("w1", &[])?;
    // The first half is published while w1 is alone (it takes every
    // partition); w2 and w3 join while it flows, so w1 hands partitions
    // over mid-stream.
    env.publish(&["--keys", "16", "--events", "25", "--work-ms", "100"])?;
    ordo_testkit::wait_until(Duration::from_secs(10), "w1 to own every partition", || {
        env.lease_counts(&keys)
            .is_ok_and(|counts| counts.get("w1") == Some(&16))
    })?;
    let w2 = env.worker("w2", &[])?;
    let w3 = env.worker("w3", &[])?;
    let workers = [&w1, &w2, &w3];
    ordo_testkit::wait_until(Duration::from_secs(20), "every worker to own a partition", || {
        env.lease_counts(&keys)
            .is_ok_and(|counts| ["w1", "w2", "w3"].iter().all(|w| counts.contains_key(*w)))
    })?;
    env.publish(&[
        "--keys",
        "16",
        "--events",
        "25",
        "--first-seq",
        "25",
        "--work-ms",
        "10",
    ])?;

    let verdict = env.wait_all_applied(Duration::from_secs(60))?;
    assert_eq!(verdict.events, 16 * 50);
    env.assert_sound(&verdict);
    assert_eq!(
        verdict.duplicates, 0,
        "no failover happened, so nothing may run twice:\n{verdict}"
    );
    for (index, worker) in workers.iter().enumerate() {
        let done = lines(worker).iter().filter(|l| l.kind() == "done").count();
        assert!(done > 0, "worker w{} handled nothing", index + 1);
    }
    let overlap_lines = workers
        .iter()
        .flat_map(|w| lines(w))
        .filter(|l| l.kind() == "start" && l.get("overlap") != Some("0"))
        .count();
    assert_eq!(overlap_lines, 0);
    let handed_over = verdict
        .per_key
        .values()
        .filter(|r| r.applied.windows(2).any(|w| w[0].token != w[1].token))
        .count();
    assert!(
        handed_over > 0,
        "no key changed owner mid-stream: the test proved less than it says"
    );
    Ok(())
}
