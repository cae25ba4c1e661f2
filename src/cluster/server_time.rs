//! Evidence of the API server's clock (semantics.md §5.3; docs/operations.md,
//! Clocks), for every decision that wants "server now" ([`ServerTime::now`]).
//!
//! A gate's deadline is API-server time; its timer fires on this process's
//! clock. So that a clock ahead of the server's cannot open every new node at
//! once, the deadline must also have passed by the server's clock. The
//! evidence is the newest time the API server itself stamped, carried forward
//! on the monotonic clock, which no wall-clock step moves: a lower bound of
//! the server's now, late by the time the stamp took to reach us (and up to a
//! second for the stamps' precision).
//!
//! Only stamps no other client can choose count: a `creationTimestamp`, the
//! `Date` header of the answer to this process's own [`probe`], and the
//! `managedFields` entry of nodegate's own field manager in the answer to its
//! own write ([`ServerTime::saw_own_write`]).
//!
//! Every other `managedFields` time is ignored: a client may send entries
//! with any time it likes, and the server keeps them, so one tenant's pod
//! dated 2099 would otherwise move "server now" to 2099 for good. Even a
//! trusted stamp more than [`MAX_AHEAD`] past the latest `Date` reading
//! (carried forward) is refused, logged and counted
//! (`nodegate_server_time_evidence_refused_total`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;
use kube::client::Body;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prometheus_client::metrics::counter::Counter;

/// How far past the latest `Date` reading (carried forward) a stamp may be
/// and still count as evidence: generous for a server whose objects' clock
/// is another replica's, far short of anything that could open a gate early
/// or collapse a grace period measured in minutes.
pub const MAX_AHEAD: SignedDuration = SignedDuration::from_mins(5);

/// The field manager nodegate's own writes appear under: the API server
/// names a manager after the client's User-Agent (`nodegate/VERSION`) up to
/// the first `/`.
pub const FIELD_MANAGER: &str = "nodegate";

/// A time and the monotonic instant it was seen at.
type Reading = (Timestamp, Instant);

/// The best evidence seen so far, and the latest `Date` reading that
/// bounds it.
#[derive(Debug, Default)]
pub struct ServerTime {
    best: Mutex<Option<Reading>>,
    date: Mutex<Option<Reading>>,
    /// Stamps refused for being far ahead of the `Date` reading.
    refused: Counter,
}

impl ServerTime {
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts refused stamps on `refused` (a metric's counter).
    pub fn counting(refused: Counter) -> Self {
        ServerTime {
            refused,
            ..Self::default()
        }
    }

    /// An object this process saw (watched or read): only its
    /// `creationTimestamp`, which the server sets on create, counts.
    pub fn saw_object(&self, meta: &ObjectMeta) {
        self.saw_created(meta.creation_timestamp.as_ref().map(|t| t.0));
    }

    /// [`Self::saw_object`] of an object whose `creationTimestamp` this is.
    pub fn saw_created(&self, created: Option<Timestamp>) {
        if let Some(created) = created {
            self.offer_at(created, Instant::now(), "creationTimestamp");
        }
    }

    /// The answer to nodegate's own write: its `creationTimestamp` and the
    /// `managedFields` entry of [`FIELD_MANAGER`], which that write just
    /// stamped. Entries of other managers are ignored.
    pub fn saw_own_write(&self, meta: &ObjectMeta) {
        self.saw_object(meta);
        let entries = meta.managed_fields.iter().flatten();
        let own = entries.filter(|m| m.manager.as_deref() == Some(FIELD_MANAGER));
        if let Some(at) = own.filter_map(|m| m.time.as_ref().map(|t| t.0)).max() {
            self.offer_at(at, Instant::now(), "own write's managedFields");
        }
    }

    /// A time the API server's clock has certainly reached by now (as far
    /// as the evidence goes); `None` before any evidence.
    pub fn now(&self) -> Option<Timestamp> {
        self.now_at(Instant::now())
    }

    /// How many stamps were refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.get()
    }

