//! `rediss://` against a real `redis-server --tls-port`, with certificates
//! made here: the right CA works, a wrong CA is refused with a clear error,
//! mutual TLS works with the client certificate and is refused without it.

use crate::common;

use ordo_core::contract::broker::Broker;
use ordo_core::contract::key::Lane;
use ordo_redis::{RedisBroker, TlsFiles};
use ordo_testkit::{Redis, TestCa};

use common::publication;

/// A Redis listening for TLS with a certificate of `ca`.
fn tls_redis(ca: &TestCa, require_client_certificate: bool) -> anyhow::Result<Redis> {
    Ok(Redis::builder()
        .tls(ca.redis_tls(require_client_certificate)?)
        .start()?)
}

/// A broker on `url` with `tls`; publishing works through it.
async fn publish_through(url: &str, tls: TlsFiles) -> anyhow::Result<()> {
    let broker = RedisBroker::builder(url).tls(tls).build().await?;
    let category = common::category("tls");
    broker
        .publish(&[publication(&category, "k", 0, Lane::Primary)])
        .await?;
    Ok(())
}

fn connect_error(error: &anyhow::Error) -> String {
    error
        .downcast_ref::<ordo_redis::Error>()
        .map(|error| ordo_core::contract::error::error_chain(error))
        .unwrap_or_else(|| format!("{error:#}"))
}

#[tokio::test]
async fn the_right_ca_is_trusted_and_a_wrong_one_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "ordo-ca")?;
    let stranger = TestCa::new(dir.path(), "stranger-ca")?;
    let redis = tls_redis(&ca, false)?;
    let url = redis.tls_url().expect("a TLS port");

    publish_through(&url, TlsFiles::new().ca_file(ca.file())).await?;

    let refused = publish_through(&url, TlsFiles::new().ca_file(stranger.file()))
        .await
        .expect_err("a server certificate of another CA is refused");
    let text = connect_error(&refused);
    assert!(
        text.starts_with(&format!("cannot connect to Redis at {url}: ")) && text.contains("UnknownIssuer"),
        "{text}"
    );

    // Without a CA file, the system's CAs are trusted, and they do not know this one.
    let unknown = publish_through(&url, TlsFiles::new())
        .await
        .expect_err("the test CA is not a system CA");
    assert!(connect_error(&unknown).contains("UnknownIssuer"), "{unknown:#}");

    // TLS files with a URL without TLS: a configuration error, not a silent plain connection.
    let plain = publish_through(&redis.url(), TlsFiles::new().ca_file(ca.file()))
        .await
        .expect_err("TLS files need rediss://");
    assert!(
        connect_error(&plain).contains("`tls` TLS files are set but the URL does not use TLS"),
        "{plain:#}"
    );
    Ok(())
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = TestCa::new(dir.path(), "ordo-ca")?;
    let redis = tls_redis(&ca, true)?;
    let url = redis.tls_url().expect("a TLS port");
    let (cert_file, key_file) = ca.client("worker")?;

    publish_through(
        &url,
        TlsFiles::new()
            .ca_file(ca.file())
            .client_certificate(&cert_file, &key_file),
    )
    .await?;

    let anonymous = publish_through(&url, TlsFiles::new().ca_file(ca.file()))
        .await
        .expect_err("the server requires a client certificate");
    assert!(
        connect_error(&anonymous).starts_with(&format!("cannot connect to Redis at {url}: ")),
        "{anonymous:#}"
    );

    let half = publish_through(
        &url,
        TlsFiles::new()
            .ca_file(ca.file())
            .with_files(None, Some(cert_file.clone()), None),
    )
    .await
    .expect_err("a certificate without its key");
    assert!(
        connect_error(&half).contains("`tls_key_file` is missing"),
        "{half:#}"
    );

    let missing = dir.path().join("absent.pem");
    let unreadable = publish_through(&url, TlsFiles::new().ca_file(&missing))
        .await
        .expect_err("a CA file that does not exist");
    let text = connect_error(&unreadable);
    assert!(
        text.contains("`tls_ca_file`") && text.contains("absent.pem: cannot read it"),
        "{text}"
    );
    Ok(())
}
