//! [`History`]: the bounded list of finished gates that `/debug/nodes` and
//! `/debug/nodes/{name}` still show after their actors are gone.

use std::collections::VecDeque;
use std::sync::Mutex;

use nodegate_actors::messages::GateView;
use nodegate_core::gate::journal::Journal;
use nodegate_core::gate::{GateState, StopReason};
use serde_json::{Value, json};

use crate::serve::lock;

/// The last N gates that finished (opened, or ended because the node or its
/// taint went away), newest last.
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
        let mut views = lock(&self.views);
        views.retain(|v| v.node != node);
        views.push_back(view);
        while views.len() > self.capacity {
            views.pop_front();
        }
    }

    pub fn get(&self, node: &str) -> Option<GateView> {
        let views = lock(&self.views);
        views.iter().rev().find(|v| v.node == node).cloned()
    }

    /// The finished gates, newest first, one line each, as `/debug/nodes`
    /// lists them under `recently_finished`.
    pub fn recent(&self) -> Vec<Value> {
        lock(&self.views)
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use nodegate_core::gate::{self, Input, PatchOutcome};
    use nodegate_core::testutil::{
        ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts,
    };
    use nodegate_core::vocab::config::Config;

    /// A gate that opened (its one DaemonSet Ready, the untaint applied),
    /// with its journal; shared with the HTTP tests.
    pub(crate) fn opened_gate(node: &str) -> (GateState, Journal) {
        let cfg = Config::default();
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
                vec![ds_pod("cni-1", node, &ds)],
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
