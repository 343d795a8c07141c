//! [`Redis`]: one Redis server per test, started here or taken from `REDIS_URL`.

use std::ffi::OsString;
use std::time::Duration;

use crate::error::{Result, TestkitError};
use crate::local::LocalServer;
use crate::resp::Endpoint;
use crate::secret::{SecretUrl, redact};

/// How long [`Redis::ping`] waits for a reply.
const DEFAULT_PING_TIMEOUT: Duration = Duration::from_secs(1);
/// How long an external Redis may take to answer the first PING.
const EXTERNAL_PING_TIMEOUT: Duration = Duration::from_secs(2);

/// A Redis for a test: a `redis-server` child process the test controls, or an
/// external server named by `REDIS_URL`.
///
/// A spawned server listens on `127.0.0.1` on a port of its own, keeps its data
/// in a temporary directory of its own, and is killed (and the directory
/// removed) when the `Redis` is dropped; parallel tests never share one. Tests
/// isolate their keys with unique prefixes rather than flushing.
///
/// All methods block the calling thread (they never need an async runtime), so
/// they can be called from `#[test]` and `#[tokio::test]` functions alike.
///
/// ```no_run
/// let mut redis = ordo_testkit::Redis::start_local()?;
/// let url = redis.url(); // hand this to the client under test
/// redis.pause()?; // SIGSTOP: clients time out
/// redis.resume()?;
/// redis.kill()?; // SIGKILL: connections drop
/// redis.restart()?; // same port, same data directory
/// redis.ping()?;
/// # Ok::<(), ordo_testkit::TestkitError>(())
/// ```
#[derive(Debug)]
pub struct Redis {
    endpoint: Endpoint,
    url: SecretUrl,
    /// The TLS port of a server started with [`RedisBuilder::tls`].
    tls_port: Option<u16>,
    backend: Backend,
}

#[derive(Debug)]
enum Backend {
    Local(LocalServer),
    External,
    #[cfg(feature = "testcontainers")]
    Container(crate::container::ContainerServer),
}

/// Options for a `redis-server` started by the testkit; see [`Redis::builder`].
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisBuilder {
    append_only: bool,
    extra_args: Vec<OsString>,
    tls: Option<RedisTls>,
}

/// The TLS side of a testkit Redis (see [`RedisBuilder::tls`]): PEM files of
/// the server's certificate, its key and the CA that client certificates
/// must chain to.
#[derive(Debug, Clone)]
pub struct RedisTls {
    /// The server's certificate (`--tls-cert-file`).
    pub cert_file: std::path::PathBuf,
    /// The server's private key (`--tls-key-file`).
    pub key_file: std::path::PathBuf,
    /// The CA of client certificates (`--tls-ca-cert-file`).
    pub ca_file: std::path::PathBuf,
    /// Whether clients must present a certificate (`--tls-auth-clients`).
    pub require_client_certificate: bool,
}

impl RedisBuilder {
    /// Turns the append-only file on (`--appendonly yes`), so data survives
    /// [`Redis::restart`], even after [`Redis::kill`]: Redis writes each command
    /// to the file before it replies. Off by default.
    pub fn append_only(mut self, enabled: bool) -> Self {
        self.append_only = enabled;
        self
    }

    /// Appends one raw argument to the `redis-server` command line, after the
    /// testkit's own, e.g. `.extra_arg("--maxmemory").extra_arg("10mb")`.
    pub fn extra_arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Also listens for TLS on a port of its own ([`Redis::tls_url`]), with
    /// these files; the plain port stays open for the testkit's PING (and
    /// for tests that compare).
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Starts a `redis-server` with these options and waits until it answers
    /// PING. `REDIS_URL` is ignored: options only apply to a server the testkit runs.
    ///
    /// The binary is `ORDO_REDIS_SERVER` if set, else `redis-server` on `PATH`;
    /// when there is none, the error says how to install one.
    pub fn start(self) -> Result<Redis> {
        let mut options = self.options();
        let tls_port = match &self.tls {
            Some(tls) => {
                let port = crate::local::free_port()?;
                options.extend([
                    "--tls-port".into(),
                    port.to_string().into(),
                    "--tls-cert-file".into(),
                    tls.cert_file.clone().into(),
                    "--tls-key-file".into(),
                    tls.key_file.clone().into(),
                    "--tls-ca-cert-file".into(),
                    tls.ca_file.clone().into(),
                    "--tls-auth-clients".into(),
                    if tls.require_client_certificate {
                        "yes"
                    } else {
                        "no"
                    }
                    .into(),
                ]);
                Some(port)
            }
            None => None,
        };
        let server = LocalServer::start(options)?;
        let endpoint = server.endpoint();
        Ok(Redis {
            url: SecretUrl(format!("redis://{endpoint}")),
            tls_port,
            endpoint,
            backend: Backend::Local(server),
        })
    }

