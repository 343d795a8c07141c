//! The contract: what an application declares and what a broker, an outbox
//! or a process store implements. It never imports the [runtime](crate::runtime).
//!
//! - Declaring: [`message`] (aggregates, events, commands, the envelope),
//!   [`key`] (partition keys, their rules and extractors), [`handler`] (what
//!   the macros generate, the handler context and where it raises events),
//!   [`policy`] (sequencing policies), [`process`] (process managers' state
//!   and correlation).
//! - Configuring: [`config`] (domain.toml and its errors), [`backoff`].
//! - Implementing: [`broker`] (the broker contract), [`command`] (routing
//!   commands to the owner of their key, and their outcomes), [`outbox`] (the outbox
//!   rows and storage, an in-memory outbox), [`process`] (the process store,
//!   an in-memory one).
//! - Delivering, the same way in every broker: [`attempt`] (one handler
//!   run), [`retry`] (what follows a failed attempt: transient failures,
//!   halts, pausing a handler), [`delivery`] (the loop over both, with the
//!   hooks a broker fills).
//! - Operating: [`health`] (health and readiness as data), [`log_events`]
//!   (the stable names of important log lines), [`text`] (untrusted text
//!   escaped for logs and terminals, capped for records), [`error`] (the
//!   contract's errors).

pub mod attempt;
pub mod backoff;
pub mod broker;
pub mod command;
pub mod config;
pub(crate) mod context;
pub mod delivery;
pub mod error;
pub(crate) mod field;
pub mod handler;
pub mod health;
pub mod key;
pub mod log_events;
pub mod message;
pub mod outbox;
pub mod policy;
pub mod process;
pub mod retry;
pub mod text;
pub mod trace;
