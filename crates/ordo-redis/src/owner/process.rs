//! Process-manager state in Redis, saved under the lease fence.
//!
//! A process manager's instance state is one JSON string per manager and
//! correlation value. When the message came from the Redis broker, the save
//! is a fenced commit: a stalled owner that wakes up after another instance
//! took the correlation value over gets [`ProcessStoreError::Fenced`], and
//! its stale state is not written over the new owner's.

use fred::clients::Pool;
use fred::interfaces::KeysInterface;
use ordo_core::contract::error::ProcessStoreError;
use ordo_core::contract::handler::{BoxFuture, HandlerContext};
use ordo_core::contract::process::ProcessStore;

use crate::error::Error;
use crate::owner::fence::{FencedWrite, RedisFence};

/// Process-manager state in Redis.
#[derive(Debug, Clone)]
pub struct RedisProcessStore {
    client: Pool,
}

impl RedisProcessStore {
    /// A store on `client` (the broker's Redis, for fenced saves: see
    /// [`RedisBroker::client`](crate::RedisBroker::client)).
    pub fn new(client: Pool) -> Self {
        Self { client }
    }

    /// Where the state of `manager`'s instance for `correlation` lives; it
    /// shares the hash tag of the manager's lease on the value.
    pub fn key(manager: &str, correlation: &str) -> String {
        crate::store::keys::process_state(manager, correlation)
    }
}

/// A failed load or save; a lost connection is transient (see
/// [`Error::Unavailable`]).
fn storage(manager: &str, correlation: &str, error: Error) -> ProcessStoreError {
    ProcessStoreError::Storage {
        manager: manager.to_owned(),
        correlation: correlation.to_owned(),
        source: Box::new(error.classified()),
    }
}

impl ProcessStore for RedisProcessStore {
    fn load<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
    ) -> BoxFuture<'a, Result<Option<String>, ProcessStoreError>> {
        Box::pin(async move {
            self.client
                .get(Self::key(manager, correlation))
                .await
                .map_err(|e| storage(manager, correlation, e.into()))
        })
    }

    fn save<'a>(
        &'a self,
        manager: &'a str,
        correlation: &'a str,
        state: String,
        ctx: &'a HandlerContext,
    ) -> BoxFuture<'a, Result<(), ProcessStoreError>> {
        Box::pin(async move {
            let key = Self::key(manager, correlation);
            let Some(fence) = RedisFence::from_context(ctx) else {
                // Not from the Redis broker's partitioned consumer: one owner, no fence.
                return self
                    .client
                    .set::<(), _, _>(key, state, None, None, false)
                    .await
                    .map_err(|e| storage(manager, correlation, e.into()));
            };
            match fence
                .commit(&self.client, &FencedWrite::new().set(key, state))
                .await
            {
                Ok(_) => Ok(()),
                Err(Error::Fenced { .. }) => Err(ProcessStoreError::Fenced {
                    manager: manager.to_owned(),
                    correlation: correlation.to_owned(),
                    fencing_token: fence.token(),
                }),
                Err(error) => Err(storage(manager, correlation, error)),
            }
        })
    }
}
