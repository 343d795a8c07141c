//! Hostile stream entries, written with a raw `XADD` as a buggy producer or
//! an attacker with publisher credentials could: a field that is not text,
//! an envelope naming another key or category, an entry of a hashed
//! partition that belongs to none of its keys. Each costs its own key (the
//! stream it sits in), never the entries before it, the partition's other
//! keys or the partition as a whole, and the operator's commands work on it.

use crate::common;

use std::num::NonZeroU32;
use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::StreamsInterface;
use fred::types::Value;
use ordo_core::Partitions;
use ordo_core::contract::broker::{Broker, Publication};
use ordo_core::contract::message::Envelope;
use ordo_redis::{HaltedPartition, PartitionAdmin, PartitionId, PartitionKeys};
use ordo_testkit::{Redis, eventually};

use common::topology::TestRedis;
use common::{Recorder, Running, broker, config, envelope, pool, publish_seqs, subscribe};

/// Not UTF-8: a lone continuation byte, an invalid lead byte, then text.
const NOT_TEXT: &[u8] = b"\x80\xff{\"id\":\"x\"}";

/// Appends an entry with `fields` (values as given: text or bytes) to
/// `stream`, as a raw `XADD` does; its id.
async fn xadd(client: &Pool, stream: &str, fields: Vec<(&str, Value)>) -> anyhow::Result<String> {
    let id: String = client.xadd(stream, false, None::<()>, "*", fields).await?;
    Ok(id)
}

fn text(value: &str) -> Value {
    Value::from(value)
}

fn bytes(value: &[u8]) -> Value {
    Value::Bytes(value.to_vec().into())
}

fn json(envelope: &Envelope) -> Value {
    Value::from(serde_json::to_string(envelope).expect("an envelope is JSON"))
}

async fn halted_on(admin: &PartitionAdmin, key: &str) -> anyhow::Result<Option<HaltedPartition>> {
    Ok(admin.halted().await?.into_iter().find(|h| h.key == key))
}

/// Waits until `key` is halted (or parked) on an entry other than `not`.
async fn wait_halted(
    admin: &PartitionAdmin,
    key: &str,
    not: Option<&str>,
) -> anyhow::Result<HaltedPartition> {
    eventually(Duration::from_secs(15), &format!("{key} to halt"), || async {
        Ok(halted_on(admin, key)
            .await?
            .is_some_and(|h| Some(h.head.as_str()) != not))
    })
    .await?;
    Ok(halted_on(admin, key).await?.expect("halted"))
}

/// The raw entries of `stream`, as Redis holds them.
async fn raw_entries(client: &Pool, stream: &str) -> anyhow::Result<Vec<Value>> {
    let entries: Value = client.xrange(stream, "-", "+", None).await?;
    Ok(if entries.is_null() {
        Vec::new()
    } else {
        entries.into_array()
    })
}

/// The value of `field` in a raw `XRANGE` entry.
fn field(entry: &Value, field: &str) -> Option<Value> {
    let parts = entry.clone().into_array();
    let flat = parts.get(1)?.clone().into_array();
    flat.chunks(2)
        .find(|pair| pair[0].as_str().as_deref() == Some(field))
        .map(|pair| pair[1].clone())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    an_entry_with_a_field_that_is_not_text_halts_its_own_key_after_the_entries_before_it
);

/// The entries before it in the same read batch are handled, the key halts
/// on it (one attempt: it can never be read), other keys flow, and
/// inspect and dead-letter work on it, keeping its bytes as they were.
async fn an_entry_with_a_field_that_is_not_text_halts_its_own_key_after_the_entries_before_it(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("bytes");
    let recorder = Recorder::new();
    let a = broker(&url, config(3_000, 3_600_000, 2)).await?;
    let client = pool(&url).await?;
    publish_seqs(&a, &category, "bad", 0..2).await?;
    publish_seqs(&a, &category, "good", 0..3).await?;
    let poison = xadd(
        &client,
        &common::stream(&category, "bad"),
        vec![("type", text("Happened")), ("envelope", bytes(NOT_TEXT))],
    )
    .await?;
    publish_seqs(&a, &category, "bad", 2..4).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);

    let admin = a.admin();
    let halt = wait_halted(&admin, "bad", None).await?;
    recorder.wait_seqs("good", &[0, 1, 2]).await?;
    recorder.wait_seqs("bad", &[0, 1]).await?;
    assert_eq!(halt.head, poison);
    assert_eq!(halt.attempts, 1, "an entry that cannot be read is not retried");
    assert!(
        halt.error.contains(&poison) && halt.error.contains("`envelope`") && halt.error.contains("UTF-8"),
        "{}",
        halt.error
    );

    let inspection = admin.inspect("P", &category, "bad").await?;
    let head = inspection.head.expect("the head is in the stream");
    assert_eq!(head.id(), poison);
    assert!(head.decode().is_err());

    admin.dead_letter("P", &category, "bad").await?;
    recorder.wait_seqs("bad", &[0, 1, 2, 3]).await?;
    let letters = raw_entries(&client, &common::partition(&category, "bad").dlq()).await?;
    assert_eq!(letters.len(), 1);
    let kept = field(&letters[0], "envelope").expect("the dead letter keeps the envelope field");
    assert_eq!(kept.as_bytes(), Some(NOT_TEXT), "the bytes are kept as they were");
    let listed = ordo_redis::ClusterStatus::new(client.clone(), "backfill")
        .dead_letters(&category, "bad")
        .await?;
    assert_eq!(listed.len(), 1, "the dead letter can be listed");
    assert!(listed[0].message.decode().is_err());
    run.stop().await?;
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    an_entry_whose_envelope_names_another_key_or_category_halts_the_stream_it_sits_in
);

