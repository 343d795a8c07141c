//! The integration tests of ordo-pg-relay in one binary: each file is a
//! module. They run the `ordo-pg-relay` binary against a private PostgreSQL
//! and Redis; the helpers are ordo-postgres's test helpers (one file, shared).
//! Run one file's tests with `cargo nextest run -p ordo-pg-relay -E 'test(/^<file>::/)'`.

#[path = "../../../ordo-postgres/tests/common/mod.rs"]
mod common;

pub mod categories;
pub mod cli;
pub mod relays;
pub mod tls;
