//! `ordo console`'s JSON API on a real Redis: what the page reads (status,
//! halted keys searchable and paginated, partitions, a key's head), and
//! its actions, which a read-only console refuses, and an action-allowing
//! one refuses without the token, across origins, without a JSON body, or
//! on a head that is not the halted one: it changes nothing then, and logs
//! every refusal and action with its event name, never the token.

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use ordo::prelude::*;
use ordo_redis::RedisBroker;
use ordo_testkit::Process;
use serde_json::Value;

use super::common::{CATEGORY, Fixture, ordo_in};

const TOKEN: &str = "the-token-of-this-test-0123456789";

/// A console process on the fixture's Redis, its log lines on stdout.
fn console(fixture: &Fixture, allow_actions: bool) -> anyhow::Result<(Process, SocketAddr)> {
    console_on(&fixture.redis.url(), fixture.dir.path(), allow_actions)
}

/// A console process on the Redis at `url`, run in `dir`.
fn console_on(
    url: &str,
    dir: &std::path::Path,
    allow_actions: bool,
) -> anyhow::Result<(Process, SocketAddr)> {
    let address = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 2>&1")
        .arg(env!("CARGO_BIN_EXE_ordo"))
        .args(["--redis-url", url, "console", "--listen"])
        .arg(address.to_string())
        .current_dir(dir)
        .env("ORDO_CONSOLE_TOKEN", TOKEN);
    if allow_actions {
        command.arg("--allow-actions");
    }
    let mut process = Process::spawn(command)?;
    process.wait_for_line(|line| line.contains("ordo console on"), Duration::from_secs(30))?;
    Ok((process, address))
}

/// `GET path`: the status and the JSON answer.
fn get(address: SocketAddr, path: &str) -> anyhow::Result<(u16, Value)> {
    let (status, body) = ordo_testkit::http::get(address, path)?;
    Ok((status, serde_json::from_str(&body).unwrap_or(Value::String(body))))
}

