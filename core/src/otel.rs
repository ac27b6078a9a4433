//! OpenTelemetry export (cargo feature `otel`): when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set, the runtime's spans also go to that collector over OTLP
//! HTTP/protobuf (docs/tracing.md).
//!
//! Spans are batched by the SDK's own export thread and sent with a
//! blocking HTTP client, so no async runtime is needed in the process.
//! The usual `OTEL_*` variables (service name, resource attributes,
//! headers, batch sizes, timeouts) apply as the SDK reads them.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The variables that name a collector; none set: no export.
const ENDPOINT_VARS: &[&str] = &[
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The service name when `OTEL_SERVICE_NAME` does not give one.
const SERVICE_NAME: &str = "monarch";

/// This process's provider, once the layer is installed.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

fn endpoint_configured() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// The `tracing` layer that exports spans to the configured collector, or
/// `None` when no endpoint is set or the exporter cannot be built (said on
/// stderr). `process` names this process (resource `monarch.process`).
pub fn layer<S>(process: String) -> Option<impl Layer<S>>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if !endpoint_configured() {
        return None;
    }
    let exporter = match SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            eprintln!("monarch: OpenTelemetry exporter not started: {e}");
            return None;
        }
    };
    let mut resource = Resource::builder()
        .with_attribute(KeyValue::new("process.pid", i64::from(std::process::id())))
        .with_attribute(KeyValue::new("monarch.process", process));
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some()
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|a| a.contains("service.name="));
    if !named {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("monarch");
    let _ = PROVIDER.set(provider);
    Some(tracing_opentelemetry::layer().with_tracer(tracer))
}

/// Send the spans the exporter holds now (a no-op when it is off); waits
/// at most the exporter's timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`).
pub fn flush() {
    if let Some(p) = PROVIDER.get() {
        if let Err(e) = p.force_flush() {
            tracing::debug!(error = %e, "OpenTelemetry flush failed");
        }
    }
}
