//! A real Redis and real processes for Ordo's tests.
//!
//! Ordo's guarantees are about what happens when Redis or an engine instance
//! dies, stalls or restarts, so its tests need the real thing, not mocks:
//!
//! - [`Redis`] starts a `redis-server` on a free port with its own temporary
//!   directory (or uses `REDIS_URL`), and can kill, pause, resume, stop and
//!   restart it. When no Redis can be had, the error says how to get one.
//! - [`RedisCluster`] starts a local Redis Cluster (three primaries, optionally
//!   one replica each; `redis-server --cluster-enabled yes` and
//!   `redis-cli --cluster create`) or uses `REDIS_CLUSTER_URL`; its nodes can be
//!   killed, paused, restarted and failed over one by one.
//! - [`Process`] runs a child process (an engine instance), collects its output
//!   lines and sends it SIGKILL, SIGSTOP, SIGCONT or SIGTERM.
//! - [`Postgres`] starts a private PostgreSQL (`initdb` + `postgres` on a
//!   free port in a temporary directory), or uses `DATABASE_URL`.
//! - [`Prometheus`] starts a private `prometheus` on a free port that
//!   scrapes the targets it is given, and answers PromQL queries.
//! - [`ChromeDriver`] starts a private `chromedriver` that drives Debian's
//!   Chromium headless, for tests of a page in a real browser.
//! - [`wait_until`] polls a condition with a deadline, which is what a test
//!   does instead of sleeping; [`eventually`] awaits an async one.
//!
//! Environment variables:
//! - `REDIS_URL=redis://host:port[/db]`: [`Redis::start`] uses that server
//!   instead of spawning one (it cannot be killed or paused).
//! - `ORDO_REDIS_SERVER=/path/to/redis-server`: the binary to spawn instead of
//!   `redis-server` from `PATH`.
//! - `REDIS_CLUSTER_URL=redis-cluster://host:port,host:port,...`:
//!   [`RedisCluster::start`] uses that cluster instead of starting one (its
//!   nodes cannot be killed, paused, restarted or failed over).
//! - `ORDO_REDIS_CLI=/path/to/redis-cli`: the binary that creates clusters,
//!   instead of the `redis-cli` beside `redis-server` or on `PATH`.
//! - `ORDO_PROMETHEUS=/path/to/prometheus`: the binary [`Prometheus::start`]
//!   runs instead of `prometheus` on `PATH`.
//! - `ORDO_CHROMIUM`, `ORDO_CHROMEDRIVER`: the browser and driver
//!   [`ChromeDriver`] uses instead of `chromium` and `chromedriver` on `PATH`.
//!
//! Feature `testcontainers`: `Redis::start_container` runs `redis:7.2` in Docker.
//!
//! This crate is Unix-only: it controls processes with signals.

mod certs;
mod child;
mod chrome;
mod cluster;
#[cfg(feature = "testcontainers")]
mod container;
mod error;
mod example;
pub mod http;
mod local;
mod postgres;
mod prometheus;
mod redis;
mod resp;
mod secret;
mod sentinel;
mod signal;
mod wait;

pub use certs::TestCa;
pub use child::Process;
pub use chrome::ChromeDriver;
pub use cluster::{ClusterNode, NodeRole, RedisCluster, RedisClusterBuilder};
pub use error::{ConditionError, Result, TestkitError};
pub use example::example_binary;
pub use postgres::{Postgres, PostgresBuilder, PostgresTls};
pub use prometheus::Prometheus;
pub use redis::{AclDenial, Redis, RedisBuilder, RedisTls};
pub use sentinel::{RedisSentinel, SENTINEL_SERVICE};
pub use wait::{eventually, wait_until};
