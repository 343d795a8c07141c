//! Publishing deduplicated by producer id and per-stream sequence (the
//! in-memory outbox's rows, `ordo_core::contract::broker::ProducerSequence`),
//! against a real Redis: a resend or a late request appends nothing twice,
//! a restarted producer (a new id) neither duplicates nor drops, a failed
//! append records nothing, and the state per stream is one small hash field
//! per producer (no per-message set).

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::Context as _;
use fred::clients::Pool;
use fred::interfaces::{ClientLike, HashesInterface, KeysInterface};
use fred::types::Value;
use ordo_core::contract::broker::{
    Broker, BrokerError, Capabilities, Publication, PublishError, Subscription,
};
use ordo_core::contract::handler::BoxFuture;
use ordo_core::contract::key::Lane;
use ordo_core::contract::outbox::{InMemoryOutbox, NewOutboxRow, Outbox};
use ordo_core::runtime::outbox::OutboxProcessor;
use ordo_redis::RedisBroker;
use tokio_util::sync::CancellationToken;

use common::topology::TestRedis;
use common::{broker, config, envelope, pool, publication};

/// `category:key`'s event with payload seq `seq`, published by `producer`
/// as its sequence `sequence`.
fn produced(category: &str, key: &str, seq: u64, producer: &Arc<str>, sequence: u64) -> Publication {
    publication(category, key, seq, Lane::Primary).with_producer(Arc::clone(producer), sequence)
}

/// A broker on `url` whose deduplication window is `window`.
async fn broker_with_window(url: &str, window: std::time::Duration) -> anyhow::Result<RedisBroker> {
    Ok(RedisBroker::builder(url)
        .config(config(15_000, 3_600_000, 0))
        .publish_dedup_window(window)
        .build()
        .await?)
}

/// `category:key`'s producer hash: producer id → last sequence appended.
async fn producers(client: &Pool, category: &str, key: &str) -> anyhow::Result<HashMap<String, u64>> {
    let fields: HashMap<String, String> = client
        .hgetall(common::partition(category, key).producers(Lane::Primary))
        .await?;
    fields
        .into_iter()
        .map(|(producer, value)| {
            let (seq, at) = value
                .split_once(':')
                .with_context(|| format!("{producer}: {value} is not <sequence>:<ms>"))?;
            anyhow::ensure!(at.parse::<u64>().is_ok(), "{value}: no time");
            Ok((producer, seq.parse()?))
        })
        .collect()
}

crate::on_both_topologies!(
    #[tokio::test]
    a_producer_resending_what_it_published_appends_nothing_twice
);

/// A resend after a lost reply holds what was appended and what was not:
/// only what was not is appended, each key in order, whatever the message
/// ids (a resend may even carry new ones). No per-message state is kept.
async fn a_producer_resending_what_it_published_appends_nothing_twice(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("producer");
    let broker = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let producer: Arc<str> = Arc::from("p-1");
    let keys = common::keys(4);
    // Sequences are the producer's over every key, as the outbox's row ids.
    let batch = |from: u64, to: u64| -> Vec<Publication> {
        (from..=to)
            .flat_map(|seq| keys.iter().enumerate().map(move |(k, key)| (seq, k as u64, key)))
            .map(|(seq, k, key)| produced(&category, key, seq, &producer, seq * 4 + k))
            .collect()
    };
    broker.publish(&batch(1, 5)).await?;
    broker.publish(&batch(3, 8)).await?;
    broker.publish(&batch(1, 8)).await?;
    for (k, key) in keys.iter().enumerate() {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (1..=8).collect::<Vec<_>>(),
            "{key}"
        );
        assert_eq!(
            producers(&client, &category, key).await?,
            HashMap::from([("p-1".to_owned(), 8 * 4 + k as u64)]),
            "{key}"
        );
        let ids = common::partition(&category, key).published(Lane::Primary);
        assert!(!client.exists::<bool, _>(&ids).await?, "no message-id set: {ids}");
    }
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_restarted_producer_neither_duplicates_nor_drops
);