/// `POST /api/{action}` with `headers` and `body`: the status and the JSON answer.
fn post(
    address: SocketAddr,
    action: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> anyhow::Result<(u16, Value)> {
    let (status, text) =
        ordo_testkit::http::request(address, "POST", &format!("/api/{action}"), headers, body)?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

const JSON: (&str, &str) = ("Content-Type", "application/json");
const BEARER: (&str, &str) = ("Authorization", "Bearer the-token-of-this-test-0123456789");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_status_shows_and_acts_only_as_the_operator_meant() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let (mut process, address) = console(&fixture, true)?;

    // What the page reads.
    let (status, answer) = get(address, "/api/status")?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["actions"], true);
    let halted = answer["status"]["halted"].as_array().expect("halted").clone();
    assert_eq!(halted.len(), 1, "{answer}");
    assert_eq!(halted[0]["key"], "bob");
    let head = halted[0]["head"].as_str().expect("a head").to_owned();
    let group = halted[0]["group"].as_str().expect("a group").to_owned();
    let groups = &answer["status"]["categories"][0]["groups"];
    assert!(groups[0]["handled"].as_u64().unwrap_or(0) >= 4, "{groups}");

    let (_, found) = get(address, "/api/halted?q=BOB")?;
    assert_eq!(found["total"], 1, "{found}");
    let (_, none) = get(address, "/api/halted?q=nobody")?;
    assert_eq!(none["total"], 0, "{none}");
    let (_, page) = get(
        address,
        &format!("/api/partitions?category={CATEGORY}&per_page=1&page=1"),
    )?;
    assert_eq!(page["total"], 3, "{page}");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["items"][0]["key"], "bob", "the second of alice, bob, carol");
    let (status, inspected) = get(address, &format!("/api/inspect?category={CATEGORY}&key=bob"))?;
    assert_eq!(status, 200, "{inspected}");
    assert_eq!(inspected["halted"], true);
    assert_eq!(inspected["head"]["envelope"]["payload"]["client_id"], "bob");
    let (status, unknown) = get(address, "/api/inspect?category=nothing&key=bob")?;
    assert_eq!(status, 400, "{unknown}");

    let (status, page) = ordo_testkit::http::get(address, "/")?;
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"/console.js\">"), "{page}");

    // What it refuses, changing nothing.
    let body =
        serde_json::json!({"category": CATEGORY, "key": "bob", "group": group, "head": head}).to_string();
    let refusals = [
        ("retry", vec![JSON], 401, "needs the console token"),
        (
            "retry",
            vec![JSON, ("Authorization", "Bearer the-wrong-token-0123456789")],
            401,
            "token is wrong",
        ),
        (
            "retry",
            vec![JSON, BEARER, ("Origin", "http://evil.example")],
            403,
            "cross-origin",
        ),
        (
            "retry",
            vec![JSON, BEARER, ("Sec-Fetch-Site", "cross-site")],
            403,
            "cross-site",
        ),
        ("retry", vec![("Content-Type", "text/plain"), BEARER], 415, "JSON"),
        ("purge", vec![JSON, BEARER], 404, "no action"),
    ];
    for (action, headers, code, says) in refusals {
        let (status, answer) = post(address, action, &headers, &body)?;
        assert_eq!(status, code, "{action} with {headers:?}: {answer}");
        assert!(
            answer["error"].as_str().unwrap_or_default().contains(says),
            "{answer}"
        );
    }
    let stale =
        serde_json::json!({"category": CATEGORY, "key": "bob", "group": group, "head": "1-0"}).to_string();
    let (status, answer) = post(address, "skip", &[JSON, BEARER], &stale)?;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["error"].as_str().unwrap_or_default().contains("changed"),
        "{answer}"
    );
    assert_eq!(fixture.halted().await?.len(), 1, "bob is still halted");

    // The action the operator meant.
    let (status, answer) = post(address, "skip", &[JSON, BEARER], &body)?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["head"], head.as_str());
    assert!(fixture.halted().await?.is_empty(), "bob resumed");
    let (status, answer) = post(address, "skip", &[JSON, BEARER], &body)?;
    assert_eq!(status, 409, "not halted any more: {answer}");

    // Logged with their event names; the token never.
    process.wait_for_line(
        |line| line.contains("event=\"console.action\"") && line.contains("outcome=\"applied\""),
        Duration::from_secs(10),
    )?;
    process.terminate()?;
    let printed = process.lines().join("\n");
    assert!(
        printed.contains("event=\"console.action_denied\" action=retry status=401"),
        "{printed}"
    );
    assert!(!printed.contains(TOKEN), "the token was logged:\n{printed}");
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_console_refuses_every_action() -> anyhow::Result<()> {
    let fixture = Fixture::start(true, false).await?;
    let (mut process, address) = console(&fixture, false)?;
    let (_, answer) = get(address, "/api/status")?;
    assert_eq!(answer["actions"], false);
    let halt = &answer["status"]["halted"][0];
    let body = serde_json::json!({"category": CATEGORY, "key": "bob", "head": halt["head"]}).to_string();
    for action in ["retry", "skip", "dead-letter", "replay"] {
        let (status, answer) = post(address, action, &[JSON, BEARER], &body)?;
        assert_eq!(status, 403, "{action}: {answer}");
        assert!(
            answer["error"].as_str().unwrap_or_default().contains("read-only"),
            "{answer}"
        );
    }
    assert_eq!(fixture.halted().await?.len(), 1, "bob is still halted");
    process.terminate()?;
    fixture.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_are_not_allowed_with_a_short_token() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let output = ordo_in(
        dir.path(),
        &["--redis-url", "redis://127.0.0.1:1", "console", "--allow-actions"],
        &[("ORDO_CONSOLE_TOKEN", "short")],
    )
    .await?;
    // Refused before it connects anywhere or listens.
    let output = output.expect_code(2)?;
    output.expect_stderr("ORDO_CONSOLE_TOKEN is too short")?;
    Ok(())
}

/// Hashed partitions: a parked key is listed, inspected, moved to the
/// dead letters and replayed from the console, as from the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_key_of_a_hashed_partition_is_dead_lettered_and_replayed_from_the_console()
-> anyhow::Result<()> {
    let fixture = Fixture::start_hashed(4).await?;
    let (mut process, address) = console(&fixture, true)?;
    let (_, parked) = get(address, "/api/halted?q=bob")?;
    assert_eq!(parked["total"], 1, "{parked}");
    assert_eq!(parked["items"][0]["parked"], true);
    let head = parked["items"][0]["head"].as_str().expect("a head").to_owned();
    let (_, inspected) = get(address, &format!("/api/inspect?category={CATEGORY}&key=bob"))?;
    assert_eq!(
        inspected["head"]["envelope"]["payload"]["order_id"], "b-1",
        "{inspected}"
    );

    let body = serde_json::json!({"category": CATEGORY, "key": "bob", "head": head}).to_string();
    let (status, moved) = post(address, "dead-letter", &[JSON, BEARER], &body)?;
    assert_eq!(status, 200, "{moved}");
    let (_, letters) = get(address, &format!("/api/dlq?category={CATEGORY}&q=BOB"))?;
    assert_eq!(letters["total"], 1, "{letters}");
    assert_eq!(
        letters["items"][0]["key"], "bob",
        "the letter says its own key in the hashed partition"
    );
    let (_, none) = get(address, &format!("/api/dlq?category={CATEGORY}&q=alice"))?;
    assert_eq!(none["total"], 0, "{none}");

    handled(&fixture, "bob", 2).await?;
    assert_eq!(
        fixture.handled_of("bob"),
        ["b-2", "b-3"],
        "the key resumed behind its head"
    );

    fixture.cure();
    let body = serde_json::json!({"category": CATEGORY, "key": "bob"}).to_string();
    let (status, replayed) = post(address, "replay", &[JSON, BEARER], &body)?;
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(
        replayed["replayed"].as_array().map(Vec::len),
        Some(1),
        "{replayed}"
    );
    handled(&fixture, "bob", 3).await?;
    assert_eq!(fixture.handled_of("bob"), ["b-2", "b-3", "b-1"]);
    let (_, letters) = get(address, &format!("/api/dlq?category={CATEGORY}"))?;
    assert_eq!(letters["total"], 0, "{letters}");
    process.terminate()?;
    fixture.stop().await
}