/// An envelope naming key `bob` in `alice`'s stream (or another category)
/// is never run: not under alice's lease and order, not as bob's message.
async fn an_entry_whose_envelope_names_another_key_or_category_halts_the_stream_it_sits_in(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("forged");
    let recorder = Recorder::new();
    let a = broker(&url, config(3_000, 3_600_000, 2)).await?;
    let client = pool(&url).await?;
    let alice = common::stream(&category, "alice");
    publish_seqs(&a, &category, "alice", 0..1).await?;
    publish_seqs(&a, &category, "bob", 0..1).await?;
    let to_bob = xadd(
        &client,
        &alice,
        vec![
            ("type", text("Happened")),
            (
                "envelope",
                json(&envelope(&category, "Happened", Some("bob"), 99)),
            ),
        ],
    )
    .await?;
    let other_category = xadd(
        &client,
        &alice,
        vec![
            ("type", text("Happened")),
            (
                "envelope",
                json(&envelope("other", "Happened", Some("alice"), 98)),
            ),
        ],
    )
    .await?;
    publish_seqs(&a, &category, "alice", 1..2).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);

    let admin = a.admin();
    let halt = wait_halted(&admin, "alice", None).await?;
    assert_eq!(halt.head, to_bob);
    assert!(
        halt.error.contains("bob") && halt.error.contains(&to_bob),
        "{}",
        halt.error
    );
    admin.skip("P", &category, "alice").await?;
    let halt = wait_halted(&admin, "alice", Some(&to_bob)).await?;
    assert_eq!(halt.head, other_category);
    assert!(halt.error.contains("other"), "{}", halt.error);
    admin.skip("P", &category, "alice").await?;
    recorder.wait_seqs("alice", &[0, 1]).await?;
    recorder.wait_seqs("bob", &[0]).await?;
    assert_eq!(recorder.attempts("bob", 99), None, "the forged entry never ran");
    assert_eq!(
        recorder.attempts("alice", 98),
        None,
        "the foreign category's entry never ran"
    );
    run.stop().await?;
    Ok(())
}

/// The test config with `category` in one hashed partition.
fn one_hashed_partition(category: &str) -> ordo_core::Config {
    config(3_000, 3_600_000, 2).with_partitions(category, Partitions::Hashed(NonZeroU32::new(1).unwrap()))
}

crate::on_both_topologies!(
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    in_a_hashed_partition_a_bad_entry_parks_its_key_and_one_of_no_key_is_dead_lettered
);

