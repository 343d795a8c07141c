//! A `redis-server` child process with its own port and data directory.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::error::{Result, TestkitError};
use crate::resp::Endpoint;
use crate::signal::{self, pid_of};
use crate::wait::POLL_INTERVAL;

/// How long a fresh or restarted server may take to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `stop()` waits after SIGTERM before it kills.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Per-attempt timeout of the readiness PING.
const PING_TIMEOUT: Duration = Duration::from_millis(500);
/// How many free ports to try when another process grabs ours first.
const PORT_ATTEMPTS: usize = 5;
/// Lines of log shown in errors.
pub(crate) const LOG_TAIL_LINES: usize = 20;
/// What every Redis since 2.x logs once it serves clients (7.2 appends " tcp").
const READY_LINE: &str = "Ready to accept connections";

const LOG_FILE: &str = "redis.log";
const STDERR_FILE: &str = "redis.stderr";
/// A cluster node's own record of the cluster (its id, epoch, peers).
const NODES_FILE: &str = "nodes.conf";
/// A Sentinel's configuration, which it rewrites as it learns the topology.
const SENTINEL_FILE: &str = "sentinel.conf";
/// What a Sentinel logs once it serves clients (it logs no [`READY_LINE`]).
const SENTINEL_READY_LINE: &str = "Sentinel ID is";

const INSTALL_HINT: &str = "install it with `apt-get install redis-server` (or set ORDO_REDIS_SERVER=/path/to/redis-server), \
     or set REDIS_URL=redis://host:port to use a running Redis 7";
const INSTALL_HINT_WITH_URL: &str = "this test needs a Redis it can configure or kill, which REDIS_URL cannot give; \
     install redis-server with `apt-get install redis-server`, or set ORDO_REDIS_SERVER=/path/to/redis-server";

/// A `redis-server` started by the testkit. The port and directory outlive
/// restarts; the child is `None` while the server is killed or stopped.
#[derive(Debug)]
pub(crate) struct LocalServer {
    program: PathBuf,
    /// `--appendonly ...` and the caller's extra arguments.
    options: Vec<OsString>,
    dir: TempDir,
    port: u16,
    /// The cluster bus port of a cluster node (`--cluster-port`), `None` for a plain server.
    /// Chosen freely rather than Redis's default `port + 10000`, which can exceed 65535.
    bus_port: Option<u16>,
    /// A Sentinel's configuration (`redis-server sentinel.conf --sentinel`),
    /// written to its directory before the first launch; Sentinel rewrites it.
    sentinel: bool,
    child: Option<Child>,
    paused: bool,
}

/// Why one launch failed, and whether another port might do better.
struct LaunchFailure {
    error: TestkitError,
    port_in_use: bool,
}

impl From<TestkitError> for LaunchFailure {
    fn from(error: TestkitError) -> Self {
        LaunchFailure {
            error,
            port_in_use: false,
        }
    }
}

impl LocalServer {
    /// Starts `redis-server` on a free port in a new temporary directory, and
    /// waits until it answers PING.
    pub(crate) fn start(options: Vec<OsString>) -> Result<Self> {
        Self::start_node(options, false)
    }

    /// Starts a `redis-server --cluster-enabled yes` on a free port with a free
    /// cluster bus port, in a new temporary directory (its `nodes.conf` lives
    /// there, so a restart keeps the node's identity), and waits until it
    /// answers PING. The node knows no other node yet.
    pub(crate) fn start_cluster_node(options: Vec<OsString>) -> Result<Self> {
        Self::start_node(options, true)
    }

    /// Starts a Redis Sentinel (`redis-server sentinel.conf --sentinel`) on
    /// a free port in a new temporary directory, its `sentinel.conf` holding
    /// `config`, and waits until it answers PING.
    pub(crate) fn start_sentinel(config: &str) -> Result<Self> {
        Self::start_kind(Vec::new(), false, Some(config))
    }

    fn start_node(options: Vec<OsString>, cluster: bool) -> Result<Self> {
        Self::start_kind(options, cluster, None)
    }

