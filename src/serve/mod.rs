//! The HTTP side of `nodegate run`: probes, metrics, `/debug/nodes` and the
//! admission webhook.

pub mod conn;
pub mod health;
pub mod history;
pub mod http;
pub mod metrics;
pub mod places;
pub mod webhook;

/// `m` locked, even if a panic elsewhere poisoned it: what the HTTP side
/// keeps behind a lock (counters, records, views) is still good to read.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
