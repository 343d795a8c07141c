//! The testkit's Redis Cluster against real `redis-server --cluster-enabled yes`
//! nodes: every control it offers must have the effect a client would observe.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ordo_testkit::{NodeRole, RedisCluster, TestkitError, wait_until};

/// One command over raw RESP to the node on `port`; a simple, error or
/// integer reply reads back as its line (`+OK`, `-MOVED 3999 ...`, `:1`), a
/// bulk string as its contents, a nil as `(nil)`.
fn query(port: u16, args: &[&str]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to the node");
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let line = line.trim_end().to_owned();
    match line.strip_prefix('$').map(|len| len.parse::<i64>().unwrap()) {
        None => line,
        Some(-1) => "(nil)".to_owned(),
        Some(len) => {
            let mut bulk = vec![0; usize::try_from(len).unwrap() + 2];
            reader.read_exact(&mut bulk).unwrap();
            bulk.truncate(bulk.len() - 2);
            String::from_utf8(bulk).unwrap()
        }
    }
}

/// The port of the node serving `key` now.
fn port_for(cluster: &RedisCluster, key: &str) -> u16 {
    let index = cluster.node_for_key(key).unwrap();
    cluster.node(index).unwrap().port()
}

#[test]
fn a_started_cluster_serves_every_slot_from_three_primaries() {
    let cluster = RedisCluster::start_local().unwrap();
    assert!(!cluster.is_external());
    let ports: Vec<u16> = cluster.nodes().iter().map(|node| node.port()).collect();
    assert_eq!(ports.len(), 3);
    let hosts: Vec<String> = ports.iter().map(|port| format!("127.0.0.1:{port}")).collect();
    assert_eq!(cluster.url(), format!("redis-cluster://{}", hosts.join(",")));
    assert_eq!(cluster.primaries().unwrap(), [0, 1, 2]);
    for node in cluster.nodes() {
        node.ping().unwrap();
        assert_eq!(node.role().unwrap(), NodeRole::Primary);
        let info = node.cluster_info().unwrap();
        assert!(info.contains("cluster_state:ok"), "{info}");
        assert!(info.contains("cluster_slots_assigned:16384"), "{info}");
        assert!(info.contains("cluster_known_nodes:3"), "{info}");
        assert_eq!(node.url(), format!("redis://127.0.0.1:{}", node.port()));
    }
    // Keys of different slots land on different nodes, and the cluster says which.
    let mut serving: Vec<u16> = ["a", "b", "c", "d", "e", "f", "g", "h"]
        .iter()
        .map(|key| port_for(&cluster, key))
        .collect();
    serving.sort_unstable();
    serving.dedup();
    assert!(serving.len() > 1, "every key on one node: {serving:?}");
    let owner = port_for(&cluster, "{order:c-1}");
    assert_eq!(query(owner, &["SET", "{order:c-1}:x", "1"]), "+OK");
    let other = ports.iter().copied().find(|port| *port != owner).unwrap();
    let moved = query(other, &["GET", "{order:c-1}:x"]);
    assert!(
        moved.starts_with("-MOVED ") && moved.ends_with(&format!("127.0.0.1:{owner}")),
        "{moved}"
    );
    assert!(cluster.node(3).is_err());
}

#[test]
fn start_uses_redis_cluster_url_or_starts_one() {
    let cluster = RedisCluster::start().unwrap();
    let url_set = std::env::var("REDIS_CLUSTER_URL").is_ok_and(|url| !url.trim().is_empty());
    assert_eq!(cluster.is_external(), url_set);
    assert!(cluster.url().starts_with("redis-cluster://"), "{}", cluster.url());
    cluster.wait_ok().unwrap();
}

