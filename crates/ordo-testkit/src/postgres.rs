//! A private PostgreSQL server per test run: `initdb` into a temporary
//! directory, then `postgres` on a free port of 127.0.0.1.
//!
//! The binaries come from `ORDO_PG_BIN` (a directory), `PATH`, or the usual
//! install locations (`/usr/lib/postgresql/<version>/bin`, newest first).
//! PostgreSQL refuses to run as root: when the tests run as root, `initdb`
//! and `postgres` run as the `postgres` user (set with `setuid` in the child).
//! `DATABASE_URL=postgres://...` makes [`Postgres::start`] use that server
//! instead; tests then isolate themselves by schema.

use std::fs::{self, File};
use std::io::Read;
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::error::{Result, TestkitError};
use crate::local::free_port;
use crate::secret::SecretUrl;
use crate::signal::{self, pid_of};
use crate::wait::POLL_INTERVAL;

/// How long a fresh server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long shutdown waits for the server to exit before killing it.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// What PostgreSQL logs once it serves clients.
const READY_LINE: &str = "database system is ready to accept connections";
const LOG_FILE: &str = "postgres.log";

const INSTALL_HINT: &str = "install PostgreSQL with `apt-get install postgresql` (its binaries land in \
     /usr/lib/postgresql/<version>/bin, which the testkit searches), put `initdb` and `postgres` on PATH, \
     set ORDO_PG_BIN=/dir/with/binaries, or set DATABASE_URL=postgres://user@host:port/db to use a running server";

/// The TLS side of a testkit PostgreSQL (see [`PostgresBuilder::tls`]): PEM
/// files of the server's certificate and key, copied into the data directory
/// (owned by the server's user, mode 0600, as PostgreSQL demands).
#[derive(Debug, Clone)]
pub struct PostgresTls {
    /// The server's certificate (`ssl_cert_file`).
    pub cert_file: PathBuf,
    /// The server's private key (`ssl_key_file`).
    pub key_file: PathBuf,
    /// The CA of client certificates (`ssl_ca_file`).
    pub ca_file: PathBuf,
    /// Whether clients must use TLS: `pg_hba.conf` then holds `hostssl`
    /// lines only, so a plain connection is refused.
    pub require_tls: bool,
    /// Whether clients must present a certificate of `ca_file` whose common
    /// name is their user name (`clientcert=verify-full`); implies `require_tls`.
    pub require_client_certificate: bool,
}

/// Options for a private PostgreSQL ([`Postgres::builder`]).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct PostgresBuilder {
    tls: Option<PostgresTls>,
}

impl PostgresBuilder {
    /// Serves TLS (`ssl = on`) with these files; clients ask for it with
    /// `?sslmode=verify-full&sslrootcert=<CA file>` on [`Postgres::url`].
    pub fn tls(mut self, tls: PostgresTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Starts a private server with these options (`DATABASE_URL` is
    /// ignored: options only apply to a server the testkit runs).
    pub fn start(self) -> Result<Postgres> {
        Postgres::start_with(&self)
    }
}

/// A PostgreSQL server for tests: private (started by the testkit) or
/// external (`DATABASE_URL`). The private one is shut down and its
/// directory removed on drop.
#[derive(Debug)]
pub struct Postgres {
    url: SecretUrl,
    local: Option<LocalPostgres>,
}

#[derive(Debug)]
struct LocalPostgres {
    /// Removed (with the data directory) when dropped, after the server stopped.
    _dir: TempDir,
    child: Option<Child>,
    paused: bool,
    /// How to start the server (again, after [`Postgres::stop`]).
    server: Server,
}

/// The `postgres` command of a private server: binaries, data directory,
/// port, options, the user it runs as and its log.
#[derive(Debug, Clone)]
struct Server {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    tls_args: Vec<String>,
    owner: Option<(u32, u32)>,
    log_path: PathBuf,
}

impl Server {
    /// Spawns `postgres`, its output appended to the log.
    fn spawn(&self) -> Result<Child> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(TestkitError::io("open the PostgreSQL log file"))?;
        let log_err = log
            .try_clone()
            .map_err(TestkitError::io("open the PostgreSQL log file"))?;
        let mut server = Command::new(self.bin.join("postgres"));
        server
            .arg("-D")
            .arg(&self.data)
            .args(["-p", &self.port.to_string()])
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "unix_socket_directories=",
            ])
            .args([
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ])
            .args(["-c", "max_connections=200", "-c", "shared_buffers=64MB"])
            .args(&self.tls_args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        as_user(&mut server, self.owner);
        server.spawn().map_err(|source| TestkitError::SpawnPostgres {
            program: self.bin.join("postgres"),
            hint: INSTALL_HINT,
            source,
        })
    }
}

