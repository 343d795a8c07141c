//! Hand-written implementations of what the macros generate, plus probes,
//! a recording broker and polling helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub, unused_macros, unused_imports)]

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ordo_core::contract::broker::{
    Broker, BrokerError, Capabilities, Publication, PublishError, Subscription,
};
use ordo_core::contract::handler::{
    BoxFuture, CommandHandler, EventHandler, HandledMessage, HandlerContext, HandlerDescriptor, HandlerKind,
    HandlerResult, ProcessManager,
};
use ordo_core::contract::key::KeyExtractor;
use ordo_core::contract::message::{Aggregate, Command, Envelope, Event, Message, MessageKind, PartOf};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------- aggregates

pub struct Order;
impl Aggregate for Order {
    const CATEGORY: &'static str = "order";
}

pub struct Customer;
impl Aggregate for Customer {
    const CATEGORY: &'static str = "customer";
}

/// A second aggregate type claiming `order`, for the duplicate-category check.
pub struct OrderAgain;
impl Aggregate for OrderAgain {
    const CATEGORY: &'static str = "order";
}

// ---------------------------------------------------------------- messages

macro_rules! message {
    ($ty:ident, $kind:ident, $aggregate:ident, id = $id:ident) => {
        impl Message for $ty {
            const TYPE_NAME: &'static str = stringify!($ty);
            const KIND: MessageKind = MessageKind::$kind;
            const CATEGORY: &'static str = <$aggregate as Aggregate>::CATEGORY;
            fn aggregate_id(&self) -> Option<String> {
                Some(self.$id.to_string())
            }
        }
        impl PartOf<$aggregate> for $ty {}
    };
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderPlaced {
    pub order_id: String,
    pub client_id: String,
    pub amount: u64,
}
message!(OrderPlaced, Event, Order, id = order_id);
impl Event for OrderPlaced {
    type Aggregate = Order;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderShipped {
    pub order_id: String,
    pub client_id: String,
    pub amount: u64,
}
message!(OrderShipped, Event, Order, id = order_id);
impl Event for OrderShipped {
    type Aggregate = Order;
}

/// Handled by no handler: its key comes from the JSON payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderNoted {
    pub order_id: String,
    pub client_id: Option<String>,
}
message!(OrderNoted, Event, Order, id = order_id);
impl Event for OrderNoted {
    type Aggregate = Order;
}

/// Its key field is renamed in JSON: only a typed extractor finds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderRenamed {
    pub order_id: String,
    #[serde(rename = "clientRef")]
    pub client_id: String,
}
message!(OrderRenamed, Event, Order, id = order_id);
impl Event for OrderRenamed {
    type Aggregate = Order;
}

/// A key field that holds an object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderTagged {
    pub order_id: String,
    pub client_id: HashMap<String, String>,
}
message!(OrderTagged, Event, Order, id = order_id);
impl Event for OrderTagged {
    type Aggregate = Order;
}

