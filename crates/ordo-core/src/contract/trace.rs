//! Traces through the broker, on OpenTelemetry's messaging conventions
//! (with the `otel` feature; without it every function here does nothing
//! and costs nothing).
//!
//! - **Publishing.** An event raised or a command sent while a span is
//!   current (a request's span, a handler's run) is published in a span of
//!   its own, `publish <category>` (kind producer), child of the current one; that
//!   span's context goes into the envelope's metadata as W3C `traceparent`
//!   and `tracestate`, through OpenTelemetry's global text-map propagator
//!   (the application installs one, usually
//!   `TraceContextPropagator`). It travels with the envelope through every
//!   outbox, relay and broker, unchanged.
//! - **Processing.** A broker runs each message's delivery (its attempts,
//!   retries, and what happens when they are exhausted: halt, park,
//!   dead-letter) in the span [`process`] makes, `process <category>`
//!   (kind consumer), the child of the publication's context (Ordo handles
//!   one message at a time per key, which the conventions allow to be a
//!   child). The log lines Ordo writes meanwhile (a retry, a halt, a
//!   parked key, a skip) are its events; a delivery that fails for good
//!   sets its status to error.
//!
//! Attributes: `messaging.system` (the broker), `messaging.destination.name`
//! (the category), `messaging.operation.type` (`send` or `process`),
//! `messaging.message.id`, `messaging.consumer.group.name` (the handler),
//! and Ordo's `ordo.partition_key`, `ordo.attempt`, `ordo.fencing_token`,
//! `ordo.correlation_id`, `ordo.causation_id`, `ordo.message_type`. No
//! payload and no metadata value other than the trace context is ever
//! recorded.
//!
//! Metrics beside the spans, through the `metrics` facade (the application
//! installs the exporter, as for Ordo's own `ordo_*` metrics), on the
//! conventions' names: `messaging.process.duration` (a histogram of each
//! handler attempt, in seconds, with `error.type` when it failed) and
//! `messaging.client.consumed.messages` (a counter of the deliveries),
//! labelled `messaging.system`, `messaging.destination.name`,
//! `messaging.consumer.group.name` and `messaging.operation.name`.
//!
//! The spans are `tracing` spans at level INFO: an application keeps its
//! subscriber and adds `tracing-opentelemetry`'s layer to it (the facade's
//! `ordo::otel` sets both up from the standard `OTEL_*` variables).

use std::future::Future;

use crate::contract::attempt::Failure;
use crate::contract::handler::{BoxFuture, HandlerResult};
use crate::contract::message::{Envelope, Metadata};

/// The metric of each handler attempt's duration, in seconds.
pub const PROCESS_DURATION: &str = "messaging.process.duration";

/// The metric counting the deliveries of messages to handlers.
pub const CONSUMED_MESSAGES: &str = "messaging.client.consumed.messages";

/// The metadata key of the W3C trace context (`traceparent`).
pub const TRACEPARENT: &str = "traceparent";

/// The metadata key of the W3C trace state (`tracestate`).
pub const TRACESTATE: &str = "tracestate";

/// Whether metadata key `key` holds a message's trace context: it belongs
/// to the message's own publication, and is never copied onto another
/// message (see [`crate::contract::message::user_metadata`]).
pub fn is_trace_context(key: &str) -> bool {
    key == TRACEPARENT || key == TRACESTATE
}

/// Publishes `envelope` (an event raised, a command sent, with its final
/// id and destination) in a `publish <category>` span (kind producer),
/// child of the current span, and writes that span's context into its
/// metadata. Nothing without the `otel` feature.
pub(crate) fn publish(envelope: &mut Envelope) {
    #[cfg(feature = "otel")]
    otel::publish(envelope);
    #[cfg(not(feature = "otel"))]
    let _ = envelope;
}

/// The delivery of `envelope` by broker `system` to handler `group` under
/// `fencing_token` (0 without a lease), as traces and metrics see it: run
/// the delivery (see [`deliver`](crate::contract::delivery::deliver)) with
/// [`Process::run`]. An empty `group` is named later, once known (a
/// command partition's delivery names its handler once it has routed the
/// command). Nothing without the `otel` feature.
pub fn process(envelope: &Envelope, system: &'static str, group: &str, fencing_token: u64) -> Process {
    #[cfg(feature = "otel")]
    return Process(otel::Process::new(envelope, system, group, fencing_token));
    #[cfg(not(feature = "otel"))]
    {
        let _ = (envelope, system, group, fencing_token);
        Process(())
    }
}

/// A delivery as traces and metrics see it (see [`process`]).
#[must_use = "a delivery is traced by running it with `Process::run`"]
pub struct Process(
    #[cfg(feature = "otel")] otel::Process,
    #[cfg(not(feature = "otel"))] (),
);

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").finish_non_exhaustive()
    }
}

