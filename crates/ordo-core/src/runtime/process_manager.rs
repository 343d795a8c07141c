//! Process managers as brokers run them: an instance found by correlation
//! value, run with a unit of work, and saved.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::contract::handler::{
    BoxFuture, DynHandler, HandlerContext, HandlerDescriptor, HandlerResult, ProcessManager,
};
use crate::contract::message::Envelope;
use crate::contract::process::{ProcessStore, correlation_value};
use crate::runtime::domain::DomainRef;
use crate::runtime::uow::ContextUnitOfWork;

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
        let mut ctx = ctx.clone().with_process_correlation(Some(correlation.clone()));
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
