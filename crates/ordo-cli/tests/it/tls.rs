//! The `ordo` tool on a `rediss://` Redis: TLS files from domain.toml
//! (relative to it) or from flags, mutual TLS included.

use crate::common;

use common::ordo_in;
use ordo_testkit::{Redis, TestCa};

#[tokio::test]
async fn status_reads_a_tls_redis_with_the_files_of_domain_toml_or_the_flags() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "ordo-ca")?;
    let redis = Redis::builder().tls(ca.redis_tls(true)?).start()?;
    let url = redis.tls_url().expect("a TLS port");
    let (cert, key) = ca.client("operator")?;
    let expected = format!("no Ordo categories found in {url}\n");

    std::fs::write(
        dir.path().join("domain.toml"),
        format!(
            "[redis]\nurl = {url:?}\ntls_ca_file = \"ordo-ca.pem\"\ntls_cert_file = \"operator.pem\"\ntls_key_file = \"operator.key\"\n"
        ),
    )?;
    let by_file = ordo_in(dir.path(), &["status"], &[]).await?.expect_code(0)?;
    assert_eq!(by_file.stdout, expected);

    let elsewhere = tempfile::tempdir()?;
    let path = |file: &std::path::Path| file.to_str().expect("a UTF-8 temporary path").to_owned();
    let (ca_file, cert, key) = (path(ca.file()), path(&cert), path(&key));
    let by_flags = ordo_in(
        elsewhere.path(),
        &[
            "status",
            "--tls-ca-file",
            &ca_file,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
        ],
        &[("REDIS_URL", &url)],
    )
    .await?
    .expect_code(0)?;
    assert_eq!(by_flags.stdout, expected);

    // Without the client certificate the server refuses the handshake.
    let refused = ordo_in(
        elsewhere.path(),
        &["status", "--tls-ca-file", &ca_file],
        &[("REDIS_URL", &url)],
    )
    .await?
    .expect_code(1)?;
    refused.expect_stderr(&format!("cannot connect to Redis at {url}"))?;
    Ok(())
}
