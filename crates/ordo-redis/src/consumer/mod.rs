//! The consumer: one per engine instance, running every subscription.
//!
//! Tasks of one instance:
//! - the **supervisor** ([`supervisor`]) announces the instance, discovers
//!   partitions from the category indexes, computes this instance's fair
//!   share ([`balance`]), acquires leases up to it and releases surplus;
//! - one **worker** per owned unit ([`worker`]: a partition, or a process
//!   manager's correlation value) reads, handles and acknowledges under the
//!   lease, strictly one message at a time, with one of two sibling
//!   runners ([`per_key`], [`hashed`]) over the [`delivery`] they share;
//! - the **waker** ([`waker`]) arms an idle partition's doorbell, which the
//!   next publish to it rings on a sharded Pub/Sub channel the waker listens
//!   to, and wakes only the workers whose partitions rang, so idle partitions
//!   cost nothing each; once per `recheck_interval` it re-checks its
//!   subscriptions and every armed doorbell with one script per node, so a
//!   ring Redis dropped (a failover, a slot move) or an entry added without
//!   the publish script is noticed within that time;
//! - the **heartbeat** ([`heartbeat`]) renews this process's member key
//!   (every held lease lives as long as it does) with one `PEXPIRE` per
//!   interval, on its own thread, runtime and connection, so no handler can
//!   starve it, and kills every worker when the key expired or cannot be
//!   renewed in time;
//! - **plain consumers** ([`plain`]) read non-partitioned categories' base
//!   streams through an ordinary consumer group.
//!
//! What every task shares (settings, the lease table) is in [`shared`];
//! counters and histograms in [`metrics`].
//!
//! May import: `owner`, `store`, `net` and the crate's error; never `ops`.

pub(crate) mod balance;
pub(crate) mod delivery;
pub(crate) mod group_commit;
pub(crate) mod hashed;
pub(crate) mod heartbeat;
pub(crate) mod local;
pub(crate) mod metrics;
pub(crate) mod per_key;
pub(crate) mod plain;
pub(crate) mod shared;
pub(crate) mod supervisor;
pub(crate) mod unit;
pub(crate) mod waker;
pub(crate) mod worker;

use std::sync::Arc;
use std::time::Duration;

use ordo_core::contract::broker::Subscription;
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::net::connection;
use crate::net::secret::SecretUrl;
use crate::owner::partition::Partitions;

use shared::{LeaseTable, Settings, Shared};

/// How a consumer ended: its result, and the heartbeat's thread when it
/// goes on for leases kept for handler runs that outlived their workers.
#[derive(Debug)]
pub(crate) struct Stopped {
    /// The supervisor's result.
    pub(crate) result: Result<()>,
    /// The heartbeat, still renewing the leases of runs aborted at shutdown
    /// that are still going on; it ends (and releases them) once they have.
    pub(crate) lingering: Option<std::thread::JoinHandle<()>>,
}

/// Runs this instance's consumer for `subscriptions` until `shutdown` is
/// cancelled; returns once every worker stopped and released its lease, or
/// left it to the heartbeat for a run still going on ([`Stopped::lingering`]).
pub(crate) async fn run(
    url: SecretUrl,
    settings: Settings,
    partitions: Partitions,
    subscriptions: Arc<[Subscription]>,
    shutdown: CancellationToken,
    renewals: heartbeat::RenewalSignal,
    locals: Arc<local::LocalOwners>,
) -> Result<Stopped> {
    let background = CancellationToken::new();
    let waker_client =
        connection::subscriber_builder(url.expose(), &settings.tls)?.build_subscriber_client()?;
    connection::connect_in_background(&waker_client);
    let (waker, waker_handle) = waker::Waker::new(
        waker_client.clone(),
        partitions.client().clone(),
        settings.poll_interval,
        settings.recheck_interval,
    );
    let waker_task = tokio::spawn(waker.run(background.clone()));

    let leases = LeaseTable::default();
    let heartbeat = heartbeat::spawn(
        url.expose(),
        &settings,
        leases.clone(),
        partitions.membership().clone(),
        renewals,
        background.clone(),
    )?;

    let handler_permits = Arc::new(tokio::sync::Semaphore::new(settings.max_concurrency));
    let (acks, committer) = group_commit::GroupCommit::spawn(partitions.clone(), background.clone());
    let shared = Arc::new(Shared {
        handler_permits,
        locals,
        acks,
        settings,
        partitions,
        leases,
        waker: waker_handle,
        url,
    });
    for subscription in subscriptions.iter() {
        let name = subscription.name();
        tracing::info!(
            event = ordo_core::contract::log_events::CONSUMER_STARTED,
            handler = name,
            categories = ?subscription.categories(),
            partitioned = subscription.partitioned(),
            instance = shared.instance(),
            "consumer started for handler {name}"
        );
    }
    let instance = shared.instance().to_owned();
    let result = supervisor::Supervisor::new(shared.clone(), &subscriptions)
        .run(shutdown)
        .await;

    tracing::debug!("workers stopped; stopping the committer, the waker and the heartbeat");
    let lingering = shared.leases.lingering();
    background.cancel();
    let _ = committer.await;
    let _ = waker_task.await;
    tracing::debug!("waker stopped");
    let lingering = if lingering == 0 {
        let _ = tokio::task::spawn_blocking(move || heartbeat.join()).await;
        tracing::debug!("heartbeat stopped");
        None
    } else {
        // Its thread goes on renewing their leases, and releases each once
        // its runs have ended; if the process exits first, they end with it
        // and the leases expire.
        tracing::warn!(
            event = ordo_core::contract::log_events::LEASE_KEPT_FOR_RUN,
            leases = lingering,
            "handler runs aborted at shutdown are still going on (in blocking code); their leases stay \
             renewed until they end, so no other instance runs their keys meanwhile"
        );
        Some(heartbeat)
    };
    connection::quit(&waker_client, Duration::from_secs(1)).await;
    match &result {
        Ok(()) => {
            tracing::info!(event = ordo_core::contract::log_events::CONSUMER_STOPPED, %instance, "consumer stopped")
        }
        Err(error) => tracing::info!(
            event = ordo_core::contract::log_events::CONSUMER_STOPPED,
            %instance,
            error = %ordo_core::contract::error::error_chain(error),
            "consumer stopped"
        ),
    }
    Ok(Stopped { result, lingering })
}
