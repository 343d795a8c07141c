//! The integration tests of ordo-core in one binary: each file
//! is a module (one link step and one copy of the shared code, instead
//! of one per file). Run one file's tests with
//! `cargo nextest run -p ordo-core -E 'test(/^<file>::/)'`.

mod support;

pub mod backoff;
pub mod bus;
pub mod config;
pub mod domain;
pub mod executor;
pub mod inline;
pub mod keys;
pub mod layers;
pub mod log_text;
pub mod operations;
pub mod outage;
pub mod outbox;
pub mod policies;
pub mod process;
pub mod untrusted;
pub mod uow;