/// Cannot be serialised: JSON map keys must be strings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unserializable {
    pub order_id: String,
    pub bad: HashMap<(u8, u8), u8>,
}
message!(Unserializable, Event, Order, id = order_id);
impl Event for Unserializable {
    type Aggregate = Order;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomerRegistered {
    pub customer_id: String,
    pub amount: u64,
}
message!(CustomerRegistered, Event, Customer, id = customer_id);
impl Event for CustomerRegistered {
    type Aggregate = Customer;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlaceOrder {
    pub order_id: String,
    pub client_id: String,
    pub amount: u64,
}
message!(PlaceOrder, Command, Order, id = order_id);
impl Command for PlaceOrder {
    type Aggregate = Order;
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelOrder {
    pub order_id: String,
    pub client_id: String,
    pub amount: u64,
}
message!(CancelOrder, Command, Order, id = order_id);
impl Command for CancelOrder {
    type Aggregate = Order;
}

// ---------------------------------------------------------------- descriptors

/// A `KeyExtractor` reading `$field` of `$ty`, as the macros generate it.
macro_rules! extractor {
    ($ty:ty, $field:ident) => {
        ordo_core::KeyExtractor::new(stringify!($field), |message| {
            message.downcast_ref::<$ty>().map(|m| {
                ordo_core::contract::key::PartitionKey::key_value(&m.$field).map(std::borrow::Cow::into_owned)
            })
        })
    };
}
pub(crate) use extractor;

/// One handled message type.
pub fn on<M: Message>(key: Option<KeyExtractor>) -> HandledMessage {
    HandledMessage::new(M::TYPE_NAME, M::KIND, M::CATEGORY, "handle")
        .with_rust_type(ordo_core::RustType::of::<M>())
        .with_key(key)
}

/// A process manager's handled message: `correlate` plus `start`.
pub fn pm_on<M: Message>(correlate: KeyExtractor, start: bool) -> HandledMessage {
    on::<M>(Some(correlate)).with_start(start)
}

/// An event or command handler's descriptor; partitioned when it has a
/// `sequential_by` field.
pub fn handler(
    name: &'static str,
    kind: HandlerKind,
    part_of: &'static str,
    sequential_by: Option<&'static str>,
    handles: Vec<HandledMessage>,
) -> HandlerDescriptor {
    HandlerDescriptor::new(name, kind, handles)
        .with_part_of(Some(part_of))
        .with_sequential_by(sequential_by)
        .with_partitioned(sequential_by.is_some())
}

/// A process manager's descriptor.
pub fn process_manager(
    name: &'static str,
    partitioned: bool,
    handles: Vec<HandledMessage>,
) -> HandlerDescriptor {
    HandlerDescriptor::new(name, HandlerKind::ProcessManager, handles).with_partitioned(partitioned)
}

/// The static description of a test handler type.
pub trait Spec: Send + Sync + 'static {
    fn descriptor() -> HandlerDescriptor;
}

/// Declares a `Spec` marker type.
macro_rules! spec {
    ($name:ident => $descriptor:expr) => {
        pub(crate) struct $name;
        impl $crate::support::Spec for $name {
            fn descriptor() -> ordo_core::contract::handler::HandlerDescriptor {
                $descriptor
            }
        }
    };
}
pub(crate) use spec;

// ---------------------------------------------------------------- probe

/// One handler run as the probe saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub handler: &'static str,
    pub type_name: String,
    pub key: String,
    pub amount: u64,
    pub attempt: u32,
    pub partition_key: Option<String>,
    pub metadata: HashMap<String, String>,
}

/// Records handler runs per key and detects overlapping runs of one key.
pub struct Probe {
    key_field: &'static str,
    delay: Duration,
    barrier: Option<Arc<tokio::sync::Barrier>>,
    fail_first: AtomicU32,
    panic_first: AtomicU32,
    /// Runs of the message with this amount fail (0: none).
    poison_amount: std::sync::atomic::AtomicU64,
    /// While set, every run fails as a refused connection does.
    outage: std::sync::atomic::AtomicBool,
    /// Runs of the message with this amount never return (0: none).
    hang_amount: std::sync::atomic::AtomicU64,
    seen: Mutex<Vec<Seen>>,
    active: Mutex<HashMap<String, usize>>,
    overlaps: AtomicUsize,
    barrier_timeouts: AtomicUsize,
    completed: AtomicUsize,
    /// Appended to the text of every failure.
    error_text: String,
}

impl Probe {
    /// A probe keyed by the payload field `key_field`.
    pub fn new(key_field: &'static str) -> Self {
        Self {
            key_field,
            delay: Duration::ZERO,
            barrier: None,
            fail_first: AtomicU32::new(0),
            panic_first: AtomicU32::new(0),
            poison_amount: std::sync::atomic::AtomicU64::new(0),
            outage: std::sync::atomic::AtomicBool::new(false),
            hang_amount: std::sync::atomic::AtomicU64::new(0),
            seen: Mutex::new(Vec::new()),
            active: Mutex::new(HashMap::new()),
            overlaps: AtomicUsize::new(0),
            barrier_timeouts: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            error_text: String::new(),
        }
    }

    /// Every failure's error text ends with `text` (hostile text: newlines,
    /// escape sequences, megabytes).
    pub fn with_error_text(mut self, text: impl Into<String>) -> Self {
        self.error_text = text.into();
        self
    }

    /// Each run lasts at least `delay`, widening the window for overlaps.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Each run waits (up to 5 s) at a barrier of `parties` runs: only
    /// runs that are in progress at the same time get through in time.
    pub fn with_barrier(mut self, parties: usize) -> Self {
        self.barrier = Some(Arc::new(tokio::sync::Barrier::new(parties)));
        self
    }

