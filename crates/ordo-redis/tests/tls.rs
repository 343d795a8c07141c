//! `rediss://` against a real `redis-server --tls-port`, with certificates
//! made here: the right CA works, a wrong CA is refused with a clear error,
//! mutual TLS works with the client certificate and is refused without it.

mod common;

use std::path::{Path, PathBuf};

use ordo_core::broker::Broker;
use ordo_core::key::Lane;
use ordo_redis::{RedisBroker, TlsFiles};
use ordo_testkit::{Redis, RedisTls};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

use common::publication;

/// A CA, and certificates it signs, written as PEM files into a directory.
struct Authority {
    certificate: rcgen::Certificate,
    key: KeyPair,
    /// The CA certificate's file.
    file: PathBuf,
}

impl Authority {
    fn new(dir: &Path, name: &str) -> anyhow::Result<Self> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let certificate = params.self_signed(&key)?;
        let file = dir.join(format!("{name}.pem"));
        std::fs::write(&file, certificate.pem())?;
        Ok(Self {
            certificate,
            key,
            file,
        })
    }

    /// A certificate for `names` with `purpose`, signed by this CA; its
    /// certificate and key files.
    fn issue(
        &self,
        dir: &Path,
        file_name: &str,
        names: &[&str],
        purpose: ExtendedKeyUsagePurpose,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>())?;
        params.distinguished_name.push(DnType::CommonName, file_name);
        params.extended_key_usages = vec![purpose];
        let certificate = params.signed_by(&key, &self.certificate, &self.key)?;
        let cert_file = dir.join(format!("{file_name}.pem"));
        let key_file = dir.join(format!("{file_name}.key"));
        std::fs::write(&cert_file, certificate.pem())?;
        std::fs::write(&key_file, key.serialize_pem())?;
        Ok((cert_file, key_file))
    }
}

/// A Redis listening for TLS with a certificate of `ca`.
fn tls_redis(dir: &Path, ca: &Authority, require_client_certificate: bool) -> anyhow::Result<Redis> {
    let (cert_file, key_file) = ca.issue(
        dir,
        "server",
        &["127.0.0.1", "localhost"],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    Ok(Redis::builder()
        .tls(RedisTls {
            cert_file,
            key_file,
            ca_file: ca.file.clone(),
            require_client_certificate,
        })
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
        .map(|error| ordo_core::error::error_chain(error))
        .unwrap_or_else(|| format!("{error:#}"))
}

#[tokio::test]
async fn the_right_ca_is_trusted_and_a_wrong_one_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let ca = Authority::new(dir.path(), "ordo-ca")?;
    let stranger = Authority::new(dir.path(), "stranger-ca")?;
    let redis = tls_redis(dir.path(), &ca, false)?;
    let url = redis.tls_url().expect("a TLS port");

    publish_through(&url, TlsFiles::new().ca_file(&ca.file)).await?;

    let refused = publish_through(&url, TlsFiles::new().ca_file(&stranger.file))
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
    let plain = publish_through(&redis.url(), TlsFiles::new().ca_file(&ca.file))
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
    let ca = Authority::new(dir.path(), "ordo-ca")?;
    let redis = tls_redis(dir.path(), &ca, true)?;
    let url = redis.tls_url().expect("a TLS port");
    let (cert_file, key_file) = ca.issue(
        dir.path(),
        "worker",
        &["worker"],
        ExtendedKeyUsagePurpose::ClientAuth,
    )?;

    publish_through(
        &url,
        TlsFiles::new()
            .ca_file(&ca.file)
            .client_certificate(&cert_file, &key_file),
    )
    .await?;

    let anonymous = publish_through(&url, TlsFiles::new().ca_file(&ca.file))
        .await
        .expect_err("the server requires a client certificate");
    assert!(
        connect_error(&anonymous).starts_with(&format!("cannot connect to Redis at {url}: ")),
        "{anonymous:#}"
    );

    let half = publish_through(
        &url,
        TlsFiles::new()
            .ca_file(&ca.file)
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
