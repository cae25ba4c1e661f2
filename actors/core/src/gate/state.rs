//! Everything one gate knows ([`GateState`]) and the records it keeps: its
//! phase, its one outstanding write, its timers, and how it ended.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::rules::readiness::{self, NodeNotReady};
use crate::vocab::config::OnTimeout;
use crate::vocab::member::{Blocker, Expectation, Member, MemberId, Readiness};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};
use crate::vocab::vec_map::VecMap;
use crate::vocab::words::word_enum;

/// Why a gate whose members are all Ready does not open by readiness: the
/// node itself is not (semantics.md §5.1). The one wording of it — the journal,
/// the Warnings, `explain` and `status` all say it so.
pub const NODE_NOT_READY: &str = "the node is not Ready";

/// What an expected member the gate has not evaluated waits for.
pub const NOT_EVALUATED: &str = "not evaluated yet";

/// An expected member the gate has not evaluated yet: no readiness.
pub(crate) static UNEVALUATED: Member = Member {
    expectation: Expectation::Expected,
    readiness: None,
};

/// Why the node keeps its gate closed although every member may be Ready, in
/// words ([`NODE_NOT_READY`] and what says so); `None` when the node is Ready.
///
/// A node Karpenter is still registering waits too, after its readiness:
/// [`crate::rules::startup::karpenter_registering`].
pub fn node_wait_reason(node: &NodeInfo) -> Option<String> {
    use crate::rules::startup::{KARPENTER_REGISTERED_LABEL, KARPENTER_REGISTRATION};
    readiness::node_not_ready(node)
        .map(|why| match why {
            NodeNotReady::Condition(status) => {
                format!("{NODE_NOT_READY} (its Ready condition is {status})")
            }
            NodeNotReady::Tainted(taint) => format!("{NODE_NOT_READY} (it carries {taint})"),
        })
        .or_else(|| {
            crate::rules::startup::karpenter_registering(&node.labels).then(|| {
                format!(
                    "waiting for {KARPENTER_REGISTRATION} (no {KARPENTER_REGISTERED_LABEL}=true yet; \
                     Karpenter would put its startup taints back)"
                )
            })
        })
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Closed, waiting for members (also the phase before the first snapshot).
    #[default]
    Waiting,
    /// An untaint write is in flight, backing off, or waiting for leadership.
    Opening,
    /// The managed taints are gone: nodegate removed them.
    Opened,
    /// The deadline passed with `--on-timeout=keep`; still opens if every
    /// member becomes Ready.
    TimedOutKept,
    /// Dry-run: the gate would have opened. Nothing more is decided.
    WouldOpen,
    /// The gate ended without opening: node deleted, taint removed by someone
    /// else, or the node was not gated at all.
    Gone,
}

pub use crate::vocab::write::OpenedBy;

word_enum! {
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum StopReason {
        /// The Node object was deleted (watch).
        NodeDeleted = "node deleted",
        /// The API server answered 404 for the node (patch or re-read).
        NodeNotFound = "node not found",
        /// Every managed taint disappeared and nodegate did not remove it.
        TaintRemovedElsewhere = "managed taint removed by another writer",
        /// The node carried no managed taint when the gate started.
        NotGated = "node carries no managed taint",
        /// Every managed taint disappeared in an untaint this gate did not
        /// send or no longer remembers (another `opened-at`, an `opened-by`
        /// of nodegate's): as a rule another replica's, which records it.
        OpenedByAnotherReplica = "opened by another nodegate replica",
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateWriteKind {
    /// Remove the managed taints (and annotate opened-at / opened-by).
    Untaint { opened_by: OpenedBy },
    /// Annotate `nodegate.dev/timed-out` (`--on-timeout=keep`).
    MarkTimedOut,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteStatus {
    InFlight,
    /// Conflict: waiting for a fresh read of the node.
    Refreshing,
    /// Waiting for the retry timer of `attempt`.
    Backoff,
    /// The executor refused because this replica does not hold the lease.
    AwaitingLeader,
}

/// The one write a gate may have outstanding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub kind: GateWriteKind,
    pub attempt: u32,
    pub status: WriteStatus,
    /// For an untaint: the resourceVersion the last patch tested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// For an untaint: the `nodegate.dev/opened-at` the last patch wrote, as
    /// written (milliseconds; see [`annotation_time`](super::annotation_time)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// An untaint decided because every member was Ready, in flight when a
    /// member stopped being Ready: asked not to be sent if it has not been.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withdrawing: bool,
}

impl Write {
    /// Attempt `attempt` of `kind`, just sent.
    pub fn sent(kind: GateWriteKind, attempt: u32) -> Self {
        Write {
            kind,
            attempt,
            status: WriteStatus::InFlight,
            resource_version: None,
            opened_at: None,
            last_error: None,
            withdrawing: false,
        }
    }
}

/// What the deadline found, kept for the Warning that follows the write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutRecord {
    pub deadline: Timestamp,
    /// The schedule deadline passed with members never scheduled (then
    /// `not_ready` lists those members), not the readiness deadline.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_schedule: bool,
    pub action: OnTimeout,
    pub expected: usize,
    pub not_ready: Vec<Blocker>,
    /// Why the node itself was not Ready, when it was not (semantics.md §5.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_not_ready: Option<String>,
}

/// An untaint patch whose answer was lost (a timeout, a connection lost, a
/// 5xx): it may have been applied. Should the node show these taints gone
/// and this `opened-at`, the gate opened it (semantics.md §5.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnansweredUntaint {
    pub opened_by: OpenedBy,
    /// The `nodegate.dev/opened-at` it wrote, as written (milliseconds).
    pub opened_at: Timestamp,
    /// The resourceVersion it tested.
    pub resource_version: String,
}

