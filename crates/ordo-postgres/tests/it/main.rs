//! The integration tests of ordo-postgres in one binary: each file
//! is a module (one link step and one copy of the shared code, instead
//! of one per file). Run one file's tests with
//! `cargo nextest run -p ordo-postgres -E 'test(/^<file>::/)'`.

#[path = "../common/mod.rs"]
mod common;

pub mod fence;
pub mod outage;
pub mod outbox;
pub mod seams;
pub mod tls;
