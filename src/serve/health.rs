//! What the process knows about itself for the HTTP side: [`Health`], the
//! loops `/healthz` checks (the gate supervisor, the leader-election loop),
//! and [`History`], the bounded list of finished gates that `/debug/nodes`
//! and `/debug/nodes/{name}` still show after their actors are gone; and
//! the config file's record (in force since when, the last reload refused)
//! that `/readyz?verbose` shows.
//!
//! This module owns those two records; `run` and the gate observer write
//! them, the HTTP handlers read them. Every method takes one short lock or an
//! atomic and never waits; nothing here routes requests, changes a gate or
//! talks to the cluster.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use jiff::Timestamp;
use nodegate_actors::messages::GateView;
use nodegate_core::gate::{GateState, StopReason};
use nodegate_core::journal::Journal;
use serde_json::{Value, json};

/// The last N gates that finished (opened, or ended because the node or its
/// taint went away), newest last, as `/debug/nodes/{name}` shows them after
/// the actor is gone.
pub struct History {
    capacity: usize,
    views: Mutex<VecDeque<GateView>>,
}

impl History {
    pub fn new(capacity: usize) -> Self {
        History {
            capacity,
            views: Mutex::new(VecDeque::with_capacity(capacity.min(1024))),
        }
    }

    /// Keeps a finished gate; a gate stopped by shutdown, or one that never
    /// gated anything, is not worth a slot.
    pub fn gate_stopped(&self, node: &str, state: &GateState, journal: &Journal) {
        if self.capacity == 0 || !state.is_finished() || state.stopped == Some(StopReason::NotGated)
        {
            return;
        }
        let view = GateView {
            node: node.to_string(),
            state: state.clone(),
            journal: journal.entries().collect(),
            journal_dropped: journal.dropped(),
        };
        let mut views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views.retain(|v| v.node != node);
        views.push_back(view);
        while views.len() > self.capacity {
            views.pop_front();
        }
    }

    pub fn get(&self, node: &str) -> Option<GateView> {
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views.iter().rev().find(|v| v.node == node).cloned()
    }

    /// The finished gates, newest first, one line each, as `/debug/nodes`
    /// lists them under `recently_finished`.
    pub fn recent(&self) -> Vec<Value> {
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views
            .iter()
            .rev()
            .map(|v| {
                json!({
                    "node": v.node,
                    "phase": v.state.phase,
                    "opened_by": v.state.opened.as_ref().map(|o| o.opened_by),
                    "opened_at": v.state.opened.as_ref().map(|o| o.at),
                    "stopped": v.state.stopped.map(|s| s.to_string()),
                })
            })
            .collect()
    }
}

/// What `/healthz` checks: the loops that must run for the process to be of
/// any use; and the config file's story, which `/readyz?verbose` tells.
#[derive(Debug)]
pub struct Health {
    supervisor: AtomicBool,
    elector: AtomicBool,
    config: Mutex<ConfigRecord>,
}

/// The configuration in force and the last reload's trouble.
#[derive(Debug, Default)]
struct ConfigRecord {
    /// `--config`, if any.
    file: Option<String>,
    /// When the configuration in force was applied (start or a reload).
    applied_at: Option<Timestamp>,
    /// The last reload refused, when it was and why; cleared by one applied.
    refused: Option<(Timestamp, String)>,
    /// Keys the last reload applied changed that only a restart applies.
    needs_restart: Vec<&'static str>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            supervisor: AtomicBool::new(true),
            elector: AtomicBool::new(true),
            config: Mutex::new(ConfigRecord::default()),
        }
    }
}

/// One line of `/readyz?verbose`: `[+]` for a check that passes, `[!]` for a
/// warning that does not make the replica unready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub ok: bool,
    pub name: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = if self.ok { '+' } else { '!' };
        write!(f, "[{mark}]{} {}", self.name, self.detail)
    }
}

impl Health {
    pub fn supervisor_stopped(&self) {
        self.supervisor.store(false, Ordering::SeqCst);
    }
    pub fn elector_stopped(&self) {
        self.elector.store(false, Ordering::SeqCst);
    }
    fn config(&self) -> std::sync::MutexGuard<'_, ConfigRecord> {
        self.config.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configuration read at start is in force (from `file`, if any).
    pub fn config_started(&self, file: Option<String>, at: Timestamp) {
        let mut c = self.config();
        c.file = file;
        c.applied_at = Some(at);
    }

    /// A reload put a new configuration in force.
    pub fn config_applied(&self, at: Timestamp, needs_restart: Vec<&'static str>) {
        let mut c = self.config();
        c.applied_at = Some(at);
        c.refused = None;
        c.needs_restart = needs_restart;
    }

