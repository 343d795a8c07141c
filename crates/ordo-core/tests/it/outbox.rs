//! The in-memory outbox and the outbox processor: routing, abandoning
//! invalid keys, commit order and partial broker failures.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ordo_core::contract::broker::{
    Broker, BrokerError, Capabilities, Publication, PublishError, Subscription,
};
use ordo_core::contract::handler::BoxFuture;
use ordo_core::contract::key::Lane;
use ordo_core::{
    Config, Envelope, InMemoryOutbox, NewOutboxRow, Outbox, OutboxError, OutboxProcessor, OutboxStatus,
    PublishReport,
};
use ordo_testkit::eventually;
use support::*;
use tokio_util::sync::CancellationToken;

/// An `OrderPlaced` row with the given partition key.
fn row(client: Option<&str>, amount: u64, lane: Lane) -> NewOutboxRow {
    let mut envelope =
        Envelope::new(&placed(&format!("o-{amount}"), client.unwrap_or("none"), amount)).unwrap();
    envelope.partition_key = client.map(str::to_owned);
    NewOutboxRow::new(envelope, lane)
}

fn keyed(client: &str, amount: u64) -> NewOutboxRow {
    row(Some(client), amount, Lane::Primary)
}

fn processor(outbox: &InMemoryOutbox, broker: &RecordingBroker, config: &Config) -> OutboxProcessor {
    OutboxProcessor::new(Arc::new(outbox.clone()), Arc::new(broker.clone()), config)
        .with_partitioned_categories([("order", "client_id")])
}

fn amounts(broker: &RecordingBroker) -> Vec<u64> {
    broker
        .published()
        .iter()
        .map(|p| p.envelope.decode::<OrderPlaced>().unwrap().amount)
        .collect()
}

#[tokio::test]
async fn append_assigns_increasing_ids_and_pending_lists_in_commit_order() {
    let outbox = InMemoryOutbox::new();
    let first = outbox.append(vec![keyed("a", 1), keyed("b", 2)]).await.unwrap();
    let second = outbox.append(vec![keyed("a", 3)]).await.unwrap();
    assert_eq!((first, second), (vec![1, 2], vec![3]));
    let pending: Vec<u64> = outbox.pending(10).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(pending, vec![1, 2, 3]);
    let limited: Vec<u64> = outbox.pending(2).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(limited, vec![1, 2]);
    let row = outbox.get(1).await.unwrap().unwrap();
    assert_eq!(row.partition_key.as_deref(), Some("a"));
    assert_eq!(
        (row.status, row.attempts, row.last_error),
        (OutboxStatus::Pending, 0, None)
    );
}

#[tokio::test]
async fn failed_rows_stay_pending_and_abandoned_rows_leave_the_queue() {
    let outbox = InMemoryOutbox::new();
    outbox.append(vec![keyed("a", 1), keyed("b", 2)]).await.unwrap();
    outbox.mark_failed(1, "broker down").await.unwrap();
    outbox.mark_failed(1, "still down").await.unwrap();
    outbox.mark_abandoned(2, "bad key").await.unwrap();
    let failed = outbox.get(1).await.unwrap().unwrap();
    assert_eq!((failed.status, failed.attempts), (OutboxStatus::Pending, 2));
    assert_eq!(failed.last_error.as_deref(), Some("still down"));
    let abandoned = outbox.get(2).await.unwrap().unwrap();
    assert_eq!(abandoned.status, OutboxStatus::Abandoned);
    assert_eq!(abandoned.last_error.as_deref(), Some("bad key"));
    let pending: Vec<u64> = outbox.pending(10).await.unwrap().iter().map(|r| r.id).collect();
    assert_eq!(pending, vec![1]);
    assert!(matches!(
        outbox.mark_failed(99, "x").await,
        Err(OutboxError::UnknownRow { id: 99 })
    ));
}

