//! Every Kubernetes Event the gate records, in words, and the one place a
//! note is cut to the API's limit (for the deciders' Events too).

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::event::IndexedTaint;
use super::state::{GateState, OpenedBy, TimeoutRecord};
use crate::vocab::annotations;
use crate::vocab::config::OnTimeout;
use crate::vocab::member::Blocker;
use crate::vocab::model::NodeInfo;
use crate::vocab::words::word_enum;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes Event (events.k8s.io/v1) regarding the node, from the gate
/// or a decider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvent {
    pub node: String,
    pub node_uid: String,
    #[serde(rename = "type")]
    pub type_: EventType,
    /// One of [`Reason::ALL`].
    pub reason: Reason,
    /// At most 1024 bytes (the API's limit): cut here, so the shell sends it
    /// as it is.
    pub note: String,
    /// The Event tells of a write this replica applied (an opening, a mark,
    /// a taint put on or taken off): no other replica records it, so this
    /// one does even when its lease lapsed since. Every other Event tells
    /// of a decision (a dry run's, which every replica reaches; a held
    /// budget, a skipped late taint), and only the leader records it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_write: bool,
}

/// Kubernetes rejects an Event whose note is longer than this (events.k8s.io/v1).
const MAX_NOTE_BYTES: usize = 1024;

/// What a note cut to [`MAX_NOTE_BYTES`] ends with.
const ELLIPSIS: &str = "…";

word_enum! {
    /// The `reason` of every Kubernetes Event nodegate records. Serialized (and
    /// sent) as [`as_str`](Self::as_str), as the API shows it, e.g.
    /// `"GateOpened"`: each word is its variant's name.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
    pub enum Reason {
        /// Every expected member was Ready and the managed taints were removed.
        GateOpened = "GateOpened",
        /// The deadline passed: the node was opened anyway, kept closed
        /// (`--on-timeout=keep`), or — in dry-run — would have been.
        GateTimedOut = "GateTimedOut",
        /// Dry-run: every expected member is Ready and the gate would open now.
        GateWouldOpen = "GateWouldOpen",
        /// The late-taint net put the startup taint on a new node that arrived
        /// without it (semantics.md §6.2).
        LateTaint = "LateTaint",
        /// The net found a new node without the taint, but a workload pod was
        /// already bound to it: left alone.
        LateTaintSkipped = "LateTaintSkipped",
        /// An open node's member had no Ready pod for the grace, or the node
        /// rebooted: nodegate put the re-gate taint on (semantics.md §6.4).
        NodeRegated = "NodeRegated",
        /// A node would be re-gated, but the budget is used up.
        RegateBudgetExhausted = "RegateBudgetExhausted",
        /// A `conditionTaints` rule put its taint on a node that matches it
        /// (semantics.md §6.5).
        ConditionTaintAdded = "ConditionTaintAdded",
        /// A `remove: whenCleared` rule took its taint off a node that no
        /// longer matches it.
        ConditionTaintRemoved = "ConditionTaintRemoved",
        /// `--on-timeout=replace`: the leader asked the node's owner to replace
        /// it (deleted its NodeClaim or Machine, or cordoned and marked it;
        /// semantics.md §5.8).
        GateReplaced = "GateReplaced",
        /// A node is due for replacement, but the replace budget is used up.
        ReplaceBudgetExhausted = "ReplaceBudgetExhausted",
        /// A node is due for replacement, but a member it waits for is broken
        /// cluster-wide: not replaced, `--replace-fallback` decides instead.
        ReplaceSkipped = "ReplaceSkipped",
    }
}

impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

// --- the Events ------------------------------------------------------------