#[test]
fn a_killed_node_restarts_on_its_port_with_its_data_and_the_cluster_recovers() {
    let mut cluster = RedisCluster::builder().append_only(true).start().unwrap();
    let index = cluster.node_for_key("k").unwrap();
    let port = cluster.node(index).unwrap().port();
    assert_eq!(query(port, &["SET", "k", "kept"]), "+OK");

    cluster.node_mut(index).unwrap().kill().unwrap();
    let error = cluster.node(index).unwrap().ping().unwrap_err();
    assert!(matches!(error, TestkitError::Ping { .. }), "{error:?}");
    assert!(!cluster.node(index).unwrap().is_reachable());
    // Without replicas the others notice the missing slots after the node timeout.
    let survivor = cluster.nodes().iter().find(|node| node.port() != port).unwrap();
    wait_until(
        Duration::from_secs(10),
        "the cluster to notice the dead primary",
        || {
            survivor
                .cluster_info()
                .is_ok_and(|info| info.contains("cluster_state:fail"))
        },
    )
    .unwrap();

    cluster.node_mut(index).unwrap().restart().unwrap();
    cluster.wait_ok().unwrap();
    assert_eq!(cluster.node(index).unwrap().port(), port);
    assert_eq!(
        cluster.node_for_key("k").unwrap(),
        index,
        "the node rejoined with its slots"
    );
    assert_eq!(query(port, &["GET", "k"]), "kept");
}

#[test]
fn a_paused_node_answers_nothing_until_resumed() {
    let mut cluster = RedisCluster::start_local().unwrap();
    cluster.node_mut(1).unwrap().pause().unwrap();
    assert!(!cluster.node(1).unwrap().is_reachable());
    assert!(cluster.node(1).unwrap().ping().is_err());
    // A paused node is left out of readiness, the others still answer.
    cluster.node(0).unwrap().ping().unwrap();
    cluster.node_mut(1).unwrap().resume().unwrap();
    cluster.node(1).unwrap().ping().unwrap();
    cluster.wait_ok().unwrap();
}

#[test]
fn with_replicas_a_manual_failover_keeps_the_data_and_a_killed_primary_is_replaced() {
    let mut cluster = RedisCluster::builder().replicas(true).start().unwrap();
    assert_eq!(cluster.nodes().len(), 6);
    let primaries = cluster.primaries().unwrap();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    for &primary in &primaries {
        assert_eq!(cluster.replicas_of(primary).unwrap().len(), 1, "node {primary}");
    }

    let primary = cluster.node_for_key("{order:c-1}").unwrap();
    let replica = cluster.replicas_of(primary).unwrap()[0];
    let primary_port = cluster.node(primary).unwrap().port();
    assert_eq!(query(primary_port, &["SET", "{order:c-1}:x", "before"]), "+OK");

    let error = cluster.failover(primary).unwrap_err();
    assert!(matches!(error, TestkitError::NotAReplica { .. }), "{error:?}");

    cluster.failover(replica).unwrap();
    assert_eq!(cluster.node(replica).unwrap().role().unwrap(), NodeRole::Primary);
    assert_eq!(cluster.node_for_key("{order:c-1}").unwrap(), replica);
    let replica_port = cluster.node(replica).unwrap().port();
    assert_eq!(query(replica_port, &["GET", "{order:c-1}:x"]), "before");
    assert!(
        matches!(
            cluster.node(primary).unwrap().role().unwrap(),
            NodeRole::Replica { primary_port, .. } if primary_port == replica_port
        ),
        "the old primary follows the new one"
    );

    // Killing the new primary promotes the old one again, automatically.
    cluster.node_mut(replica).unwrap().kill().unwrap();
    wait_until(
        Duration::from_secs(15),
        "the old primary to be promoted again",
        || {
            cluster
                .node_for_key("{order:c-1}")
                .is_ok_and(|node| node == primary)
        },
    )
    .unwrap();
    cluster.wait_ok().unwrap();
    cluster.node_mut(replica).unwrap().restart().unwrap();
    cluster.wait_ok().unwrap();
    assert!(
        matches!(
            cluster.node(replica).unwrap().role().unwrap(),
            NodeRole::Replica { primary_port: port, .. } if port == primary_port
        ),
        "the restarted node rejoins as a replica"
    );
}

#[test]
fn dropping_the_cluster_stops_every_node() {
    let cluster = RedisCluster::builder().replicas(true).start().unwrap();
    let ports: Vec<u16> = cluster.nodes().iter().map(|node| node.port()).collect();
    assert_eq!(ports.len(), 6);
    drop(cluster);
    for port in ports {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "a node still listens on {port}"
        );
    }
}
