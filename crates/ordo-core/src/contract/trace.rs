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
//! The spans are `tracing` spans at level INFO: an application keeps its
//! subscriber and adds `tracing-opentelemetry`'s layer to it (the facade's
//! `ordo::otel` sets both up from the standard `OTEL_*` variables).

use crate::contract::message::{Envelope, Metadata};

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

/// The span a broker runs the delivery of `envelope` in: `process
/// <category>` (kind consumer), child of the context its publication left
/// in the envelope, for handler `group` on broker `system` under
/// `fencing_token` (0 without a lease). An empty `group` is recorded later
/// (a command partition's delivery names its handler once it has routed
/// the command). [`tracing::Span::none`] without the
/// `otel` feature.
pub fn process(envelope: &Envelope, system: &'static str, group: &str, fencing_token: u64) -> tracing::Span {
    #[cfg(feature = "otel")]
    return otel::process(envelope, system, group, fencing_token);
    #[cfg(not(feature = "otel"))]
    {
        let _ = (envelope, system, group, fencing_token);
        tracing::Span::none()
    }
}

/// Records attempt `attempt` on the current delivery span.
pub(crate) fn attempt(attempt: u32) {
    #[cfg(feature = "otel")]
    tracing::Span::current().record("ordo.attempt", attempt);
    #[cfg(not(feature = "otel"))]
    let _ = attempt;
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
    use opentelemetry::propagation::{Extractor, Injector};
    use tracing_opentelemetry::OpenTelemetrySpanExt;

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

    pub(super) fn process(
        envelope: &Envelope,
        system: &'static str,
        group: &str,
        fencing_token: u64,
    ) -> tracing::Span {
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
