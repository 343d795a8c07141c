//! Commands that go once per Redis node rather than once per key.
//!
//! On a single Redis there is one node; on a Redis Cluster every primary is
//! one. Work whose cost must not grow with the number of partitions is done
//! per node: the heartbeat renews (and the supervisor acquires) every lease a
//! node holds with one call, discovery reads a node's index buckets with one
//! call, and settings that protect Ordo's data (no eviction) are checked on
//! every node. This module finds the nodes, routes a command to
//! one, runs a command on all of them, and groups keys by the node that
//! serves them; it knows nothing of Ordo's key names.

use std::fmt;
use std::future::Future;

use fred::clients::{Client, WithOptions};
use fred::interfaces::{ClientLike, ClusterInterface, KeysInterface};
use fred::types::Value;
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Options, Server};
use fred::types::scan::ScanType;
use tokio::task::JoinSet;

use crate::error::{Error, Result};

/// One node commands can be sent to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Node {
    /// The one server of a single (non-cluster) Redis.
    Single,
    /// A primary of a Redis Cluster.
    Primary(Server),
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Single => f.write_str("the Redis server"),
            Node::Primary(server) => write!(f, "cluster node {}:{}", server.host, server.port),
        }
    }
}

impl Node {
    /// A handle on `client` whose commands all go to this node (for a cluster
    /// primary, whatever slot their keys hash to: keys of other slots get `MOVED`).
    pub(crate) fn route(&self, client: &Client) -> WithOptions<Client> {
        let options = match self {
            Node::Single => Options::default(),
            Node::Primary(server) => Options {
                cluster_node: Some(server.clone()),
                ..Options::default()
            },
        };
        client.with_options(&options)
    }
}

/// The nodes of `client`'s deployment: every primary of its cluster (from the
/// client's cached view, refreshed first when it has none yet), or the one
/// server of a single Redis.
pub(crate) async fn nodes(client: &Client) -> Result<Vec<Node>> {
    if !client.is_clustered() {
        return Ok(vec![Node::Single]);
    }
    let mut primaries = cached_primaries(client);
    if primaries.is_empty() {
        client.sync_cluster().await?;
        primaries = cached_primaries(client);
    }
    if primaries.is_empty() {
        return Err(Error::protocol("CLUSTER SLOTS", "no primary serves any slot"));
    }
    Ok(primaries.into_iter().map(Node::Primary).collect())
}

fn cached_primaries(client: &Client) -> Vec<Server> {
    client
        .cached_cluster_state()
        .map(|state| state.unique_primary_nodes())
        .unwrap_or_default()
}

/// Runs `call`; when it failed because a Redis Cluster slot moved since the
/// client's view of the cluster was read (a failover, a resharding), the
/// view is refreshed and `call` runs once more. On a single Redis, once.
pub(crate) async fn once_more_if_moved<T, F, Fut>(client: &Client, what: &'static str, call: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match call().await {
        Err(error) if client.is_clustered() && error.is_moved_slot() => {
            tracing::debug!(error = %ordo_core::contract::error::error_chain(&error), what, "a slot moved since the cluster view was read; refreshing it and trying again");
            client.sync_cluster().await?;
            call().await
        }
        result => result,
    }
}

/// Runs `command` on every node at once, and returns each node's result in
/// the order of [`nodes`]. The first error is returned (after every call ended).
pub(crate) async fn on_every_node<T, F, Fut>(client: &Client, mut command: F) -> Result<Vec<(Node, T)>>
where
    F: FnMut(Node, WithOptions<Client>) -> Fut,
    Fut: Future<Output = Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let nodes = nodes(client).await?;
    let mut calls = JoinSet::new();
    for (index, node) in nodes.iter().enumerate() {
        let call = command(node.clone(), node.route(client));
        calls.spawn(async move { (index, call.await) });
    }
    let results = gather(calls, nodes.len()).await?;
    Ok(nodes.into_iter().zip(results).collect())
}

