//! The HTTP side of `nodegate run`: the listeners' bounds (`conn`), routing (`http`), liveness and readiness
//! (`health`), the finished gates' debug journals (`history`), Prometheus
//! metrics (`metrics`), and the admission webhook with the controller of its
//! certificates (`webhook`).

pub mod conn;
pub mod health;
pub mod history;
pub mod http;
pub mod metrics;
pub mod webhook;
