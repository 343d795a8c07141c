//! Plain consumers: a non-partitioned category's base stream, read through
//! an ordinary consumer group shared by every instance (no key affinity, so
//! no cross-instance ordering: that is what partitioning is for).
//!
//! Each (group, category) gets one task with its own connection for the
//! blocking read. Entries pending on a consumer whose instance stopped
//! announcing itself a lease TTL ago (a dead instance) are claimed; a message that fails every
//! attempt (as [`ordo_core::contract::retry`] decides: transient failures use up
//! none) is copied to `{category}:dlq` and acknowledged, since a base
//! stream has no per-key order to protect.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client;
use fred::prelude::StreamsInterface;
use fred::types::Value;
use ordo_core::contract::attempt::{Attempt, Failure, Outcome};
use ordo_core::contract::broker::Subscription;
use ordo_core::contract::delivery::{DeliveryHooks, deliver};
use ordo_core::contract::handler::HandlerContext;
use ordo_core::contract::message::Envelope;
use ordo_core::contract::retry::{Failed, GiveUp, Retries};
use ordo_core::contract::trace;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info_span, warn};

use super::shared::{SharedRef, sleep_unless};
use crate::consumer::metrics;
use crate::error::Result;
use crate::net::connection;
use crate::owner::partition::StreamEntry;
use crate::store::calls;
use crate::store::groups::{self, IfNoStream};
use crate::store::keys::BaseKeys;
use crate::store::scripts::{RawEntry, array, parse_entries};

/// How many pending entries one claim pass takes over.
const CLAIM_COUNT: i64 = 100;

/// One plain consumer.
pub(crate) struct Plain {
    shared: SharedRef,
    subscription: Subscription,
    group: Arc<str>,
    category: String,
    stream: String,
    dlq: String,
    reader: Client,
}

