//! The deciders are the controllers in nodegate that are not a node's own
//! gate, each in its feature's folder: the late-taint net
//! ([`crate::net::decider`]), the closing decider
//! ([`crate::closing::decider`]: re-gating and condition-rule taints as two
//! methods of one decider over one [`crate::closing::ledger`] for
//! `--max-unavailable`), `--on-timeout=replace`
//! ([`crate::closing::replacing::decider`], with its own in-flight budget)
//! and the canary pods ([`crate::canary::decider`]).
//!
//! Each has the gate's shape. It is a plain value holding only what the
//! index does not (candidates, writes not yet seen by the watch, budget
//! counts, throttles); an [`Input`] goes in together with a [`Context`] (the
//! index, read-only, the configuration in force and the time), and
//! [`Effect`]s come out: the writes to make, the Events to record, the
//! reads to do, when to be asked again. Nothing here does I/O or reads a
//! clock; the actor crate's decider shell carries the effects out through
//! the one node writer and feeds the answers back as inputs.
//!
//! What every decider shares lives here: the change feed's vocabulary
//! ([`Change`]), the index as a decider reads it ([`ClusterView`]), the one
//! definition of "now" ([`Now`]), and the effects.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::gate::{NodeEvent, PatchOutcome};
use crate::net::entrance::BoundPod;
use crate::vocab::config::Config;
use crate::vocab::model::{DaemonSetInfo, Fallback, NodeInfo, Owner, PodInfo, Taint};

/// The index as a decider reads it: I/O-free, always answering at once.
pub trait ClusterView {
    fn node(&self, name: &str) -> Option<Arc<NodeInfo>>;
    /// The pods bound to `node`, in no particular order.
    fn pods_on(&self, node: &str) -> Vec<Arc<PodInfo>>;
    fn daemonsets(&self) -> Vec<Arc<DaemonSetInfo>>;
    /// Every indexed node, in no particular order.
    fn nodes(&self) -> Vec<Arc<NodeInfo>>;
    /// `f` on the pods bound to `node` (none: an empty slice), without a
    /// copy of them where the index can lend them.
    fn with_pods_on(&self, node: &str, f: &mut dyn FnMut(&[Arc<PodInfo>])) {
        f(&self.pods_on(node));
    }
}

/// One change of the index, as its change feed publishes it to the gates
/// and the deciders.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A node was added, changed or deleted: the index held `before` and
    /// holds `after` now.
    Node {
        name: String,
        before: Option<Arc<NodeInfo>>,
        after: Option<Arc<NodeInfo>>,
    },
    /// A pod bound to `node` was added, changed or deleted.
    Pods { node: String },
    /// What every node depends on changed: a DaemonSet, the configuration
    /// in force, or the initial lists are all in.
    Everything,
    /// `node`'s gate stopped: the node is open now (or gone).
    GateStopped { node: String },
}

/// The time a decision is made at, and the one definition of "now" every
/// decider uses: the cluster's clock as far as trusted evidence goes.
///
/// `server` is the newest time the API server is known to have reached
/// (times it stamped on objects, its Date header, nodegate's own writes,
/// carried forward on the monotonic clock); `local` is this machine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub local: Timestamp,
    pub server: Option<Timestamp>,
}

impl Now {
    /// A time with no server evidence, as tests and a cluster that stamped
    /// nothing yet give it.
    pub fn local(at: Timestamp) -> Self {
        Now {
            local: at,
            server: None,
        }
    }

    /// For a grace that must not run out early: never ahead of what the
    /// API server's clock has reached (this machine's clock only while
    /// there is no evidence). Re-gating's grace counts by it.
    pub fn for_grace(&self) -> Timestamp {
        self.server.unwrap_or(self.local)
    }

    /// For a window that must not stay open too long, or a rule's `for`
    /// as the condition-rule tainter has always counted it: the later of
    /// the two clocks.
    pub fn for_window(&self) -> Timestamp {
        self.server.map_or(self.local, |s| s.max(self.local))
    }
}

