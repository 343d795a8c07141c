//! How the broker's Redis clients are configured.
//!
//! Every client reconnects forever with a capped exponential delay, so the
//! consumer survives a Redis restart: commands fail (or time out) while
//! Redis is away, the consumer backs off and retries, and leases that
//! expired meanwhile are re-acquired.

use std::time::Duration;

use fred::clients::Pool;
use fred::prelude::{Builder, ClientLike};
use fred::types::config::{Blocking, Config as FredConfig, ReconnectPolicy};

use crate::error::{Error, Result};
use crate::net::nodes::{self, Node};
use crate::net::secret::redact_url;
use crate::net::tls::TlsFiles;

/// Reconnect delays: from 100 ms doubling up to 2 s, forever.
fn reconnect_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 100, 2_000, 2)
}

/// URL schemes of a Redis Cluster, as fred names them.
const CLUSTER_SCHEMES: [&str; 4] = [
    "redis-cluster",
    "rediss-cluster",
    "valkey-cluster",
    "valkeys-cluster",
];

/// The fred client configuration for a Redis URL, as every Ordo client
/// (broker, `ordo` tool, benchmarks) reads it.
///
/// Every URL fred's `Config::from_url` reads is accepted
/// (`redis://host:port/db`, `rediss://...`, `redis-cluster://host:port?node=host:port`,
/// ...), and so is a Redis Cluster named by a comma-separated list of seed
/// nodes, the form the testkit and the docs use:
/// `redis-cluster://[[user]:password@]host:port[,host:port...]`. Any one
/// reachable seed is enough: the client learns the rest of the cluster from it.
///
/// # Errors
///
/// [`Error::Config`] with key `url`, naming the URL (its password masked) and
/// what is wrong with it.
pub fn client_config(url: &str) -> Result<FredConfig> {
    let invalid = |reason: String| Error::Config {
        key: "url",
        reason: format!("{:?} is not a valid Redis URL: {reason}", redact_url(url)),
    };
    let url = url.trim();
    let rewritten = seed_list(url).map_err(invalid)?;
    FredConfig::from_url(rewritten.as_deref().unwrap_or(url)).map_err(|e| invalid(e.details().to_owned()))
}

/// [`client_config`] with the TLS of `tls` (a CA file, a client
/// certificate) for a `rediss://` URL.
///
/// # Errors
///
/// As [`client_config`]; and [`Error::Config`] naming the TLS setting
/// (`tls_ca_file`, `tls_cert_file`, `tls_key_file`) whose file cannot be
/// read or used, or `tls` when files are set for a URL without TLS.
pub fn client_config_with_tls(url: &str, tls: &TlsFiles) -> Result<FredConfig> {
    let mut config = client_config(url)?;
    tls.apply(&mut config)?;
    Ok(config)
}

/// A connected pool of `size` clients to `url`, for the crate's tests.
#[cfg(test)]
pub(crate) async fn test_pool(url: &str, size: usize) -> fred::clients::Pool {
    use fred::interfaces::ClientLike as _;
    let pool = fred::prelude::Builder::from_config(client_config(url).unwrap())
        .build_pool(size)
        .unwrap();
    pool.init().await.unwrap();
    pool
}

