//! Where the outbox meets the broker: a database whose history differs from
//! the one Redis saw, an unreadable row, rows too big to publish together.
//! (The relay binary on a category in hashed partitions: the ordo-pg-relay
//! crate's tests.)

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{commit, count_status, deposit, domain, numbers, pg_pool, redis_pool, xlen};
use fred::interfaces::ClientLike;
use ordo::prelude::*;
use ordo_core::contract::config::Config;
use ordo_core::contract::outbox::Outbox;
use ordo_postgres::{OutboxStatusReport, PgRelay, UnitOfWorkExt};
use ordo_redis::RedisBroker;
use ordo_testkit::{Postgres, Redis};
use sqlx::AssertSqlSafe;

const TTL: Duration = Duration::from_secs(5);

/// A fresh database (or a restored one, a re-created schema, a promoted
/// asynchronous replica) hands out positions Redis already holds from
/// another history. Its events must not be taken for published duplicates:
/// they stay pending, refused loudly, until the operator adopts Redis's
/// positions; then they are published after Redis's, none lost.
#[tokio::test]
async fn a_fresh_database_against_a_used_redis_loses_no_event() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let domain = domain()?;
    let client = redis_pool(&redis.url()).await?;
    let stream = common::account_stream("a");

    // The first database's history: three events of `a`, published.
    let used = common::outbox(&pool, "used", TTL).await?;
    commit(&pool, &used, &domain, (1..=3).map(|n| deposit("a", n)).collect()).await?;
    let used_relay = common::relay(&used, &redis).await?;
    assert_eq!(used_relay.publish_pending().await?.published, 3);

    // A fresh database against the same Redis: its positions start at 1 again.
    let fresh = common::outbox(&pool, "fresh", TTL).await?;
    commit(&pool, &fresh, &domain, vec![deposit("a", 4), deposit("a", 5)]).await?;
    let relay = common::relay(&fresh, &redis).await?;
    let report = relay.publish_pending().await?;
    assert_eq!(
        report.published, 0,
        "nothing of the fresh database is taken for published: {report:?}"
    );
    assert_eq!(report.refused, 1, "refused, loudly: {report:?}");
    assert_eq!(count_status(&fresh, 0).await?, 2, "both events stay pending");
    assert_eq!(numbers(&client, &stream).await?, vec![1, 2, 3]);

    // The status says why; the refused row says so too.
    let status = OutboxStatusReport::read(&fresh).await?;
    assert_eq!(
        (status.pending, status.refused, status.conflicts),
        (2, 1, 1),
        "{status}"
    );
    assert!(status.to_string().contains("ordo-pg-relay adopt"), "{status}");
    let refused = fresh.refused().await?;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0].broker_position, Some(3));
    assert!(
        refused[0].reason.contains("another history"),
        "{}",
        refused[0].reason
    );
    let row = fresh.get(1).await?.expect("the refused row is kept");
    assert!(
        row.last_error
            .unwrap_or_default()
            .contains("position 1 of `account:a`")
    );
    // Publishing again changes nothing: the scope waits (and is left out of
    // fetches for a while).
    assert_eq!(relay.publish_pending().await?.published, 0);

    // The operator adopts Redis's positions: the fresh events follow them.
    let adopted = fresh.adopt().await?;
    assert_eq!(adopted.len(), 1, "{adopted:?}");
    assert_eq!(
        (adopted[0].broker_position, adopted[0].shift, adopted[0].pending),
        (3, 3, 2)
    );
    assert_eq!(relay.publish_pending().await?.published, 2);
    assert_eq!(numbers(&client, &stream).await?, vec![1, 2, 3, 4, 5], "none lost");
    let status = OutboxStatusReport::read(&fresh).await?;
    assert_eq!(
        (status.pending, status.refused, status.conflicts),
        (0, 0, 0),
        "{status}"
    );

    // The first database's relay (its history still running against this
    // Redis) is refused in turn now, not taken for published either.
    commit(&pool, &used, &domain, vec![deposit("a", 6)]).await?;
    let report = used_relay.publish_pending().await?;
    assert_eq!((report.published, report.refused), (0, 1), "{report:?}");
    Ok(())
}

