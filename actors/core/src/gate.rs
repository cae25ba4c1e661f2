//! The gate of one node: a pure, event-sourced state machine.
//!
//! This module owns every decision about one gated node — which DaemonSets and
//! critical pods it waits for and why, whether each is Ready, when its deadline
//! falls, and when and how its managed taints are removed — as three plain
//! functions: [`decide`] turns an [`Input`] into [`Event`]s (facts), [`apply`]
//! folds one event into the [`GateState`], and [`effects`] says what the shell
//! must do because of an event. Events carry everything `apply` needs, so
//! folding a node's journal from [`GateState::default`] rebuilds its live state
//! exactly; `apply` never looks at the configuration, the clock or the input.
//! This module must never do I/O, read the clock, use randomness or spawn
//! anything: time comes in as `now`, and every write, timer and retry leaves as
//! an [`Effect`] for the actor shell (`node_actor`) to carry out.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::model::{DaemonSetInfo, NodeInfo, PodInfo, Taint};
use crate::placement::{self, PlacementConfig, Verdict};
use crate::readiness::{self, CriticalPodEntry, MemberState, Waiting};

/// Kubernetes rejects an Event whose note is longer than this (events.k8s.io/v1).
const MAX_NOTE_BYTES: usize = 1024;

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------

/// What a gate does when its deadline passes with members still not Ready.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTimeout {
    /// Remove the taint anyway (the default): a broken DaemonSet must not keep
    /// a node closed for ever.
    #[default]
    Open,
    /// Leave the taint and mark the node `nodegate.dev/timed-out`; the gate
    /// still opens if every member later becomes Ready.
    Keep,
}

/// The default `--timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The settings every gate shares. Built once by the binary from flags and the
/// config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateConfig {
    pub placement: PlacementConfig,
    pub critical: Vec<CriticalPodEntry>,
    /// `None` means no deadline (`--timeout 0`).
    pub timeout: Option<Duration>,
    pub on_timeout: OnTimeout,
    pub dry_run: bool,
}

impl Default for GateConfig {
    /// The defaults `nodegate run` documents: the default managed and
    /// transient taints, 120 s, open on timeout, writes enabled.
    fn default() -> Self {
        GateConfig {
            placement: PlacementConfig::default(),
            critical: Vec::new(),
            timeout: Some(DEFAULT_TIMEOUT),
            on_timeout: OnTimeout::Open,
            dry_run: false,
        }
    }
}

// ---------------------------------------------------------------------------
// Members
// ---------------------------------------------------------------------------

/// Who a gate may wait for. DaemonSets are named `namespace/name` (a name is
/// held by one live object at a time; a recreated DaemonSet replaces the old
/// one under the same name), critical-pod entries `critical:NAME` — a colon can
/// appear in neither a namespace nor a DaemonSet name, so the two never clash.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MemberId {
    DaemonSet(String),
    Critical(String),
}

impl MemberId {
    pub fn daemonset(ds: &DaemonSetInfo) -> Self {
        MemberId::DaemonSet(ds.key())
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberId::DaemonSet(key) => f.write_str(key),
            MemberId::Critical(name) => write!(f, "critical:{name}"),
        }
    }
}

impl std::str::FromStr for MemberId {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.strip_prefix("critical:") {
            Some(name) => MemberId::Critical(name.to_string()),
            None => MemberId::DaemonSet(s.to_string()),
        })
    }
}

// A string form keeps journal lines short ("member":"kube-system/cilium") and
// lets members be JSON map keys.
impl Serialize for MemberId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for MemberId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(s.parse()
            .unwrap_or_else(|never: std::convert::Infallible| match never {}))
    }
}

/// Whether the gate waits for a member, and if not, why not (in words, as the
/// placement rules put it, and as a stable code such as "node_selector" or
/// "starts_after_gate": `NotExpectedReason::code` for DaemonSets).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expectation {
    Expected,
    NotExpected {
        reason: String,
        #[serde(default)]
        code: String,
    },
}

/// Where an expected member stands on this node. Kept as text plus the one
/// time that matters, so that it compares equal across inputs while nothing
/// changes (the readiness module's own `Waiting` renders `ready_for`, which
/// grows with `now`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Readiness {
    Ready {
        pod: String,
    },
    Waiting {
        why: String,
        /// The pod it waits on; `None` when there is no pod yet.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pod: Option<String>,
        /// When a Ready pod becomes available (minReadySeconds): the gate
        /// re-checks at that time instead of polling.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available_at: Option<Timestamp>,
    },
}

impl Readiness {
    fn from_member_state(state: MemberState) -> Self {
        match state {
            MemberState::Ready { pod } => Readiness::Ready { pod },
            MemberState::NotReady(Waiting::NotAvailableYet {
                pod,
                min_ready,
                available_at,
                ..
            }) => Readiness::Waiting {
                why: Readiness::not_available_text(&pod, min_ready, available_at, None),
                pod: Some(pod),
                available_at: Some(available_at),
            },
            MemberState::NotReady(waiting) => Readiness::Waiting {
                why: waiting.to_string(),
                pod: waiting.pod().map(str::to_string),
                available_at: None,
            },
        }
    }

    /// The one wording for a pod that is Ready but not yet available
    /// (`minReadySeconds`). The gate's own text must stay equal while
    /// nothing changes, so without `now` it says "less than"; a report made
    /// at one moment (`now`) says how long, in the readiness module's words.
    pub fn not_available_text(
        pod: &str,
        min_ready: Duration,
        available_at: Timestamp,
        now: Option<Timestamp>,
    ) -> String {
        let head = match now {
            Some(now) => {
                let left =
                    Duration::try_from(available_at.duration_since(now)).unwrap_or(Duration::ZERO);
                Waiting::NotAvailableYet {
                    pod: pod.to_string(),
                    ready_for: min_ready.saturating_sub(left),
                    min_ready,
                    available_at,
                }
                .to_string()
            }
            None => format!(
                "pod {pod} Ready for less than minReadySeconds {}s",
                min_ready.as_secs()
            ),
        };
        format!("{head}, available at {available_at}")
    }

    /// A critical-pod entry's readiness: "no pod yet" names what it looks
    /// for, since nothing owns the pod it waits on.
    fn of_critical(entry: &CriticalPodEntry, state: MemberState) -> Self {
        match state {
            MemberState::NotReady(Waiting::NoPod) => Readiness::Waiting {
                why: format!(
                    "no pod matching {} in namespace {} on the node yet",
                    entry.selector, entry.namespace
                ),
                pod: None,
                available_at: None,
            },
            state => Readiness::from_member_state(state),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, Readiness::Ready { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub expectation: Expectation,
    /// Tracked for expected members only; `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,
}

impl Member {
    pub fn is_expected(&self) -> bool {
        self.expectation == Expectation::Expected
    }
}

/// An expected member that was not Ready, and why — what a Warning names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    pub member: MemberId,
    pub why: String,
}

// ---------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpenedBy {
    Ready,
    Timeout,
}

impl OpenedBy {
    /// The value of the `nodegate.dev/opened-by` annotation.
    pub fn as_str(self) -> &'static str {
        match self {
            OpenedBy::Ready => "ready",
            OpenedBy::Timeout => "timeout",
        }
    }
}

