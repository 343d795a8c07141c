//! Process managers: where their state lives, how a message finds its
//! instance, and the adapter that loads, runs and saves an instance.

use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::domain::DomainRef;
use crate::error::ProcessStoreError;
use crate::field::read_field;
use crate::handler::DynHandler;
use crate::handler::{BoxFuture, HandlerContext, HandlerDescriptor, HandlerResult, ProcessManager};
use crate::message::Envelope;
use crate::policy::{ProcessingContext, SequenceId, SequencingPolicy};
use crate::uow::ContextUnitOfWork;

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

/// Runs process manager `P` for brokers: finds the instance, runs it, saves it.
pub(crate) struct ProcessManagerHandler<P> {
    descriptor: Arc<HandlerDescriptor>,
    store: Arc<dyn ProcessStore>,
    domain: DomainRef,
    manager: PhantomData<fn() -> P>,
}

impl<P: ProcessManager> ProcessManagerHandler<P> {
    pub(crate) fn new(descriptor: Arc<HandlerDescriptor>, store: Arc<dyn ProcessStore>) -> Self {
        Self {
            descriptor,
            store,
            domain: DomainRef::default(),
            manager: PhantomData,
        }
    }

    /// The domain whose units of work the instances raise events in.
    pub(crate) fn with_domain(mut self, domain: DomainRef) -> Self {
        self.domain = domain;
        self
    }

    /// Loads the instance (or starts one on a `start` message), runs it and
    /// saves it. A message for an instance that does not exist and cannot
    /// start one is skipped. The state is saved only when the handler
    /// succeeds, so a retry starts again from the saved state.
    #[tracing::instrument(skip_all, fields(manager = self.descriptor.name, message_id = %message.id))]
    async fn run(&self, message: &Envelope, ctx: &HandlerContext) -> HandlerResult {
        let Some(handled) = self.descriptor.handled_envelope(message) else {
            return Ok(());
        };
        let name = self.descriptor.name;
        let correlation = correlation_value(&self.descriptor, message).ok_or_else(|| NotCorrelated {
            manager: name,
            message_id: message.id.clone(),
            type_name: message.type_name.clone(),
            field: handled.key.map_or("<none>", |key| key.field()),
        })?;
        let codec_error = |action, source| StateCodecError {
            action,
            manager: name,
            correlation: correlation.clone(),
            source,
        };
        let mut instance: P = match self.store.load(name, &correlation).await? {
            Some(state) => serde_json::from_str(&state).map_err(|e| codec_error("decode", e))?,
            None if handled.start => P::default(),
            None => {
                tracing::debug!(manager = name, correlation, message_id = %message.id,
                    "no process instance and not a start message: skipped");
                return Ok(());
            }
        };
        let mut ctx = ctx.clone().with_correlation_id(Some(correlation.clone()));
        let uow = self
            .domain
            .get()
            .map(|domain| ContextUnitOfWork::new(domain.unit_of_work()));
        if let Some(uow) = &uow {
            ctx = ctx.with_unit_of_work(Arc::new(uow.clone()));
        }
        instance.handle(message, &ctx).await?;
        let state = serde_json::to_string(&instance).map_err(|e| codec_error("encode", e))?;
        // Events first: a failed save retries the message (at least once),
        // where a save before a failed commit would lose the events.
        if let Some(raised) = uow.and_then(|uow| uow.take()) {
            raised.commit().await?;
        }
        self.store.save(name, &correlation, state, &ctx).await?;
        Ok(())
    }
}

impl<P: ProcessManager> DynHandler for ProcessManagerHandler<P> {
    fn handle<'a>(&'a self, message: &'a Envelope, ctx: &'a HandlerContext) -> BoxFuture<'a, HandlerResult> {
        Box::pin(self.run(message, ctx))
    }
}

/// A handled message without a correlation value.
#[derive(Debug, thiserror::Error)]
#[error(
    "process manager `{manager}` cannot correlate message {message_id} of type `{type_name}`: \
     its correlate field `{field}` is missing or null"
)]
struct NotCorrelated {
    manager: &'static str,
    message_id: String,
    type_name: String,
    field: &'static str,
}

/// A process state that could not be (de)serialised.
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} the state of process manager `{manager}` instance `{correlation}`")]
struct StateCodecError {
    action: &'static str,
    manager: &'static str,
    correlation: String,
    #[source]
    source: serde_json::Error,
}
