//! Helpers shared by the ordo-redis integration tests: a real Redis from the
//! testkit, clients, publications, recording handlers and async polling.

#![allow(dead_code, unreachable_pub)]

pub mod proxy;
pub mod topology;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use fred::clients::Pool;
use fred::interfaces::StreamsInterface;
use fred::prelude::{Builder, ClientLike};
use ordo_core::DynHandler;
use ordo_core::contract::broker::{Publication, Subscription};
use ordo_core::contract::handler::{
    BoxFuture, HandledMessage, HandlerContext, HandlerDescriptor, HandlerKind, HandlerResult,
};
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::{Envelope, MessageKind, Metadata};
use ordo_core::contract::policy::{ProcessingContext, SequenceId, SequencingPolicy};
use ordo_redis::{RedisBroker, RedisFence};
use ordo_testkit::eventually;

/// Logs to the test output (`RUST_LOG`, default `ordo_redis=info`).
pub fn logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("ordo_redis=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// A connected pool on `url`.
pub async fn pool(url: &str) -> anyhow::Result<Pool> {
    let pool = Builder::from_config(ordo_redis::client_config(url)?).build_pool(2)?;
    pool.init().await?;
    Ok(pool)
}

/// Field `field` (`calls`, `failed_calls`, ...) of `command`'s line in the
/// `INFO commandstats` of the node `client` talks to (0 before its first
/// call). Commands a script runs count too.
pub async fn command_stat(client: &Pool, command: &str, field: &str) -> anyhow::Result<u64> {
    let info: String = client
        .next()
        .info(Some(fred::types::InfoKind::CommandStats))
        .await?;
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info
        .lines()
        .find_map(|line| line.trim().strip_prefix(prefix.as_str()))
    else {
        return Ok(0);
    };
    line.split(',')
        .find_map(|stat| stat.strip_prefix(field)?.strip_prefix('='))
        .with_context(|| format!("no {field} in `{line}`"))?
        .parse()
        .with_context(|| format!("{field} in `{line}`"))
}

/// A domain config with fast timings for tests.
pub fn config(lease_ttl_ms: u64, reap_idle_ms: u64, max_retries: u32) -> ordo_core::contract::config::Config {
    let text = format!(
        "[server.partitioning]\n\
         lease_ttl_ms = {lease_ttl_ms}\n\
         heartbeat_interval_seconds = {}\n\
         poll_interval_seconds = 0.1\n\
         discovery_interval_seconds = 0.1\n\
         reap_idle_ms = {reap_idle_ms}\n\
         max_retries = {max_retries}\n\
         retry_backoff_initial_ms = 10\n\
         retry_backoff_max_ms = 40\n\
         [server.priority_lanes]\n\
         enabled = true\n",
        lease_ttl_ms as f64 / 5000.0,
    );
    ordo_core::contract::config::Config::from_toml_str(&text).expect("test config is valid")
}

/// A broker on `url` with `config`.
pub async fn broker(url: &str, config: ordo_core::contract::config::Config) -> anyhow::Result<RedisBroker> {
    Ok(RedisBroker::builder(url).config(config).build().await?)
}

/// An envelope of `category` with partition key `key` and a JSON payload
/// `{"key": key, "seq": seq}`.
pub fn envelope(category: &str, type_name: &str, key: Option<&str>, seq: u64) -> Envelope {
    Envelope {
        id: uuid::Uuid::new_v4().to_string(),
        kind: MessageKind::Event,
        type_name: type_name.to_owned(),
        category: category.to_owned(),
        aggregate_id: key.map(str::to_owned),
        routing_key: None,
        partition_key: key.map(str::to_owned),
        metadata: Metadata::new(),
        occurred_at: None,
        correlation_id: None,
        causation_id: None,
        payload: serde_json::json!({ "key": key, "seq": seq }).to_string().into(),
    }
}

/// The names of `category:key`'s partition (backfill suffix `backfill`).
pub fn partition(category: &str, key: &str) -> ordo_redis::PartitionKeys {
    ordo_redis::PartitionKeys::new(category, key, "backfill")
}

/// The primary stream of `category:key`'s partition.
pub fn stream(category: &str, key: &str) -> String {
    partition(category, key).primary().to_owned()
}

/// A partitioned publication on `lane`.
pub fn publication(category: &str, key: &str, seq: u64, lane: Lane) -> Publication {
    Publication::to_partition(key, lane, envelope(category, "Happened", Some(key), seq))
}

/// Publishes `seqs` for `key` on the primary lane, in order, in one call.
pub async fn publish_seqs(
    broker: &RedisBroker,
    category: &str,
    key: &str,
    seqs: std::ops::Range<u64>,
) -> anyhow::Result<()> {
    publish_all(broker, category, &[key.to_owned()], seqs).await
}

/// Publishes `seqs` for every key of `keys` on the primary lane, seq by seq
/// (each seq for every key before the next), in one call.
pub async fn publish_all(
    broker: &RedisBroker,
    category: &str,
    keys: &[String],
    seqs: std::ops::Range<u64>,
) -> anyhow::Result<()> {
    use ordo_core::contract::broker::Broker;
    let mut publications = Vec::new();
    for seq in seqs {
        for key in keys {
            publications.push(publication(category, key, seq, Lane::Primary));
        }
    }
    broker.publish(&publications).await?;
    Ok(())
}

/// The seqs of `category:key`'s primary stream, in stream order.
pub async fn stream_seqs(client: &Pool, category: &str, key: &str) -> anyhow::Result<Vec<u64>> {
    let entries: Vec<(String, HashMap<String, String>)> =
        client.xrange(stream(category, key), "-", "+", None).await?;
    entries
        .iter()
        .map(|(id, fields)| {
            let envelope: Envelope = serde_json::from_str(
                fields
                    .get("envelope")
                    .with_context(|| format!("entry {id} has no envelope"))?,
            )?;
            Ok(seq_of(&envelope))
        })
        .collect()
}

/// `n` partition keys: `k0`, `k1`, ...
pub fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("k{i}")).collect()
}