impl fmt::Display for OpenedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The Node object was deleted (watch).
    NodeDeleted,
    /// The API server answered 404 for the node (patch or re-read).
    NodeNotFound,
    /// Every managed taint disappeared and nodegate did not remove it.
    TaintRemovedElsewhere,
    /// The node carried no managed taint when the gate started.
    NotGated,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::NodeDeleted => "node deleted",
            StopReason::NodeNotFound => "node not found",
            StopReason::TaintRemovedElsewhere => "managed taint removed by another writer",
            StopReason::NotGated => "node carries no managed taint",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteKind {
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
    pub kind: WriteKind,
    pub attempt: u32,
    pub status: WriteStatus,
    /// For an untaint: the resourceVersion the last patch tested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// An untaint decided because every member was Ready, in flight when a
    /// member stopped being Ready: asked not to be sent if it has not been.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub withdrawing: bool,
}

/// What the deadline found, kept for the Warning that follows the write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeoutRecord {
    pub deadline: Timestamp,
    pub action: OnTimeout,
    pub expected: usize,
    pub not_ready: Vec<Blocker>,
}

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
}

/// Everything one gate knows. Changed only by [`apply`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GateState {
    /// The node as last seen; `None` until the first snapshot.
    pub node: Option<NodeInfo>,
    /// Every DaemonSet in the cluster, by `namespace/name`: any of them may
    /// become expected when the node or the DaemonSet changes.
    pub daemonsets: BTreeMap<String, Arc<DaemonSetInfo>>,
    /// Pods bound to this node, by uid.
    pub pods: BTreeMap<String, Arc<PodInfo>>,
    pub members: BTreeMap<MemberId, Member>,
    pub timers: Timers,
    pub phase: Phase,
    pub write: Option<Write>,
    pub timed_out: Option<TimeoutRecord>,
    pub timeout_marked: bool,
    pub opened: Option<OpenedRecord>,
    pub stopped: Option<StopReason>,
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

    /// The expected members that are not Ready, and why.
    pub fn blockers(&self) -> Vec<Blocker> {
        self.expected()
            .filter_map(|(id, m)| match &m.readiness {
                Some(Readiness::Ready { .. }) => None,
                Some(Readiness::Waiting { why, .. }) => Some(Blocker {
                    member: id.clone(),
                    why: why.clone(),
                }),
                None => Some(Blocker {
                    member: id.clone(),
                    why: "not evaluated yet".to_string(),
                }),
            })
            .collect()
    }

    /// When the gate started: `nodegate.dev/gated-since` for a re-gated node,
    /// the node's creation otherwise.
    pub fn gate_start(&self) -> Option<Timestamp> {
        self.node.as_ref().map(gate_start)
    }
}

fn gate_start(node: &NodeInfo) -> Timestamp {
    node.gated_since.unwrap_or(node.created)
}

// ---------------------------------------------------------------------------
// Inputs
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    Deadline,
    /// A member becomes available (minReadySeconds) at a known time.
    Recheck,
    /// The backoff before write attempt `generation`.
    Retry,
}

/// What the executor reports for a write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchOutcome {
    Applied,
    /// 409, or 422 from a failed `test` operation: the node changed.
    Conflict,
    NotFound,
    Failed(String),
    /// This replica does not hold the lease; nothing was written.
    NotLeader,
    /// The gate withdrew the write ([`Effect::WithdrawWrite`]) before it
    /// was sent; nothing was written.
    Withdrawn,
}

/// Everything that can happen to a gate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// The cluster as it is now (start, or restart after a failure). Pods not
    /// bound to the node are ignored.
    Snapshot {
        node: NodeInfo,
        daemonsets: Vec<Arc<DaemonSetInfo>>,
        pods: Vec<Arc<PodInfo>>,
    },
    NodeChanged(NodeInfo),
    NodeDeleted,
    DaemonSetUpserted(Arc<DaemonSetInfo>),
    DaemonSetDeleted {
        uid: String,
    },
    PodUpserted(Arc<PodInfo>),
    PodDeleted {
        uid: String,
    },
    TimerFired {
        kind: TimerKind,
        generation: u64,
    },
    /// Result of [`Effect::RemoveTaints`].
    PatchResult(PatchOutcome),
    /// Result of [`Effect::MarkTimedOut`].
    MarkResult(PatchOutcome),
    /// Result of [`Effect::RefreshNode`]: `Ok(None)` is a 404.
    NodeRefreshed(Result<Option<NodeInfo>, String>),
    LeadershipGained,
}