#[tokio::test]
async fn published_rows_beyond_the_retention_are_pruned_oldest_first() {
    let outbox = InMemoryOutbox::with_retention(2);
    outbox
        .append((1..=4).map(|n| keyed("a", n)).collect())
        .await
        .unwrap();
    outbox.mark_abandoned(4, "kept for inspection").await.unwrap();
    outbox.mark_published(&[1, 2, 3]).await.unwrap();
    let ids: Vec<u64> = outbox.rows().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![2, 3, 4]);
}

#[tokio::test]
async fn partitioned_rows_go_to_their_partition_stream_and_lane() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    let config =
        Config::from_toml_str("[server.priority_lanes]\nenabled = true\nbackfill_suffix = \"slow\"").unwrap();
    outbox
        .append(vec![
            keyed("client-1", 1),
            row(Some("client-1"), 2, Lane::Backfill),
            keyed("client-2", 3),
        ])
        .await
        .unwrap();
    let report = processor(&outbox, &broker, &config)
        .publish_pending()
        .await
        .unwrap();
    assert_eq!(
        report,
        PublishReport {
            published: 3,
            abandoned: 0,
            failed: 0,
            refused: 0
        }
    );
    // The broker names the lane's stream (with the suffix it was configured
    // with); the publication says which lane.
    assert_eq!(
        broker.streams(),
        vec!["order:client-1", "order:client-1:backfill", "order:client-2"]
    );
    let lanes: Vec<Lane> = broker.published().iter().map(|p| p.lane).collect();
    assert_eq!(lanes, vec![Lane::Primary, Lane::Backfill, Lane::Primary]);
    assert!(outbox.rows().iter().all(|r| r.status == OutboxStatus::Published));
}

#[tokio::test]
async fn a_broker_without_partitioning_gets_the_base_stream_with_the_key_carried() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::new("ordered", Capabilities::ORDERED_IN_PROCESS);
    outbox
        .append(vec![
            keyed("client-1", 1),
            row(Some("client-1"), 2, Lane::Backfill),
        ])
        .await
        .unwrap();
    processor(&outbox, &broker, &Config::default())
        .publish_pending()
        .await
        .unwrap();
    let published = broker.published();
    assert_eq!(broker.streams(), vec!["order", "order"]);
    assert!(published.iter().all(|p| p.lane == Lane::Primary));
    assert!(
        published
            .iter()
            .all(|p| p.envelope.partition_key.as_deref() == Some("client-1"))
    );
}

#[tokio::test]
async fn unpartitioned_categories_publish_to_the_base_stream() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    let event = CustomerRegistered {
        customer_id: "cu-1".into(),
        amount: 1,
    };
    outbox
        .append(vec![NewOutboxRow::new(
            Envelope::new(&event).unwrap(),
            Lane::Primary,
        )])
        .await
        .unwrap();
    processor(&outbox, &broker, &Config::default())
        .publish_pending()
        .await
        .unwrap();
    assert_eq!(broker.streams(), vec!["customer"]);
}

#[tokio::test]
async fn an_invalid_key_is_abandoned_at_once_without_blocking_later_rows() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    outbox
        .append(vec![
            keyed("a:b", 1),
            keyed("good", 2),
            row(None, 3, Lane::Primary),
            keyed("dlq", 4),
            keyed("good", 5),
        ])
        .await
        .unwrap();
    let processor = processor(&outbox, &broker, &Config::default());
    let report = processor.publish_pending().await.unwrap();
    assert_eq!(
        report,
        PublishReport {
            published: 2,
            abandoned: 3,
            failed: 0,
            refused: 0
        }
    );
    assert_eq!(amounts(&broker), vec![2, 5]);

    let rows = outbox.rows();
    let abandoned: Vec<(u64, u32, String)> = rows
        .iter()
        .filter(|r| r.status == OutboxStatus::Abandoned)
        .map(|r| (r.id, r.attempts, r.last_error.clone().unwrap()))
        .collect();
    assert_eq!(abandoned.len(), 3);
    assert!(
        abandoned.iter().all(|(_, attempts, _)| *attempts == 0),
        "never attempted"
    );
    assert_eq!(
        abandoned[0].2,
        "invalid partition key in field `client_id` (value \"a:b\"): a partition key must not contain ':'"
    );
    assert!(abandoned[1].2.contains("must not be null"), "{}", abandoned[1].2);
    assert!(
        abandoned[2].2.contains("reserved lane token"),
        "{}",
        abandoned[2].2
    );

    // Never retried: a later pass leaves them alone.
    assert_eq!(
        processor.publish_pending().await.unwrap(),
        PublishReport::default()
    );
    assert_eq!(outbox.rows(), rows);
}

