//! Each gate that opened as an OpenTelemetry trace, sent to an OTLP collector
//! when `--otlp-endpoint` (or the standard `OTEL_*` variables) names one; see
//! docs/operations.md, "Tracing", and docs/development.md, "Tracing".

pub mod build;
pub mod config;
pub mod export;
pub mod ids;
pub mod spans;

pub use export::TraceSink;