impl Input {
    /// A snapshot from owned objects (tests, one-off evaluations); the
    /// router shares its own copies instead.
    pub fn snapshot(node: NodeInfo, daemonsets: Vec<DaemonSetInfo>, pods: Vec<PodInfo>) -> Self {
        Input::Snapshot {
            node,
            daemonsets: daemonsets.into_iter().map(Arc::new).collect(),
            pods: pods.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn pod_upserted(pod: PodInfo) -> Self {
        Input::PodUpserted(Arc::new(pod))
    }

    pub fn daemonset_upserted(ds: DaemonSetInfo) -> Self {
        Input::DaemonSetUpserted(Arc::new(ds))
    }
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// A managed taint and where it sits in `spec.taints`, for the patch's
/// `test` + `remove` pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexedTaint {
    pub index: usize,
    pub taint: Taint,
}

/// The facts of a gate's life, in the order they happened. Serialized
/// externally tagged in snake_case, e.g.
/// `{"member_ready":{"member":"kube-system/cilium","pod":"cilium-x7f"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    // --- what the gate saw ---
    /// The node is boxed here and below so that the frequent small events
    /// do not each take a node's room (journal entries, moves).
    Snapshot {
        node: Box<NodeInfo>,
        daemonsets: Vec<Arc<DaemonSetInfo>>,
        pods: Vec<Arc<PodInfo>>,
    },
    NodeUpdated {
        node: Box<NodeInfo>,
    },
    /// Only the resourceVersion moved (status updates): kept short.
    NodeVersionChanged {
        resource_version: String,
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
        #[serde(default)]
        code: String,
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
        pod: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        available_at: Option<Timestamp>,
    },

    // --- timers ---
    DeadlineSet {
        at: Timestamp,
        generation: u64,
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
        action: OnTimeout,
        expected: usize,
        not_ready: Vec<Blocker>,
    },
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
    WriteConflict {
        attempt: u32,
    },
    WriteFailed {
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
    Stopped {
        reason: StopReason,
    },
}

// ---------------------------------------------------------------------------
// Effects
// ---------------------------------------------------------------------------

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
    pub reason: String,
    /// At most 1024 bytes, as the API requires.
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

// ---------------------------------------------------------------------------
// decide
// ---------------------------------------------------------------------------

/// Turns an input into the facts it establishes, given the state before it.
/// Returns no events when the input changes nothing (duplicates, stale timers,
/// results for a write that is no longer outstanding).
pub fn decide(state: &GateState, input: &Input, cfg: &GateConfig, now: Timestamp) -> Vec<Event> {
    if state.is_finished() {
        return Vec::new();
    }
    let mut scratch = state.clone();
    decide_in_place(&mut scratch, input, cfg, now)
}

/// `decide` on the state itself: each event is applied as it is emitted, so
/// afterwards `state` is what folding the returned events gives.
fn decide_in_place(
    state: &mut GateState,
    input: &Input,
    cfg: &GateConfig,
    now: Timestamp,
) -> Vec<Event> {
    if state.is_finished() {
        return Vec::new();
    }
    let mut d = Decider {
        s: state,
        events: Vec::new(),
        cfg,
        now,
    };
    d.input(input);
    d.events
}

/// Folds one fact into the state. Never fails and never consults anything but
/// the event: an event that does not fit the state (e.g. a member update for a
/// member that is not there) changes nothing.
pub fn apply(state: &mut GateState, ev: &Event) {
    match ev {
        Event::Snapshot {
            node,
            daemonsets,
            pods,
        } => {
            state.node = Some(NodeInfo::clone(node));
            state.daemonsets = daemonsets.iter().map(|ds| (ds.key(), ds.clone())).collect();
            state.pods = pods.iter().map(|p| (p.uid.clone(), p.clone())).collect();
        }
        Event::NodeUpdated { node } => state.node = Some(NodeInfo::clone(node)),
        Event::NodeVersionChanged { resource_version } => {
            if let Some(node) = &mut state.node {
                node.resource_version = resource_version.clone();
            }
        }
        Event::DaemonSetUpdated { daemonset } => {
            state.daemonsets.insert(daemonset.key(), daemonset.clone());
        }
        Event::DaemonSetRemoved { daemonset, .. } => {
            state.daemonsets.remove(daemonset);
        }
        Event::PodStatusChanged {
            uid,
            phase,
            ready,
            ready_since,
            terminating,
            ..
        } => {
            if let Some(slot) = state.pods.get_mut(&**uid) {
                let p = Arc::make_mut(slot);
                p.phase.clear();
                p.phase.push_str(phase);
                p.ready = *ready;
                p.ready_since = *ready_since;
                p.terminating = *terminating;
            }
        }
        Event::PodUpdated { pod } => match state.pods.get_mut(&pod.uid) {
            // A new version of a known pod: no new key to allocate.
            Some(slot) => *slot = Arc::clone(pod),
            None => {
                state.pods.insert(pod.uid.clone(), Arc::clone(pod));
            }
        },
        Event::PodRemoved { uid, .. } => {
            state.pods.remove(uid);
        }
        Event::MemberExpected { member } => {
            let m = state.members.entry(member.clone()).or_insert(Member {
                expectation: Expectation::Expected,
                readiness: None,
            });
            m.expectation = Expectation::Expected;
        }
        Event::MemberNotExpected {
            member,
            reason,
            code,
        } => {
            state.members.insert(
                member.clone(),
                Member {
                    expectation: Expectation::NotExpected {
                        reason: reason.clone(),
                        code: code.clone(),
                    },
                    readiness: None,
                },
            );
        }
        Event::MemberRemoved { member } => {
            state.members.remove(member);
        }
        Event::MemberReady { member, pod } => {
            if let Some(m) = state.members.get_mut(member) {
                m.readiness = Some(Readiness::Ready { pod: pod.clone() });
            }
        }
        Event::MemberWaiting {
            member,
            why,
            pod,
            available_at,
        } => {
            if let Some(m) = state.members.get_mut(member) {
                m.readiness = Some(Readiness::Waiting {
                    why: why.clone(),
                    pod: pod.clone(),
                    available_at: *available_at,
                });
            }
        }
        Event::DeadlineSet { at, generation } => {
            state.timers.deadline = Some(*at);
            state.timers.deadline_generation = *generation;
        }
        Event::RecheckScheduled { at, generation } => {
            state.timers.recheck = Some(*at);
            state.timers.recheck_generation = *generation;
        }
        Event::RecheckFired { .. } => state.timers.recheck = None,
        Event::TimedOut {
            deadline,
            action,
            expected,
            not_ready,
        } => {
            state.timed_out = Some(TimeoutRecord {
                deadline: *deadline,
                action: *action,
                expected: *expected,
                not_ready: not_ready.clone(),
            });
            if *action == OnTimeout::Keep {
                state.phase = Phase::TimedOutKept;
            }
        }
        Event::WouldOpen { opened_by, at, .. } => {
            state.phase = Phase::WouldOpen;
            state.opened = Some(OpenedRecord {
                opened_by: *opened_by,
                at: *at,
                resource_version: state
                    .node
                    .as_ref()
                    .map(|n| n.resource_version.clone())
                    .unwrap_or_default(),
            });
        }
        Event::UntaintSent {
            attempt,
            opened_by,
            resource_version,
            ..
        } => {
            state.phase = Phase::Opening;
            state.write = Some(Write {
                kind: WriteKind::Untaint {
                    opened_by: *opened_by,
                },
                attempt: *attempt,
                status: WriteStatus::InFlight,
                resource_version: Some(resource_version.clone()),
                last_error: None,
                withdrawing: false,
            });
        }
        Event::MarkSent { attempt } => {
            state.write = Some(Write {
                kind: WriteKind::MarkTimedOut,
                attempt: *attempt,
                status: WriteStatus::InFlight,
                resource_version: None,
                last_error: None,
                withdrawing: false,
            });
        }
        Event::WriteConflict { .. } => set_write_status(state, WriteStatus::Refreshing),
        Event::WriteFailed { error, .. } => {
            if let Some(w) = &mut state.write {
                w.last_error = Some(error.clone());
            }
        }
        Event::WriteDeferred { .. } => set_write_status(state, WriteStatus::AwaitingLeader),
        Event::WithdrawRequested { .. } => {
            if let Some(w) = &mut state.write {
                w.withdrawing = true;
            }
        }
        Event::RetryScheduled { attempt } => {
            if let Some(w) = &mut state.write {
                w.attempt = *attempt;
                w.status = WriteStatus::Backoff;
            }
        }
        Event::WriteAbandoned { .. } => {
            state.write = None;
            state.phase = match &state.timed_out {
                Some(t) if t.action == OnTimeout::Keep => Phase::TimedOutKept,
                _ => Phase::Waiting,
            };
        }
        Event::Opened {
            opened_by,
            at,
            resource_version,
        } => {
            state.phase = Phase::Opened;
            state.write = None;
            state.opened = Some(OpenedRecord {
                opened_by: *opened_by,
                at: *at,
                resource_version: resource_version.clone(),
            });
        }
        Event::TimeoutMarked => {
            state.timeout_marked = true;
            state.write = None;
        }
        Event::Stopped { reason } => {
            state.phase = Phase::Gone;
            state.write = None;
            state.stopped = Some(*reason);
        }
    }
}

fn set_write_status(state: &mut GateState, status: WriteStatus) {
    if let Some(w) = &mut state.write {
        w.status = status;
    }
}

/// What the shell must do because of `ev`, given the state after the whole
/// step (so a timer armed and made moot in the same step is not scheduled).
pub fn effects(state: &GateState, ev: &Event, cfg: &GateConfig) -> Vec<Effect> {
    let Some(node) = &state.node else {
        return Vec::new();
    };
    match ev {
        Event::DeadlineSet { at, generation }
            if state.phase == Phase::Waiting && state.timers.deadline_generation == *generation =>
        {
            vec![Effect::ScheduleTimer {
                kind: TimerKind::Deadline,
                at: *at,
                generation: *generation,
            }]
        }
        Event::RecheckScheduled { at, generation }
            if matches!(state.phase, Phase::Waiting | Phase::TimedOutKept)
                && state.timers.recheck_generation == *generation =>
        {
            vec![Effect::ScheduleTimer {
                kind: TimerKind::Recheck,
                at: *at,
                generation: *generation,
            }]
        }
        Event::RetryScheduled { attempt }
            if state
                .write
                .as_ref()
                .is_some_and(|w| w.attempt == *attempt && w.status == WriteStatus::Backoff) =>
        {
            vec![Effect::ScheduleRetry { attempt: *attempt }]
        }
        Event::UntaintSent {
            opened_by,
            resource_version,
            taints,
            at,
            ..
        } => {
            let mut taints = taints.clone();
            taints.sort_by_key(|t| std::cmp::Reverse(t.index));
            vec![Effect::RemoveTaints(UntaintPatch {
                node: node.name.clone(),
                resource_version: resource_version.clone(),
                taints,
                opened_by: *opened_by,
                opened_at: *at,
            })]
        }
        Event::MarkSent { .. } => match &state.timed_out {
            Some(t) => vec![Effect::MarkTimedOut(TimeoutMark {
                node: node.name.clone(),
                deadline: t.deadline,
            })],
            None => Vec::new(),
        },
        Event::WriteConflict { .. } => vec![Effect::RefreshNode],
        Event::WithdrawRequested { .. } => vec![Effect::WithdrawWrite],
        Event::TimedOut {
            deadline,
            action,
            expected,
            not_ready,
        } if cfg.dry_run => {
            let what = match action {
                OnTimeout::Open => "would open the node anyway",
                OnTimeout::Keep => "would keep the node closed",
            };
            let note = format!(
                "dry-run: deadline passed {} after the gate started; {what}; {}",
                since(node, *deadline),
                not_ready_text(*expected, not_ready)
            );
            vec![record(node, EventType::Warning, "GateTimedOut", note)]
        }
        Event::WouldOpen {
            opened_by: OpenedBy::Ready,
            taints,
            at,
        } => {
            let note = format!(
                "dry-run: would remove {} now: {}, {} after the gate started",
                taint_list(taints),
                ready_text(state),
                since(node, *at)
            );
            vec![record(node, EventType::Normal, "GateWouldOpen", note)]
        }
        Event::Opened {
            opened_by: OpenedBy::Ready,
            at,
            ..
        } => {
            let note = format!(
                "opened: {}, {} after the gate started",
                ready_text(state),
                since(node, *at)
            );
            vec![
                record(node, EventType::Normal, "GateOpened", note),
                Effect::Stop("opened".to_string()),
            ]
        }
        Event::Opened {
            opened_by: OpenedBy::Timeout,
            at,
            ..
        } => {
            let note = match &state.timed_out {
                Some(t) => format!(
                    "deadline passed {} after the gate started; opened anyway {} after the gate started; {}",
                    since(node, t.deadline),
                    since(node, *at),
                    not_ready_text(t.expected, &t.not_ready)
                ),
                None => format!(
                    "opened by timeout {} after the gate started",
                    since(node, *at)
                ),
            };
            vec![
                record(node, EventType::Warning, "GateTimedOut", note),
                Effect::Stop("opened by timeout".to_string()),
            ]
        }
        Event::TimeoutMarked => match &state.timed_out {
            Some(t) => {
                let note = format!(
                    "deadline passed {} after the gate started; kept closed (--on-timeout=keep); {}",
                    since(node, t.deadline),
                    not_ready_text(t.expected, &t.not_ready)
                );
                vec![record(node, EventType::Warning, "GateTimedOut", note)]
            }
            None => Vec::new(),
        },
        Event::Stopped { reason } => vec![Effect::Stop(reason.to_string())],
        _ => Vec::new(),
    }
}

/// The result of one input: the events (already applied) and the effects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    pub events: Vec<Event>,
    pub effects: Vec<Effect>,
}

/// `decide`, then `apply` each event, then `effects` — what the actor runs per
/// input.
pub fn step(state: &mut GateState, input: &Input, cfg: &GateConfig, now: Timestamp) -> Step {
    let events = decide_in_place(state, input, cfg, now);
    let mut effects: Vec<Effect> = events
        .iter()
        .flat_map(|ev| effects(state, ev, cfg))
        .collect();
    // Stop must come last so the shell runs every other effect first.
    effects.sort_by_key(|e| matches!(e, Effect::Stop(_)));
    Step { events, effects }
}

// ---------------------------------------------------------------------------
// The decider: a scratch copy of the state that every emitted event is
// applied to at once, so later decisions in the same step see earlier facts.
// ---------------------------------------------------------------------------

struct Decider<'a> {
    s: &'a mut GateState,
    events: Vec<Event>,
    cfg: &'a GateConfig,
    now: Timestamp,
}

