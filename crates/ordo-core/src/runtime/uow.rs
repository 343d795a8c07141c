//! The unit of work: events raised by one operation, committed to the outbox
//! together or not at all.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::contract::error::CommitError;
use crate::contract::handler::{EventSink, RaisedEvent};
use crate::contract::key::Lane;
use crate::contract::message::{Envelope, Event, Metadata};
use crate::contract::outbox::NewOutboxRow;
use crate::runtime::domain::Domain;

impl Domain {
    /// A new, empty unit of work.
    pub fn unit_of_work(&self) -> UnitOfWork {
        UnitOfWork::new(self.clone())
    }
}

/// Events raised by one operation, written to the outbox by
/// [`UnitOfWork::commit`] in one atomic append.
///
/// Every partition key is extracted and validated during `commit`, before
/// anything is written: one bad key fails the whole commit and no row of it
/// enters the outbox. Dropping a unit of work without committing it
/// discards its events.
///
/// ```no_run
/// # async fn example(domain: ordo_core::runtime::domain::Domain, event: impl ordo_core::Event) -> Result<(), Box<dyn std::error::Error>> {
/// let mut uow = domain.unit_of_work();
/// uow.with_metadata("tenant", "acme");
/// uow.raise(event)?;
/// uow.commit().await?;
/// # Ok(()) }
/// ```
pub struct UnitOfWork {
    domain: Domain,
    raised: Vec<Raised>,
    metadata: Metadata,
    priority: i32,
    /// Names the raised events `<seed>/1`, `<seed>/2`... instead of fresh
    /// ids: a command run's (the command id), so that a run again after a
    /// failover raises the same ids and the broker's deduplication drops
    /// the events the first run published.
    id_seed: Option<String>,
}

/// Named priorities for [`UnitOfWork::with_priority`], the source
/// framework's scale. Any `i32` works; only the comparison with
/// `[server.priority_lanes] threshold` (default 0) matters.
pub mod priority {
    /// Bulk loads and migrations.
    pub const BULK: i32 = -100;
    /// Backfills and re-projections.
    pub const LOW: i32 = -50;
    /// The default of every unit of work.
    pub const NORMAL: i32 = 0;
    /// Above normal (no lane above primary: the same as `NORMAL` for routing).
    pub const HIGH: i32 = 50;
    /// The highest (routed like `NORMAL`).
    pub const CRITICAL: i32 = 100;
}

/// One raised event: its envelope and the typed value for key extraction.
struct Raised {
    envelope: Envelope,
    typed: Box<dyn Any + Send + Sync>,
    lane: Lane,
}

/// What a commit wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitReceipt {
    /// The outbox row ids, in raise order.
    pub row_ids: Vec<u64>,
    /// The message ids, in raise order.
    pub message_ids: Vec<String>,
}

impl UnitOfWork {
    fn new(domain: Domain) -> Self {
        Self {
            domain,
            raised: Vec::new(),
            metadata: Metadata::new(),
            priority: priority::NORMAL,
            id_seed: None,
        }
    }

    /// Names the events raised from now on `<seed>/<n>` (`n` from 1, in
    /// raise order) instead of fresh ids.
    pub(crate) fn with_ids_from(mut self, seed: &str) -> Self {
        self.id_seed = Some(seed.to_owned());
        self
    }

    /// Raises `event` on the primary lane. It is serialised now; its key is
    /// checked at commit.
    pub fn raise<E: Event>(&mut self, event: E) -> Result<(), CommitError> {
        self.push(RaisedEvent::new(event), Lane::Primary)
    }

    /// Raises `event` on the low-priority backfill lane, drained after the
    /// primary lane of its partition.
    ///
    /// When `[server.priority_lanes]` is disabled there is no backfill lane:
    /// the event goes to the primary lane, like [`UnitOfWork::raise`], rather
    /// than being refused, so backfill code runs unchanged in every
    /// deployment.
    pub fn raise_backfill<E: Event>(&mut self, event: E) -> Result<(), CommitError> {
        self.push(RaisedEvent::new(event), Lane::Backfill)
    }