/// How far behind the API server's now its evidence may be without any skew
/// at all: the stamps and the `Date` header count whole seconds, and they
/// take a moment to arrive. A deadline within this of the evidence counts
/// as passed by the server's clock, and a `gated-since` within this ahead of
/// it as not in the future (semantics.md §5.3), so that
/// synchronised clocks never hold a deadline nor clamp a `gated-since`.
pub const SERVER_TIME_SLACK: SignedDuration = SignedDuration::from_secs(2);

/// How many unanswered untaints a gate remembers, the latest: enough for
/// minutes of an API server that answers nothing, without a gate growing
/// for as long as one does.
pub const MAX_UNANSWERED: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenedRecord {
    pub opened_by: OpenedBy,
    pub at: Timestamp,
    /// The resourceVersion the successful patch tested: any later sighting of
    /// the node at this version is stale (see `Router`).
    pub resource_version: String,
}

/// Keyed timers. A generation is bumped whenever a timer is (re)armed, so a
/// `TimerFired` carrying an older generation is recognised and dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timers {
    pub deadline: Option<Timestamp>,
    pub deadline_generation: u64,
    pub recheck: Option<Timestamp>,
    pub recheck_generation: u64,
    /// The schedule deadline (`--schedule-timeout`), while it is earlier
    /// than `deadline` (semantics.md §5.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_deadline: Option<Timestamp>,
    #[serde(default)]
    pub schedule_generation: u64,
    /// A schedule deadline that passed with every member holding a pod:
    /// decided, not set again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_passed: Option<Timestamp>,
}

/// A `nodegate.dev/gated-since` later than the API server's now when the
/// gate first saw it (an agent's clock ahead): the gate counts from `to`,
/// the server's now then, instead (semantics.md §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatedSinceClamp {
    /// The annotation's value; a new value is judged afresh.
    pub gated_since: Timestamp,
    pub to: Timestamp,
}

