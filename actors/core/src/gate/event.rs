//! The facts of a gate's life: what [`decide`](super::decide) establishes,
//! [`apply`](fn@super::apply) folds and the journal keeps.

use std::sync::Arc;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::state::{OpenedBy, StopReason};
use crate::rules::placement::ReasonCode;
use crate::vocab::config::OnTimeout;
use crate::vocab::member::{Blocker, MemberId};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

pub use crate::vocab::write::IndexedTaint;

/// The facts of a gate's life, in the order they happened. Serialized
/// externally tagged in snake_case, e.g.
/// `{"member_ready":{"member":"kube-system/cilium","pod":"cilium-x7f"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    // --- what the gate saw ---
    /// The node is behind an `Arc` here and below so that the frequent small
    /// events do not each take a node's room (journal entries, moves).
    Snapshot {
        node: Arc<NodeInfo>,
        daemonsets: Vec<Arc<DaemonSetInfo>>,
        pods: Vec<Arc<PodInfo>>,
    },
    NodeUpdated {
        node: Arc<NodeInfo>,
    },
    /// Only the resourceVersion moved (status updates): kept short.
    NodeVersionChanged {
        resource_version: String,
    },
    /// The node shows this `nodegate.dev/opened-at` with a managed taint on,
    /// another than it showed when the gate started or last did so (the
    /// taint came back after an opening the gate did not see): an untaint
    /// that removes the taint with another one is nodegate's.
    OpenedAtSeenClosed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opened_at: Option<Timestamp>,
    },
    DaemonSetUpdated {
        daemonset: Arc<DaemonSetInfo>,
    },
    DaemonSetRemoved {
        daemonset: String,
        uid: String,
    },
    /// A pod seen for the first time, or one whose identity (owner, labels,
    /// node) changed.
    PodUpdated {
        pod: Arc<PodInfo>,
    },
    /// Only a known pod's status changed — the common case, kept short so
    /// that a journal does not hold a whole copy of every version of a pod.
    ///
    /// The strings are boxed slices rather than `String`s: this is the most
    /// frequent journal entry, and every byte of the largest variant is paid
    /// by every entry of every journal.
    PodStatusChanged {
        pod: Box<str>,
        uid: Box<str>,
        phase: Box<str>,
        ready: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ready_since: Option<Timestamp>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        terminating: bool,
    },
    PodRemoved {
        pod: String,
        uid: String,
    },

    // --- the expected set and its readiness ---
    MemberExpected {
        member: MemberId,
    },
    MemberNotExpected {
        member: MemberId,
        reason: String,
        code: ReasonCode,
    },
    MemberRemoved {
        member: MemberId,
    },
    MemberReady {
        member: MemberId,
        pod: String,
    },
    MemberWaiting {
        member: MemberId,
        why: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available_at: Option<Timestamp>,
    },

    // --- timers ---
    DeadlineSet {
        at: Timestamp,
        generation: u64,
    },
    /// The deadline timer fired, but the deadline has not passed by the API
    /// server's clock as the evidence shows it (`server_time`): the timer is
    /// armed again for `until` (local time), the remaining gap later.
    DeadlineHeld {
        deadline: Timestamp,
        server_time: Timestamp,
        until: Timestamp,
        generation: u64,
        reason: String,
    },
    /// The schedule deadline (`--schedule-timeout`) is `at`, or (`None`)
    /// there is none: not configured, or not earlier than the deadline.
    ScheduleDeadlineSet {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        at: Option<Timestamp>,
        generation: u64,
    },
    /// The schedule deadline `at` passed with every expected member holding
    /// a pod on the node: it is decided, and no later pod loss times out.
    ScheduleDeadlinePassed {
        at: Timestamp,
    },
    /// New evidence of the API server's clock: its time was at least `at`.
    ServerTimeSeen {
        at: Timestamp,
    },
    /// The node's `gated-since` was later than the server's now (`to`): the
    /// gate counts from `to` instead.
    GatedSinceClamped {
        gated_since: Timestamp,
        to: Timestamp,
    },
    RecheckScheduled {
        at: Timestamp,
        generation: u64,
    },
    RecheckFired {
        generation: u64,
    },

    // --- decisions and writes ---
    TimedOut {
        deadline: Timestamp,
        /// The schedule deadline passed with members never scheduled
        /// (listed in `not_ready`), not the readiness deadline.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        by_schedule: bool,
        action: OnTimeout,
        expected: usize,
        not_ready: Vec<Blocker>,
        /// Why the node itself was not Ready, when it was not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node_not_ready: Option<String>,
    },
    /// A write the gate would send now is held: the node is annotated
    /// `nodegate.dev/suspend: "true"` or the config says `suspend: true`.
    /// Journalled once per hold.
    WritesSuspended {
        /// The opening that waits, if it is one (else the timed-out mark).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opened_by: Option<OpenedBy>,
        /// `annotation` or `config`.
        by: String,
    },
    /// The suspension was lifted; the gate acts on what it finds.
    WritesResumed,
    /// Dry-run: the gate would have removed these taints now.
    WouldOpen {
        opened_by: OpenedBy,
        taints: Vec<IndexedTaint>,
        at: Timestamp,
    },
    UntaintSent {
        attempt: u32,
        opened_by: OpenedBy,
        resource_version: String,
        taints: Vec<IndexedTaint>,
        at: Timestamp,
    },
    MarkSent {
        attempt: u32,
    },
    /// No answer to the mark (a timeout, a connection lost) or a 5xx: it may
    /// have been applied. Retried like a failed one.
    MarkUnanswered {
        attempt: u32,
        error: String,
    },
    WriteConflict {
        attempt: u32,
    },
    WriteFailed {
        attempt: u32,
        error: String,
    },
    /// No answer to the untaint (a timeout, a connection lost) or a 5xx: it
    /// may have been applied. The gate re-reads the node before it retries.
    WriteUnanswered {
        attempt: u32,
        error: String,
    },
    WriteDeferred {
        attempt: u32,
    },
    /// The in-flight untaint no longer stands (a member stopped being
    /// Ready); if it has not been sent yet, it will not be.
    WithdrawRequested {
        attempt: u32,
        reason: String,
    },
    RetryScheduled {
        attempt: u32,
    },
    WriteAbandoned {
        reason: String,
    },
    Opened {
        opened_by: OpenedBy,
        at: Timestamp,
        resource_version: String,
    },
    TimeoutMarked,
    /// The node already carries this gate's `timed-out` mark, for its
    /// deadline, and no mark of this gate's was applied (each was refused
    /// for leadership or failed outright): another replica wrote it, or
    /// this replica did before it restarted. Marked, with no write and no
    /// second Event.
    MarkFound,
    Stopped {
        reason: StopReason,
    },
}
