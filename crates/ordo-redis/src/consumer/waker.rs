//! The waker: wakes an idle worker when an entry is published to a
//! partition it waits on, at no cost per idle partition and interval.
//!
//! A worker that has read every lane of its partitions up to their end
//! registers them, each lane with the last id it saw, and waits. The waker
//! subscribes to the sharded Pub/Sub doorbell channel of each partition's
//! slot (once per slot, on its own connection), then **arms** each
//! partition's doorbell with one script that first checks that no entry
//! arrived after those ids; if one did, the worker is woken at once. The
//! publish script deletes an armed doorbell and rings its slot's channel
//! with the doorbell's name; the waker wakes the workers waiting on it.
//!
//! Because the check and the arming are one atomic step, and the
//! subscription is confirmed before the arming, a publish lands either
//! before the arming (and the worker is woken by the check) or after (and
//! rings a channel the waker listens to): no wake-up is lost while the
//! subscription holds.
//!
//! A subscription does not always hold. Rings published while the
//! subscriber is disconnected are lost: after it reconnects, the waker
//! subscribes again and wakes every waiting worker to read again. Redis 7
//! also drops a sharded subscription on a connection it keeps open when the
//! channel's slot moves, a manual `CLUSTER FAILOVER` within one shard
//! included (it sends `sunsubscribe`, which the client library drops
//! silently). And an entry added to a stream without the publish script (an
//! `XADD` by hand, a replay tool) rings nothing. So once per
//! `recheck_interval` the waker **re-checks**, as a bounded fallback:
//!
//! 1. on a Redis Cluster, it reads the slot map (`CLUSTER SLOTS`, one
//!    command) and subscribes again to every channel whose slot is served by
//!    another node than the one its subscription went to;
//! 2. then it looks at the lanes of every partition whose doorbell it
//!    armed, per node and 500 partitions (on a single Redis one `XREAD` of
//!    their lanes, on a cluster node one `recheck.lua` call): a lane with
//!    an entry after the worker's id (published while nobody listened to
//!    the ring, or added without the publish script) wakes that worker.
//!
//! Subscribing again before looking means a publish after the look rings
//! a listened channel, and one before it is found by the look: a missed or
//! never-rung wake-up is noticed within one interval (two when the slot map
//! changes while a re-check runs).
//!
//! Idle cost: nothing per partition and interval. One script per partition
//! that turns idle; per interval, one re-check script per Redis node with
//! armed doorbells (and one `CLUSTER SLOTS` on a cluster), whatever the
//! number of idle partitions. It is the same on a single Redis and on a
//! Redis Cluster, where one blocking `XREAD` over the streams of many slots
//! is refused (`CROSSSLOT`) and a sharded channel lives on the node serving
//! its slot. A failed subscription or arming falls back to waking the
//! worker after the retry delay (polling, until Redis answers again).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, Pool, SubscriberClient};
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface, PubsubInterface};
use fred::types::Value;
use fred::types::cluster::{ClusterRouting, SlotRange};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::error::Result;
use crate::net::nodes;
use crate::store::calls;
use crate::store::keys::slot_of;

/// A worker's identity for the waker.
pub(crate) type WatcherId = u64;

/// One partition a worker waits on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Bell {
    /// The partition's doorbell key.
    pub(crate) doorbell: String,
    /// The waiting worker's group (arming drops its consumer of a drained
    /// lane).
    pub(crate) group: Arc<str>,
    /// The doorbell channel of the partition's slot.
    pub(crate) channel: String,
    /// Each lane of the partition, with the last id the worker read.
    pub(crate) lanes: Vec<(String, String)>,
    /// The worker read the partition: it existed then. Such a partition
    /// whose lanes are gone when the doorbell is armed was retired since,
    /// and is not armed (the worker is woken to read again).
    pub(crate) read: bool,
}

enum Command {
    Watch {
        watcher: WatcherId,
        bells: Vec<Bell>,
        notify: Arc<Notify>,
    },
    Unwatch {
        watcher: WatcherId,
    },
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Watch { watcher, bells, .. } => f
                .debug_struct("Watch")
                .field("watcher", watcher)
                .field("bells", bells)
                .finish(),
            Self::Unwatch { watcher } => f.debug_struct("Unwatch").field("watcher", watcher).finish(),
        }
    }
}

/// Registers idle workers with the waker.
#[derive(Debug, Clone)]
pub(crate) struct WakerHandle {
    commands: UnboundedSender<Command>,
}

