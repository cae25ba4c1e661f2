//! The human text of the gate: the notes of the Kubernetes Events it records.

use jiff::Timestamp;

use super::effect::{Effect, EventType, NodeEvent};
use super::event::IndexedTaint;
use super::member::Blocker;
use super::state::{GateState, gate_start};
use crate::model::NodeInfo;

/// Kubernetes rejects an Event whose note is longer than this (events.k8s.io/v1).
const MAX_NOTE_BYTES: usize = 1024;

pub(super) fn record(node: &NodeInfo, type_: EventType, reason: &str, note: String) -> Effect {
    Effect::RecordEvent(NodeEvent {
        node: node.name.clone(),
        node_uid: node.uid.clone(),
        type_,
        reason: reason.to_string(),
        note: truncate(note, MAX_NOTE_BYTES),
    })
}

pub(super) fn since(node: &NodeInfo, at: Timestamp) -> String {
    let d = at.duration_since(gate_start(node));
    format!("{:.1}s", d.as_secs_f64())
}

pub(super) fn ready_text(state: &GateState) -> String {
    match state.expected().count() {
        0 => "no expected members".to_string(),
        1 => "the 1 expected member is Ready".to_string(),
        n => format!("all {n} expected members Ready"),
    }
}

pub(super) fn not_ready_text(expected: usize, not_ready: &[Blocker]) -> String {
    format!(
        "{} of {expected} expected members not Ready: {}",
        not_ready.len(),
        blocker_list(not_ready)
    )
}

pub(super) fn blocker_list(blockers: &[Blocker]) -> String {
    let parts: Vec<String> = blockers
        .iter()
        .map(|b| format!("{} ({})", b.member, b.why))
        .collect();
    parts.join("; ")
}

pub(super) fn taint_list(taints: &[IndexedTaint]) -> String {
    let parts: Vec<String> = taints.iter().map(|t| t.taint.to_string()).collect();
    parts.join(", ")
}

pub(super) fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    const ELLIPSIS: &str = "…";
    let mut cut = max - ELLIPSIS.len();
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(ELLIPSIS);
    s
}
