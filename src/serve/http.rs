//! The HTTP servers: probes and `/metrics` on `--http-addr`; `/debug/nodes`
//! on its own listener, `--debug-addr`, since it shows node labels, taints
//! and pod names and must stay off the address probes and Prometheus reach.
//!
//! Handlers only read: none changes a gate, writes to the cluster or holds a
//! lock across an await. The bound addresses are logged as `listening on
//! HOST:PORT` and `debug listener on HOST:PORT`; tests and scripts parse both.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::{FutureExt, StreamExt};
use jiff::Timestamp;
use nodegate_actors::messages::GateView;
use nodegate_actors::router::Router;
use nodegate_core::gate::{GateState, Phase};
use nodegate_core::vocab::member::{Expectation, Readiness};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

use crate::cluster::watch::WatchStats;
use crate::error::Result;
use crate::serve::conn::{self, Limits, Refused};
use crate::serve::health::ProcessHealth;
use crate::serve::history::History;
use crate::serve::metrics::{self, Metrics};
use crate::serve::places::Place;

/// Gate views asked for at once by `/debug/nodes`; each is one actor
/// round-trip.
const VIEW_CONCURRENCY: usize = 32;

/// Debug requests served at once; one more is refused with 503. A listing
/// visits every gate, so this bounds the actor round trips a loop of `curl`
/// can cost to `DEBUG_CONCURRENCY × VIEW_CONCURRENCY` in flight.
pub const DEBUG_CONCURRENCY: usize = 2;

/// What the debug listener's handlers read, and the permits that bound them.
#[derive(Clone)]
pub struct DebugState {
    pub router: Arc<Router>,
    pub history: Arc<History>,
    pub permits: Arc<Semaphore>,
}

impl DebugState {
    pub fn new(router: Arc<Router>, history: Arc<History>) -> DebugState {
        DebugState {
            router,
            history,
            permits: Arc::new(Semaphore::new(DEBUG_CONCURRENCY)),
        }
    }
}

#[derive(Clone)]
pub struct AppState {
    pub router: Arc<Router>,
    pub metrics: Arc<Metrics>,
    pub watch_stats: Arc<WatchStats>,
    pub health: Arc<ProcessHealth>,
}

/// Binds `addr` and serves health, readiness and metrics until `shutdown`
/// changes; returns once bound, with the address actually bound.
pub async fn serve(
    addr: SocketAddr,
    state: AppState,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(state);
    listen(addr, "--http-addr", "listening on", app, shutdown).await
}

/// Binds `addr` (`--debug-addr`) and serves the debug endpoints until
/// `shutdown` changes.
pub async fn serve_debug(
    addr: SocketAddr,
    state: DebugState,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let app = axum::Router::new()
        .route("/debug/nodes", get(debug_nodes))
        .route("/debug/nodes/{name}", get(debug_node))
        .with_state(state);
    listen(addr, "--debug-addr", "debug listener on", app, shutdown).await
}

async fn listen(
    addr: SocketAddr,
    flag: &str,
    what: &str,
    app: axum::Router,
    shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let (listener, bound) = conn::bind(addr, flag).await?;
    tracing::info!("{what} {bound}");
    let limits = Limits::DEFAULT;
    let task = tokio::spawn(conn::accept_loop(
        listener,
        limits,
        "HTTP listener",
        Arc::new(Refused::default()),
        shutdown,
        move |tcp, place| serve_one(tcp, place, app.clone(), limits),
    ));
    Ok((bound, task))
}

/// One connection of a plain HTTP listener, within `limits`.
async fn serve_one(tcp: tokio::net::TcpStream, place: Place, app: axum::Router, limits: Limits) {
    let late = || ok_or_503(false, "the answer took too long\n");
    let answer = move |req: hyper::Request<hyper::body::Incoming>| {
        app.clone()
            .oneshot(req)
            .map(|r| r.unwrap_or_else(|n| match n {}))
    };
    if let Err(error) = conn::serve_http(tcp, place, limits, answer, late).await {
        tracing::debug!(%error, "HTTP connection ended with an error");
    }
}