/// What a decider reads besides its input.
pub struct Context<'a> {
    pub view: &'a dyn ClusterView,
    pub config: &'a Config,
    pub now: Now,
    /// Whether the node writer would send a write now (this replica leads).
    /// A decider that may not write keeps its work for later; the writer
    /// enforces the rule all the same.
    pub may_write: bool,
}

/// What goes into a decider.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    Changed(Change),
    /// The time a decider asked for with [`Effect::LookAgainAt`] has come
    /// (on this machine's clock).
    Tick,
    /// Writes may go out again: this replica gained the lease.
    MayWrite,
    /// The node writer's answer to [`Effect::Write`].
    Wrote {
        write: TaintWrite,
        outcome: PatchOutcome,
    },
    /// The answer to [`Effect::ListPods`].
    PodsListed {
        node: String,
        pods: Result<Vec<BoundPod>, String>,
    },
    /// The answer to [`Effect::ReadNode`]; `Ok(None)`: the node is gone.
    NodeRead {
        node: String,
        read: Result<Option<Box<NodeInfo>>, String>,
    },
    /// The executor's answer to [`Effect::Replace`].
    Replaced {
        write: ReplaceWrite,
        outcome: ReplaceOutcome,
    },
    /// The answer to [`Effect::CreateCanary`]: `Applied` when made,
    /// `Conflict` when a pod of that name exists already.
    CanaryCreated {
        create: CanaryCreate,
        outcome: PatchOutcome,
    },
    /// The answer to [`Effect::DeleteCanary`]: `Applied` when deleted (or
    /// being deleted), `NotFound` when gone already, `Conflict` when the
    /// name now belongs to another pod.
    CanaryDeleted {
        delete: CanaryDelete,
        outcome: PatchOutcome,
    },
    /// The answer to [`Effect::ListCanaries`]: every canary pod in
    /// nodegate's namespace, bound or not.
    CanariesListed(Result<Vec<PodInfo>, String>),
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

/// What the executor did with a [`ReplaceWrite`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplaceOutcome {
    /// Done. `deleted`: the owner object deleted (`nodeclaim/NAME`,
    /// `machine/NS/NAME`); `None` for a cordon or a fallback.
    Done { deleted: Option<String> },
    /// The node is marked, but its owner could not be deleted (why).
    OwnerFailed(String),
    /// A request found no owner it could prove owns the node (why): nothing
    /// was written, and the decider falls back instead.
    NoOwner(String),
    /// The node write was not made (or may not have been).
    NotWritten(PatchOutcome),
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

/// How loud a [`Effect::Log`] line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
}

