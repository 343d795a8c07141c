//! The PostgreSQL outbox against a real PostgreSQL and Redis: rows in the
//! caller's transaction, keys validated first, positions in commit order,
//! idempotent publishing, abandoned rows, retention and status.

use crate::common;

use std::time::Duration;

use common::{Deposited, count_status, domain, numbers, pg_pool, redis_pool, xlen};
use ordo::prelude::*;
use ordo_core::contract::broker::{Broker, POSITION_METADATA, POSITION_SCOPE_METADATA, Publication};
use ordo_core::contract::error::CommitError;
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::Envelope;
use ordo_core::contract::outbox::{NewOutboxRow, Outbox};
use ordo_postgres::{OutboxStatusReport, PgOutbox, PgRelay, UnitOfWorkExt};
use ordo_redis::RedisBroker;
use ordo_testkit::eventually;
use ordo_testkit::{Postgres, Redis};
use sqlx::AssertSqlSafe;

const TTL: Duration = Duration::from_secs(5);

fn deposit(account: &str, n: u64) -> Deposited {
    Deposited {
        account: account.to_owned(),
        amount: 10,
        n,
    }
}

#[tokio::test]
async fn events_exist_if_and_only_if_the_callers_transaction_commits() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "commit", TTL).await?;
    let domain = domain()?;
    let table = format!("\"{}\".account", outbox.schema());
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {table} (id text PRIMARY KEY, balance int8 NOT NULL)"
    )))
    .execute(&pool)
    .await?;
    sqlx::query(AssertSqlSafe(format!("INSERT INTO {table} VALUES ('a', 0)")))
        .execute(&pool)
        .await?;
    let update = format!("UPDATE {table} SET balance = balance + 10 WHERE id = 'a'");

    // Rolled back: neither the business write nor the events.
    let mut tx = pool.begin().await?;
    sqlx::query(AssertSqlSafe(update.clone()))
        .execute(&mut *tx)
        .await?;
    let mut uow = domain.unit_of_work();
    uow.raise(deposit("a", 101))?;
    uow.raise(deposit("a", 102))?;
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.rollback().await?;

    // Committed: both.
    let mut tx = pool.begin().await?;
    sqlx::query(AssertSqlSafe(update)).execute(&mut *tx).await?;
    let mut uow = domain.unit_of_work();
    uow.raise(deposit("a", 1))?;
    uow.raise(deposit("a", 2))?;
    let receipt = uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;

    let positions: Vec<(String, i64, String)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT stream, seq, message_id FROM \"{}\".outbox ORDER BY seq",
        outbox.schema()
    )))
    .fetch_all(&pool)
    .await?;
    let expected: Vec<(String, i64, String)> = receipt
        .message_ids
        .iter()
        .zip(1..)
        .map(|(id, seq)| ("account:a".to_owned(), seq, id.clone()))
        .collect();
    assert_eq!(
        positions, expected,
        "only the committed rows, at positions 1 and 2"
    );

    let relay = common::relay(&outbox, &redis).await?;
    let report = relay.publish_pending().await?;
    assert_eq!(report.published, 2);
    let redis_client = redis_pool(&redis.url()).await?;
    assert_eq!(
        numbers(&redis_client, &common::account_stream("a")).await?,
        vec![1, 2]
    );
    let published = common::stream_envelopes(&redis_client, &common::account_stream("a")).await?;
    assert_eq!(
        published[1].metadata.get(POSITION_METADATA).map(String::as_str),
        Some("2")
    );
    assert_eq!(
        published[1]
            .metadata
            .get(POSITION_SCOPE_METADATA)
            .map(String::as_str),
        Some("account:a")
    );
    // When each happened, set at raise, crosses the outbox and the relay
    // (raised outside a handler: each starts its own conversation).
    for envelope in &published {
        let at = envelope.occurred_at.expect("the raise's time");
        assert!(at.system_time() <= std::time::SystemTime::now());
        assert_eq!(
            (envelope.correlation(), envelope.causation_id.as_deref()),
            (envelope.id.as_str(), None)
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_bad_key_fails_the_commit_before_anything_is_written() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let pool = pg_pool(pg.url(), 2).await?;
    let outbox = common::outbox(&pool, "badkey", TTL).await?;
    let domain = domain()?;

    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    uow.raise(deposit("good", 1))?;
    uow.raise(deposit("bad:key", 2))?;
    let error = uow
        .commit_in_outbox(&outbox, &mut tx)
        .await
        .expect_err("a key with ':' is refused");
    assert!(matches!(error, CommitError::InvalidKey { .. }), "{error:?}");
    assert!(error.to_string().contains("Deposited"), "{error}");
    // Nothing was written, not even in the still-open transaction.
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM \"{s}\".outbox) + (SELECT count(*) FROM \"{s}\".outbox_streams)",
        s = outbox.schema()
    )))
    .fetch_one(&mut *tx)
    .await?;
    assert_eq!(rows, 0);
    tx.commit().await?;
    assert_eq!(count_status(&outbox, 0).await?, 0);
    Ok(())
}