    /// The `Date` header of an answer to this process's own request (the
    /// server's clock when it answered), seen at `seen`.
    pub(crate) fn saw_date_at(&self, at: Timestamp, seen: Instant) {
        keep_newer(&self.date, at, seen);
        self.saw_at(at, seen);
    }

    /// Evidence from a trusted source, refused when it is more than
    /// [`MAX_AHEAD`] past the latest `Date` reading. Without any reading
    /// yet it is taken: the sources are the server's own stamps, and the
    /// probe's first answer arrives at start-up.
    pub(crate) fn offer_at(&self, at: Timestamp, seen: Instant, source: &'static str) -> bool {
        let bound = (*lock(&self.date))
            .and_then(|d| carried(d, seen))
            .and_then(|d| d.checked_add(MAX_AHEAD).ok());
        if let Some(bound) = bound
            && at > bound
        {
            self.refused.inc();
            tracing::warn!(
                stamp = %at, source, date_header_bound = %bound,
                "refused evidence of the API server's clock: it is more than {MAX_AHEAD:#} ahead of the server's latest Date header"
            );
            return false;
        }
        self.saw_at(at, seen);
        true
    }

    pub(crate) fn saw_at(&self, at: Timestamp, seen: Instant) {
        keep_newer(&self.best, at, seen);
    }

    pub(crate) fn now_at(&self, instant: Instant) -> Option<Timestamp> {
        (*lock(&self.best)).and_then(|b| carried(b, instant))
    }
}

/// Locks `m`; a poisoned lock is still used (no holder leaves its data half-changed).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Puts `at`, seen at `seen`, in `slot` if it beats the reading there
/// carried forward to then.
fn keep_newer(slot: &Mutex<Option<Reading>>, at: Timestamp, seen: Instant) {
    let mut old = lock(slot);
    if old.is_none_or(|old| carried(old, seen).is_none_or(|now| at > now)) {
        *old = Some((at, seen));
    }
}

/// How often the probe asks once it has an answer: evidence is carried
/// forward exactly, so this only limits how long a drift of the two clocks'
/// rates can accumulate.
pub const PROBE_PERIOD: Duration = Duration::from_secs(60);
/// The wait after a probe that got no usable answer.
pub const PROBE_RETRY: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the API server for its clock (`GET /version`, which every
/// authenticated client may read), at once and then every [`PROBE_PERIOD`],
/// for as long as the process runs.
pub async fn probe(client: Client, server_time: Arc<ServerTime>) {
    let mut warned = false;
    loop {
        let wait = match tokio::time::timeout(PROBE_TIMEOUT, server_date(&client)).await {
            Ok(Ok(at)) => {
                server_time.saw_date_at(at, Instant::now());
                PROBE_PERIOD
            }
            Ok(Err(error)) => {
                if !std::mem::replace(&mut warned, true) {
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
    let found = response.headers().get(http::header::DATE);
    let header = found.ok_or("the answer has no Date header")?;
    let date = header.to_str().map_err(|e| e.to_string())?;
    http_date(date).ok_or_else(|| format!("unreadable Date header {date:?}"))
}

/// An HTTP `Date` header (RFC 9110's IMF-fixdate, e.g. `Tue, 24 Nov 2026
/// 01:44:41 GMT`).
pub(crate) fn http_date(value: &str) -> Option<Timestamp> {
    let parser = jiff::fmt::rfc2822::DateTimeParser::new();
    parser.parse_timestamp(value).ok()
}

/// `(at, seen)` carried forward to `instant` on the monotonic clock.
fn carried((at, seen): (Timestamp, Instant), instant: Instant) -> Option<Timestamp> {
    let elapsed = SignedDuration::try_from(instant.saturating_duration_since(seen)).ok()?;
    at.checked_add(elapsed).ok()
}

/// The system clock, and the evidence of the API server's clock.
pub struct SystemClock {
    pub server_time: Arc<ServerTime>,
}

impl nodegate_actors::ports::Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }

    fn server_now(&self) -> Option<Timestamp> {
        self.server_time.now()
    }
}

#[cfg(test)]
mod tests;
