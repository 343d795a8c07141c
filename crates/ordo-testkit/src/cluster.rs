//! [`RedisCluster`]: a real local Redis Cluster per test, or the one `REDIS_CLUSTER_URL` names.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Result, TestkitError};
use crate::local::{LocalServer, resolve};
use crate::resp::{Endpoint, Reply};
use crate::secret::{SecretUrl, redact};
use crate::wait::POLL_INTERVAL;

/// How many primaries a local cluster has: the fewest `redis-cli --cluster create` accepts.
const PRIMARIES: usize = 3;
/// How long a node may go unreachable before the others mark it failed (and a replica takes
/// over). Redis's default is 15 s; tests want failures noticed quickly.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long `redis-cli --cluster create` may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the cluster may take to report `cluster_state:ok` everywhere.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a replica may take to be promoted by `CLUSTER FAILOVER`.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);
/// Connect, read and write timeout of one command to a node.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long an external cluster may take to answer the first PING.
const EXTERNAL_PING_TIMEOUT: Duration = Duration::from_secs(2);
/// The file `redis-cli --cluster create` writes its output to (in the first node's directory).
const CREATE_LOG: &str = "cluster-create.log";

const CLI_HINT: &str = "redis-cli creates the cluster: install it with `apt-get install redis-tools` (it comes \
     with redis-server), or set ORDO_REDIS_CLI=/path/to/redis-cli, or set \
     REDIS_CLUSTER_URL=redis-cluster://host:port,host:port,... to use a running Redis Cluster";

/// A Redis Cluster for a test: three `redis-server --cluster-enabled yes`
/// primaries (optionally with one replica each) the test controls, or an
/// external cluster named by `REDIS_CLUSTER_URL`.
///
/// Every node of a local cluster listens on `127.0.0.1` on a port of its own
/// (its cluster bus on another free port), keeps its data and `nodes.conf` in
/// a temporary directory of its own, and is killed (and the directory removed)
/// when the `RedisCluster` is dropped. Node timeouts are 2 s (see
/// [`RedisClusterBuilder::node_timeout`]), so a killed primary is replaced by
/// its replica within a few seconds.
///
/// Nodes are addressed by index into [`RedisCluster::nodes`], in start order.
/// Which of them are primaries changes with failovers: ask
/// [`RedisCluster::primaries`], [`RedisCluster::node_for_key`] or
/// [`ClusterNode::role`].
///
/// All methods block the calling thread (they never need an async runtime).
///
/// ```no_run
/// use std::time::Duration;
///
/// let mut cluster = ordo_testkit::RedisCluster::builder().replicas(true).start()?;
/// let url = cluster.url(); // redis-cluster://127.0.0.1:p1,127.0.0.1:p2,...
/// let primary = cluster.node_for_key("{order:c-1}")?;
/// let replica = cluster.replicas_of(primary)?[0];
/// cluster.failover(replica)?; // manual CLUSTER FAILOVER: no write is lost
/// cluster.node_mut(replica)?.kill()?; // SIGKILL the new primary
/// ordo_testkit::wait_until(Duration::from_secs(10), "the old primary to take over again", || {
///     cluster.node_for_key("{order:c-1}").is_ok_and(|node| node == primary)
/// })?;
/// cluster.node_mut(replica)?.restart()?; // same port, same data directory
/// cluster.wait_ok()?; // it rejoins as a replica
/// # Ok::<(), ordo_testkit::TestkitError>(())
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    url: SecretUrl,
    nodes: Vec<ClusterNode>,
    external: bool,
}

/// Options for a cluster started by the testkit; see [`RedisCluster::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisClusterBuilder {
    replicas: bool,
    append_only: bool,
    node_timeout: Duration,
    extra_args: Vec<OsString>,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        RedisClusterBuilder {
            replicas: false,
            append_only: false,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            extra_args: Vec::new(),
        }
    }
}

/// One node of a [`RedisCluster`].
#[derive(Debug)]
pub struct ClusterNode {
    endpoint: Endpoint,
    /// `None` for a node of an external cluster.
    server: Option<LocalServer>,
}

/// What a node currently is in its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeRole {
    /// It serves slots.
    Primary,
    /// It replicates the primary on `primary_port`.
    Replica {
        /// The port of its primary.
        primary_port: u16,
        /// Whether its replication link is up (`connected` in `ROLE`).
        linked: bool,
    },
}