/// A cluster URL with a comma-separated node list, rewritten to fred's form
/// (the first node as the host, the others as `node=` query parameters);
/// `None` for any other URL, which fred reads as it is.
fn seed_list(url: &str) -> std::result::Result<Option<String>, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(None);
    };
    if !CLUSTER_SCHEMES.contains(&scheme) {
        return Ok(None);
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    if !hosts.contains(',') {
        return Ok(None);
    }
    let nodes = hosts
        .split(',')
        .enumerate()
        .map(|(index, node)| seed(index, node.trim()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    if path.contains('#') || query.is_some_and(|query| query.contains('#')) {
        return Err("a cluster URL takes no #fragment".to_owned());
    }
    let mut rewritten = format!("{scheme}://");
    if let Some(userinfo) = userinfo {
        rewritten.push_str(userinfo);
        rewritten.push('@');
    }
    rewritten.push_str(nodes[0]);
    rewritten.push_str(path);
    let mut parameters: Vec<String> = nodes[1..].iter().map(|node| format!("node={node}")).collect();
    parameters.extend(query.filter(|query| !query.is_empty()).map(str::to_owned));
    rewritten.push('?');
    rewritten.push_str(&parameters.join("&"));
    Ok(Some(rewritten))
}

/// One `host:port` of a seed list (fred needs the port of every node but the first).
fn seed(index: usize, node: &str) -> std::result::Result<&str, String> {
    let position = index + 1;
    if node.is_empty() {
        return Err(format!("node {position} of the list is empty"));
    }
    let Some((host, port)) = node.rsplit_once(':') else {
        return Err(format!("node {position} ({node:?}) has no port; write host:port"));
    };
    if host.is_empty() || host.contains([':', '[', ']', '@', '/']) {
        return Err(format!(
            "node {position} ({node:?}) is not host:port (IPv6 addresses cannot be listed; \
             name one IPv6 node, or use host names)"
        ));
    }
    match port.parse::<u16>() {
        Ok(port) if port != 0 => Ok(node),
        _ => Err(format!(
            "node {position} ({node:?}) has a port that is not a number in 1..=65535"
        )),
    }
}

/// A builder of clients for `url` whose commands time out after
/// `command_timeout` (zero: never). With `fail_fast` the first connection
/// attempt reports its failure; without, it is retried like a reconnect
/// (for background clients that must not give up).
pub(crate) fn builder(
    url: &str,
    tls: &TlsFiles,
    command_timeout: Duration,
    fail_fast: bool,
) -> Result<Builder> {
    let mut config = client_config_with_tls(url, tls)?;
    config.fail_fast = fail_fast;
    let mut builder = Builder::from_config(config);
    builder
        .set_policy(reconnect_policy())
        .with_performance_config(|perf| perf.default_command_timeout = command_timeout);
    Ok(builder)
}

/// A builder for a client that runs blocking reads (a plain consumer's
/// `XREADGROUP`): sending any other command on it, such as `QUIT` at
/// shutdown, interrupts the blocked read (`CLIENT UNBLOCK`).
pub(crate) fn blocking_builder(url: &str, tls: &TlsFiles) -> Result<Builder> {
    let mut config = client_config_with_tls(url, tls)?;
    config.blocking = Blocking::Interrupt;
    config.fail_fast = false;
    let mut builder = Builder::from_config(config);
    builder.set_policy(reconnect_policy());
    Ok(builder)
}

/// A builder for the waker's subscriber: it never gives up reconnecting,
/// and keeps room for many doorbell rings between two reads of them.
pub(crate) fn subscriber_builder(url: &str, tls: &TlsFiles) -> Result<Builder> {
    let mut builder = builder(url, tls, Duration::ZERO, false)?;
    builder.with_performance_config(|perf| perf.broadcast_channel_capacity = SUBSCRIBER_BUFFER);
    Ok(builder)
}

/// How many doorbell rings the waker's subscriber buffers before the waker
/// reads them (more are dropped, and the waker then wakes every worker).
const SUBSCRIBER_BUFFER: usize = 16_384;

/// Starts connecting `client` without waiting: commands queue until the
/// connection is up (or time out).
pub(crate) fn connect_in_background<C: ClientLike>(client: &C) {
    // The handle resolves when the connection task ends (on quit); errors
    // on the way are retried by the reconnect policy.
    drop(client.connect());
}

/// Closes `client`'s connection, waiting at most `patience` (a connection
/// still blocked in a read may not answer `QUIT` promptly; dropping the
/// client closes it anyway).
pub(crate) async fn quit<C: ClientLike>(client: &C, patience: Duration) {
    if tokio::time::timeout(patience, client.quit()).await.is_err() {
        tracing::debug!(
            ?patience,
            "QUIT did not complete in time; dropping the connection"
        );
    }
}

/// Refuses a Redis whose `maxmemory-policy` may evict keys: Ordo's leases,
/// halt records and pending entries must never vanish under memory pressure.
/// On a Redis Cluster every primary is checked (each has its own setting).
pub(crate) async fn check_no_eviction(pool: &Pool) -> Result<()> {
    let policies = nodes::on_every_node(pool.next(), |_, node| async move {
        let info: String = node.info(Some(fred::types::InfoKind::Memory)).await?;
        Ok(info
            .lines()
            .find_map(|line| line.trim().strip_prefix("maxmemory_policy:"))
            .map(str::to_owned))
    })
    .await?;
    for (node, policy) in policies {
        match policy.as_deref() {
            Some("noeviction") => {}
            Some(policy) => {
                let on = match node {
                    Node::Single => "this Redis".to_owned(),
                    node => node.to_string(),
                };
                return Err(Error::Config {
                    key: "maxmemory-policy",
                    reason: format!(
                        "is `{policy}` on {on}, which can evict Ordo's leases, halt records and pending \
                         entries and silently break per-key ordering: set `maxmemory-policy noeviction`, or \
                         opt out with `RedisBrokerBuilder::allow_eviction(true)`"
                    ),
                });
            }
            None => {
                return Err(Error::protocol(
                    "INFO memory",
                    format!("no `maxmemory_policy` line from {node}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use fred::types::config::{Server, ServerConfig};

    use super::*;

    fn hosts(url: &str) -> Vec<(String, u16)> {
        let config = client_config(url).unwrap_or_else(|error| panic!("{url}: {error}"));
        let mut hosts: Vec<(String, u16)> = config
            .server
            .hosts()
            .into_iter()
            .map(|server: Server| (server.host.to_string(), server.port))
            .collect();
        hosts.sort();
        hosts
    }

    fn reason(url: &str) -> String {
        client_config(url).unwrap_err().to_string()
    }

    #[test]
    fn a_comma_separated_cluster_url_names_every_seed_node() {
        let url = "redis-cluster://127.0.0.1:7000,127.0.0.1:7001,localhost:7002";
        let config = client_config(url).unwrap();
        assert!(config.server.is_clustered(), "{:?}", config.server);
        assert_eq!(
            hosts(url),
            [
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001),
                ("localhost".to_owned(), 7002)
            ]
        );
        let config = client_config("redis-cluster://me:s3cret@a:1,b:2").unwrap();
        assert_eq!(config.username.as_deref(), Some("me"));
        assert_eq!(config.password.as_deref(), Some("s3cret"));
        assert_eq!(
            hosts("redis-cluster://a:1, b:2/"),
            [("a".to_owned(), 1), ("b".to_owned(), 2)]
        );
        // fred's own forms keep working.
        assert_eq!(
            hosts("redis-cluster://a:1?node=b:2"),
            [("a".to_owned(), 1), ("b".to_owned(), 2)]
        );
        assert_eq!(
            hosts("redis-cluster://a:1,b:2?node=c:3"),
            [("a".to_owned(), 1), ("b".to_owned(), 2), ("c".to_owned(), 3)]
        );
        assert_eq!(hosts("redis-cluster://a:1"), [("a".to_owned(), 1)]);
    }

    #[test]
    fn single_node_urls_are_read_as_fred_reads_them() {
        let config = client_config("redis://127.0.0.1:6380/3").unwrap();
        assert!(
            matches!(config.server, ServerConfig::Centralized { .. }),
            "{:?}",
            config.server
        );
        assert_eq!(config.database, Some(3));
        assert_eq!(hosts(" redis://h:1 "), [("h".to_owned(), 1)]);
    }

    #[test]
    fn a_malformed_url_is_an_error_naming_the_url_and_the_fault() {
        for (url, fault) in [
            ("redis-cluster://a:1,,b:2", "node 2 of the list is empty"),
            (
                "redis-cluster://a:1,b",
                "node 2 (\"b\") has no port; write host:port",
            ),
            (
                "redis-cluster://a:1,b:70000",
                "node 2 (\"b:70000\") has a port that is not a number in 1..=65535",
            ),
            ("redis-cluster://a:1,:2", "node 2 (\":2\") is not host:port"),
            ("redis-cluster://a:1,[::1]:2", "IPv6 addresses cannot be listed"),
            ("redis-cluster://a:1,b:2#x", "a cluster URL takes no #fragment"),
        ] {
            let error = reason(url);
            assert!(
                error.starts_with(&format!(
                    "invalid broker configuration: `url` {url:?} is not a valid Redis URL: "
                )),
                "{error}"
            );
            assert!(error.contains(fault), "{url}: {error}");
        }
        for url in ["localhost:6379", "redis://", "http//x", ""] {
            let error = reason(url);
            assert!(
                error.contains(&format!("{url:?} is not a valid Redis URL: ")),
                "{url}: {error}"
            );
        }
    }

    #[test]
    fn an_error_never_shows_the_password() {
        let error = reason("redis-cluster://me:s3cret@a:1,,b:2");
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains("\"redis-cluster://me:***@a:1,,b:2\""), "{error}");
    }
}