/// The deadline passed: the node is marked and kept closed
/// (`--on-timeout=keep`, or `replace`), or — in a dry run, with members not
/// Ready — what would have happened.
pub(super) fn timed_out(
    node: &NodeInfo,
    start: Timestamp,
    t: &TimeoutRecord,
    dry_run: bool,
) -> NodeEvent {
    let what = match (dry_run, t.action) {
        (true, OnTimeout::Open) => "would open the node anyway",
        (true, OnTimeout::Keep) => "would keep the node closed",
        (true, OnTimeout::Replace) => "would keep the node closed and ask its owner to replace it",
        (false, OnTimeout::Replace) => {
            "kept closed; the leader asks the node's owner to replace it (--on-timeout=replace)"
        }
        (false, _) => "kept closed (--on-timeout=keep)",
    };
    let dry = if dry_run { "dry-run: " } else { "" };
    let note = format!("{dry}{}", timed_out_note(start, t, what));
    let event = event(node, EventType::Warning, Reason::GateTimedOut, note);
    // Out of a dry run, the answer to this replica's applied mark.
    if dry_run { event } else { event.of_own_write() }
}

/// "DEADLINE passed T after the gate started; `what`; what was not Ready".
/// The deadline is the readiness deadline (`--timeout`) or the schedule
/// deadline (`--schedule-timeout`, semantics.md §5.2).
fn timed_out_note(start: Timestamp, t: &TimeoutRecord, what: &str) -> String {
    let deadline = if t.by_schedule {
        "schedule deadline (--schedule-timeout)"
    } else {
        "deadline"
    };
    format!(
        "{deadline} passed {} after the gate started; {what}; {}",
        since(start, t.deadline),
        not_ready_text(t.expected, &t.not_ready, t.node_not_ready.as_deref())
    )
}

/// Dry-run: every expected member is Ready; the gate would remove `taints`.
pub(super) fn would_open(
    node: &NodeInfo,
    state: &GateState,
    taints: &[IndexedTaint],
    at: Timestamp,
) -> NodeEvent {
    let taints: Vec<String> = taints.iter().map(|t| t.taint.to_string()).collect();
    let note = format!(
        "dry-run: would remove {} now: {}, {} after the gate started",
        taints.join(", "),
        all_ready_text(state.expected().count()),
        since(state.gate_start().unwrap_or(node.created), at)
    );
    event(node, EventType::Normal, Reason::GateWouldOpen, note)
}

/// The gate opened: because every expected member was Ready, because its
/// deadline passed (`--on-timeout=open`), or because the node was annotated
/// `nodegate.dev/open: "true"`.
pub(super) fn opened(
    node: &NodeInfo,
    state: &GateState,
    start: Timestamp,
    by: OpenedBy,
    at: Timestamp,
) -> NodeEvent {
    let took = since(start, at);
    let all_ready = all_ready_text(state.expected().count());
    let note = match (by, &state.timed_out) {
        (OpenedBy::Ready, _) => format!("opened: {all_ready}, {took} after the gate started"),
        (OpenedBy::Manual, _) => format!(
            "opened on request ({}=true), {took} after the gate started; {all_ready}",
            annotations::OPEN,
        ),
        (OpenedBy::Timeout, Some(t)) => {
            let fallback = if t.action == OnTimeout::Replace {
                " (not replaced: a member is broken cluster-wide; --replace-fallback=open)"
            } else {
                ""
            };
            let what = format!("opened anyway {took} after the gate started{fallback}");
            timed_out_note(start, t, &what)
        }
        (OpenedBy::Timeout, None) => format!("opened by timeout {took} after the gate started"),
    };
    // The answer to this replica's applied untaint, whichever way it opened.
    if by == OpenedBy::Timeout {
        event(node, EventType::Warning, Reason::GateTimedOut, note).of_own_write()
    } else {
        event(node, EventType::Normal, Reason::GateOpened, note).of_own_write()
    }
}

/// Why an untaint decided because every member was Ready no longer stands
/// (the reason of a withdrawn or abandoned write, kept in the journal):
/// the node itself (`node_not_ready`, from [`node_wait_reason`]) and the
/// members that are not Ready.
pub(super) fn no_longer_all_ready(node_not_ready: Option<&str>, blockers: &[Blocker]) -> String {
    let mut parts: Vec<String> = node_not_ready.map(str::to_string).into_iter().collect();
    if !blockers.is_empty() {
        parts.push(blocker_list(blockers, "; "));
    }
    format!("no longer all Ready: {}", parts.join("; "))
}

// --- the pieces ------------------------------------------------------------