/// Two transactions on one key: the second waits for the first's commit and
/// takes the next positions, so the relay publishes in commit order and
/// never sees a later position while an earlier one is still uncommitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transactions_on_one_key_publish_in_commit_order() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 6).await?;
    let outbox = common::outbox(&pool, "concurrent", TTL).await?;
    let domain = domain()?;
    let relay = common::relay(&outbox, &redis).await?;
    let redis_client = redis_pool(&redis.url()).await?;

    // A starts first and stays open.
    let mut first = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    uow.raise(deposit("k", 1))?;
    uow.commit_in_outbox(&outbox, &mut first).await?;

    // B, on the same key, must wait for A.
    let second = {
        let (pool, outbox, domain) = (pool.clone(), outbox.clone(), domain.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await?;
            let mut uow = domain.unit_of_work();
            uow.raise(deposit("k", 2))?;
            uow.raise(deposit("k", 3))?;
            uow.commit_in_outbox(&outbox, &mut tx).await?;
            tx.commit().await?;
            anyhow::Ok(())
        })
    };
    eventually(
        Duration::from_secs(10),
        "the second transaction to wait on a lock",
        || {
            let pool = pool.clone();
            async move {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                )
                .fetch_one(&pool)
                .await?;
                Ok(waiting > 0)
            }
        },
    )
    .await?;
    // Meanwhile the relay publishes nothing of the key.
    assert_eq!(relay.publish_pending().await?.published, 0);
    assert_eq!(xlen(&redis_client, &common::account_stream("k")).await?, 0);

    first.commit().await?;
    second.await??;
    assert_eq!(relay.publish_pending().await?.published, 3);
    assert_eq!(
        numbers(&redis_client, &common::account_stream("k")).await?,
        vec![1, 2, 3]
    );

    // And with many writers at once on a few keys, each key's positions are
    // gapless and follow each writer's own order.
    let mut writers = Vec::new();
    for writer in 0..8u64 {
        let (pool, outbox, domain) = (pool.clone(), outbox.clone(), domain.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..20u64 {
                let mut tx = pool.begin().await?;
                let mut uow = domain.unit_of_work();
                uow.raise(deposit(&format!("w{}", writer % 3), writer * 1000 + i))?;
                uow.commit_in_outbox(&outbox, &mut tx).await?;
                tx.commit().await?;
            }
            anyhow::Ok(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    relay.publish_pending().await?;
    let mut total = 0;
    for key in ["w0", "w1", "w2"] {
        let stream = common::account_stream(key);
        let published = common::stream_envelopes(&redis_client, &stream).await?;
        let positions: Vec<String> = published
            .iter()
            .map(|e| e.metadata.get(POSITION_METADATA).cloned().unwrap_or_default())
            .collect();
        let expected: Vec<String> = (1..=published.len()).map(|p| p.to_string()).collect();
        assert_eq!(positions, expected, "{stream}: gapless positions in stream order");
        let ns = numbers(&redis_client, &stream).await?;
        for writer in 0..8u64 {
            let mine: Vec<u64> = ns.iter().copied().filter(|n| n / 1000 == writer).collect();
            let mut sorted = mine.clone();
            sorted.sort_unstable();
            assert_eq!(
                mine, sorted,
                "{stream}: writer {writer}'s events in its commit order"
            );
        }
        total += ns.len();
    }
    assert_eq!(total, 160);
    Ok(())
}

/// Publishing and marking published are two steps: a relay that dies
/// between them leaves the rows pending. Publishing them again must not
/// duplicate them, and an older position never lands after a newer one.
#[tokio::test]
async fn publishing_a_position_again_is_a_no_op() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "idempotent", TTL).await?;
    let domain = domain()?;
    let relay = common::relay(&outbox, &redis).await?;
    let redis_client = redis_pool(&redis.url()).await?;

    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    for n in 1..=3 {
        uow.raise(deposit("a", n))?;
    }
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;
    assert_eq!(relay.publish_pending().await?.published, 3);

    // The state a relay crash between publish and mark leaves behind.
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".outbox_streams SET published_seq = 0",
        outbox.schema()
    )))
    .execute(&pool)
    .await?;
    assert_eq!(
        relay.publish_pending().await?.published,
        3,
        "marked published again"
    );
    assert_eq!(
        numbers(&redis_client, &common::account_stream("a")).await?,
        vec![1, 2, 3],
        "nothing duplicated"
    );

    // A stale relay's old position after a newer one: dropped.
    let broker = RedisBroker::builder(redis.url()).build().await?;
    let mut envelope = Envelope::new(&deposit("a", 99))?;
    envelope.partition_key = Some("a".to_owned());
    envelope
        .metadata
        .insert(POSITION_SCOPE_METADATA.to_owned(), "account:a".to_owned());
    envelope
        .metadata
        .insert(POSITION_METADATA.to_owned(), "2".to_owned());
    let publication = Publication::to_partition("a", Lane::Primary, envelope);
    broker.publish(std::slice::from_ref(&publication)).await?;
    assert_eq!(
        numbers(&redis_client, &common::account_stream("a")).await?,
        vec![1, 2, 3]
    );
    Ok(())
}

