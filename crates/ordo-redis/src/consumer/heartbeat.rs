//! The heartbeat: renews this process's member key (one `PEXPIRE` per
//! interval, whatever the number of leases: a lease has no TTL of its own
//! and is held while its holder's member key lives), whatever the handlers
//! do.
//!
//! It runs on its own OS thread with its own single-threaded runtime and
//! its own Redis connection: a handler that blocks every runtime worker
//! thread, or a blocking read holding a connection, cannot delay a renewal.
//! It kills every worker when it finds the member key expired (another
//! instance may take any lease over from then on), and when renewals keep
//! failing, before the key can expire (see [`must_give_up`]).
//!
//! A lease left lingering by a worker whose aborted handler runs go on
//! (see [`LeaseTable`]) stays held (the member key renewed) until the runs
//! have ended, then is released; the heartbeat outlives its stop signal for
//! as long as such a lease is left, and deletes the member key last.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fred::clients::Client;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::shared::{LeaseTable, Settings};
use crate::error::Result;
use crate::net::connection;
use crate::owner::lease;
use crate::owner::member::{Membership, Renewal};

/// Starts the heartbeat thread; it stops when `stop` is cancelled.
pub(crate) fn spawn(
    url: &str,
    settings: &Settings,
    leases: LeaseTable,
    membership: Arc<Membership>,
    renewals: RenewalSignal,
    stop: CancellationToken,
) -> Result<JoinHandle<()>> {
    let timing = Timing {
        ttl: settings.lease_ttl,
        interval: settings.heartbeat_interval,
        // Renewal commands must finish well within an interval.
        call_timeout: settings.heartbeat_interval / 2,
    };
    let builder = connection::builder(url, &settings.tls, timing.call_timeout, false)?;
    let thread = std::thread::Builder::new()
        .name("ordo-heartbeat".to_owned())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(error = %ordo_core::contract::error::error_chain(&error), "cannot start the heartbeat runtime; leases will not be renewed");
                    return;
                }
            };
            runtime.block_on(async move {
                let client = match builder.build() {
                    Ok(client) => client,
                    Err(error) => {
                        tracing::error!(error = %ordo_core::contract::error::error_chain(&error), "cannot build the heartbeat client; leases will not be renewed");
                        return;
                    }
                };
                connection::connect_in_background(&client);
                beat(&client, timing, &membership, &leases, &renewals, &stop).await;
                // Every lease was released or given up: the member goes
                // last (before, another instance could take over a lease
                // whose run goes on here).
                if let Err(error) = membership.leave(&client).await {
                    warn!(error = %ordo_core::contract::error::error_chain(&error), "deleting this member's key failed; it expires within a lease TTL");
                }
                renewals.renewed();
                connection::quit(&client, timing.interval).await;
            });
        })
        .map_err(|e| crate::error::Error::Config {
            key: "heartbeat",
            reason: format!("cannot start the heartbeat thread: {e}"),
        })?;
    Ok(thread)
}

/// Whether renewing the held leases is failing, for the broker's health
/// report: set at a failed renewal, cleared at the next successful one.
#[derive(Debug, Clone, Default)]
pub(crate) struct RenewalSignal(Arc<Mutex<Option<String>>>);

impl RenewalSignal {
    fn failed(&self, error: &crate::error::Error) {
        *self.lock() = Some(error.to_string());
    }

    fn renewed(&self) {
        *self.lock() = None;
    }

    /// The last renewal error, while renewals are failing.
    pub(crate) fn failing(&self) -> Option<String> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        // One assignment under the lock: a poisoned value is still whole.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The heartbeat's timings.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttl: Duration,
    interval: Duration,
    /// How long a renewal call may take before it counts as failed.
    call_timeout: Duration,
}

