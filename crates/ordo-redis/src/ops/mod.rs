//! For operators: read-only views of the cluster ([`status`]), a group's
//! [`health`] judged from them, and the decisions on halted partitions and
//! parked keys ([`admin`]).
//!
//! May import: `owner`, `store`, `net` and the crate's error; never the
//! consumer.

pub(crate) mod admin;
pub(crate) mod halts;
pub mod health;
pub(crate) mod status;