impl WakerHandle {
    /// Wakes `notify` once any of `bells`' partitions has an entry after the
    /// worker's ids (replacing what `watcher` watched before).
    pub(crate) fn watch(&self, watcher: WatcherId, bells: Vec<Bell>, notify: Arc<Notify>) {
        let _ = self.commands.send(Command::Watch {
            watcher,
            bells,
            notify,
        });
    }

    /// Stops watching for `watcher`.
    pub(crate) fn unwatch(&self, watcher: WatcherId) {
        let _ = self.commands.send(Command::Unwatch { watcher });
    }
}

/// What an arming task found for one registration.
#[derive(Debug)]
enum Armed {
    /// Every doorbell is armed: the worker waits for a ring (or the re-check).
    Waiting { watcher: WatcherId, registration: u64 },
    /// An entry arrived after the worker's read: wake it now.
    Ready { watcher: WatcherId, registration: u64 },
    /// The subscription or the arming failed; the retry delay has passed.
    Failed { watcher: WatcherId, registration: u64 },
}

struct Watch {
    /// Which registration of the watcher this is (arming results of an
    /// earlier one are ignored).
    registration: u64,
    bells: Vec<Bell>,
    notify: Arc<Notify>,
    /// Whether its doorbells are armed (the re-check looks at them then).
    armed: bool,
}

/// What one re-check found.
#[derive(Debug, Default)]
struct Rechecked {
    /// The registrations (watcher, registration) with a partition that needs
    /// its worker.
    news: Vec<(WatcherId, u64)>,
    /// Channels found on another node that could not be subscribed to
    /// again (the next worker waiting on one subscribes again).
    unsubscribed: Vec<String>,
}

/// The waker's state and loop.
pub(crate) struct Waker {
    subscriber: SubscriberClient,
    client: Pool,
    retry: Duration,
    recheck: Duration,
    commands: UnboundedReceiver<Command>,
    armed_tx: UnboundedSender<Armed>,
    armed: UnboundedReceiver<Armed>,
    rechecked_tx: UnboundedSender<Rechecked>,
    rechecked: UnboundedReceiver<Rechecked>,
    /// A re-check is running (one at a time).
    rechecking: bool,
    watches: HashMap<WatcherId, Watch>,
    /// The watchers waiting on each doorbell.
    waiting: HashMap<String, HashSet<WatcherId>>,
    /// The doorbell channels subscribed to (never unsubscribed: there is
    /// one per slot at most).
    subscribed: HashSet<String>,
    registrations: u64,
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker")
            .field("watches", &self.watches.len())
            .field("subscribed", &self.subscribed.len())
            .finish_non_exhaustive()
    }
}

impl Waker {
    /// A waker listening with `subscriber` (its own connections), arming
    /// with `client`, falling back to waking a worker after `retry` when
    /// Redis refuses a subscription or an arming, and re-checking its
    /// subscriptions and armed doorbells every `recheck`.
    pub(crate) fn new(
        subscriber: SubscriberClient,
        client: Pool,
        retry: Duration,
        recheck: Duration,
    ) -> (Self, WakerHandle) {
        let (commands_tx, commands) = unbounded_channel();
        let (armed_tx, armed) = unbounded_channel();
        let (rechecked_tx, rechecked) = unbounded_channel();
        let waker = Self {
            subscriber,
            client,
            retry,
            recheck,
            commands,
            armed_tx,
            armed,
            rechecked_tx,
            rechecked,
            rechecking: false,
            watches: HashMap::new(),
            waiting: HashMap::new(),
            subscribed: HashSet::new(),
            registrations: 0,
        };
        (
            waker,
            WakerHandle {
                commands: commands_tx,
            },
        )
    }