#[tokio::test]
async fn rows_of_each_key_are_published_in_commit_order_across_batches() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    for round in 0..5u64 {
        let rows = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, key)| keyed(key, round * 3 + i as u64))
            .collect();
        outbox.append(rows).await.unwrap();
    }
    let processor = processor(&outbox, &broker, &Config::default()).with_batch_size(4);
    let report = processor.publish_pending().await.unwrap();
    assert_eq!(report.published, 15);
    assert_eq!(amounts(&broker), (0..15).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_partial_broker_failure_marks_the_published_prefix_and_stops() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    outbox
        .append(vec![
            keyed("a", 1),
            keyed("b", 2),
            keyed("a", 3),
            keyed("b", 4),
            keyed("c", 5),
        ])
        .await
        .unwrap();
    let processor = processor(&outbox, &broker, &Config::default());
    broker.fail_next_after(2);
    let report = processor.publish_pending().await.unwrap();
    assert_eq!(
        report,
        PublishReport {
            published: 2,
            abandoned: 0,
            failed: 1,
            refused: 0
        }
    );

    let state: Vec<(OutboxStatus, u32)> = outbox.rows().iter().map(|r| (r.status, r.attempts)).collect();
    assert_eq!(
        state,
        vec![
            (OutboxStatus::Published, 0),
            (OutboxStatus::Published, 0),
            (OutboxStatus::Pending, 1),
            (OutboxStatus::Pending, 0),
            (OutboxStatus::Pending, 0),
        ]
    );
    assert_eq!(
        outbox.get(3).await.unwrap().unwrap().last_error.as_deref(),
        Some("injected broker failure")
    );

    let report = processor.publish_pending().await.unwrap();
    assert_eq!(
        report,
        PublishReport {
            published: 3,
            abandoned: 0,
            failed: 0,
            refused: 0
        }
    );
    assert_eq!(amounts(&broker), vec![1, 2, 3, 4, 5]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_loop_wakes_on_notify_not_only_on_its_poll_interval() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    let config = Config::from_toml_str("[server.partitioning]\npoll_interval_seconds = 600").unwrap();
    let processor = Arc::new(processor(&outbox, &broker, &config));
    outbox.append(vec![keyed("a", 1)]).await.unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn({
        let processor = Arc::clone(&processor);
        let shutdown = shutdown.clone();
        async move { processor.run(shutdown).await }
    });
    eventually(Duration::from_secs(5), "the first pass publishes", || async {
        Ok(broker.published().len() == 1)
    })
    .await
    .unwrap();

    // The next poll is ten minutes away: only the notification can publish this row in time.
    outbox.append(vec![keyed("a", 2)]).await.unwrap();
    processor.notify();
    eventually(Duration::from_secs(5), "the notified pass publishes", || async {
        Ok(broker.published().len() == 2)
    })
    .await
    .unwrap();
    shutdown.cancel();
    task.await.unwrap();
}

/// The in-memory outbox's rows go out with its producer id and their row
/// id as sequence (the broker deduplicates them by it), but for rows whose
/// message id is derived from what raised them (a command run's events),
/// which another process may raise again: those keep their message id
/// alone. Another outbox (another process start) has another id.
#[tokio::test]
async fn rows_carry_their_outbox_producer_id_and_row_id_but_derived_ids_do_not() {
    let outbox = InMemoryOutbox::new();
    let broker = RecordingBroker::partitioning();
    outbox
        .append(vec![
            keyed("a", 1),
            keyed("b", 2).with_derived_id(),
            keyed("a", 3),
        ])
        .await
        .unwrap();
    processor(&outbox, &broker, &Config::default())
        .publish_pending()
        .await
        .unwrap();
    let producer = outbox
        .producer_id()
        .expect("an in-memory outbox has a producer id");
    assert_eq!(producer.len(), 16, "{producer}");
    let produced: Vec<Option<(String, u64)>> = broker
        .published()
        .iter()
        .map(|p| p.producer.as_ref().map(|p| (p.producer.to_string(), p.sequence)))
        .collect();
    assert_eq!(
        produced,
        [
            Some((producer.to_owned(), 1)),
            None,
            Some((producer.to_owned(), 3))
        ]
    );
    assert!(outbox.get(2).await.unwrap().unwrap().derived_id);
    let other = InMemoryOutbox::new();
    assert_ne!(other.producer_id(), Some(producer), "a new outbox, a new id");
    assert_eq!(
        outbox.clone().producer_id(),
        Some(producer),
        "clones share the rows and the id"
    );
    let shared: Arc<dyn Outbox> = Arc::new(Arc::new(outbox.clone()));
    assert_eq!(shared.producer_id(), Some(producer), "an Arc forwards it");
}

/// An in-memory outbox that records where each fetch of pending rows
/// started: `None` from the first pending row, `Some(id)` after row `id`.
#[derive(Debug, Default)]
struct ObservedOutbox {
    inner: InMemoryOutbox,
    reads: std::sync::Mutex<Vec<Option<u64>>>,
}

impl ObservedOutbox {
    fn reads(&self) -> Vec<Option<u64>> {
        self.reads.lock().unwrap().clone()
    }
}

impl Outbox for ObservedOutbox {
    fn append(&self, rows: Vec<NewOutboxRow>) -> BoxFuture<'_, Result<Vec<u64>, OutboxError>> {
        self.inner.append(rows)
    }
    fn pending(&self, limit: usize) -> BoxFuture<'_, Result<Vec<ordo_core::OutboxRow>, OutboxError>> {
        self.reads.lock().unwrap().push(None);
        self.inner.pending(limit)
    }
    fn pending_after(
        &self,
        after: u64,
        limit: usize,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<ordo_core::contract::outbox::PendingRows, OutboxError>> {
        self.reads.lock().unwrap().push(Some(after));
        self.inner.pending_after(after, limit, max_bytes)
    }
    fn mark_published<'a>(&'a self, ids: &'a [u64]) -> BoxFuture<'a, Result<(), OutboxError>> {
        self.inner.mark_published(ids)
    }
    fn mark_failed<'a>(&'a self, id: u64, error: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        self.inner.mark_failed(id, error)
    }
    fn mark_abandoned<'a>(&'a self, id: u64, reason: &'a str) -> BoxFuture<'a, Result<(), OutboxError>> {
        self.inner.mark_abandoned(id, reason)
    }
    fn get(&self, id: u64) -> BoxFuture<'_, Result<Option<ordo_core::OutboxRow>, OutboxError>> {
        self.inner.get(id)
    }
    fn producer_id(&self) -> Option<&str> {
        self.inner.producer_id()
    }
}

