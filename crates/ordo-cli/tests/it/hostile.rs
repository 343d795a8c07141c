//! What a bad message can do to the operator's terminal and tools: a halt's
//! error text and an entry's type holding escape sequences print escaped
//! in every text output (JSON keeps them, escaped as JSON); an error of a
//! megabyte (a record written before errors were capped) prints capped; a
//! dead-letter stream of 200,000 letters lists a page at a time; a parked
//! key's dead letters in a hashed partition's stream are found by key.

use crate::common;

use std::time::{Duration, Instant};

use fred::interfaces::{HashesInterface, StreamsInterface};
use fred::types::Value;
use ordo_core::contract::broker::Broker;
use ordo_redis::{PartitionId, PartitionKeys};
use ordo_testkit::{Redis, eventually};

use common::{CATEGORY, Fixture, Output, PROJECTOR, WAIT, ordo_on};

/// An OSC 52 clipboard write, a screen clear, a carriage return that lets
/// the next text overwrite the line, a newline, a bidi override.
const HOSTILE: &str = "\x1b]52;c;SGVsbG8=\x07\x1b[2J\rforged\nline\u{202e}txet";

/// Fails when `output` of `what` holds a character that acts on a terminal.
fn assert_inert(what: &str, output: &Output) {
    for text in [&output.stdout, &output.stderr] {
        assert!(
            !text.contains(['\x1b', '\x07', '\r', '\u{202e}', '\u{9b}']),
            "{what} prints a raw control character:\n{text:?}"
        );
    }
}

