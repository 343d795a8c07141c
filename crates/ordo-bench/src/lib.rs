//! The measurement plumbing behind the `ordo-bench` binary.
//!
//! Every benchmark and checker is a subcommand of `ordo-bench`; what they
//! share lives here so each one is a short module:
//!
//! - [`redis`]: the Redis to measure against (`--redis-url` / `REDIS_URL`, or
//!   a private `redis-server` kept alive for the run) and fred clients for it.
//! - [`report`]: ordered `name: value` figures, printed as lines or as JSON.
//! - [`stats`]: deltas of Redis's own `INFO` counters (what the server executed).
//! - [`monitor`]: commands each client *sent*, counted through `MONITOR`.
//! - [`latency`]: a recorder of durations with nearest-rank percentiles.
//! - [`load`]: a ticker that offers a fixed load (N events/s over K keys).
//! - [`workload`]: the benchmark event, its keys and its stream entry layout.
//! - [`engine`]: an Ordo engine instance with a counting handler, and
//!   Ordo's publish path to fill partition streams.
//!
//! Subcommands: [`baseline`] (a plain consumer group draining a backlog),
//! [`throughput`] (publish and ordered drains against the baseline),
//! [`handler_latency`] (`latency`: commit to handler start at a fixed load),
//! [`commands`] (commands across instances: round trip, closed loop, against
//! the inline broker),
//! [`idle`] (commands sent while owning idle partitions), [`failover`]
//! (SIGKILL of an owner to the next owner's first message), [`chaos`] (the
//! guarantee checked under injected faults), [`relay`] (the PostgreSQL
//! outbox: commits, relays publishing, commit to handler), [`scale`] (many
//! keys through hashed partitions: per-key order, leases, idle cost), and
//! the hidden [`worker`] (one engine instance in a child process).
//!
//! Errors are `anyhow` throughout: this library is the inside of one program
//! whose answer to any failure is to stop and say what went wrong.

pub mod baseline;
pub mod chaos;
pub mod commands;
pub mod connect;
pub mod engine;
pub mod failover;
pub mod handler_latency;
pub mod idle;
pub mod latency;
pub mod load;
pub mod monitor;
pub mod redis;
pub mod redis_info;
pub mod relay;
pub mod report;
pub mod scale;
pub mod stats;
pub mod sweep;
pub mod throughput;
pub mod worker;
pub mod workload;

pub use report::{Figure, Report};