/// A broker that answers the publish of a batch with rows pending behind
/// it only once the outbox has been read past it (or after a deadline,
/// failing it), then records it like [`RecordingBroker`].
#[derive(Debug, Clone)]
struct ReadAheadBroker {
    outbox: Arc<ObservedOutbox>,
    recording: RecordingBroker,
}

impl Broker for ReadAheadBroker {
    fn name(&self) -> &str {
        "read-ahead"
    }
    fn capabilities(&self) -> Capabilities {
        self.recording.capabilities()
    }
    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let last = publications
                .iter()
                .filter_map(|p| p.producer.as_ref().map(|p| p.sequence))
                .max()
                .unwrap_or(0);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            let behind = self
                .outbox
                .inner
                .rows()
                .iter()
                .any(|row| row.id > last && row.status == OutboxStatus::Pending);
            while behind && !self.outbox.reads().contains(&Some(last)) {
                if tokio::time::Instant::now() > deadline {
                    return Err(PublishError {
                        published: 0,
                        source: format!("the outbox was not read past row {last} while it was published")
                            .into(),
                    });
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            self.recording.publish(publications).await
        })
    }
    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        self.recording.run(subscriptions, shutdown)
    }
}

#[tokio::test]
async fn the_next_batch_is_read_while_the_broker_publishes_the_one_before_and_a_failure_drops_it() {
    let outbox = Arc::new(ObservedOutbox::default());
    let broker = ReadAheadBroker {
        outbox: Arc::clone(&outbox),
        recording: RecordingBroker::partitioning(),
    };
    append_keyed(&outbox, 1..=7).await;
    let processor = read_ahead_processor(&outbox, Arc::new(broker.clone()), 3);

    // Rows 1-3, then 4-6, read while 1-3 are out, then 7 while 4-6 are.
    // The last batch is not full: nothing is read behind it.
    let report = processor.publish_pending().await.unwrap();
    assert_eq!(report.published, 7, "{report:?}");
    assert_eq!(outbox.reads(), vec![None, Some(3), Some(6)]);
    assert_eq!(amounts(&broker.recording), (1..=7).collect::<Vec<_>>());

    // A failure in a batch drops the batch read behind it: those rows stay
    // pending, untried, and the next run publishes them after the failed
    // one, each once.
    append_keyed(&outbox, 8..=14).await;
    broker.recording.fail_next_after(1);
    let report = processor.publish_pending().await.unwrap();
    assert_eq!((report.published, report.failed), (1, 1), "{report:?}");
    let attempts: Vec<(u64, OutboxStatus, u32)> = outbox
        .inner
        .rows()
        .iter()
        .filter(|r| r.id >= 8)
        .map(|r| (r.id, r.status, r.attempts))
        .collect();
    assert_eq!(
        attempts,
        vec![
            (8, OutboxStatus::Published, 0),
            (9, OutboxStatus::Pending, 1),
            (10, OutboxStatus::Pending, 0),
            (11, OutboxStatus::Pending, 0),
            (12, OutboxStatus::Pending, 0),
            (13, OutboxStatus::Pending, 0),
            (14, OutboxStatus::Pending, 0),
        ]
    );
    let report = processor.publish_pending().await.unwrap();
    assert_eq!((report.published, report.failed), (6, 0), "{report:?}");
    assert_eq!(amounts(&broker.recording), (1..=14).collect::<Vec<_>>());
}

