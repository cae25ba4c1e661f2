//! Every write nodegate makes, as one [`Write`], and its one answer, an
//! [`Outcome`]: plain data (docs/architecture.md, "The node writer").

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use crate::vocab::model::OpenedBy;
use crate::vocab::model::{Fallback, Owner, Taint};
use crate::vocab::words::word_enum;

/// One write to the cluster, with everything the executor needs to make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// A gate's opening: the conditional untaint patch.
    Untaint(UntaintPatch),
    /// A gate's `nodegate.dev/timed-out` annotation (`--on-timeout` keep or
    /// replace).
    MarkTimedOut(TimeoutMark),
    /// `nodegate.dev/opened-by: external` after someone else opened the
    /// node. Best effort: nothing waits for its outcome.
    MarkOpenedExternally(ExternalOpening),
    /// The `nodegate.dev/Open` Node condition (`--node-condition`). Best
    /// effort: nothing waits for its outcome.
    Condition(ConditionWrite),
    /// A decider's taint write: a taint on or off, or annotations alone.
    Taint(TaintWrite),
    /// `--on-timeout=replace`: mark (and maybe cordon) the node and delete
    /// its owner, or record a fallback.
    Replace(ReplaceWrite),
    CreateCanary(CanaryCreate),
    DeleteCanary(CanaryDelete),
}

/// The one answer to every [`Write`]. Only a [`Write::Replace`] gets
/// `OwnerDeleted`, `OwnerFailed` or `NoOwner`; an arm that never sees them
/// reads them as failures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Applied,
    /// 409, or 422 from a failed `test` operation: the node changed.
    Conflict,
    NotFound,
    /// The request was refused or never sent: nothing was written.
    Failed(String),
    /// No answer (a timeout, a connection lost mid-request) or a 5xx: the
    /// request may or may not have been applied.
    Ambiguous(String),
    /// This replica does not hold the lease; nothing was written.
    NotLeader,
    /// The gate withdrew the write
    /// ([`Effect::WithdrawWrite`](crate::gate::Effect::WithdrawWrite))
    /// before it was sent; nothing was written.
    Withdrawn,
    /// A replace write is done, and it deleted the node's owner object
    /// (`nodeclaim/NAME`, `machine/NS/NAME`). A replace write done without
    /// deleting anything (a cordon, a fallback, an owner gone already)
    /// answers [`Outcome::Applied`].
    OwnerDeleted(String),
    /// A replace write marked the node (or found it marked), but its owner
    /// could not be deleted (why).
    OwnerFailed(String),
    /// A replace request found no owner it could prove owns the node (why):
    /// nothing was written, and the decider falls back instead.
    NoOwner(String),
}

/// The name the gate and the deciders know [`Outcome`] by: a node patch's
/// answer, which is never one of the replace write's own three.
pub type PatchOutcome = Outcome;

/// One conditional JSON patch (semantics.md §5.4): `test` the resourceVersion,
/// `test` + `remove` each taint at its index (highest index first, so earlier
/// removals do not shift later ones — the executor must keep this order), and
/// add the `nodegate.dev/opened-at` / `opened-by` annotations (and remove a
/// replace request's marks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UntaintPatch {
    pub node: String,
    pub resource_version: String,
    /// Sorted by descending index.
    pub taints: Vec<IndexedTaint>,
    pub opened_by: OpenedBy,
    /// Already at the annotation's precision
    /// ([`annotation_time`](crate::gate::annotation_time)).
    pub opened_at: Timestamp,
    /// Whether the node, as the gate last saw it, has a
    /// `metadata.annotations` map: a JSON patch cannot add a key to a map
    /// that does not exist, and must not replace one that does.
    pub annotations_present: bool,
    /// Whether the node carries a replace request
    /// (`nodegate.dev/replace-requested`): the opening removes it and its
    /// `replace-reason` in the same patch, so that no leader counts it in
    /// flight or deletes the owner of an open node again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clear_replace_request: bool,
    /// Whether the node is cordoned (`spec.unschedulable`) as the gate
    /// last saw it: then the request's `replace-reason` stays, saying why,
    /// for a person and for `uninstall` to report (nodegate never lifts a
    /// cordon).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cordoned: bool,
}

/// Record on the node, after its gate ended, that someone else opened it:
/// `nodegate.dev/opened-at` (the shell's time) and `opened-by: external`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalOpening {
    pub node: String,
    /// The node is cordoned: a replace request's `replace-reason` stays
    /// (see [`UntaintPatch::cordoned`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cordoned: bool,
}

/// Set `nodegate.dev/timed-out` on the node (`--on-timeout` keep or replace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutMark {
    pub node: String,
    pub deadline: Timestamp,
}

/// Set the [`OPEN_CONDITION`](crate::gate::OPEN_CONDITION) condition on `node`,
/// touching no other condition. `transition`: its status is new (or this
/// gate writes it for the first time), so `lastTransitionTime` is set to
/// the shell's now; otherwise the time already there is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionWrite {
    pub node: String,
    pub condition: OpenCondition,
    pub transition: bool,
}

