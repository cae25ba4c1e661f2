//! Evidence of the API server's clock (semantics.md §5, "Clock skew").
//!
//! A gate's deadline is API-server time (a node's `creationTimestamp`, or its
//! `gated-since`); the deadline timer fires on this process's clock. So that
//! a clock ahead of the server's cannot open every new node at once, the
//! gate also wants the deadline passed by the server's clock. This module
//! keeps the evidence: the newest time the API server itself stamped on an
//! object this process saw — a `creationTimestamp`, a `managedFields` entry's
//! `time` (set by the server whenever a writer changes a field: kubelets'
//! status updates, every Lease renewal) — carried forward on the monotonic
//! clock, which no wall-clock step moves. That is a lower bound of the
//! server's now, late by the time the stamp took to reach us (and up to a
//! second for the stamps' precision).
//!
//! One instance serves the process ([`SERVER_TIME`]), fed by the watches and
//! the leader election, read by the gates' clock. It decides nothing.

use std::sync::Mutex;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The process's evidence of the API server's clock.
pub static SERVER_TIME: ServerTime = ServerTime::new();

/// The best evidence seen so far: a server time and the monotonic instant
/// it was seen at.
#[derive(Debug, Default)]
pub struct ServerTime {
    best: Mutex<Option<(Timestamp, Instant)>>,
}

impl ServerTime {
    pub const fn new() -> Self {
        ServerTime {
            best: Mutex::new(None),
        }
    }

    /// The API server's clock read at least `at` just now.
    pub fn saw(&self, at: Timestamp) {
        self.saw_at(at, Instant::now());
    }

    /// Every server-stamped time of an object: its creation and the time of
    /// each `managedFields` entry.
    pub fn saw_object(&self, meta: &ObjectMeta) {
        let stamps = meta.creation_timestamp.iter().map(|t| t.0).chain(
            meta.managed_fields
                .iter()
                .flatten()
                .filter_map(|m| m.time.as_ref().map(|t| t.0)),
        );
        if let Some(newest) = stamps.max() {
            self.saw(newest);
        }
    }

    /// A time the API server's clock has certainly reached by now (as far
    /// as the evidence goes); `None` before any evidence.
    pub fn now(&self) -> Option<Timestamp> {
        self.now_at(Instant::now())
    }

    pub(crate) fn saw_at(&self, at: Timestamp, seen: Instant) {
        let mut best = self.best.lock().unwrap_or_else(|p| p.into_inner());
        let better = match *best {
            None => true,
            Some(old) => carried(old, seen).is_none_or(|now| at > now),
        };
        if better {
            *best = Some((at, seen));
        }
    }

    pub(crate) fn now_at(&self, instant: Instant) -> Option<Timestamp> {
        let best = *self.best.lock().unwrap_or_else(|p| p.into_inner());
        best.and_then(|b| carried(b, instant))
    }
}

/// `(at, seen)` carried forward to `instant` on the monotonic clock.
fn carried((at, seen): (Timestamp, Instant), instant: Instant) -> Option<Timestamp> {
    let elapsed = SignedDuration::try_from(instant.saturating_duration_since(seen)).ok()?;
    at.checked_add(elapsed).ok()
}

#[cfg(test)]
mod tests;