#[tokio::test]
async fn invalid_rows_are_abandoned_at_once_and_published_rows_expire() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "abandon", TTL).await?;
    // The domain appends through `commit()` into the PostgreSQL outbox.
    let broker = RedisBroker::builder(redis.url()).build().await?;
    let domain = Domain::builder()
        .aggregate::<common::Account>()
        .event_handler(common::Ledger)
        .broker(broker)
        .outbox(outbox.clone())
        .init()?;
    let redis_client = redis_pool(&redis.url()).await?;

    // A row that bypassed validation (written by an older version, or by hand)...
    let mut bad = Envelope::new(&deposit("x", 1))?;
    bad.partition_key = Some("__x__".to_owned());
    outbox.append(vec![NewOutboxRow::new(bad, Lane::Primary)]).await?;
    // ...and a good one behind it, through the domain's commit().
    let mut uow = domain.unit_of_work();
    uow.raise(deposit("y", 2))?;
    uow.commit().await?;
    assert_eq!(count_status(&outbox, 0).await?, 2);
    let status = OutboxStatusReport::read(&outbox).await?;
    assert_eq!((status.pending, status.abandoned), (2, 0));

    let relay = PgRelay::for_domain(outbox.clone(), &domain)
        .retention(Duration::ZERO)
        .batch_size(16);
    let report = relay.publish_pending().await?;
    assert_eq!((report.published, report.abandoned, report.failed), (1, 1, 0));
    assert_eq!(
        numbers(&redis_client, &common::account_stream("y")).await?,
        vec![2]
    );
    let abandoned = outbox.get(1).await?.expect("the bad row is kept");
    assert!(
        abandoned
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("__x__"),
        "{abandoned:?}"
    );
    let status = OutboxStatusReport::read(&outbox).await?;
    assert_eq!((status.pending, status.abandoned), (0, 1), "{status}");

    // Retention zero: the published row goes, the abandoned one stays.
    assert_eq!(relay.cleanup().await?, 1);
    assert_eq!(count_status(&outbox, 1).await?, 0);
    assert_eq!(count_status(&outbox, 2).await?, 1);
    Ok(())
}