/// Runs `call` once per node with the items that node serves (grouped by
/// `key`, in the items' order; the call is routed by its first item's key),
/// calls to different nodes at once (one node: no task), and returns each
/// item's output in the items' order. `call` returns one output per item it
/// was given. The first error is returned (after every call ended).
///
/// Refreshes nothing: wrap it in [`once_more_if_moved`] with the same
/// `client`, whose view the retry then groups by.
pub(crate) async fn per_node<T, O, C, Fut>(
    client: &Client,
    items: &[T],
    key: impl for<'a> Fn(&'a T) -> &'a str,
    mut call: C,
) -> Result<Vec<O>>
where
    T: Clone,
    C: FnMut(Client, Vec<T>) -> Fut,
    Fut: Future<Output = Result<Vec<O>>> + Send + 'static,
    O: Send + 'static,
{
    nodes(client).await?;
    let groups = group_by_node(client, items.iter().enumerate().map(|(i, item)| (key(item), i)))?;
    let per_group = if let [(_, positions)] = groups.as_slice() {
        let group = positions.iter().map(|&i| items[i].clone()).collect();
        vec![call(client.clone(), group).await?]
    } else {
        let mut calls = JoinSet::new();
        for (index, (_, positions)) in groups.iter().enumerate() {
            let group = positions.iter().map(|&i| items[i].clone()).collect();
            let call = call(client.clone(), group);
            calls.spawn(async move { (index, call.await) });
        }
        gather(calls, groups.len()).await?
    };
    let mut outputs: Vec<Option<O>> = items.iter().map(|_| None).collect();
    for ((_, positions), group) in groups.into_iter().zip(per_group) {
        if group.len() != positions.len() {
            return Err(Error::protocol(
                "a per-node call",
                format!("{} outputs for {} items", group.len(), positions.len()),
            ));
        }
        for (position, output) in positions.into_iter().zip(group) {
            outputs[position] = Some(output);
        }
    }
    Ok(outputs.into_iter().flatten().collect())
}

/// Awaits every call of `calls` (each tagged with its index below `count`)
/// and returns their values in index order; the first error, after every
/// call ended.
async fn gather<T: Send + 'static>(mut calls: JoinSet<(usize, Result<T>)>, count: usize) -> Result<Vec<T>> {
    let mut results: Vec<Option<T>> = (0..count).map(|_| None).collect();
    let mut first_error = None;
    while let Some(joined) = calls.join_next().await {
        let (index, result) =
            joined.map_err(|error| Error::protocol("a per-node call", error.to_string()))?;
        match result {
            Ok(value) => results[index] = Some(value),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(results.into_iter().flatten().collect()),
    }
}

/// Groups `items` by the node that serves their key, keeping the items' order
/// within each group; groups come in node order. A single Redis has one group.
///
/// Uses the client's cached cluster view (call [`nodes`] first on a fresh
/// client); a key whose slot no known primary serves is an error.
pub(crate) fn group_by_node<K, T>(
    client: &Client,
    items: impl IntoIterator<Item = (K, T)>,
) -> Result<Vec<(Node, Vec<T>)>>
where
    K: AsRef<[u8]>,
{
    if !client.is_clustered() {
        let items: Vec<T> = items.into_iter().map(|(_, item)| item).collect();
        return Ok(if items.is_empty() {
            Vec::new()
        } else {
            vec![(Node::Single, items)]
        });
    }
    let state = client.cached_cluster_state();
    let mut groups: Vec<(Node, Vec<T>)> = Vec::new();
    for (key, item) in items {
        let slot = ClusterRouting::hash_key(key.as_ref());
        let server = state
            .as_ref()
            .and_then(|state| state.get_server(slot))
            .ok_or_else(|| {
                Error::protocol(
                    "CLUSTER SLOTS",
                    format!("no known primary serves slot {slot}; is the cluster view synced?"),
                )
            })?;
        let node = Node::Primary(server.clone());
        match groups.iter_mut().find(|(known, _)| *known == node) {
            Some((_, group)) => group.push(item),
            None => groups.push((node, vec![item])),
        }
    }
    groups.sort_by(|(a, _), (b, _)| a.cmp(b));
    Ok(groups)
}

/// Keys asked for per `SCAN` step.
const SCAN_COUNT: u32 = 1_000;

/// Every key matching `pattern` of type `kind`, on every node (each
/// primary of a cluster holds its own part of the keyspace).
pub(crate) async fn scan(client: &Client, pattern: &str, kind: ScanType) -> Result<Vec<String>> {
    let mut found = Vec::new();
    for node in nodes(client).await? {
        let routed = node.route(client);
        let mut cursor = "0".to_owned();
        loop {
            let page: Value = routed
                .scan_page(
                    cursor.clone(),
                    pattern.to_owned(),
                    Some(SCAN_COUNT),
                    Some(kind.clone()),
                )
                .await?;
            let mut parts = array(page).into_iter();
            cursor = parts
                .next()
                .and_then(text)
                .ok_or_else(|| Error::protocol("SCAN", "reply has no cursor"))?;
            found.extend(
                parts
                    .next()
                    .map(array)
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(text),
            );
            if cursor == "0" {
                break;
            }
        }
    }
    Ok(found)
}

