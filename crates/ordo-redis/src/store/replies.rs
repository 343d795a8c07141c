//! Command outcomes as Redis keeps them: the outcome record of a command id
//! in its partition's slot (`{order.commands:c-1}:outcome:<id>`), written
//! once (`SET NX`: the first outcome wins, so every sender of the id gets
//! the same one) and kept for the deduplication window, and each sending
//! instance's reply list (`{ordo:replies:<instance>}`), which the owner
//! pushes the recorded outcome to.
//!
//! Neither is fenced: a stale owner that ran a command again (allowed for
//! the one command in flight at a failover) can only find the first
//! outcome recorded and push that one.

use std::time::Duration;

use fred::clients::Pool;
use fred::interfaces::{KeysInterface, ListInterface};
use fred::types::{Expiration, SetOptions};

use crate::error::Result;

/// How long a reply list lives after its last push: its instance reads it
/// continuously, so only a gone instance leaves one behind.
pub(crate) const REPLIES_TTL: Duration = Duration::from_secs(60);

/// Records `outcome` (JSON) under `key` for `window` unless an outcome is
/// recorded there already; returns the recorded one (`outcome` itself when
/// this call recorded it).
pub(crate) async fn record_outcome(
    client: &Pool,
    key: &str,
    outcome: &str,
    window: Duration,
) -> Result<String> {
    let millis = i64::try_from(window.as_millis()).unwrap_or(i64::MAX).max(1);
    let earlier: Option<String> = client
        .set(
            key,
            outcome,
            Some(Expiration::PX(millis)),
            Some(SetOptions::NX),
            true,
        )
        .await?;
    Ok(earlier.unwrap_or_else(|| outcome.to_owned()))
}

/// The outcome recorded under `key`, if any.
pub(crate) async fn outcome(client: &Pool, key: &str) -> Result<Option<String>> {
    Ok(client.get(key).await?)
}

/// Pushes `reply` (JSON: the command id and its outcome) to the reply list
/// `list`, which then lives [`REPLIES_TTL`] more.
pub(crate) async fn push_reply(client: &Pool, list: &str, reply: &str) -> Result<()> {
    let client = client.next();
    let pipeline = client.pipeline();
    let _: () = pipeline.rpush(list, reply).await?;
    let ttl = i64::try_from(REPLIES_TTL.as_millis()).unwrap_or(i64::MAX);
    let _: () = pipeline.pexpire(list, ttl, None).await?;
    let _: Vec<fred::types::Value> = pipeline.all().await?;
    Ok(())
}
