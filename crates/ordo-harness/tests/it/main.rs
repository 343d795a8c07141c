//! The integration tests of ordo-harness in one binary: each file
//! is a module (one link step and one copy of the shared code, instead
//! of one per file). Run one file's tests with
//! `cargo nextest run -p ordo-harness -E 'test(/^<file>::/)'`.

mod support;

pub mod balance;
pub mod command_fence;
pub mod detector;
pub mod failover_kill;
pub mod ordering;
pub mod poison;
pub mod redis_restart;
pub mod shutdown;
pub mod stall;