/// The `seq` of a test payload.
pub fn seq_of(envelope: &Envelope) -> u64 {
    let payload: serde_json::Value = serde_json::from_str(&envelope.payload).expect("test payload is JSON");
    payload["seq"].as_u64().expect("test payload has a seq")
}

/// A unique category name, so tests never share streams even on one Redis.
pub fn category(prefix: &str) -> String {
    format!("{prefix}_{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// What a recording handler saw.
#[derive(Debug, Default)]
pub struct Record {
    /// (partition key, seq, fencing token) in handling order.
    pub handled: Vec<(String, u64, u64)>,
    /// Keys being handled right now.
    pub in_flight: HashSet<String>,
    /// Keys seen handled twice at the same time.
    pub overlaps: Vec<String>,
    /// The most keys handled at the same time.
    pub max_in_flight: usize,
    /// Attempts per (key, seq).
    pub attempts: BTreeMap<(String, u64), u32>,
}

/// Decides how the recording handler treats a message.
pub type Behaviour = Arc<dyn Fn(&str, u64, u32) -> Outcome + Send + Sync>;

/// What the recording handler does with one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeed,
    Fail,
    /// Fail with this error text.
    FailWith(&'static str),
    /// Succeed after sleeping this long.
    Slow(Duration),
    /// Succeed after blocking the runtime thread this long (a misbehaving
    /// handler).
    Block(Duration),
    /// Succeed after blocking this long in `block_in_place` (blocking code
    /// that an abort cannot interrupt, without starving the runtime), once
    /// the run has waited once: on the run's own task.
    BlockInPlace(Duration),
    /// The same before the run first waits: on its worker's task, which it
    /// holds until it returns.
    BlockInPlaceAtStart(Duration),
}

/// A handler that records what it handles and detects same-key overlaps.
#[derive(Clone)]
pub struct Recorder {
    pub record: Arc<Mutex<Record>>,
    behaviour: Behaviour,
}

impl Recorder {
    pub fn new() -> Self {
        Self::with(Arc::new(|_, _, _| Outcome::Succeed))
    }

    pub fn with(behaviour: Behaviour) -> Self {
        Self {
            record: Arc::default(),
            behaviour,
        }
    }

    pub fn handled(&self) -> Vec<(String, u64, u64)> {
        self.record.lock().unwrap().handled.clone()
    }

    /// The seqs handled for `key`, in order.
    pub fn seqs(&self, key: &str) -> Vec<u64> {
        self.handled()
            .into_iter()
            .filter(|(k, _, _)| k == key)
            .map(|(_, s, _)| s)
            .collect()
    }

    pub fn overlaps(&self) -> Vec<String> {
        self.record.lock().unwrap().overlaps.clone()
    }

    /// How many times `(key, seq)` was attempted, if at all.
    pub fn attempts(&self, key: &str, seq: u64) -> Option<u32> {
        self.record
            .lock()
            .unwrap()
            .attempts
            .get(&(key.to_owned(), seq))
            .copied()
    }

    /// Whether any attempt started.
    pub fn started(&self) -> bool {
        !self.record.lock().unwrap().attempts.is_empty()
    }

    /// Waits up to 10 s until the seqs handled for `key` are `expected`, in
    /// that order.
    pub async fn wait_seqs(&self, key: &str, expected: &[u64]) -> anyhow::Result<()> {
        let what = format!("{key} to handle {expected:?}");
        self.until(Duration::from_secs(10), &what, |r| r.seqs(key) == expected)
            .await
    }

    /// Waits up to `deadline` until `condition` holds of what this recorder
    /// saw; the error names `what`.
    pub async fn until(
        &self,
        deadline: Duration,
        what: &str,
        condition: impl Fn(&Self) -> bool,
    ) -> anyhow::Result<()> {
        eventually(deadline, what, || {
            let done = condition(self);
            async move { Ok(done) }
        })
        .await?;
        Ok(())
    }
}

impl DynHandler for Recorder {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let key = message.partition_key.clone().unwrap_or_default();
            let seq = seq_of(message);
            assert!(RedisFence::from_context(ctx).is_some() || ctx.fencing_token() == 0);
            {
                let mut record = self.record.lock().unwrap();
                if !record.in_flight.insert(key.clone()) {
                    record.overlaps.push(key.clone());
                }
                record.max_in_flight = record.max_in_flight.max(record.in_flight.len());
                *record.attempts.entry((key.clone(), seq)).or_default() += 1;
            }
            let outcome = (self.behaviour)(&key, seq, ctx.attempt());
            match outcome {
                Outcome::Slow(duration) => tokio::time::sleep(duration).await,
                Outcome::Block(duration) => std::thread::sleep(duration),
                Outcome::BlockInPlace(duration) => {
                    tokio::task::yield_now().await;
                    tokio::task::block_in_place(|| std::thread::sleep(duration));
                }
                Outcome::BlockInPlaceAtStart(duration) => {
                    tokio::task::block_in_place(|| std::thread::sleep(duration));
                }
                Outcome::Succeed | Outcome::Fail | Outcome::FailWith(_) => {}
            }
            let mut record = self.record.lock().unwrap();
            record.in_flight.remove(&key);
            match outcome {
                Outcome::Fail => Err(format!("poison {key}/{seq}").into()),
                Outcome::FailWith(text) => Err(format!("poison {key}/{seq}: {text}").into()),
                _ => {
                    record.handled.push((key, seq, ctx.fencing_token()));
                    Ok(())
                }
            }
        })
    }
}

