//! Owning a partition: the lease and every operation fenced by it.
//!
//! A [`lease`] grants one instance a partition at a fencing token, for as
//! long as its [`member`] key lives; the
//! [`partition`] operations (read, acknowledge, halt, reap), the batched
//! [`ack`], [`parking`] a key of a hashed partition, a handler's fenced
//! effects ([`fence`]) and a process manager's fenced state ([`process`])
//! each check it in the same script. [`pause`] records a paused handler.
//!
//! May import: `store`, `net` and the crate's error.

pub(crate) mod ack;
pub(crate) mod fence;
pub(crate) mod lease;
pub(crate) mod member;
pub(crate) mod parking;
pub(crate) mod partition;
pub(crate) mod pause;
pub(crate) mod process;