    /// Runs until `shutdown` is cancelled.
    pub(crate) async fn run(mut self, shutdown: CancellationToken) {
        let mut rings = self.subscriber.message_rx();
        let mut reconnects = self.subscriber.reconnect_rx();
        let mut rechecks = tokio::time::interval_at(tokio::time::Instant::now() + self.recheck, self.recheck);
        rechecks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return,
                reconnect = reconnects.recv() => {
                    if matches!(reconnect, Err(RecvError::Closed)) {
                        return;
                    }
                    self.resubscribe().await;
                }
                ring = rings.recv() => match ring {
                    Ok(message) => self.ring(&message.value),
                    Err(RecvError::Lagged(missed)) => {
                        debug!(missed, "doorbell rings were dropped before being read; waking every watcher");
                        self.wake_all();
                    }
                    Err(RecvError::Closed) => return,
                },
                Some(armed) = self.armed.recv() => self.armed(armed),
                Some(rechecked) = self.rechecked.recv() => self.rechecked(rechecked),
                command = self.commands.recv() => match command {
                    Some(command) => self.apply(command).await,
                    None => return,
                },
                _ = rechecks.tick() => self.start_recheck(),
            }
        }
    }

    /// After a reconnection: rings may have been lost while disconnected,
    /// so every channel is subscribed again and every watcher woken.
    ///
    /// Channel by channel, the shard channels this waker subscribed to and
    /// nothing else: fred's `resubscribe_all` also sends `SUBSCRIBE` and
    /// `PSUBSCRIBE`, without arguments when it tracks none (an error whose
    /// reply can land on the next command, failing an arming), and
    /// `unsubscribe_all` sends `UNSUBSCRIBE` and `PUNSUBSCRIBE`: commands a
    /// worker's ACL user may not run. A channel that cannot be subscribed
    /// to again is forgotten, so the next watch of its slot subscribes anew.
    async fn resubscribe(&mut self) {
        let mut failed = Vec::new();
        for channel in &self.subscribed {
            if let Err(error) = self.subscriber.ssubscribe(channel.as_str()).await {
                warn!(error = %ordo_core::contract::error::error_chain(&error), %channel, "cannot subscribe to a doorbell channel again; it is subscribed anew as workers wait");
                failed.push(channel.clone());
            }
        }
        for channel in failed {
            self.subscribed.remove(&channel);
            let _ = self.subscriber.sunsubscribe(channel).await;
        }
        debug!(
            watchers = self.watches.len(),
            "doorbell subscriber reconnected; waking every watcher"
        );
        self.wake_all();
    }

    async fn apply(&mut self, command: Command) {
        match command {
            Command::Watch {
                watcher,
                bells,
                notify,
            } => self.watch(watcher, bells, notify).await,
            Command::Unwatch { watcher } => {
                self.remove(watcher);
            }
        }
    }

    async fn watch(&mut self, watcher: WatcherId, bells: Vec<Bell>, notify: Arc<Notify>) {
        self.remove(watcher);
        self.registrations += 1;
        let registration = self.registrations;
        for bell in &bells {
            self.waiting
                .entry(bell.doorbell.clone())
                .or_default()
                .insert(watcher);
        }
        self.watches.insert(
            watcher,
            Watch {
                registration,
                bells: bells.clone(),
                notify,
                armed: false,
            },
        );
        // Subscribed before arming: a ring can only follow the arming.
        let subscribed = self.subscribe(&bells).await;
        let client = self.client.clone();
        let report = self.armed_tx.clone();
        let retry = self.retry;
        tokio::spawn(async move {
            let armed = match subscribed {
                Ok(()) => arm(&client, &bells).await,
                Err(error) => Err(error),
            };
            let outcome = match armed {
                Ok(false) => Armed::Waiting {
                    watcher,
                    registration,
                },
                Ok(true) => Armed::Ready {
                    watcher,
                    registration,
                },
                Err(error) => {
                    warn!(error = %ordo_core::contract::error::error_chain(&error), "cannot arm a doorbell; the worker reads again after the retry delay");
                    tokio::time::sleep(retry).await;
                    Armed::Failed {
                        watcher,
                        registration,
                    }
                }
            };
            let _ = report.send(outcome);
        });
    }

    /// Subscribes to the channels of `bells` not subscribed to yet.
    async fn subscribe(&mut self, bells: &[Bell]) -> Result<()> {
        for bell in bells {
            if !self.subscribed.contains(&bell.channel) {
                self.subscriber.ssubscribe(bell.channel.as_str()).await?;
                self.subscribed.insert(bell.channel.clone());
            }
        }
        Ok(())
    }

    fn armed(&mut self, armed: Armed) {
        let (Armed::Waiting {
            watcher,
            registration,
        }
        | Armed::Ready {
            watcher,
            registration,
        }
        | Armed::Failed {
            watcher,
            registration,
        }) = armed;
        let Some(watch) = self
            .watches
            .get_mut(&watcher)
            .filter(|watch| watch.registration == registration)
        else {
            return;
        };
        if matches!(armed, Armed::Waiting { .. }) {
            watch.armed = true;
        } else if let Some(watch) = self.remove(watcher) {
            watch.notify.notify_one();
        }
    }

    /// Starts a re-check of the armed doorbells (and, first, of the
    /// subscriptions), unless one is running or nothing is armed.
    fn start_recheck(&mut self) {
        if self.rechecking {
            return;
        }
        let bells: Vec<Armable> = self
            .watches
            .iter()
            .filter(|(_, watch)| watch.armed)
            .flat_map(|(watcher, watch)| {
                watch.bells.iter().map(|bell| Armable {
                    watcher: *watcher,
                    registration: watch.registration,
                    bell: bell.clone(),
                })
            })
            .collect();
        if bells.is_empty() {
            return;
        }
        self.rechecking = true;
        let subscribed: Vec<String> = self.subscribed.iter().cloned().collect();
        let (client, subscriber, report) = (
            self.client.clone(),
            self.subscriber.clone(),
            self.rechecked_tx.clone(),
        );
        tokio::spawn(async move {
            let rechecked = recheck(&client, &subscriber, &subscribed, bells).await;
            let _ = report.send(rechecked);
        });
    }

    /// Applies what a re-check found: channels to subscribe to again when
    /// next needed, and workers to wake.
    fn rechecked(&mut self, rechecked: Rechecked) {
        self.rechecking = false;
        for channel in &rechecked.unsubscribed {
            self.subscribed.remove(channel);
        }
        let mut woken = 0;
        for (watcher, registration) in rechecked.news {
            if self
                .watches
                .get(&watcher)
                .is_some_and(|watch| watch.registration == registration)
                && let Some(watch) = self.remove(watcher)
            {
                watch.notify.notify_one();
                woken += 1;
            }
        }
        if woken > 0 {
            debug!(
                woken,
                "the re-check found partitions whose doorbell never woke their worker (a ring lost, or an \
                 entry added without the publish script); their workers read again"
            );
        }
    }

    /// Wakes the watchers of the doorbell a ring names.
    fn ring(&mut self, doorbell: &Value) {
        let Some(doorbell) = doorbell.as_str() else {
            return;
        };
        let Some(watchers) = self.waiting.remove(doorbell.as_ref()) else {
            return;
        };
        for watcher in watchers {
            if let Some(watch) = self.remove(watcher) {
                watch.notify.notify_one();
            }
        }
    }

    /// Forgets `watcher`'s registration and returns it.
    fn remove(&mut self, watcher: WatcherId) -> Option<Watch> {
        let watch = self.watches.remove(&watcher)?;
        for bell in &watch.bells {
            if let Some(waiting) = self.waiting.get_mut(&bell.doorbell) {
                waiting.remove(&watcher);
                if waiting.is_empty() {
                    self.waiting.remove(&bell.doorbell);
                }
            }
        }
        Some(watch)
    }

    fn wake_all(&mut self) {
        self.waiting.clear();
        for (_, watch) in self.watches.drain() {
            watch.notify.notify_one();
        }
    }
}