    /// The first `n` runs fail.
    pub fn failing_first(self, n: u32) -> Self {
        self.fail_first.store(n, Ordering::SeqCst);
        self
    }

    /// Every run of a message with `amount` fails, until [`Probe::cure`].
    pub fn poisoned_by(self, amount: u64) -> Self {
        self.poison_amount.store(amount, Ordering::SeqCst);
        self
    }

    /// The poison message of [`Probe::poisoned_by`] succeeds from now on.
    pub fn cure(&self) {
        self.poison_amount.store(0, Ordering::SeqCst);
    }

    /// Every run fails with a refused connection (a dependency outage)
    /// until [`Probe::end_outage`].
    pub fn in_outage(self) -> Self {
        self.outage.store(true, Ordering::SeqCst);
        self
    }

    /// The dependency is back: runs succeed again.
    pub fn end_outage(&self) {
        self.outage.store(false, Ordering::SeqCst);
    }

    /// Runs of the message with `amount` hang (await for ever).
    pub fn hanging_on(self, amount: u64) -> Self {
        self.hang_amount.store(amount, Ordering::SeqCst);
        self
    }

    /// The first `n` runs panic.
    pub fn panicking_first(self, n: u32) -> Self {
        self.panic_first.store(n, Ordering::SeqCst);
        self
    }

    pub fn shared(self) -> Arc<Self> {
        Arc::new(self)
    }

    pub async fn run(
        &self,
        handler: &'static str,
        message: &Envelope,
        ctx: &HandlerContext,
    ) -> HandlerResult {
        let payload: serde_json::Value = serde_json::from_str(&message.payload)?;
        let key = match &payload[self.key_field] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        {
            let mut active = self.active.lock().unwrap();
            let running = active.entry(key.clone()).or_default();
            *running += 1;
            if *running > 1 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.seen.lock().unwrap().push(Seen {
            handler,
            type_name: message.type_name.clone(),
            key: key.clone(),
            amount: payload["amount"].as_u64().unwrap_or_default(),
            attempt: ctx.attempt(),
            partition_key: ctx.partition_key().map(str::to_owned),
            metadata: ctx.metadata().clone().into_iter().collect(),
        });
        if let Some(barrier) = &self.barrier
            && tokio::time::timeout(Duration::from_secs(5), barrier.wait())
                .await
                .is_err()
        {
            self.barrier_timeouts.fetch_add(1, Ordering::SeqCst);
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let amount = payload["amount"].as_u64().unwrap_or_default();
        if amount != 0 && amount == self.hang_amount.load(Ordering::SeqCst) {
            // Counted as no longer active: the run is cancelled while hanging.
            *self.active.lock().unwrap().get_mut(&key).unwrap() -= 1;
            std::future::pending::<()>().await;
        }
        *self.active.lock().unwrap().get_mut(&key).unwrap() -= 1;
        self.completed.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.panic_first) {
            panic!("induced panic in {handler}");
        }
        if take_one(&self.fail_first) {
            return Err(format!("induced failure in {handler}{}", self.error_text).into());
        }
        if self.outage.load(Ordering::SeqCst) {
            return Err(Box::new(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused (the database is down)",
            )));
        }
        if amount != 0 && amount == self.poison_amount.load(Ordering::SeqCst) {
            return Err(format!("poison message {amount} in {handler}{}", self.error_text).into());
        }
        Ok(())
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn runs(&self) -> usize {
        self.seen.lock().unwrap().len()
    }

    /// The amounts seen for `key`, in run order.
    pub fn amounts_for(&self, key: &str) -> Vec<u64> {
        self.seen()
            .into_iter()
            .filter(|s| s.key == key)
            .map(|s| s.amount)
            .collect()
    }

    /// Runs that got to their end (successful or not).
    pub fn completed(&self) -> usize {
        self.completed.load(Ordering::SeqCst)
    }

    pub fn overlaps(&self) -> usize {
        self.overlaps.load(Ordering::SeqCst)
    }

    pub fn barrier_timeouts(&self) -> usize {
        self.barrier_timeouts.load(Ordering::SeqCst)
    }
}

/// Decrements `counter` if positive; whether it did.
fn take_one(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

// ---------------------------------------------------------------- handlers

/// An event handler described by `S` that reports to a probe.
pub struct Recorder<S> {
    probe: Arc<Probe>,
    spec: PhantomData<fn() -> S>,
}

impl<S: Spec> Recorder<S> {
    pub fn new(probe: &Arc<Probe>) -> Self {
        Self {
            probe: Arc::clone(probe),
            spec: PhantomData,
        }
    }
}

impl<S: Spec> EventHandler for Recorder<S> {
    fn descriptor() -> HandlerDescriptor {
        S::descriptor()
    }

    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(self.probe.run(S::descriptor().name, message, ctx))
    }
}

/// A command handler described by `S` that reports to a probe.
pub struct CommandRecorder<S> {
    probe: Arc<Probe>,
    spec: PhantomData<fn() -> S>,
}

impl<S: Spec> CommandRecorder<S> {
    pub fn new(probe: &Arc<Probe>) -> Self {
        Self {
            probe: Arc::clone(probe),
            spec: PhantomData,
        }
    }
}

impl<S: Spec> CommandHandler for CommandRecorder<S> {
    fn descriptor() -> HandlerDescriptor {
        S::descriptor()
    }

    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(self.probe.run(S::descriptor().name, message, ctx))
    }
}

// ---------------------------------------------------------------- process manager

/// Order fulfilment: started by `OrderPlaced`, continued by `OrderShipped`,
/// both correlated by `order_id`. Described by `S`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct Fulfillment<S> {
    pub order_id: Option<String>,
    pub placed: u32,
    pub shipped: u32,
    pub amounts: Vec<u64>,
    #[serde(skip)]
    spec: PhantomData<fn() -> S>,
}

