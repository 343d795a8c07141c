//! `fenced` and `PgProcessStore` against a real PostgreSQL: re-runs skipped,
//! stale owners refused. (The same under real worker failover is in
//! tests/failover.rs.)

use crate::common;

use std::time::Duration;

use common::{Deposited, pg_pool};
use ordo_core::contract::broker::{POSITION_METADATA, POSITION_SCOPE_METADATA};
use ordo_core::contract::error::ProcessStoreError;
use ordo_core::contract::handler::HandlerContext;
use ordo_core::contract::message::Envelope;
use ordo_core::contract::process::ProcessStore;
use ordo_postgres::{Error, Fence, PgProcessStore, fenced_in};
use ordo_testkit::Postgres;

fn context(position: Option<u64>, token: u64) -> anyhow::Result<HandlerContext> {
    let mut envelope = Envelope::new(&Deposited {
        account: "a".to_owned(),
        amount: 1,
        n: position.unwrap_or(0),
    })?;
    envelope.partition_key = Some("a".to_owned());
    if let Some(position) = position {
        envelope
            .metadata
            .insert(POSITION_SCOPE_METADATA.to_owned(), "account:a".to_owned());
        envelope
            .metadata
            .insert(POSITION_METADATA.to_owned(), position.to_string());
    }
    Ok(HandlerContext::new(&envelope).with_fencing_token(token))
}

#[tokio::test]
async fn a_fenced_transaction_applies_each_position_once_and_refuses_stale_owners() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let pool = pg_pool(pg.url(), 4).await?;
    let outbox = common::outbox(&pool, "fence", Duration::from_secs(5)).await?;
    let schema = outbox.schema();
    let run = |position, token| {
        let pool = pool.clone();
        async move {
            let ctx = context(position, token)?;
            let mut tx = pool.begin().await?;
            let outcome = fenced_in(schema, &mut tx, "projector", &ctx).await;
            tx.commit().await?;
            anyhow::Ok(outcome)
        }
    };

    assert_eq!(run(Some(1), 1).await?.unwrap(), Fence::Apply);
    assert_eq!(
        run(Some(1), 1).await?.unwrap(),
        Fence::AlreadyApplied,
        "a redelivery"
    );
    assert_eq!(run(Some(2), 1).await?.unwrap(), Fence::Apply);
    // A new owner (token 2) re-runs the in-flight message, then goes on.
    assert_eq!(run(Some(2), 2).await?.unwrap(), Fence::AlreadyApplied);
    assert_eq!(run(Some(3), 2).await?.unwrap(), Fence::Apply);
    // The old owner wakes up with the next message: refused.
    let stale = run(Some(4), 1).await?.expect_err("a stale token is fenced");
    assert!(
        matches!(
            stale,
            Error::Fenced {
                fencing_token: 1,
                current: 2,
                ..
            }
        ),
        "{stale:?}"
    );
    // A message that did not come from the outbox cannot be fenced by position.
    let unpositioned = run(None, 2).await?.expect_err("no position");
    assert!(matches!(unpositioned, Error::NoPosition { .. }), "{unpositioned}");

    // A rolled-back transaction records nothing: the re-run applies.
    let ctx = context(Some(4), 2)?;
    let mut tx = pool.begin().await?;
    assert_eq!(fenced_in(schema, &mut tx, "projector", &ctx).await?, Fence::Apply);
    tx.rollback().await?;
    assert_eq!(run(Some(4), 2).await?.unwrap(), Fence::Apply);
    // Another handler has its own record.
    let ctx = context(Some(4), 1)?;
    let mut tx = pool.begin().await?;
    assert_eq!(fenced_in(schema, &mut tx, "auditor", &ctx).await?, Fence::Apply);
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn the_process_store_refuses_a_stale_owners_save() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let pool = pg_pool(pg.url(), 2).await?;
    let outbox = common::outbox(&pool, "process", Duration::from_secs(5)).await?;
    let store = PgProcessStore::new(pool.clone(), outbox.schema())?;

    assert_eq!(store.load("Shipping", "o-1").await?, None);
    store
        .save("Shipping", "o-1", "{\"step\":1}".to_owned(), &context(None, 3)?)
        .await?;
    store
        .save("Shipping", "o-1", "{\"step\":2}".to_owned(), &context(None, 4)?)
        .await?;
    let stale = store
        .save("Shipping", "o-1", "{\"step\":9}".to_owned(), &context(None, 3)?)
        .await
        .expect_err("token 3 is older than 4");
    assert!(
        matches!(stale, ProcessStoreError::Fenced { fencing_token: 3, .. }),
        "{stale:?}"
    );
    assert_eq!(
        store.load("Shipping", "o-1").await?.as_deref(),
        Some("{\"step\":2}")
    );
    Ok(())
}

/// A message handled without a partition lease (fencing token 0: a handler
/// without `sequential_by`, whose messages run in any order on any
/// instance) cannot be fenced by position: once a later position is
/// applied, an earlier one would be taken for a redelivery and its effects
/// skipped. The fence refuses it instead.
#[tokio::test]
async fn a_message_delivered_without_a_partition_lease_is_refused() -> anyhow::Result<()> {
    let pg = Postgres::start()?;
    let pool = pg_pool(pg.url(), 2).await?;
    let outbox = common::outbox(&pool, "unleased", Duration::from_secs(5)).await?;
    let schema = outbox.schema();
    for position in [2, 1] {
        let ctx = context(Some(position), 0)?;
        let mut tx = pool.begin().await?;
        let outcome = fenced_in(schema, &mut tx, "projector", &ctx).await;
        tx.rollback().await?;
        let refused = outcome.expect_err("no partition lease, no position fence");
        assert!(matches!(refused, Error::NotLeased { .. }), "{refused:?}");
        let text = refused.to_string();
        assert!(
            text.contains("sequential_by") && text.contains("projector"),
            "{text}"
        );
    }
    Ok(())
}
