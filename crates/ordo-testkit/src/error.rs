//! The one error type of the testkit.
//!
//! Every message says what went wrong and, where there is one, what to do about it:
//! a test that cannot get a Redis must fail loudly with a fix, never skip silently.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;

/// A `Result` whose error is [`TestkitError`].
pub type Result<T, E = TestkitError> = std::result::Result<T, E>;

/// What an [`eventually`](crate::eventually) condition fails with: any error
/// (`anyhow::Error`, a client's, the testkit's) converts into it with `?`.
pub type ConditionError = Box<dyn std::error::Error + Send + Sync>;

/// Everything that can go wrong while providing a Redis or a process to a test.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// No `redis-server` executable could be found.
    #[error("no redis-server found ({looked_for}); {hint}")]
    RedisServerNotFound {
        /// Where the testkit looked.
        looked_for: String,
        /// How to get a Redis.
        hint: &'static str,
    },

    /// The `redis-server` executable exists but could not be run.
    #[error("could not run {}; {hint}", program.display())]
    SpawnRedis {
        /// The executable that was run.
        program: PathBuf,
        /// How to get a Redis.
        hint: &'static str,
        /// Why it could not be run.
        #[source]
        source: io::Error,
    },

    /// `redis-server` exited before it accepted connections.
    #[error(
        "redis-server on port {port} exited ({status}) before it was ready; its log ends with:\n{log_tail}"
    )]
    RedisExited {
        /// The port it was asked to listen on.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// The last lines of its log file and standard error.
        log_tail: String,
    },

    /// `redis-server` did not become ready in time; it was killed.
    #[error(
        "redis-server on port {port} was not ready after {waited:?} and was killed; its log ends with:\n{log_tail}"
    )]
    RedisNotReady {
        /// The port it was asked to listen on.
        port: u16,
        /// How long the testkit waited.
        waited: Duration,
        /// The last lines of its log file and standard error.
        log_tail: String,
    },

    /// The operation needs a Redis the testkit controls, but this one comes from `REDIS_URL`.
    #[error(
        "cannot {action} an external Redis (REDIS_URL is set); use Redis::start_local() in tests that {action} the server"
    )]
    External {
        /// The refused operation, e.g. "kill".
        action: &'static str,
    },

    /// The operation needs a running server, but it was killed or stopped.
    #[error("cannot {action} Redis: it is not running (it was killed or stopped); call restart() first")]
    NotRunning {
        /// The refused operation, e.g. "pause".
        action: &'static str,
    },

    /// `REDIS_URL` could not be parsed.
    #[error(
        "REDIS_URL={url:?} is not a usable Redis URL ({reason}); expected redis://host:port or redis://host:port/db"
    )]
    InvalidRedisUrl {
        /// The value of `REDIS_URL`, its password masked.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },

    /// `REDIS_URL` is set but nothing answered PING there.
    #[error(
        "REDIS_URL={url} is set but no Redis answered PING there; start that Redis, or unset REDIS_URL so the testkit starts redis-server itself"
    )]
    ExternalUnreachable {
        /// The value of `REDIS_URL`, its password masked.
        url: String,
        /// Why the PING failed.
        #[source]
        source: Box<TestkitError>,
    },

    /// PING could not be sent or its reply not read (refused, reset, timed out...).
    #[error("PING to {addr} failed")]
    Ping {
        /// `host:port` of the server.
        addr: String,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },

    /// The server answered, but not with `+PONG` (or `+OK` to AUTH).
    #[error("{addr} answered {command} with {reply:?}")]
    UnexpectedReply {
        /// `host:port` of the server.
        addr: String,
        /// The command that was sent ("PING" or "AUTH").
        command: &'static str,
        /// The reply line, e.g. `-LOADING Redis is loading the dataset in memory`.
        reply: String,
    },

    /// A command could not be sent or its reply not read.
    #[error("{command} to {addr} failed")]
    Command {
        /// `host:port` of the server.
        addr: String,
        /// The command, e.g. `CLUSTER INFO`.
        command: String,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },

    /// A node answered a command with something the testkit cannot use.
    #[error("{addr} answered {command} with {reply}")]
    BadReply {
        /// `host:port` of the node.
        addr: String,
        /// The command, e.g. `ROLE`.
        command: String,
        /// The reply, as debug text.
        reply: String,
    },

    /// No `redis-cli` executable could be found (it creates clusters).
    #[error("no redis-cli found ({looked_for}); {hint}")]
    RedisCliNotFound {
        /// Where the testkit looked.
        looked_for: String,
        /// How to get one.
        hint: &'static str,
    },

    /// `redis-cli --cluster create` failed.
    #[error("`redis-cli --cluster create` failed ({status}); it printed:\n{output}")]
    ClusterCreate {
        /// How it exited.
        status: ExitStatus,
        /// Its standard output and error.
        output: String,
    },

    /// The cluster did not reach `cluster_state:ok` on every running node in time.
    #[error("the Redis Cluster was not ready after {waited:?} ({what}); per node:\n{nodes}")]
    ClusterNotReady {
        /// What was awaited.
        what: String,
        /// How long the testkit waited.
        waited: Duration,
        /// What each node last said, one line per node.
        nodes: String,
    },

    /// The operation needs a cluster the testkit controls, but this one comes from `REDIS_CLUSTER_URL`.
    #[error(
        "cannot {action} a node of an external Redis Cluster (REDIS_CLUSTER_URL is set); use \
         RedisCluster::start_local() in tests that {action} nodes"
    )]
    ExternalCluster {
        /// The refused operation, e.g. "kill".
        action: &'static str,
    },

    /// `REDIS_CLUSTER_URL` could not be parsed.
    #[error(
        "REDIS_CLUSTER_URL={url:?} is not a usable Redis Cluster URL ({reason}); expected \
         redis-cluster://host:port[,host:port...]"
    )]
    InvalidRedisClusterUrl {
        /// The value of `REDIS_CLUSTER_URL`, its password masked.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// `REDIS_CLUSTER_URL` is set but a node it names did not answer PING.
    #[error(
        "REDIS_CLUSTER_URL={url} is set but no Redis answered PING at {node}; start that cluster, or unset \
         REDIS_CLUSTER_URL so the testkit starts a local one"
    )]
    ExternalClusterUnreachable {
        /// The value of `REDIS_CLUSTER_URL`, its password masked.
        url: String,
        /// The node that did not answer.
        node: String,
        /// Why the PING failed.
        #[source]
        source: Box<TestkitError>,
    },

    /// [`RedisCluster::failover`](crate::RedisCluster::failover) was asked to promote a node that is no replica.
    #[error("cannot fail over to the node on port {port}: it is {role}, not a replica")]
    NotAReplica {
        /// The node's port.
        port: u16,
        /// What it is instead.
        role: String,
    },

    /// A node index past the end of the cluster's nodes.
    #[error("the cluster has {count} nodes, so there is no node {index}")]
    NoSuchNode {
        /// The index asked for.
        index: usize,
        /// How many nodes there are.
        count: usize,
    },

    /// A signal could not be delivered.
    #[error("could not send {signal:?} to process {pid}")]
    Signal {
        /// The signal.
        signal: Signal,
        /// The process (or process group) id.
        pid: i32,
        /// The error from `kill(2)`.
        #[source]
        source: Errno,
    },

    /// A process sent SIGSTOP did not reach the stopped state in time.
    #[error("process {pid} did not stop within {waited:?} of SIGSTOP (state {state:?})")]
    NotStopped {
        /// The process id.
        pid: i32,
        /// How long the testkit waited.
        waited: Duration,
        /// The last state seen in `/proc/<pid>/stat` (e.g. 'R', 'Z').
        state: char,
    },

    /// A process sent SIGTERM did not exit in time; it was killed.
    #[error("process {pid} did not exit within {waited:?} of SIGTERM, so it was killed")]
    StopTimeout {
        /// The process id.
        pid: i32,
        /// How long the testkit waited.
        waited: Duration,
    },

    /// No PostgreSQL binaries (`initdb`, `postgres`) could be found.
    #[error("no PostgreSQL server binaries found ({looked_for}); {hint}")]
    PostgresNotFound {
        /// Where the testkit looked.
        looked_for: String,
        /// How to get PostgreSQL.
        hint: &'static str,
    },

    /// A PostgreSQL binary exists but could not be run.
    #[error("could not run {}; {hint}", program.display())]
    SpawnPostgres {
        /// The executable that was run.
        program: PathBuf,
        /// How to get PostgreSQL.
        hint: &'static str,
        /// Why it could not be run.
        #[source]
        source: io::Error,
    },

    /// `initdb` failed.
    #[error("initdb failed ({status}); it printed:\n{output}")]
    Initdb {
        /// How it exited.
        status: ExitStatus,
        /// Its standard output and error.
        output: String,
    },

    /// Running as root, but there is no `postgres` user to run the server as.
    #[error(
        "PostgreSQL refuses to run as root and there is no `postgres` user to run it as; \
         create one (`useradd postgres`, or install the `postgresql` package), or run the tests as another user"
    )]
    NoPostgresUser,

    /// `postgres` exited before it accepted connections.
    #[error("postgres on port {port} exited ({status}) before it was ready; its log ends with:\n{log_tail}")]
    PostgresExited {
        /// The port it was asked to listen on.
        port: u16,
        /// How it exited.
        status: ExitStatus,
        /// The last lines of its log.
        log_tail: String,
    },

    /// `postgres` did not become ready in time; it was shut down.
    #[error("postgres on port {port} was not ready after {waited:?}; its log ends with:\n{log_tail}")]
    PostgresNotReady {
        /// The port it was asked to listen on.
        port: u16,
        /// How long the testkit waited.
        waited: Duration,
        /// The last lines of its log.
        log_tail: String,
    },

    /// The operation needs a PostgreSQL the testkit controls, but this one comes from `DATABASE_URL`.
    #[error("cannot {action} an external PostgreSQL (DATABASE_URL is set); use Postgres::start_local()")]
    ExternalPostgres {
        /// The refused operation, e.g. "pause".
        action: &'static str,
    },

    /// The operation needs a running PostgreSQL, but it is stopped.
    #[error("cannot {action} PostgreSQL: it is not running")]
    PostgresNotRunning {
        /// The refused operation.
        action: &'static str,
    },

    /// No `prometheus` executable could be found.
    #[error("no prometheus found ({looked_for}); {hint}")]
    PrometheusNotFound {
        /// Where the testkit looked.
        looked_for: String,
        /// How to get Prometheus.
        hint: &'static str,
    },

    /// The `prometheus` executable exists but could not be run.
    #[error("could not run {}; {hint}", program.display())]
    SpawnPrometheus {
        /// The executable that was run.
        program: PathBuf,
        /// How to get Prometheus.
        hint: &'static str,
        /// Why it could not be run.
        #[source]
        source: io::Error,
    },

    /// `prometheus` exited before it was ready.
    #[error("prometheus exited ({status}) before it was ready; its log ends with:\n{log_tail}")]
    PrometheusExited {
        /// How it exited.
        status: ExitStatus,
        /// The last lines of its log.
        log_tail: String,
    },

    /// `prometheus` was not ready in time (it is killed).
    #[error("prometheus was not ready after {waited:?}; its log ends with:\n{log_tail}")]
    PrometheusNotReady {
        /// How long the testkit waited.
        waited: Duration,
        /// The last lines of its log.
        log_tail: String,
    },

    /// No `chromium` or `chromedriver` executable could be found.
    #[error("no {looked_for}; {hint}")]
    ChromeNotFound {
        /// What the testkit looked for, and where.
        looked_for: String,
        /// How to get them.
        hint: &'static str,
    },

    /// The `chromedriver` executable exists but could not be run.
    #[error("could not run {}; {hint}", program.display())]
    SpawnChromeDriver {
        /// The executable that was run.
        program: PathBuf,
        /// How to get it.
        hint: &'static str,
        /// Why it could not be run.
        #[source]
        source: io::Error,
    },

    /// `chromedriver` did not become ready.
    #[error("chromedriver was not ready after {waited:?}: {detail}")]
    ChromeDriverNotReady {
        /// How long the testkit waited.
        waited: Duration,
        /// What it said, or how it exited.
        detail: String,
    },

    /// A file or process operation failed.
    #[error("could not {what}")]
    Io {
        /// What the testkit was doing, e.g. "create a temporary directory for redis-server".
        what: String,
        /// The I/O failure.
        #[source]
        source: io::Error,
    },

    /// [`wait_until`](crate::wait_until) or [`eventually`](crate::eventually) gave up.
    #[error("timed out after {waited:?} waiting for {what}")]
    Timeout {
        /// What was awaited, as the caller described it.
        what: String,
        /// How long it waited.
        waited: Duration,
    },

    /// An [`eventually`](crate::eventually) condition failed.
    #[error("checking for {what} failed")]
    Condition {
        /// What was awaited, as the caller described it.
        what: String,
        /// The condition's error.
        #[source]
        source: ConditionError,
    },

    /// [`Process::spawn`](crate::Process::spawn) could not start the program.
    #[error("could not start `{program}`")]
    SpawnProcess {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: io::Error,
    },

    /// A signal was asked for a process that has already exited and been reaped.
    #[error("cannot {action} `{program}` (pid {pid}): it has already exited ({status})")]
    ProcessExited {
        /// The refused operation, e.g. "pause".
        action: &'static str,
        /// The program.
        program: String,
        /// Its former process id.
        pid: i32,
        /// How it exited.
        status: ExitStatus,
    },

    /// [`Process::all_lines`](crate::Process::all_lines): the child's stdout
    /// stayed open (something it started holds the pipe).
    #[error(
        "the stdout of `{program}` (pid {pid}) is still open after {deadline:?}; the last lines of it:\n{last_lines}"
    )]
    OutputOpen {
        /// The program.
        program: String,
        /// Its process id.
        pid: i32,
        /// How long it was waited for.
        deadline: std::time::Duration,
        /// The last lines it printed, one per line.
        last_lines: String,
    },

    /// [`Process::wait_for_line`](crate::Process::wait_for_line) saw no matching line.
    #[error(
        "`{program}` (pid {pid}) printed no matching line {reason}; the last lines of its stdout:\n{last_lines}"
    )]
    LineNotSeen {
        /// The program.
        program: String,
        /// Its process id.
        pid: i32,
        /// "within 5s", or "before closing its stdout (exit status: ...)".
        reason: String,
        /// The last lines it printed, one per line.
        last_lines: String,
    },

    /// A Docker operation of the testcontainers backend failed.
    #[cfg(feature = "testcontainers")]
    #[error(
        "could not {action} the Redis container; is a Docker engine running and reachable (DOCKER_HOST)?"
    )]
    Container {
        /// The operation, e.g. "start".
        action: &'static str,
        /// The testcontainers error.
        #[source]
        source: testcontainers::TestcontainersError,
    },
}

impl TestkitError {
    /// An [`Io`](TestkitError::Io) error builder for `map_err`.
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> TestkitError {
        let what = what.into();
        move |source| TestkitError::Io { what, source }
    }
}
