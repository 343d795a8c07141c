//! The integration tests of ordo-testkit in one binary: each file
//! is a module (one link step and one copy of the shared code, instead
//! of one per file). Run one file's tests with
//! `cargo nextest run -p ordo-testkit -E 'test(/^<file>::/)'`.

pub mod child;
pub mod cluster;
pub mod container;
pub mod redis;
pub mod sentinel;