/// A broker whose publish of a batch takes many steps (each a yield, as a
/// wait for Redis's replies is), recording at each step how many reads of
/// pending rows the outbox has had and how many rows are pending.
#[derive(Debug, Clone)]
struct SteppingBroker {
    outbox: Arc<ObservedOutbox>,
    recording: RecordingBroker,
    /// Per publish call: (reads so far, rows pending) at each step.
    steps: Arc<std::sync::Mutex<Vec<Steps>>>,
}

/// (reads so far, rows pending) at each step of one publish call.
type Steps = Vec<(usize, usize)>;

/// Rows `amounts` of keys `a` and `b` in turn, appended to `outbox`.
async fn append_keyed(outbox: &ObservedOutbox, amounts: std::ops::RangeInclusive<u64>) {
    outbox
        .append(amounts.map(|n| keyed(["a", "b"][n as usize % 2], n)).collect())
        .await
        .unwrap();
}

/// A processor of `outbox` (read ahead: it has a producer id) publishing
/// to `broker` in batches of `batch_size`.
fn read_ahead_processor(
    outbox: &Arc<ObservedOutbox>,
    broker: Arc<dyn Broker>,
    batch_size: usize,
) -> OutboxProcessor {
    OutboxProcessor::new(Arc::clone(outbox) as Arc<dyn Outbox>, broker, &Config::default())
        .with_partitioned_categories([("order", "client_id")])
        .with_batch_size(batch_size)
}

