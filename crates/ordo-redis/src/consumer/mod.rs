//! The consumer: one per engine instance, running every subscription.
//!
//! Tasks of one instance:
//! - the **supervisor** ([`supervisor`]) announces the instance, discovers
//!   partitions from the category indexes, computes this instance's fair
//!   share ([`balance`]), acquires leases up to it and releases surplus;
//! - one **worker** per owned unit ([`worker`]: a partition, or a process
//!   manager's correlation value) reads, handles and acknowledges under the
//!   lease, strictly one message at a time;
//! - the **waker** ([`waker`]) arms an idle partition's doorbell, which the
//!   next publish to it rings on a sharded Pub/Sub channel the waker listens
//!   to, and wakes only the workers whose partitions rang, so idle partitions
//!   cost nothing each;
//! - the **heartbeat** ([`heartbeat`]) renews every held lease with one
//!   script call per Redis node and interval, on its own thread, runtime and connection, so no
//!   handler can starve it, and kills the worker of a lease it lost or
//!   cannot renew in time;
//! - **plain consumers** ([`plain`]) read non-partitioned categories' base
//!   streams through an ordinary consumer group.

pub(crate) mod balance;
pub(crate) mod group_commit;
pub(crate) mod hashed;
pub(crate) mod heartbeat;
pub(crate) mod plain;
pub(crate) mod supervisor;
pub(crate) mod unit;
pub(crate) mod waker;
pub(crate) mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ordo_core::backoff::Backoff;
use ordo_core::broker::Subscription;
use tokio_util::sync::CancellationToken;

use crate::connection;
use crate::error::Result;
use crate::partition::Partitions;
use crate::secret::SecretUrl;
use crate::tls::TlsFiles;

/// The timings and sizes the consumer runs with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) lease_ttl: Duration,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) poll_interval: Duration,
    /// `None`: `reap_idle_ms = 0`, partitions are never retired.
    pub(crate) reap_idle: Option<Duration>,
    pub(crate) discovery_interval: Duration,
    /// `[server.partitioning]`: the handlers' retry defaults (each
    /// subscription's `retry_policy` applies its own over them).
    pub(crate) retry: ordo_core::config::PartitioningConfig,
    /// The backoff of the consumer's own Redis calls that failed.
    pub(crate) backoff: Backoff,
    pub(crate) backfill_suffix: String,
    /// Which categories have hashed partitions.
    pub(crate) routing: crate::keys::Routing,
    pub(crate) read_batch: usize,
    /// How long a plain consumer's `XREADGROUP` blocks when nothing changes.
    pub(crate) wake_block: Duration,
    /// How many handler runs may be in flight at once across partitions.
    pub(crate) max_concurrency: usize,
    /// The TLS of every connection (`rediss://`).
    pub(crate) tls: TlsFiles,
}

/// What every task of a consumer shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) settings: Settings,
    pub(crate) partitions: Partitions,
    /// Sends the workers' acknowledgements, many per call.
    pub(crate) acks: group_commit::GroupCommit,
    pub(crate) leases: LeaseTable,
    pub(crate) waker: waker::WakerHandle,
    /// Bounds the handler runs in flight across every partition
    /// (`max_concurrency`); each partition still runs one at a time.
    pub(crate) handler_permits: Arc<tokio::sync::Semaphore>,
    /// The broker's Redis URL (the heartbeat and waker open their own connections).
    pub(crate) url: SecretUrl,
}

impl Shared {
    /// This instance's id.
    pub(crate) fn instance(&self) -> &str {
        self.partitions.instance()
    }
}

/// The leases this instance holds, as the heartbeat renews them: lease key
/// to expected value, and the kill switch of the worker running under it.
///
/// The heartbeat kills a worker whose lease it gave up itself, on its own
/// thread: going through the supervisor could wait behind a discovery round
/// stuck on an unreachable Redis, while the lease runs out.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseTable(Arc<Mutex<HashMap<String, Held>>>);

#[derive(Debug)]
struct Held {
    value: String,
    kill: CancellationToken,
    /// The lease is valid at least until then (its acquisition, or the
    /// last renewal that included it, started a TTL before).
    valid_until: Instant,
}

