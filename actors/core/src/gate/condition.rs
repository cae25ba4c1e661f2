//! The Node condition `--node-condition` writes ([`OPEN_CONDITION`]): what
//! it says for a gate ([`open_condition`]) and whether that differs from
//! what was last written ([`condition_change`]: no change, no write).

use super::notes::{blocker_list, truncate};
use super::state::{GateState, OpenedBy, Phase, StopReason, node_wait_reason};
use crate::vocab::config::Config;
use crate::vocab::member::Blocker;

/// The condition's type on the Node.
pub const OPEN_CONDITION: &str = "nodegate.dev/Open";

/// A message longer than this is cut (with `…`): the condition is read by
/// people and tools, and a node's status is not the place for a long list.
const MAX_MESSAGE_BYTES: usize = 1024;

pub use crate::vocab::write::{ConditionReason, ConditionWrite, OpenCondition};

/// What the condition should say for this gate: `False` while it is
/// closed, `True` once opened (by another replica or someone else too).
/// `None` before the first snapshot, after a dry run's "would open", and
/// for a gate that ended without opening (the node is gone, or it was never
/// gated); a dry run writes nothing anyway ([`condition_write`]).
pub fn open_condition(state: &GateState) -> Option<OpenCondition> {
    state.node.as_ref()?;
    let (open, reason, message) = match state.phase {
        Phase::Waiting => (false, ConditionReason::Waiting, waiting(state)),
        Phase::Opening => (
            false,
            ConditionReason::Opening,
            "every expected member is Ready; removing the managed taints".to_string(),
        ),
        Phase::TimedOutKept => {
            let deadline = state.timed_out.as_ref().map(|t| t.deadline);
            let deadline = deadline.map(|d| format!("the deadline passed at {d}; "));
            let message = format!("{}{}", deadline.unwrap_or_default(), waiting(state));
            (false, ConditionReason::TimedOut, message)
        }
        Phase::Opened => opened(state.opened.as_ref()?.opened_by),
        // Another replica's opening says the same on every replica: one
        // that led before its watch caught up writes no other reason.
        Phase::Gone if state.stopped == Some(StopReason::OpenedByAnotherReplica) => {
            opened(state.node.as_ref()?.opened_by_nodegate()?)
        }
        Phase::Gone if state.stopped == Some(StopReason::TaintRemovedElsewhere) => (
            true,
            ConditionReason::OpenedExternally,
            "opened by another writer: the managed taints were removed".to_string(),
        ),
        Phase::WouldOpen | Phase::Gone => return None,
    };
    Some(OpenCondition {
        open,
        reason,
        message: truncate(message, MAX_MESSAGE_BYTES),
    })
}

/// What the condition says of a node nodegate opened (`by`).
fn opened(by: OpenedBy) -> (bool, ConditionReason, String) {
    let message = match by {
        OpenedBy::Ready => "opened: every expected member was Ready",
        OpenedBy::Timeout => "opened by the deadline (--on-timeout=open)",
        OpenedBy::Manual => "opened by the nodegate.dev/open annotation",
    };
    (true, ConditionReason::opened_by(by), message.to_string())
}

/// The condition to write when it differs from `last` (what this replica
/// last wrote, or read back, on the node); `None`: nothing changed, no write.
pub fn condition_change(last: Option<&OpenCondition>, state: &GateState) -> Option<OpenCondition> {
    open_condition(state).filter(|want| last != Some(want))
}

/// The write for `--node-condition` after a step, when the condition
/// changed from `last` (what this gate last handed over); `None` when the
/// flag is off, in a dry run, or nothing changed.
pub fn condition_write(
    last: Option<&OpenCondition>,
    state: &GateState,
    cfg: &Config,
) -> Option<ConditionWrite> {
    if !cfg.node_condition || cfg.dry_run {
        return None;
    }
    let node = state.node.as_ref()?;
    let condition = condition_change(last, state)?;
    // This gate's first write (a new gate, or one after a restart) is a
    // transition only if the node does not already say the same status:
    // a restart must not move `lastTransitionTime`.
    let transition = match last {
        Some(l) => l.open != condition.open,
        None => node
            .conditions
            .get(OPEN_CONDITION)
            .is_none_or(|c| c.status != condition.status()),
    };
    Some(ConditionWrite {
        node: node.name.clone(),
        condition,
        transition,
    })
}

/// "waiting for 2 of 3: ns/a (why), ns/b (why)", then why the node itself
/// is not Ready — explain's one-line summary, in the gate's words.
fn waiting(state: &GateState) -> String {
    let blockers: Vec<Blocker> = state.blockers();
    let members = (!blockers.is_empty()).then(|| {
        let list = blocker_list(&blockers, ", ");
        let expected = state.expected().count();
        format!("waiting for {} of {expected}: {list}", blockers.len())
    });
    let node = state.node.as_deref().and_then(node_wait_reason);
    let parts: Vec<String> = members.into_iter().chain(node).collect();
    if parts.is_empty() {
        return "waiting for the gate to evaluate its members".to_string();
    }
    parts.join("; ")
}

#[cfg(test)]
#[path = "condition/tests.rs"]
mod tests;
