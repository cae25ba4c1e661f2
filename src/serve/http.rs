//! The HTTP server: routing and handlers for `/healthz`, `/readyz`,
//! `/metrics`, `/debug/nodes` and `/debug/nodes/{name}`, and the JSON those
//! debug endpoints show.
//!
//! Handlers only read: the router's indexes and gate views, the metrics
//! registry, the health record and the history of finished gates
//! (`serve::health`). Nothing here can change a gate or write to the
//! cluster, and no handler holds a lock across an await. The bound address is
//! logged as `listening on HOST:PORT` (port 0 picks a free one), which tests
//! and scripts may parse.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use jiff::Timestamp;
use nodegate_actors::messages::GateView;
use nodegate_actors::router::Router;
use nodegate_core::gate::{Expectation, GateState, Phase, Readiness};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::cluster::watch::WatchStats;
use crate::error::{Error, Result};
use crate::serve::health::{Health, History};
use crate::serve::metrics::{self, Metrics};

/// Gate views asked for at once by `/debug/nodes`; each is one actor
/// round-trip.
const VIEW_CONCURRENCY: usize = 32;

#[derive(Clone)]
pub struct AppState {
    pub router: Arc<Router>,
    pub metrics: Arc<Metrics>,
    pub history: Arc<History>,
    pub watch_stats: Arc<WatchStats>,
    pub health: Arc<Health>,
}

pub fn app(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/debug/nodes", get(debug_nodes))
        .route("/debug/nodes/{name}", get(debug_node))
        .with_state(state)
}

/// Binds `addr` and serves until `shutdown` changes; returns once bound, with
/// the address actually bound (port 0 → a free port).
pub async fn serve(
    addr: SocketAddr,
    state: AppState,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(Error::io(format!("cannot listen on {addr} (--http-addr)")))?;
    let bound = listener.local_addr().map_err(Error::io(format!(
        "cannot read the address bound for {addr}"
    )))?;
    tracing::info!("listening on {bound}");
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(async move {
        let _ = shutdown.changed().await;
    });
    let task = tokio::spawn(async move {
        if let Err(error) = server.await {
            tracing::error!(%error, "the HTTP server failed");
        }
    });
    Ok((bound, task))
}

async fn healthz(State(s): State<AppState>) -> Response {
    let mut problems: Vec<String> = s.health.problems().into_iter().map(String::from).collect();
    problems.extend(
        s.watch_stats
            .stopped()
            .into_iter()
            .map(|kind| format!("the {kind} watch has stopped")),
    );
    if problems.is_empty() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {}\n", problems.join("; ")),
        )
            .into_response()
    }
}

async fn readyz(State(s): State<AppState>) -> Response {
    if s.router.is_synced() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the initial lists of nodes, DaemonSets and pods are not in yet\n",
        )
            .into_response()
    }
}

async fn metrics_text(State(s): State<AppState>) -> Response {
    s.metrics.refresh(
        &s.router,
        s.watch_stats.restarts.load(Ordering::Relaxed),
        Timestamp::now(),
    );
    match s.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode the metrics: {e}\n"),
        )
            .into_response(),
    }
}

async fn debug_nodes(State(s): State<AppState>) -> Response {
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

async fn debug_node(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    let now = Timestamp::now();
    if let Some(view) = s.router.view(&name).await {
        return Json(detail(&view, true, now)).into_response();
    }
    if let Some(view) = s.history.get(&name) {
        return Json(detail(&view, false, now)).into_response();
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

fn age_seconds(state: &GateState, now: Timestamp) -> Option<f64> {
    state
        .gate_start()
        .map(|start| (now.duration_since(start).as_secs_f64() * 10.0).round() / 10.0)
}

/// One line of `/debug/nodes`.
fn summary(view: &GateView, now: Timestamp) -> Value {
    let s = &view.state;
    let (expected, ready) = counts(s);
    json!({
        "node": view.node,
        "phase": s.phase,
        "expected": expected,
        "ready": ready,
        "blocked_by": s.blockers().iter().map(|b| b.member.to_string()).collect::<Vec<_>>(),
        "node_not_ready": s.node_wait_reason(),
        "gate_start": s.gate_start(),
        "age_seconds": age_seconds(s, now),
        "deadline": deadline(s),
    })
}

fn deadline(s: &GateState) -> Option<Timestamp> {
    // Only a gate still waiting has a deadline ahead of it.
    match s.phase {
        Phase::Waiting | Phase::Opening => s.timers.deadline,
        _ => None,
    }
}

/// `/debug/nodes/{name}`.
fn detail(view: &GateView, live: bool, now: Timestamp) -> Value {
    let s = &view.state;
    let (expected, ready) = counts(s);
    json!({
        "node": view.node,
        "live": live,
        "phase": s.phase,
        "gate_start": s.gate_start(),
        "age_seconds": if live { age_seconds(s, now) } else { None },
        "deadline": deadline(s),
        "expected_count": expected,
        "ready_count": ready,
        "expected": members(s),
        "blocked_by": s.blockers(),
        "node_not_ready": s.node_wait_reason(),
        "write": s.write,
        "timed_out": s.timed_out,
        "opened": s.opened,
        "stopped": s.stopped.map(|r| r.to_string()),
        "journal": view.journal,
        "journal_dropped": view.journal_dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::health::tests::opened_gate;
    use nodegate_core::testutil::ts;

    #[test]
    fn detail_shows_members_with_reasons_and_the_journal_in_order() {
        let (state, journal) = opened_gate("a");
        let view = GateView {
            node: "a".into(),
            state,
            journal: journal.entries().cloned().collect(),
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
}