async fn beat(
    client: &Client,
    timing: Timing,
    membership: &Membership,
    leases: &LeaseTable,
    renewals: &RenewalSignal,
    stop: &CancellationToken,
) {
    let mut ticker = tokio::time::interval(timing.interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The member renewed by a call that started at `renewed` lives until
    // at least `renewed + ttl`.
    let mut renewed = Instant::now();
    loop {
        // Once stopped, only leases lingering for runs still going on are
        // left (every worker has stopped): beat on for them.
        if stop.is_cancelled() && leases.lingering() == 0 {
            return;
        }
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled(), if !stop.is_cancelled() => continue,
        }
        release_ended(client, timing.ttl, leases).await;
        let started = Instant::now();
        match membership.renew(client).await {
            Ok(Renewal::Renewed(owner, until)) => {
                renewed = started;
                renewals.renewed();
                // Leases of another identity are an expired member's of
                // this process (an acquisition found it expired before this
                // beat did): they may be taken over already.
                let mine = format!("{}:", owner.identity());
                let (held, expired): (Vec<_>, Vec<_>) = leases
                    .snapshot()
                    .into_iter()
                    .partition(|(_, value)| value.starts_with(&mine));
                for (key, value) in &expired {
                    if leases.give_up(key, value) {
                        warn!(event = ordo_core::contract::log_events::LEASE_LOST, lease = %key, "the lease was held by an expired membership of this process; stopping its worker");
                    }
                }
                debug!(leases = held.len(), "member renewed");
                leases.renewed(&held, until);
            }
            Ok(Renewal::Unregistered) => {
                renewed = started;
                renewals.renewed();
            }
            Ok(Renewal::Expired(identity)) => {
                renewed = started;
                renewals.renewed();
                let held = leases.snapshot();
                warn!(event = ordo_core::contract::log_events::LEASE_LOST, member = %identity, leases = held.len(), "this process's member key expired (it was stalled, or cut off from Redis, for a lease TTL): every lease it held may be taken over; stopping their workers, the next round acquires as a new member");
                for (key, value) in &held {
                    leases.give_up(key, value);
                }
            }
            Err(error) if must_give_up(started.duration_since(renewed), timing) => {
                renewals.failed(&error);
                let held = leases.snapshot();
                warn!(event = ordo_core::contract::log_events::LEASE_LOST, error = %ordo_core::contract::error::error_chain(&error), leases = held.len(), "renewals failed for most of a lease TTL; giving up every lease");
                for (key, value) in &held {
                    leases.give_up(key, value);
                }
            }
            Err(error) => {
                renewals.failed(&error);
                warn!(event = ordo_core::contract::log_events::LEASE_RENEWAL_FAILED, error = %ordo_core::contract::error::error_chain(&error), "renewing the member key failed; retrying next beat");
            }
        }
    }
}

/// Releases the lingering leases whose handler runs have all ended (a
/// lease that cannot be released now is taken over once the member key is
/// gone).
async fn release_ended(client: &Client, ttl: Duration, leases: &LeaseTable) {
    for lease in leases.ended() {
        match lease::release(client, &lease, ttl).await {
            Ok(released) => {
                info!(lease = %lease.key(), released, "the handler runs kept after their worker stopped have ended; lease released");
            }
            Err(error) => {
                warn!(%error, lease = %lease.key(), "the handler runs kept after their worker stopped have ended; releasing the lease failed, it is taken over once this member's key is gone");
            }
        }
    }
}

/// Whether a renewal that failed `since_renewed` after the start of the last
/// successful one must give every lease up now.
///
/// The member (and so every lease) lives until at least `ttl` after that
/// start. The next chance to renew starts one interval after this one, and
/// its failure is known only when its call times out; the workers must be
/// stopped before the member key can expire, with a margin (another call
/// timeout) for their handlers to be aborted. So give up now unless the next renewal's outcome
/// is known with that margin to spare.
fn must_give_up(since_renewed: Duration, timing: Timing) -> bool {
    since_renewed + timing.interval + 2 * timing.call_timeout >= timing.ttl
}

#[cfg(test)]
mod tests {
    use super::*;

    /// When every renewal after a successful one fails by timing out: how
    /// long after that successful one the leases are given up (the failed
    /// call that decides it has returned).
    fn give_up_after(timing: Timing) -> Duration {
        let mut beat = timing.interval;
        while !must_give_up(beat, timing) {
            beat += timing.interval;
        }
        beat + timing.call_timeout
    }

    fn timing(ttl_ms: u64, interval_ms: u64) -> Timing {
        Timing {
            ttl: Duration::from_millis(ttl_ms),
            interval: Duration::from_millis(interval_ms),
            call_timeout: Duration::from_millis(interval_ms) / 2,
        }
    }

    /// Every valid configuration (a heartbeat at most a third of the TTL):
    /// the workers are stopped at least half an interval before the leases
    /// can expire. (Giving up when `since + interval >= ttl` stopped them
    /// after expiry when the TTL is not a multiple of the interval, e.g.
    /// 10.5 s into a 10 s lease with a 3 s heartbeat.)
    #[test]
    fn leases_are_given_up_before_they_can_expire() {
        for ttl_ms in [900, 1_000, 2_500, 3_000, 10_000, 15_000, 15_001, 29_999] {
            for interval_ms in (100..=ttl_ms / 3).step_by(7) {
                let timing = timing(ttl_ms, interval_ms);
                let given_up = give_up_after(timing);
                assert!(
                    given_up + timing.interval / 2 <= timing.ttl,
                    "ttl {ttl_ms} ms, heartbeat {interval_ms} ms: given up after {given_up:?}"
                );
            }
        }
    }

    /// A single failed renewal is not enough to give up when the TTL spans
    /// several intervals (the default is five).
    #[test]
    fn one_failed_renewal_is_tolerated_with_the_default_timing() {
        let timing = timing(15_000, 3_000);
        assert!(!must_give_up(timing.interval, timing));
        assert_eq!(give_up_after(timing), Duration::from_millis(10_500));
    }
}