impl LeaseTable {
    /// Renews `key` while it holds `value`, valid at least until
    /// `valid_until`; `kill` stops its worker.
    pub(crate) fn insert(&self, key: &str, value: &str, kill: CancellationToken, valid_until: Instant) {
        self.lock().insert(
            key.to_owned(),
            Held {
                value: value.to_owned(),
                kill,
                valid_until,
            },
        );
    }

    /// Records that `renewed` (a snapshot's leases, less the ones lost)
    /// are valid at least until `until`.
    pub(crate) fn renewed(&self, renewed: &[(String, String)], until: Instant) {
        let mut table = self.lock();
        for (key, value) in renewed {
            if let Some(held) = table.get_mut(key)
                && held.value == *value
            {
                held.valid_until = held.valid_until.max(until);
            }
        }
    }

    /// Until when `key`, held as `value`, is surely valid (`None` when it
    /// is not held, or not as `value`, any more).
    pub(crate) fn valid_until(&self, key: &str, value: &str) -> Option<Instant> {
        self.lock()
            .get(key)
            .filter(|held| held.value == value)
            .map(|held| held.valid_until)
    }

    /// Removes `key` if it still maps to `value`; returns whether it did.
    pub(crate) fn remove(&self, key: &str, value: &str) -> bool {
        self.take(key, value).is_some()
    }

    /// Removes `key` if it still maps to `value` and kills its worker at
    /// once: the lease is lost, or may lapse before it can be renewed.
    /// Returns whether it did (not when the worker had let go already).
    pub(crate) fn give_up(&self, key: &str, value: &str) -> bool {
        let Some(held) = self.take(key, value) else {
            return false;
        };
        held.kill.cancel();
        true
    }

    pub(crate) fn snapshot(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .map(|(k, held)| (k.clone(), held.value.clone()))
            .collect()
    }

    fn take(&self, key: &str, value: &str) -> Option<Held> {
        let mut table = self.lock();
        if table.get(key).is_some_and(|held| held.value == value) {
            table.remove(key)
        } else {
            None
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        // Single inserts and removals cannot leave the map half-updated.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Sleeps `duration` unless `token` is cancelled first; returns whether the
/// full duration elapsed.
pub(crate) async fn sleep_unless(token: &CancellationToken, duration: Duration) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => true,
        () = token.cancelled() => false,
    }
}

/// A shared handle to the consumer's state.
pub(crate) type SharedRef = Arc<Shared>;

/// Runs this instance's consumer for `subscriptions` until `shutdown` is
/// cancelled; returns once every worker stopped and released its lease.
pub(crate) async fn run(
    url: SecretUrl,
    settings: Settings,
    partitions: Partitions,
    subscriptions: Arc<[Subscription]>,
    shutdown: CancellationToken,
    renewals: heartbeat::RenewalSignal,
) -> Result<()> {
    let background = CancellationToken::new();
    let waker_client =
        connection::subscriber_builder(url.expose(), &settings.tls)?.build_subscriber_client()?;
    connection::connect_in_background(&waker_client);
    let (waker, waker_handle) = waker::Waker::new(
        waker_client.clone(),
        partitions.client().clone(),
        settings.poll_interval,
    );
    let waker_task = tokio::spawn(waker.run(background.clone()));

    let leases = LeaseTable::default();
    let heartbeat = heartbeat::spawn(
        url.expose(),
        &settings,
        leases.clone(),
        renewals,
        background.clone(),
    )?;

    let handler_permits = Arc::new(tokio::sync::Semaphore::new(settings.max_concurrency));
    let (acks, committer) = group_commit::GroupCommit::spawn(partitions.clone(), background.clone());
    let shared = Arc::new(Shared {
        handler_permits,
        acks,
        settings,
        partitions,
        leases,
        waker: waker_handle,
        url,
    });
    let result = supervisor::Supervisor::new(shared, &subscriptions)
        .run(shutdown)
        .await;

    tracing::debug!("workers stopped; stopping the committer, the waker and the heartbeat");
    background.cancel();
    let _ = committer.await;
    let _ = waker_task.await;
    tracing::debug!("waker stopped");
    let _ = tokio::task::spawn_blocking(move || heartbeat.join()).await;
    tracing::debug!("heartbeat stopped");
    connection::quit(&waker_client, Duration::from_secs(1)).await;
    tracing::debug!("consumer stopped");
    result
}