    /// Sets the priority of every event of this unit of work, raised before
    /// or after this call (default [`priority::NORMAL`], 0).
    ///
    /// With `[server.priority_lanes]` enabled, events of a unit of work whose
    /// priority is below the `threshold` (default 0) go to the backfill lane
    /// of their partition, like [`UnitOfWork::raise_backfill`] ones: a bulk
    /// job sets `with_priority(priority::LOW)` once and raises normally.
    /// `raise_backfill` still sends one event there whatever the priority.
    /// With the lanes disabled every event goes to the primary lane.
    pub fn with_priority(&mut self, priority: i32) -> &mut Self {
        self.priority = priority;
        self
    }

    /// The priority set with [`UnitOfWork::with_priority`].
    pub fn priority(&self) -> i32 {
        self.priority
    }

    /// Adds a metadata entry to every event of this unit of work, raised
    /// before or after this call (a later value for the same key wins).
    ///
    /// Keys starting with `ordo.` are Ordo's own
    /// ([`crate::contract::message::RESERVED_METADATA_PREFIX`]): the commit refuses
    /// a unit of work given one ([`CommitError::ReservedMetadata`], nothing
    /// written). Copied from a handled message, the outbox position it
    /// carries (`ordo.position`) would make the broker drop the new events
    /// as already published. Copy a handled message's metadata with
    /// [`UnitOfWork::with_user_metadata`], which leaves them out.
    pub fn with_metadata(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// Adds every entry of `metadata` except Ordo's own (keys starting with
    /// `ordo.`, see [`crate::contract::message::user_metadata`]) to every event of
    /// this unit of work, as [`UnitOfWork::with_metadata`] does: how a
    /// handler passes a handled message's metadata (a tenant, a trace id)
    /// on to the events it raises.
    ///
    /// ```no_run
    /// # async fn example(domain: ordo_core::runtime::domain::Domain, ctx: &ordo_core::HandlerContext, event: impl ordo_core::Event) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut uow = domain.unit_of_work();
    /// uow.with_user_metadata(ctx.metadata());
    /// uow.raise(event)?;
    /// uow.commit().await?;
    /// # Ok(()) }
    /// ```
    pub fn with_user_metadata(&mut self, metadata: &crate::contract::message::Metadata) -> &mut Self {
        for (key, value) in crate::contract::message::user_metadata(metadata) {
            self.metadata.insert(key.clone(), value.clone());
        }
        self
    }

    /// How many events were raised.
    pub fn len(&self) -> usize {
        self.raised.len()
    }

    /// Whether no event was raised.
    pub fn is_empty(&self) -> bool {
        self.raised.is_empty()
    }

    /// Adds `event` on `lane`; the backfill lane is the primary one when
    /// priority lanes are disabled.
    fn push(&mut self, event: RaisedEvent, lane: Lane) -> Result<(), CommitError> {
        let lane = if lane == Lane::Backfill && !self.domain.config().priority_lanes().enabled() {
            Lane::Primary
        } else {
            lane
        };
        let (type_name, category) = (event.type_name(), event.category());
        if !self.domain.owns_category(category) {
            return Err(CommitError::UnknownCategory { type_name, category });
        }
        let raised = event.rust_type();
        let handled = self.domain.message_types().get(&(category, type_name));
        if let Some(handled) = handled.filter(|handled| handled.id != raised.id) {
            return Err(CommitError::AmbiguousTypeName {
                type_name,
                category,
                raised: raised.path,
                handled: handled.path,
            });
        }
        let mut envelope = event.envelope()?;
        if let Some(seed) = &self.id_seed {
            envelope.id = format!("{seed}/{}", self.raised.len() + 1);
        }
        crate::contract::trace::publish(&mut envelope);
        self.raised.push(Raised {
            envelope,
            typed: event.into_value(),
            lane,
        });
        Ok(())
    }

    /// Validates every key, then appends all events to the outbox at once
    /// and wakes the outbox processor. On error nothing was written.
    pub async fn commit(self) -> Result<CommitReceipt, CommitError> {
        let rows = self.rows()?;
        if rows.is_empty() {
            return Ok(CommitReceipt::default());
        }
        let message_ids = rows.iter().map(|row| row.envelope.id.clone()).collect();
        let row_ids = self
            .domain
            .outbox()
            .append(rows)
            .await
            .map_err(CommitError::Outbox)?;
        self.domain.notify_committed();
        Ok(CommitReceipt { row_ids, message_ids })
    }

    /// Validates every key, exactly as [`UnitOfWork::commit`] does, and
    /// returns the rows it would append, without appending them: for an
    /// outbox that writes them in the caller's own database transaction
    /// (`ordo_postgres::UnitOfWorkExt::commit_in`). On error nothing was
    /// written anywhere.
    pub fn validated_rows(&self) -> Result<Vec<NewOutboxRow>, CommitError> {
        self.rows()
    }

    /// The domain this unit of work belongs to.
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The outbox rows, each with its validated partition key and metadata.
    fn rows(&self) -> Result<Vec<NewOutboxRow>, CommitError> {
        if let Some(key) = self
            .metadata
            .keys()
            .find(|key| crate::contract::message::is_reserved_metadata(key))
        {
            return Err(CommitError::ReservedMetadata { key: key.clone() });
        }
        let rules = self.domain.config().key_rules();
        let limit = self.domain.config().outbox().max_payload_bytes();
        self.raised
            .iter()
            .map(|raised| {
                let mut envelope = raised.envelope.clone();
                if envelope.payload.len() > limit {
                    return Err(CommitError::PayloadTooLarge {
                        message_id: envelope.id,
                        type_name: envelope.type_name,
                        size: raised.envelope.payload.len(),
                        limit,
                    });
                }
                envelope
                    .metadata
                    .extend(self.metadata.iter().map(|(k, v)| (k.clone(), v.clone())));
                if let Some(spec) = self.domain.partitioning().get(envelope.category.as_str()) {
                    let value = spec.key_value(&envelope, &*raised.typed)?;
                    let key = rules.validate(spec.field(), value.as_deref()).map_err(|key| {
                        CommitError::InvalidKey {
                            message_id: envelope.id.clone(),
                            type_name: envelope.type_name.clone(),
                            key,
                        }
                    })?;
                    envelope.partition_key = Some(key);
                }
                let row = NewOutboxRow::new(envelope, self.lane(raised.lane));
                Ok(if self.id_seed.is_some() {
                    row.with_derived_id()
                } else {
                    row
                })
            })
            .collect()
    }

    /// The lane of an event raised on `raised`: the backfill lane when it
    /// was raised there, or when the unit's priority is below the threshold
    /// (lanes enabled).
    fn lane(&self, raised: Lane) -> Lane {
        let lanes = self.domain.config().priority_lanes();
        if lanes.enabled() && self.priority < lanes.threshold() {
            Lane::Backfill
        } else {
            raised
        }
    }
}

impl fmt::Debug for UnitOfWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let types: Vec<&str> = self
            .raised
            .iter()
            .map(|r| r.envelope.type_name.as_str())
            .collect();
        f.debug_struct("UnitOfWork")
            .field("raised", &types)
            .field("metadata", &self.metadata)
            .field("priority", &self.priority)
            .finish_non_exhaustive()
    }
}

