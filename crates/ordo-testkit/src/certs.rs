//! Certificates for TLS tests: a CA made on the spot, and server and client
//! certificates it signs, written as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::error::{Result, TestkitError};
use crate::postgres::PostgresTls;
use crate::redis::RedisTls;

/// A test certificate authority whose files live in a directory of the test.
///
/// ```no_run
/// let dir = tempfile::tempdir()?;
/// let ca = ordo_testkit::TestCa::new(dir.path(), "ordo-ca")?;
/// let redis = ordo_testkit::Redis::builder().tls(ca.redis_tls(false)?).start()?;
/// let url = redis.tls_url(); // rediss://127.0.0.1:PORT; trust ca.file()
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TestCa {
    certificate: Certificate,
    key: KeyPair,
    dir: PathBuf,
    file: PathBuf,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

fn failed(what: &'static str) -> impl Fn(rcgen::Error) -> TestkitError {
    move |error| TestkitError::Io {
        what: what.to_owned(),
        source: std::io::Error::other(error),
    }
}

impl TestCa {
    /// A new CA named `name`; its certificate is written to `dir/NAME.pem`.
    pub fn new(dir: &Path, name: &str) -> Result<Self> {
        let key = KeyPair::generate().map_err(failed("generate a CA key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(failed("make CA parameters"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.distinguished_name.push(DnType::CommonName, name);
        let certificate = params
            .self_signed(&key)
            .map_err(failed("sign the CA certificate"))?;
        let file = dir.join(format!("{name}.pem"));
        write(&file, &certificate.pem())?;
        Ok(Self {
            certificate,
            key,
            dir: dir.to_owned(),
            file,
        })
    }

    /// The CA certificate's PEM file (what a client trusts).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// A server certificate for `127.0.0.1` and `localhost`: its certificate and key files.
    pub fn server(&self, name: &str) -> Result<(PathBuf, PathBuf)> {
        self.issue(
            name,
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate (mutual TLS): its certificate and key files.
    pub fn client(&self, name: &str) -> Result<(PathBuf, PathBuf)> {
        self.issue(name, &[name], ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// TLS settings for a testkit Redis with a server certificate of this CA,
    /// requiring client certificates of this CA or not.
    pub fn redis_tls(&self, require_client_certificate: bool) -> Result<RedisTls> {
        let (cert_file, key_file) = self.server("redis-server")?;
        Ok(RedisTls {
            cert_file,
            key_file,
            ca_file: self.file.clone(),
            require_client_certificate,
        })
    }

    /// TLS settings for a testkit PostgreSQL with a server certificate of
    /// this CA, refusing plain connections or not; client certificates of
    /// this CA are accepted (set `require_client_certificate` to demand one).
    pub fn postgres_tls(&self, require_tls: bool) -> Result<PostgresTls> {
        let (cert_file, key_file) = self.server("postgres-server")?;
        Ok(PostgresTls {
            cert_file,
            key_file,
            ca_file: self.file.clone(),
            require_tls,
            require_client_certificate: false,
        })
    }

    fn issue(
        &self,
        name: &str,
        names: &[&str],
        purpose: ExtendedKeyUsagePurpose,
    ) -> Result<(PathBuf, PathBuf)> {
        let key = KeyPair::generate().map_err(failed("generate a key"))?;
        let mut params =
            CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>())
                .map_err(failed("make certificate parameters"))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![purpose];
        let certificate = params
            .signed_by(&key, &self.certificate, &self.key)
            .map_err(failed("sign a certificate"))?;
        let cert_file = self.dir.join(format!("{name}.pem"));
        let key_file = self.dir.join(format!("{name}.key"));
        write(&cert_file, &certificate.pem())?;
        write(&key_file, &key.serialize_pem())?;
        Ok((cert_file, key_file))
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|source| TestkitError::Io {
        what: format!("write {}", path.display()),
        source,
    })
}