/// Everything one gate knows. Changed only by [`apply`](fn@super::apply).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateState {
    /// The node as last seen; `None` until the first snapshot.
    /// Shared with the journal's snapshot and the router's index until the
    /// node changes.
    pub node: Option<Arc<NodeInfo>>,
    /// Every DaemonSet in the cluster, by `namespace/name`: any of them may
    /// become expected when the node or the DaemonSet changes.
    pub daemonsets: VecMap<String, Arc<DaemonSetInfo>>,
    /// Pods bound to this node, by uid.
    pub pods: VecMap<String, Arc<PodInfo>>,
    pub members: VecMap<MemberId, Member>,
    pub timers: Timers,
    pub phase: Phase,
    pub write: Option<Write>,
    /// The untaint patches whose answer was lost, oldest first (at most
    /// [`MAX_UNANSWERED`]): any of them may have opened the node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unanswered: Vec<UnansweredUntaint>,
    pub timed_out: Option<TimeoutRecord>,
    pub timeout_marked: bool,
    /// A timeout mark of this gate went unanswered (`MarkUnanswered`): it
    /// may have been applied, so a mark the node shows may be this
    /// replica's own, and is reported. Kept whatever becomes of that write.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mark_unanswered: bool,
    pub opened: Option<OpenedRecord>,
    pub stopped: Option<StopReason>,
    /// The newest evidence of the API server's clock the gate was given
    /// ([`Input::ServerTime`](super::Input::ServerTime)): the server's time
    /// was at least this. `None` until some comes; the gate then trusts its
    /// own clock alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_time: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gated_since_clamp: Option<GatedSinceClamp>,
    /// A write is held by a suspension (`WritesSuspended`), until it is sent
    /// or the suspension is lifted (`WritesResumed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// The node this gate started on was a Karpenter node nodegate had
    /// opened before and not re-gated: its registration put a managed taint
    /// back ([`crate::rules::startup::karpenter_reopening`]). Its opening records
    /// no second Event.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reopening: bool,
    /// The node's `nodegate.dev/opened-at` as last seen with a managed taint
    /// on (from its first snapshot, then `OpenedAtSeenClosed`). Every untaint
    /// writes a new one in the patch that removes the taint; a person's
    /// `kubectl taint …-` does not: taints gone with another `opened-at` and
    /// an `opened-by` of nodegate's are an untaint (semantics.md §5.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_opened_at: Option<Timestamp>,
}

impl GateState {
    /// Opened or gone: no input changes anything any more.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Opened | Phase::Gone)
    }

    pub fn expected(&self) -> impl Iterator<Item = (&MemberId, &Member)> {
        self.members.iter().filter(|(_, m)| m.is_expected())
    }

    /// True when every expected member is Ready — vacuously for an empty set.
    pub fn all_ready(&self) -> bool {
        self.expected()
            .all(|(_, m)| m.readiness.as_ref().is_some_and(Readiness::is_ready))
    }

    /// Why the node itself keeps the gate closed although its members may
    /// all be Ready (semantics.md §5.1): [`node_wait_reason`], else, for a
    /// node re-gated before an announced reboot (semantics.md §6.10), that
    /// it has not rebooted or that a Ready member's pod is Ready from before
    /// the reboot; `None` when neither holds it.
    pub fn node_wait_reason(&self) -> Option<String> {
        let node = self.node.as_deref()?;
        if let Some(why) = node_wait_reason(node) {
            return Some(why);
        }
        node.awaiting_reboot.as_ref()?;
        let ready_members = self.expected().filter_map(|(id, m)| match id {
            MemberId::DaemonSet(key) if m.readiness.as_ref().is_some_and(Readiness::is_ready) => {
                self.daemonsets.get(key).map(AsRef::as_ref)
            }
            _ => None,
        });
        crate::closing::regating::reboot::reboot_wait(node, ready_members, self.pods.values())
    }

    /// True when the gate may open by readiness: every expected member is
    /// Ready, and so is the node itself.
    /// A node Karpenter is still registering is not Ready for this
    /// (semantics.md §6.0).
    pub fn may_open_by_ready(&self) -> bool {
        self.all_ready() && self.node.is_some() && self.node_wait_reason().is_none()
    }

    /// The expected members that are not Ready, and why.
    pub fn blockers(&self) -> Vec<Blocker> {
        self.expected()
            .filter_map(|(id, m)| {
                let why = match &m.readiness {
                    Some(Readiness::Ready { .. }) => return None,
                    Some(Readiness::Waiting { why, .. }) => why.clone(),
                    None => NOT_EVALUATED.to_string(),
                };
                let member = id.clone();
                Some(Blocker { member, why })
            })
            .collect()
    }

    /// When the gate started: `nodegate.dev/gated-since` for a re-gated node
    /// (clamped to the server's now if it was in the future), the node's
    /// creation otherwise.
    pub fn gate_start(&self) -> Option<Timestamp> {
        self.node
            .as_ref()
            .map(|n| match (n.gated_since, self.gated_since_clamp) {
                (Some(since), Some(c)) if c.gated_since == since => c.to,
                _ => n.gated_since.unwrap_or(n.created),
            })
    }

    /// The API server's now as the gate judges it: the evidence plus
    /// [`SERVER_TIME_SLACK`]; `None` without evidence.
    pub fn server_now(&self) -> Option<Timestamp> {
        self.server_time
            .map(|at| at.checked_add(SERVER_TIME_SLACK).unwrap_or(at))
    }
}