impl NodeEvent {
    /// The one constructor of a [`NodeEvent`], for the gate and every
    /// decider: the note is cut here to what the API accepts.
    pub fn new(node: &str, uid: &str, type_: EventType, reason: Reason, note: String) -> NodeEvent {
        NodeEvent {
            node: node.to_string(),
            node_uid: uid.to_string(),
            type_,
            reason,
            note: truncate(note, MAX_NOTE_BYTES),
            own_write: false,
        }
    }

    /// This Event, telling of a write this replica applied
    /// ([`own_write`](Self::own_write)).
    #[must_use]
    pub fn of_own_write(self) -> NodeEvent {
        NodeEvent {
            own_write: true,
            ..self
        }
    }
}

fn event(node: &NodeInfo, type_: EventType, reason: Reason, note: String) -> NodeEvent {
    NodeEvent::new(&node.name, &node.uid, type_, reason, note)
}

/// `at` counted from the gate's start ([`GateState::gate_start`]: a
/// `gated-since` in the future clamped, semantics.md §5.3).
fn since(start: Timestamp, at: Timestamp) -> String {
    let d = at.duration_since(start);
    format!("{:.1}s", d.as_secs_f64())
}

fn all_ready_text(expected: usize) -> String {
    match expected {
        0 => "no expected members".to_string(),
        1 => "the 1 expected member is Ready".to_string(),
        n => format!("all {n} expected members Ready"),
    }
}

/// What kept a gate closed at its deadline: the node itself, if it was not
/// Ready, then the members that were not.
fn not_ready_text(expected: usize, not_ready: &[Blocker], node_not_ready: Option<&str>) -> String {
    let members = if not_ready.is_empty() {
        all_ready_text(expected)
    } else {
        format!(
            "{} of {expected} expected members not Ready: {}",
            not_ready.len(),
            blocker_list(not_ready, "; ")
        )
    };
    match node_not_ready {
        Some(node) => format!("{node}; {members}"),
        None => members,
    }
}

/// Each blocker as "MEMBER (why)", joined by `sep`.
pub(super) fn blocker_list(blockers: &[Blocker], sep: &str) -> String {
    let parts: Vec<String> = blockers
        .iter()
        .map(|b| format!("{} ({})", b.member, b.why))
        .collect();
    parts.join(sep)
}

/// Cuts `s` to at most `max` bytes, on a character boundary, ending in
/// [`ELLIPSIS`] when anything was cut.
pub(super) fn truncate(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    // 0 is always a boundary.
    let cut = (0..=max - ELLIPSIS.len()).rfind(|&i| s.is_char_boundary(i));
    s.truncate(cut.unwrap_or(0));
    s.push_str(ELLIPSIS);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    // Moved from the shell's writer, which no longer cuts notes a second
    // time; the ending is the core's "…".
    #[test]
    fn truncate_respects_char_boundaries() {
        let s = "é".repeat(600);
        let t = truncate(s, MAX_NOTE_BYTES);
        assert!(t.len() <= 1024);
        assert!(t.ends_with(ELLIPSIS));
        assert_eq!(truncate("short".to_string(), 1024), "short");
    }

    /// The entrances, re-gating and condition rules build their Events
    /// through the same constructor: a long list of members is cut too.
    #[test]
    fn every_event_note_is_cut_to_what_the_api_accepts() {
        let members = (0..200)
            .map(|i| format!("infra/agent-{i}"))
            .collect::<Vec<_>>();
        let note = format!("re-gated for {}", members.join(", "));
        assert!(note.len() > MAX_NOTE_BYTES);
        let e = NodeEvent::new("n1", "uid", EventType::Warning, Reason::NodeRegated, note);
        assert!(e.note.len() <= MAX_NOTE_BYTES, "{}", e.note.len());
        assert!(e.note.starts_with("re-gated for infra/agent-0, "));
        assert!(e.note.ends_with(ELLIPSIS));
        assert_eq!((e.node.as_str(), e.node_uid.as_str()), ("n1", "uid"));
    }

    #[test]
    fn reasons_serialize_as_their_api_strings() {
        for r in Reason::ALL {
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(serde_json::from_str::<Reason>(&json).unwrap(), r);
            assert_eq!(r, r.as_str());
        }
        assert!(serde_json::from_str::<Reason>("\"Gate\"").is_err());
    }
}