/// A row whose envelope is not JSON (written by hand, by another version)
/// is abandoned with its reason, and every other row flows, its own scope's
/// next rows included.
#[tokio::test]
async fn an_unreadable_row_is_abandoned_and_the_rest_flows() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "unreadable", TTL).await?;
    let domain = domain()?;
    let client = redis_pool(&redis.url()).await?;
    commit(
        &pool,
        &outbox,
        &domain,
        vec![deposit("a", 1), deposit("b", 1), deposit("b", 2), deposit("c", 1)],
    )
    .await?;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".outbox SET envelope = '{{not json' WHERE partition_key = 'b' AND seq = 1",
        outbox.schema()
    )))
    .execute(&pool)
    .await?;

    let relay = common::relay(&outbox, &redis).await?;
    let report = relay.publish_pending().await?;
    // The unreadable row is abandoned by the outbox itself, out of the report.
    assert_eq!(
        (report.published, report.abandoned, report.failed),
        (3, 0, 0),
        "{report:?}"
    );
    for (key, expected) in [("a", vec![1]), ("b", vec![2]), ("c", vec![1])] {
        assert_eq!(
            numbers(&client, &common::account_stream(key)).await?,
            expected,
            "{key}"
        );
    }
    let (status, error): (i16, Option<String>) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT status, last_error FROM \"{}\".outbox WHERE partition_key = 'b' AND seq = 1",
        outbox.schema()
    )))
    .fetch_one(&pool)
    .await?;
    assert_eq!(status, 2, "abandoned");
    assert!(
        error.unwrap_or_default().contains("not valid JSON"),
        "the reason is kept"
    );
    assert_eq!(count_status(&outbox, 0).await?, 0);
    Ok(())
}

/// An event with a large payload (no key: the category's base stream).
#[derive(Aggregate)]
struct Archive;

#[derive(Debug, Clone, Serialize, Deserialize, Event)]
#[event(part_of = Archive)]
struct Archived {
    n: u64,
    blob: String,
}

/// How many script calls Redis has run (the publish script is the only
/// one a relay of a base stream calls).
async fn script_calls(client: &fred::clients::Pool) -> anyhow::Result<u64> {
    let info: String = client.info(Some(fred::types::InfoKind::CommandStats)).await?;
    Ok(info
        .lines()
        .filter(|line| line.starts_with("cmdstat_fcall:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum())
}

/// Rows of 300 KB: one fetch of 512 of them would hold 150 MB in the relay
/// (110 rows of 10 MB held 5.7 GB), one script call of 128 of them sends
/// 38 MB to Redis (128 rows of 10 MB, 1.28 GB, pass Redis's query-buffer
/// limit and are dropped every time). Fetches and calls are bounded by
/// bytes (by default 16 MiB and 8 MiB), and a row larger than both is
/// fetched and published alone.
#[tokio::test]
async fn big_rows_are_fetched_and_published_in_batches_bounded_by_bytes() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "big", TTL).await?;
    let config = Config::from_toml_str("[outbox]\nmax_payload_bytes = 33554432\n")?;
    let domain = Domain::builder()
        .aggregate::<Archive>()
        .config(config.clone())
        .init()?;
    let client = redis_pool(&redis.url()).await?;

    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    for n in 1..=60u64 {
        // One row of 20 MB: above both bounds.
        let size = if n == 30 { 20 << 20 } else { 300 << 10 };
        uow.raise(Archived {
            n,
            blob: "x".repeat(size),
        })?;
    }
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;

    // A fetch of at most 1 MiB holds three rows.
    let first = outbox.pending_within(512, 1 << 20).await?;
    let held: usize = first.rows.iter().map(|r| r.envelope.payload.len()).sum();
    assert!(
        first.rows.len() == 3 && first.more && held <= 1 << 20,
        "{} rows, {held} bytes",
        first.rows.len()
    );

    let broker = RedisBroker::builder(redis.url())
        .config(config.clone())
        .build()
        .await?;
    let relay = PgRelay::new(outbox.clone(), Arc::new(broker), &config);
    let calls = script_calls(&client).await?;
    let report = tokio::time::timeout(Duration::from_secs(120), relay.publish_pending()).await??;
    assert_eq!((report.published, report.failed), (60, 0), "{report:?}");
    assert_eq!(xlen(&client, "archive").await?, 60);
    // 17.3 MB of small rows in calls of at most 8 MiB, and the big row alone.
    let calls = script_calls(&client).await? - calls;
    assert!(calls >= 4, "{calls} publish calls for 37 MB of rows");
    Ok(())
}