/// A process restarts: its new outbox numbers its rows from 1 again under a
/// new producer id, so they are appended although their sequences are at or
/// below the old producer's; a late request of the old one appends nothing.
async fn a_restarted_producer_neither_duplicates_nor_drops(redis: TestRedis) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("restart");
    let broker: Arc<dyn Broker> = Arc::new(broker(&url, config(15_000, 3_600_000, 0)).await?);
    let client = pool(&url).await?;
    let run = |seqs: std::ops::RangeInclusive<u64>| {
        let (broker, category) = (Arc::clone(&broker), category.clone());
        async move {
            let outbox = Arc::new(InMemoryOutbox::new());
            let rows: Vec<NewOutboxRow> = seqs
                .flat_map(|seq| {
                    ["a", "b"].map(|key| {
                        NewOutboxRow::new(envelope(&category, "Happened", Some(key), seq), Lane::Primary)
                    })
                })
                .collect();
            outbox.append(rows).await?;
            let processor = OutboxProcessor::new(outbox.clone(), broker, &config(15_000, 3_600_000, 0));
            let report = processor.publish_pending().await?;
            anyhow::ensure!(report.failed == 0 && outbox.pending_count() == 0, "{report:?}");
            anyhow::Ok(Arc::<str>::from(
                outbox
                    .producer_id()
                    .context("an in-memory outbox has a producer id")?,
            ))
        }
    };
    let first = run(1..=5).await?;
    let second = run(6..=8).await?;
    assert_ne!(first, second, "a new outbox, a new producer id");
    // The first process's request for its rows 7..=10 (keys a, b of seqs 4
    // and 5), landing late.
    let late: Vec<Publication> = (4..=5)
        .flat_map(|seq| [(seq, "a", 2 * seq - 1), (seq, "b", 2 * seq)])
        .map(|(seq, key, sequence)| produced(&category, key, seq, &first, sequence))
        .collect();
    broker.publish(&late).await?;
    for key in ["a", "b"] {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (1..=8).collect::<Vec<_>>(),
            "{key}"
        );
        let last = producers(&client, &category, key).await?;
        assert_eq!(last.len(), 2, "one field per producer: {last:?}");
    }
    Ok(())
}

/// The Redis broker, but the reply of its first `lose` publishes is lost:
/// each is carried out, and the caller is told nothing was published (as
/// after a timeout).
#[derive(Debug)]
struct LosingReplies {
    inner: RedisBroker,
    lose: AtomicU32,
}

impl Broker for LosingReplies {
    fn name(&self) -> &str {
        "redis (losing replies)"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            self.inner.publish(publications).await?;
            let lost = self
                .lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if lost {
                return Err(PublishError {
                    published: 0,
                    source: BrokerError::from("the reply was lost (timed out)"),
                });
            }
            Ok(())
        })
    }

    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        self.inner.run(subscriptions, shutdown)
    }
}

/// The outbox processor publishes a backlog in several batches, the
/// replies of two of them lost: it publishes those rows again, and each
/// lands once, every key in commit order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_processor_whose_replies_were_lost_publishes_each_row_once() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start()?;
    let url = redis.url();
    let category = common::category("lost");
    let config = config(15_000, 3_600_000, 0);
    let broker = Arc::new(LosingReplies {
        inner: common::broker(&url, config.clone()).await?,
        lose: AtomicU32::new(2),
    });
    let client = pool(&url).await?;
    let outbox = Arc::new(InMemoryOutbox::new());
    let keys = common::keys(5);
    let rows: Vec<NewOutboxRow> = (1..=40)
        .flat_map(|seq| {
            keys.iter().map(move |key| (seq, key)).map(|(seq, key)| {
                NewOutboxRow::new(envelope(&category, "Happened", Some(key), seq), Lane::Primary)
            })
        })
        .collect();
    outbox.append(rows).await?;
    let processor = OutboxProcessor::new(outbox.clone(), broker.clone(), &config).with_batch_size(64);
    let mut failed = 0;
    for _ in 0..10 {
        let report = processor.publish_pending().await?;
        failed += report.failed;
        if outbox.pending_count() == 0 {
            break;
        }
    }
    assert_eq!(
        (failed, outbox.pending_count()),
        (2, 0),
        "two lost replies, then every row published"
    );
    for key in &keys {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (1..=40).collect::<Vec<_>>(),
            "{key}"
        );
    }
    Ok(())
}

