//! The steady stream of events a chaos run publishes, the way an
//! application does: `Tick`s raised in units of work, committed to the
//! outbox, published by the outbox processor to the partition streams.
//!
//! Every tick of [`TICK`] raises the events due at `--rate` since the start,
//! round-robin over the keys, each with its key's next sequence number, then
//! publishes the outbox. A publish that fails (Redis restarting) leaves its
//! rows pending, in order, for the next tick: the outbox, not this loop, is
//! what guarantees nothing is dropped. At the end the outbox is settled and
//! each key's published count is recorded for the verifier.
//!
//! In the PostgreSQL mode each tick's events are committed with `commit_in`
//! in a transaction of their own, and the relays publish them; at the end
//! nothing is settled here (the drain waits for every event to be applied).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use fred::interfaces::{ClientLike as _, HashesInterface as _};
use ordo_core::contract::config::Config;
use ordo_core::runtime::domain::Domain;
use ordo_harness::keys;
use ordo_harness::tick::Tick;
use ordo_harness::worker::{TickHandler, domain};
use ordo_postgres::{PgOutbox, UnitOfWorkExt as _};
use ordo_redis::RedisBroker;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::rng::Rng;

/// How often events are raised and the outbox published.
const TICK: Duration = Duration::from_millis(50);

/// What to publish.
#[derive(Debug, Clone)]
pub(crate) struct TrafficPlan {
    /// The Redis URL.
    pub(crate) redis_url: ordo_redis::SecretUrl,
    /// Its TLS files.
    pub(crate) tls: crate::redis::TlsPaths,
    /// The keys, in round-robin order.
    pub(crate) keys: Vec<String>,
    /// Events per second over all keys.
    pub(crate) rate: u64,
    /// The share of events (in percent) whose handler run works for a while.
    pub(crate) slow_percent: u64,
    /// The longest such work; each slow event works 1..=this many ms.
    pub(crate) slow_work_ms: u64,
    /// Chooses which events are slow and for how long.
    pub(crate) rng: Rng,
    /// How long the final settle of the outbox may take.
    pub(crate) settle_within: Duration,
    /// The PostgreSQL mode's outbox.
    pub(crate) postgres: Option<super::postgres::PgTarget>,
    /// The domain configuration the publisher routes by (the workers'
    /// `[categories.chaos] partitions`).
    pub(crate) config: Config,
    /// Held (shared) while a PostgreSQL commit is under way: a database
    /// outage takes it first.
    pub(crate) gate: std::sync::Arc<tokio::sync::RwLock<()>>,
}

/// The running publisher.
#[derive(Debug)]
pub(crate) struct Traffic {
    stop: CancellationToken,
    task: JoinHandle<Result<u64>>,
}

