//! Evidence of the API server's clock (semantics.md §5.3).
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
//! In a quiet cluster the newest stamp may be old when a process starts, so
//! the API server is also asked directly ([`probe`]): the `Date` header of a
//! `GET /version` (which every authenticated client may read) is the
//! server's clock when it answered, to the second.
//!
//! `run` makes one [`ServerTime`] and hands it to the watches, the probe and
//! the leader election, which feed it, and to the gates' clock, which reads
//! it. It decides nothing.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Client;
use kube::client::Body;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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

/// How often the probe asks once it has an answer: evidence is carried
/// forward exactly, so this only limits how long a drift of the two clocks'
/// rates can accumulate.
pub const PROBE_PERIOD: Duration = Duration::from_secs(60);
/// The wait after a probe that got no usable answer.
pub const PROBE_RETRY: Duration = Duration::from_secs(5);
/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the API server for its clock, at once and then every
/// [`PROBE_PERIOD`], for as long as the process runs.
pub async fn probe(client: Client, server_time: Arc<ServerTime>) {
    let mut warned = false;
    loop {
        let wait = match tokio::time::timeout(PROBE_TIMEOUT, server_date(&client)).await {
            Ok(Ok(at)) => {
                server_time.saw(at);
                PROBE_PERIOD
            }
            Ok(Err(error)) => {
                if !warned {
                    warned = true;
                    tracing::warn!(%error, "cannot read the API server's clock (GET /version); relying on the objects' timestamps");
                }
                PROBE_RETRY
            }
            Err(_) => PROBE_RETRY,
        };
        tokio::time::sleep(wait).await;
    }
}

async fn server_date(client: &Client) -> Result<Timestamp, String> {
    let request = http::Request::get("/version")
        .body(Body::from(Vec::new()))
        .map_err(|e| e.to_string())?;
    let response = client.send(request).await.map_err(|e| e.to_string())?;
    let date = response
        .headers()
        .get(http::header::DATE)
        .ok_or("the answer has no Date header")?
        .to_str()
        .map_err(|e| e.to_string())?;
    http_date(date).ok_or_else(|| format!("unreadable Date header {date:?}"))
}

/// An HTTP `Date` header (RFC 9110's IMF-fixdate, e.g. `Tue, 24 Nov 2026
/// 01:44:41 GMT`).
pub(crate) fn http_date(value: &str) -> Option<Timestamp> {
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()
}

/// `(at, seen)` carried forward to `instant` on the monotonic clock.
fn carried((at, seen): (Timestamp, Instant), instant: Instant) -> Option<Timestamp> {
    let elapsed = SignedDuration::try_from(instant.saturating_duration_since(seen)).ok()?;
    at.checked_add(elapsed).ok()
}

#[cfg(test)]
mod tests;
