//! TLS for `rediss://` URLs: which CA to trust, and the client certificate
//! of mutual TLS. rustls on ring (no OpenSSL).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use fred::types::config::{Config as FredConfig, TlsConfig, TlsConnector, TlsHostMapping};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// TLS files for a `rediss://` (or `rediss-cluster://`) URL; without any,
/// such a URL trusts the system's CA certificates and presents no client
/// certificate.
///
/// In `domain.toml` (read by the `ordo` tool) they are `[redis] tls_ca_file`,
/// `tls_cert_file` and `tls_key_file`; in code, [`RedisBrokerBuilder::tls`](crate::RedisBrokerBuilder::tls).
///
/// ```
/// use ordo_redis::TlsFiles;
///
/// let tls = TlsFiles::new()
///     .ca_file("/etc/ordo/redis-ca.pem")
///     .client_certificate("/etc/ordo/client.pem", "/etc/ordo/client.key");
/// # let _ = tls;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

impl TlsFiles {
    /// No files: the system's CAs, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CA certificates (PEM) in `path` instead of the system's.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents the certificate chain (PEM) in `cert` with the private key
    /// (PEM: PKCS#8, PKCS#1 or SEC1) in `key`: mutual TLS.
    #[must_use]
    pub fn client_certificate(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    /// Sets each file that is `Some` (as read from a configuration file,
    /// where a certificate may be given without its key: that is an error
    /// when connecting, naming the missing setting).
    #[must_use]
    pub fn with_files(
        mut self,
        ca_file: Option<PathBuf>,
        cert_file: Option<PathBuf>,
        key_file: Option<PathBuf>,
    ) -> Self {
        self.ca_file = ca_file.or(self.ca_file);
        self.cert_file = cert_file.or(self.cert_file);
        self.key_file = key_file.or(self.key_file);
        self
    }

    /// Whether no file is set.
    pub fn is_empty(&self) -> bool {
        self.ca_file.is_none() && self.cert_file.is_none() && self.key_file.is_none()
    }

    /// Replaces the default TLS of `config` (a `rediss://` URL's) with one
    /// made from these files; nothing to do without files.
    pub(crate) fn apply(&self, config: &mut FredConfig) -> Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        if config.tls.is_none() {
            return Err(Error::Config {
                key: "tls",
                reason:
                    "TLS files are set but the URL does not use TLS: write rediss:// (or rediss-cluster://)"
                        .to_owned(),
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| tls_error("tls", format!("no TLS protocol version is available: {error}")))?
            .with_root_certificates(self.roots()?);
        let client = match (&self.cert_file, &self.key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(cert), Some(key)) => {
                let chain = certificates(cert, "tls_cert_file")?;
                let key = private_key(key)?;
                builder.with_client_auth_cert(chain, key).map_err(|error| {
                    tls_error("tls_key_file", format!("does not fit the certificate: {error}"))
                })?
            }
            (Some(_), None) => {
                return Err(tls_error(
                    "tls_key_file",
                    "is missing: a client certificate needs its private key".to_owned(),
                ));
            }
            (None, Some(_)) => {
                return Err(tls_error(
                    "tls_cert_file",
                    "is missing: a client private key needs its certificate".to_owned(),
                ));
            }
        };
        let hostnames = config
            .tls
            .take()
            .map_or(TlsHostMapping::None, |tls| tls.hostnames);
        config.tls = Some(TlsConfig {
            connector: TlsConnector::from(client),
            hostnames,
        });
        Ok(())
    }

    /// The CAs of `ca_file`, or the system's.
    fn roots(&self) -> Result<rustls::RootCertStore> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca_file {
            Some(path) => {
                for certificate in certificates(path, "tls_ca_file")? {
                    roots.add(certificate).map_err(|error| {
                        tls_error(
                            "tls_ca_file",
                            format!("{}: not a CA certificate: {error}", path.display()),
                        )
                    })?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for certificate in native.certs {
                    // A system store may hold certificates rustls cannot use; skipping them
                    // is what every rustls client does.
                    let _ = roots.add(certificate);
                }
            }
        }
        Ok(roots)
    }
}

fn tls_error(key: &'static str, reason: String) -> Error {
    Error::Config { key, reason }
}

/// The PEM certificates in `path` (at least one).
fn certificates(path: &Path, key: &'static str) -> Result<Vec<CertificateDer<'static>>> {
    let text = read(path, key)?;
    let certificates = rustls_pemfile::certs(&mut text.as_slice())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|error| tls_error(key, format!("{}: not PEM: {error}", path.display())))?;
    if certificates.is_empty() {
        return Err(tls_error(
            key,
            format!(
                "{}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                path.display()
            ),
        ));
    }
    Ok(certificates)
}

/// The PEM private key in `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let key = "tls_key_file";
    let text = read(path, key)?;
    rustls_pemfile::private_key(&mut text.as_slice())
        .map_err(|error| tls_error(key, format!("{}: not PEM: {error}", path.display())))?
        .ok_or_else(|| tls_error(key, format!("{}: holds no PEM private key", path.display())))
}

fn read(path: &Path, key: &'static str) -> Result<Vec<u8>> {
    std::fs::read(path)
        .map_err(|error| tls_error(key, format!("{}: cannot read it: {error}", path.display())))
}
