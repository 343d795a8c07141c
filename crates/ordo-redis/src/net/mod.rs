//! Reaching Redis: client configuration ([`connection`]), [`tls`], commands
//! sent once per node ([`nodes`]) and URLs with their secrets masked
//! ([`secret`]).
//!
//! May import: the crate's error only.

pub(crate) mod connection;
pub(crate) mod nodes;
pub(crate) mod secret;
pub(crate) mod tls;
