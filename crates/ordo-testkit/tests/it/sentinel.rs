//! The testkit's Sentinel topology: a primary, a replica, three Sentinels,
//! and a failover that swaps the primary.

use ordo_testkit::RedisSentinel;

#[test]
fn a_sentinel_failover_makes_the_replica_the_primary() -> ordo_testkit::Result<()> {
    let topology = RedisSentinel::start()?;
    let url = topology.url();
    assert!(
        url.starts_with("redis-sentinel://127.0.0.1:") && url.contains("sentinelServiceName=ordo"),
        "{url}"
    );
    assert_eq!(url.matches("&node=").count(), 2, "{url}");
    let before = topology.primary_port()?;
    topology.failover()?;
    let after = topology.primary_port()?;
    assert_ne!(before, after, "the replica took over");
    Ok(())
}
