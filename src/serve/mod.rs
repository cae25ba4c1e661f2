//! The HTTP side of `nodegate run`: liveness and readiness, Prometheus
//! metrics, and the per-node debug journal.

pub mod http;
pub mod metrics;