    fn start_kind(options: Vec<OsString>, cluster: bool, sentinel: Option<&str>) -> Result<Self> {
        let program = find_redis_server()?;
        let dir = tempfile::Builder::new()
            .prefix("ordo-redis-")
            .tempdir()
            .map_err(TestkitError::io("create a temporary directory for redis-server"))?;
        if let Some(config) = sentinel {
            std::fs::write(dir.path().join(SENTINEL_FILE), config)
                .map_err(TestkitError::io("write sentinel.conf"))?;
        }
        let mut server = LocalServer {
            program,
            options,
            dir,
            port: 0,
            bus_port: None,
            sentinel: sentinel.is_some(),
            child: None,
            paused: false,
        };
        let mut attempt = 1;
        loop {
            server.port = free_port()?;
            if cluster {
                server.bus_port = Some(loop {
                    let bus_port = free_port()?;
                    if bus_port != server.port {
                        break bus_port;
                    }
                });
            }
            match server.launch() {
                // Another test took the port between our probe and redis's bind: pick another.
                Err(failure) if failure.port_in_use && attempt < PORT_ATTEMPTS => attempt += 1,
                result => return result.map(|()| server).map_err(|failure| failure.error),
            }
        }
    }

    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint::new("127.0.0.1", self.port)
    }

    /// Whether the process runs (it may be paused).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether the process is stopped by [`LocalServer::pause`].
    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// The program that runs the server.
    pub(crate) fn program(&self) -> &Path {
        &self.program
    }

    /// The server's data directory.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILL, then reap. Killing a server that is not running does nothing.
    pub(crate) fn kill(&mut self) -> Result<()> {
        if let Some(child) = &mut self.child {
            child.kill().map_err(TestkitError::io("kill redis-server"))?;
            child
                .wait()
                .map_err(TestkitError::io("wait for the killed redis-server"))?;
        }
        self.child = None;
        self.paused = false;
        Ok(())
    }

    /// SIGTERM (after SIGCONT if paused), then wait for the exit; Redis flushes
    /// its append-only file on the way out. Kills after [`STOP_TIMEOUT`].
    pub(crate) fn stop(&mut self) -> Result<()> {
        let Some(child) = &mut self.child else {
            return Ok(());
        };
        let pid = pid_of(child);
        signal::send(pid, Signal::SIGTERM)?;
        if self.paused {
            signal::send(pid, Signal::SIGCONT)?;
        }
        let exited = wait_exit(child, STOP_TIMEOUT)?;
        if !exited {
            self.kill()?;
            return Err(TestkitError::StopTimeout {
                pid,
                waited: STOP_TIMEOUT,
            });
        }
        self.child = None;
        self.paused = false;
        Ok(())
    }

    /// SIGSTOP; returns once the process is stopped.
    pub(crate) fn pause(&mut self) -> Result<()> {
        let pid = self.running_pid("pause")?;
        signal::send(pid, Signal::SIGSTOP)?;
        self.paused = true;
        signal::wait_stopped(pid)
    }

    /// SIGCONT.
    pub(crate) fn resume(&mut self) -> Result<()> {
        let pid = self.running_pid("resume")?;
        signal::send(pid, Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Stops the server if it runs, then starts it again on the same port with
    /// the same directory (so an append-only file is replayed).
    pub(crate) fn restart(&mut self) -> Result<()> {
        self.stop()?;
        self.launch().map_err(|failure| failure.error)
    }

    fn running_pid(&self, action: &'static str) -> Result<i32> {
        self.child
            .as_ref()
            .map(pid_of)
            .ok_or(TestkitError::NotRunning { action })
    }

    /// Runs `redis-server` on `self.port` and waits until it is ready.
    ///
    /// Ready means: this run logged [`READY_LINE`] (so the port is ours, not a
    /// neighbour test's Redis that happens to answer) and it answers PING.
    fn launch(&mut self) -> Result<(), LaunchFailure> {
        let log_start = std::fs::metadata(self.log_path()).map_or(0, |meta| meta.len());
        let stderr_path = self.dir.path().join(STDERR_FILE);
        let stderr = File::create(&stderr_path).map_err(TestkitError::io("create redis.stderr"))?;
        let stdout = stderr
            .try_clone()
            .map_err(TestkitError::io("duplicate the redis.stderr handle"))?;
        let mut child = Command::new(&self.program)
            .args(self.arguments())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|source| TestkitError::SpawnRedis {
                program: self.program.clone(),
                hint: install_hint(redis_url_set()),
                source,
            })?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(TestkitError::io("poll redis-server"))? {
                let log_tail = self.log_tail(log_start);
                let port_in_use = log_tail.contains("Address already in use");
                let error = TestkitError::RedisExited {
                    port: self.port,
                    status,
                    log_tail,
                };
                return Err(LaunchFailure { error, port_in_use });
            }
            let ready_line = if self.sentinel {
                SENTINEL_READY_LINE
            } else {
                READY_LINE
            };
            if self.log_since(log_start).contains(ready_line) && self.endpoint().ping(PING_TIMEOUT).is_ok() {
                self.child = Some(child);
                self.paused = false;
                return Ok(());
            }
            if started.elapsed() >= READY_TIMEOUT {
                // Best effort: the error below matters more than a failed kill.
                let _ = child.kill();
                let _ = child.wait();
                let log_tail = self.log_tail(log_start);
                return Err(TestkitError::RedisNotReady {
                    port: self.port,
                    waited: READY_TIMEOUT,
                    log_tail,
                }
                .into());
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn arguments(&self) -> Vec<OsString> {
        let dir = self.dir.path().as_os_str();
        let mut arguments: Vec<OsString> = Vec::new();
        if self.sentinel {
            // The configuration file comes first; Sentinel needs one it can rewrite.
            arguments.push(self.dir.path().join(SENTINEL_FILE).into_os_string());
            arguments.push("--sentinel".into());
        }
        arguments.extend::<[OsString; 12]>([
            "--port".into(),
            self.port.to_string().into(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            dir.into(),
            "--save".into(),
            "".into(),
            "--daemonize".into(),
            "no".into(),
            "--logfile".into(),
            self.log_path().into_os_string(),
        ]);
        if let Some(bus_port) = self.bus_port {
            arguments.extend([
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                self.dir.path().join(NODES_FILE).into_os_string(),
                "--cluster-port".into(),
                bus_port.to_string().into(),
            ]);
        }
        arguments.extend(self.options.iter().cloned());
        arguments
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(LOG_FILE)
    }

    /// What redis.log gained since byte `start` (one launch's worth).
    fn log_since(&self, start: u64) -> String {
        let log = std::fs::read(self.log_path()).unwrap_or_default();
        let start = usize::try_from(start).unwrap_or(usize::MAX).min(log.len());
        String::from_utf8_lossy(&log[start..]).into_owned()
    }

    /// The last lines this launch wrote to redis.log and to stderr, for error messages.
    fn log_tail(&self, log_start: u64) -> String {
        let mut tail = last_lines(&self.log_since(log_start), LOG_TAIL_LINES);
        let stderr = std::fs::read_to_string(self.dir.path().join(STDERR_FILE)).unwrap_or_default();
        if !stderr.trim().is_empty() {
            tail.push_str("\n--- stderr ---\n");
            tail.push_str(&last_lines(&stderr, LOG_TAIL_LINES));
        }
        if tail.trim().is_empty() {
            tail = format!("(nothing; see {})", self.dir.path().display());
        }
        tail
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // Nothing to report to from drop; SIGKILL works on paused processes too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `true` once `child` exited, `false` if it still runs after `timeout`.
fn wait_exit(child: &mut Child, timeout: Duration) -> Result<bool> {
    let started = Instant::now();
    loop {
        if child
            .try_wait()
            .map_err(TestkitError::io("poll redis-server"))?
            .is_some()
        {
            return Ok(true);
        }
        if started.elapsed() >= timeout {
            return Ok(false);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// A port nobody listens on right now. Racy by nature: [`LocalServer::start`]
/// retries when redis-server then fails to bind it.
pub(crate) fn free_port() -> Result<u16> {
    let what = "find a free port on 127.0.0.1";
    let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(TestkitError::io(what))?;
    Ok(listener.local_addr().map_err(TestkitError::io(what))?.port())
}

/// `ORDO_REDIS_SERVER` (a path, or a name looked up on PATH), else `redis-server` on PATH.
fn find_redis_server() -> Result<PathBuf> {
    locate(
        std::env::var_os("ORDO_REDIS_SERVER"),
        std::env::var_os("PATH"),
        redis_url_set(),
    )
}

/// [`find_redis_server`] with its environment passed in, so tests need not change the process's.
fn locate(
    configured: Option<OsString>,
    search_path: Option<OsString>,
    redis_url_set: bool,
) -> Result<PathBuf> {
    let (program, looked_for) = match configured.filter(|value| !value.is_empty()) {
        Some(program) => {
            let looked_for = format!(
                "ORDO_REDIS_SERVER={} is neither a file nor a program on PATH",
                program.to_string_lossy()
            );
            (program, looked_for)
        }
        None => ("redis-server".into(), "redis-server is not on PATH".to_owned()),
    };
    resolve(&program, search_path).ok_or(TestkitError::RedisServerNotFound {
        looked_for,
        hint: install_hint(redis_url_set),
    })
}

/// A path containing `/` is taken as is; a bare name is searched on
/// `search_path`. Either must be an executable file.
pub(crate) fn resolve(program: &OsStr, search_path: Option<OsString>) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    which::which_in(program, search_path, cwd).ok()
}

fn redis_url_set() -> bool {
    std::env::var_os("REDIS_URL").is_some_and(|url| !url.is_empty())
}

fn install_hint(redis_url_set: bool) -> &'static str {
    if redis_url_set {
        INSTALL_HINT_WITH_URL
    } else {
        INSTALL_HINT
    }
}

pub(crate) fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// The last lines of the log file at `path` (nothing when it cannot be read).
pub(crate) fn tail_of(path: &std::path::Path) -> String {
    last_lines(&std::fs::read_to_string(path).unwrap_or_default(), LOG_TAIL_LINES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_redis_server_error_says_how_to_get_one() {
        let error = locate(None, Some("/nonexistent-dir".into()), false).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no redis-server found (redis-server is not on PATH); install it with `apt-get install \
             redis-server` (or set ORDO_REDIS_SERVER=/path/to/redis-server), or set \
             REDIS_URL=redis://host:port to use a running Redis 7"
        );
        let error = locate(Some("/nonexistent/redis-server".into()), None, false).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("ORDO_REDIS_SERVER=/nonexistent/redis-server is neither a file")
        );
    }

    #[test]
    fn with_redis_url_set_the_error_explains_why_it_is_not_enough() {
        let error = locate(None, None, true).unwrap_err().to_string();
        assert!(
            error.contains("needs a Redis it can configure or kill, which REDIS_URL cannot give"),
            "{error}"
        );
        assert!(error.contains("apt-get install redis-server"), "{error}");
    }

    #[test]
    fn a_taken_port_is_recognised_so_that_start_can_pick_another() {
        let taken = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let mut server = LocalServer {
            program: find_redis_server().unwrap(),
            options: Vec::new(),
            dir: tempfile::tempdir().unwrap(),
            port: taken.local_addr().unwrap().port(),
            bus_port: None,
            sentinel: false,
            child: None,
            paused: false,
        };
        let failure = server.launch().expect_err("redis-server started on a taken port");
        assert!(failure.port_in_use, "{:?}", failure.error);
        assert!(
            matches!(failure.error, TestkitError::RedisExited { .. }),
            "{:?}",
            failure.error
        );
    }

    #[test]
    fn finds_a_program_by_name_on_the_search_path_or_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("my-redis");
        std::fs::write(&program, "").unwrap();
        // Not executable: not a program.
        assert!(locate(Some("my-redis".into()), Some(dir.path().into()), false).is_err());
        std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let found = locate(Some("my-redis".into()), Some(dir.path().into()), false).unwrap();
        assert_eq!(found, program);
        let found = locate(Some(program.clone().into()), None, false).unwrap();
        assert_eq!(found, program);
        assert!(locate(None, Some(dir.path().into()), false).is_err());
    }
}