/// Why `reconcile` runs, for the write transitions that only a particular
/// input may trigger.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Trigger {
    Observation,
    RetryDue,
    Refreshed,
    Leadership,
}

impl Decider<'_> {
    fn emit(&mut self, ev: Event) {
        apply(self.s, &ev);
        self.events.push(ev);
    }

    /// Records a new version of a pod bound to the node: only its status
    /// when nothing else changed. The state then holds the indexed version
    /// itself, which equals what applying the event gives (replay checks
    /// it) without a copy of the pod per gate.
    fn pod_changed(&mut self, pod: &Arc<PodInfo>, old: Option<&PodInfo>) {
        let status_only = old.is_some_and(|old| {
            old.namespace == pod.namespace
                && old.name == pod.name
                && old.node_name == pod.node_name
                && old.controller_uid == pod.controller_uid
                && old.labels == pod.labels
        });
        if !status_only {
            return self.emit(Event::PodUpdated {
                pod: Arc::clone(pod),
            });
        }
        self.events.push(Event::PodStatusChanged {
            pod: pod.name.as_str().into(),
            uid: pod.uid.as_str().into(),
            phase: pod.phase.as_str().into(),
            ready: pod.ready,
            ready_since: pod.ready_since,
            terminating: pod.terminating,
        });
        if let Some(slot) = self.s.pods.get_mut(&pod.uid) {
            *slot = Arc::clone(pod);
        }
    }

    /// Whether `name` is the gated node's (false before the first snapshot).
    fn is_this_node(&self, name: &str) -> bool {
        self.s.node.as_ref().is_some_and(|n| n.name == name)
    }

    fn input(&mut self, input: &Input) {
        if let Input::Snapshot {
            node,
            daemonsets,
            pods,
        } = input
        {
            return self.snapshot(node, daemonsets, pods);
        }
        // Nothing but a snapshot can start a gate: deciding on a partial view
        // (say, a node without its DaemonSets) would open it at once.
        if self.s.node.is_none() {
            return;
        }
        match input {
            Input::Snapshot { .. } => {}
            Input::NodeChanged(node) => {
                if self.is_this_node(&node.name) {
                    let scope = if self.observe_node(node) {
                        Scope::All
                    } else {
                        Scope::Nothing
                    };
                    self.reconcile_scoped(Trigger::Observation, &scope);
                }
            }
            Input::NodeDeleted => self.emit(Event::Stopped {
                reason: StopReason::NodeDeleted,
            }),
            Input::DaemonSetUpserted(ds) => {
                let key = ds.key();
                if self.s.daemonsets.get(&key) != Some(ds) {
                    self.emit(Event::DaemonSetUpdated {
                        daemonset: ds.clone(),
                    });
                }
                self.reconcile_scoped(Trigger::Observation, &Scope::DaemonSet(Cow::Owned(key)));
            }
            Input::DaemonSetDeleted { uid } => {
                let key = self
                    .s
                    .daemonsets
                    .iter()
                    .find(|(_, ds)| &ds.uid == uid)
                    .map(|(k, _)| k.clone());
                match key {
                    Some(key) => {
                        self.emit(Event::DaemonSetRemoved {
                            daemonset: key.clone(),
                            uid: uid.clone(),
                        });
                        self.reconcile_scoped(
                            Trigger::Observation,
                            &Scope::DaemonSet(Cow::Owned(key)),
                        );
                    }
                    None => self.reconcile_scoped(Trigger::Observation, &Scope::Nothing),
                }
            }
            Input::PodUpserted(pod) => {
                // One lookup of the version the gate knows: every pod event
                // passes here.
                let old = self.s.pods.get(&pod.uid).map(Arc::clone);
                // The owner before the change, when it differs (a pod's
                // namespace never changes).
                let old_owner = old
                    .as_ref()
                    .and_then(|old| old.controller_uid.as_ref())
                    .filter(|old| Some(*old) != pod.controller_uid.as_ref())
                    .map(|old| Cow::Owned(old.clone()));
                if self.is_this_node(&pod.node_name) {
                    if old.as_deref() != Some(&**pod) {
                        self.pod_changed(pod, old.as_deref());
                    }
                } else if old.is_some() {
                    self.emit(Event::PodRemoved {
                        pod: pod.key(),
                        uid: pod.uid.clone(),
                    });
                }
                let scope = Scope::Pods {
                    owners: [pod.controller_uid.as_deref().map(Cow::Borrowed), old_owner],
                    namespace: Cow::Borrowed(&pod.namespace),
                };
                self.reconcile_scoped(Trigger::Observation, &scope);
            }
            Input::PodDeleted { uid } => match self.s.pods.get(uid) {
                Some(pod) => {
                    let scope = Scope::Pods {
                        owners: [pod.controller_uid.clone().map(Cow::Owned), None],
                        namespace: Cow::Owned(pod.namespace.clone()),
                    };
                    let key = pod.key();
                    self.emit(Event::PodRemoved {
                        pod: key,
                        uid: uid.clone(),
                    });
                    self.reconcile_scoped(Trigger::Observation, &scope);
                }
                None => self.reconcile_scoped(Trigger::Observation, &Scope::Nothing),
            },
            Input::TimerFired { kind, generation } => self.timer(*kind, *generation),
            Input::PatchResult(outcome) => self.patch_result(outcome),
            Input::MarkResult(outcome) => self.mark_result(outcome),
            Input::NodeRefreshed(result) => self.refreshed(result),
            Input::LeadershipGained => self.reconcile(Trigger::Leadership),
        }
    }

    fn snapshot(
        &mut self,
        node: &NodeInfo,
        daemonsets: &[Arc<DaemonSetInfo>],
        pods: &[Arc<PodInfo>],
    ) {
        // Keyed as the state keys them (a list may repeat an object; the
        // last copy wins), so an unchanged cluster compares equal.
        let daemonsets: BTreeMap<String, Arc<DaemonSetInfo>> =
            daemonsets.iter().map(|ds| (ds.key(), ds.clone())).collect();
        let pods: BTreeMap<String, Arc<PodInfo>> = pods
            .iter()
            .filter(|p| p.node_name == node.name)
            .map(|p| (p.uid.clone(), p.clone()))
            .collect();
        let first = self.s.node.is_none();
        let unchanged = self.s.node.as_ref() == Some(node)
            && self.s.daemonsets == daemonsets
            && self.s.pods == pods;
        if !unchanged {
            self.emit(Event::Snapshot {
                node: Box::new(node.clone()),
                daemonsets: daemonsets.into_values().collect(),
                pods: pods.into_values().collect(),
            });
        }
        if first && !self.has_managed_taint() {
            return self.emit(Event::Stopped {
                reason: StopReason::NotGated,
            });
        }
        self.reconcile(Trigger::Observation);
    }

    /// Records a sighting of the node; true when more than its
    /// resourceVersion changed (labels or taints may decide members).
    fn observe_node(&mut self, node: &NodeInfo) -> bool {
        let Some(old) = &self.s.node else {
            return false;
        };
        if old == node {
            return false;
        }
        let only_version = old.name == node.name
            && old.uid == node.uid
            && old.labels == node.labels
            && old.taints == node.taints
            && old.created == node.created
            && old.gated_since == node.gated_since;
        if only_version {
            self.emit(Event::NodeVersionChanged {
                resource_version: node.resource_version.clone(),
            });
            false
        } else {
            self.emit(Event::NodeUpdated {
                node: Box::new(node.clone()),
            });
            true
        }
    }

    fn timer(&mut self, kind: TimerKind, generation: u64) {
        match kind {
            TimerKind::Deadline => {
                let t = &self.s.timers;
                if t.deadline_generation != generation || self.s.phase != Phase::Waiting {
                    return;
                }
                let Some(at) = t.deadline else { return };
                if self.now < at {
                    // Fired early (the shell's timer and the clock disagree):
                    // re-arm rather than lose the deadline.
                    self.emit(Event::DeadlineSet {
                        at,
                        generation: generation + 1,
                    });
                }
                self.reconcile(Trigger::Observation);
            }
            TimerKind::Recheck => {
                if self.s.timers.recheck_generation != generation || self.s.timers.recheck.is_none()
                {
                    return;
                }
                self.emit(Event::RecheckFired { generation });
                self.reconcile(Trigger::Observation);
            }
            TimerKind::Retry => {
                let due = self.s.write.as_ref().is_some_and(|w| {
                    w.status == WriteStatus::Backoff && u64::from(w.attempt) == generation
                });
                if due {
                    self.reconcile(Trigger::RetryDue);
                }
            }
        }
    }

    fn patch_result(&mut self, outcome: &PatchOutcome) {
        let Some(w) = self.s.write.clone() else {
            return;
        };
        let WriteKind::Untaint { opened_by } = w.kind else {
            return;
        };
        if w.status != WriteStatus::InFlight {
            return;
        }
        match outcome {
            PatchOutcome::Applied => {
                let resource_version = w.resource_version.clone().unwrap_or_default();
                self.emit(Event::Opened {
                    opened_by,
                    at: self.now,
                    resource_version,
                });
            }
            PatchOutcome::Conflict => {
                self.emit(Event::WriteConflict { attempt: w.attempt });
                self.reconcile(Trigger::Observation);
            }
            PatchOutcome::NotFound => self.emit(Event::Stopped {
                reason: StopReason::NodeNotFound,
            }),
            PatchOutcome::Failed(error) => {
                self.emit(Event::WriteFailed {
                    attempt: w.attempt,
                    error: error.clone(),
                });
                self.emit(Event::RetryScheduled {
                    attempt: w.attempt.saturating_add(1),
                });
                self.reconcile(Trigger::Observation);
            }
            PatchOutcome::NotLeader => {
                self.emit(Event::WriteDeferred { attempt: w.attempt });
                self.reconcile(Trigger::Observation);
            }
            PatchOutcome::Withdrawn => {
                self.emit(Event::WriteAbandoned {
                    reason: "withdrawn before it was sent".to_string(),
                });
                self.reconcile(Trigger::Observation);
            }
        }
    }

    fn mark_result(&mut self, outcome: &PatchOutcome) {
        let Some(w) = self.s.write.clone() else {
            return;
        };
        if w.kind != WriteKind::MarkTimedOut || w.status != WriteStatus::InFlight {
            return;
        }
        match outcome {
            PatchOutcome::Applied => self.emit(Event::TimeoutMarked),
            PatchOutcome::NotFound => {
                return self.emit(Event::Stopped {
                    reason: StopReason::NodeNotFound,
                });
            }
            PatchOutcome::NotLeader => self.emit(Event::WriteDeferred { attempt: w.attempt }),
            // Only an untaint is ever withdrawn; a mark answered so was not
            // written, so it is sent again like a deferred one.
            PatchOutcome::Withdrawn => self.emit(Event::RetryScheduled {
                attempt: w.attempt.saturating_add(1),
            }),
            // The mark is an unconditional merge patch: a conflict is just a
            // failure worth retrying.
            PatchOutcome::Conflict | PatchOutcome::Failed(_) => {
                let error = match outcome {
                    PatchOutcome::Failed(e) => e.clone(),
                    _ => "conflict".to_string(),
                };
                self.emit(Event::WriteFailed {
                    attempt: w.attempt,
                    error,
                });
                self.emit(Event::RetryScheduled {
                    attempt: w.attempt.saturating_add(1),
                });
            }
        }
        self.reconcile(Trigger::Observation);
    }

    fn refreshed(&mut self, result: &Result<Option<NodeInfo>, String>) {
        match result {
            Ok(None) => self.emit(Event::Stopped {
                reason: StopReason::NodeNotFound,
            }),
            Ok(Some(node)) => {
                if self.is_this_node(&node.name) {
                    self.observe_node(node);
                }
                self.reconcile(Trigger::Refreshed);
            }
            Err(error) => {
                if let Some(w) = self.s.write.clone()
                    && w.status == WriteStatus::Refreshing
                {
                    self.emit(Event::WriteFailed {
                        attempt: w.attempt,
                        error: format!("re-reading the node: {error}"),
                    });
                    self.emit(Event::RetryScheduled {
                        attempt: w.attempt.saturating_add(1),
                    });
                }
                self.reconcile(Trigger::Observation);
            }
        }
    }

    fn managed_taints(&self) -> Vec<IndexedTaint> {
        let Some(node) = &self.s.node else {
            return Vec::new();
        };
        node.taints
            .iter()
            .enumerate()
            .filter(|(_, t)| self.cfg.placement.is_managed(t))
            .map(|(index, taint)| IndexedTaint {
                index,
                taint: taint.clone(),
            })
            .collect()
    }

    /// Re-derives everything that follows from what the gate has seen, and
    /// decides. Safe to run on any input: with nothing new it emits nothing.
    fn reconcile(&mut self, trigger: Trigger) {
        self.reconcile_scoped(trigger, &Scope::All);
    }

    /// `reconcile`, re-deriving only the members `scope` names.
    fn reconcile_scoped(&mut self, trigger: Trigger, scope: &Scope<'_>) {
        if self.s.is_finished() {
            return;
        }
        let untaint_in_flight = self.s.write.as_ref().is_some_and(|w| {
            matches!(w.kind, WriteKind::Untaint { .. }) && w.status == WriteStatus::InFlight
        });
        // Our own patch may already show in the watch before its response
        // arrives; while it is in flight the response decides.
        if !self.has_managed_taint() {
            if !untaint_in_flight {
                self.emit(Event::Stopped {
                    reason: StopReason::TaintRemovedElsewhere,
                });
            }
            // With our taint gone, DaemonSets that wait for it to go would
            // show up as expected: nothing worth recomputing.
            return;
        }
        self.recompute_members(scope);
        self.recompute_deadline();
        self.recompute_recheck();
        self.decide_opening(trigger);
    }

    fn has_managed_taint(&self) -> bool {
        self.s
            .node
            .as_ref()
            .is_some_and(|n| n.taints.iter().any(|t| self.cfg.placement.is_managed(t)))
    }

    /// Brings `members` in line with what the gate has seen: every member
    /// for [`Scope::All`], else only those the input can have changed, plus
    /// any member whose pod became available by the passing of time. Either
    /// way the result equals [`derive_members`] at `now`; the scope only
    /// saves the work that could not change anything.
    fn recompute_members(&mut self, scope: &Scope<'_>) {
        let Some(node) = self.s.node.as_ref() else {
            return;
        };
        if let Scope::All = scope {
            let desired = derive_all(node, &self.s.daemonsets, &self.s.pods, self.cfg, self.now);
            let gone: Vec<MemberId> = self
                .s
                .members
                .keys()
                .filter(|id| !desired.contains_key(*id))
                .cloned()
                .collect();
            for member in gone {
                self.emit(Event::MemberRemoved { member });
            }
            for (member, m) in desired {
                self.sync_member(member, Some(m));
            }
            return;
        }
        // Members whose pods alone changed keep their expectation (the node
        // and the DaemonSet did not change); only their readiness is derived.
        let mut work: Vec<(MemberId, bool)> = Vec::new();
        match scope {
            Scope::All | Scope::Nothing => {}
            Scope::DaemonSet(key) => work.push((MemberId::DaemonSet(key.to_string()), false)),
            Scope::Pods { owners, namespace } => {
                for (key, ds) in &self.s.daemonsets {
                    if owners.iter().flatten().any(|o| **o == *ds.uid) {
                        work.push((MemberId::DaemonSet(key.clone()), true));
                    }
                }
                for entry in &self.cfg.critical {
                    if entry.namespace == **namespace {
                        work.push((MemberId::Critical(entry.name.clone()), true));
                    }
                }
            }
        }
        // Time alone changes a member only through minReadySeconds: one
        // waiting for a pod that is available by now, or one Ready whose
        // DaemonSet counts availability (another pod may have become
        // available, and the member reports the first by name). Most
        // clusters have no such DaemonSet: then no Ready member is looked up.
        let counts_availability = self
            .s
            .daemonsets
            .values()
            .any(|ds| ds.min_ready_seconds > 0);
        for (id, m) in &self.s.members {
            let timely = match (&m.readiness, id) {
                (
                    Some(Readiness::Waiting {
                        available_at: Some(at),
                        ..
                    }),
                    _,
                ) => *at <= self.now,
                (Some(Readiness::Ready { .. }), MemberId::DaemonSet(key)) => {
                    counts_availability
                        && self
                            .s
                            .daemonsets
                            .get(key)
                            .is_some_and(|ds| ds.min_ready_seconds > 0)
                }
                _ => false,
            };
            if timely && !work.iter().any(|(w, _)| w == id) {
                work.push((id.clone(), true));
            }
        }
        for (id, readiness_only) in work {
            let Some(node) = self.s.node.as_ref() else {
                return;
            };
            let desired = match (readiness_only, self.s.members.get(&id)) {
                (true, Some(current)) if !current.is_expected() => continue,
                (true, Some(_)) => {
                    derive_readiness(&id, self.s, self.cfg, self.now).map(|r| Member {
                        expectation: Expectation::Expected,
                        readiness: Some(r),
                    })
                }
                _ => derive_member(
                    &id,
                    node,
                    &self.s.daemonsets,
                    &self.s.pods,
                    self.cfg,
                    self.now,
                ),
            };
            self.sync_member(id, desired);
        }
    }

    /// Emits what makes `members[id]` equal `desired` (`None`: no member).
    fn sync_member(&mut self, member: MemberId, desired: Option<Member>) {
        let Some(Member {
            expectation,
            readiness,
        }) = desired
        else {
            if self.s.members.contains_key(&member) {
                self.emit(Event::MemberRemoved { member });
            }
            return;
        };
        let current = self.s.members.get(&member);
        if current.map(|m| &m.expectation) != Some(&expectation) {
            match expectation {
                Expectation::Expected => self.emit(Event::MemberExpected {
                    member: member.clone(),
                }),
                Expectation::NotExpected { reason, code } => self.emit(Event::MemberNotExpected {
                    member: member.clone(),
                    reason,
                    code,
                }),
            }
        }
        let current = self
            .s
            .members
            .get(&member)
            .and_then(|m| m.readiness.as_ref());
        if let Some(readiness) = readiness
            && current != Some(&readiness)
        {
            match readiness {
                Readiness::Ready { pod } => self.emit(Event::MemberReady { member, pod }),
                Readiness::Waiting {
                    why,
                    pod,
                    available_at,
                } => self.emit(Event::MemberWaiting {
                    member,
                    why,
                    pod,
                    available_at,
                }),
            }
        }
    }

    fn recompute_deadline(&mut self) {
        let (Some(timeout), Some(start)) = (self.cfg.timeout, self.s.gate_start()) else {
            return;
        };
        // A timeout too large to add is no deadline at all.
        let Some(at) = SignedDuration::try_from(timeout)
            .ok()
            .and_then(|d| start.checked_add(d).ok())
        else {
            return;
        };
        if self.s.timers.deadline != Some(at) {
            let generation = self.s.timers.deadline_generation + 1;
            self.emit(Event::DeadlineSet { at, generation });
        }
    }

    fn recompute_recheck(&mut self) {
        if !matches!(self.s.phase, Phase::Waiting | Phase::TimedOutKept) {
            return;
        }
        let next = self
            .s
            .expected()
            .filter_map(|(_, m)| match &m.readiness {
                Some(Readiness::Waiting {
                    available_at: Some(at),
                    ..
                }) => Some(*at),
                _ => None,
            })
            .min();
        // No recheck needed: a pending one is left to fire and find nothing.
        if let Some(at) = next
            && self.s.timers.recheck != Some(at)
        {
            let generation = self.s.timers.recheck_generation + 1;
            self.emit(Event::RecheckScheduled { at, generation });
        }
    }

    fn decide_opening(&mut self, trigger: Trigger) {
        if self.s.phase == Phase::WouldOpen {
            return;
        }
        let all_ready = self.s.all_ready();

        // An opening decided because everything was Ready no longer stands
        // once something is not. One waiting to be retried is dropped; one in
        // flight is withdrawn if the executor has not sent it yet (one already
        // sent cannot be called back).
        if let Some(w) = &self.s.write
            && w.kind
                == (WriteKind::Untaint {
                    opened_by: OpenedBy::Ready,
                })
            && w.status != WriteStatus::InFlight
            && !all_ready
        {
            let blockers = self.s.blockers();
            let reason = format!("no longer all Ready: {}", blocker_list(&blockers));
            self.emit(Event::WriteAbandoned { reason });
        }

        if let Some(w) = &self.s.write
            && w.kind
                == (WriteKind::Untaint {
                    opened_by: OpenedBy::Ready,
                })
            && w.status == WriteStatus::InFlight
            && !w.withdrawing
            && !all_ready
        {
            let attempt = w.attempt;
            let blockers = self.s.blockers();
            let reason = format!("no longer all Ready: {}", blocker_list(&blockers));
            self.emit(Event::WithdrawRequested { attempt, reason });
        }

        if !all_ready
            && self.s.timed_out.is_none()
            && matches!(self.s.phase, Phase::Waiting)
            && let Some(deadline) = self.s.timers.deadline
            && self.now >= deadline
        {
            let not_ready = self.s.blockers();
            let expected = self.s.expected().count();
            self.emit(Event::TimedOut {
                deadline,
                action: self.cfg.on_timeout,
                expected,
                not_ready,
            });
        }

        let open_by = if all_ready {
            Some(OpenedBy::Ready)
        } else if self
            .s
            .timed_out
            .as_ref()
            .is_some_and(|t| t.action == OnTimeout::Open)
        {
            Some(OpenedBy::Timeout)
        } else {
            None
        };

        if self.cfg.dry_run {
            if let Some(opened_by) = open_by {
                let taints = self.managed_taints();
                self.emit(Event::WouldOpen {
                    opened_by,
                    taints,
                    at: self.now,
                });
            }
            return;
        }

        match (open_by, self.s.write.clone()) {
            (Some(opened_by), None) => self.send_untaint(opened_by, 1),
            (Some(opened_by), Some(w)) if w.kind == WriteKind::MarkTimedOut => {
                // The mark no longer matters once the node can open; an
                // in-flight one is let finish first (one write at a time).
                if w.status != WriteStatus::InFlight {
                    self.emit(Event::WriteAbandoned {
                        reason: "opening instead".to_string(),
                    });
                    self.send_untaint(opened_by, 1);
                }
            }
            (_, Some(w)) => self.advance_write(&w, trigger),
            (None, None) => {
                if self
                    .s
                    .timed_out
                    .as_ref()
                    .is_some_and(|t| t.action == OnTimeout::Keep)
                    && !self.s.timeout_marked
                {
                    self.emit(Event::MarkSent { attempt: 1 });
                }
            }
        }
    }

    /// Moves an outstanding write on when the trigger is the one it waits for.
    fn advance_write(&mut self, w: &Write, trigger: Trigger) {
        let next = match (w.status, trigger) {
            (WriteStatus::Backoff, Trigger::RetryDue) => w.attempt,
            (WriteStatus::AwaitingLeader, Trigger::Leadership) => w.attempt.saturating_add(1),
            (WriteStatus::Refreshing, Trigger::Refreshed) => {
                return self.emit(Event::RetryScheduled {
                    attempt: w.attempt.saturating_add(1),
                });
            }
            _ => return,
        };
        match w.kind {
            WriteKind::Untaint { opened_by } => self.send_untaint(opened_by, next),
            WriteKind::MarkTimedOut => self.emit(Event::MarkSent { attempt: next }),
        }
    }

    fn send_untaint(&mut self, opened_by: OpenedBy, attempt: u32) {
        let taints = self.managed_taints();
        let Some(node) = &self.s.node else { return };
        let resource_version = node.resource_version.clone();
        self.emit(Event::UntaintSent {
            attempt,
            opened_by,
            resource_version,
            taints,
            at: self.now,
        });
    }
}

