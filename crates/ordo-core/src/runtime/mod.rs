//! The runtime: the domain that checks the registrations, commits units of
//! work, publishes the outbox and dispatches commands, and the in-process
//! broker. It is built on the [contract](crate::contract) only.
//!
//! - Assembling: [`builder`] (registering aggregates and handlers, checked at
//!   `init()`), [`domain`] (the checked domain, started and shut down).
//! - Publishing: [`uow`] (the unit of work), [`outbox`] (the processor that
//!   publishes committed rows to the broker).
//! - Running: [`inline`] (the in-process broker), [`executor`] (per-key
//!   ordering with bounded concurrency), the command bus behind
//!   `Domain::dispatch`, the process-manager adapter.
//! - [`error`]: the runtime's errors (start-up checks, dispatch, settling,
//!   shutdown).

pub mod builder;
pub(crate) mod bus;
pub mod dispatch;
pub mod domain;
pub mod error;
pub mod executor;
pub mod inline;
pub mod outbox;
pub(crate) mod process_manager;
pub(crate) mod registry;
pub mod uow;