/// Arms the doorbell of each of `bells`; true when one of them has an entry
/// after the worker's read or was retired since (the rest are then left
/// unarmed).
async fn arm(client: &Pool, bells: &[Bell]) -> Result<bool> {
    for bell in bells {
        if calls::consumer::arm(client, &bell.doorbell, &bell.group, bell.read, &bell.lanes).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One armed doorbell of a registration, as a re-check looks at it.
#[derive(Debug, Clone)]
struct Armable {
    watcher: WatcherId,
    registration: u64,
    bell: Bell,
}

impl Armable {
    /// A name in the partition's slot, to route its re-check by.
    fn routing(&self) -> &str {
        self.bell
            .lanes
            .first()
            .map_or(self.bell.doorbell.as_str(), |(lane, _)| lane.as_str())
    }
}

/// One re-check: the subscriptions against the cluster's slot map first,
/// then the lanes of every armed partition, per node and
/// [`RECHECK_CHUNK`] partitions. Failures are logged; the next interval
/// tries again.
async fn recheck(
    client: &Pool,
    subscriber: &SubscriberClient,
    subscribed: &[String],
    bells: Vec<Armable>,
) -> Rechecked {
    let mut rechecked = Rechecked::default();
    if subscriber.is_clustered() && !subscribed.is_empty() {
        match moved(client.next(), subscriber, subscribed).await {
            Ok(moved) if !moved.is_empty() => {
                info!(
                    channels = moved.len(),
                    "doorbell channels are served by another node since they were subscribed to (a failover \
                     or a slot move); subscribing to them again"
                );
                rechecked.unsubscribed = subscribe_again(subscriber, moved).await;
            }
            Ok(_) => {}
            Err(error) => {
                warn!(%error, "cannot check the doorbell subscriptions against the cluster's slot map; checking again next interval");
            }
        }
    }
    match news(client.next(), &bells).await {
        Ok(news) => rechecked.news = news,
        Err(error) => {
            warn!(%error, "cannot re-check the armed doorbells; checking again next interval");
        }
    }
    rechecked
}

/// The channels of `subscribed` whose slot is served by another node than
/// the one `subscriber` subscribed them on (by its view of the cluster),
/// according to the slot map `client` reads now.
async fn moved(client: &Client, subscriber: &SubscriberClient, subscribed: &[String]) -> Result<Vec<String>> {
    let slots: Value = client.cluster_slots().await?;
    let now = ClusterRouting::from_cluster_slots(slots, "")?;
    let then = subscriber.cached_cluster_state();
    Ok(subscribed
        .iter()
        .filter(|channel| {
            let slot = slot_of(channel);
            match (
                serving(&now, slot),
                then.as_ref().and_then(|then| serving(then, slot)),
            ) {
                (Some(now), Some(then)) => !same_node(now, then),
                _ => true,
            }
        })
        .cloned()
        .collect())
}

/// The slot range of `state` that `slot` is in.
fn serving(state: &ClusterRouting, slot: u16) -> Option<&SlotRange> {
    state
        .slots()
        .iter()
        .find(|range| range.start <= slot && slot <= range.end)
}

/// Whether two slot ranges are served by the same node: by its node id
/// (the address may be written differently), else by its address.
fn same_node(a: &SlotRange, b: &SlotRange) -> bool {
    if a.id.is_empty() || b.id.is_empty() {
        a.primary == b.primary
    } else {
        a.id == b.id
    }
}

/// Refreshes `subscriber`'s view of the cluster and subscribes to
/// `channels` again, on the nodes serving them now; returns those it could
/// not subscribe to.
async fn subscribe_again(subscriber: &SubscriberClient, channels: Vec<String>) -> Vec<String> {
    if let Err(error) = subscriber.sync_cluster().await {
        warn!(%error, "cannot refresh the doorbell subscriber's view of the cluster; subscribing again later");
        return channels;
    }
    let mut failed = Vec::new();
    for channel in channels {
        if let Err(error) = subscriber.ssubscribe(channel.as_str()).await {
            warn!(%error, %channel, "cannot subscribe to a doorbell channel again; its workers are re-checked meanwhile");
            failed.push(channel);
        }
    }
    failed
}

/// The registrations of `bells` with a partition that needs its worker:
/// one `recheck.lua` call per node.
async fn news(client: &Client, bells: &[Armable]) -> Result<Vec<(WatcherId, u64)>> {
    if bells.is_empty() {
        return Ok(Vec::new());
    }
    let found = nodes::once_more_if_moved(client, "recheck", || {
        nodes::per_node(client, bells, |armable| armable.routing(), recheck_on)
    })
    .await?;
    let mut news: Vec<(WatcherId, u64)> = bells
        .iter()
        .zip(found)
        .filter(|(_, found)| *found)
        .map(|(armable, _)| (armable.watcher, armable.registration))
        .collect();
    news.dedup();
    Ok(news)
}

/// Partitions per re-check call: a node's go in calls of at most this
/// many, one after the other, so no call grows with the partitions (a
/// connection keeps a buffer the size of the largest call it ever sent).
const RECHECK_CHUNK: usize = 500;

/// The re-checks of `bells` ([`RECHECK_CHUNK`] per call), all served by
/// the node `client` routes the first one's lane to; whether each needs
/// its worker.
async fn recheck_on(client: Client, bells: Vec<Armable>) -> Result<Vec<bool>> {
    let mut found = Vec::with_capacity(bells.len());
    for chunk in bells.chunks(RECHECK_CHUNK) {
        let Some(first) = chunk.first() else {
            continue;
        };
        let lanes: Vec<&[(String, String)]> = chunk
            .iter()
            .map(|armable| armable.bell.lanes.as_slice())
            .collect();
        found.extend(calls::consumer::recheck(&client, first.routing(), &lanes).await?);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fred::interfaces::{ClientLike, KeysInterface, StreamsInterface};
    use ordo_core::contract::key::Lane;
    use ordo_testkit::Redis;

    use super::*;
    use crate::net::tls::TlsFiles;
    use crate::owner::ack::Ack;
    use crate::owner::partition::{Partitions, ReadOutcome, ReapOutcome};
    use crate::store::keys::PartitionKeys;

    const DEADLINE: Duration = Duration::from_secs(10);

    async fn started(redis: &Redis) -> (Partitions, WakerHandle, CancellationToken) {
        let pool = crate::net::connection::test_pool(&redis.url(), 2).await;
        let subscriber = crate::net::connection::subscriber_builder(&redis.url(), &TlsFiles::new())
            .unwrap()
            .build_subscriber_client()
            .unwrap();
        subscriber.init().await.unwrap();
        let (waker, handle) = Waker::new(
            subscriber,
            pool.clone(),
            Duration::from_secs(60),
            Duration::from_secs(60),
        );
        let shutdown = CancellationToken::new();
        tokio::spawn(waker.run(shutdown.clone()));
        (
            Partitions::new(pool, "a", Duration::from_secs(60)),
            handle,
            shutdown,
        )
    }

    fn bell(partition: &PartitionKeys, lanes: [&str; 2], read: bool) -> Bell {
        Bell {
            doorbell: partition.doorbell(),
            group: Arc::from("G"),
            channel: partition.doorbell_channel(),
            lanes: vec![
                (partition.primary().to_owned(), lanes[0].to_owned()),
                (partition.backfill().to_owned(), lanes[1].to_owned()),
            ],
            read,
        }
    }

    /// A worker read its partition up to the end, and the partition was
    /// retired before the waker armed its doorbell (the arming task runs
    /// after the worker stopped waiting and reaped, or another group's owner
    /// reaped it). Arming it then would leave the doorbell behind for good.
    #[tokio::test]
    async fn a_partition_retired_before_its_arming_is_not_armed_and_its_watcher_reads_again() {
        let redis = Redis::start().unwrap();
        let (partitions, waker, shutdown) = started(&redis).await;
        let partition = PartitionKeys::new("waker", "k", "backfill");
        let id: String = partitions
            .client()
            .xadd(partition.primary(), false, None, "*", ("type", "T"))
            .await
            .unwrap();
        let lease = partitions.acquire("G", &partition).await.unwrap().unwrap();
        let read = partitions.read(&lease, "G", &partition, 10).await.unwrap();
        assert!(matches!(read, ReadOutcome::Entries { .. }), "{read:?}");
        partitions
            .acknowledge(&[Ack::new(&lease, "G", &partition, Lane::Primary, &[id.as_str()])])
            .await
            .unwrap();
        let ReadOutcome::Idle(idle) = partitions.read(&lease, "G", &partition, 10).await.unwrap() else {
            panic!("the partition is drained");
        };
        assert_eq!(
            partitions.reap(&lease, &partition, Duration::ZERO).await.unwrap(),
            ReapOutcome::Reaped
        );

        let notify = Arc::new(Notify::new());
        waker.watch(
            1,
            vec![bell(&partition, [&idle.primary_last, &idle.backfill_last], true)],
            notify.clone(),
        );
        tokio::time::timeout(DEADLINE, notify.notified())
            .await
            .expect("the watcher of a retired partition is woken to read again");
        let doorbell: bool = partitions.client().exists(partition.doorbell()).await.unwrap();
        assert!(!doorbell, "a retired partition's doorbell was armed");
        shutdown.cancel();
    }

    /// A process manager waits on partitions of its correlation value that
    /// do not exist yet: their doorbells are armed (for the publish that
    /// creates one to ring).
    #[tokio::test]
    async fn a_partition_not_created_yet_is_armed() {
        let redis = Redis::start().unwrap();
        let (partitions, waker, shutdown) = started(&redis).await;
        let partition = PartitionKeys::new("waker", "later", "backfill");
        let notify = Arc::new(Notify::new());
        waker.watch(1, vec![bell(&partition, ["0-0", "0-0"], false)], notify.clone());
        let client = partitions.client().clone();
        ordo_testkit::eventually(DEADLINE, "the doorbell of a partition to come armed", || {
            let (client, doorbell) = (client.clone(), partition.doorbell());
            async move { Ok(client.exists::<bool, _>(doorbell).await?) }
        })
        .await
        .unwrap();

        shutdown.cancel();
    }
}