/// Sequences by partition key (what `sequential_by` means in process).
#[derive(Debug)]
struct ByKey;

impl SequencingPolicy for ByKey {
    fn sequence_identifier(&self, message: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        message.partition_key.as_deref().map(SequenceId::from)
    }
}

/// A subscription named `name` of `kind` on `categories`, partitioned or
/// not, calling `handler` for messages of type `Happened`.
pub fn subscription(
    name: &'static str,
    kind: HandlerKind,
    categories: &[&str],
    partitioned: bool,
    handler: Arc<dyn DynHandler>,
) -> Subscription {
    let handles = categories
        .iter()
        .map(|category| {
            let category = Box::leak(category.to_string().into_boxed_str());
            HandledMessage::new("Happened", MessageKind::Event, category, "on_happened").with_start(true)
        })
        .collect();
    Subscription {
        descriptor: Arc::new(
            HandlerDescriptor::new(name, kind, handles)
                .with_part_of(
                    categories
                        .first()
                        .map(|c| &*Box::leak(c.to_string().into_boxed_str())),
                )
                .with_sequential_by(partitioned.then_some("key"))
                .with_partitioned(partitioned),
        ),
        policy: Arc::new(ByKey),
        policy_overridden: false,
        handler,
        settings: Default::default(),
    }
}

/// The two common shapes of [`subscription`]: an event handler group on
/// one category calling a clone of a handler for messages of type
/// `Happened`.
pub mod subscribe {
    use std::sync::Arc;

    use ordo_core::DynHandler;
    use ordo_core::contract::broker::Subscription;
    use ordo_core::contract::handler::HandlerKind;

    /// Partitioned: sequential by partition key.
    pub fn partitioned<H>(name: &'static str, category: &str, handler: &H) -> Subscription
    where
        H: DynHandler + Clone + 'static,
    {
        on(name, category, true, Arc::new(handler.clone()))
    }

    /// Plain: on the category's base stream, in no particular order.
    pub fn plain<H>(name: &'static str, category: &str, handler: &H) -> Subscription
    where
        H: DynHandler + Clone + 'static,
    {
        on(name, category, false, Arc::new(handler.clone()))
    }

    fn on(
        name: &'static str,
        category: &str,
        partitioned: bool,
        handler: Arc<dyn DynHandler>,
    ) -> Subscription {
        super::subscription(name, HandlerKind::Event, &[category], partitioned, handler)
    }
}

/// Runs `broker` for `subscriptions` in the background.
pub struct Running {
    pub shutdown: tokio_util::sync::CancellationToken,
    pub task: tokio::task::JoinHandle<Result<(), ordo_core::contract::broker::BrokerError>>,
}

impl Running {
    pub fn start(broker: &RedisBroker, subscriptions: Vec<Subscription>) -> Self {
        use ordo_core::contract::broker::Broker;
        let shutdown = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(broker.run(subscriptions.into(), shutdown.clone()));
        Self { shutdown, task }
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .context("broker did not stop in time")??;
        result.map_err(|e| anyhow::anyhow!(e))
    }
}