/// An array reply's elements (none for a nil reply).
fn array(value: Value) -> Vec<Value> {
    match value {
        Value::Null => Vec::new(),
        other => other.into_array(),
    }
}

/// A reply's text, if it is one.
fn text(value: Value) -> Option<String> {
    value.as_str().map(|s| s.into_owned())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use fred::interfaces::ServerInterface;
    use fred::prelude::Builder;
    use ordo_testkit::{Redis, RedisCluster};

    use super::*;

    async fn connect(url: &str) -> Client {
        let client = Builder::from_config(crate::net::connection::client_config(url).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        client
    }

    /// The port a node says it listens on.
    async fn port_of<C: ServerInterface>(node: &C) -> Result<u16> {
        let info: String = node.info(Some(fred::types::InfoKind::Server)).await?;
        info.lines()
            .find_map(|line| line.trim().strip_prefix("tcp_port:")?.parse().ok())
            .ok_or_else(|| Error::protocol("INFO server", "no tcp_port"))
    }

    #[tokio::test]
    async fn a_single_redis_is_one_node() {
        let redis = Redis::start().unwrap();
        let client = connect(&redis.url()).await;
        assert_eq!(nodes(&client).await.unwrap(), [Node::Single]);
        let ports = on_every_node(&client, |_, node| async move { port_of(&node).await })
            .await
            .unwrap();
        assert_eq!(ports, [(Node::Single, redis.port())]);
        let groups = group_by_node(&client, [("a", 1), ("b", 2), ("c", 3)]).unwrap();
        assert_eq!(groups, [(Node::Single, vec![1, 2, 3])]);
        assert!(
            group_by_node(&client, Vec::<(&str, u8)>::new())
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn every_cluster_primary_is_a_node_and_gets_its_own_call() {
        let cluster = RedisCluster::start_local().unwrap();
        let client = connect(&cluster.url()).await;
        let primaries: BTreeSet<u16> = cluster
            .primaries()
            .unwrap()
            .into_iter()
            .map(|index| cluster.node(index).unwrap().port())
            .collect();
        let found = nodes(&client).await.unwrap();
        let found_ports: BTreeSet<u16> = found
            .iter()
            .map(|node| match node {
                Node::Primary(server) => server.port,
                Node::Single => panic!("a cluster client found a single node"),
            })
            .collect();
        assert_eq!(found_ports, primaries);
        assert_eq!(found.len(), 3);

        // Each call reaches its own node: the ports they report are the nodes' ports.
        let answers = on_every_node(&client, |_, node| async move { port_of(&node).await })
            .await
            .unwrap();
        for (node, port) in &answers {
            assert_eq!(
                *node,
                Node::Primary(Server::new("127.0.0.1", *port)),
                "{answers:?}"
            );
        }
        assert_eq!(
            answers.iter().map(|(node, _)| node.clone()).collect::<Vec<_>>(),
            found
        );

        // One failing node fails the whole call.
        let failing = *primaries.first().unwrap();
        let error = on_every_node(&client, |node, _| async move {
            match node {
                Node::Primary(server) if server.port == failing => Err(Error::protocol("test", "refused")),
                _ => Ok(()),
            }
        })
        .await
        .unwrap_err();
        assert!(error.to_string().contains("refused"), "{error}");
    }

    #[tokio::test]
    async fn keys_are_grouped_by_the_node_that_serves_them_in_order() {
        let cluster = RedisCluster::start_local().unwrap();
        let client = connect(&cluster.url()).await;
        nodes(&client).await.unwrap();
        let keys: Vec<String> = (0..30).map(|i| format!("{{order:c-{}}}", i % 10)).collect();
        let groups = group_by_node(
            &client,
            keys.iter()
                .enumerate()
                .map(|(i, key)| (key.as_bytes(), (i, key.clone()))),
        )
        .unwrap();
        assert!(groups.len() > 1, "30 keys on one node: {groups:?}");
        let mut seen = 0;
        for (node, items) in &groups {
            assert!(
                items.windows(2).all(|pair| pair[0].0 < pair[1].0),
                "order kept: {items:?}"
            );
            for (_, key) in items {
                let serving = cluster.node(cluster.node_for_key(key).unwrap()).unwrap().port();
                assert_eq!(*node, Node::Primary(Server::new("127.0.0.1", serving)), "{key}");
            }
            seen += items.len();
        }
        assert_eq!(seen, keys.len());
    }
}
