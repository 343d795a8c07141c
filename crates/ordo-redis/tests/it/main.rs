//! The integration tests of ordo-redis in one binary: each file
//! is a module (one link step and one copy of the shared code, instead
//! of one per file). Run one file's tests with
//! `cargo nextest run -p ordo-redis -E 'test(/^<file>::/)'`.

mod common;

pub mod assumptions;
pub mod attempts;
pub mod commands;
pub mod commit;
pub mod consumer;
pub mod domain;
pub mod events;
pub mod examples;
pub mod fencing;
pub mod groups;
pub mod halt;
pub mod hashed;
pub mod hostile;
pub mod identity;
pub mod kill;
pub mod late;
pub mod limit;
pub mod log_text;
pub mod operations;
pub mod outage;
pub mod plain;
pub mod producer;
pub mod publish;
pub mod retry;
pub mod secrets;
pub mod sentinel;
pub mod settings;
pub mod startup_log;
pub mod tls;
pub mod transient;