/// An `XADD` that fails stops the call and records nothing of its
/// publication, but what the call appended before it is recorded: sent
/// again, those are dropped and the failed one is appended. A call takes
/// each stream's publications together, so `good`'s second one went
/// before `bad`'s: the batch's prefix reported published stops at `bad`
/// all the same, and the resend drops what was written beyond it.
#[tokio::test]
async fn a_failed_append_records_nothing_of_it_and_everything_before_it() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start()?;
    let url = redis.url();
    let category = common::category("failed");
    let broker = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let producer: Arc<str> = Arc::from("p-9");
    // `bad`'s stream is not a stream: its XADD fails (WRONGTYPE).
    let _: Value = client
        .set(common::stream(&category, "bad"), "x", None, None, false)
        .await?;
    let batch = [
        produced(&category, "good", 1, &producer, 1),
        produced(&category, "bad", 1, &producer, 2),
        produced(&category, "good", 2, &producer, 3),
    ];
    let error = broker.publish(&batch).await.expect_err("the XADD of `bad` fails");
    assert_eq!(error.published, 1, "{error:?}");
    assert_eq!(common::stream_seqs(&client, &category, "good").await?, [1, 2]);
    assert_eq!(
        producers(&client, &category, "good").await?,
        HashMap::from([("p-9".to_owned(), 3)])
    );
    assert!(
        producers(&client, &category, "bad").await?.is_empty(),
        "nothing recorded for `bad`"
    );
    let _: Value = client.del(common::stream(&category, "bad")).await?;
    broker.publish(&batch).await?;
    assert_eq!(common::stream_seqs(&client, &category, "good").await?, [1, 2]);
    assert_eq!(common::stream_seqs(&client, &category, "bad").await?, [1]);
    Ok(())
}

/// What deduplication keeps per stream is one small field per producer,
/// however many messages, expiring with the window.
#[tokio::test]
async fn a_stream_keeps_one_field_per_producer_expiring_with_the_window() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start()?;
    let url = redis.url();
    let category = common::category("small");
    let window = std::time::Duration::from_secs(30);
    let broker = broker_with_window(&url, window).await?;
    let client = pool(&url).await?;
    let producer: Arc<str> = Arc::from("0123456789abcdef");
    let batch: Vec<Publication> = (1..=2_000)
        .map(|seq| produced(&category, "k", seq, &producer, seq))
        .collect();
    broker.publish(&batch).await?;
    let hash = common::partition(&category, "k").producers(Lane::Primary);
    let bytes: Option<u64> = client
        .next()
        .custom(fred::cmd!("MEMORY"), vec!["USAGE".to_owned(), hash.clone()])
        .await?;
    let bytes = bytes.context("the producer hash exists")?;
    assert!(bytes < 200, "{bytes} bytes for 2,000 messages");
    let ttl: i64 = client.pttl(&hash).await?;
    assert!(
        ttl > 0 && ttl <= window.as_millis() as i64,
        "expires with the window: {ttl} ms"
    );
    Ok(())
}