impl Broker for SteppingBroker {
    fn name(&self) -> &str {
        "stepping"
    }
    fn capabilities(&self) -> Capabilities {
        self.recording.capabilities()
    }
    fn publish<'a>(&'a self, publications: &'a [Publication]) -> BoxFuture<'a, Result<(), PublishError>> {
        Box::pin(async move {
            let mut seen = Vec::new();
            for _ in 0..64 {
                seen.push((self.outbox.reads().len(), self.outbox.inner.pending_count()));
                tokio::task::yield_now().await;
            }
            self.steps.lock().unwrap().push(seen);
            self.recording.publish(publications).await
        })
    }
    fn run(
        &self,
        subscriptions: Arc<[Subscription]>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), BrokerError>> {
        self.recording.run(subscriptions, shutdown)
    }
}

/// While the broker publishes a batch, the processor marks the batch
/// before published and reads the next one a slice at a time, between the
/// broker's steps: neither holds up the batch's calls (on Redis, a call
/// whose reply came in sends the next one) for the whole of its work.
#[tokio::test]
async fn marking_the_batch_before_and_reading_the_next_leave_the_batch_out_room_between_slices() {
    let outbox = Arc::new(ObservedOutbox::default());
    let broker = SteppingBroker {
        outbox: Arc::clone(&outbox),
        recording: RecordingBroker::partitioning(),
        steps: Arc::default(),
    };
    append_keyed(&outbox, 1..=3072).await;
    let processor = read_ahead_processor(&outbox, Arc::new(broker.clone()), 1024);
    let report = processor.publish_pending().await.unwrap();
    assert_eq!(report.published, 3072, "{report:?}");
    assert_eq!(amounts(&broker.recording), (1..=3072).collect::<Vec<_>>());
    assert_eq!(outbox.inner.pending_count(), 0);
    let steps = broker.steps.lock().unwrap().clone();
    assert_eq!(steps.len(), 3, "one publish call per batch");
    // The second batch: the first is marked, the third read, a slice at a
    // time between its steps.
    let distinct = |values: Vec<usize>| {
        let mut values = values;
        values.dedup();
        values.len()
    };
    let reads = distinct(steps[1].iter().map(|(reads, _)| *reads).collect());
    let pending = distinct(steps[1].iter().map(|(_, pending)| *pending).collect());
    assert!(reads > 2, "the next batch read in {reads} go(es): {:?}", steps[1]);
    assert!(
        pending > 2,
        "the batch before marked in {pending} go(es): {:?}",
        steps[1]
    );
}

/// The in-memory outbox bounds a fetch by its payloads' bytes too (at
/// least one row), and says when more rows are pending.
#[tokio::test]
async fn an_in_memory_fetch_is_bounded_by_bytes_and_says_when_more_are_pending() {
    let outbox = InMemoryOutbox::new();
    outbox
        .append(vec![keyed("a", 1), keyed("b", 2), keyed("a", 3)])
        .await
        .unwrap();
    let size = outbox.get(1).await.unwrap().unwrap().envelope.payload.len();
    let ids = |fetched: &ordo_core::contract::outbox::PendingRows| {
        (
            fetched.rows.iter().map(|r| r.id).collect::<Vec<_>>(),
            fetched.more,
        )
    };
    assert_eq!(ids(&outbox.pending_within(10, 1).await.unwrap()), (vec![1], true));
    assert_eq!(
        ids(&outbox.pending_within(10, 2 * size).await.unwrap()),
        (vec![1, 2], true)
    );
    assert_eq!(
        ids(&outbox.pending_within(3, usize::MAX).await.unwrap()),
        (vec![1, 2, 3], false)
    );
    assert_eq!(
        ids(&outbox.pending_after(1, 10, usize::MAX).await.unwrap()),
        (vec![2, 3], false)
    );
    assert_eq!(
        ids(&outbox.pending_after(1, 1, usize::MAX).await.unwrap()),
        (vec![2], true)
    );
}