impl Process {
    /// Runs `delivery` in its span, `process <category>` (kind consumer),
    /// the child of the context the message's publication left in its
    /// envelope, and counts it (`messaging.client.consumed.messages`) when
    /// it ends. `delivery` itself without the `otel` feature.
    pub fn run<F: Future>(self, delivery: F) -> impl Future<Output = F::Output> {
        #[cfg(feature = "otel")]
        return self.0.run(delivery);
        #[cfg(not(feature = "otel"))]
        delivery
    }
}

/// Names the handler of the current delivery, `group` (a command routed to
/// its handler by a command partition's delivery).
pub(crate) fn handler(group: &'static str) {
    #[cfg(feature = "otel")]
    otel::handler(group);
    #[cfg(not(feature = "otel"))]
    let _ = group;
}

/// `run`, a handler's run spawned by a delivery, in that delivery's span
/// and metrics (see [`handler`]).
pub(crate) fn carried(run: BoxFuture<'static, HandlerResult>) -> BoxFuture<'static, HandlerResult> {
    #[cfg(feature = "otel")]
    return otel::carried(run);
    #[cfg(not(feature = "otel"))]
    run
}

/// Records attempt `attempt` on the current delivery span; what the
/// attempt came to goes to [`Attempted::ended`].
pub(crate) fn attempt(attempt: u32) -> Attempted {
    #[cfg(feature = "otel")]
    {
        tracing::Span::current().record("ordo.attempt", attempt);
        Attempted {
            started: std::time::Instant::now(),
        }
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = attempt;
        Attempted {}
    }
}

/// A handler attempt under way, timed for `messaging.process.duration`.
#[must_use = "an attempt is recorded when it ends"]
pub(crate) struct Attempted {
    #[cfg(feature = "otel")]
    started: std::time::Instant,
}

impl Attempted {
    /// The attempt ended, successfully or with `failure`.
    pub(crate) fn ended(self, failure: Option<&Failure>) {
        #[cfg(feature = "otel")]
        otel::attempted(self.started.elapsed(), failure);
        #[cfg(not(feature = "otel"))]
        let _ = failure;
    }
}

/// Marks the current delivery span failed: its handler failed for good
/// with `reason`.
pub(crate) fn failed(reason: &str) {
    #[cfg(feature = "otel")]
    {
        let span = tracing::Span::current();
        span.record("otel.status_code", "ERROR");
        span.record(
            "otel.status_description",
            crate::contract::text::log_text(reason).to_string().as_str(),
        );
    }
    #[cfg(not(feature = "otel"))]
    let _ = reason;
}

/// The trace context `metadata` carries, as `(traceparent, tracestate)`.
pub fn context_of(metadata: &Metadata) -> (Option<&str>, Option<&str>) {
    (
        metadata.get(TRACEPARENT).map(String::as_str),
        metadata.get(TRACESTATE).map(String::as_str),
    )
}

#[cfg(feature = "otel")]
mod otel {
    use std::future::Future;
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    use opentelemetry::propagation::{Extractor, Injector};
    use tracing::Instrument as _;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use crate::contract::attempt::Failure;
    use crate::contract::handler::{BoxFuture, HandlerResult};

    use super::{TRACEPARENT, TRACESTATE};
    use crate::contract::message::{Envelope, Metadata};

    /// The envelope's metadata as the propagator writes it: only the
    /// trace context's keys.
    struct Writer<'a>(&'a mut Metadata);

    impl Injector for Writer<'_> {
        fn set(&mut self, key: &str, value: String) {
            if key == TRACEPARENT || key == TRACESTATE {
                self.0.insert(key.to_owned(), value);
            }
        }
    }

    /// The envelope's metadata as the propagator reads it: only the trace
    /// context's keys.
    struct Reader<'a>(&'a Metadata);

    impl Extractor for Reader<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            (key == TRACEPARENT || key == TRACESTATE)
                .then(|| self.0.get(key).map(String::as_str))
                .flatten()
        }

        fn keys(&self) -> Vec<&str> {
            [TRACEPARENT, TRACESTATE]
                .into_iter()
                .filter(|key| self.0.contains_key(*key))
                .collect()
        }
    }

    pub(super) fn publish(envelope: &mut Envelope) {
        let span = tracing::info_span!(
            "publish",
            otel.name = format!("publish {}", envelope.category).as_str(),
            otel.kind = "producer",
            messaging.system = "ordo",
            messaging.destination.name = envelope.category.as_str(),
            messaging.operation.type = "send",
            messaging.operation.name = "publish",
            messaging.message.id = envelope.id.as_str(),
            ordo.message_type = envelope.type_name.as_str(),
            ordo.correlation_id = envelope.correlation(),
            ordo.causation_id = envelope.causation_id.as_deref(),
        );
        if span.is_disabled() {
            return;
        }
        let context = span.context();
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut Writer(&mut envelope.metadata));
        });
    }

    tokio::task_local! {
        /// The labels of the delivery the current task runs.
        static DELIVERY: Arc<Labels>;
    }

    /// A delivery's metric labels.
    struct Labels {
        system: &'static str,
        destination: String,
        /// The handler: known at the start, or once a command is routed.
        group: OnceLock<String>,
    }

    impl Labels {
        fn of(&self, error: Option<&'static str>) -> Vec<metrics::Label> {
            let mut labels = vec![
                metrics::Label::from_static_parts("messaging.operation.name", "process"),
                metrics::Label::from_static_parts("messaging.system", self.system),
                metrics::Label::new("messaging.destination.name", self.destination.clone()),
            ];
            if let Some(group) = self.group.get() {
                labels.push(metrics::Label::new(
                    "messaging.consumer.group.name",
                    group.clone(),
                ));
            }
            if let Some(error) = error {
                labels.push(metrics::Label::from_static_parts("error.type", error));
            }
            labels
        }
    }

    /// A delivery's span and metric labels.
    pub(super) struct Process {
        span: tracing::Span,
        labels: Arc<Labels>,
    }

    impl Process {
        pub(super) fn new(
            envelope: &Envelope,
            system: &'static str,
            group: &str,
            fencing_token: u64,
        ) -> Self {
            let labels = Arc::new(Labels {
                system,
                destination: envelope.category.clone(),
                group: OnceLock::new(),
            });
            if !group.is_empty() {
                let _ = labels.group.set(group.to_owned());
            }
            Self {
                span: span(envelope, system, group, fencing_token),
                labels,
            }
        }

        pub(super) fn run<F: Future>(self, delivery: F) -> impl Future<Output = F::Output> {
            let Self { span, labels } = self;
            let counted = Arc::clone(&labels);
            DELIVERY
                .scope(labels, async move {
                    let output = delivery.await;
                    metrics::counter!(super::CONSUMED_MESSAGES, counted.of(None)).increment(1);
                    output
                })
                .instrument(span)
        }
    }

    pub(super) fn handler(group: &'static str) {
        tracing::Span::current().record("messaging.consumer.group.name", group);
        let _ = DELIVERY.try_with(|labels| labels.group.set(group.to_owned()));
    }

    pub(super) fn carried(run: BoxFuture<'static, HandlerResult>) -> BoxFuture<'static, HandlerResult> {
        match DELIVERY.try_with(Arc::clone) {
            Ok(labels) => Box::pin(DELIVERY.scope(labels, run)),
            Err(_) => run,
        }
    }

    pub(super) fn attempted(duration: Duration, failure: Option<&Failure>) {
        let error = failure.map(|failure| {
            if failure.timed_out() {
                "timeout"
            } else if failure.panicked() {
                "panic"
            } else {
                "handler_error"
            }
        });
        let _ = DELIVERY.try_with(|labels| {
            metrics::histogram!(super::PROCESS_DURATION, labels.of(error)).record(duration.as_secs_f64());
        });
    }

    fn span(envelope: &Envelope, system: &'static str, group: &str, fencing_token: u64) -> tracing::Span {
        let span = tracing::info_span!(
            "process",
            otel.name = format!("process {}", envelope.category).as_str(),
            otel.kind = "consumer",
            otel.status_code = tracing::field::Empty,
            otel.status_description = tracing::field::Empty,
            messaging.system = system,
            messaging.destination.name = envelope.category.as_str(),
            messaging.operation.type = "process",
            messaging.operation.name = "process",
            messaging.message.id = envelope.id.as_str(),
            messaging.consumer.group.name = tracing::field::Empty,
            ordo.message_type = envelope.type_name.as_str(),
            ordo.partition_key = envelope.partition_key.as_deref(),
            ordo.attempt = tracing::field::Empty,
            ordo.fencing_token = fencing_token,
            ordo.correlation_id = envelope.correlation(),
            ordo.causation_id = envelope.causation_id.as_deref(),
        );
        if span.is_disabled() {
            return span;
        }
        if !group.is_empty() {
            span.record("messaging.consumer.group.name", group);
        }
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&Reader(&envelope.metadata))
        });
        // Only a tracing subscriber without OpenTelemetry's layer refuses a
        // parent: the span then simply has none.
        let _ = span.set_parent(parent);
        span
    }
}