impl Postgres {
    /// `DATABASE_URL` when set, otherwise a private server started now.
    pub fn start() -> Result<Postgres> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => Ok(Postgres {
                url: SecretUrl(url),
                local: None,
            }),
            _ => Self::start_local(),
        }
    }

    /// A private server, whatever `DATABASE_URL` says (for tests that kill or pause it).
    pub fn start_local() -> Result<Postgres> {
        Self::start_with(&PostgresBuilder::default())
    }

    /// Options for a private server (TLS).
    pub fn builder() -> PostgresBuilder {
        PostgresBuilder::default()
    }

    fn start_with(options: &PostgresBuilder) -> Result<Postgres> {
        let bin = find_bin_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("ordo-postgres-")
            .tempdir()
            .map_err(TestkitError::io("create a temporary directory for PostgreSQL"))?;
        let owner = server_user()?;
        if let Some((uid, gid)) = owner {
            chown(dir.path(), Some(uid), Some(gid)).map_err(TestkitError::io(
                "give the PostgreSQL directory to the postgres user",
            ))?;
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "-N",
                "--no-instructions",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        as_user(&mut initdb, owner);
        let output = initdb.output().map_err(|source| TestkitError::SpawnPostgres {
            program: bin.join("initdb"),
            hint: INSTALL_HINT,
            source,
        })?;
        if !output.status.success() {
            return Err(TestkitError::Initdb {
                status: output.status,
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ),
            });
        }
        let tls_args = match &options.tls {
            Some(tls) => set_up_tls(&data, tls, owner)?,
            None => Vec::new(),
        };
        let port = free_port()?;
        let log_path = dir.path().join(LOG_FILE);
        File::create(&log_path).map_err(TestkitError::io("create the PostgreSQL log file"))?;
        let server = Server {
            bin,
            data,
            port,
            tls_args,
            owner,
            log_path: log_path.clone(),
        };
        let child = server.spawn()?;
        let mut postgres = Postgres {
            url: SecretUrl(format!("postgres://postgres@127.0.0.1:{port}/postgres")),
            local: Some(LocalPostgres {
                _dir: dir,
                child: Some(child),
                paused: false,
                server,
            }),
        };
        postgres.wait_ready(port, &log_path, 0)?;
        Ok(postgres)
    }

    /// The connection URL (`postgres://postgres@127.0.0.1:<port>/postgres`).
    pub fn url(&self) -> &str {
        &self.url.0
    }

    /// Whether the server comes from `DATABASE_URL`.
    pub fn is_external(&self) -> bool {
        self.local.is_none()
    }

    /// SIGSTOP to the postmaster (its backends go on running).
    pub fn pause(&mut self) -> Result<()> {
        let local = self.local_mut("pause")?;
        let pid = local.pid("pause")?;
        signal::send(pid, Signal::SIGSTOP)?;
        local.paused = true;
        signal::wait_stopped(pid)
    }

    /// SIGCONT after [`Postgres::pause`].
    pub fn resume(&mut self) -> Result<()> {
        let local = self.local_mut("resume")?;
        let pid = local.pid("resume")?;
        signal::send(pid, Signal::SIGCONT)?;
        local.paused = false;
        Ok(())
    }

    /// Shuts the server down ("fast" mode, SIGINT: every session is
    /// ended with `terminating connection due to administrator command`,
    /// new connections are refused) and waits until it has exited; its data
    /// stays for [`Postgres::start_again`]. Does nothing if it is down.
    pub fn stop(&mut self) -> Result<()> {
        let local = self.local_mut("stop")?;
        let Some(mut child) = local.child.take() else {
            return Ok(());
        };
        let pid = pid_of(&child);
        signal::send(pid, Signal::SIGINT)?;
        if local.paused {
            signal::send(pid, Signal::SIGCONT)?;
            local.paused = false;
        }
        let started = Instant::now();
        while started.elapsed() < STOP_TIMEOUT {
            if child
                .try_wait()
                .map_err(TestkitError::io("check on the PostgreSQL server"))?
                .is_some()
            {
                return Ok(());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        let _ = child.kill();
        child
            .wait()
            .map_err(TestkitError::io("wait for the PostgreSQL server"))?;
        Ok(())
    }

    /// Starts a server stopped with [`Postgres::stop`] again, on the same
    /// port and data, and waits until it accepts connections. Does nothing
    /// if it runs.
    pub fn start_again(&mut self) -> Result<()> {
        let local = self.local_mut("start again")?;
        if local.child.is_some() {
            return Ok(());
        }
        let server = local.server.clone();
        let seen = read_lossy(&server.log_path).matches(READY_LINE).count();
        local.child = Some(server.spawn()?);
        self.wait_ready(server.port, &server.log_path, seen)
    }

    fn local_mut(&mut self, action: &'static str) -> Result<&mut LocalPostgres> {
        self.local
            .as_mut()
            .ok_or(TestkitError::ExternalPostgres { action })
    }

    /// Waits until the log has more than `seen` ready lines and the port
    /// accepts connections.
    fn wait_ready(&mut self, port: u16, log_path: &Path, seen: usize) -> Result<()> {
        let started = Instant::now();
        loop {
            let log = fs::read_to_string(log_path).unwrap_or_default();
            if log.matches(READY_LINE).count() > seen && TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(());
            }
            let local = self.local_mut("start")?;
            if let Some(child) = &mut local.child
                && let Some(status) = child
                    .try_wait()
                    .map_err(TestkitError::io("check on the PostgreSQL server"))?
            {
                local.child = None;
                return Err(TestkitError::PostgresExited {
                    port,
                    status,
                    log_tail: tail(&log),
                });
            }
            if started.elapsed() > READY_TIMEOUT {
                local.shutdown();
                return Err(TestkitError::PostgresNotReady {
                    port,
                    waited: READY_TIMEOUT,
                    log_tail: tail(&read_lossy(log_path)),
                });
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}

impl LocalPostgres {
    fn pid(&self, action: &'static str) -> Result<i32> {
        self.child
            .as_ref()
            .map(pid_of)
            .ok_or(TestkitError::PostgresNotRunning { action })
    }

    /// Immediate shutdown (SIGQUIT: the postmaster stops every backend), then SIGKILL if it lingers.
    fn shutdown(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = pid_of(&child);
        let _ = signal::send(pid, Signal::SIGQUIT);
        if self.paused {
            let _ = signal::send(pid, Signal::SIGCONT);
        }
        let started = Instant::now();
        while started.elapsed() < STOP_TIMEOUT {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(local) = &mut self.local {
            // The TempDir removes the directory after this.
            local.shutdown();
        }
    }
}

/// Copies the certificate and key into the data directory (PostgreSQL
/// refuses a key readable by others) and, when TLS is required, lets only
/// `hostssl` connections in; returns the server's `-c` arguments.
fn set_up_tls(data: &Path, tls: &PostgresTls, owner: Option<(u32, u32)>) -> Result<Vec<String>> {
    const CERT: &str = "server.crt";
    const KEY: &str = "server.key";
    const CA: &str = "client-ca.crt";
    for (from, to) in [(&tls.cert_file, CERT), (&tls.key_file, KEY), (&tls.ca_file, CA)] {
        let target = data.join(to);
        fs::copy(from, &target).map_err(|source| TestkitError::Io {
            what: format!("copy {} into the PostgreSQL data directory", from.display()),
            source,
        })?;
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600))
            .map_err(TestkitError::io("make the PostgreSQL TLS files private (0600)"))?;
        if let Some((uid, gid)) = owner {
            chown(&target, Some(uid), Some(gid)).map_err(TestkitError::io(
                "give the PostgreSQL TLS files to the postgres user",
            ))?;
        }
    }
    if tls.require_tls || tls.require_client_certificate {
        let option = if tls.require_client_certificate {
            " clientcert=verify-full"
        } else {
            ""
        };
        // Replaces initdb's `host` lines (TLS or not); the file keeps its owner.
        fs::write(
            data.join("pg_hba.conf"),
            format!("hostssl all all 127.0.0.1/32 trust{option}\nhostssl all all ::1/128 trust{option}\n"),
        )
        .map_err(TestkitError::io("write pg_hba.conf (hostssl only)"))?;
    }
    Ok([
        "-c",
        "ssl=on",
        "-c",
        &format!("ssl_cert_file={CERT}"),
        "-c",
        &format!("ssl_key_file={KEY}"),
        "-c",
        &format!("ssl_ca_file={CA}"),
    ]
    .map(str::to_owned)
    .to_vec())
}

/// Runs `command` as `owner` (uid, gid) when given.
fn as_user(command: &mut Command, owner: Option<(u32, u32)>) {
    if let Some((uid, gid)) = owner {
        command.uid(uid).gid(gid);
    }
}

/// `Some((uid, gid))` of the `postgres` user when running as root (PostgreSQL
/// refuses to run as root), `None` otherwise.
fn server_user() -> Result<Option<(u32, u32)>> {
    let euid = fs::metadata("/proc/self")
        .map(|m| m.uid())
        .map_err(TestkitError::io("read the effective user id from /proc/self"))?;
    if euid != 0 {
        return Ok(None);
    }
    let passwd = fs::read_to_string("/etc/passwd").map_err(TestkitError::io("read /etc/passwd"))?;
    passwd
        .lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            match fields.as_slice() {
                ["postgres", _, uid, gid, ..] => Some((uid.parse().ok()?, gid.parse().ok()?)),
                _ => None,
            }
        })
        .map(Some)
        .ok_or(TestkitError::NoPostgresUser)
}