word_enum! {
    /// Why the condition has its status, as its `reason` (CamelCase, as the API
    /// convention for condition reasons asks).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum ConditionReason {
        /// Closed: some expected member, or the node itself, is not Ready.
        Waiting = "Waiting",
        /// Every expected member is Ready; the untaint is being written.
        Opening = "Opening",
        /// The deadline passed with `--on-timeout` keep or replace: still closed,
        /// and still opens if everything becomes Ready.
        TimedOut = "TimedOut",
        /// Opened: every expected member was Ready (`opened-by: ready`).
        OpenedByReady = "OpenedByReady",
        /// Opened by the deadline (`opened-by: timeout`).
        OpenedByTimeout = "OpenedByTimeout",
        /// Opened by the `nodegate.dev/open` annotation (`opened-by: manual`).
        OpenedByManual = "OpenedByManual",
        /// Someone else removed the managed taints (`opened-by: external`).
        OpenedExternally = "OpenedExternally",
    }
}

impl ConditionReason {
    pub fn opened_by(by: OpenedBy) -> Self {
        match by {
            OpenedBy::Ready => ConditionReason::OpenedByReady,
            OpenedBy::Timeout => ConditionReason::OpenedByTimeout,
            OpenedBy::Manual => ConditionReason::OpenedByManual,
        }
    }
}

/// What the condition says on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenCondition {
    /// `True` when nodegate opened the node.
    pub open: bool,
    pub reason: ConditionReason,
    pub message: String,
}

impl OpenCondition {
    /// The condition's `status` field.
    pub fn status(&self) -> &'static str {
        if self.open { "True" } else { "False" }
    }
}

/// A managed taint and where it sits in `spec.taints`, for the patch's
/// `test` + `remove` pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedTaint {
    pub index: usize,
    pub taint: Taint,
}

/// Make the canary pod of `node` (semantics.md §6.9) in nodegate's own
/// namespace: named `name` ([`crate::canary::pod_name`]), labelled
/// [`crate::canary::CANARY_LABEL`]`=label`, bound to the node and owned
/// by it (`node_uid`); the shell supplies the rest of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryCreate {
    pub node: String,
    pub node_uid: String,
    pub name: String,
    pub label: String,
}

/// Delete the canary pod `name` of `node`; with `uid`, only if the name
/// still belongs to that pod. `force`: at once (grace period 0) — the node
/// is gone, and no kubelet will ever finish a graceful deletion (the pod
/// garbage collector would force it only later, while it holds a slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryDelete {
    pub node: String,
    pub name: String,
    pub uid: Option<String>,
    pub force: bool,
}

/// One write of the replace decider, conditional on the node's
/// `resource_version` where it writes the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplaceWrite {
    pub node: String,
    pub uid: String,
    pub resource_version: String,
    /// Whether the node has a `metadata.annotations` map to add to.
    pub annotations_present: bool,
    pub action: ReplaceAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplaceAction {
    /// Set `nodegate.dev/replace-requested` (`at`) and
    /// `nodegate.dev/replace-reason`, with `spec.unschedulable: true` when
    /// no owner is known, in one conditional patch; then delete the owner.
    Request {
        owner: Owner,
        provider_id: Option<String>,
        at: Timestamp,
        reason: String,
    },
    /// The request is on the node already: delete the owner (again).
    DeleteOwner {
        owner: Owner,
        provider_id: Option<String>,
    },
    /// Set `nodegate.dev/replace-fallback` and `replace-fallback-at`: not
    /// replaced, and what instead. `note`: the `ReplaceSkipped` Event's.
    Fallback {
        fallback: Fallback,
        at: Timestamp,
        note: String,
    },
}

/// Which decider a write, a log line or a count comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Origin {
    Net,
    Regate,
    Rules,
    Replace,
    Canary,
}

/// A conditional write of one taint on one node, as read at
/// `resource_version`: the API server refuses it whole if the node changed
/// since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaintWrite {
    pub origin: Origin,
    pub node: String,
    pub uid: String,
    pub resource_version: String,
    pub change: TaintChange,
    /// What the decider needs back with the answer (a rule's name).
    pub tag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaintChange {
    /// Put `taint` on, after the node's `existing` taints (the patch creates
    /// the list when there are none), and set `annotations`
    /// (`annotations_present`: whether the node has an annotations map the
    /// patch adds to, rather than creating it). A `NoExecute` taint is
    /// stamped `timeAdded` = `at`.
    Add {
        taint: Taint,
        existing: usize,
        annotations: Vec<(&'static str, String)>,
        annotations_present: bool,
        at: Timestamp,
    },
    /// Take off the taint at `index` of the node's taints, testing that it
    /// is still `taint` there, and set each of `annotations` to its value
    /// (`None`: remove it; the node has it).
    Remove {
        index: usize,
        taint: Taint,
        annotations: Vec<(&'static str, Option<String>)>,
    },
    /// No taint: set each of `annotations` to its value (`None`: remove
    /// it; the node has it). Re-gating's removal of
    /// `nodegate.dev/awaiting-reboot` (semantics.md §6.10).
    Annotate {
        annotations: Vec<(&'static str, Option<String>)>,
    },
}
