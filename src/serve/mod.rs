//! The HTTP side of `nodegate run`: routing (`http`), liveness and the
//! history of finished gates (`health`), Prometheus metrics (`metrics`), and
//! the per-node debug journal.

pub mod health;
pub mod http;
pub mod metrics;
pub mod webhook;
