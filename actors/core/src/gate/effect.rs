//! What the shell must do: the writes, Kubernetes Events, timers and re-reads
//! a gate asks for, as values.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::event::IndexedTaint;
use super::input::TimerKind;
use super::notes::Reason;
use super::state::OpenedBy;

/// One conditional JSON patch (semantics.md §5): `test` the resourceVersion,
/// `test` + `remove` each taint at its index (highest index first, so earlier
/// removals do not shift later ones — the executor must keep this order), and
/// add the `nodegate.dev/opened-at` / `opened-by` annotations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UntaintPatch {
    pub node: String,
    pub resource_version: String,
    /// Sorted by descending index.
    pub taints: Vec<IndexedTaint>,
    pub opened_by: OpenedBy,
    pub opened_at: Timestamp,
}

/// Set `nodegate.dev/timed-out` on the node (`--on-timeout=keep`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutMark {
    pub node: String,
    pub deadline: Timestamp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes Event (events.k8s.io/v1) regarding the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvent {
    pub node: String,
    pub node_uid: String,
    #[serde(rename = "type")]
    pub type_: EventType,
    /// `GateOpened`, `GateTimedOut`, `GateWouldOpen`.
    pub reason: Reason,
    /// At most 1024 bytes, as the API requires: cut by the core (`notes`),
    /// so the shell sends it as it is.
    pub note: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    RemoveTaints(UntaintPatch),
    RecordEvent(NodeEvent),
    MarkTimedOut(TimeoutMark),
    /// Deliver `TimerFired { kind, generation }` at `at` (or at once if past).
    ScheduleTimer {
        kind: TimerKind,
        at: Timestamp,
        generation: u64,
    },
    /// Deliver `TimerFired { kind: Retry, generation: attempt }` after a
    /// jittered exponential backoff for `attempt`; the shell picks the delay.
    ScheduleRetry {
        attempt: u32,
    },
    /// Re-read the node and deliver `NodeRefreshed`.
    RefreshNode,
    /// Do not send the in-flight untaint if it is still waiting for a patch
    /// slot or a rate token; its result then is `PatchOutcome::Withdrawn`.
    WithdrawWrite,
    /// The gate is over; always the last effect of its step.
    Stop(String),
}