/// The directory holding `initdb` and `postgres`.
fn find_bin_dir() -> Result<PathBuf> {
    locate(
        std::env::var_os("ORDO_PG_BIN"),
        std::env::var_os("PATH"),
        Path::new("/usr/lib/postgresql"),
    )
}

/// [`find_bin_dir`] with its environment passed in, so tests need not change the process's.
fn locate(
    pg_bin: Option<std::ffi::OsString>,
    path: Option<std::ffi::OsString>,
    usual: &Path,
) -> Result<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    if let Some(dir) = pg_bin {
        let dir = PathBuf::from(dir);
        return if has_both(&dir) {
            Ok(dir)
        } else {
            Err(TestkitError::PostgresNotFound {
                looked_for: format!("ORDO_PG_BIN={} has no initdb and postgres", dir.display()),
                hint: INSTALL_HINT,
            })
        };
    }
    if let Some(path) = path {
        for dir in std::env::split_paths(&path) {
            if has_both(&dir) {
                return Ok(dir);
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(usual)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, dir)| has_both(dir))
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, dir)| dir)
        .ok_or(TestkitError::PostgresNotFound {
            looked_for: "initdb and postgres on PATH and in /usr/lib/postgresql/*/bin".to_owned(),
            hint: INSTALL_HINT,
        })
}