impl std::fmt::Debug for Plain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plain")
            .field("group", &self.group)
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Plain {
    pub(crate) fn new(shared: SharedRef, subscription: Subscription, category: &str) -> Result<Self> {
        let reader = connection::blocking_builder(shared.url.expose(), &shared.settings.tls)?.build()?;
        Ok(Self {
            group: Arc::from(subscription.name()),
            category: category.to_owned(),
            stream: BaseKeys::new(category).stream().to_owned(),
            dlq: BaseKeys::new(category).dlq(),
            shared,
            subscription,
            reader,
        })
    }

    /// Consumes until `stop` is cancelled (between messages).
    pub(crate) async fn run(self, stop: CancellationToken) {
        let span = info_span!("stream", group = %self.group, stream = %self.stream);
        async move {
            connection::connect_in_background(&self.reader);
            let mut failures = 0;
            let mut claim_due = tokio::time::Instant::now();
            let mut group_ready = false;
            while !stop.is_cancelled() {
                if !group_ready {
                    match self.ensure_group().await {
                        Ok(()) => group_ready = true,
                        Err(error) => warn!(error = %ordo_core::contract::error::error_chain(&error), "creating the consumer group failed"),
                    }
                }
                if tokio::time::Instant::now() >= claim_due {
                    claim_due += self.shared.settings.lease_ttl;
                    if let Err(error) = self.claim().await {
                        warn!(error = %ordo_core::contract::error::error_chain(&error), "claiming a dead consumer's entries failed");
                    }
                }
                match self.step(&stop).await {
                    Ok(()) => failures = 0,
                    Err(error) => {
                        failures += 1;
                        // The stream (and its group) may have been deleted.
                        group_ready = false;
                        warn!(error = %ordo_core::contract::error::error_chain(&error), failures, "base stream read failed; backing off");
                        sleep_unless(&stop, self.shared.settings.backoff.delay(failures)).await;
                    }
                }
            }
            connection::quit(&self.reader, std::time::Duration::from_secs(1)).await;
        }
        .instrument(span)
        .await
    }

    /// Reads this consumer's pending entries, else waits for new ones, and
    /// handles what it got.
    async fn step(&self, stop: &CancellationToken) -> Result<()> {
        let settings = &self.shared.settings;
        let count = Some(u64::try_from(settings.read_batch).unwrap_or(64));
        let pending = self.read(count, None, "0").await?;
        let entries = if pending.is_empty() {
            let block = u64::try_from(settings.wake_block.as_millis()).unwrap_or(1_000);
            tokio::select! {
                entries = self.read(count, Some(block), ">") => entries?,
                () = stop.cancelled() => return Ok(()),
            }
        } else {
            pending
        };
        for raw in entries {
            if stop.is_cancelled() {
                break;
            }
            self.handle(raw, stop).await?;
        }
        Ok(())
    }

    async fn ensure_group(&self) -> Result<()> {
        groups::create(
            self.shared.partitions.client(),
            &self.stream,
            &self.group,
            IfNoStream::Create,
        )
        .await
    }

    async fn read(&self, count: Option<u64>, block: Option<u64>, from: &str) -> Result<Vec<RawEntry>> {
        let reply: Value = self
            .reader
            .xreadgroup(
                &*self.group,
                self.shared.instance(),
                count,
                block,
                false,
                &self.stream,
                from,
            )
            .await?;
        // [[stream, [entries...]]] or nil
        let entries = array(reply)
            .into_iter()
            .next()
            .map(|stream| array(stream).into_iter().nth(1).unwrap_or(Value::Null))
            .unwrap_or(Value::Null);
        parse_entries("XREADGROUP", entries)
    }

    /// Handles one entry with retries through the shared attempt runner (a
    /// panic is a failed attempt), dead-lettering it when the retry policy
    /// gives up, then acknowledges it. Stopped during a retry's backoff (or
    /// while the handler is paused), it leaves the entry pending (this
    /// instance reads it again at its next start; another one claims it
    /// once this one is gone).
    async fn handle(&self, raw: RawEntry, stop: &CancellationToken) -> Result<()> {
        let entry = StreamEntry::from_raw(raw, ordo_core::contract::key::Lane::Primary);
        let outcome = match entry.decode_for(&self.category, None) {
            Ok(envelope) if self.subscription.handles(&envelope) => {
                match self.attempts(&entry, Arc::new(envelope), stop).await {
                    Some(outcome) => outcome,
                    None => return Ok(()),
                }
            }
            Ok(_) => None,
            // Never attempted: it cannot be decoded (or is of another category).
            Err(error) => Some((ordo_core::contract::error::error_chain(&error), 0)),
        };
        if let Some((error, attempts)) = outcome {
            self.dead_letter(&entry, &error, attempts).await?;
        }
        calls::plain::ack(
            self.shared.partitions.client(),
            &self.stream,
            &self.group,
            entry.id(),
        )
        .await
    }

    /// Runs the handler until it succeeds (`Some(None)`) or the retry
    /// policy gives up (`Some(Some((reason, attempts)))`); `None` when
    /// stopped before either.
    async fn attempts(
        &self,
        entry: &StreamEntry,
        envelope: Arc<Envelope>,
        stop: &CancellationToken,
    ) -> Option<Option<(String, u32)>> {
        let policy = self.subscription.retry_policy(&self.shared.settings.retry);
        let retries = policy.start(&envelope.id, 0);
        let traced = trace::process(&envelope, "redis", self.subscription.name(), 0);
        let mut hooks = PlainDelivery {
            labels: [
                ("group", self.group.to_string()),
                ("category", envelope.category.clone()),
            ],
            plain: self,
            entry,
            envelope,
            stop,
            timeout: policy.timeout(),
        };
        traced.run(deliver(retries, &mut hooks)).await
    }

    /// Adds `entry` to the category's dead-letter stream `{category}:dlq`,
    /// with the fields a partition's dead letters have (`ordo dlq` reads both).
    async fn dead_letter(&self, entry: &StreamEntry, error: &str, attempts: u32) -> Result<()> {
        let dlq = &self.dlq;
        let mut fields = vec![
            ("source_id", Value::from(entry.id())),
            ("group", Value::from(&*self.group)),
            ("lane", Value::from("primary")),
            ("attempts", Value::from(attempts)),
            (
                "error",
                Value::from(
                    ordo_core::contract::text::capped(error, ordo_core::contract::text::MAX_ERROR_TEXT)
                        .as_ref(),
                ),
            ),
        ];
        // Its fields as they were, bytes that are not text included.
        fields.extend(crate::owner::parking::field_pairs(entry));
        let _: Value = self
            .shared
            .partitions
            .client()
            .xadd(dlq.as_str(), false, None::<()>, "*", fields)
            .await?;
        error!(
            event = ordo_core::contract::log_events::MESSAGE_DEAD_LETTERED,
            id = entry.id(),
            attempts,
            dlq = %dlq,
            error = %ordo_core::contract::text::log_text(error),
            "message given up on (or cannot be read) and dead-lettered (ordo dlq list, then replay or purge)"
        );
        Ok(())
    }

    /// Takes over the entries pending on instances whose liveness lapsed
    /// (not announced for a lease TTL): never from a live instance that is
    /// slowly working through its batch.
    async fn claim(&self) -> Result<()> {
        let settings = &self.shared.settings;
        calls::plain::claim(
            self.shared.partitions.client(),
            &self.stream,
            &self.group,
            self.shared.instance(),
            CLAIM_COUNT,
            settings.lease_ttl * 10,
        )
        .await
    }
}