/// The answer to a debug request beyond the bound.
fn too_many_debug_requests() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        Json(json!({
            "error": format!(
                "too many debug requests at once (at most {DEBUG_CONCURRENCY}); retry shortly"
            )
        })),
    )
        .into_response()
}

async fn healthz(State(s): State<AppState>) -> Response {
    let watches = s.watch_stats.stopped().into_iter();
    let mut problems: Vec<String> = s.health.problems().into_iter().map(String::from).collect();
    problems.extend(watches.map(|kind| format!("the {kind} watch has stopped")));
    let text = match problems.is_empty() {
        true => "ok\n".to_string(),
        false => format!("unhealthy: {}\n", problems.join("; ")),
    };
    ok_or_503(problems.is_empty(), text)
}

fn ok_or_503(ok: bool, text: impl IntoResponse) -> Response {
    let status = match ok {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, text).into_response()
}

/// Ready once the initial lists are in. `?verbose` lists the checks, one a
/// line, Kubernetes style (`[+]` passes; `[!]` is a warning that leaves the
/// replica ready: the config file's trouble, see `ProcessHealth::config_checks`).
async fn readyz(State(s): State<AppState>, uri: Uri) -> Response {
    let webhook = s.health.webhook_state();
    let synced = s.router.is_synced() && webhook.as_ref().is_none_or(|w| w.serving);
    let verbose = uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv == "verbose" || kv.starts_with("verbose="))
    });
    if !verbose {
        let text = match synced {
            true => "ok\n",
            false => {
                "not ready: the initial lists are not in yet, or the webhook is not serving (see /readyz?verbose)\n"
            }
        };
        return ok_or_503(synced, text);
    }
    let mut text = if s.router.is_synced() {
        "[+]synced ok\n".to_string()
    } else {
        "[-]synced failed: the initial lists of nodes, DaemonSets and pods are not in yet\n"
            .to_string()
    };
    if let Some(w) = webhook {
        let mark = if w.serving {
            "[+]webhook ok"
        } else {
            "[-]webhook failed"
        };
        text.push_str(&format!("{mark}: {}\n", w.detail));
    }
    for check in std::iter::once(leader_check(&s.metrics)).chain(s.health.config_checks()) {
        text.push_str(&format!("{check}\n"));
    }
    text.push_str(match synced {
        true => "readyz check passed\n",
        false => "readyz check failed\n",
    });
    ok_or_503(synced, text)
}

/// The `/readyz?verbose` line about leadership. A warning only: the webhook
/// must stay reachable (it answers "unchanged" while no leader is known), so
/// this never makes the replica unready.
fn leader_check(metrics: &Metrics) -> crate::serve::health::Check {
    let leadership = &metrics.leadership;
    let (ok, detail) = match leadership.leader_known() {
        Ok(()) if !leadership.is_elected() => {
            (true, "no leader election: this replica writes".to_string())
        }
        Ok(()) if leadership.is_leader() => (true, "this replica leads".to_string()),
        Ok(()) => (true, "another replica leads".to_string()),
        Err(why) => (
            false,
            format!("{why}; the webhook admits new nodes unchanged until a leader is known"),
        ),
    };
    crate::serve::health::Check {
        ok,
        name: "leader",
        detail,
    }
}

/// The metrics page; scrapes within `metrics::SCRAPE_REUSE` of each other
/// share one refresh, so a loop of scrapes costs one O(gates) pass a second.
async fn metrics_text(State(s): State<AppState>) -> Response {
    let page = s
        .metrics
        .page(|| {
            s.metrics.refresh(
                &s.router,
                s.watch_stats.restarts.load(Ordering::Relaxed),
                Timestamp::now(),
            );
            s.metrics.encode()
        })
        .await;
    match page {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {e}\n"),
        )
            .into_response(),
    }
}

