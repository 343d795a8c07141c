//! Sequencing policies: which messages must be handled one after another.
//!
//! A policy maps a message to an optional sequence identifier. Messages with
//! the same identifier are handled sequentially, in submission order; a
//! message with none has no ordering constraint.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::message::Envelope;

/// A sequence identifier: messages sharing one are handled one at a time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SequenceId(Arc<str>);

impl SequenceId {
    /// A sequence identifier from any string.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Self(id.into())
    }

    /// The identifier's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SequenceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for SequenceId {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<String> for SequenceId {
    fn from(value: String) -> Self {
        Self::new(value)
    }
}

/// What a policy may consult besides the message itself.
#[derive(Debug, Clone, Copy)]
pub struct ProcessingContext<'a> {
    handler: &'a str,
    typed: Option<&'a (dyn Any + Send + Sync)>,
}

impl<'a> ProcessingContext<'a> {
    /// A context for `handler`.
    pub fn new(handler: &'a str) -> Self {
        Self { handler, typed: None }
    }

    /// Attaches the decoded message, when the caller already has it.
    #[must_use]
    pub fn with_typed(mut self, typed: &'a (dyn Any + Send + Sync)) -> Self {
        self.typed = Some(typed);
        self
    }

    /// The handler the message is being sequenced for.
    pub fn handler(&self) -> &str {
        self.handler
    }

    /// The decoded message, if the caller attached it.
    pub fn typed(&self) -> Option<&'a (dyn Any + Send + Sync)> {
        self.typed
    }
}

/// Maps a message to its optional sequence identifier.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a sequencing policy",
    note = "implement `ordo::SequencingPolicy`, or use a built-in such as `PropertyPolicy` or `ExtractionPolicy`"
)]
pub trait SequencingPolicy: Send + Sync + fmt::Debug + 'static {
    /// The sequence identifier of `message`, or `None` when it may be handled
    /// concurrently with anything.
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId>;
}

impl<P: SequencingPolicy + ?Sized> SequencingPolicy for Arc<P> {
    fn sequence_identifier(&self, message: &Envelope, context: &ProcessingContext<'_>) -> Option<SequenceId> {
        (**self).sequence_identifier(message, context)
    }
}
