//! The testcontainers backend. Needs a Docker engine, which CI machines here do
//! not have, so these run only on request: `cargo test -p ordo-testkit
//! --features testcontainers -- --ignored`.
#![cfg(feature = "testcontainers")]

use std::time::Duration;

use ordo_testkit::Redis;

#[test]
#[ignore = "needs a Docker engine"]
fn a_container_redis_can_be_paused_killed_and_restarted_on_its_port() {
    let mut redis = Redis::builder().append_only(true).start_container().unwrap();
    let port = redis.port();
    assert!(!redis.is_external());
    redis.ping().unwrap();

    redis.pause().unwrap();
    assert!(redis.ping_timeout(Duration::from_millis(200)).is_err());
    redis.resume().unwrap();
    redis.ping().unwrap();

    redis.kill().unwrap();
    assert!(redis.ping().is_err());
    redis.restart().unwrap();
    assert_eq!(redis.port(), port);
    redis.ping().unwrap();
}