async fn debug_nodes(State(s): State<DebugState>) -> Response {
    let Ok(_permit) = Arc::clone(&s.permits).try_acquire_owned() else {
        return too_many_debug_requests();
    };
    let now = Timestamp::now();
    let router = Arc::clone(&s.router);
    let names = router.gated_nodes();
    let mut gated: Vec<Value> = futures::stream::iter(names)
        .map(|name| {
            let router = Arc::clone(&router);
            async move {
                match router.view(&name).await {
                    Some(view) => summary(&view, now),
                    // Busy for seconds, or stopped meanwhile: say so rather
                    // than leave the node out.
                    None => {
                        json!({"node": name, "phase": null, "error": "the gate did not answer"})
                    }
                }
            }
        })
        .buffer_unordered(VIEW_CONCURRENCY)
        .collect()
        .await;
    gated.sort_by(|a, b| a["node"].as_str().cmp(&b["node"].as_str()));
    Json(json!({
        "gated": gated,
        "recently_finished": s.history.recent(),
    }))
    .into_response()
}

async fn debug_node(State(s): State<DebugState>, Path(name): Path<String>) -> Response {
    let Ok(_permit) = Arc::clone(&s.permits).try_acquire_owned() else {
        return too_many_debug_requests();
    };
    let now = Timestamp::now();
    if let Some(view) = s.router.view(&name).await {
        return Json(detail(&view, true, now)).into_response();
    }
    match s.history.get(&name) {
        Some(Ok(view)) => return Json(detail(&view, false, now)).into_response(),
        Some(Err(e)) => {
            tracing::error!(node = %name, error = %e, "a finished gate's kept journal does not read back");
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({
                    "error": format!("node {name:?} finished, but its kept journal does not read back: {e}")
                })),
            )
                .into_response();
        }
        None => {}
    }
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "error": format!(
                "node {name:?} has no gate now and is not among the recently finished ones (see --debug-history)"
            )
        })),
    )
        .into_response()
}

#[derive(Serialize)]
struct MemberView<'a> {
    member: String,
    expected: bool,
    /// Why the member is not expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    /// Expected members only.
    #[serde(skip_serializing_if = "Option::is_none")]
    ready: Option<bool>,
    /// The Ready pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pod: Option<&'a str>,
    /// What an expected member that is not Ready waits for.
    #[serde(skip_serializing_if = "Option::is_none")]
    waiting: Option<&'a str>,
}

fn members(state: &GateState) -> Vec<MemberView<'_>> {
    state
        .members
        .iter()
        .map(|(id, m)| {
            let (reason, expected) = match &m.expectation {
                Expectation::Expected => (None, true),
                Expectation::NotExpected { reason, .. } => (Some(reason.as_str()), false),
            };
            let (ready, pod, waiting) = match &m.readiness {
                Some(Readiness::Ready { pod }) => (Some(true), Some(pod.as_str()), None),
                Some(Readiness::Waiting { why, .. }) => (Some(false), None, Some(why.as_str())),
                None if expected => (Some(false), None, Some("not evaluated yet")),
                None => (None, None, None),
            };
            MemberView {
                member: id.to_string(),
                expected,
                reason,
                ready,
                pod,
                waiting,
            }
        })
        .collect()
}

fn counts(state: &GateState) -> (usize, usize) {
    let expected = state.expected().count();
    let ready = state
        .expected()
        .filter(|(_, m)| m.readiness.as_ref().is_some_and(Readiness::is_ready))
        .count();
    (expected, ready)
}

/// The fields `/debug/nodes` and `/debug/nodes/{name}` share, the age as of
/// `now` (none for a finished gate), with `more`.
fn view_json(view: &GateView, now: Option<Timestamp>, more: Value) -> Value {
    let s = &view.state;
    let age = |(now, start): (Timestamp, Timestamp)| now.duration_since(start).as_secs_f64();
    // The deadline shows while the gate waits or opens; `--schedule-timeout`'s
    // earlier one only while it waits (the gate clears that one once passed,
    // or when it is no earlier than the deadline).
    let (waiting, opening) = (s.phase == Phase::Waiting, s.phase == Phase::Opening);
    let mut v = json!({
        "node": view.node,
        "phase": s.phase,
        "gate_start": s.gate_start(),
        "age_seconds": now.zip(s.gate_start()).map(|t| (age(t) * 10.0).round() / 10.0),
        "deadline": s.timers.deadline.filter(|_| waiting || opening),
        "schedule_deadline": s.timers.schedule_deadline.filter(|_| waiting),
        "node_not_ready": s.node_wait_reason(),
    });
    if let (Some(v), Value::Object(more)) = (v.as_object_mut(), more) {
        v.extend(more);
    }
    v
}

