//! The `ordo-worker` program and what Ordo's process-level tests and chaos
//! checker need around it.
//!
//! A property like "two runs of one key never overlap, even across a crash"
//! is about processes, so it is tested with real ones: `ordo-worker run`
//! processes consume the `chaos` category through the Redis broker, tests
//! SIGKILL, SIGSTOP and SIGTERM them, and the effects they recorded in Redis
//! are checked afterwards.
//!
//! - [`tick`]: the test event, [`Tick`](tick::Tick), partitioned by its `key`.
//! - [`worker`]: the handler and the worker: an in-flight overlap detector
//!   at the start of every run, a configurable amount of work, then the
//!   run's effect committed under the lease's fence.
//! - [`publisher`]: publishes per-key numbered events through the unit of
//!   work and the outbox, as an application would.
//! - [`verify`]: reads what the workers recorded and counts lost, reordered,
//!   duplicated and overlapping runs.
//! - [`line`](mod@line): the machine-readable lines a worker prints on stdout, and
//!   their parser.
//! - [`keys`]: where the harness keeps its records in Redis.
//! - [`commands`]: the test command, [`Poke`](commands::Poke), its handler
//!   (the same detector and fence as the events') and the workers' senders;
//!   [`command_verify`] checks what they recorded.

pub mod command_verify;
pub mod commands;
pub mod error;
pub mod keys;
pub mod line;
pub mod publisher;
pub mod tick;
pub mod verify;
pub mod worker;

pub use error::{HarnessError, Result};
