//! The partition worker: the sole consumer of one owned unit.
//!
//! It runs the unit with the runner that fits it: a partition of one key
//! (or a process manager's unit) with [`super::per_key`], a hashed
//! partition with [`super::hashed`]; both stand over [`super::delivery`],
//! which retries failures as [`ordo_core::retry`] decides (a transient
//! failure is not counted; a paused handler starts nothing but its probe),
//! halts on a poison message, waits for the waker when idle and retires the
//! partition once it has been idle for `reap_idle`. When the runner returns,
//! the worker releases its lease (or leaves it to the heartbeat while an
//! aborted handler run goes on).

use std::future::Future;
use std::sync::PoisonError;

use tracing::{Instrument, debug, info_span, warn};

use super::delivery::{Exit, Worker};
use super::hashed::Hashed;
use super::metrics;
use super::per_key::PerKey;

impl Worker {
    /// Runs until stopped, killed, or the unit is gone; the lease is
    /// released (a no-op when it is already lost) and out of the
    /// heartbeat's table on return.
    pub(crate) fn run(self) -> impl Future<Output = Exit> + Send {
        let span = info_span!(
            "partition",
            group = %self.unit.group,
            partition = %self.unit.id,
            token = self.lease.token(),
        );
        // The worker is kept once, in this future (an `async move` block
        // inside an `async fn` kept it twice: the task of every owned
        // partition is that much smaller while it waits).
        self.run_in_span().instrument(span)
    }

    async fn run_in_span(self) -> Exit {
        let exit = if self.unit.partitions.iter().any(|p| p.id().is_hashed()) {
            // Boxed, as the per-key runner's pass and the release below: a
            // path taken rarely, or for a short while, does not size the
            // task every idle partition keeps.
            Box::pin(Hashed::new(&self).run()).await
        } else {
            PerKey::new(&self).run().await
        };
        self.shared.waker.unwatch(self.watcher);
        // Release even after a kill when the killed handler run has
        // ended: nothing runs under the lease any more, and releasing it
        // (if it is still ours) lets another instance take over without
        // waiting for the TTL. The release is fenced, so it is harmless
        // otherwise. A run that did not end (blocking code ignores the
        // abort; a shutdown gives up on it) keeps the lease for as long
        // as it goes on: the heartbeat renews it, and releases it once
        // the run has ended. Released now, another instance would run
        // the same key alongside it.
        let unfinished = std::mem::take(&mut *self.unfinished.lock().unwrap_or_else(PoisonError::into_inner));
        let released = if !unfinished.is_empty() {
            let runs = unfinished.len();
            if self.shared.leases.linger(&self.lease, unfinished) {
                warn!(
                    event = ordo_core::contract::log_events::LEASE_KEPT_FOR_RUN,
                    runs,
                    "aborted handler runs have not ended (blocking code); the lease stays renewed until they have, then is released"
                );
            } else {
                warn!(
                    runs,
                    "aborted handler runs have not ended and the lease is no longer held here; leaving it to expire"
                );
            }
            false
        } else {
            self.shared.leases.remove(self.lease.key(), self.lease.value());
            match Box::pin(self.shared.partitions.release(&self.lease)).await {
                Ok(released) => released,
                Err(error) => {
                    warn!(error = %ordo_core::contract::error::error_chain(&error), "releasing the lease failed; it will expire");
                    false
                }
            }
        };
        match (exit, released) {
            (Exit::Gone, _) => {}
            (_, true) => metrics::lease_released(&self.unit),
            (_, false) => metrics::lease_lost(&self.unit),
        }
        debug!(?exit, released, "partition worker stopped");
        exit
    }
}
