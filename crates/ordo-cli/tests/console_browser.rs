//! The operator console in a real browser: Debian's Chromium, driven
//! through ChromeDriver (WebDriver). A poisoned key halts; the page shows
//! it, with its head's error and payload; once the poison is fixed, the
//! operator retries from the page with the console token; the key resumes
//! and the page shows it drained.
//!
//! `ORDO_CONSOLE_SCREENSHOT=path.png` saves the overview as the test sees
//! it (docs/console-overview.png is made so).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use ordo::prelude::*;
use ordo_redis::RedisBroker;
use ordo_testkit::{ChromeDriver, Process, Redis};

const TOKEN: &str = "a-console-token-of-the-test-0123";
const WAIT: Duration = Duration::from_secs(30);

#[derive(Aggregate)]
struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
struct OrderPlaced {
    #[aggregate_id]
    order_id: String,
    client_id: String,
}

/// Fails on every order of a poisoned client until the poison is fixed.
#[derive(Clone, Default)]
struct OrderProjector {
    poisoned: Arc<AtomicBool>,
    handled: Arc<Mutex<BTreeMap<String, Vec<String>>>>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        anyhow::ensure!(
            !(event.client_id == "alice" && self.poisoned.load(Ordering::SeqCst)),
            "the price list of {} is missing",
            event.order_id
        );
        self.handled
            .lock()
            .unwrap()
            .entry(event.client_id.clone())
            .or_default()
            .push(event.order_id.clone());
        Ok(())
    }
}

impl OrderProjector {
    fn handled_of(&self, client: &str) -> usize {
        self.handled.lock().unwrap().get(client).map_or(0, Vec::len)
    }
}

fn free_address() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address")
}

/// A headless Chromium session through `driver`.
async fn browser(driver: &ChromeDriver) -> anyhow::Result<Client> {
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": driver.chromium(),
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--window-size=1280,1000",
                format!("--user-data-dir={}", driver.profile_dir().display()),
            ],
        }),
    );
    Ok(
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver.url())
            .await?,
    )
}

