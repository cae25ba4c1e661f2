//! What every decider shares: the change feed's vocabulary ([`Change`]),
//! the index as a decider reads it ([`ClusterView`]), the one definition of
//! "now" ([`Now`]), the [`Input`]s, the [`Effect`]s and the [`Decider`]
//! trait. See docs/architecture.md, "The change feed and the decider
//! shells".

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::gate::{EventType, NodeEvent, Reason};
use crate::net::entrance::BoundPod;
use crate::vocab::config::Config;
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo, Taint};

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

/// One change of the index, as the deciders and the gates hear of it.
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
    /// A DaemonSet was added, changed or deleted: what every node depends
    /// on (a decider looks at every node again, as for `Everything`).
    DaemonSet { uid: String },
    /// What every node depends on changed: the configuration in force, or
    /// the initial lists are all in.
    Everything,
    /// `node`'s gate stopped: the node is open now (or gone).
    GateStopped { node: String },
}

impl Change {
    /// Whether every node is to be looked at again: a DaemonSet changed,
    /// or everything did.
    pub fn reaches_every_node(&self) -> bool {
        matches!(self, Change::DaemonSet { .. } | Change::Everything)
    }
}

/// The time a decision is made at, and the one definition of "now" every
/// decider uses: `server` is the newest time the API server is known to
/// have reached (semantics.md §5.3), `local` this machine's.
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

    /// `at` on `clock` (the reading of [`Now::for_grace`] or
    /// [`Now::for_window`] a decider judges by), as this machine's clock
    /// will show it then: the shell's timers run on it.
    pub fn to_local(&self, clock: Timestamp, at: Timestamp) -> Timestamp {
        at.checked_add(self.local.duration_since(clock))
            .unwrap_or(at)
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
        outcome: Outcome,
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

pub use crate::vocab::write::{
    CanaryCreate, CanaryDelete, Origin, Outcome, PatchOutcome, ReplaceAction, ReplaceWrite,
    TaintChange, TaintWrite,
};

/// A write of `change` on `node` as shown (by the index or a fresh read):
/// conditional on its uid and resourceVersion.
pub fn write_on(origin: Origin, node: &NodeInfo, change: TaintChange) -> TaintWrite {
    TaintWrite {
        origin,
        node: node.name.clone(),
        uid: node.uid.clone(),
        resource_version: node.resource_version.clone(),
        change,
        tag: None,
    }
}

/// `taint` put on `node` after its others, with `annotations`, at `at`.
pub fn add_taint(
    node: &NodeInfo,
    taint: Taint,
    annotations: Vec<(&'static str, String)>,
    at: Timestamp,
) -> TaintChange {
    TaintChange::Add {
        taint,
        existing: node.taints.len(),
        annotations,
        annotations_present: node.annotations_present,
        at,
    }
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

    /// A Warning Event about node `name` (of uid `uid`), telling of a
    /// decision (recorded by the leader alone).
    pub fn warning(name: &str, uid: &str, reason: Reason, note: String) -> Self {
        Effect::RecordEvent(NodeEvent::new(name, uid, EventType::Warning, reason, note))
    }

    /// A Warning Event about node `name` (of uid `uid`), telling of a write
    /// this replica applied ([`NodeEvent::own_write`]).
    pub fn warning_of_own_write(name: &str, uid: &str, reason: Reason, note: String) -> Self {
        let event = NodeEvent::new(name, uid, EventType::Warning, reason, note);
        Effect::RecordEvent(event.of_own_write())
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
    out.extend(event.map(Effect::RecordEvent));
}

/// Whether `node` counts against `--max-unavailable`, the cap on the nodes
/// nodegate keeps closed on its own initiative: it carries the re-gate
/// taint or one of the condition rules' taints (whoever put it on, as each
/// one's own budget counts). A node closed by its startup taint is not
/// counted: it is new, not taken out of service. The closing ledger counts
/// by it.
pub fn closed_by_nodegate(node: &NodeInfo, cfg: &Config) -> bool {
    use crate::closing::{condition_taints, regating};
    let regated = cfg.regate.iter().any(|rc| regating::carries(node, rc));
    let rules = &cfg.condition_taints;
    regated || rules.iter().any(|r| condition_taints::carries(node, r))
}

#[cfg(test)]
#[path = "tests/fixture.rs"]
pub(crate) mod fixture;
