//! A Redis primary with one replica, watched by three Sentinels: every
//! process a local `redis-server` on a free port in its own directory.

use std::time::Duration;

use crate::error::{Result, TestkitError};
use crate::local::LocalServer;
use crate::resp::{Endpoint, Reply};
use crate::wait::wait_until;

/// The name the Sentinels know the primary by (`sentinelServiceName`).
pub const SENTINEL_SERVICE: &str = "ordo";

/// How many Sentinels watch the primary; two must agree it is down.
const SENTINELS: usize = 3;
/// How long one command to a server may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the topology may take to settle (replica in sync, Sentinels
/// aware of each other and of the replica; a failover complete).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A primary, a replica and three Sentinels, all local. Dropping it kills
/// them all.
#[derive(Debug)]
pub struct RedisSentinel {
    /// The two data servers; which one is the primary changes on failover.
    servers: Vec<LocalServer>,
    sentinels: Vec<LocalServer>,
}

impl RedisSentinel {
    /// Starts a primary, a replica of it and three Sentinels monitoring it
    /// as [`SENTINEL_SERVICE`] (quorum two, a primary is down after one
    /// second without answers), and waits until the replica is in sync and
    /// every Sentinel knows the replica and the two other Sentinels.
    pub fn start() -> Result<RedisSentinel> {
        let primary = LocalServer::start(Vec::new())?;
        let primary_port = primary.endpoint().port.to_string();
        let replica = LocalServer::start(vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary_port.clone().into(),
        ])?;
        let config = format!(
            "sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n\
             sentinel failover-timeout {SENTINEL_SERVICE} 10000\n\
             sentinel parallel-syncs {SENTINEL_SERVICE} 1\n"
        );
        let sentinels = (0..SENTINELS)
            .map(|_| LocalServer::start_sentinel(&config))
            .collect::<Result<Vec<_>>>()?;
        let topology = RedisSentinel {
            servers: vec![primary, replica],
            sentinels,
        };
        topology.wait_settled("the replica to sync and the Sentinels to find each other")?;
        Ok(topology)
    }

    /// The `redis-sentinel://` URL of the primary, naming every Sentinel:
    /// `redis-sentinel://127.0.0.1:<port>/0?sentinelServiceName=ordo&node=127.0.0.1:<port>...`.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://{}/0?sentinelServiceName={SENTINEL_SERVICE}",
            self.sentinels[0].endpoint()
        );
        for sentinel in &self.sentinels[1..] {
            url.push_str(&format!("&node={}", sentinel.endpoint()));
        }
        url
    }

    /// A `redis://` URL of the data server that is the primary now (by its
    /// own `ROLE`).
    pub fn primary_url(&self) -> Result<String> {
        Ok(format!(
            "redis://{}",
            self.servers[self.primary_index()?].endpoint()
        ))
    }

    /// The TCP port of the data server that is the primary now.
    pub fn primary_port(&self) -> Result<u16> {
        Ok(self.servers[self.primary_index()?].endpoint().port)
    }

    /// Asks a Sentinel to fail the primary over (`SENTINEL FAILOVER`, no
    /// agreement needed), and waits until the replica is the primary, the
    /// old primary its replica in sync, and every Sentinel names the new
    /// primary.
    pub fn failover(&self) -> Result<()> {
        let old = self.primary_index()?;
        let sentinel = self.sentinels[0].endpoint();
        match sentinel.command(&["SENTINEL", "FAILOVER", SENTINEL_SERVICE], COMMAND_TIMEOUT)? {
            Reply::Simple(ok) if ok == "OK" => {}
            other => return Err(unexpected(&sentinel, "SENTINEL FAILOVER", &other)),
        }
        let new_port = self.servers[1 - old].endpoint().port;
        wait_until(SETTLE_TIMEOUT, "the Sentinel failover to complete", || {
            self.primary_index().ok() == Some(1 - old)
                && self
                    .sentinels
                    .iter()
                    .all(|sentinel| primary_known_by(&sentinel.endpoint()) == Some(new_port))
        })?;
        self.wait_settled("the old primary to sync as a replica")
    }

    /// Which data server says `ROLE` master (exactly one must).
    fn primary_index(&self) -> Result<usize> {
        let masters: Vec<usize> = (0..self.servers.len())
            .filter(|&i| role_of(&self.servers[i].endpoint()).as_deref() == Some("master"))
            .collect();
        match masters[..] {
            [one] => Ok(one),
            _ => Err(TestkitError::UnexpectedReply {
                addr: self.servers[0].endpoint().to_string(),
                command: "ROLE",
                reply: format!("{} data servers say they are the primary", masters.len()),
            }),
        }
    }

    /// Waits until the replica is linked to the primary and caught up, and
    /// every Sentinel knows the primary, the replica and the other Sentinels.
    fn wait_settled(&self, what: &str) -> Result<()> {
        wait_until(SETTLE_TIMEOUT, what, || {
            let Ok(primary) = self.primary_index() else {
                return false;
            };
            let replica = self.servers[1 - primary].endpoint();
            let Some(info) = text(&replica, &["INFO", "replication"]) else {
                return false;
            };
            let primary_port = self.servers[primary].endpoint().port;
            let linked = info.lines().any(|line| line.trim() == "master_link_status:up")
                && info
                    .lines()
                    .any(|line| line.trim() == format!("master_port:{primary_port}"));
            let sentinels_agree = self.sentinels.iter().all(|sentinel| {
                let endpoint = sentinel.endpoint();
                primary_known_by(&endpoint) == Some(primary_port)
                    && count(&endpoint, &["SENTINEL", "REPLICAS", SENTINEL_SERVICE]) == Some(1)
                    && count(&endpoint, &["SENTINEL", "SENTINELS", SENTINEL_SERVICE]) == Some(SENTINELS - 1)
            });
            linked && sentinels_agree
        })
    }
}

/// The port of the primary `sentinel` names for [`SENTINEL_SERVICE`].
fn primary_known_by(sentinel: &Endpoint) -> Option<u16> {
    let reply = sentinel
        .command(
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SENTINEL_SERVICE],
            COMMAND_TIMEOUT,
        )
        .ok()?;
    match reply {
        Reply::Array(Some(parts)) => parts.get(1)?.text()?.parse().ok(),
        _ => None,
    }
}

/// The first element of `server`'s `ROLE` reply (`master`, `slave`).
fn role_of(server: &Endpoint) -> Option<String> {
    match server.command(&["ROLE"], COMMAND_TIMEOUT).ok()? {
        Reply::Array(Some(parts)) => parts.first()?.text().map(str::to_owned),
        _ => None,
    }
}

/// The text of `server`'s reply to `args`, if it answers with text.
fn text(server: &Endpoint, args: &[&str]) -> Option<String> {
    server
        .command(args, COMMAND_TIMEOUT)
        .ok()?
        .text()
        .map(str::to_owned)
}

/// How many elements `server`'s array reply to `args` has.
fn count(server: &Endpoint, args: &[&str]) -> Option<usize> {
    match server.command(args, COMMAND_TIMEOUT).ok()? {
        Reply::Array(Some(parts)) => Some(parts.len()),
        _ => None,
    }
}

fn unexpected(server: &Endpoint, command: &'static str, reply: &Reply) -> TestkitError {
    TestkitError::UnexpectedReply {
        addr: server.to_string(),
        command,
        reply: format!("{reply:?}"),
    }
}
