//! Publishes numbered [`Tick`] events the way an application does: raised
//! in units of work, committed to the outbox, published by the outbox
//! processor to the partition streams.
//!
//! Events go round-robin over the keys (seq `s` of every key before seq
//! `s + 1` of any), so every key's events are in flight together. Once all
//! are published, each key's published count is raised in
//! [`keys::PUBLISHED`] for [`verify`](crate::verify).

use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use fred::interfaces::LuaInterface;
use fred::types::Value;
use ordo_redis::RedisBroker;

use crate::error::{HarnessError, Result};
use crate::keys;
use crate::tick::{self, Tick};
use crate::worker::{TickHandler, domain};

/// Events per unit of work.
const EVENTS_PER_COMMIT: usize = 100;

const PUBLISHED: &str = include_str!("lua/published.lua");

/// What to publish.
///
/// Its `Debug` shows the Redis URL with its password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct PublishOptions {
    /// The Redis URL.
    pub redis_url: String,
    /// The keys to publish to.
    pub keys: Vec<String>,
    /// Events per key.
    pub events: u64,
    /// The seq of each key's first event (to continue an earlier publish).
    pub first_seq: u64,
    /// Each event's `work_ms`.
    pub work_ms: u64,
    /// Each event's `linger_ms`.
    pub linger_ms: u64,
    /// Whether the events are poison.
    pub poison: bool,
    /// How long to wait for the outbox to be published.
    pub deadline: Duration,
    /// The workers' `[categories.chaos] partitions`: `None` for a
    /// partition per key, or that many hashed partitions.
    pub hashed_partitions: Option<NonZeroU32>,
}

impl std::fmt::Debug for PublishOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublishOptions")
            .field("redis_url", &ordo_redis::redact_url(&self.redis_url))
            .field("keys", &self.keys)
            .field("events", &self.events)
            .field("first_seq", &self.first_seq)
            .field("work_ms", &self.work_ms)
            .field("linger_ms", &self.linger_ms)
            .field("poison", &self.poison)
            .field("deadline", &self.deadline)
            .field("hashed_partitions", &self.hashed_partitions)
            .finish()
    }
}

impl PublishOptions {
    /// `events` ordinary events, seqs `0..events`, for each of `keys`.
    pub fn new(redis_url: impl Into<String>, keys: Vec<String>, events: u64) -> Self {
        Self {
            redis_url: redis_url.into(),
            keys,
            events,
            first_seq: 0,
            work_ms: 0,
            linger_ms: 0,
            poison: false,
            deadline: Duration::from_secs(30),
            hashed_partitions: None,
        }
    }
}

/// The keys `k0`..`k{count - 1}`.
pub fn key_names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("k{i}")).collect()
}

/// Publishes the events and waits until the outbox has published them all;
/// returns how many were published.
pub async fn publish(options: &PublishOptions) -> Result<u64> {
    let config = tick::config(options.hashed_partitions);
    let broker = RedisBroker::builder(&options.redis_url)
        .config(config.clone())
        .build()
        .await
        .map_err(HarnessError::Broker)?;
    let client = broker.client().clone();
    let domain = domain(broker, TickHandler::new(client.clone(), "publisher"), config)?;

    let ticks = ticks(options);
    for chunk in ticks.chunks(EVENTS_PER_COMMIT) {
        let mut uow = domain.unit_of_work();
        for tick in chunk {
            uow.raise(tick.clone()).map_err(HarnessError::Commit)?;
        }
        uow.commit().await.map_err(HarnessError::Commit)?;
    }
    let started = Instant::now();
    if !matches!(
        tokio::time::timeout(options.deadline, domain.settle()).await,
        Ok(Ok(()))
    ) {
        return Err(HarnessError::PublishTimeout {
            waited_ms: started.elapsed().as_millis(),
        });
    }

    let mut args = Vec::new();
    for key in &options.keys {
        args.push(Value::from(key.as_str()));
        args.push(Value::from((options.first_seq + options.events).to_string()));
    }
    let _: i64 = client
        .eval(PUBLISHED, vec![keys::PUBLISHED], args)
        .await
        .map_err(HarnessError::redis("record the published counts"))?;
    Ok(ticks.len() as u64)
}

/// The events, round-robin over the keys.
fn ticks(options: &PublishOptions) -> Vec<Tick> {
    let seqs = options.first_seq..options.first_seq + options.events;
    seqs.flat_map(|seq| {
        options.keys.iter().map(move |key| Tick {
            key: key.clone(),
            seq,
            poison: options.poison,
            work_ms: options.work_ms,
            linger_ms: options.linger_ms,
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_go_round_robin_over_the_keys() {
        let mut options = PublishOptions::new("redis://unused", key_names(2), 2);
        options.first_seq = 5;
        let order: Vec<(String, u64)> = ticks(&options).into_iter().map(|t| (t.key, t.seq)).collect();
        let expected = [("k0", 5), ("k1", 5), ("k0", 6), ("k1", 6)].map(|(k, s)| (k.to_owned(), s));
        assert_eq!(order, expected);
    }
}