    /// Runs these options in a `redis:7.2` container (Docker, via testcontainers)
    /// and waits until it answers PING.
    ///
    /// The host port is fixed when the container is created, so
    /// [`Redis::restart`] keeps it. Killing, stopping and restarting map onto
    /// Docker stop/start, pausing onto Docker pause.
    #[cfg(feature = "testcontainers")]
    pub fn start_container(self) -> Result<Redis> {
        let mut args = vec!["redis-server".to_owned(), "--save".to_owned(), String::new()];
        args.extend(
            self.options()
                .iter()
                .map(|arg| arg.to_string_lossy().into_owned()),
        );
        let container = crate::container::ContainerServer::start(args)?;
        let endpoint = container.endpoint().clone();
        let redis = Redis {
            url: SecretUrl(format!("redis://{endpoint}")),
            tls_port: None,
            endpoint,
            backend: Backend::Container(container),
        };
        redis.wait_ready()?;
        Ok(redis)
    }

    fn options(&self) -> Vec<OsString> {
        let append_only = if self.append_only { "yes" } else { "no" };
        let mut options: Vec<OsString> = vec!["--appendonly".into(), append_only.into()];
        options.extend(self.extra_args.iter().cloned());
        options
    }
}

impl Redis {
    /// The Redis named by `REDIS_URL` if that is set (after checking that it
    /// answers PING), else a fresh `redis-server` as [`Redis::start_local`] starts it.
    ///
    /// An external Redis cannot be killed, paused or restarted: tests that do
    /// that call [`Redis::start_local`].
    pub fn start() -> Result<Redis> {
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.trim().is_empty() => Redis::external(url.trim()),
            _ => Redis::start_local(),
        }
    }

    /// A fresh `redis-server` with default options, whatever `REDIS_URL` says.
    pub fn start_local() -> Result<Redis> {
        Redis::builder().start()
    }

    /// A `redis:7.2` container with default options; see [`RedisBuilder::start_container`].
    ///
    /// Needs a Docker engine. The crate's default image of the common test
    /// container module is Redis 5, which lacks XAUTOCLAIM; this one does not.
    #[cfg(feature = "testcontainers")]
    pub fn start_container() -> Result<Redis> {
        Redis::builder().start_container()
    }

    /// Options for a `redis-server` the testkit starts.
    pub fn builder() -> RedisBuilder {
        RedisBuilder::default()
    }

    /// The URL to hand to a client: `redis://127.0.0.1:PORT` for a server the
    /// testkit started, `REDIS_URL` as given for an external one.
    pub fn url(&self) -> String {
        self.url.0.clone()
    }

    /// `rediss://127.0.0.1:TLS_PORT` for a server started with
    /// [`RedisBuilder::tls`]; `None` otherwise.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|port| format!("rediss://127.0.0.1:{port}"))
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.endpoint.port
    }

    /// Whether this Redis comes from `REDIS_URL` (and so cannot be controlled).
    pub fn is_external(&self) -> bool {
        matches!(self.backend, Backend::External)
    }

    /// Sends PING and expects `+PONG` within one second.
    pub fn ping(&self) -> Result<()> {
        self.ping_timeout(DEFAULT_PING_TIMEOUT)
    }

    /// Sends PING and expects `+PONG`; `timeout` bounds the connect and each
    /// read and write, so a paused server fails after about `timeout`.
    pub fn ping_timeout(&self, timeout: Duration) -> Result<()> {
        self.endpoint.ping(timeout)
    }

    /// Creates (or resets) the ACL user `name` with `password` and every
    /// permission (`~* &* +@all`), for tests that connect as a named user.
    pub fn create_user(&self, name: &str, password: &str) -> Result<()> {
        self.create_user_with_rules(name, password, &["~*", "&*", "+@all"])
    }

    /// Creates (or resets) the ACL user `name` with `password` and exactly
    /// the ACL `rules` given (`ACL SETUSER name reset on >password rules...`):
    /// every permission not in `rules` is withheld.
    pub fn create_user_with_rules<S: AsRef<str>>(
        &self,
        name: &str,
        password: &str,
        rules: &[S],
    ) -> Result<()> {
        let secret = format!(">{password}");
        let mut args = vec!["ACL", "SETUSER", name, "reset", "on", &secret];
        args.extend(rules.iter().map(AsRef::as_ref));
        match self.endpoint.command(&args, DEFAULT_PING_TIMEOUT)? {
            crate::resp::Reply::Simple(ok) if ok == "OK" => Ok(()),
            other => Err(TestkitError::UnexpectedReply {
                addr: self.endpoint.to_string(),
                command: "ACL SETUSER",
                reply: format!("{other:?}"),
            }),
        }
    }

    /// The server's `ACL LOG`: every command, key or channel an ACL user was
    /// refused (newest first), and failed logins.
    pub fn acl_log(&self) -> Result<Vec<AclDenial>> {
        let unexpected = |reply: &dyn std::fmt::Debug| TestkitError::UnexpectedReply {
            addr: self.endpoint.to_string(),
            command: "ACL LOG",
            reply: format!("{reply:?}"),
        };
        let reply = self.endpoint.command(&["ACL", "LOG"], DEFAULT_PING_TIMEOUT)?;
        let crate::resp::Reply::Array(Some(entries)) = reply else {
            return Err(unexpected(&reply));
        };
        let mut denials = Vec::with_capacity(entries.len());
        for entry in entries {
            let crate::resp::Reply::Array(Some(fields)) = &entry else {
                return Err(unexpected(&entry));
            };
            let field = |name: &str| -> String {
                fields
                    .chunks(2)
                    .find(|pair| pair[0].text() == Some(name))
                    .and_then(|pair| pair.get(1))
                    .map(|value| match value {
                        crate::resp::Reply::Integer(n) => n.to_string(),
                        other => other.text().unwrap_or_default().to_owned(),
                    })
                    .unwrap_or_default()
            };
            denials.push(AclDenial {
                username: field("username"),
                reason: field("reason"),
                context: field("context"),
                object: field("object"),
            });
        }
        Ok(denials)
    }

    /// Empties the server's `ACL LOG`.
    pub fn reset_acl_log(&self) -> Result<()> {
        match self
            .endpoint
            .command(&["ACL", "LOG", "RESET"], DEFAULT_PING_TIMEOUT)?
        {
            crate::resp::Reply::Simple(ok) if ok == "OK" => Ok(()),
            other => Err(TestkitError::UnexpectedReply {
                addr: self.endpoint.to_string(),
                command: "ACL LOG RESET",
                reply: format!("{other:?}"),
            }),
        }
    }

    /// Kills the server with SIGKILL and waits until it has exited: no
    /// shutdown, no final AOF flush, clients see their connections drop.
    /// Does nothing if the server is already down.
    pub fn kill(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Local(server) => server.kill(),
            Backend::External => Err(TestkitError::External { action: "kill" }),
            #[cfg(feature = "testcontainers")]
            Backend::Container(container) => container.kill(),
        }
    }

    /// Freezes the server with SIGSTOP and returns once it is stopped: it keeps
    /// its connections and port but answers nothing until [`Redis::resume`].
    pub fn pause(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Local(server) => server.pause(),
            Backend::External => Err(TestkitError::External { action: "pause" }),
            #[cfg(feature = "testcontainers")]
            Backend::Container(container) => container.pause(),
        }
    }

    /// Lets a paused server run again (SIGCONT).
    pub fn resume(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Local(server) => server.resume(),
            Backend::External => Err(TestkitError::External { action: "resume" }),
            #[cfg(feature = "testcontainers")]
            Backend::Container(container) => container.resume(),
        }
    }

    /// Stops the server gracefully if it runs (see [`Redis::stop`]), starts it
    /// again on the same port with the same data directory, and waits until it
    /// answers PING. With [`RedisBuilder::append_only`] the data survives.
    pub fn restart(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Local(server) => server.restart(),
            Backend::External => Err(TestkitError::External { action: "restart" }),
            #[cfg(feature = "testcontainers")]
            Backend::Container(container) => {
                container.restart()?;
                self.wait_ready()
            }
        }
    }

    /// Shuts the server down gracefully (SIGTERM, resuming it first if paused)
    /// and waits until it has exited; Redis flushes its append-only file on the
    /// way out. Does nothing if the server is already down.
    pub fn stop(&mut self) -> Result<()> {
        match &mut self.backend {
            Backend::Local(server) => server.stop(),
            Backend::External => Err(TestkitError::External { action: "stop" }),
            #[cfg(feature = "testcontainers")]
            Backend::Container(container) => container.stop(),
        }
    }

    fn external(url: &str) -> Result<Redis> {
        let endpoint = Endpoint::parse(url).map_err(|reason| TestkitError::InvalidRedisUrl {
            url: redact(url),
            reason,
        })?;
        endpoint
            .ping(EXTERNAL_PING_TIMEOUT)
            .map_err(|source| TestkitError::ExternalUnreachable {
                url: redact(url),
                source: Box::new(source),
            })?;
        Ok(Redis {
            endpoint,
            url: SecretUrl(url.to_owned()),
            tls_port: None,
            backend: Backend::External,
        })
    }

    /// Polls PING until the server answers (a container reports "started" before Redis listens).
    #[cfg(feature = "testcontainers")]
    fn wait_ready(&self) -> Result<()> {
        const READY_TIMEOUT: Duration = Duration::from_secs(30);
        let mut last_error = None;
        let ready = crate::wait_until(READY_TIMEOUT, "the Redis container to answer PING", || {
            last_error = self.ping_timeout(Duration::from_millis(500)).err();
            last_error.is_none()
        });
        ready.map_err(|timeout| match (timeout, last_error) {
            (TestkitError::Timeout { what, waited }, Some(error)) => {
                let mut last = error.to_string();
                let mut source = std::error::Error::source(&error);
                while let Some(cause) = source {
                    last = format!("{last}: {cause}");
                    source = cause.source();
                }
                TestkitError::Timeout {
                    what: format!("{what} (last attempt: {last})"),
                    waited,
                }
            }
            (timeout, _) => timeout,
        })
    }
}