impl<S> Default for Fulfillment<S> {
    fn default() -> Self {
        Self {
            order_id: None,
            placed: 0,
            shipped: 0,
            amounts: Vec::new(),
            spec: PhantomData,
        }
    }
}

/// Correlation values being handled right now, and overlaps seen, across
/// every `Fulfillment` (tests use distinct order ids).
static PM_ACTIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());
static PM_OVERLAPS: AtomicUsize = AtomicUsize::new(0);

pub fn pm_overlaps() -> usize {
    PM_OVERLAPS.load(Ordering::SeqCst)
}

impl<S: Spec> ProcessManager for Fulfillment<S> {
    fn descriptor() -> HandlerDescriptor {
        S::descriptor()
    }

    fn handle<'a>(
        &'a mut self,
        message: &'a Envelope,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let correlation = ctx
                .process_correlation()
                .ok_or("no correlation value")?
                .to_owned();
            {
                let mut active = PM_ACTIVE.lock().unwrap();
                if active.contains(&correlation) {
                    PM_OVERLAPS.fetch_add(1, Ordering::SeqCst);
                }
                active.push(correlation.clone());
            }
            let result = self.apply(message);
            tokio::time::sleep(Duration::from_millis(1)).await;
            let mut active = PM_ACTIVE.lock().unwrap();
            let position = active.iter().position(|c| *c == correlation).unwrap();
            active.remove(position);
            result
        })
    }
}