/// Past 10,000 producers in a stream's hash, those that appended nothing
/// within the window go, and a producer that did stays (it may still
/// resend): the hash stays bounded however many processes come and go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_cap_idle_producers_are_forgotten_and_live_ones_kept() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start()?;
    let url = redis.url();
    let category = common::category("cap");
    // Long enough that the hash outlives a slow machine's reads below.
    let window = std::time::Duration::from_secs(3);
    let broker = broker_with_window(&url, window).await?;
    let client = pool(&url).await?;
    let hash = common::partition(&category, "k").producers(Lane::Primary);
    let (old, live): (Arc<str>, Arc<str>) = (Arc::from("old"), Arc::from("live"));
    broker.publish(&[produced(&category, "k", 0, &old, 1)]).await?;
    // The live producer goes on publishing (which keeps the hash) until the
    // old one has been idle for longer than the window, by Redis's clock.
    let mut sequence = 0;
    ordo_testkit::eventually(
        std::time::Duration::from_secs(30),
        "the old producer idle past the window",
        || {
            sequence += 1;
            let (broker, client, hash, category, live) = (&broker, &client, &hash, &category, &live);
            let this = sequence;
            async move {
                broker
                    .publish(&[produced(category, "k", this, live, this)])
                    .await
                    .map_err(|e| e.to_string())?;
                let recorded: String = client.hget(hash, "old").await.map_err(|e| e.to_string())?;
                let at: u64 = recorded
                    .split_once(':')
                    .and_then(|(_, at)| at.parse().ok())
                    .ok_or(format!("{recorded} is not <sequence>:<ms>"))?;
                let time: Vec<u64> = client
                    .next()
                    .custom(fred::cmd!("TIME"), Vec::<String>::new())
                    .await
                    .map_err(|e| e.to_string())?;
                let now = time[0] * 1_000 + time[1] / 1_000;
                Ok(now > at + window.as_millis() as u64 + 50)
            }
        },
    )
    .await?;
    // 10,000 new producers, one publication each: the hash reaches the cap
    // (old, live and 9,998 of them), then goes over it in a call in which
    // the live producer publishes too.
    let crowd: Vec<Publication> = (0..10_000)
        .map(|n| {
            let producer: Arc<str> = Arc::from(format!("p{n}"));
            produced(&category, "k", 1_000 + n, &producer, 1)
        })
        .collect();
    broker.publish(&crowd[..9_998]).await?;
    sequence += 1;
    let mut last_call = vec![produced(&category, "k", sequence, &live, sequence)];
    last_call.extend_from_slice(&crowd[9_998..]);
    broker.publish(&last_call).await?;
    let last = producers(&client, &category, "k").await?;
    assert!(!last.contains_key("old"), "the idle producer is forgotten");
    assert!(last.contains_key("live"), "the live producer is kept");
    assert!(last.len() <= 10_001, "{} producers kept", last.len());
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_publication_whose_previous_one_is_not_in_its_stream_waits_for_it
);

/// Calls sent without waiting for each other (pipelined) name each
/// publication's previous one of its producer in its stream: while that one
/// is not in the stream (its call failed, or has not landed), the
/// publication is refused with nothing of it or after it written, so it
/// never passes the one before it; once that one is in, it goes.
async fn a_publication_whose_previous_one_is_not_in_its_stream_waits_for_it(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("gap");
    let broker = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let producer: Arc<str> = Arc::from("p-1");
    // Sequence 1 goes to `a` first; 2 (to `b`, no previous one there) and
    // 3 (to `a`, after 1) travel in a call of their own.
    broker
        .publish(&[produced(&category, "a", 1, &producer, 1)])
        .await?;
    let error = broker
        .publish(&[
            produced(&category, "b", 1, &producer, 2),
            produced(&category, "a", 3, &producer, 4).after(3),
            produced(&category, "b", 2, &producer, 5),
        ])
        .await
        .expect_err("sequence 3 never came: 4 must wait for it");
    assert_eq!(error.published, 1, "{error}");
    let text = ordo_core::contract::error::error_chain(&error);
    assert!(text.contains("`gap`"), "{text}");
    assert_eq!(common::stream_seqs(&client, &category, "a").await?, [1]);
    // On a cluster `b` may sit on another node, whose call goes on.
    let b = common::stream_seqs(&client, &category, "b").await?;
    assert!(b == [1] || b == [1, 2], "{b:?}");
    // The one before it comes, then it and what followed it are sent again.
    broker
        .publish(&[
            produced(&category, "a", 2, &producer, 3),
            produced(&category, "a", 3, &producer, 4),
            produced(&category, "b", 2, &producer, 5),
        ])
        .await?;
    assert_eq!(common::stream_seqs(&client, &category, "a").await?, [1, 2, 3]);
    assert_eq!(common::stream_seqs(&client, &category, "b").await?, [1, 2]);
    Ok(())
}