/// One entry of `ACL LOG`: what an ACL user was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclDenial {
    /// The user refused.
    pub username: String,
    /// `command`, `key`, `channel` or `auth`.
    pub reason: String,
    /// Where: `toplevel`, `multi` or `lua` (inside a script).
    pub context: String,
    /// The command, key or channel refused.
    pub object: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::local::free_port;

    #[test]
    fn an_external_redis_answers_but_refuses_control() {
        let local = Redis::start_local().unwrap();
        let url = format!("{}/2", local.url());
        let mut external = Redis::external(&url).unwrap();
        assert!(external.is_external());
        assert!(!local.is_external());
        assert_eq!(external.url(), url);
        assert_eq!(external.port(), local.port());
        external.ping().unwrap();
        for (action, outcome) in [
            ("kill", external.kill()),
            ("pause", external.pause()),
            ("resume", external.resume()),
            ("restart", external.restart()),
            ("stop", external.stop()),
        ] {
            let error = outcome.unwrap_err();
            assert!(
                matches!(error, TestkitError::External { .. }),
                "{action}: {error:?}"
            );
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("cannot {action} an external Redis (REDIS_URL is set)")),
                "{error}"
            );
        }
        local.ping().unwrap();
    }

    #[test]
    fn an_unreachable_redis_url_is_an_error_that_says_so() {
        let url = format!("redis://127.0.0.1:{}", free_port().unwrap());
        let error = Redis::external(&url).unwrap_err();
        assert!(
            matches!(&error, TestkitError::ExternalUnreachable { .. }),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("no Redis answered PING there"),
            "{error}"
        );
    }

    #[test]
    fn a_malformed_redis_url_is_rejected_with_the_reason() {
        let error = Redis::external("localhost:6379").unwrap_err();
        assert_eq!(
            error.to_string(),
            "REDIS_URL=\"localhost:6379\" is not a usable Redis URL (only the redis:// scheme is supported); \
             expected redis://host:port or redis://host:port/db"
        );
    }
}
