//! The heartbeat: renews every lease this instance holds, in one script call
//! per interval, whatever the handlers do.
//!
//! It runs on its own OS thread with its own single-threaded runtime and
//! its own Redis connection: a handler that blocks every runtime worker
//! thread, or a blocking read holding a connection, cannot delay a renewal.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fred::clients::Client;
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{LeaseTable, Settings};
use crate::connection;
use crate::error::Result;
use crate::lease;

/// A lease the heartbeat found lost (taken over, expired or reaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LostLease {
    pub(crate) key: String,
    pub(crate) value: String,
}

/// Starts the heartbeat thread; it stops when `stop` is cancelled.
pub(crate) fn spawn(
    url: &str,
    settings: &Settings,
    leases: LeaseTable,
    lost: UnboundedSender<LostLease>,
    stop: CancellationToken,
) -> Result<JoinHandle<()>> {
    // Renewal commands must finish well within an interval.
    let builder = connection::builder(url, settings.heartbeat_interval / 2, false)?;
    let ttl = settings.lease_ttl;
    let interval = settings.heartbeat_interval;
    let thread = std::thread::Builder::new()
        .name("ordo-heartbeat".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "cannot start the heartbeat runtime; leases will not be renewed");
                    return;
                }
            };
            runtime.block_on(async move {
                let client = match builder.build() {
                    Ok(client) => client,
                    Err(error) => {
                        tracing::error!(%error, "cannot build the heartbeat client; leases will not be renewed");
                        return;
                    }
                };
                connection::connect_in_background(&client);
                beat(&client, ttl, interval, &leases, &lost, &stop).await;
                connection::quit(&client, interval).await;
            });
        })
        .map_err(|e| crate::error::Error::Config {
            key: "heartbeat",
            reason: format!("cannot start the heartbeat thread: {e}"),
        })?;
    Ok(thread)
}

async fn beat(
    client: &Client,
    ttl: Duration,
    interval: Duration,
    leases: &LeaseTable,
    lost: &UnboundedSender<LostLease>,
    stop: &CancellationToken,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Leases renewed by a call that started at `renewed` are valid until
    // `renewed + ttl`; give them up one interval before that when renewals
    // keep failing, so their workers stop before another owner can start.
    let mut renewed = Instant::now();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => return,
        }
        let held = leases.snapshot();
        let started = Instant::now();
        if held.is_empty() {
            renewed = started;
            continue;
        }
        match lease::renew(client, ttl, held.iter().map(|(k, v)| (k.as_str(), v.as_str()))).await {
            Ok(positions) => {
                renewed = started;
                debug!(leases = held.len(), lost = positions.len(), "leases renewed");
                for position in positions {
                    if let Some((key, value)) = held.get(position) {
                        give_up(leases, lost, key, value);
                    }
                }
            }
            Err(error) if started.duration_since(renewed) + interval >= ttl => {
                warn!(%error, leases = held.len(), "renewals failed for a lease TTL; giving up every lease");
                for (key, value) in &held {
                    give_up(leases, lost, key, value);
                }
            }
            Err(error) => warn!(%error, leases = held.len(), "lease renewal failed; retrying next beat"),
        }
    }
}

/// Forgets a lost lease and tells the supervisor, unless its worker already
/// let go of it.
fn give_up(leases: &LeaseTable, lost: &UnboundedSender<LostLease>, key: &str, value: &str) {
    if leases.remove(key, value) {
        let _ = lost.send(LostLease {
            key: key.to_owned(),
            value: value.to_owned(),
        });
    }
}
