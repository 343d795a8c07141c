//! Traces through the broker on OpenTelemetry (the `otel` feature).
//!
//! With the feature on, every envelope made while a span is current carries
//! that span's W3C trace context (`traceparent`, `tracestate` in its
//! metadata), and every broker runs each delivery in a `process <category>`
//! span (kind consumer), child of the publication's context, with
//! OpenTelemetry's messaging attributes: see [`crate::contract::trace`].
//! The spans are `tracing` spans; [`Otel`] is the OpenTelemetry side: a
//! tracer provider, the W3C propagator, and the layer to add to the
//! application's own `tracing` subscriber.
//!
//! ```no_run
//! use tracing_subscriber::layer::SubscriberExt as _;
//! use tracing_subscriber::util::SubscriberInitExt as _;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // OTLP over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (default
//! // http://localhost:4318), as service OTEL_SERVICE_NAME.
//! let otel = ordo::otel::Otel::from_env()?;
//! tracing_subscriber::registry()
//!     .with(tracing_subscriber::fmt::layer())
//!     .with(otel.layer())
//!     .init();
//! // ... run the domain ...
//! otel.shutdown()?; // exports what is left
//! # Ok(()) }
//! ```

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider, SpanExporter};
use tracing_opentelemetry::OpenTelemetryLayer;

pub use opentelemetry;
pub use opentelemetry_sdk;
pub use tracing_opentelemetry;

/// The instrumentation scope Ordo's spans are exported under.
pub const SCOPE: &str = "ordo";

/// Setting up or shutting down OpenTelemetry failed.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// The OTLP exporter could not be built (a malformed endpoint, say).
    #[error(
        "cannot build the OTLP/HTTP span exporter (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): {0}"
    )]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// Flushing or shutting the tracer provider down failed.
    #[error("cannot export the last spans: {0}")]
    Shutdown(#[from] opentelemetry_sdk::error::OTelSdkError),
}

/// OpenTelemetry for an Ordo application: the tracer provider spans are
/// exported through, installed as the global one together with the W3C
/// trace-context propagator (which carries traces through envelopes).
#[derive(Debug)]
pub struct Otel {
    provider: SdkTracerProvider,
}

impl Otel {
    /// Exports over OTLP/HTTP (protobuf) in batches, configured by the
    /// standard variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`), `OTEL_EXPORTER_OTLP_HEADERS`,
    /// `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`.
    pub fn from_env() -> Result<Self, OtelError> {
        Self::from_env_named(None)
    }

    /// [`Otel::from_env`], as service `service` unless `OTEL_SERVICE_NAME`
    /// names one.
    pub fn from_env_named(service: Option<&str>) -> Result<Self, OtelError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder().with_http().build()?;
        Ok(Self::install(
            SdkTracerProvider::builder().with_batch_exporter(exporter),
            service,
        ))
    }

    /// Exports each span as it ends through `exporter` (an in-memory one in
    /// tests, say).
    pub fn with_exporter(exporter: impl SpanExporter + 'static) -> Self {
        Self::install(SdkTracerProvider::builder().with_simple_exporter(exporter), None)
    }

    fn install(builder: opentelemetry_sdk::trace::TracerProviderBuilder, service: Option<&str>) -> Self {
        let mut resource = opentelemetry_sdk::Resource::builder();
        if let Some(service) = service.filter(|_| std::env::var_os("OTEL_SERVICE_NAME").is_none()) {
            resource = resource.with_service_name(service.to_owned());
        }
        let provider = builder.with_resource(resource.build()).build();
        opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
        opentelemetry::global::set_tracer_provider(provider.clone());
        Self { provider }
    }

    /// The `tracing` layer that turns spans into OpenTelemetry spans: add
    /// it to the application's subscriber.
    pub fn layer<S>(&self) -> OpenTelemetryLayer<S, SdkTracer>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer(SCOPE))
    }

    /// The tracer provider.
    pub fn provider(&self) -> &SdkTracerProvider {
        &self.provider
    }

    /// Exports the spans not exported yet, then stops the provider.
    pub fn shutdown(self) -> Result<(), OtelError> {
        self.provider.force_flush()?;
        self.provider.shutdown()?;
        Ok(())
    }
}