/// A counter a decider moves; the shell hands it to the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tally {
    /// The net's result for a node: `tainted`, `skipped` or `failed`.
    LateTaint(&'static str),
    /// A node re-gated, by trigger kind (`members`, `reboot`).
    Regated(&'static str),
    RegateBudgetExhausted,
    RuleAdded(String),
    RuleRemoved(String),
    RuleBudgetBlocked(String),
    /// A replace request, by owner kind (`nodeclaim`, `machine`, `none`)
    /// and outcome (`requested`, `owner_failed`, `failed`).
    Replaced {
        owner: &'static str,
        outcome: &'static str,
    },
    ReplaceBudgetExhausted,
    /// A node not replaced for a cluster-wide breakage, by fallback.
    ReplaceSkipped(&'static str),
    /// A canary pod created, deleted (why: `not_gated`, `node_gone`,
    /// `failed`) or seen failed.
    CanaryCreated,
    CanaryDeleted(&'static str),
    CanaryFailed,
}

/// What comes out of a decider.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    Write(TaintWrite),
    RecordEvent(NodeEvent),
    /// LIST the pods bound to the node; answer [`Input::PodsListed`].
    ListPods {
        node: String,
    },
    /// A fresh read of the node; answer [`Input::NodeRead`].
    ReadNode {
        node: String,
    },
    /// Answer [`Input::CanaryCreated`].
    CreateCanary(CanaryCreate),
    /// Answer [`Input::CanaryDeleted`].
    DeleteCanary(CanaryDelete),
    /// LIST every canary pod; answer [`Input::CanariesListed`].
    ListCanaries,
    /// Deliver [`Input::Tick`] at `at` on this machine's clock ([`Now::local`]:
    /// the shell's timers run on it; a decider that judges time on another
    /// reading converts), at once if past. Only the earliest pending one
    /// counts.
    LookAgainAt(Timestamp),
    /// A line for the log, with the node it concerns; `origin`: the
    /// method of a decider of two that said it (`None`: the decider's own).
    Log {
        level: Level,
        node: String,
        message: String,
        origin: Option<Origin>,
    },
    Count(Tally),
    /// `--on-timeout=replace`: mark the node and ask its owner to replace
    /// it, or record a fallback; answer [`Input::Replaced`].
    Replace(ReplaceWrite),
}

impl Effect {
    pub fn log(level: Level, node: &str, message: impl Into<String>) -> Self {
        Effect::Log {
            level,
            node: node.to_string(),
            message: message.into(),
            origin: None,
        }
    }
}

/// How long a decider waits before looking again at work it could not do
/// (a write refused for leadership, a failed request, a held budget).
pub const RETRY: SignedDuration = SignedDuration::from_secs(1);

/// `at` plus [`RETRY`].
pub fn retry_after(at: Timestamp) -> Timestamp {
    at.checked_add(RETRY).unwrap_or(at)
}

/// A decider: its state, and the one function that moves it.
pub trait Decider: Send + 'static {
    fn origin(&self) -> Origin;
    /// Whether it counts a budget from the index: then, after this replica
    /// gains the lease, its shell lets it write only once the node watch
    /// has caught up (semantics.md §5.6).
    fn budgeted(&self) -> bool {
        false
    }
    fn decide(&mut self, input: Input, cx: &Context<'_>) -> Vec<Effect>;
}

/// A due node a budget refused is looked at again this much later (or as
/// soon as a place frees up), not at every tick: during a cluster-wide
/// breakage most nodes are due and refused.
pub const BUDGET_RETRY: SignedDuration = SignedDuration::from_secs(10);

/// A budget's refusal of one node is told (a log line and an Event) at most
/// this often.
pub const BUDGET_EVENT_EVERY: SignedDuration = SignedDuration::from_secs(600);

/// Tells of a budget's refusal of `node`: a Warning log line and, when
/// `words` builds one, a Warning Event, unless the refusal was told less
/// than [`BUDGET_EVENT_EVERY`] ago (`told` keeps when, by node). The words
/// are built only when told, since in a breakage most nodes are refused
/// every [`BUDGET_RETRY`].
pub fn tell_refusal(
    told: &mut HashMap<String, Timestamp>,
    node: &str,
    now: Timestamp,
    words: impl FnOnce() -> (String, Option<NodeEvent>),
    out: &mut Vec<Effect>,
) {
    let due = told
        .get(node)
        .is_none_or(|last| now.duration_since(*last) >= BUDGET_EVENT_EVERY);
    if !due {
        return;
    }
    told.insert(node.to_string(), now);
    let (log, event) = words();
    out.push(Effect::log(Level::Warn, node, log));
    if let Some(event) = event {
        out.push(Effect::RecordEvent(event));
    }
}

/// Whether `node` counts against `--max-unavailable`, the cap on the nodes
/// nodegate keeps closed on its own initiative: it carries the re-gate
/// taint or one of the condition rules' taints (whoever put it on, as each
/// one's own budget counts). A node closed by its startup taint is not
/// counted: it is new, not taken out of service. The [`ledger`] counts by
/// it.
pub fn closed_by_nodegate(node: &NodeInfo, cfg: &Config) -> bool {
    cfg.regate
        .as_ref()
        .is_some_and(|rc| crate::closing::regating::carries(node, rc))
        || cfg.condition_taints.iter().any(|r| {
            node.taints
                .iter()
                .any(|t| crate::rules::conditions::taints::same_taint(t, &r.taint))
        })
}

#[cfg(test)]
pub(crate) mod fixture;
