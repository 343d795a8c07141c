//! The in-memory outbox and the outbox processor: routing, abandoning
//! invalid keys, commit order and partial broker failures.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ordo_core::contract::broker::Capabilities;
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
