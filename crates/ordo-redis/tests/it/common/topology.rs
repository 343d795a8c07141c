//! One test body, two Redis topologies: a single server and a Redis Cluster.
//!
//! [`on_both_topologies!`](crate::on_both_topologies) turns an
//! `async fn name(redis: TestRedis) -> anyhow::Result<()>` into a module
//! `name` with two tests, `name::single` and `name::cluster`, that run the
//! same body on a [`Redis`] (or `REDIS_URL`) and on a three-primary
//! [`RedisCluster`] (or `REDIS_CLUSTER_URL`). `cargo test name` runs both.

use ordo_testkit::{Redis, RedisCluster};

/// Which Redis a test body runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    Single,
    Cluster,
}

/// A Redis of either topology, alive as long as this value.
#[derive(Debug)]
pub enum TestRedis {
    Single(Redis),
    Cluster(RedisCluster),
}

impl TestRedis {
    /// `Redis::start()` or `RedisCluster::start()`: the environment's server
    /// or cluster if named, else a fresh local one.
    pub fn start(topology: Topology) -> anyhow::Result<Self> {
        Ok(match topology {
            Topology::Single => TestRedis::Single(Redis::start()?),
            Topology::Cluster => TestRedis::Cluster(RedisCluster::start()?),
        })
    }

    /// The URL to hand to clients (`redis://...` or `redis-cluster://...`).
    pub fn url(&self) -> String {
        match self {
            TestRedis::Single(redis) => redis.url(),
            TestRedis::Cluster(cluster) => cluster.url(),
        }
    }

    pub fn topology(&self) -> Topology {
        match self {
            TestRedis::Single(_) => Topology::Single,
            TestRedis::Cluster(_) => Topology::Cluster,
        }
    }
}

/// Generates `$body::single` and `$body::cluster` tests from
/// `async fn $body(redis: TestRedis) -> anyhow::Result<()>`, each with the
/// given test attributes; `cluster: #[...]` adds attributes to the cluster
/// variant only (e.g. `#[ignore = "..."]` for what cannot work there yet).
///
/// ```ignore
/// on_both_topologies!(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] my_test);
/// on_both_topologies!(#[tokio::test] my_test, cluster: #[ignore = "needs ..."]);
/// ```
#[macro_export]
macro_rules! on_both_topologies {
    ($(#[$test:meta])+ $body:ident $(, cluster: $(#[$cluster:meta])+)?) => {
        mod $body {
            use $crate::common::topology::{TestRedis, Topology};

            $(#[$test])+
            async fn single() -> anyhow::Result<()> {
                super::$body(TestRedis::start(Topology::Single)?).await
            }

            $(#[$test])+
            $($(#[$cluster])+)?
            async fn cluster() -> anyhow::Result<()> {
                super::$body(TestRedis::start(Topology::Cluster)?).await
            }
        }
    };
}
