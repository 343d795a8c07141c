//! A poison event halts its partition, with the halt recorded in Redis,
//! while other keys keep flowing. The halt survives the death of the owner:
//! the next owner does not run the head again. Then each operator action
//! does what it says: `retry` runs the head again, `skip` moves on to the
//! next event, `dead_letter` copies the head to the partition's DLQ stream
//! and moves on.

use crate::support;

use std::collections::HashMap;
use std::time::Duration;

use fred::interfaces::StreamsInterface;
use ordo_harness::keys;
use ordo_harness::tick::{CATEGORY, GROUP, Tick};
use ordo_testkit::wait_until;
use support::{Env, holds_for};

const MAX_RETRIES: u64 = 1;

#[test]
fn a_poison_event_halts_its_key_across_failover_until_an_operator_decides() -> anyhow::Result<()> {
    let env = Env::start()?;
    let admin = env.admin();
    let flags = [
        "--lease-ttl-ms",
        "1500",
        "--heartbeat-ms",
        "300",
        "--max-retries",
        "1",
    ];
    let mut workers = [env.worker("w1", &flags)?, env.worker("w2", &flags)?];
    // Key `p`: 0 poison, 1 fine, 2 poison, 3 fine.
    env.publish(&["--key", "p", "--events", "1", "--poison"])?;
    env.publish(&["--key", "p", "--first-seq", "1", "--events", "1"])?;
    env.publish(&["--key", "p", "--first-seq", "2", "--events", "1", "--poison"])?;
    env.publish(&["--key", "p", "--first-seq", "3", "--events", "1"])?;
    env.publish(&["--keys", "6", "--events", "10", "--work-ms", "5"])?;

    // It halts after its retries, and the other keys keep flowing.
    let attempts = MAX_RETRIES + 1;
    wait_until(Duration::from_secs(15), "p to halt", || {
        env.halt_of("p").is_ok_and(|h| h.is_some())
    })?;
    let halt = env.halt_of("p")?.expect("halted");
    assert_eq!(u64::from(halt.attempts), attempts);
    assert!(halt.error.contains("poison"), "halt error: {}", halt.error);
    let others = key_names_flowing(&env)?;
    assert_eq!(others, 6, "the other keys did not all drain while p was halted");
    let p = env.verify()?.key("p");
    assert!(
        p.applied.is_empty(),
        "nothing of p may pass its halted head: {:?}",
        p.applied
    );
    assert_eq!(p.starts_of(0), attempts);
    assert_eq!(p.starts_of(1), 0);
    let inspection = env.block_on(admin.inspect(GROUP, CATEGORY, "p"))?;
    let head: Tick = inspection
        .head
        .expect("the head is still in the stream")
        .decode()?
        .decode()?;
    assert_eq!((head.seq, head.poison), (0, true));

    // Kill the owner: the halt stays recorded and the next owner does not
    // run the head again.
    let (owner, old_token) = env.lease_holder("p")?.expect("a halted partition stays owned");
    let index = if owner == "w1" { 0 } else { 1 };
    workers[index].kill()?;
    let survivor = if index == 0 { "w2" } else { "w1" };
    wait_until(Duration::from_secs(15), "the survivor to take p over", || {
        env.lease_holder("p")
            .is_ok_and(|h| h.is_some_and(|(i, t)| i == survivor && t > old_token))
    })?;
    holds_for(
        Duration::from_secs(1),
        "p halted on its head, not run again",
        || {
            let halted = env
                .halt_of("p")
                .is_ok_and(|h| h.is_some_and(|h| h.head == halt.head));
            halted && env.verify().is_ok_and(|v| v.key("p").starts_of(0) == attempts)
        },
    )?;

    // retry: the head runs again (and, still poison, halts again).
    assert_eq!(env.block_on(admin.retry(GROUP, CATEGORY, "p"))?, halt.head);
    wait_until(Duration::from_secs(10), "the retried head to halt again", || {
        let halted_again = env
            .halt_of("p")
            .is_ok_and(|h| h.is_some_and(|h| h.halted_at_ms > halt.halted_at_ms));
        halted_again
            && env
                .verify()
                .is_ok_and(|v| v.key("p").starts_of(0) == 2 * attempts)
    })?;
    let halt = env.halt_of("p")?.expect("halted again");
    assert_eq!(halt.owner, survivor);

    // skip: the head is acknowledged unhandled; seq 1 is applied, then the
    // next poison event (seq 2) halts the partition.
    assert_eq!(env.block_on(admin.skip(GROUP, CATEGORY, "p"))?, halt.head);
    wait_until(
        Duration::from_secs(10),
        "p to halt on seq 2 after applying seq 1",
        || {
            let on_next = env
                .halt_of("p")
                .is_ok_and(|h| h.is_some_and(|h| h.head != halt.head));
            on_next && env.verify().is_ok_and(|v| v.key("p").applied_seqs() == [1])
        },
    )?;
    let second = env.halt_of("p")?.expect("halted on seq 2");

    // dead_letter: the head goes to `chaos:p:dlq` and seq 3 is applied.
    assert_eq!(
        env.block_on(admin.dead_letter(GROUP, CATEGORY, "p"))?,
        second.head
    );
    wait_until(Duration::from_secs(10), "seq 3 to be applied", || {
        env.verify().is_ok_and(|v| v.key("p").applied_seqs() == [1, 3])
    })?;
    assert!(env.halt_of("p")?.is_none(), "p is still halted after dead_letter");
    let dlq: Vec<(String, HashMap<String, String>)> =
        env.block_on(env.client().xrange(keys::dlq("p"), "-", "+", None))?;
    assert_eq!(dlq.len(), 1, "one dead letter expected: {dlq:?}");
    let letter = &dlq[0].1;
    assert_eq!(letter.get("source_id"), Some(&second.head));
    let envelope: ordo_core::contract::message::Envelope = serde_json::from_str(
        letter
            .get("envelope")
            .expect("the dead letter keeps the envelope"),
    )?;
    let dead: Tick = envelope.decode()?;
    assert_eq!((dead.seq, dead.poison), (2, true));

    let verdict = env.verify()?;
    assert_eq!(
        verdict.key("p").lost,
        [0, 2],
        "only the skipped and dead-lettered events are unapplied"
    );
    assert_eq!(verdict.lost, 2);
    assert_eq!(
        (
            verdict.order_violations,
            verdict.overlaps,
            verdict.token_regressions
        ),
        (0, 0, 0)
    );
    Ok(())
}

/// How many of `k0`..`k5` have all their events applied, waiting for all six.
fn key_names_flowing(env: &Env) -> anyhow::Result<usize> {
    let mut drained = 0;
    let _ = wait_until(Duration::from_secs(15), "k0..k5 to drain", || {
        drained = env.verify().map_or(0, |v| {
            (0..6)
                .filter(|i| v.key(&format!("k{i}")).applied_seqs() == (0..10).collect::<Vec<_>>())
                .count()
        });
        drained == 6
    });
    Ok(drained)
}
