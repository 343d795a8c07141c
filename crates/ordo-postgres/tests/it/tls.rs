//! PostgreSQL over TLS (`sslmode` in the database URL, through sqlx's rustls)
//! against a real server that only lets TLS connections in: the right CA
//! carries an outbox commit and its publishing, `sslmode=disable` is refused
//! with a clear error, and so is a client without the certificate the server
//! demands. (A wrong CA, refused by the library and the relay process: the
//! ordo-pg-relay crate's tests.)

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Deposited, domain, pg_pool, redis_pool, tls_postgres, url_with};
use ordo_core::contract::config::Config;
use ordo_postgres::{PgRelay, UnitOfWorkExt};
use ordo_redis::RedisBroker;
use ordo_testkit::{Postgres, Redis, TestCa};

const TTL: Duration = Duration::from_secs(5);

#[tokio::test]
async fn verify_full_with_the_right_ca_commits_and_publishes_over_tls() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "pg-ca")?;
    let pg = tls_postgres(&ca)?;
    let redis = Redis::start()?;
    let url = url_with(&pg, "verify-full", Some(ca.file()));
    let pool = pg_pool(&url, 2).await?;
    let (ssl, version): (bool, Option<String>) =
        sqlx::query_as("SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&pool)
            .await?;
    assert!(ssl, "the connection is not encrypted");
    assert!(
        version.as_deref().is_some_and(|v| v.starts_with("TLS")),
        "{version:?}"
    );

    let outbox = common::outbox(&pool, "tls", TTL).await?;
    let domain = domain()?;
    let mut tx = pool.begin().await?;
    let mut uow = domain.unit_of_work();
    for n in 1..=3 {
        uow.raise(Deposited {
            account: "a".to_owned(),
            amount: 10,
            n,
        })?;
    }
    uow.commit_in_outbox(&outbox, &mut tx).await?;
    tx.commit().await?;

    let broker = RedisBroker::builder(redis.url()).build().await?;
    let relay = PgRelay::new(outbox.clone(), Arc::new(broker), &Config::default());
    let report = relay.publish_pending().await?;
    assert_eq!(report.published, 3);
    let redis_client = redis_pool(&redis.url()).await?;
    assert_eq!(
        common::numbers(&redis_client, &common::account_stream("a")).await?,
        vec![1, 2, 3]
    );
    Ok(())
}

#[tokio::test]
async fn sslmode_disable_is_refused_by_a_server_that_requires_tls() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "pg-ca")?;
    let pg = tls_postgres(&ca)?;

    let error = pg_pool(&url_with(&pg, "disable", None), 1)
        .await
        .expect_err("a plain connection must be refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("pg_hba.conf") && text.contains("no encryption"),
        "{text}"
    );

    // The same server lets the same client in with TLS (the refusal is about TLS).
    let pool = pg_pool(&url_with(&pg, "verify-full", Some(ca.file())), 1).await?;
    let one: i32 = sqlx::query_scalar("SELECT 1").fetch_one(&pool).await?;
    assert_eq!(one, 1);
    Ok(())
}

#[tokio::test]
async fn a_client_certificate_in_the_url_is_presented_when_the_server_demands_one() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "pg-ca")?;
    // `clientcert=verify-full`: a certificate of `ca` whose common name is the user.
    let (cert, key) = ca.client("postgres")?;
    let mut tls = ca.postgres_tls(true)?;
    tls.require_client_certificate = true;
    let pg = Postgres::builder().tls(tls).start()?;
    let url = url_with(&pg, "verify-full", Some(ca.file()));

    let error = pg_pool(&url, 1)
        .await
        .expect_err("without a client certificate the server must refuse");
    let text = format!("{error:#}");
    assert!(text.contains("certificate"), "{text}");

    let with_cert = format!("{url}&sslcert={}&sslkey={}", cert.display(), key.display());
    let pool = pg_pool(&with_cert, 1).await?;
    let (ssl, client_dn): (bool, Option<String>) =
        sqlx::query_as("SELECT ssl, client_dn FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&pool)
            .await?;
    assert!(ssl);
    assert_eq!(client_dn.as_deref(), Some("/CN=postgres"));
    Ok(())
}
