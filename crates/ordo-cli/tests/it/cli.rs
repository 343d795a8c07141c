//! The `ordo` binary against a real Redis holding real partitions (made by a
//! `RedisBroker` domain running in this process), including a halted one:
//! its output, text and JSON, and its exit codes.

use crate::common;

use common::{AUDITOR, CATEGORY, Fixture, PROJECTOR, WAIT, noted, ordo_in};
use ordo_testkit::eventually;

/// The halted head's entry id, as `inspect --json` reports it.
async fn halted_head(fixture: &Fixture, extra: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["inspect", CATEGORY, "bob", "--json"];
    args.extend_from_slice(extra);
    let inspected = fixture.ordo(&args).await?.expect_code(0)?.json()?;
    Ok(inspected["halt"]["head"]
        .as_str()
        .expect("a halted head")
        .to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_partitions_owners_and_the_halted_key() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;

    let text = fixture.ordo(&["status"]).await?.expect_code(0)?.stdout;
    let row = text
        .lines()
        .find(|line| line.starts_with(CATEGORY))
        .expect("a row for the category");
    // CATEGORY PARTITIONS GROUP INSTANCES OWNED LAG PENDING HALTED
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..5], &[CATEGORY, "3", PROJECTOR, "1", "3"], "{text}");
    assert_eq!(cells[7], "1", "one halted partition: {text}");
    assert!(text.contains("halted partitions: 1"), "{text}");
    assert!(text.contains("poison order b-1"), "{text}");

    let json = fixture
        .ordo(&["status", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    let category = &json["categories"][0];
    assert_eq!(category["category"], CATEGORY);
    assert_eq!(category["partitions"], 3);
    let group = &category["groups"][0];
    assert_eq!(group["group"], PROJECTOR);
    assert_eq!(group["halted"], 1);
    // bob's three orders wait behind (or are) the halted head; the rest are handled.
    let backlog = group["lag"].as_u64().unwrap() + group["pending"].as_u64().unwrap();
    assert_eq!(backlog, 3, "{json:#}");
    assert!(
        group["pending"].as_u64().unwrap() >= 1,
        "the halted head is pending: {json:#}"
    );
    let instances = group["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 1);
    assert_eq!(instances[0]["instance"], fixture.broker.instance_id());
    assert_eq!(instances[0]["owns"], 3);
    assert_eq!(instances[0]["live"], true);
    assert_eq!(json["halted"][0]["key"], "bob");
    assert_eq!(json["warnings"].as_array().unwrap().len(), 0);

    // Scripts: --check says "halted partitions exist".
    fixture.ordo(&["status", "--check"]).await?.expect_code(4)?;
    // A threshold below the partition count warns (halts still win --check).
    let warned = fixture
        .ordo(&["status", "--warn-partitions", "2"])
        .await?
        .expect_code(0)?;
    warned.expect_stdout("warning: category `order` has 3 live partitions")?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_lists_each_key_sorted_with_owner_and_halt() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;

    let text = fixture
        .ordo(&["partitions", CATEGORY])
        .await?
        .expect_code(0)?
        .stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("KEY"), "{text}");
    let keys: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(keys, ["alice", "bob", "carol"], "{text}");
    assert!(lines[2].contains("HALTED at"), "{text}");
    assert!(lines[1].ends_with("no"), "alice is not halted: {text}");
    assert!(
        lines[1].contains(fixture.broker.instance_id()),
        "alice's owner: {text}"
    );

    let halted = fixture
        .ordo(&["partitions", CATEGORY, "--halted"])
        .await?
        .expect_code(0)?
        .stdout;
    assert_eq!(halted.lines().count(), 2, "a header and bob: {halted}");
    assert!(halted.lines().nth(1).unwrap().starts_with("bob"), "{halted}");

    let rows = fixture
        .ordo(&["partitions", CATEGORY, "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    for row in rows {
        assert_eq!(row["group"], PROJECTOR);
        assert_eq!(row["owner"], fixture.broker.instance_id());
        assert!(row["generation"].as_u64().unwrap() > 0);
        assert_eq!(row["lanes"], serde_json::json!(["primary"]));
        assert!(row["idle_ms"].is_u64());
    }
    assert!(rows[0]["halt"].is_null());
    assert_eq!(rows[1]["halt"]["key"], "bob");
    assert!(
        rows[1]["halt"]["error"]
            .as_str()
            .unwrap()
            .contains("poison order b-1")
    );
    assert_eq!(
        rows[0]["lag"].as_u64().unwrap() + rows[0]["pending"].as_u64().unwrap(),
        0
    );

    // An unknown category is a usage error that lists the known ones.
    let unknown = fixture.ordo(&["partitions", "ordr"]).await?.expect_code(2)?;
    unknown.expect_stderr("unknown category `ordr`")?;
    unknown.expect_stderr("known categories: order")?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_the_head_its_attempts_and_the_halt_record() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let halt = fixture.halted().await?.remove(0);

    let json = fixture
        .ordo(&["inspect", CATEGORY, "bob", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(json["halted"], true);
    assert_eq!(json["group"], PROJECTOR);
    assert_eq!(json["halt"]["head"], halt.head.as_str());
    assert_eq!(json["halt"]["attempts"], halt.attempts);
    assert!(halt.attempts >= 2, "max_retries = 1: two attempts");
    assert_eq!(json["head"]["id"], halt.head.as_str());
    assert_eq!(json["head"]["type"], "OrderPlaced");
    assert_eq!(json["head"]["envelope"]["payload"]["order_id"], "b-1");
    assert_eq!(json["head"]["envelope"]["partition_key"], "bob");
    assert!(json["deliveries"].as_u64().unwrap() >= 1);

    let text = fixture
        .ordo(&["inspect", CATEGORY, "bob"])
        .await?
        .expect_code(0)?
        .stdout;
    assert!(text.contains("HALTED"), "{text}");
    assert!(text.contains("poison order b-1 cannot be projected"), "{text}");
    assert!(text.contains("\"order_id\": \"b-1\""), "pretty payload: {text}");
    // When it happened and where it came from (raised outside a handler: its own conversation).
    assert!(
        text.lines()
            .any(|line| line.starts_with("occurred ") && line.contains('T') && line.ends_with('Z')),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{} (its own id: it starts the conversation)",
            json["head"]["envelope"]["id"].as_str().unwrap_or("no id")
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "ordo skip  order bob --group {PROJECTOR} --expect-head {}",
            halt.head
        )),
        "{text}"
    );

    // A flowing partition: not halted, caught up, exit 0.
    let alice = fixture
        .ordo(&["inspect", CATEGORY, "alice", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(alice["halted"], false);
    assert!(alice["head"].is_null(), "alice is caught up: {alice:#}");
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_refuses_unless_halted_confirmed_and_unchanged_then_resumes_the_key() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let head = halted_head(&fixture, &[]).await?;

    let not_halted = fixture
        .ordo(&["skip", CATEGORY, "alice", "--yes"])
        .await?
        .expect_code(3)?;
    not_halted.expect_stderr("`order:alice` is not halted")?;
    let unconfirmed = fixture.ordo(&["skip", CATEGORY, "bob"]).await?.expect_code(3)?;
    unconfirmed.expect_stderr("stdin is not a terminal")?;
    let changed = fixture
        .ordo(&["skip", CATEGORY, "bob", "--yes", "--expect-head", "1-0"])
        .await?
        .expect_code(3)?;
    changed.expect_stderr(&format!("is {head}, not 1-0"))?;
    assert_eq!(fixture.halted().await?.len(), 1, "refusals change nothing");

    let skipped = fixture
        .ordo(&["skip", CATEGORY, "bob", "--yes", "--expect-head", &head, "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(skipped["action"], "skip");
    assert_eq!(skipped["head"], head.as_str());
    eventually(WAIT, "bob's later orders", || async {
        Ok(fixture.handled_of("bob") == ["b-2", "b-3"])
    })
    .await?;
    fixture.ordo(&["status", "--check"]).await?.expect_code(0)?;
    // The head it expected is gone: acting on it again is refused.
    fixture
        .ordo(&["skip", CATEGORY, "bob", "--yes", "--expect-head", &head])
        .await?
        .expect_code(3)?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_runs_the_head_again_in_order() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let head = halted_head(&fixture, &[]).await?;
    fixture.cure();

    let text = fixture
        .ordo(&["retry", CATEGORY, "bob", "-y", "--expect-head", &head])
        .await?
        .expect_code(0)?
        .stdout;
    assert!(text.contains(&format!("entry {head} of `order:bob`")), "{text}");
    eventually(WAIT, "bob's orders", || async {
        Ok(fixture.handled_of("bob").len() == 3)
    })
    .await?;
    assert_eq!(
        fixture.handled_of("bob"),
        ["b-1", "b-2", "b-3"],
        "the retried head first"
    );
    fixture
        .ordo(&["retry", CATEGORY, "bob", "--yes"])
        .await?
        .expect_code(3)?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_moves_the_head_aside_and_replay_puts_it_back() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let head = halted_head(&fixture, &[]).await?;

    let moved = fixture
        .ordo(&["dlq", CATEGORY, "bob", "--yes", "--expect-head", &head])
        .await?
        .expect_code(0)?
        .stdout;
    assert!(
        moved.contains(&format!(
            "moved entry {head} of `order:bob` for group `{PROJECTOR}` to `{{order:bob}}:dlq`"
        )),
        "{moved}"
    );
    eventually(WAIT, "bob's later orders", || async {
        Ok(fixture.handled_of("bob") == ["b-2", "b-3"])
    })
    .await?;

    let listed = fixture
        .ordo(&["dlq", "list", CATEGORY])
        .await?
        .expect_code(0)?
        .stdout;
    let row = listed.lines().nth(1).expect("one dead letter");
    assert!(row.starts_with("bob"), "{listed}");
    assert!(
        row.contains(&head) && row.contains(PROJECTOR) && row.contains("OrderPlaced"),
        "{listed}"
    );
    let letters = fixture
        .ordo(&["dlq", "list", CATEGORY, "bob", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(letters.as_array().unwrap().len(), 1);
    assert_eq!(letters[0]["message"]["id"], head.as_str());
    assert_eq!(letters[0]["message"]["envelope"]["payload"]["order_id"], "b-1");
    assert!(letters[0]["error"].as_str().unwrap().contains("poison order b-1"));

    fixture
        .ordo(&["dlq", "replay", CATEGORY, "bob"])
        .await?
        .expect_code(3)?;
    fixture.cure();
    let replayed = fixture
        .ordo(&["dlq", "replay", CATEGORY, "bob", "--yes", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(replayed["replayed"][0]["source_id"], head.as_str());
    eventually(WAIT, "the replayed order", || async {
        Ok(fixture.handled_of("bob").len() == 3)
    })
    .await?;
    assert_eq!(
        fixture.handled_of("bob"),
        ["b-2", "b-3", "b-1"],
        "replayed at the end of the partition"
    );
    let left = fixture
        .ordo(&["dlq", "list", CATEGORY, "bob", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(left, serde_json::json!([]));
    let empty = fixture
        .ordo(&["dlq", "replay", CATEGORY, "bob", "--yes"])
        .await?
        .expect_code(0)?;
    empty.expect_stdout("no dead letters to replay")?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_groups_need_group_named() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, true).await?;

    let ambiguous = fixture
        .ordo(&["inspect", CATEGORY, "bob"])
        .await?
        .expect_code(2)?;
    ambiguous.expect_stderr(&format!("several groups: {AUDITOR}, {PROJECTOR}"))?;
    ambiguous.expect_stderr(&format!("halted on key `bob`: {PROJECTOR}"))?;
    let unknown = fixture
        .ordo(&["skip", CATEGORY, "bob", "--group", "Nobody", "--yes"])
        .await?
        .expect_code(2)?;
    unknown.expect_stderr("group `Nobody` does not consume")?;
    // The auditor handled bob: not halted for it.
    fixture
        .ordo(&["skip", CATEGORY, "bob", "--group", AUDITOR, "--yes"])
        .await?
        .expect_code(3)?;

    let head = halted_head(&fixture, &["--group", PROJECTOR]).await?;
    fixture
        .ordo(&[
            "skip",
            CATEGORY,
            "bob",
            "--group",
            PROJECTOR,
            "--yes",
            "--expect-head",
            &head,
        ])
        .await?
        .expect_code(0)?;
    let rows = fixture
        .ordo(&["partitions", CATEGORY, "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(
        rows.as_array().unwrap().len(),
        6,
        "3 partitions x 2 groups: {rows:#}"
    );
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_snapshots_until_its_count() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;

    let lines = fixture
        .ordo(&["watch", "--json", "--count", "2", "--interval", "0.05"])
        .await?
        .expect_code(0)?
        .stdout;
    let snapshots: Vec<serde_json::Value> = lines
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(snapshots.len(), 2, "{lines}");
    assert_eq!(snapshots[1]["halted"][0]["key"], "bob");

    let text = fixture
        .ordo(&["watch", "--count", "2", "--interval", "0.05"])
        .await?
        .expect_code(0)?
        .stdout;
    assert!(text.starts_with("ordo watch"), "{text}");
    // Each group's backlog, its rate and time to drain (from the second frame).
    assert!(
        text.contains("BACKLOG") && text.contains("RATE") && text.contains("TO DRAIN"),
        "{text}"
    );
    assert!(text.contains("halted partitions: 1"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "no escape codes when stdout is not a terminal: {text:?}"
    );
    fixture
        .ordo(&["watch", "--interval", "0"])
        .await?
        .expect_code(2)?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn domain_toml_names_redis_and_the_warning_threshold() -> anyhow::Result<()> {
    let fixture = Fixture::start(false, false).await?;
    let nested = fixture.dir.path().join("service/src");
    std::fs::create_dir_all(&nested)?;
    std::fs::write(
        fixture.dir.path().join("domain.toml"),
        format!(
            "[redis]\nurl = \"{}\"\n\n[cli]\nwarn_partitions = 2\n",
            fixture.redis.url()
        ),
    )?;

    // Found upward from a nested directory; 3 partitions > 2: exit 5.
    let warned = ordo_in(&nested, &["status", "--check"], &[])
        .await?
        .expect_code(5)?;
    warned.expect_stdout("over the warning threshold of 2")?;
    ordo_in(&nested, &["status", "--check", "--warn-partitions", "3"], &[])
        .await?
        .expect_code(0)?;
    // REDIS_URL beats the file.
    ordo_in(&nested, &["status"], &[("REDIS_URL", "redis://127.0.0.1:1")])
        .await?
        .expect_code(1)?;
    // The environment overrides the file (ORDO_ names, ORDO_REDIS_URL over
    // REDIS_URL), and a bad setting there names its variable.
    ordo_in(
        &nested,
        &["status", "--check"],
        &[("ORDO_CLI_WARN_PARTITIONS", "3")],
    )
    .await?
    .expect_code(0)?;
    let url = fixture.redis.url();
    ordo_in(
        &nested,
        &["status"],
        &[("ORDO_REDIS_URL", &url), ("REDIS_URL", "redis://127.0.0.1:1")],
    )
    .await?
    .expect_code(0)?;
    let bad = ordo_in(
        &nested,
        &["status"],
        &[("ORDO_SERVER_PARTITIONING_LEASE_TTL_MS", "0")],
    )
    .await?
    .expect_code(1)?;
    assert!(
        bad.stderr
            .contains("environment variable ORDO_SERVER_PARTITIONING_LEASE_TTL_MS")
            && bad.stderr.contains("lease_ttl_ms"),
        "{}",
        bad.stderr
    );
    // ORDO_CONFIG names the file when --config does not.
    let elsewhere = fixture.dir.path().join("elsewhere.toml");
    std::fs::write(&elsewhere, "[cli]\nwarn_partitions = 100\n")?;
    let elsewhere = elsewhere.to_str().expect("a UTF-8 path");
    ordo_in(
        &nested,
        &["status", "--check", "--redis-url", &url],
        &[("ORDO_CONFIG", elsewhere)],
    )
    .await?
    .expect_code(0)?;
    // A typo in the CLI's tables is an error naming the file.
    std::fs::write(
        fixture.dir.path().join("domain.toml"),
        "[cli]\nwarn_partition = 2\n",
    )?;
    let typo = ordo_in(&nested, &["status"], &[]).await?.expect_code(1)?;
    assert!(
        typo.stderr.contains("domain.toml") && typo.stderr.contains("warn_partition"),
        "{}",
        typo.stderr
    );
    // So is a misspelled table of the domain configuration, at any level,
    // through --config too: it names the key and lists the valid ones.
    let typo_file = fixture.dir.path().join("typo.toml");
    for (text, expected) in [
        (
            "[server.partioning]\nlease_ttl_ms = 6000\n",
            "unknown key `server.partioning` in the domain configuration; valid keys in [server]: \
             partitioning, priority_lanes",
        ),
        (
            "lease_ttl_ms = 6000\n",
            "unknown key `lease_ttl_ms` in the domain configuration; valid keys at the top level: \
             server, handlers, health, outbox, commands, categories, redis, cli, relay",
        ),
        // The Redis broker's keys share [server.partitioning] with ordo-core's.
        (
            "[server.partitioning]\nlease_tll_ms = 6000\n",
            "unknown key `server.partitioning.lease_tll_ms` in the domain configuration; valid keys in \
             [server.partitioning]: poll_interval_seconds, max_retries, retry_backoff_initial_ms, \
             retry_backoff_max_ms, max_concurrency, handler_timeout_ms, timeout_is_transient, \
             max_transient_ms, pause_min_keys, lease_ttl_ms, heartbeat_interval_seconds, \
             reap_idle_ms, discovery_interval_seconds, max_owned_partitions, recheck_interval_seconds",
        ),
    ] {
        std::fs::write(&typo_file, text)?;
        let config = typo_file.to_str().expect("a UTF-8 path");
        let typo = ordo_in(&nested, &["status", "--config", config], &[])
            .await?
            .expect_code(1)?;
        assert!(
            typo.stderr.contains("typo.toml") && typo.stderr.contains(expected),
            "{}",
            typo.stderr
        );
    }
    fixture.stop().await
}

/// A category with partitions but no registered consumer group (what Redis
/// looks like after losing its data while no worker runs to register
/// again): `status --check` reports it instead of exiting 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_check_reports_partitions_without_a_registered_group() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start_local()?;
    let broker = ordo_redis::RedisBroker::builder(redis.url()).build().await?;
    ordo_core::contract::broker::Broker::publish(&broker, &[noted("ledger", "acct-1", 1)]).await?;
    let dir = tempfile::tempdir()?;
    let url = redis.url();
    let checked = ordo_in(dir.path(), &["status", "--check", "--redis-url", &url], &[])
        .await?
        .expect_code(5)?;
    checked.expect_stdout("category `ledger` has 1 partition but no registered consumer group")?;
    Ok(())
}

/// `ordo repartition` refuses while the category holds a halted key (or
/// anything else unhandled) and without confirmation, and records the new
/// partitioning once the category is drained; processes with the old
/// setting then refuse to publish it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repartition_waits_for_a_drained_category_then_switches_it() -> anyhow::Result<()> {
    let mut fixture = Fixture::start(true, false).await?;
    let refused = fixture
        .ordo(&["repartition", CATEGORY, "--to", "8", "--yes"])
        .await?
        .expect_code(3)?;
    refused.expect_stderr("is not drained")?;
    refused.expect_stderr("1 halted partitions or parked keys")?;
    fixture
        .ordo(&["repartition", CATEGORY, "--to", "8"])
        .await?
        .expect_code(3)?
        .expect_stderr("without confirmation")?;
    fixture
        .ordo(&["repartition", CATEGORY, "--to", "hashed", "--yes"])
        .await?
        .expect_code(2)?
        .expect_stderr("neither `per_key` nor a number of partitions")?;

    fixture.cure();
    fixture
        .ordo(&["retry", CATEGORY, "bob", "--yes"])
        .await?
        .expect_code(0)?;
    eventually(WAIT, "bob's orders", || async {
        Ok(fixture.handled_of("bob").len() == 3)
    })
    .await?;
    fixture.stop_domain().await?;
    fixture
        .ordo(&["repartition", CATEGORY, "--to", "8", "--yes"])
        .await?
        .expect_code(0)?
        .expect_stdout(&format!(
            "category `{CATEGORY}`: partitioned `8` (was `per_key`); start its processes with \
             `[categories.{CATEGORY}] partitions = 8`"
        ))?;
    let (old, _) = common::broker(&fixture.redis.url()).await?;
    let publication = noted(CATEGORY, "bob", 9);
    let refused = ordo_core::contract::broker::Broker::publish(&old, &[publication])
        .await
        .expect_err("the old setting is refused");
    assert!(
        format!("{:#}", anyhow::Error::from(refused)).contains("partitioned `8` in Redis but `per_key`"),
        "the old setting is refused"
    );
    Ok(())
}

/// In a hashed partition a poison order parks its client's key: `ordo`
/// (reading the same domain.toml) lists it, inspects its held head and
/// retries it against the head it saw, like a halted partition; the key's
/// held orders then run in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_key_is_listed_inspected_and_retried_like_a_halted_partition() -> anyhow::Result<()> {
    let fixture = Fixture::start_hashed(4).await?;
    assert_eq!(fixture.handled_of("alice"), ["a-1", "a-2", "a-3"]);
    let text = fixture.ordo(&["status"]).await?.expect_code(0)?.stdout;
    assert!(text.contains("halted partitions: 1"), "{text}");
    assert!(text.contains("bob (parked)"), "{text}");
    let json = fixture
        .ordo(&["status", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(json["halted"][0]["key"], "bob");
    assert_eq!(json["halted"][0]["parked"], true);

    let inspected = fixture
        .ordo(&["inspect", CATEGORY, "bob", "--json"])
        .await?
        .expect_code(0)?
        .json()?;
    assert_eq!(inspected["halted"], true);
    assert_eq!(inspected["head"]["envelope"]["payload"]["order_id"], "b-1");
    let head = inspected["halt"]["head"]
        .as_str()
        .expect("a parked head")
        .to_owned();
    fixture
        .ordo(&["retry", CATEGORY, "bob", "--yes", "--expect-head", "1-0"])
        .await?
        .expect_code(3)?;
    fixture.cure();
    fixture
        .ordo(&["retry", CATEGORY, "bob", "--yes", "--expect-head", &head])
        .await?
        .expect_code(0)?;
    eventually(WAIT, "bob's orders", || async {
        Ok(fixture.handled_of("bob").len() == 3)
    })
    .await?;
    assert_eq!(
        fixture.handled_of("bob"),
        ["b-1", "b-2", "b-3"],
        "the retried head first"
    );
    let text = fixture.ordo(&["status"]).await?.expect_code(0)?.stdout;
    assert!(text.contains("halted partitions: none"), "{text}");
    fixture.stop().await
}