crate::on_both_topologies!(
    #[tokio::test]
    a_batch_of_many_calls_out_at_once_publishes_each_once_in_order
);

/// A batch of many script calls, sent two at a time without waiting for the
/// replies in between, its keys' publications interleaved: every
/// publication once, each stream in batch order; the whole batch sent
/// again appends nothing.
async fn a_batch_of_many_calls_out_at_once_publishes_each_once_in_order(
    redis: TestRedis,
) -> anyhow::Result<()> {
    let url = redis.url();
    let category = common::category("pipelined");
    let broker = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let producer: Arc<str> = Arc::from("p-1");
    let keys = common::keys(3);
    // 1,500 publications: a dozen calls of 128.
    let batch: Vec<Publication> = (1..=500u64)
        .flat_map(|seq| keys.iter().enumerate().map(move |(k, key)| (seq, k as u64, key)))
        .map(|(seq, k, key)| produced(&category, key, seq, &producer, seq * 3 + k))
        .collect();
    broker.publish(&batch).await?;
    broker.publish(&batch).await?;
    for key in &keys {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (1..=500).collect::<Vec<_>>(),
            "{key}"
        );
    }
    Ok(())
}

/// A batch's keys interleaved, four keys in two calls: each call takes two
/// streams' publications together, so the script reads each stream's
/// producer record once (four reads, not one per stream and call: eight);
/// when one stream's append fails, the other streams' publications land
/// all the same, and the batch sent again lands the failed stream's, every
/// publication once and in order.
#[tokio::test]
async fn a_batch_s_calls_take_each_stream_s_publications_together() -> anyhow::Result<()> {
    let redis = ordo_testkit::Redis::start()?;
    let url = redis.url();
    let category = common::category("together");
    let broker = broker(&url, config(15_000, 3_600_000, 0)).await?;
    let client = pool(&url).await?;
    let producer: Arc<str> = Arc::from("p-1");
    let keys = common::keys(4);
    // 256 publications, the keys taking turns: two calls of 128.
    let batch: Vec<Publication> = (1..=64u64)
        .flat_map(|seq| keys.iter().enumerate().map(move |(k, key)| (seq, k as u64, key)))
        .map(|(seq, k, key)| produced(&category, key, seq, &producer, seq * 4 + k))
        .collect();
    let hgets = async || common::command_stat(&client, "hget", "calls").await;
    let before = hgets().await?;
    broker.publish(&batch).await?;
    assert_eq!(hgets().await? - before, 4, "one producer record read per stream");

    // The second key's stream is not a stream: its XADD fails.
    let more: Vec<Publication> = (65..=128u64)
        .flat_map(|seq| keys.iter().enumerate().map(move |(k, key)| (seq, k as u64, key)))
        .map(|(seq, k, key)| produced(&category, key, seq, &producer, seq * 4 + k))
        .collect();
    let bad = common::stream(&category, &keys[1]);
    let _: Value = client.rename(&bad, "parked").await?;
    let _: Value = client.set(&bad, "x", None, None, false).await?;
    let error = broker
        .publish(&more)
        .await
        .expect_err("the second key's XADD fails");
    assert_eq!(
        error.published, 1,
        "the prefix stops at the second key's first: {error:?}"
    );
    for key in [&keys[0], &keys[2], &keys[3]] {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (1..=128).collect::<Vec<_>>(),
            "{key}: its publications landed beside the failed ones"
        );
    }
    let _: Value = client.del(&bad).await?;
    let _: Value = client.rename("parked", &bad).await?;
    broker.publish(&more[error.published..]).await?;
    for key in &keys {
        assert_eq!(
            common::stream_seqs(&client, &category, key).await?,
            (1..=128).collect::<Vec<_>>(),
            "{key}"
        );
    }
    Ok(())
}
