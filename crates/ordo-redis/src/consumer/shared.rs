//! What every task of the consumer shares: its [`Settings`], the state
//! behind [`SharedRef`] and the heartbeat's [`LeaseTable`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ordo_core::contract::attempt::StillRunning;
use ordo_core::contract::backoff::Backoff;
use tokio_util::sync::CancellationToken;

use super::{group_commit, waker};
use crate::net::secret::SecretUrl;
use crate::net::tls::TlsFiles;
use crate::owner::lease::Lease;
use crate::owner::partition::Partitions;

/// The timings and sizes the consumer runs with.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) lease_ttl: Duration,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) poll_interval: Duration,
    /// `None`: `reap_idle_ms = 0`, partitions are never retired.
    pub(crate) reap_idle: Option<Duration>,
    pub(crate) discovery_interval: Duration,
    /// The most units this instance owns at once, over all its groups
    /// (`max_owned_partitions`); `None`: no limit.
    pub(crate) max_owned: Option<std::num::NonZeroUsize>,
    /// How often the waker re-checks the idle partitions and its subscriptions.
    pub(crate) recheck_interval: Duration,
    /// `[server.partitioning]`: the handlers' retry defaults (each
    /// subscription's `retry_policy` applies its own over them).
    pub(crate) retry: ordo_core::contract::config::PartitioningConfig,
    /// The backoff of the consumer's own Redis calls that failed.
    pub(crate) backoff: Backoff,
    pub(crate) backfill_suffix: String,
    /// Which categories have hashed partitions.
    pub(crate) routing: crate::store::keys::Routing,
    pub(crate) read_batch: usize,
    /// How long a plain consumer's `XREADGROUP` blocks when nothing changes.
    pub(crate) wake_block: Duration,
    /// How many handler runs may be in flight at once across partitions.
    pub(crate) max_concurrency: usize,
    /// The TLS of every connection (`rediss://`).
    pub(crate) tls: TlsFiles,
    /// How long a command's outcome is kept under its id (`[commands]
    /// dedup_window_ms`).
    pub(crate) command_dedup_window: Duration,
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
    /// The doors of the command partitions held here (commands this
    /// instance sends to itself run in place).
    pub(crate) locals: Arc<super::local::LocalOwners>,
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
///
/// A lease whose worker has stopped but left handler runs going on (aborted
/// in blocking code: at a shutdown past its grace) **lingers**: it stays in
/// the table, renewed, until every such run has ended, and the heartbeat
/// then releases it. Nobody else runs the key meanwhile, however long the
/// run takes; if the process exits, the run ends with it and the lease
/// expires.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseTable(Arc<Mutex<HashMap<String, Held>>>);

#[derive(Debug)]
struct Held {
    value: String,
    kill: CancellationToken,
    /// The lease is valid at least until then (its acquisition, or the
    /// last renewal that included it, started a TTL before).
    valid_until: Instant,
    /// Set once its worker stopped with runs still going on (boxed: rare,
    /// and every owned partition's entry would carry its size).
    lingering: Option<Box<Lingering>>,
}

/// A lease kept for handler runs that outlived their worker.
#[derive(Debug)]
struct Lingering {
    lease: Lease,
    runs: Vec<StillRunning>,
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
                lingering: None,
            },
        );
    }

    /// Keeps `lease`, still held, renewed after its worker stopped, for as
    /// long as any of `runs` goes on (see [`LeaseTable`]); returns whether
    /// it does (not when the lease was given up or lost meanwhile: there is
    /// nothing left to keep).
    pub(crate) fn linger(&self, lease: &Lease, runs: Vec<StillRunning>) -> bool {
        let mut table = self.lock();
        match table.get_mut(lease.key()) {
            Some(held) if held.value == lease.value() => {
                held.lingering = Some(Box::new(Lingering {
                    lease: lease.clone(),
                    runs,
                }));
                true
            }
            _ => false,
        }
    }

    /// Takes out the lingering leases whose runs have all ended, to be
    /// released.
    pub(crate) fn ended(&self) -> Vec<Lease> {
        let mut table = self.lock();
        let ended: Vec<String> = table
            .iter()
            .filter(|(_, held)| {
                held.lingering
                    .as_ref()
                    .is_some_and(|lingering| lingering.runs.iter().all(StillRunning::has_ended))
            })
            .map(|(key, _)| key.clone())
            .collect();
        ended
            .iter()
            .filter_map(|key| table.remove(key)?.lingering.map(|lingering| lingering.lease))
            .collect()
    }

    /// Whether `key` lingers for runs still going on (no worker may take it
    /// up again meanwhile: this instance would adopt it as its own).
    pub(crate) fn lingers(&self, key: &str) -> bool {
        self.lock().get(key).is_some_and(|held| held.lingering.is_some())
    }

    /// How many leases linger for runs still going on.
    pub(crate) fn lingering(&self) -> usize {
        self.lock()
            .values()
            .filter(|held| held.lingering.is_some())
            .count()
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