// ---------------------------------------------------------------------------
// Deriving members
// ---------------------------------------------------------------------------

/// Which members an input can have changed (see `Decider::recompute_members`).
enum Scope<'i> {
    /// The node, a timer, a write or the leadership changed: every member.
    All,
    /// Only the node's resourceVersion or nothing at all changed.
    Nothing,
    /// One DaemonSet (`namespace/name`) changed or went away.
    DaemonSet(Cow<'i, str>),
    /// A pod changed or went away: the members of its controller (before and
    /// after the change) and the critical entries of its namespace.
    Pods {
        owners: [Option<Cow<'i, str>>; 2],
        namespace: Cow<'i, str>,
    },
}

/// Every member the gate should have, derived from scratch from what it has
/// seen: each DaemonSet's placement verdict and, when expected, its readiness
/// at `now`; each critical-pod entry likewise. The gate keeps its `members`
/// equal to this after every step (tests check it); it only avoids
/// re-deriving what an input cannot have changed.
pub fn derive_members(
    state: &GateState,
    cfg: &GateConfig,
    now: Timestamp,
) -> BTreeMap<MemberId, Member> {
    match &state.node {
        Some(node) => derive_all(node, &state.daemonsets, &state.pods, cfg, now),
        None => BTreeMap::new(),
    }
}

fn derive_all(
    node: &NodeInfo,
    daemonsets: &BTreeMap<String, Arc<DaemonSetInfo>>,
    pods: &BTreeMap<String, Arc<PodInfo>>,
    cfg: &GateConfig,
    now: Timestamp,
) -> BTreeMap<MemberId, Member> {
    let mut out = BTreeMap::new();
    for ds in daemonsets.values() {
        out.insert(
            MemberId::daemonset(ds),
            daemonset_member(node, ds, pods, cfg, now),
        );
    }
    for entry in &cfg.critical {
        out.insert(
            MemberId::Critical(entry.name.clone()),
            critical_member(node, entry, pods, now),
        );
    }
    out
}

/// One member derived from scratch; `None` when it no longer exists.
fn derive_member(
    id: &MemberId,
    node: &NodeInfo,
    daemonsets: &BTreeMap<String, Arc<DaemonSetInfo>>,
    pods: &BTreeMap<String, Arc<PodInfo>>,
    cfg: &GateConfig,
    now: Timestamp,
) -> Option<Member> {
    match id {
        MemberId::DaemonSet(key) => daemonsets
            .get(key)
            .map(|ds| daemonset_member(node, ds, pods, cfg, now)),
        MemberId::Critical(name) => cfg
            .critical
            .iter()
            .find(|e| e.name == *name)
            .map(|entry| critical_member(node, entry, pods, now)),
    }
}

/// The readiness of a member already known to be expected.
fn derive_readiness(
    id: &MemberId,
    state: &GateState,
    cfg: &GateConfig,
    now: Timestamp,
) -> Option<Readiness> {
    let state = match id {
        MemberId::DaemonSet(key) => readiness::daemonset_member(
            state.daemonsets.get(key)?,
            state.pods.values().map(AsRef::as_ref),
            now,
        ),
        MemberId::Critical(name) => {
            let entry = cfg.critical.iter().find(|e| e.name == *name)?;
            let member =
                readiness::critical_member(entry, state.pods.values().map(AsRef::as_ref), now);
            return Some(Readiness::of_critical(entry, member));
        }
    };
    Some(Readiness::from_member_state(state))
}

fn daemonset_member(
    node: &NodeInfo,
    ds: &DaemonSetInfo,
    pods: &BTreeMap<String, Arc<PodInfo>>,
    cfg: &GateConfig,
    now: Timestamp,
) -> Member {
    match placement::evaluate(node, ds, &cfg.placement) {
        Verdict::Expected => Member {
            expectation: Expectation::Expected,
            readiness: Some(Readiness::from_member_state(readiness::daemonset_member(
                ds,
                pods.values().map(AsRef::as_ref),
                now,
            ))),
        },
        Verdict::NotExpected(reason) => Member {
            expectation: Expectation::NotExpected {
                reason: reason.to_string(),
                code: reason.code().to_string(),
            },
            readiness: None,
        },
    }
}

fn critical_member(
    node: &NodeInfo,
    entry: &CriticalPodEntry,
    pods: &BTreeMap<String, Arc<PodInfo>>,
    now: Timestamp,
) -> Member {
    if readiness::critical_applies(entry, node) {
        Member {
            expectation: Expectation::Expected,
            readiness: Some(Readiness::of_critical(
                entry,
                readiness::critical_member(entry, pods.values().map(AsRef::as_ref), now),
            )),
        }
    } else {
        let selector = entry
            .node_selector
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        Member {
            expectation: Expectation::NotExpected {
                reason: format!("the node does not match the entry's node selector {selector:?}"),
                code: "node_selector".to_string(),
            },
            readiness: None,
        }
    }
}

// ---------------------------------------------------------------------------
// Event notes
// ---------------------------------------------------------------------------

fn record(node: &NodeInfo, type_: EventType, reason: &str, note: String) -> Effect {
    Effect::RecordEvent(NodeEvent {
        node: node.name.clone(),
        node_uid: node.uid.clone(),
        type_,
        reason: reason.to_string(),
        note: truncate(note, MAX_NOTE_BYTES),
    })
}

fn since(node: &NodeInfo, at: Timestamp) -> String {
    let d = at.duration_since(gate_start(node));
    format!("{:.1}s", d.as_secs_f64())
}

fn ready_text(state: &GateState) -> String {
    match state.expected().count() {
        0 => "no expected members".to_string(),
        1 => "the 1 expected member is Ready".to_string(),
        n => format!("all {n} expected members Ready"),
    }
}

fn not_ready_text(expected: usize, not_ready: &[Blocker]) -> String {
    format!(
        "{} of {expected} expected members not Ready: {}",
        not_ready.len(),
        blocker_list(not_ready)
    )
}

fn blocker_list(blockers: &[Blocker]) -> String {
    let parts: Vec<String> = blockers
        .iter()
        .map(|b| format!("{} ({})", b.member, b.why))
        .collect();
    parts.join("; ")
}

fn taint_list(taints: &[IndexedTaint]) -> String {
    let parts: Vec<String> = taints.iter().map(|t| t.taint.to_string()).collect();
    parts.join(", ")
}

fn truncate(mut s: String, max: usize) -> String {
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
