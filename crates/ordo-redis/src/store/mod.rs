//! Redis as Ordo stores it: the one wing that knows a Redis name.
//!
//! Every key name is formatted and parsed in [`keys`]; every Lua script
//! (`lua/*.lua`) is shipped and run through [`scripts`], and called by one
//! typed function in [`calls`] (the only callers of a script); the rest are
//! the records shared by many partitions (the per-slot [`buckets`] of the
//! category indexes and halted sets, consumer [`groups`], [`partitioning`]
//! records, carried [`positions`]), the [`acl`] rules of Ordo's roles and
//! the administrator's [`setup`].
//!
//! May import: `net` (per-node commands) and the crate's error.

pub(crate) mod acl;
pub(crate) mod buckets;
pub(crate) mod calls;
pub(crate) mod groups;
pub(crate) mod keys;
pub(crate) mod partitioning;
pub(crate) mod positions;
pub(crate) mod replies;
pub(crate) mod scripts;
pub mod setup;