impl RedisClusterBuilder {
    /// Gives each of the three primaries one replica (six nodes in all), so
    /// that a primary can fail over. Off by default.
    pub fn replicas(mut self, enabled: bool) -> Self {
        self.replicas = enabled;
        self
    }

    /// Turns the append-only file on for every node (`--appendonly yes`), so
    /// a node's data survives [`ClusterNode::restart`], even after
    /// [`ClusterNode::kill`]. Off by default.
    pub fn append_only(mut self, enabled: bool) -> Self {
        self.append_only = enabled;
        self
    }

    /// `cluster-node-timeout`: how long a node may be unreachable before it is
    /// marked failed and a replica replaces it. 2 s by default.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Appends one raw argument to every node's `redis-server` command line.
    pub fn extra_arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    /// Starts the nodes, joins them with `redis-cli --cluster create` and
    /// waits until every node says `cluster_state:ok` (and every replica is
    /// linked to its primary). `REDIS_CLUSTER_URL` is ignored.
    ///
    /// `redis-server` is found as for [`Redis`](crate::Redis); `redis-cli` is
    /// `ORDO_REDIS_CLI` if set, else the `redis-cli` next to `redis-server`,
    /// else the one on `PATH`. When either is missing, the error says how to
    /// get it.
    pub fn start(self) -> Result<RedisCluster> {
        let count = PRIMARIES * if self.replicas { 2 } else { 1 };
        let options = self.options();
        let nodes = (0..count)
            .map(|_| {
                let server = LocalServer::start_cluster_node(options.clone())?;
                Ok(ClusterNode {
                    endpoint: server.endpoint(),
                    server: Some(server),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let cluster = RedisCluster {
            url: SecretUrl(cluster_url(nodes.iter().map(|node| &node.endpoint))),
            nodes,
            external: false,
        };
        cluster.create(self.replicas)?;
        cluster.wait_ok()?;
        Ok(cluster)
    }

    fn options(&self) -> Vec<OsString> {
        let append_only = if self.append_only { "yes" } else { "no" };
        let mut options: Vec<OsString> = vec![
            "--appendonly".into(),
            append_only.into(),
            "--cluster-node-timeout".into(),
            self.node_timeout.as_millis().to_string().into(),
        ];
        options.extend(self.extra_args.iter().cloned());
        options
    }
}

impl RedisCluster {
    /// The cluster named by `REDIS_CLUSTER_URL` if that is set (after checking
    /// that every node named answers PING and says `cluster_state:ok`), else a
    /// fresh local cluster of three primaries as [`RedisCluster::start_local`]
    /// starts it.
    ///
    /// The nodes of an external cluster cannot be killed, paused, restarted or
    /// failed over: tests that do that call [`RedisCluster::start_local`] or
    /// the [`builder`](RedisCluster::builder).
    pub fn start() -> Result<RedisCluster> {
        match std::env::var("REDIS_CLUSTER_URL") {
            Ok(url) if !url.trim().is_empty() => RedisCluster::external(url.trim()),
            _ => RedisCluster::start_local(),
        }
    }

    /// A fresh local cluster of three primaries without replicas, whatever
    /// `REDIS_CLUSTER_URL` says.
    pub fn start_local() -> Result<RedisCluster> {
        RedisCluster::builder().start()
    }

    /// Options for a cluster the testkit starts.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// The URL to hand to a client: `redis-cluster://127.0.0.1:p1,127.0.0.1:p2,...`
    /// naming every node, or `REDIS_CLUSTER_URL` as given.
    pub fn url(&self) -> String {
        self.url.0.clone()
    }

    /// Whether this cluster comes from `REDIS_CLUSTER_URL` (and so cannot be controlled).
    pub fn is_external(&self) -> bool {
        self.external
    }

    /// Every node, in start order (for an external cluster: the nodes its URL names).
    pub fn nodes(&self) -> &[ClusterNode] {
        &self.nodes
    }

    /// Node `index`.
    pub fn node(&self, index: usize) -> Result<&ClusterNode> {
        let count = self.nodes.len();
        self.nodes
            .get(index)
            .ok_or(TestkitError::NoSuchNode { index, count })
    }

    /// Node `index`, to kill, pause or restart it.
    pub fn node_mut(&mut self, index: usize) -> Result<&mut ClusterNode> {
        let count = self.nodes.len();
        self.nodes
            .get_mut(index)
            .ok_or(TestkitError::NoSuchNode { index, count })
    }

    /// The indexes of the running nodes that are primaries now.
    pub fn primaries(&self) -> Result<Vec<usize>> {
        self.indexes_where(|role| role == NodeRole::Primary)
    }

    /// The indexes of the running nodes that replicate node `primary` now.
    pub fn replicas_of(&self, primary: usize) -> Result<Vec<usize>> {
        let port = self.node(primary)?.port();
        self.indexes_where(
            |role| matches!(role, NodeRole::Replica { primary_port, .. } if primary_port == port),
        )
    }

    /// The index of the node that serves `key`'s hash slot, as the cluster
    /// itself says (`CLUSTER KEYSLOT`, then `CLUSTER SLOTS` on a running node).
    pub fn node_for_key(&self, key: &str) -> Result<usize> {
        let asked = self.any_running()?;
        let slot = match asked.command(&["CLUSTER", "KEYSLOT", key])? {
            Reply::Integer(slot) => slot,
            other => return Err(asked.bad_reply("CLUSTER KEYSLOT", &other)),
        };
        let slots = asked.command(&["CLUSTER", "SLOTS"])?;
        let port = serving_port(&slots, slot).ok_or_else(|| asked.bad_reply("CLUSTER SLOTS", &slots))?;
        self.nodes
            .iter()
            .position(|node| node.port() == port)
            .ok_or_else(|| {
                asked.bad_reply(
                    &format!("CLUSTER SLOTS (slot {slot} on a node not listed)"),
                    &slots,
                )
            })
    }

    /// Moves the empty hash slot `slot` to primary `to`, as a resharding does
    /// (`CLUSTER SETSLOT ... IMPORTING`/`MIGRATING` on the two primaries,
    /// then `NODE` on every primary), and waits until the cluster agrees.
    /// Clients that read the slot map before keep sending the slot's keys to
    /// the old primary until they read it again.
    pub fn move_empty_slot(&self, slot: u16, to: usize) -> Result<()> {
        if self.external {
            return Err(TestkitError::ExternalCluster {
                action: "move a slot of",
            });
        }
        let slot_text = slot.to_string();
        let from = self
            .nodes
            .iter()
            .position(|node| {
                let Ok(slots) = node.command(&["CLUSTER", "SLOTS"]) else {
                    return false;
                };
                matches!(node.role(), Ok(NodeRole::Primary))
                    && serving_port(&slots, i64::from(slot)) == Some(node.port())
            })
            .ok_or(TestkitError::NotRunning {
                action: "find the primary serving a slot of",
            })?;
        let id = |index: usize| -> Result<String> {
            let node = self.node(index)?;
            match node.command(&["CLUSTER", "MYID"])? {
                Reply::Bulk(Some(id)) => Ok(id),
                other => Err(node.bad_reply("CLUSTER MYID", &other)),
            }
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let setslot = |index: usize, state: &str, node_id: &str| -> Result<()> {
            let node = self.node(index)?;
            match node.command(&["CLUSTER", "SETSLOT", &slot_text, state, node_id])? {
                Reply::Simple(ok) if ok == "OK" => Ok(()),
                other => Err(node.bad_reply(&format!("CLUSTER SETSLOT {slot} {state}"), &other)),
            }
        };
        if from != to {
            let keys = self
                .node(from)?
                .command(&["CLUSTER", "COUNTKEYSINSLOT", &slot_text])?;
            if !matches!(keys, Reply::Integer(0)) {
                return Err(self.node(from)?.bad_reply(
                    &format!("CLUSTER COUNTKEYSINSLOT {slot} (the slot is not empty)"),
                    &keys,
                ));
            }
            setslot(to, "IMPORTING", &from_id)?;
            setslot(from, "MIGRATING", &to_id)?;
            setslot(to, "NODE", &to_id)?;
            setslot(from, "NODE", &to_id)?;
            for other in self.primaries()? {
                if other != from && other != to {
                    setslot(other, "NODE", &to_id)?;
                }
            }
        }
        self.wait_ok()
    }

    /// Promotes replica `replica` with a manual `CLUSTER FAILOVER` and waits
    /// until it is a primary and the cluster is ok again.
    ///
    /// A manual failover waits for the replica to catch up with its primary
    /// before they swap roles, so no acknowledged write is lost (unlike the
    /// automatic failover after a primary is killed).
    pub fn failover(&mut self, replica: usize) -> Result<()> {
        if self.external {
            return Err(TestkitError::ExternalCluster { action: "fail over" });
        }
        let node = self.node(replica)?;
        match node.role()? {
            NodeRole::Replica { .. } => {}
            NodeRole::Primary => {
                return Err(TestkitError::NotAReplica {
                    port: node.port(),
                    role: "a primary".to_owned(),
                });
            }
        }
        // The replica must be linked, or CLUSTER FAILOVER refuses ("Master is down or failed").
        self.wait_ok()?;
        let node = self.node(replica)?;
        match node.command(&["CLUSTER", "FAILOVER"])? {
            Reply::Simple(ok) if ok == "OK" => {}
            other => return Err(node.bad_reply("CLUSTER FAILOVER", &other)),
        }
        let what = format!(
            "the replica on port {} to be promoted by CLUSTER FAILOVER",
            node.port()
        );
        crate::wait_until(FAILOVER_TIMEOUT, &what, || {
            matches!(node.role(), Ok(NodeRole::Primary))
        })?;
        self.wait_ok()
    }

    /// Waits until every running node (not killed, stopped or paused) says
    /// `cluster_state:ok` and, for a local cluster, knows every node, sees all
    /// 16384 slots assigned, and every replica is linked to its primary.
    ///
    /// Call it after restarting a node or killing a primary that has a
    /// replica: nodes agree on the new configuration a moment later.
    pub fn wait_ok(&self) -> Result<()> {
        let started = Instant::now();
        loop {
            let mut states: Vec<NodeState> = self.nodes.iter().map(|node| self.state_of(node)).collect();
            if states.iter().all(NodeState::is_ready) {
                match self.slot_maps_agree() {
                    Ok(()) => return Ok(()),
                    Err(disagreement) => states = disagreement,
                }
            }
            let waited = started.elapsed();
            if waited >= READY_TIMEOUT {
                let nodes = self
                    .nodes
                    .iter()
                    .zip(&states)
                    .map(|(node, state)| format!("  {}: {}", node.endpoint, state.describe()))
                    .collect::<Vec<_>>()
                    .join("\n");
                return Err(TestkitError::ClusterNotReady {
                    what: "cluster_state:ok on every running node, every replica linked, one slot map"
                        .to_owned(),
                    waited,
                    nodes,
                });
            }
            std::thread::sleep(POLL_INTERVAL * 10);
        }
    }

    /// Runs `redis-cli --cluster create` over every node.
    fn create(&self, replicas: bool) -> Result<()> {
        let first = self.nodes[0]
            .server
            .as_ref()
            .expect("a local cluster's nodes are local");
        let program = find_redis_cli(first.program())?;
        let log_path = first.dir().join(CREATE_LOG);
        let log = File::create(&log_path).map_err(TestkitError::io("create cluster-create.log"))?;
        let log_err = log
            .try_clone()
            .map_err(TestkitError::io("duplicate the cluster-create.log handle"))?;
        let mut command = Command::new(&program);
        command.arg("--cluster").arg("create");
        command.args(self.nodes.iter().map(|node| node.endpoint.to_string()));
        command.arg("--cluster-yes");
        if replicas {
            command.args(["--cluster-replicas", "1"]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|source| TestkitError::Io {
                what: format!("run {} --cluster create", program.display()),
                source,
            })?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child
                .try_wait()
                .map_err(TestkitError::io("poll redis-cli --cluster create"))?
            {
                break status;
            }
            if started.elapsed() >= CREATE_TIMEOUT {
                // Best effort: the timeout below is the error that matters.
                let _ = child.kill();
                let _ = child.wait();
                return Err(TestkitError::ClusterNotReady {
                    what: "`redis-cli --cluster create` to finish".to_owned(),
                    waited: started.elapsed(),
                    nodes: std::fs::read_to_string(&log_path).unwrap_or_default(),
                });
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        if status.success() {
            Ok(())
        } else {
            Err(TestkitError::ClusterCreate {
                status,
                output: std::fs::read_to_string(&log_path).unwrap_or_default(),
            })
        }
    }

    fn external(url: &str) -> Result<RedisCluster> {
        let endpoints = parse_cluster_url(url).map_err(|reason| TestkitError::InvalidRedisClusterUrl {
            url: redact(url),
            reason,
        })?;
        for endpoint in &endpoints {
            endpoint.ping(EXTERNAL_PING_TIMEOUT).map_err(|source| {
                TestkitError::ExternalClusterUnreachable {
                    url: redact(url),
                    node: endpoint.to_string(),
                    source: Box::new(source),
                }
            })?;
        }
        let cluster = RedisCluster {
            url: SecretUrl(url.to_owned()),
            nodes: endpoints
                .into_iter()
                .map(|endpoint| ClusterNode {
                    endpoint,
                    server: None,
                })
                .collect(),
            external: true,
        };
        cluster.wait_ok()?;
        Ok(cluster)
    }

    fn indexes_where(&self, wanted: impl Fn(NodeRole) -> bool) -> Result<Vec<usize>> {
        let mut indexes = Vec::new();
        for (index, node) in self.nodes.iter().enumerate() {
            if node.is_reachable() && wanted(node.role()?) {
                indexes.push(index);
            }
        }
        Ok(indexes)
    }

    fn any_running(&self) -> Result<&ClusterNode> {
        self.nodes
            .iter()
            .find(|node| node.is_reachable())
            .ok_or(TestkitError::NotRunning {
                action: "query the cluster of",
            })
    }

    /// Whether every reachable node maps the slots to the same primaries (after a
    /// failover or restart, the news spreads by gossip); else each node's map.
    fn slot_maps_agree(&self) -> std::result::Result<(), Vec<NodeState>> {
        let maps: Vec<Option<String>> = self
            .nodes
            .iter()
            .map(|node| {
                node.is_reachable()
                    .then(|| match node.command(&["CLUSTER", "SLOTS"]) {
                        Ok(reply) => slot_map(&reply),
                        Err(error) => error.to_string(),
                    })
            })
            .collect();
        let mut seen = maps.iter().flatten();
        let first = seen.next();
        if seen.all(|map| Some(map) == first) {
            return Ok(());
        }
        Err(maps
            .into_iter()
            .map(|map| match map {
                None => NodeState::Down,
                Some(map) => NodeState::NotOk(format!("slots {map} (the nodes disagree)")),
            })
            .collect())
    }

    /// What `node` says about the cluster, for [`RedisCluster::wait_ok`].
    fn state_of(&self, node: &ClusterNode) -> NodeState {
        if !node.is_reachable() {
            return NodeState::Down;
        }
        let info = match node.cluster_info() {
            Ok(info) => info,
            Err(error) => return NodeState::Failing(error.to_string()),
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim().strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or("?")
                .to_owned()
        };
        let state = field("cluster_state");
        let assigned = field("cluster_slots_assigned");
        let known = field("cluster_known_nodes");
        let complete = self.external || (assigned == "16384" && known == self.nodes.len().to_string());
        if state != "ok" || !complete {
            return NodeState::NotOk(format!(
                "cluster_state:{state} cluster_slots_assigned:{assigned} cluster_known_nodes:{known}"
            ));
        }
        match node.role() {
            Ok(NodeRole::Replica {
                linked: false,
                primary_port,
            }) if !self.external => {
                NodeState::NotOk(format!("replica of port {primary_port}, link not up yet"))
            }
            Ok(_) => NodeState::Ok,
            Err(error) => NodeState::Failing(error.to_string()),
        }
    }
}

/// One node's answer to "are you ready?".
enum NodeState {
    Ok,
    Down,
    NotOk(String),
    Failing(String),
}

impl NodeState {
    fn is_ready(&self) -> bool {
        matches!(self, NodeState::Ok | NodeState::Down)
    }

    fn describe(&self) -> String {
        match self {
            NodeState::Ok => "ok".to_owned(),
            NodeState::Down => "not running (killed, stopped or paused)".to_owned(),
            NodeState::NotOk(what) => what.clone(),
            NodeState::Failing(error) => error.clone(),
        }
    }
}

impl ClusterNode {
    /// The TCP port the node listens on.
    pub fn port(&self) -> u16 {
        self.endpoint.port
    }

    /// A `redis://` URL of this node alone (a client on it gets `MOVED` for
    /// keys of other nodes).
    pub fn url(&self) -> String {
        format!("redis://{}", self.endpoint)
    }

    /// Whether the node runs and is not paused (always `true` for an external node).
    pub fn is_reachable(&self) -> bool {
        self.server
            .as_ref()
            .is_none_or(|server| server.is_running() && !server.is_paused())
    }

    /// Sends PING and expects `+PONG` within one second.
    pub fn ping(&self) -> Result<()> {
        self.endpoint.ping(Duration::from_secs(1))
    }

    /// What the node is now, from its `ROLE` reply.
    pub fn role(&self) -> Result<NodeRole> {
        let reply = self.command(&["ROLE"])?;
        parse_role(&reply).ok_or_else(|| self.bad_reply("ROLE", &reply))
    }

    /// The node's `CLUSTER INFO` text (`cluster_state:ok`, ...).
    pub fn cluster_info(&self) -> Result<String> {
        let reply = self.command(&["CLUSTER", "INFO"])?;
        reply
            .text()
            .map(str::to_owned)
            .ok_or_else(|| self.bad_reply("CLUSTER INFO", &reply))
    }

    /// Kills the node with SIGKILL and waits until it has exited. Does nothing
    /// if it is already down. The other nodes mark it failed after the node
    /// timeout; a replica of a killed primary then takes over.
    pub fn kill(&mut self) -> Result<()> {
        self.local("kill")?.kill()
    }

    /// Freezes the node with SIGSTOP: it keeps its connections but answers
    /// nothing (to clients and to the cluster bus) until [`ClusterNode::resume`].
    pub fn pause(&mut self) -> Result<()> {
        self.local("pause")?.pause()
    }

    /// Lets a paused node run again (SIGCONT).
    pub fn resume(&mut self) -> Result<()> {
        self.local("resume")?.resume()
    }

    /// Stops the node gracefully if it runs, starts it again on the same port
    /// and cluster bus port with the same data directory and `nodes.conf`
    /// (so it rejoins as the same node), and waits until it answers PING.
    /// Call [`RedisCluster::wait_ok`] to wait until the cluster agrees again.
    pub fn restart(&mut self) -> Result<()> {
        self.local("restart")?.restart()
    }

    /// Shuts the node down gracefully (SIGTERM) and waits until it has exited.
    pub fn stop(&mut self) -> Result<()> {
        self.local("stop")?.stop()
    }

    fn local(&mut self, action: &'static str) -> Result<&mut LocalServer> {
        self.server
            .as_mut()
            .ok_or(TestkitError::ExternalCluster { action })
    }

    fn command(&self, args: &[&str]) -> Result<Reply> {
        self.endpoint.command(args, COMMAND_TIMEOUT)
    }

    fn bad_reply(&self, command: &str, reply: &Reply) -> TestkitError {
        TestkitError::BadReply {
            addr: self.endpoint.to_string(),
            command: command.to_owned(),
            reply: format!("{reply:?}"),
        }
    }
}

/// `redis-cluster://` followed by every endpoint, comma-separated.
fn cluster_url<'a>(endpoints: impl Iterator<Item = &'a Endpoint>) -> String {
    let hosts: Vec<String> = endpoints.map(ToString::to_string).collect();
    format!("redis-cluster://{}", hosts.join(","))
}

/// Parses `redis-cluster://[[user]:password@]host:port[,host:port...]` into one endpoint per node.
fn parse_cluster_url(url: &str) -> Result<Vec<Endpoint>, String> {
    let rest = url
        .strip_prefix("redis-cluster://")
        .ok_or("only the redis-cluster:// scheme is supported")?;
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if !tail.trim_start_matches('/').is_empty() {
        return Err(format!(
            "{tail:?} follows the nodes, but a cluster has no databases and the testkit takes no options"
        ));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    hosts
        .split(',')
        .enumerate()
        .map(|(index, host)| {
            if host.trim().is_empty() {
                return Err(format!("node {} of the list is empty", index + 1));
            }
            let single = match userinfo {
                Some(userinfo) => format!("redis://{userinfo}@{host}"),
                None => format!("redis://{host}"),
            };
            Endpoint::parse(&single).map_err(|reason| format!("node {host:?}: {reason}"))
        })
        .collect()
}

/// A `ROLE` reply: `["master", offset, [...]]` or `["slave", ip, port, state, offset]`.
fn parse_role(reply: &Reply) -> Option<NodeRole> {
    let Reply::Array(Some(items)) = reply else {
        return None;
    };
    match items.first()?.text()? {
        "master" => Some(NodeRole::Primary),
        "slave" => {
            let primary_port = match items.get(2)? {
                Reply::Integer(port) => u16::try_from(*port).ok()?,
                _ => return None,
            };
            let linked = items.get(3)?.text()? == "connected";
            Some(NodeRole::Replica { primary_port, linked })
        }
        _ => None,
    }
}

/// The ranges of a `CLUSTER SLOTS` reply as `(start, end, primary port)`, sorted;
/// the reply is `[[start, end, [ip, port, id, ...], replicas...], ...]`.
fn slot_ranges(slots: &Reply) -> Option<Vec<(i64, i64, u16)>> {
    let Reply::Array(Some(ranges)) = slots else {
        return None;
    };
    let mut parsed = ranges
        .iter()
        .map(|range| match range {
            Reply::Array(Some(range)) => match (range.first()?, range.get(1)?, range.get(2)?) {
                (Reply::Integer(start), Reply::Integer(end), Reply::Array(Some(primary))) => {
                    match primary.get(1)? {
                        Reply::Integer(port) => Some((*start, *end, u16::try_from(*port).ok()?)),
                        _ => None,
                    }
                }
                _ => None,
            },
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    parsed.sort_unstable();
    Some(parsed)
}

/// The port of the primary serving `slot`, from a `CLUSTER SLOTS` reply.
fn serving_port(slots: &Reply, slot: i64) -> Option<u16> {
    slot_ranges(slots)?
        .into_iter()
        .find(|(start, end, _)| (*start..=*end).contains(&slot))
        .map(|(_, _, port)| port)
}

/// A `CLUSTER SLOTS` reply as `start-end@port` ranges, e.g. `0-5460@7000 5461-10922@7001`.
fn slot_map(slots: &Reply) -> String {
    match slot_ranges(slots) {
        Some(ranges) => ranges
            .iter()
            .map(|(start, end, port)| format!("{start}-{end}@{port}"))
            .collect::<Vec<_>>()
            .join(" "),
        None => format!("{slots:?}"),
    }
}

/// `ORDO_REDIS_CLI` (a path, or a name on PATH), else the `redis-cli` beside
/// `redis_server`, else `redis-cli` on PATH.
fn find_redis_cli(redis_server: &Path) -> Result<PathBuf> {
    locate_cli(
        std::env::var_os("ORDO_REDIS_CLI"),
        redis_server,
        std::env::var_os("PATH"),
    )
}

/// [`find_redis_cli`] with its environment passed in.
fn locate_cli(
    configured: Option<OsString>,
    redis_server: &Path,
    search_path: Option<OsString>,
) -> Result<PathBuf> {
    if let Some(program) = configured.filter(|value| !value.is_empty()) {
        return resolve(&program, search_path).ok_or_else(|| TestkitError::RedisCliNotFound {
            looked_for: format!(
                "ORDO_REDIS_CLI={} is neither a file nor a program on PATH",
                program.to_string_lossy()
            ),
            hint: CLI_HINT,
        });
    }
    let beside = redis_server.with_file_name("redis-cli");
    if beside.is_file() {
        return Ok(beside);
    }
    resolve("redis-cli".as_ref(), search_path).ok_or_else(|| TestkitError::RedisCliNotFound {
        looked_for: format!("neither beside {} nor on PATH", redis_server.display()),
        hint: CLI_HINT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_redis_cli_error_says_how_to_get_one() {
        let dir = tempfile::tempdir().unwrap();
        let server = dir.path().join("redis-server");
        let error = locate_cli(None, &server, Some("/nonexistent-dir".into())).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!(
                "no redis-cli found (neither beside {} nor on PATH); redis-cli creates the cluster: install it \
                 with `apt-get install redis-tools` (it comes with redis-server), or set \
                 ORDO_REDIS_CLI=/path/to/redis-cli, or set \
                 REDIS_CLUSTER_URL=redis-cluster://host:port,host:port,... to use a running Redis Cluster",
                server.display()
            )
        );
        let error = locate_cli(Some("/nonexistent/redis-cli".into()), &server, None).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("ORDO_REDIS_CLI=/nonexistent/redis-cli is neither a file"),
            "{error}"
        );
    }

    #[test]
    fn redis_cli_is_found_beside_redis_server_first() {
        let beside = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        for dir in [beside.path(), on_path.path()] {
            // Program lookup takes executables only.
            let cli = dir.join("redis-cli");
            std::fs::write(&cli, "").unwrap();
            std::fs::set_permissions(&cli, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let server = beside.path().join("redis-server");
        let found = locate_cli(None, &server, Some(on_path.path().into())).unwrap();
        assert_eq!(found, beside.path().join("redis-cli"));
        let elsewhere = tempfile::tempdir().unwrap().path().join("redis-server");
        let found = locate_cli(None, &elsewhere, Some(on_path.path().into())).unwrap();
        assert_eq!(found, on_path.path().join("redis-cli"));
    }

    #[test]
    fn parses_a_cluster_url_into_one_endpoint_per_node() {
        let endpoints =
            parse_cluster_url("redis-cluster://127.0.0.1:7000,127.0.0.1:7001,[::1]:7002").unwrap();
        let names: Vec<String> = endpoints.iter().map(ToString::to_string).collect();
        assert_eq!(names, ["127.0.0.1:7000", "127.0.0.1:7001", "[::1]:7002"]);
        let endpoints = parse_cluster_url("redis-cluster://:pw@h:1,h:2/").unwrap();
        assert_eq!(endpoints.len(), 2);
        assert_eq!(cluster_url(endpoints.iter()), "redis-cluster://h:1,h:2");
    }

    #[test]
    fn a_malformed_cluster_url_is_rejected_with_the_reason() {
        for (url, reason) in [
            ("redis://h:1", "only the redis-cluster:// scheme is supported"),
            ("redis-cluster://h:1,,h:2", "node 2 of the list is empty"),
            (
                "redis-cluster://h:1,h:x",
                "node \"h:x\": the port is not a number in 1..=65535",
            ),
            (
                "redis-cluster://h:1/2",
                "\"/2\" follows the nodes, but a cluster has no databases and the testkit takes no options",
            ),
        ] {
            assert_eq!(parse_cluster_url(url).err().as_deref(), Some(reason), "{url}");
        }
        let error = RedisCluster::external("redis-cluster://h:1,").unwrap_err();
        assert_eq!(
            error.to_string(),
            "REDIS_CLUSTER_URL=\"redis-cluster://h:1,\" is not a usable Redis Cluster URL (node 2 of the \
             list is empty); expected redis-cluster://host:port[,host:port...]"
        );
    }

    #[test]
    fn parses_role_and_slots_replies() {
        let bulk = |text: &str| Reply::Bulk(Some(text.to_owned()));
        let primary = Reply::Array(Some(vec![
            bulk("master"),
            Reply::Integer(42),
            Reply::Array(Some(vec![])),
        ]));
        assert_eq!(parse_role(&primary), Some(NodeRole::Primary));
        let replica = Reply::Array(Some(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Reply::Integer(7000),
            bulk("connected"),
            Reply::Integer(42),
        ]));
        assert_eq!(
            parse_role(&replica),
            Some(NodeRole::Replica {
                primary_port: 7000,
                linked: true
            })
        );
        assert_eq!(parse_role(&Reply::Simple("OK".into())), None);

        let range = |start, end, port| {
            Reply::Array(Some(vec![
                Reply::Integer(start),
                Reply::Integer(end),
                Reply::Array(Some(vec![bulk("127.0.0.1"), Reply::Integer(port), bulk("id")])),
            ]))
        };
        let slots = Reply::Array(Some(vec![range(0, 5460, 7000), range(5461, 16383, 7001)]));
        assert_eq!(serving_port(&slots, 0), Some(7000));
        assert_eq!(serving_port(&slots, 5461), Some(7001));
        assert_eq!(serving_port(&slots, 16384), None);
        assert_eq!(slot_map(&slots), "0-5460@7000 5461-16383@7001");
    }

    #[test]
    fn an_external_cluster_answers_but_refuses_control() {
        let local = RedisCluster::start_local().unwrap();
        let mut external = RedisCluster::external(&local.url()).unwrap();
        assert!(external.is_external());
        assert!(!local.is_external());
        assert_eq!(external.url(), local.url());
        assert_eq!(external.nodes().len(), 3);
        assert_eq!(external.primaries().unwrap().len(), 3);
        let error = external.failover(0).unwrap_err();
        assert!(matches!(error, TestkitError::ExternalCluster { .. }), "{error:?}");
        let node = external.node_mut(0).unwrap();
        for (action, outcome) in [
            ("kill", node.kill()),
            ("pause", node.pause()),
            ("resume", node.resume()),
            ("restart", node.restart()),
            ("stop", node.stop()),
        ] {
            let error = outcome.unwrap_err();
            assert!(
                error.to_string().starts_with(&format!(
                    "cannot {action} a node of an external Redis Cluster (REDIS_CLUSTER_URL is set)"
                )),
                "{error}"
            );
        }
    }
}