/// One hashed partition holds keys `a`, `b` and `c`. An entry of `a` whose
/// envelope is not text parks `a`; an entry of `b` whose envelope names
/// another key parks `b`; an entry without a key, and one whose key is not
/// text, belong to none of the partition's keys and go to the partition's
/// dead-letter stream at once. `c` flows throughout.
async fn in_a_hashed_partition_a_bad_entry_parks_its_key_and_one_of_no_key_is_dead_lettered(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("hashedbad");
    let recorder = Recorder::new();
    let a = broker(&url, one_hashed_partition(&category)).await?;
    let client = pool(&url).await?;
    let bucket = PartitionKeys::of(PartitionId::hashed(&category, 0), "backfill");
    for key in ["a", "b"] {
        publish_seqs(&a, &category, key, 0..2).await?;
    }
    let bad_a = xadd(
        &client,
        bucket.primary(),
        vec![
            ("type", text("Happened")),
            ("key", text("a")),
            ("envelope", bytes(NOT_TEXT)),
        ],
    )
    .await?;
    let forged_b = xadd(
        &client,
        bucket.primary(),
        vec![
            ("type", text("Happened")),
            ("key", text("b")),
            ("envelope", json(&envelope(&category, "Happened", Some("c"), 99))),
        ],
    )
    .await?;
    let keyless = xadd(
        &client,
        bucket.primary(),
        vec![("type", text("Happened")), ("envelope", bytes(NOT_TEXT))],
    )
    .await?;
    let key_not_text = xadd(
        &client,
        bucket.primary(),
        vec![
            ("type", text("Happened")),
            ("key", bytes(b"\xff")),
            ("envelope", json(&envelope(&category, "Happened", Some("c"), 98))),
        ],
    )
    .await?;
    for key in ["a", "b"] {
        publish_seqs(&a, &category, key, 2..3).await?;
    }
    publish_seqs(&a, &category, "c", 0..3).await?;
    let run = Running::start(&a, vec![subscribe::partitioned("P", &category, &recorder)]);

    let admin = a.admin();
    recorder.wait_seqs("c", &[0, 1, 2]).await?;
    let parked_a = wait_halted(&admin, "a", None).await?;
    let parked_b = wait_halted(&admin, "b", None).await?;
    assert!(parked_a.parked && parked_b.parked);
    assert!(
        parked_a.error.contains(&bad_a) && parked_a.error.contains("UTF-8"),
        "{}",
        parked_a.error
    );
    assert!(
        parked_b.error.contains(&forged_b) && parked_b.error.contains("`c`"),
        "{}",
        parked_b.error
    );
    assert_eq!(recorder.seqs("a"), [0, 1]);
    assert_eq!(recorder.seqs("b"), [0, 1]);
    assert_eq!(recorder.attempts("c", 99), None, "the forged entry never ran");
    assert_eq!(
        recorder.attempts("c", 98),
        None,
        "the entry whose key is not text never ran"
    );
    let halted = admin.halted().await?;
    assert_eq!(halted.len(), 2, "only a and b are parked: {halted:?}");

    // The entries of no key are in the partition's dead-letter stream.
    eventually(
        Duration::from_secs(10),
        "the keyless entries dead-lettered",
        || async { Ok(raw_entries(&client, &bucket.dlq()).await?.len() == 2) },
    )
    .await?;
    let letters = raw_entries(&client, &bucket.dlq()).await?;
    let sources: Vec<String> = letters
        .iter()
        .filter_map(|letter| field(letter, "source_id").and_then(|id| id.as_str().map(|s| s.into_owned())))
        .collect();
    assert_eq!(sources, [keyless.clone(), key_not_text.clone()]);
    assert_eq!(
        field(&letters[1], "key").and_then(|key| key.as_bytes().map(<[u8]>::to_vec)),
        Some(b"\xff".to_vec()),
        "the letter keeps the entry's fields as they were"
    );

    // Each parked key is resolved on its own.
    admin.skip("P", &category, "a").await?;
    recorder.wait_seqs("a", &[0, 1, 2]).await?;
    admin.dead_letter("P", &category, "b").await?;
    recorder.wait_seqs("b", &[0, 1, 2]).await?;
    assert!(admin.halted().await?.is_empty());
    run.stop().await?;
    Ok(())
}

/// A plain consumer dead-letters an entry it cannot read (or one of
/// another category) and goes on with the rest of its batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_consumer_dead_letters_an_entry_it_cannot_read_and_goes_on() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let url = redis.url();
    let category = common::category("plainbad");
    let recorder = Recorder::new();
    let a = broker(&url, config(3_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let base = |seq| Publication::to_base(envelope(&category, "Happened", None, seq));
    a.publish(&[base(0), base(1)]).await?;
    let unreadable = xadd(
        &client,
        &category,
        vec![("type", text("Happened")), ("envelope", bytes(NOT_TEXT))],
    )
    .await?;
    let elsewhere = xadd(
        &client,
        &category,
        vec![
            ("type", text("Happened")),
            ("envelope", json(&envelope("other", "Happened", None, 99))),
        ],
    )
    .await?;
    a.publish(&[base(2)]).await?;
    let run = Running::start(&a, vec![subscribe::plain("Plain", &category, &recorder)]);
    recorder.wait_seqs("", &[0, 1, 2]).await?;
    let dlq = ordo_redis::plain_dlq(&category);
    eventually(Duration::from_secs(10), "both dead-lettered", || async {
        Ok(raw_entries(&client, &dlq).await?.len() == 2)
    })
    .await?;
    let letters = raw_entries(&client, &dlq).await?;
    let sources: Vec<String> = letters
        .iter()
        .filter_map(|letter| field(letter, "source_id").and_then(|id| id.as_str().map(|s| s.into_owned())))
        .collect();
    assert_eq!(sources, [unreadable, elsewhere]);
    assert_eq!(
        field(&letters[0], "envelope").and_then(|e| e.as_bytes().map(<[u8]>::to_vec)),
        Some(NOT_TEXT.to_vec())
    );
    assert_eq!(recorder.attempts("", 99), None);
    run.stop().await?;
    Ok(())
}
