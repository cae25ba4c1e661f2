//! Each gate as an OpenTelemetry trace, sent to an OTLP collector when
//! `--otlp-endpoint` (or the standard `OTEL_*` variables) names one.
//!
//! - `build`: the pure part — a finished gate's state and journal become a
//!   plan of spans (root: the gate; one child per expected member; the
//!   journal's facts as events), times from the cluster, so a restarted
//!   nodegate draws a gate already in progress right;
//! - `ids`: the trace's and spans' ids, derived from the node's uid and the
//!   gate's start (the same gate is always the same trace);
//! - `spans`: the plan as OpenTelemetry span data;
//! - `config`: the endpoint, timeout and resource from the flag and the
//!   environment;
//! - `export`: the bounded queue and the task that exports, never blocking
//!   a gate (what it cannot send is counted, not waited for).
//!
//! docs/operations.md ("Tracing") describes the spans for operators;
//! docs/development.md ("Tracing") the export queue, the ids and the tests.

pub mod build;
pub mod config;
pub mod export;
pub mod ids;
pub mod spans;

pub use export::TraceSink;
