//! Telling a dependency outage from a poison message.

use std::fmt;

use crate::contract::handler::HandlerError;

/// Marks a handler error as **transient**: the message is fine, a
/// dependency is not (a database or service down, a connection lost, a
/// pool exhausted). A transient failure is retried with backoff without
/// using up `max_retries`; the key waits in order meanwhile.
///
/// The marker may sit anywhere in the error's source chain (wrap it in an
/// error of your own with `#[source]`, or in `anyhow` context), and it
/// is transparent: the error shows (and logs) as the one it wraps.
///
/// ```
/// use ordo_core::contract::retry::{Transient, is_transient};
///
/// # fn call() -> Result<(), std::io::Error> { Err(std::io::Error::other("503 from the ledger")) }
/// fn handle() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     // The ledger answers 503 while it deploys: retry, do not halt the key.
///     call().map_err(Transient::new)?;
///     Ok(())
/// }
/// let error = handle().unwrap_err();
/// assert!(is_transient(&*error));
/// assert_eq!(error.to_string(), "503 from the ledger");
/// ```
pub struct Transient {
    error: HandlerError,
}

impl Transient {
    /// `error`, marked transient.
    pub fn new(error: impl Into<HandlerError>) -> Self {
        Self { error: error.into() }
    }

    /// The error it marks.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.error
    }

    /// The error it marks.
    pub fn into_inner(self) -> HandlerError {
        self.error
    }
}

impl fmt::Debug for Transient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Transient").field(&self.error).finish()
    }
}

impl fmt::Display for Transient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for Transient {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // Transparent: the marked error's own sources follow.
        self.error.source()
    }
}

/// `error` marked [`Transient`], as a handler returns it:
/// `return Err(ordo::transient(error))`.
pub fn transient(error: impl Into<HandlerError>) -> HandlerError {
    Box::new(Transient::new(error))
}

/// Whether `error` is transient: a [`Transient`] marker anywhere in its
/// source chain, or an I/O error of the connection class (refused, reset,
/// aborted, not connected, broken pipe, timed out, unreachable, a reply
/// cut short) anywhere in it, as database and HTTP clients report a
/// dependency that went away.
///
/// The framework's own errors put the marker in their chain where they
/// are of that class: `ordo_postgres` for pool timeouts and lost
/// connections, `ordo_redis` for the Redis fence's connection errors and
/// timeouts.
pub fn is_transient(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<Transient>() {
            return true;
        }
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && connection_class(io.kind())
        {
            return true;
        }
        next = error.source();
    }
    false
}

/// The I/O error kinds of a dependency that went away.
fn connection_class(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind;
    matches!(
        kind,
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::BrokenPipe
            | ErrorKind::TimedOut
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::NetworkDown
            | ErrorKind::UnexpectedEof
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("projection failed")]
    struct Projection(#[source] HandlerError);

    #[test]
    fn the_marker_is_found_anywhere_in_the_chain_and_shows_as_what_it_wraps() {
        let marked = transient(std::io::Error::other("ledger answered 503"));
        assert!(is_transient(&*marked));
        let wrapped = Projection(marked);
        assert!(is_transient(&wrapped));
        assert_eq!(
            crate::contract::error::error_chain(&wrapped),
            "projection failed: ledger answered 503"
        );
    }

    #[test]
    fn connection_class_io_errors_are_transient_and_others_are_not() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(is_transient(&Projection(Box::new(refused))));
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(!is_transient(&Projection(Box::new(missing))));
        let plain: HandlerError = "balance went negative".into();
        assert!(!is_transient(&*plain));
    }
}