/// Publishing moves one position per scope instead of writing a new
/// version of every published row: the outbox rows are never updated, and
/// the positions say what is published (also past an abandoned row that
/// ends a scope, which does not keep the scope among those to publish).
#[tokio::test]
async fn publishing_moves_scope_positions_without_updating_rows() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let redis = Redis::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "positions", TTL).await?;
    let domain = domain()?;
    let relay = common::relay(&outbox, &redis).await?.batch_size(7);
    let redis_client = redis_pool(&redis.url()).await?;

    for round in 0..3u64 {
        let mut tx = pool.begin().await?;
        let mut uow = domain.unit_of_work();
        for n in 1..=10 {
            uow.raise(deposit(if n % 2 == 0 { "even" } else { "odd" }, round * 10 + n))?;
        }
        uow.commit_in_outbox(&outbox, &mut tx).await?;
        tx.commit().await?;
    }
    // A row whose key became invalid (written by hand) ends the `odd` scope.
    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    uow.raise(deposit("odd", 99))?;
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{}\".outbox SET partition_key = '__x__' WHERE stream = 'account:odd' AND seq = 16",
        outbox.schema()
    )))
    .execute(&pool)
    .await?;
    let versions = format!(
        "SELECT id, xmin::text FROM \"{}\".outbox ORDER BY id",
        outbox.schema()
    );
    let before: Vec<(i64, String)> = sqlx::query_as(AssertSqlSafe(versions.clone()))
        .fetch_all(&pool)
        .await?;

    let report = relay.publish_pending().await?;
    assert_eq!((report.published, report.abandoned), (30, 1));
    assert_eq!(
        numbers(&redis_client, &common::account_stream("odd"))
            .await?
            .len(),
        15
    );
    let after: Vec<(i64, String)> = sqlx::query_as(AssertSqlSafe(versions)).fetch_all(&pool).await?;
    let changed = before.iter().zip(&after).filter(|(b, a)| b != a).count();
    assert_eq!(changed, 1, "only the abandoned row has a new version");
    let positions: Vec<(String, i64, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT stream, last_seq, published_seq FROM \"{}\".outbox_streams ORDER BY stream",
        outbox.schema()
    )))
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        positions,
        vec![
            ("account:even".to_owned(), 15, 15),
            ("account:odd".to_owned(), 16, 16)
        ]
    );
    assert_eq!(count_status(&outbox, 0).await?, 0);
    assert_eq!(count_status(&outbox, 1).await?, 30);
    let status = OutboxStatusReport::read(&outbox).await?;
    assert_eq!((status.pending, status.abandoned), (0, 1), "{status}");
    Ok(())
}

/// An outbox of version 2 (a status per row) upgraded to version 3: each
/// scope is published up to the row before its first pending one.
#[tokio::test]
async fn migrating_from_row_statuses_keeps_pending_rows_pending() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let pool = pg_pool(pg.url(), 2).await?;
    let schema = common::schema("upgrade");
    let quoted = format!("\"{schema}\"");
    let mut setup = format!(
        "CREATE SCHEMA {quoted}; CREATE TABLE {quoted}.migrations \
         (version int4 PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()); \
         INSERT INTO {quoted}.migrations (version) VALUES (1), (2);"
    );
    for text in [
        include_str!("../../migrations/0001_outbox.sql"),
        include_str!("../../migrations/0002_abandoned_index.sql"),
    ] {
        setup.push_str(&text.replace("{schema}", &quoted).replace("{slots}", "64"));
    }
    // Scope a: 1, 2 published, 3 abandoned, 4 pending. Scope b: all published
    // (1 already deleted by the retention). Scope c: all pending.
    setup.push_str(&format!(
        "INSERT INTO {quoted}.outbox_streams (stream, slot, last_seq) VALUES ('t:a', 1, 4), ('t:b', 2, 2), ('t:c', 3, 1); \
         INSERT INTO {quoted}.outbox (stream, seq, slot, message_id, category, type_name, lane, envelope, status) VALUES \
         ('t:a', 1, 1, 'a1', 't', 'T', 0, '{{}}', 1), ('t:a', 2, 1, 'a2', 't', 'T', 0, '{{}}', 1), \
         ('t:a', 3, 1, 'a3', 't', 'T', 0, '{{}}', 2), ('t:a', 4, 1, 'a4', 't', 'T', 0, '{{}}', 0), \
         ('t:b', 2, 2, 'b2', 't', 'T', 0, '{{}}', 1), ('t:c', 1, 3, 'c1', 't', 'T', 0, '{{}}', 0);"
    ));
    sqlx::raw_sql(AssertSqlSafe(setup)).execute(&pool).await?;

    let outbox = PgOutbox::builder(pool.clone()).schema(&schema).build()?;
    outbox.migrate().await?;
    let positions: Vec<(String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT stream, published_seq FROM {quoted}.outbox_streams ORDER BY stream"
    )))
    .fetch_all(&pool)
    .await?;
    assert_eq!(
        positions,
        vec![
            ("t:a".to_owned(), 3),
            ("t:b".to_owned(), 2),
            ("t:c".to_owned(), 0)
        ]
    );
    assert_eq!(count_status(&outbox, 0).await?, 2, "a4 and c1 pending");
    assert_eq!(count_status(&outbox, 1).await?, 3);
    assert_eq!(count_status(&outbox, 2).await?, 1);
    let status = OutboxStatusReport::read(&outbox).await?;
    assert_eq!((status.pending, status.abandoned), (2, 1), "{status}");
    Ok(())
}