async fn client(url: &str) -> anyhow::Result<fred::clients::Pool> {
    use fred::prelude::{Builder, ClientLike};
    let pool = Builder::from_config(ordo_redis::client_config(url)?).build_pool(1)?;
    pool.init().await?;
    Ok(pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_text_and_entry_types_with_escape_sequences_print_escaped() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let redis = client(&fixture.redis.url()).await?;
    // Bob's halt, as a handler whose error quotes hostile input records it.
    let bob = PartitionKeys::new(CATEGORY, "bob", "backfill");
    let _: () = redis.hset(bob.halt(PROJECTOR), ("error", HOSTILE)).await?;
    // An entry of carol's with a hostile type and no readable envelope.
    let carol = PartitionKeys::new(CATEGORY, "carol", "backfill");
    let _: String = redis
        .xadd(
            carol.primary(),
            false,
            None::<()>,
            "*",
            vec![("type", HOSTILE), ("envelope", HOSTILE)],
        )
        .await?;
    // A raw XADD rings no doorbell: a publish wakes carol's worker.
    fixture
        .broker
        .publish(&[common::noted(CATEGORY, "carol", 1)])
        .await?;
    eventually(WAIT, "carol to halt on it", || async {
        Ok(fixture.halted().await?.iter().any(|h| h.key == "carol"))
    })
    .await?;

    for args in [
        vec!["status"],
        vec!["partitions", CATEGORY],
        vec!["partitions", CATEGORY, "--halted"],
        vec!["inspect", CATEGORY, "bob"],
        vec!["inspect", CATEGORY, "carol"],
    ] {
        let output = fixture.ordo(&args).await?.expect_code(0)?;
        assert_inert(&args.join(" "), &output);
    }
    let inspected = fixture.ordo(&["inspect", CATEGORY, "bob"]).await?;
    inspected.expect_stdout("\\u{1b}]52;c;SGVsbG8=\\u{7}\\u{1b}[2J\\rforged\\nline\\u{202e}txet")?;
    let inspected = fixture.ordo(&["inspect", CATEGORY, "carol"]).await?;
    inspected.expect_stdout("type       \\u{1b}]52")?;

    // JSON keeps the text as it is (escaped the JSON way).
    let json = fixture.ordo(&["status", "--json"]).await?.expect_code(0)?;
    assert_inert("status --json", &json);
    let halts = json.json()?["halted"].clone();
    let bob_halt = halts
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["key"] == "bob")
        .unwrap()
        .clone();
    assert_eq!(bob_halt["error"], HOSTILE);

    // Dead letters: the error and the type, listed and inspected.
    for key in ["bob", "carol"] {
        fixture
            .ordo(&["dlq", CATEGORY, key, "--yes"])
            .await?
            .expect_code(0)?;
    }
    let listed = fixture.ordo(&["dlq", "list", CATEGORY]).await?.expect_code(0)?;
    assert_inert("dlq list", &listed);
    listed.expect_stdout("\\u{1b}]52")?;
    let letters = fixture
        .ordo(&["dlq", "list", CATEGORY, "carol", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    let id = letters[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(letters[0]["message"]["type"], HOSTILE);
    let inspected = fixture
        .ordo(&["dlq", "inspect", CATEGORY, "carol", "--id", &id])
        .await?
        .expect_code(0)?;
    assert_inert("dlq inspect", &inspected);
    inspected.expect_stdout("type:      \\u{1b}]52")?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_of_a_megabyte_is_printed_capped() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let redis = client(&fixture.redis.url()).await?;
    // A halt record written before errors were capped.
    let huge = format!("poison: {}", "x".repeat(1 << 20));
    let bob = PartitionKeys::new(CATEGORY, "bob", "backfill");
    let _: () = redis.hset(bob.halt(PROJECTOR), ("error", huge.as_str())).await?;
    for args in [
        vec!["status", "--json"],
        vec!["inspect", CATEGORY, "bob", "--json"],
    ] {
        let output = fixture.ordo(&args).await?.expect_code(0)?;
        assert!(
            output.stdout.len() < 64 * 1024,
            "`ordo {}` printed {} bytes",
            args.join(" "),
            output.stdout.len()
        );
        output.expect_stdout("bytes cut]")?;
    }
    fixture.stop().await
}

/// 200,000 dead letters: `dlq list` shows a page (100 by default, or
/// `--limit`), says how to get the next one (`--after`), and never reads
/// the whole stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_stream_of_200_000_letters_is_listed_a_page_at_a_time() -> anyhow::Result<()> {
    const LETTERS: usize = 200_000;
    let redis = Redis::start()?;
    let url = redis.url();
    let dir = tempfile::tempdir()?;
    let pool = client(&url).await?;
    let dlq = PartitionKeys::new(CATEGORY, "bob", "backfill").dlq();
    let envelope = serde_json::to_string(&common::noted(CATEGORY, "bob", 1).envelope)?;
    let mut ids = Vec::with_capacity(LETTERS);
    for chunk in 0..LETTERS / 10_000 {
        let pipeline = pool.next().pipeline();
        for i in 0..10_000 {
            let fields: Vec<(&str, Value)> = vec![
                ("source_id", Value::from(format!("1-{}", chunk * 10_000 + i))),
                ("group", Value::from(PROJECTOR)),
                ("lane", Value::from("primary")),
                ("attempts", Value::from(2)),
                ("error", Value::from("poison")),
                ("type", Value::from("Noted")),
                ("envelope", Value::from(envelope.as_str())),
            ];
            let _: () = pipeline
                .xadd(dlq.as_str(), false, None::<()>, "*", fields)
                .await?;
        }
        for id in pipeline.all::<Vec<String>>().await? {
            ids.push(id);
        }
    }
    assert_eq!(ids.len(), LETTERS);

    let started = Instant::now();
    let page = ordo_on(&url, dir.path(), &["dlq", "list", CATEGORY, "bob"])
        .await?
        .expect_code(0)?;
    let took = started.elapsed();
    let rows: Vec<&str> = page.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 100, "the default page");
    assert!(rows[0].contains(&ids[0]) && rows[99].contains(&ids[99]));
    page.expect_stderr(&format!("--after {}", ids[99]))?;
    assert!(took < Duration::from_secs(10), "listing one page took {took:?}");

    let next = ordo_on(
        &url,
        dir.path(),
        &[
            "dlq", "list", CATEGORY, "bob", "--after", &ids[99], "--limit", "3", "--json",
        ],
    )
    .await?
    .expect_code(0)?
    .json()?;
    let listed: Vec<&str> = next
        .as_array()
        .unwrap()
        .iter()
        .map(|letter| letter["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [&ids[100], &ids[101], &ids[102]]);

    // Every key of the category: the same bound.
    let all = ordo_on(&url, dir.path(), &["dlq", "list", CATEGORY, "--limit", "5"])
        .await?
        .expect_code(0)?;
    assert_eq!(all.stdout.lines().skip(1).count(), 5);
    // The last page says nothing more follows.
    let last = ordo_on(
        &url,
        dir.path(),
        &["dlq", "list", CATEGORY, "bob", "--after", &ids[LETTERS - 2]],
    )
    .await?
    .expect_code(0)?;
    assert_eq!(last.stdout.lines().skip(1).count(), 1);
    assert!(!last.stderr.contains("--after"), "{}", last.stderr);
    Ok(())
}

/// In a hashed partition a parked key's dead letter is in the partition's
/// dead-letter stream: `dlq list CATEGORY KEY`, `dlq inspect` and `dlq
/// replay` find it there by the letter's key (and only that key's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_keys_dead_letter_is_found_by_key_in_its_hashed_partition() -> anyhow::Result<()> {
    let fixture = Fixture::start_hashed(4).await?;
    let moved = fixture
        .ordo(&["dlq", CATEGORY, "bob", "--yes"])
        .await?
        .expect_code(0)?;
    let bucket = PartitionKeys::of(
        PartitionId::hashed(
            CATEGORY,
            ordo_core::contract::key::hashed_partition(
                "bob",
                std::num::NonZeroU32::new(4).expect("not zero"),
            ),
        ),
        "backfill",
    );
    moved.expect_stdout(&bucket.dlq())?;
    // Another key's letter in the same stream is not bob's.
    let redis = client(&fixture.redis.url()).await?;
    let _: String = redis
        .xadd(
            bucket.dlq(),
            false,
            None::<()>,
            "*",
            vec![
                ("source_id", "9-9"),
                ("group", PROJECTOR),
                ("lane", "primary"),
                ("attempts", "1"),
                ("error", "another key's"),
                ("key", "zed"),
            ],
        )
        .await?;

    let letters = fixture
        .ordo(&["dlq", "list", CATEGORY, "bob", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    let letters = letters.as_array().expect("a list");
    assert_eq!(letters.len(), 1, "{letters:#?}");
    assert_eq!(letters[0]["key"], "bob");
    assert_eq!(letters[0]["message"]["envelope"]["payload"]["order_id"], "b-1");
    let id = letters[0]["id"].as_str().unwrap().to_owned();
    let all = fixture.ordo(&["dlq", "list", CATEGORY]).await?.expect_code(0)?;
    assert!(
        all.stdout
            .lines()
            .any(|row| row.starts_with("bob ") && row.contains(&id)),
        "{}",
        all.stdout
    );
    assert!(
        all.stdout.lines().any(|row| row.starts_with("zed ")),
        "{}",
        all.stdout
    );
    fixture
        .ordo(&["dlq", "inspect", CATEGORY, "bob", "--id", &id])
        .await?
        .expect_code(0)?
        .expect_stdout("poison order b-1")?;

    fixture.cure();
    let replayed = fixture
        .ordo(&["dlq", "replay", CATEGORY, "bob", "--yes", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(replayed["replayed"].as_array().map(Vec::len), Some(1));
    eventually(WAIT, "the replayed order", || async {
        Ok(fixture.handled_of("bob").len() == 3)
    })
    .await?;
    assert_eq!(fixture.handled_of("bob"), ["b-2", "b-3", "b-1"]);
    let left: Value = redis.xrange(bucket.dlq(), "-", "+", None).await?;
    assert_eq!(left.into_array().len(), 1, "only zed's letter is left");
    fixture.stop().await
}
