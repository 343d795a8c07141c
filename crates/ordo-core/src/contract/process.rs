//! Process managers: where their state lives and how a message finds its
//! instance.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::contract::error::ProcessStoreError;
use crate::contract::field::read_field;
use crate::contract::handler::{BoxFuture, HandlerContext, HandlerDescriptor};
use crate::contract::message::Envelope;
use crate::contract::policy::{ProcessingContext, SequenceId, SequencingPolicy};

/// Storage of process-manager instances: one JSON document per manager and
/// correlation value.
pub trait ProcessStore: Send + Sync + fmt::Debug + 'static {
    /// The saved state of `manager`'s instance for `correlation`, if any.
    fn load<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProcessStoreError>>;

    /// Saves the state of `manager`'s instance for `correlation`.
    ///
    /// `ctx` is the context of the message that changed the state: a store
    /// shared between instances uses its fencing token (or the broker's lease
    /// extension) to refuse the write of an owner whose lease moved on.
    fn save<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
        state: String,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, Result<(), ProcessStoreError>>;
}

impl<S: ProcessStore + ?Sized> ProcessStore for Arc<S> {
    fn load<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProcessStoreError>> {
        (**self).load(manager, correlation)
    }

    fn save<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
        state: String,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, Result<(), ProcessStoreError>> {
        (**self).save(manager, correlation, state, ctx)
    }
}

/// Process state in memory, for tests and single-process use. Clones share
/// the same states; nothing is fenced (there is one owner: this process).
#[derive(Debug, Clone, Default)]
pub struct InMemoryProcessStore {
    states: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl InMemoryProcessStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The saved state of `manager`'s instance for `correlation`.
    pub fn state(&self, manager: &str, correlation: &str) -> Option<String> {
        self.states()
            .get(&(manager.to_owned(), correlation.to_owned()))
            .cloned()
    }

    /// How many instances are saved.
    pub fn len(&self) -> usize {
        self.states().len()
    }

    /// Whether no instance is saved.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn states(&self) -> MutexGuard<'_, HashMap<(String, String), String>> {
        // Inserts and reads cannot leave the map half-updated, so poisoning is harmless.
        self.states.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ProcessStore for InMemoryProcessStore {
    fn load<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProcessStoreError>> {
        let state = self.state(manager, correlation);
        Box::pin(async move { Ok(state) })
    }

    fn save<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
        state: String,
        _ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, Result<(), ProcessStoreError>> {
        self.states()
            .insert((manager.to_owned(), correlation.to_owned()), state);
        Box::pin(async move { Ok(()) })
    }
}

/// The correlation value of `message` for the process manager `descriptor`.
///
/// A partitioned manager's categories are keyed by its correlate fields (the
/// registry enforces it), so the envelope's validated partition key is the
/// value. Otherwise the handled type's `correlate` field is read through the
/// typed message (so serde renames and integers above 2^53 give the same
/// text as everywhere else), or, for hand-written descriptors, from the JSON
/// payload with integers kept exact. `None` when the manager does not handle
/// the type or the field is missing or null.
pub fn correlation_value(descriptor: &HandlerDescriptor, message: &Envelope) -> Option<String> {
    let handled = descriptor.handled_envelope(message)?;
    if descriptor.partitioned
        && let Some(key) = &message.partition_key
    {
        return Some(key.clone());
    }
    let key = handled.key?;
    match key.decode(message) {
        Some(value) => value,
        None => read_field(&message.payload, key.field())
            .ok()?
            .into_key()
            .ok()
            .flatten(),
    }
}

/// Sequences a process manager's messages by correlation value, so one
/// instance never handles two messages at once.
#[derive(Debug, Clone)]
pub struct CorrelationPolicy {
    descriptor: Arc<HandlerDescriptor>,
}

impl CorrelationPolicy {
    /// The policy of the process manager `descriptor`.
    pub fn new(descriptor: Arc<HandlerDescriptor>) -> Self {
        Self { descriptor }
    }
}

impl SequencingPolicy for CorrelationPolicy {
    fn sequence_identifier(&self, message: &Envelope, _: &ProcessingContext<'_>) -> Option<SequenceId> {
        correlation_value(&self.descriptor, message).map(SequenceId::from)
    }
}
