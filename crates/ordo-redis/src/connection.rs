//! How the broker's Redis clients are configured.
//!
//! Every client reconnects forever with a capped exponential delay, so the
//! consumer survives a Redis restart: commands fail (or time out) while
//! Redis is away, the consumer backs off and retries, and leases that
//! expired meanwhile are re-acquired.

use std::time::Duration;

use fred::clients::Pool;
use fred::prelude::{Builder, ClientLike};
use fred::types::config::{Blocking, Config as FredConfig, ReconnectPolicy};

use crate::error::{Error, Result};

/// Reconnect delays: from 100 ms doubling up to 2 s, forever.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 100, 2_000, 2)
}

/// The client configuration for `url`.
fn config(url: &str) -> Result<FredConfig> {
    FredConfig::from_url(url).map_err(|e| Error::Config {
        key: "url",
        reason: format!("is not a valid Redis URL ({}): {url}", e.details()),
    })
}

/// A builder of clients for `url` whose commands time out after
/// `command_timeout` (zero: never). With `fail_fast` the first connection
/// attempt reports its failure; without, it is retried like a reconnect
/// (for background clients that must not give up).
pub(crate) fn builder(url: &str, command_timeout: Duration, fail_fast: bool) -> Result<Builder> {
    let mut config = config(url)?;
    config.fail_fast = fail_fast;
    let mut builder = Builder::from_config(config);
    builder
        .set_policy(reconnect_policy())
        .with_performance_config(|perf| perf.default_command_timeout = command_timeout);
    Ok(builder)
}

/// A builder for a client that runs blocking reads: sending any other
/// command on it interrupts the blocked read (`CLIENT UNBLOCK`), which is
/// how the waker picks up newly idle streams at once.
pub(crate) fn blocking_builder(url: &str) -> Result<Builder> {
    let mut config = config(url)?;
    config.blocking = Blocking::Interrupt;
    config.fail_fast = false;
    let mut builder = Builder::from_config(config);
    builder.set_policy(reconnect_policy());
    Ok(builder)
}

/// Starts connecting `client` without waiting: commands queue until the
/// connection is up (or time out).
pub(crate) fn connect_in_background<C: ClientLike>(client: &C) {
    // The handle resolves when the connection task ends (on quit); errors
    // on the way are retried by the reconnect policy.
    drop(client.connect());
}

/// Closes `client`'s connection, waiting at most `patience` (a connection
/// still blocked in a read may not answer `QUIT` promptly; dropping the
/// client closes it anyway).
pub(crate) async fn quit<C: ClientLike>(client: &C, patience: Duration) {
    if tokio::time::timeout(patience, client.quit()).await.is_err() {
        tracing::debug!(
            ?patience,
            "QUIT did not complete in time; dropping the connection"
        );
    }
}

/// Refuses a Redis whose `maxmemory-policy` may evict keys: Ordo's leases,
/// halt records and pending entries must never vanish under memory pressure.
pub(crate) async fn check_no_eviction(pool: &Pool) -> Result<()> {
    let info: String = pool.next().info(Some(fred::types::InfoKind::Memory)).await?;
    let policy = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("maxmemory_policy:"))
        .map(str::to_owned);
    match policy.as_deref() {
        Some("noeviction") => Ok(()),
        Some(policy) => Err(Error::Config {
            key: "maxmemory-policy",
            reason: format!(
                "is `{policy}` on this Redis, which can evict Ordo's leases, halt records and pending \
                 entries and silently break per-key ordering: set `maxmemory-policy noeviction`, or \
                 opt out with `RedisBrokerBuilder::allow_eviction(true)`"
            ),
        }),
        None => Err(Error::protocol("INFO memory", "no `maxmemory_policy` line")),
    }
}