/// Waits until the element at `css` shows text for which `wanted` holds;
/// its text.
async fn text_of(client: &Client, css: &str, wanted: impl Fn(&str) -> bool) -> anyhow::Result<String> {
    let started = std::time::Instant::now();
    let mut last = String::new();
    while started.elapsed() < WAIT {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && let Ok(text) = element.text().await
        {
            if wanted(&text) {
                return Ok(text);
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let notice = match client.find(Locator::Id("notice")).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    anyhow::bail!("`{css}` never showed what was awaited; it shows {last:?} (notice: {notice:?})")
}

/// Clicks what `locator` finds, again if the page redrew it meanwhile
/// (the lists are redrawn at every poll).
async fn click(client: &Client, locator: Locator<'_>) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    loop {
        let clicked = match client.find(locator).await {
            Ok(element) => element.click().await.map(drop),
            Err(error) => Err(error),
        };
        match clicked {
            Ok(()) => return Ok(()),
            Err(error) if started.elapsed() > WAIT => return Err(error.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_a_halted_key_and_retries_it_from_the_page() -> anyhow::Result<()> {
    let redis = Redis::start()?;
    let config = Config::from_toml_str(
        "[server.partitioning]\nmax_retries = 0\nlease_ttl_ms = 3000\nheartbeat_interval_seconds = 0.6\n\
         poll_interval_seconds = 0.1\ndiscovery_interval_seconds = 0.1\n",
    )?;
    let projector = OrderProjector::default();
    projector.poisoned.store(true, Ordering::SeqCst);
    let domain = Domain::builder()
        .aggregate::<Order>()
        .event_handler(projector.clone())
        .broker(
            RedisBroker::builder(redis.url())
                .config(config.clone())
                .build()
                .await?,
        )
        .config(config)
        .init()?;
    let running = domain.start();
    let mut uow = domain.unit_of_work();
    for (n, client) in ["alice", "bob", "alice", "alice", "bob"].into_iter().enumerate() {
        uow.raise(OrderPlaced {
            order_id: format!("o-{n}"),
            client_id: client.to_owned(),
        })?;
    }
    uow.commit().await?;

    let address = free_address();
    let mut console = Command::new(env!("CARGO_BIN_EXE_ordo"));
    console
        .args([
            "--redis-url",
            &redis.url(),
            "console",
            "--allow-actions",
            "--listen",
        ])
        .arg(address.to_string())
        .env("ORDO_CONSOLE_TOKEN", TOKEN);
    let mut console = Process::spawn(console)?;
    console.wait_for_line(|line| line.contains("ordo console on"), WAIT)?;
    let url = format!("http://{address}/");

    let driver = ChromeDriver::start()?;
    let client = browser(&driver).await?;
    let checked = async {
        client.goto(&url).await?;
        // The overview counts the halted key; bob's orders flowed.
        text_of(&client, "#halted-count", |text| text == "1").await?;
        text_of(&client, "#tile-halted", |text| text == "1").await?;
        text_of(&client, "#groups tbody", |text| text.contains("OrderProjector")).await?;
        anyhow::ensure!(projector.handled_of("bob") == 2, "bob's orders are handled");
        if let Ok(path) = std::env::var("ORDO_CONSOLE_SCREENSHOT") {
            // Two rates read, so the chart has a line.
            let first = text_of(&client, "#updated", |text| !text.is_empty()).await?;
            text_of(&client, "#tile-rate", |text| text.parse::<f64>().is_ok()).await?;
            text_of(&client, "#updated", |text| text != first).await?;
            std::fs::write(path, client.screenshot().await?)?;
        }

        // The halted list shows the key, its head's error, and leads to it.
        click(&client, Locator::Css("a[data-view=halted]")).await?;
        let row = text_of(&client, "#halted tbody", |text| text.contains("alice")).await?;
        anyhow::ensure!(row.contains("the price list of o-0 is missing"), "{row}");
        click(&client, Locator::LinkText("Inspect")).await?;
        let state = text_of(&client, "#key-state", |text| text.starts_with("HALTED")).await?;
        anyhow::ensure!(state.contains("after 1 attempts"), "{state}");
        text_of(&client, "#key-error", |text| text.contains("price list of o-0")).await?;
        text_of(&client, "#key-waiting-behind-the-head", |text| text == "2").await?;
        let payload = text_of(&client, "#key-payload", |text| text.contains("\"o-0\"")).await?;
        anyhow::ensure!(payload.contains("\"client_id\": \"alice\""), "{payload}");

        // A wrong token is refused, and nothing changes.
        client
            .find(Locator::Id("token"))
            .await?
            .send_keys("not-the-token")
            .await?;
        click(&client, Locator::Css("#key-actions button[data-action=retry]")).await?;
        client.accept_alert().await?;
        text_of(&client, "#notice", |text| {
            text.contains("the console token is wrong")
        })
        .await?;
        anyhow::ensure!(projector.handled_of("alice") == 0, "nothing ran for alice");

        // The poison is fixed; the operator retries with the token.
        projector.poisoned.store(false, Ordering::SeqCst);
        client.find(Locator::Id("token")).await?.clear().await?;
        client.find(Locator::Id("token")).await?.send_keys(TOKEN).await?;
        click(&client, Locator::Css("#key-actions button[data-action=retry]")).await?;
        client.accept_alert().await?;
        text_of(&client, "#notice", |text| text.starts_with("Retried")).await?;

        // The key resumes, in order, and the page shows it drained.
        text_of(&client, "#key-state", |text| text == "drained").await?;
        let alice = projector.handled.lock().unwrap().get("alice").cloned();
        anyhow::ensure!(
            alice.as_deref() == Some(&["o-0".to_owned(), "o-2".to_owned(), "o-3".to_owned()][..]),
            "alice's orders ran once each, in order: {alice:?}"
        );
        click(&client, Locator::Css("a[data-view=overview]")).await?;
        text_of(&client, "#halted-count", |text| text == "0").await?;
        text_of(&client, "#tile-lag", |text| text == "0").await?;
        // The other lists draw too: the partitions of the category, no dead letters.
        click(&client, Locator::Css("a[data-view=partitions]")).await?;
        text_of(&client, "#partitions-total", |text| text == "2 found").await?;
        text_of(&client, "#partitions tbody", |text| {
            text.contains("alice") && text.contains("drained")
        })
        .await?;
        click(&client, Locator::Css("a[data-view=dlq]")).await?;
        text_of(&client, "#dlq-total", |text| text == "0 found").await?;
        anyhow::Ok(())
    }
    .await;
    client.close().await?;
    console.terminate()?;
    running.shutdown().await?;
    checked
}
