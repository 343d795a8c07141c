//! The relay process against a PostgreSQL over TLS: a wrong CA is refused
//! with an error that names the URL and keeps its password secret.

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::{PASSWORD, pg_pool, tls_postgres, url_with, with_password};
use ordo_testkit::{Redis, TestCa};

#[tokio::test]
async fn a_wrong_ca_is_refused_naming_the_url_without_its_password() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "pg-ca")?;
    let other = TestCa::new(dir.path(), "other-ca")?;
    let pg = tls_postgres(&ca)?;
    let url = with_password(&url_with(&pg, "verify-full", Some(other.file())));

    // The library: rustls's verdict, at once (not after the pool's timeout).
    let error = pg_pool(&url, 1).await.expect_err("a wrong CA must be refused");
    let text = format!("{error:#}");
    assert!(text.contains("invalid peer certificate: UnknownIssuer"), "{text}");

    // The relay process: its error names the URL, password redacted.
    let redis = Redis::start()?;
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_ordo-pg-relay"))
            .env("DATABASE_URL", &url)
            .env("REDIS_URL", redis.url())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .map_err(|_| anyhow::anyhow!("ordo-pg-relay did not give up on a wrong CA within 60 s"))??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let redacted = format!("cannot connect to {}", ordo_redis::redact_url(&url));
    assert!(redacted.contains("postgres:***@"), "{redacted}");
    assert!(stderr.contains(&redacted), "{stderr}");
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
    assert!(!stderr.contains(PASSWORD), "the password leaked: {stderr}");
    Ok(())
}