/// Waits until `client`'s orders handled number `count`.
async fn handled(fixture: &Fixture, client: &str, count: usize) -> anyhow::Result<()> {
    ordo_testkit::eventually(Duration::from_secs(20), "the key's orders handled", || {
        let handled = fixture.handled_of(client).len();
        async move { Ok(handled == count) }
    })
    .await?;
    Ok(())
}

#[derive(Aggregate)]
struct Shipment;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Shipment)]
struct Shipped {
    #[aggregate_id]
    shipment_id: String,
    client_id: String,
    poison: bool,
}

/// Fails on poison for good; records the rest.
#[derive(Clone, Default)]
struct Tracker {
    handled: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

#[event_handler(part_of = Shipment, sequential_by = "client_id")]
impl Tracker {
    #[handle]
    async fn on_shipped(&self, event: &Shipped, _ctx: &HandlerContext) -> anyhow::Result<()> {
        anyhow::ensure!(!event.poison, "shipment {} is poison", event.shipment_id);
        self.handled.lock().unwrap().push(event.shipment_id.clone());
        Ok(())
    }
}

/// On a Redis Cluster: the console lists, inspects and skips a halted key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_works_on_a_redis_cluster() -> anyhow::Result<()> {
    let cluster = ordo_testkit::RedisCluster::start()?;
    let config = Config::from_toml_str(super::common::CONFIG)?;
    let tracker = Tracker::default();
    let domain = Domain::builder()
        .aggregate::<Shipment>()
        .event_handler(tracker.clone())
        .broker(
            RedisBroker::builder(cluster.url())
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config)
        .init()?;
    let running = domain.start();
    let mut uow = domain.unit_of_work();
    for (id, client, poison) in [("s-1", "c-1", true), ("s-2", "c-2", false), ("s-3", "c-1", false)] {
        uow.raise(Shipped {
            shipment_id: id.to_owned(),
            client_id: client.to_owned(),
            poison,
        })?;
    }
    uow.commit().await?;
    let dir = tempfile::tempdir()?;
    let (mut process, address) = console_on(&cluster.url(), dir.path(), true)?;

    let mut halted = Value::Null;
    ordo_testkit::eventually(Duration::from_secs(30), "c-1 halted, in the console", || {
        let answer = get(address, "/api/halted");
        let found = answer.map(|(_, page)| {
            let found = page["total"] == 1;
            halted = page;
            found
        });
        async move { Ok(found?) }
    })
    .await?;
    let halt = halted["items"][0].clone();
    assert_eq!(halt["key"], "c-1", "{halted}");
    let category = halt["category"].as_str().expect("a category").to_owned();
    let (_, status) = get(address, "/api/status")?;
    assert_eq!(status["status"]["categories"][0]["partitions"], 2, "{status}");
    let (_, page) = get(address, &format!("/api/partitions?category={category}&q=c-2"))?;
    assert_eq!(page["total"], 1, "{page}");
    let (_, inspected) = get(address, &format!("/api/inspect?category={category}&key=c-1"))?;
    assert_eq!(
        inspected["head"]["envelope"]["payload"]["shipment_id"], "s-1",
        "{inspected}"
    );

    let body = serde_json::json!({"category": category, "key": "c-1", "head": halt["head"]}).to_string();
    let (code, skipped) = post(address, "skip", &[JSON, BEARER], &body)?;
    assert_eq!(code, 200, "{skipped}");
    ordo_testkit::eventually(
        Duration::from_secs(30),
        "c-1 resumed behind its skipped head",
        || {
            let done = tracker.handled.lock().unwrap().contains(&"s-3".to_owned());
            async move { Ok(done) }
        },
    )
    .await?;
    process.terminate()?;
    running.shutdown().await?;
    Ok(())
}