/// The unit of work a handler context carries: command handlers and
/// process managers raise events into it through the context, and the
/// runtime commits it when the handler succeeds.
#[derive(Clone)]
pub(crate) struct ContextUnitOfWork(Arc<Mutex<Option<UnitOfWork>>>);

impl ContextUnitOfWork {
    pub(crate) fn new(uow: UnitOfWork) -> Self {
        Self(Arc::new(Mutex::new(Some(uow))))
    }

    /// Runs `f` on the open unit of work, or fails when it was taken.
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&mut UnitOfWork) -> Result<T, CommitError>,
    ) -> Result<T, CommitError> {
        // `f` only pushes to a vector: a poisoned lock still holds a consistent unit.
        let mut guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match guard.as_mut() {
            Some(uow) => f(uow),
            None => Err(CommitError::NoUnitOfWork),
        }
    }

    /// Takes the unit of work out, for its commit; later raises fail.
    pub(crate) fn take(&self) -> Option<UnitOfWork> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl fmt::Debug for ContextUnitOfWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let guard = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_tuple("ContextUnitOfWork")
            .field(&guard.as_ref().map(UnitOfWork::len))
            .finish()
    }
}

impl EventSink for ContextUnitOfWork {
    fn raise(&self, event: RaisedEvent, lane: Lane) -> Result<(), CommitError> {
        self.with(|uow| uow.push(event, lane))
    }
}
