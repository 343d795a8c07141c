//! The integration tests of ordo-cli in one binary: each file
//! is a module (one link step and one copy of the shared code, instead
//! of one per file). Run one file's tests with
//! `cargo nextest run -p ordo-cli -E 'test(/^<file>::/)'`.

mod common;

pub mod acl;
pub mod bulk;
pub mod cli;
pub mod cluster;
pub mod commands;
pub mod console;
pub mod dashboard;
pub mod health;
pub mod hostile;
pub mod outbox_seams;
pub mod outbox_status;
pub mod plain_dlq;
pub mod secrets;
pub mod setup;
pub mod status;
pub mod tls;
