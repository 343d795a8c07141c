//! A real Redis holding real partitions, made by a real `RedisBroker`
//! domain running in the test process, and a way to run the `ordo` binary
//! against it.

#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, bail};
use ordo::RunningDomain;
use ordo::prelude::*;
use ordo_core::contract::broker::Publication;
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::{Envelope, MessageKind, Metadata};
use ordo_redis::{HaltedPartition, RedisBroker};
use ordo_testkit::Redis;
use ordo_testkit::eventually;

/// The stream category of the fixture.
pub const CATEGORY: &str = "order";
/// The group that halts on poison orders.
pub const PROJECTOR: &str = "OrderProjector";
/// The group that handles everything.
pub const AUDITOR: &str = "OrderAuditor";

/// How long a test waits for the domain to catch up.
pub const WAIT: Duration = Duration::from_secs(15);

#[derive(Aggregate)]
pub struct Order;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Order)]
pub struct OrderPlaced {
    #[aggregate_id]
    pub order_id: String,
    pub client_id: String,
    /// The projector fails on it while poison is on.
    pub poison: bool,
}

/// Records the orders it handled per client, in order; fails on poison
/// orders while `poisoned` is set.
#[derive(Clone)]
pub struct OrderProjector {
    handled: Arc<Mutex<Vec<(String, String)>>>,
    poisoned: Arc<AtomicBool>,
}

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderProjector {
    #[handle]
    async fn on_placed(&self, event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        if event.poison && self.poisoned.load(Ordering::SeqCst) {
            bail!("poison order {} cannot be projected", event.order_id);
        }
        self.handled
            .lock()
            .expect("not poisoned")
            .push((event.client_id.clone(), event.order_id.clone()));
        Ok(())
    }
}

/// Handles everything (a second consumer group on the category).
#[derive(Clone, Default)]
pub struct OrderAuditor;

#[event_handler(part_of = Order, sequential_by = "client_id")]
impl OrderAuditor {
    #[handle]
    async fn on_placed(&self, _event: &OrderPlaced, _ctx: &HandlerContext) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Which orders the fixture publishes.
pub fn orders(poison: bool) -> Vec<OrderPlaced> {
    let order = |id: &str, client: &str, poison: bool| OrderPlaced {
        order_id: id.to_owned(),
        client_id: client.to_owned(),
        poison,
    };
    vec![
        order("a-1", "alice", false),
        order("b-1", "bob", poison),
        order("a-2", "alice", false),
        order("b-2", "bob", false),
        order("c-1", "carol", false),
        order("b-3", "bob", false),
        order("a-3", "alice", false),
    ]
}

/// A Redis, and a domain on it whose partitions `alice` and `carol` are
/// drained and `bob` (with poison) is halted for the projector.
pub struct Fixture {
    pub redis: Redis,
    pub broker: RedisBroker,
    running: Option<RunningDomain>,
    handled: Arc<Mutex<Vec<(String, String)>>>,
    poisoned: Arc<AtomicBool>,
    /// A directory with no domain.toml above it, to run the CLI in.
    pub dir: tempfile::TempDir,
}

/// A fast domain configuration: one retry, short timings.
pub const CONFIG: &str = "\
[server.partitioning]
lease_ttl_ms = 3000
heartbeat_interval_seconds = 0.5
poll_interval_seconds = 0.05
discovery_interval_seconds = 0.1
max_retries = 1
retry_backoff_initial_ms = 10
retry_backoff_max_ms = 20
";

impl Fixture {
    /// Starts Redis and the domain, publishes [`orders`] and waits until
    /// everything that can be handled is, and (with `poison`) `bob` halted.
    pub async fn start(poison: bool, with_auditor: bool) -> anyhow::Result<Self> {
        Self::start_with(poison, with_auditor, CONFIG).await
    }

    /// [`Fixture::start`] with `poison`, the category split into
    /// `partitions` hashed partitions: `bob` is parked rather than halted.
    /// The fixture's directory holds the same configuration as its
    /// domain.toml, so the `ordo` runs there find `bob`'s partition.
    pub async fn start_hashed(partitions: u32) -> anyhow::Result<Self> {
        let text = format!("{CONFIG}[categories.{CATEGORY}]\npartitions = {partitions}\n");
        let fixture = Self::start_with(true, false, &text).await?;
        std::fs::write(fixture.dir.path().join("domain.toml"), text)?;
        Ok(fixture)
    }

    async fn start_with(poison: bool, with_auditor: bool, config: &str) -> anyhow::Result<Self> {
        let (handled, halts) = if poison { (4, 1) } else { (7, 0) };
        Self::start_orders(orders(poison), handled, halts, with_auditor, config).await
    }

    /// Starts Redis and the domain with the fast [`CONFIG`], and publishes
    /// two orders for each of `clients`, the first one poison: every one of
    /// them halts on its first order.
    pub async fn start_halting(clients: &[&str]) -> anyhow::Result<Self> {
        let orders = clients
            .iter()
            .flat_map(|client| {
                [1, 2].map(|n| OrderPlaced {
                    order_id: format!("{client}-{n}"),
                    client_id: (*client).to_owned(),
                    poison: n == 1,
                })
            })
            .collect();
        Self::start_orders(orders, 0, clients.len(), false, CONFIG).await
    }