/// A plain consumer's part in the [delivery loop](deliver) of one entry:
/// `None` when stopped, else `Some(None)` when handled and
/// `Some(Some((reason, attempts)))` when given up on.
struct PlainDelivery<'a> {
    plain: &'a Plain,
    entry: &'a StreamEntry,
    envelope: Arc<Envelope>,
    stop: &'a CancellationToken,
    timeout: Option<Duration>,
    labels: [(&'static str, String); 2],
}

impl DeliveryHooks for PlainDelivery<'_> {
    type Output = Option<Option<(String, u32)>>;

    async fn attempt(&mut self, attempt: u32) -> Result<Result<(), Failure>, Self::Output> {
        let ctx = HandlerContext::shared(Arc::clone(&self.envelope)).with_attempt(attempt);
        let own = self.plain.subscription.settings.acquire().await;
        let permit = (
            self.plain
                .shared
                .handler_permits
                .clone()
                .acquire_owned()
                .await
                .ok(),
            own,
        );
        let run = Attempt::new(
            self.plain.subscription.handler.clone(),
            self.envelope.clone(),
            ctx,
        )
        .with_timeout(self.timeout);
        // Not cancelled: a stop waits for the attempt to end.
        Ok(
            match run.run(permit, &CancellationToken::new(), Duration::ZERO).await {
                Outcome::Succeeded => Ok(()),
                Outcome::Failed(failure) => Err(failure),
                _ => Err(Failure::new("the handler run was cancelled".into())),
            },
        )
    }

    async fn failed(
        &mut self,
        failed: &Failed,
        _attempt: u32,
        _retries: &mut Retries<'_>,
    ) -> Result<(), Self::Output> {
        metrics::attempt_failed(&self.labels, failed);
        Ok(())
    }

    fn retrying(&mut self, failed: &Failed, attempt: u32) {
        failed.log(&self.plain.group, self.entry.id(), attempt);
    }

    async fn succeeded(&mut self) -> Self::Output {
        Some(None)
    }

    async fn exhausted(&mut self, give_up: GiveUp) -> Self::Output {
        Some(Some((give_up.reason().to_owned(), give_up.attempts())))
    }

    async fn cancelled(&self) -> Self::Output {
        self.stop.cancelled().await;
        None
    }
}