/// One line of `/debug/nodes`.
fn summary(view: &GateView, now: Timestamp) -> Value {
    let s = &view.state;
    let (expected, ready) = counts(s);
    let blocked_by: Vec<_> = s.blockers().iter().map(|b| b.member.to_string()).collect();
    let more = json!({"expected": expected, "ready": ready, "blocked_by": blocked_by});
    view_json(view, Some(now), more)
}

/// `/debug/nodes/{name}`.
fn detail(view: &GateView, live: bool, now: Timestamp) -> Value {
    let s = &view.state;
    let (expected, ready) = counts(s);
    let more = json!({
        "live": live,
        "expected_count": expected,
        "ready_count": ready,
        "expected": members(s),
        "blocked_by": s.blockers(),
        "write": s.write,
        "timed_out": s.timed_out,
        "opened": s.opened,
        "stopped": s.stopped.map(|r| r.to_string()),
        "journal": view.journal,
        "journal_dropped": view.journal_dropped,
    });
    view_json(view, live.then_some(now), more)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::history::tests::opened_gate;
    use nodegate_core::testutil::ts;

    #[tokio::test]
    async fn debug_requests_beyond_the_bound_get_503_and_retry_after() {
        let permits = Arc::new(Semaphore::new(DEBUG_CONCURRENCY));
        let debug_permit = || Arc::clone(&permits).try_acquire_owned().ok();
        let held: Vec<_> = (0..DEBUG_CONCURRENCY)
            .map(|_| debug_permit().expect("within the bound"))
            .collect();
        assert!(debug_permit().is_none(), "one beyond the bound");
        let refused = too_many_debug_requests();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(refused.into_body(), 1 << 16)
            .await
            .expect("body");
        let v: Value = serde_json::from_slice(&body).expect("JSON body");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("too many debug requests")),
            "{v}"
        );
        // A finished request gives its permit back.
        drop(held);
        assert!(debug_permit().is_some());
    }

    #[test]
    fn detail_shows_members_with_reasons_and_the_journal_in_order() {
        let (state, journal) = opened_gate("a");
        let view = GateView {
            node: "a".into(),
            state,
            journal: journal.entries().collect(),
            journal_dropped: 0,
        };
        let v = detail(&view, false, ts(10));
        assert_eq!(v["node"], "a");
        assert_eq!(v["phase"], "opened");
        assert_eq!(v["expected"][0]["member"], "infra/cni");
        assert_eq!(v["expected"][0]["ready"], true);
        assert_eq!(v["expected"][0]["pod"], "cni-1");
        let journal = v["journal"].as_array().expect("journal is a list");
        assert!(journal.len() >= 3);
        assert_eq!(journal[0]["at"], "1970-01-01T00:00:01Z");
        assert!(
            journal[0]["event"].get("snapshot").is_some(),
            "{}",
            journal[0]
        );
        assert!(
            journal
                .last()
                .and_then(|e| e["event"].get("opened"))
                .is_some(),
            "the last event is the opening: {}",
            v["journal"]
        );
    }

    #[test]
    fn a_waiting_gate_shows_its_schedule_deadline_and_a_finished_one_none() {
        let (mut state, journal) = opened_gate("a");
        state.timers.deadline = Some(ts(300));
        state.timers.schedule_deadline = Some(ts(60));
        let view = |state: GateState| GateView {
            node: "a".into(),
            state,
            journal: journal.entries().collect(),
            journal_dropped: 0,
        };
        let opened = view(state.clone());
        assert_eq!(summary(&opened, ts(10))["schedule_deadline"], Value::Null);
        state.phase = Phase::Waiting;
        let waiting = view(state);
        for v in [summary(&waiting, ts(10)), detail(&waiting, true, ts(10))] {
            assert_eq!(v["schedule_deadline"], "1970-01-01T00:01:00Z", "{v}");
            assert_eq!(v["deadline"], "1970-01-01T00:05:00Z", "{v}");
        }
    }
}