    /// A reload was refused; the configuration in force stays.
    pub fn config_refused(&self, at: Timestamp, why: String) {
        self.config().refused = Some((at, why));
    }

    /// The config file's lines of `/readyz?verbose`. A refused reload or a
    /// key waiting for a restart is a warning, not unreadiness: the
    /// configuration in force still works, and the admission webhook (served
    /// to the API server through the readiness of these pods) must stay up.
    pub fn config_checks(&self) -> Vec<Check> {
        let c = self.config();
        let from = c.file.as_deref().map_or_else(
            || " (flags only, no --config)".to_string(),
            |f| format!(" from {f}"),
        );
        let applied = c
            .applied_at
            .map_or_else(|| "not yet".to_string(), |t| t.to_string());
        let mut checks = vec![Check {
            ok: true,
            name: "config",
            detail: format!("in force since {applied}{from}"),
        }];
        if let Some((at, why)) = &c.refused {
            checks.push(Check {
                ok: false,
                name: "config-reload",
                detail: format!(
                    "the reload at {at} was refused, the configuration applied at {applied} stays in force: {why}"
                ),
            });
        }
        if !c.needs_restart.is_empty() {
            checks.push(Check {
                ok: false,
                name: "config-restart",
                detail: format!(
                    "the file changes keys that only a restart applies (their start values stay in force): {}",
                    c.needs_restart.join(", ")
                ),
            });
        }
        checks
    }

    /// What is wrong, one phrase per stopped loop; empty when healthy.
    pub fn problems(&self) -> Vec<&'static str> {
        let mut p = Vec::new();
        if !self.supervisor.load(Ordering::SeqCst) {
            p.push("the gate supervisor has stopped");
        }
        if !self.elector.load(Ordering::SeqCst) {
            p.push("the leader-election loop has stopped");
        }
        p
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nodegate_core::gate::{self, GateConfig, Input, PatchOutcome};
    use nodegate_core::testutil::{
        mk_ds, mk_node, mk_pod, taint, template_with_tolerations, toleration, ts,
    };

    /// A gate that opened (its one DaemonSet Ready, the untaint applied),
    /// with its journal; shared with the HTTP tests.
    pub(crate) fn opened_gate(node: &str) -> (GateState, Journal) {
        let cfg = GateConfig::default();
        let ds = mk_ds(
            "infra",
            "cni",
            template_with_tolerations(vec![toleration("", "Exists", "", "")]),
        );
        let mut state = GateState::default();
        let mut journal = Journal::new(64);
        let inputs = [
            Input::snapshot(
                mk_node(
                    node,
                    &[],
                    vec![taint("nodegate.dev/initializing", "NoSchedule")],
                ),
                vec![ds.clone()],
                vec![mk_pod("cni-1", node, &ds.uid)],
            ),
            Input::PatchResult(PatchOutcome::Applied),
        ];
        for (i, input) in inputs.iter().enumerate() {
            let at = ts(i64::try_from(i).unwrap_or(0) + 1);
            for e in gate::step(&mut state, input, &cfg, at).events {
                journal.record(at, e);
            }
        }
        (state, journal)
    }

    #[test]
    fn a_refused_reload_is_a_warning_until_one_is_applied() {
        let h = Health::default();
        h.config_started(Some("/etc/nodegate/config.yaml".into()), ts(1));
        let lines = |h: &Health| {
            h.config_checks()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            lines(&h),
            ["[+]config in force since 1970-01-01T00:00:01Z from /etc/nodegate/config.yaml"]
        );
        h.config_refused(ts(5), "timeout: bad".into());
        let l = lines(&h);
        assert_eq!(l.len(), 2);
        assert!(
            l[1].starts_with("[!]config-reload ") && l[1].ends_with("timeout: bad"),
            "{l:?}"
        );
        h.config_applied(ts(9), vec!["httpAddr"]);
        let l = lines(&h);
        assert_eq!(l.len(), 2, "{l:?}");
        assert!(l[0].contains("since 1970-01-01T00:00:09Z"), "{l:?}");
        assert!(
            l[1].starts_with("[!]config-restart ") && l[1].ends_with("httpAddr"),
            "{l:?}"
        );
    }

    #[test]
    fn history_keeps_the_last_n_finished_gates() {
        let h = History::new(2);
        for n in ["a", "b", "c"] {
            let (state, journal) = opened_gate(n);
            h.gate_stopped(n, &state, &journal);
        }
        assert!(h.get("a").is_none(), "the oldest is evicted");
        assert!(h.get("b").is_some() && h.get("c").is_some());
        // Shutdown stops unfinished gates: not kept.
        h.gate_stopped("d", &GateState::default(), &Journal::new(4));
        assert!(h.get("d").is_none());
        assert!(History::new(0).get("a").is_none());
    }
}