fn read_lossy(path: &Path) -> String {
    let mut bytes = Vec::new();
    if let Ok(mut file) = File::open(path) {
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn tail(log: &str) -> String {
    crate::local::last_lines(log, crate::local::LOG_TAIL_LINES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_postgres_binaries_are_an_error_that_says_how_to_get_them() {
        let empty = tempfile::tempdir().unwrap();
        let error = locate(None, Some(empty.path().into()), empty.path()).unwrap_err();
        let text = error.to_string();
        assert!(text.contains("apt-get install postgresql"), "{text}");
        assert!(text.contains("DATABASE_URL"), "{text}");
        let error = locate(Some(empty.path().into()), None, empty.path()).unwrap_err();
        assert!(error.to_string().contains("ORDO_PG_BIN="), "{error}");
    }

    #[test]
    fn the_newest_usual_install_is_found() {
        let usual = tempfile::tempdir().unwrap();
        for version in ["9", "15", "13"] {
            let bin = usual.path().join(version).join("bin");
            fs::create_dir_all(&bin).unwrap();
            fs::write(bin.join("initdb"), "").unwrap();
            fs::write(bin.join("postgres"), "").unwrap();
        }
        let found = locate(None, None, usual.path()).unwrap();
        assert_eq!(found, usual.path().join("15").join("bin"));
    }
}