    /// Starts Redis and the domain, publishes `orders` and waits until
    /// `handled` are handled and `halts` partitions halted.
    async fn start_orders(
        orders: Vec<OrderPlaced>,
        handled_count: usize,
        halts: usize,
        with_auditor: bool,
        config: &str,
    ) -> anyhow::Result<Self> {
        let redis = Redis::start_local()?;
        let config = Config::from_toml_str(config)?;
        let broker = RedisBroker::builder(redis.url())
            .config(config.clone())
            .build()
            .await?;
        let handled = Arc::new(Mutex::new(Vec::new()));
        let poisoned = Arc::new(AtomicBool::new(true));
        let projector = OrderProjector {
            handled: handled.clone(),
            poisoned: poisoned.clone(),
        };
        let mut builder = Domain::builder()
            .aggregate::<Order>()
            .event_handler(projector)
            .broker(broker.clone())
            .config(config);
        if with_auditor {
            builder = builder.event_handler(OrderAuditor);
        }
        let domain = builder.init()?;
        let running = domain.start();
        let mut uow = domain.unit_of_work();
        for order in orders {
            uow.raise(order)?;
        }
        uow.commit().await?;
        let fixture = Self {
            redis,
            broker,
            running: Some(running),
            handled,
            poisoned,
            dir: tempfile::tempdir()?,
        };
        eventually(WAIT, "the orders to be handled", || async {
            Ok(fixture.handled().len() == handled_count)
        })
        .await?;
        if halts > 0 {
            eventually(WAIT, "the poisoned keys to halt", || async {
                Ok(fixture.halted().await?.len() == halts)
            })
            .await?;
        }
        Ok(fixture)
    }

    /// The (client, order) pairs the projector handled, in order.
    pub fn handled(&self) -> Vec<(String, String)> {
        self.handled.lock().expect("not poisoned").clone()
    }

    /// The orders of `client` the projector handled, in order.
    pub fn handled_of(&self, client: &str) -> Vec<String> {
        self.handled()
            .into_iter()
            .filter(|(c, _)| c == client)
            .map(|(_, order)| order)
            .collect()
    }

    /// Lets the projector handle poison orders from now on.
    pub fn cure(&self) {
        self.poisoned.store(false, Ordering::SeqCst);
    }

    /// The running domain's health report.
    pub async fn health(&self) -> ordo_core::HealthReport {
        self.running.as_ref().expect("the domain runs").health().await
    }

    /// Every halted partition.
    pub async fn halted(&self) -> anyhow::Result<Vec<HaltedPartition>> {
        Ok(self.broker.admin().halted().await?)
    }

    /// Runs `ordo args...` against this Redis, from a directory without a
    /// domain.toml, with stdin not a terminal.
    pub async fn ordo(&self, args: &[&str]) -> anyhow::Result<Output> {
        ordo_on(&self.redis.url(), self.dir.path(), args).await
    }

    /// Shuts the domain down, keeping Redis and its data.
    pub async fn stop_domain(&mut self) -> anyhow::Result<()> {
        if let Some(running) = self.running.take() {
            running.shutdown().await?;
        }
        Ok(())
    }

    /// Stops the domain.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(running) = self.running.take() {
            running.shutdown().await?;
        }
        Ok(())
    }
}

/// A broker on `url` with the fast [`CONFIG`], and that configuration for
/// its domain.
pub async fn broker(url: &str) -> anyhow::Result<(RedisBroker, Config)> {
    let config = Config::from_toml_str(CONFIG)?;
    let broker = RedisBroker::builder(url).config(config.clone()).build().await?;
    Ok((broker, config))
}

/// A partitioned publication of a `Noted` event to `key` of `category`
/// (no handler is registered for it), with payload `{"seq": seq}`.
pub fn noted(category: &str, key: &str, seq: u64) -> Publication {
    let envelope = Envelope {
        id: format!("m-{seq}"),
        kind: MessageKind::Event,
        type_name: "Noted".to_owned(),
        category: category.to_owned(),
        aggregate_id: None,
        routing_key: None,
        partition_key: Some(key.to_owned()),
        metadata: Metadata::new(),
        occurred_at: None,
        correlation_id: None,
        causation_id: None,
        payload: format!("{{\"seq\":{seq}}}").into(),
    };
    Publication::to_partition(key, Lane::Primary, envelope)
}

/// What a run of the binary printed and how it exited.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Fails unless the exit code is `code`, showing the output.
    pub fn expect_code(self, code: i32) -> anyhow::Result<Self> {
        if self.code != code {
            bail!(
                "expected exit code {code}, got {}:\nstdout:\n{}\nstderr:\n{}",
                self.code,
                self.stdout,
                self.stderr
            );
        }
        Ok(self)
    }

    /// Fails unless the stdout contains `text`, showing the stdout.
    pub fn expect_stdout(&self, text: &str) -> anyhow::Result<&Self> {
        if !self.stdout.contains(text) {
            bail!("expected `{text}` in the stdout:\n{}", self.stdout);
        }
        Ok(self)
    }

    /// Fails unless the stderr contains `text`, showing the stderr.
    pub fn expect_stderr(&self, text: &str) -> anyhow::Result<&Self> {
        if !self.stderr.contains(text) {
            bail!("expected `{text}` in the stderr:\n{}", self.stderr);
        }
        Ok(self)
    }

    /// The stdout as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("stdout is not JSON:\n{}", self.stdout))
    }
}

/// Runs `ordo --redis-url url args...` in `dir`, with stdin not a terminal.
pub async fn ordo_on(url: &str, dir: &Path, args: &[&str]) -> anyhow::Result<Output> {
    let mut all = vec!["--redis-url", url];
    all.extend_from_slice(args);
    ordo_in(dir, &all, &[]).await
}

/// Runs the `ordo` binary in `dir` with `args` and extra environment.
pub async fn ordo_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Output> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_ordo"));
    command
        .args(args)
        .current_dir(dir)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .context("ordo did not finish within 30 s")??;
    Ok(Output {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout)?,
        stderr: String::from_utf8(output.stderr)?,
    })
}
