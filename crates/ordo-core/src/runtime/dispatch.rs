//! `Domain::dispatch`: a command's handler run in its sequence, with the
//! unit of work its context raises events into, committed when it succeeds.

use std::sync::Arc;

use crate::contract::error::CommitError;
use crate::contract::handler::{HandlerContext, HandlerError};
use crate::contract::message::Command;
use crate::runtime::domain::Domain;
use crate::runtime::error::DispatchError;
use crate::runtime::uow::ContextUnitOfWork;

/// Why a command's run failed.
enum Failed {
    Handler(HandlerError),
    Commit(CommitError),
}

impl Domain {
    /// Handles `command` with its handler and returns the outcome. Commands
    /// with the same sequence id (by default the routing key) are handled
    /// one after another, in dispatch order.
    ///
    /// The events the handler raised with [`HandlerContext::raise`] are
    /// committed to the outbox together when it succeeds (before the next
    /// command of its sequence runs) and discarded when it fails.
    pub async fn dispatch<C: Command>(&self, command: C) -> Result<(), DispatchError> {
        let type_name = C::TYPE_NAME;
        let routed = self.bus().route(&command)?;
        let handler = routed.name;
        let dyn_handler = routed.handler;
        let envelope = routed.envelope;
        let uow = ContextUnitOfWork::new(self.unit_of_work());
        let task = async move {
            let ctx = HandlerContext::new(&envelope).with_unit_of_work(Arc::new(uow.clone()));
            let handled = dyn_handler.handle(&envelope, &ctx).await;
            drop(ctx);
            match (handled, uow.take()) {
                (Ok(()), Some(uow)) => uow.commit().await.map(drop).map_err(Failed::Commit),
                (Ok(()), None) => Ok(()),
                (Err(error), _) => Err(Failed::Handler(error)),
            }
        };
        match self.bus().run(handler, routed.sequence, task).await {
            Some(Ok(())) => Ok(()),
            Some(Err(Failed::Handler(error))) => Err(DispatchError::Handler {
                handler,
                type_name,
                error,
            }),
            Some(Err(Failed::Commit(error))) => Err(DispatchError::Commit {
                handler,
                type_name,
                error: Box::new(error),
            }),
            None => Err(DispatchError::Aborted { handler, type_name }),
        }
    }
}