impl Traffic {
    /// Connects and starts publishing.
    pub(crate) async fn start(plan: TrafficPlan) -> Result<Self> {
        let config = plan.config.clone();
        let broker = RedisBroker::builder(plan.redis_url.expose())
            .tls(plan.tls.files())
            .config(config.clone())
            .instance_id("chaos-publisher")
            .build()
            .await
            .context("the publisher could not connect to Redis")?;
        let client = broker.client().clone();
        // The publisher's domain is never started: its handler never consumes.
        let domain = domain(
            broker,
            TickHandler::new(client.clone(), "chaos-publisher"),
            config,
        )
        .context("the publisher's domain could not be built")?;
        let outbox = match &plan.postgres {
            Some(target) => {
                let pool = target.connect(4).await?;
                Some(target.outbox(&pool, "chaos-publisher", ordo_postgres::DEFAULT_LEASE_TTL)?)
            }
            None => None,
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(publish(plan, domain, outbox, client, stop.clone()));
        Ok(Self { stop, task })
    }

    /// Stops raising events; the task then settles the outbox and ends.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Whether the task has ended.
    pub(crate) fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// The task's outcome: how many events were published.
    pub(crate) async fn join(self) -> Result<u64> {
        self.task.await.context("the publisher task panicked")?
    }
}

/// The publishing loop, then the settle and the published counts.
async fn publish(
    mut plan: TrafficPlan,
    domain: Domain,
    outbox: Option<PgOutbox>,
    client: fred::clients::Pool,
    stop: CancellationToken,
) -> Result<u64> {
    let mut next_seq = vec![0_u64; plan.keys.len()];
    let mut raised = 0_u64;
    let started = Instant::now();
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = ticker.tick() => {}
        }
        let due = (started.elapsed().as_secs_f64() * plan.rate as f64) as u64;
        if due > raised {
            let mut uow = domain.unit_of_work();
            while raised < due {
                let index = usize::try_from(raised % plan.keys.len() as u64).unwrap_or(0);
                uow.raise(tick(&mut plan, &mut next_seq, index))
                    .context("raising an event failed")?;
                raised += 1;
            }
            match &outbox {
                Some(outbox) => {
                    let gate = plan.gate.clone();
                    let _committing = gate.read().await;
                    let mut tx = outbox
                        .pool()
                        .begin()
                        .await
                        .context("could not begin a transaction")?;
                    uow.commit_in_outbox(outbox, &mut tx)
                        .await
                        .context("committing events in PostgreSQL failed")?;
                    tx.commit().await.context("committing the transaction failed")?;
                }
                None => {
                    uow.commit().await.context("committing events failed")?;
                }
            }
        }
        if outbox.is_none() {
            // A failure leaves the rows pending, in order, for the next tick
            // (the outbox processor logs it).
            let _ = domain.publish_pending().await;
        }
    }
    if outbox.is_none() {
        settle(&plan, &domain).await?;
    }
    let published: BTreeMap<String, u64> = plan.keys.iter().cloned().zip(next_seq).collect();
    let _: i64 = client
        .hset(keys::PUBLISHED, published)
        .await
        .context("could not record the published counts")?;
    let _ = client.quit().await;
    Ok(raised)
}

/// Publishes what the in-memory outbox still holds.
async fn settle(plan: &TrafficPlan, domain: &Domain) -> Result<()> {
    tokio::time::timeout(plan.settle_within, domain.settle())
        .await
        .with_context(|| {
            format!(
                "the outbox still had unpublished events after {:?}",
                plan.settle_within
            )
        })?
        .context("settling the outbox failed")
}

/// The next event of key number `index`.
fn tick(plan: &mut TrafficPlan, next_seq: &mut [u64], index: usize) -> Tick {
    let seq = next_seq[index];
    next_seq[index] += 1;
    let work_ms = if plan.slow_percent > 0 && plan.rng.percent(plan.slow_percent) {
        plan.rng.between(1, plan.slow_work_ms.max(1))
    } else {
        0
    };
    Tick {
        key: plan.keys[index].clone(),
        seq,
        poison: false,
        work_ms,
        linger_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(slow_percent: u64) -> TrafficPlan {
        TrafficPlan {
            redis_url: "redis://unused".into(),
            tls: crate::redis::TlsPaths::default(),
            keys: vec!["k0".to_owned(), "k1".to_owned()],
            rate: 10,
            slow_percent,
            slow_work_ms: 300,
            rng: Rng::new(5),
            settle_within: Duration::from_secs(1),
            postgres: None,
            config: Config::default(),
            gate: std::sync::Arc::default(),
        }
    }

    #[test]
    fn each_key_counts_its_own_sequence() {
        let mut plan = plan(0);
        let mut next = vec![0, 0];
        let ticks: Vec<(String, u64)> = [0, 1, 0, 0, 1]
            .into_iter()
            .map(|i| tick(&mut plan, &mut next, i))
            .map(|t| (t.key, t.seq))
            .collect();
        let expected =
            [("k0", 0), ("k1", 0), ("k0", 1), ("k0", 2), ("k1", 1)].map(|(k, s)| (k.to_owned(), s));
        assert_eq!(ticks, expected);
        assert_eq!(next, [3, 2]);
    }

    #[test]
    fn some_events_are_slow_within_the_bound() {
        let mut plan = plan(30);
        let mut next = vec![0, 0];
        let work: Vec<u64> = (0..1_000)
            .map(|i| tick(&mut plan, &mut next, i % 2).work_ms)
            .collect();
        let slow = work.iter().filter(|w| **w > 0).count();
        assert!((200..400).contains(&slow), "{slow} slow events of 1000 at 30%");
        assert!(work.iter().all(|w| *w <= 300));
        let mut none = super::tests::plan(0);
        assert_eq!(tick(&mut none, &mut next, 0).work_ms, 0);
    }
}