impl<S> Fulfillment<S> {
    fn apply(&mut self, message: &Envelope) -> HandlerResult {
        match message.type_name.as_str() {
            "OrderPlaced" => {
                let event: OrderPlaced = message.decode()?;
                self.order_id = Some(event.order_id);
                self.placed += 1;
                self.amounts.push(event.amount);
            }
            "OrderShipped" => {
                let event: OrderShipped = message.decode()?;
                self.shipped += 1;
                self.amounts.push(event.amount);
            }
            other => return Err(format!("unexpected {other}").into()),
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- broker

/// A broker that records what it is asked to publish, with given
/// capabilities, and can fail part-way through the next publish.
#[derive(Debug, Clone)]
pub struct RecordingBroker {
    inner: Arc<RecordingInner>,
    /// The `[server.partitioning]` keys it declares as its own.
    partitioning_keys: &'static [&'static str],
}

#[derive(Debug)]
struct RecordingInner {
    name: &'static str,
    capabilities: Capabilities,
    published: Mutex<Vec<Publication>>,
    fail_after: Mutex<Option<usize>>,
    refuse_all: std::sync::atomic::AtomicBool,
    runs: std::sync::atomic::AtomicUsize,
    run_error: Option<&'static str>,
}

impl RecordingBroker {
    pub fn new(name: &'static str, capabilities: Capabilities) -> Self {
        Self::build(name, capabilities, None)
    }

    /// Advertises stream partitioning, like the Redis broker.
    pub fn partitioning() -> Self {
        Self::new("recording", Capabilities::STREAM_PARTITIONING)
    }

    /// Advertises nothing.
    pub fn plain() -> Self {
        Self::new("plain", Capabilities::NONE)
    }

    /// A broker whose consumer stops with `error`.
    pub fn failing_run(error: &'static str) -> Self {
        Self::build("broken", Capabilities::STREAM_PARTITIONING, Some(error))
    }

    fn build(name: &'static str, capabilities: Capabilities, run_error: Option<&'static str>) -> Self {
        Self {
            inner: Arc::new(RecordingInner {
                name,
                capabilities,
                published: Mutex::new(Vec::new()),
                fail_after: Mutex::new(None),
                refuse_all: std::sync::atomic::AtomicBool::new(false),
                runs: std::sync::atomic::AtomicUsize::new(0),
                run_error,
            }),
            partitioning_keys: &[],
        }
    }

    /// Declares `keys` of `[server.partitioning]` as the broker's own.
    pub fn reading_partitioning_keys(mut self, keys: &'static [&'static str]) -> Self {
        self.partitioning_keys = keys;
        self
    }

    /// The next publish publishes `n` publications, then fails.
    pub fn fail_next_after(&self, n: usize) {
        *self.inner.fail_after.lock().unwrap() = Some(n);
    }

    /// Every publish from now on fails before publishing anything.
    pub fn refuse_all(&self) {
        self.inner
            .refuse_all
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many times the consumer was started.
    pub fn runs(&self) -> usize {
        self.inner.runs.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn published(&self) -> Vec<Publication> {
        self.inner.published.lock().unwrap().clone()
    }

    /// Where each publication went, written `category:key`,
    /// `category:key:backfill` or `category` (a description for these
    /// tests; brokers name their streams themselves).
    pub fn streams(&self) -> Vec<String> {
        self.published()
            .into_iter()
            .map(|p| match (p.key, p.lane) {
                (Some(key), ordo_core::contract::key::Lane::Primary) => format!("{}:{key}", p.category),
                (Some(key), ordo_core::contract::key::Lane::Backfill) => {
                    format!("{}:{key}:backfill", p.category)
                }
                (None, _) => p.category,
            })
            .collect()
    }
}

impl Broker for RecordingBroker {
    fn name(&self) -> &str {
        self.inner.name
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities
    }

    fn partitioning_keys(&self) -> &'static [&'static str] {
        self.partitioning_keys
    }

    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        let fail_after = if self.inner.refuse_all.load(std::sync::atomic::Ordering::SeqCst) {
            Some(0)
        } else {
            self.inner.fail_after.lock().unwrap().take()
        };
        let mut published = self.inner.published.lock().unwrap();
        let result = match fail_after {
            Some(n) if n < publications.len() => {
                published.extend_from_slice(&publications[..n]);
                Err(PublishError {
                    published: n,
                    source: "injected broker failure".into(),
                })
            }
            _ => {
                published.extend_from_slice(publications);
                Ok(())
            }
        };
        Box::pin(async move { result })
    }

    fn run(
        &self,
        _subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        let run_error = self.inner.run_error;
        self.inner.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            if let Some(error) = run_error {
                return Err(error.into());
            }
            shutdown.cancelled().await;
            Ok(())
        })
    }
}

// ---------------------------------------------------------------- helpers

/// The text of an error and all its sources.
pub use ordo_core::contract::error::error_chain as chain;

pub fn placed(order_id: &str, client_id: &str, amount: u64) -> OrderPlaced {
    OrderPlaced {
        order_id: order_id.to_owned(),
        client_id: client_id.to_owned(),
        amount,
    }
}

pub fn shipped(order_id: &str, client_id: &str, amount: u64) -> OrderShipped {
    OrderShipped {
        order_id: order_id.to_owned(),
        client_id: client_id.to_owned(),
        amount,
    }
}
