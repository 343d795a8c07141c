//! `ordo status --database-url`: the PostgreSQL outbox next to the Redis view.

use crate::common;

use common::ordo_in;
use ordo_core::contract::key::Lane;
use ordo_core::contract::message::{Envelope, MessageKind, Metadata};
use ordo_core::contract::outbox::{NewOutboxRow, Outbox};
use ordo_postgres::PgOutbox;
use ordo_testkit::{Postgres, Redis};

fn row(key: &str) -> NewOutboxRow {
    NewOutboxRow::new(
        Envelope {
            id: format!("m-{key}"),
            kind: MessageKind::Event,
            type_name: "Noted".to_owned(),
            category: "audit".to_owned(),
            aggregate_id: None,
            routing_key: None,
            partition_key: Some(key.to_owned()),
            metadata: Metadata::new(),
            occurred_at: None,
            correlation_id: None,
            causation_id: None,
            payload: "{}".into(),
        },
        Lane::Primary,
    )
}

#[tokio::test]
async fn status_shows_the_postgres_outbox_and_warns_about_abandoned_rows() -> anyhow::Result<()> {
    let redis = Redis::start_local()?;
    let pg = Postgres::start()?;
    let pool = ordo_postgres::sqlx::PgPool::connect(pg.url()).await?;
    let schema = format!("cli_{}", std::process::id());
    let outbox = PgOutbox::builder(pool).schema(&schema).build()?;
    outbox.migrate().await?;
    let ids = outbox.append(vec![row("a"), row("b"), row("c")]).await?;
    outbox.mark_abandoned(ids[0], "invalid key").await?;

    let dir = tempfile::tempdir()?;
    let url = redis.url();
    let args = ["status", "--database-url", pg.url(), "--outbox-schema", &schema];
    let text = ordo_in(dir.path(), &args, &[("REDIS_URL", &url)])
        .await?
        .expect_code(0)?;
    text.expect_stdout(&format!("PostgreSQL outbox `{schema}`: 2 pending"))?;
    let json_args = [&args[..], &["--json", "--check"]].concat();
    let checked = ordo_in(dir.path(), &json_args, &[("REDIS_URL", &url)])
        .await?
        .expect_code(5)?;
    let json = checked.json()?;
    assert_eq!(json["outbox"]["pending"], 2);
    assert_eq!(json["outbox"]["abandoned"], 1);
    assert!(json["warnings"].to_string().contains("abandoned"), "{json}");

    let missing = [
        "status",
        "--database-url",
        pg.url(),
        "--outbox-schema",
        "no_such_schema",
    ];
    let failed = ordo_in(dir.path(), &missing, &[("REDIS_URL", &url)])
        .await?
        .expect_code(1)?;
    failed.expect_stderr("is it migrated")?;
    Ok(())
}
