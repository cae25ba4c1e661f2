//! Is an expected member Ready on the node (semantics.md §4; critical pods,
//! §3; the node itself, §5.1)? If not, what it waits for, precisely enough for
//! an operator and for the gate to know when to look again.

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::rules::selector::{LabelSelector, SelectorError, is_lower_token};
use crate::vocab::annotations::CSI_DRIVER;
use crate::vocab::model::{DaemonSetInfo, NodeInfo, NodeReady, PodInfo, Taint};

pub const PHASE_RUNNING: &str = "Running";

/// Where one expected member stands on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberState {
    /// Satisfied, by this pod (its name).
    Ready {
        pod: String,
    },
    NotReady(Waiting),
}

impl MemberState {
    fn ready(pod: &PodInfo) -> Self {
        MemberState::Ready {
            pod: pod.name.to_string(),
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self, MemberState::Ready { .. })
    }

    /// When a member waiting only for `minReadySeconds` becomes Ready with no
    /// further change to any pod — the moment the gate should look again.
    pub fn recheck_at(&self) -> Option<Timestamp> {
        match self {
            MemberState::Ready { .. } => None,
            MemberState::NotReady(w) => w.available_at(),
        }
    }
}

impl fmt::Display for MemberState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemberState::Ready { pod } => write!(f, "pod {pod} is Ready"),
            MemberState::NotReady(w) => write!(f, "{w}"),
        }
    }
}

/// What a member that is not Ready is waiting for. Pod names are bare names;
/// the namespace is the DaemonSet's or the entry's. The derived ordering is
/// structural: only a last tie-breaker, so that results never depend on the
/// order pods are seen in.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "waiting", rename_all = "camelCase")]
pub enum Waiting {
    /// No pod of this member is on the node (yet).
    NoPod,
    /// The pod's phase is not `Running`.
    NotRunning { pod: String, phase: String },
    /// Running, but its `Ready` condition is not `True`.
    NotReady { pod: String },
    /// Being deleted (`deletionTimestamp` set).
    Terminating { pod: String },
    /// Ready, but not yet for the DaemonSet's `minReadySeconds`.
    #[serde(rename_all = "camelCase")]
    NotAvailableYet {
        pod: String,
        ready_for: Duration,
        min_ready: Duration,
        available_at: Timestamp,
    },
    /// Ready, but its Ready condition has no `lastTransitionTime`, so
    /// `minReadySeconds` cannot be counted. Upstream `IsPodAvailable` never
    /// calls such a pod available, and neither do we; unlike
    /// `NotAvailableYet` there is no moment to look again.
    #[serde(rename_all = "camelCase")]
    ReadySinceUnknown { pod: String, min_ready: Duration },
}

impl Waiting {
    pub fn available_at(&self) -> Option<Timestamp> {
        match self {
            Waiting::NotAvailableYet { available_at, .. } => Some(*available_at),
            _ => None,
        }
    }

    pub fn pod(&self) -> Option<&str> {
        match self {
            Waiting::NoPod => None,
            Waiting::NotRunning { pod, .. }
            | Waiting::NotReady { pod }
            | Waiting::Terminating { pod }
            | Waiting::NotAvailableYet { pod, .. }
            | Waiting::ReadySinceUnknown { pod, .. } => Some(pod),
        }
    }

    /// Lower is closer to Ready; used to report the most promising pod when
    /// several fall short.
    fn rank(&self) -> u8 {
        match self {
            Waiting::NotAvailableYet { .. } => 0,
            Waiting::ReadySinceUnknown { .. } => 1,
            Waiting::NotReady { .. } => 2,
            Waiting::NotRunning { .. } => 3,
            Waiting::Terminating { .. } => 4,
            Waiting::NoPod => 5,
        }
    }

    fn closer_than(&self, other: &Waiting) -> bool {
        let by_rank = self.rank().cmp(&other.rank());
        let by_time = self.available_at().cmp(&other.available_at());
        let by_name = self.pod().cmp(&other.pod());
        by_rank
            .then(by_time)
            .then(by_name)
            .then_with(|| self.cmp(other))
            == Ordering::Less
    }
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoPod => f.write_str("no pod yet"),
            Self::NotRunning { pod, phase } if phase.is_empty() => {
                write!(f, "pod {pod} has no phase yet")
            }
            Self::NotRunning { pod, phase } => write!(f, "pod {pod} is {phase}"),
            Self::NotReady { pod } => write!(f, "pod {pod} is not Ready"),
            Self::Terminating { pod } => write!(f, "pod {pod} is terminating"),
            Self::NotAvailableYet {
                pod,
                ready_for,
                min_ready,
                ..
            } => write!(
                f,
                "pod {pod} Ready for {} of minReadySeconds {}",
                human(*ready_for),
                human(*min_ready)
            ),
            Self::ReadySinceUnknown { pod, min_ready } => write!(
                f,
                "pod {pod} is Ready but its Ready condition has no lastTransitionTime, \
                 so minReadySeconds {} cannot be counted",
                human(*min_ready)
            ),
        }
    }
}

/// Whole seconds when the duration is whole ("3s"), else milliseconds
/// ("2.5s"): enough to read, stable to test.
fn human(d: Duration) -> String {
    let millis = d.as_millis();
    let secs = format!("{}.{:03}", millis / 1000, millis % 1000);
    format!("{}s", secs.trim_end_matches('0').trim_end_matches('.'))
}

/// The best of several candidate states: any Ready pod (the smallest name,
/// so the answer does not depend on iteration order), else the waiting
/// reason closest to Ready.
fn best(states: impl Iterator<Item = MemberState>) -> MemberState {
    let (mut ready, mut waiting) = (None::<String>, None::<Waiting>);
    for state in states {
        match state {
            MemberState::Ready { pod } if ready.as_ref().is_none_or(|r| pod < *r) => {
                ready = Some(pod);
            }
            MemberState::NotReady(w) if waiting.as_ref().is_none_or(|b| w.closer_than(b)) => {
                waiting = Some(w);
            }
            _ => {}
        }
    }
    match (ready, waiting) {
        (Some(pod), _) => MemberState::Ready { pod },
        (None, waiting) => MemberState::NotReady(waiting.unwrap_or(Waiting::NoPod)),
    }
}

/// The checks every member shares: not being deleted, `Running`, `Ready`.
/// The pod's name is copied only into a reason: a Ready pod costs no
/// allocation here.
fn running_and_ready(pod: &PodInfo) -> Result<(), Waiting> {
    let name = || pod.name.to_string();
    if pod.terminating {
        return Err(Waiting::Terminating { pod: name() });
    }
    if pod.phase != PHASE_RUNNING {
        return Err(Waiting::NotRunning {
            pod: name(),
            phase: pod.phase.to_string(),
        });
    }
    if !pod.ready {
        return Err(Waiting::NotReady { pod: name() });
    }
    Ok(())
}

/// One pod judged against its DaemonSet. A pod annotated
/// `nodegate.dev/ready: "true"` ([`PodInfo::ready_annotation`]) that is
/// Running and not being deleted is Ready whatever its probe says
/// (semantics.md §6.7); the annotation carries no time, so
/// `minReadySeconds` is not counted for it.
fn daemon_pod_state(pod: &PodInfo, min_ready: Duration, now: Timestamp) -> MemberState {
    if pod.ready_annotation && !pod.terminating && pod.phase == PHASE_RUNNING {
        return MemberState::ready(pod);
    }
    if let Err(w) = running_and_ready(pod) {
        return MemberState::NotReady(w);
    }
    if min_ready.is_zero() {
        return MemberState::ready(pod);
    }
    let name = pod.name.to_string();
    // The gate waits for another pod, an update carrying the time, or its deadline.
    let Some(since) = pod.ready_since.get() else {
        return MemberState::NotReady(Waiting::ReadySinceUnknown {
            pod: name,
            min_ready,
        });
    };
    let min_ready_signed = SignedDuration::try_from(min_ready).unwrap_or(SignedDuration::MAX);
    let available_at = since
        .checked_add(min_ready_signed)
        .unwrap_or(Timestamp::MAX);
    // Available once `since + minReadySeconds <= now`: current upstream
    // `IsPodAvailable` is inclusive, and it lets a re-check scheduled at
    // exactly `available_at` see the pod as available.
    if available_at <= now {
        return MemberState::Ready { pod: name };
    }
    // A transition time in the future (clock skew) reads as "Ready for 0s".
    let ready_for = Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO);
    MemberState::NotReady(Waiting::NotAvailableYet {
        pod: name,
        ready_for,
        min_ready,
        available_at,
    })
}

/// Where DaemonSet `ds` stands on a node, given the pods bound to that node.
/// Only pods `ds` controls count ([`PodInfo::controlled_by`]); any one Ready,
/// Running, undeleted and available pod satisfies the member, else the reason
/// closest to Ready is reported (by `Waiting::rank`, then the earliest
/// available, then the smaller pod name). A negative `minReadySeconds` (which
/// the API refuses) counts as zero.
pub fn daemonset_member<'a>(
    ds: &DaemonSetInfo,
    pods_on_node: impl IntoIterator<Item = &'a PodInfo>,
    now: Timestamp,
) -> MemberState {
    let min_ready = Duration::from_secs(u64::try_from(ds.min_ready_seconds).unwrap_or(0));
    let ours = pods_on_node.into_iter().filter(|p| p.controlled_by(ds));
    best(ours.map(|pod| daemon_pod_state(pod, min_ready, now)))
}

/// Most CSI drivers one DaemonSet's [`CSI_DRIVER`] annotation may name; the
/// names past it are ignored (and reported), so one annotation cannot make
/// a gate wait on an unbounded list.
pub const MAX_CSI_DRIVERS: usize = 10;

/// The CSI drivers `ds` names in its [`CSI_DRIVER`] annotation that a gate
/// waits for: the first [`MAX_CSI_DRIVERS`] valid names (as the API server
/// requires of a CSIDriver). Invalid or surplus ones are left to
/// [`csi_driver_problems`]: no CSINode can ever list them, so waiting on them
/// would hold the node until its deadline, or for ever.
pub fn csi_drivers(ds: &DaemonSetInfo) -> Vec<&str> {
    csi_entries(ds)
        .filter(|d| is_csi_driver_name(d))
        .take(MAX_CSI_DRIVERS)
        .collect()
}

/// What is wrong with `ds`'s [`CSI_DRIVER`] annotation, for a person: the
/// invalid names and those past [`MAX_CSI_DRIVERS`], which are not waited
/// for; `None` when every name is used.
pub fn csi_driver_problems(ds: &DaemonSetInfo) -> Option<String> {
    let (valid, invalid): (Vec<_>, Vec<_>) = csi_entries(ds).partition(|d| is_csi_driver_name(d));
    let surplus = valid.get(MAX_CSI_DRIVERS..).unwrap_or_default();
    let mut parts = Vec::new();
    if !invalid.is_empty() {
        parts.push(format!(
            "{invalid:?} not CSI driver names (DNS-1123 subdomains of at most 63 characters)"
        ));
    }
    if !surplus.is_empty() {
        parts.push(format!(
            "{surplus:?} beyond the first {MAX_CSI_DRIVERS} names"
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "annotation {CSI_DRIVER}: {}; those are not waited for (fix the annotation)",
            parts.join("; ")
        )
    })
}

fn csi_entries(ds: &DaemonSetInfo) -> impl Iterator<Item = &str> {
    ds.annotations
        .get(CSI_DRIVER)
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|d| !d.is_empty())
}

/// A DNS-1123 subdomain of at most 63 characters, as a CSI driver's name.
pub fn is_csi_driver_name(s: &str) -> bool {
    s.len() <= 63 && s.split('.').all(is_dns1123_label)
}

/// A DNS-1123 label (a namespace name).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_lower_token(s)
}

/// A configured critical pod: something that is not a DaemonSet (a static
/// or mirror pod, say) but must be Ready on a node before it opens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CriticalPodEntry {
    /// A label for people, e.g. "kube-system/kube-proxy".
    pub name: String,
    pub namespace: String,
    /// Which pods in `namespace` satisfy the entry.
    pub selector: LabelSelector,
    /// Which nodes the entry applies to; every gated node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CriticalPodEntryError {
    #[error("critical pod {name:?}: namespace must not be empty")]
    NoNamespace { name: String },
    #[error(
        "critical pod {name:?}: selector must not be empty (an empty one would match every pod)"
    )]
    EmptySelector { name: String },
    #[error("critical pod {name:?}: selector: {source}")]
    Selector { name: String, source: SelectorError },
    #[error("critical pod {name:?}: nodeSelector: {source}")]
    NodeSelector { name: String, source: SelectorError },
}

impl CriticalPodEntry {
    /// The rules an entry must meet; an invalid selector would otherwise
    /// match nothing and the entry would wait until the deadline, an empty
    /// one would match every pod. The binary's config loading words each error.
    pub fn validate(&self) -> Result<(), CriticalPodEntryError> {
        let name = || self.name.clone();
        if self.namespace.is_empty() {
            return Err(CriticalPodEntryError::NoNamespace { name: name() });
        }
        if self.selector.is_empty() {
            return Err(CriticalPodEntryError::EmptySelector { name: name() });
        }
        self.selector
            .validate()
            .map_err(|source| CriticalPodEntryError::Selector {
                name: name(),
                source,
            })?;
        if let Some(sel) = &self.node_selector {
            sel.validate()
                .map_err(|source| CriticalPodEntryError::NodeSelector {
                    name: name(),
                    source,
                })?;
        }
        Ok(())
    }
}

/// Whether `entry` is expected on `node` at all.
pub fn critical_applies(entry: &CriticalPodEntry, node: &NodeInfo) -> bool {
    entry
        .node_selector
        .as_ref()
        .is_none_or(|s| s.matches(&node.labels))
}

/// Where a critical-pod entry stands on a node, given the pods bound to it.
/// There is no `minReadySeconds` for these; `now` is taken so that callers
/// treat every member alike.
pub fn critical_member<'a>(
    entry: &CriticalPodEntry,
    pods_on_node: impl IntoIterator<Item = &'a PodInfo>,
    _now: Timestamp,
) -> MemberState {
    let ours = pods_on_node
        .into_iter()
        .filter(|p| p.namespace == entry.namespace && entry.selector.matches(&p.labels));
    best(ours.map(|pod| match running_and_ready(pod) {
        Ok(()) => MemberState::ready(pod),
        Err(w) => MemberState::NotReady(w),
    }))
}

/// The taint the node lifecycle controller puts on a node whose Ready
/// condition is False (`NoSchedule` while it joins, `NoExecute` later).
pub const NODE_NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The taint it puts on a node whose Ready condition is Unknown.
pub const NODE_UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// Why a node itself is not Ready (semantics.md §5.1): a gate opens by
/// readiness only on a node that is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeNotReady {
    /// Its `Ready` condition is not `True`.
    Condition(NodeReady),
    /// It carries the not-ready or unreachable taint, whatever its condition
    /// says (the two are written separately, the taint possibly later).
    Tainted(Taint),
}

/// Whether the node itself is Ready: its `Ready` condition is `True` and it
/// carries neither [`NODE_NOT_READY_TAINT`] nor [`NODE_UNREACHABLE_TAINT`]
/// (any effect). `None` when it is; otherwise why not, the condition first.
pub fn node_not_ready(node: &NodeInfo) -> Option<NodeNotReady> {
    if node.ready != NodeReady::True {
        return Some(NodeNotReady::Condition(node.ready));
    }
    node.taints
        .iter()
        .find(|t| t.key == NODE_NOT_READY_TAINT || t.key == NODE_UNREACHABLE_TAINT)
        .map(|t| NodeNotReady::Tainted(t.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{mk_node, taint};
    use crate::vocab::model::PodPlacement;

    #[test]
    fn a_node_is_ready_when_its_condition_is_true_and_it_carries_no_not_ready_taint() {
        let mut n = mk_node(
            "n",
            &[],
            vec![taint("nodegate.dev/initializing", "NoSchedule")],
        );
        assert_eq!(node_not_ready(&n), None);
        for ready in [NodeReady::False, NodeReady::Unknown] {
            n.ready = ready;
            assert_eq!(node_not_ready(&n), Some(NodeNotReady::Condition(ready)));
        }
        n.ready = NodeReady::True;
        for (key, effect) in [
            (NODE_NOT_READY_TAINT, "NoSchedule"),
            (NODE_NOT_READY_TAINT, "NoExecute"),
            (NODE_UNREACHABLE_TAINT, "NoExecute"),
        ] {
            let mut t = n.clone();
            t.taints.push(taint(key, effect));
            assert_eq!(
                node_not_ready(&t),
                Some(NodeNotReady::Tainted(taint(key, effect)))
            );
        }
        // Other start-up taints are the members' business, not the node's.
        n.taints.push(taint(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
        assert_eq!(node_not_ready(&n), None);
    }

    #[test]
    fn a_running_pod_annotated_ready_counts_whatever_its_probe_says() {
        let mut ds = crate::testutil::mk_ds("kube-system", "warm", PodPlacement::default());
        ds.min_ready_seconds = 30;
        let now = Timestamp::from_second(1_000).unwrap();
        let mut pod = crate::testutil::mk_pod("warm-x", "n", &ds.uid);
        pod.ready = false;
        pod.ready_since = Default::default();
        let state = |p: &PodInfo| daemonset_member(&ds, [p], now);
        assert!(!state(&pod).is_ready(), "no annotation: the probe decides");
        pod.ready_annotation = true;
        assert_eq!(
            state(&pod),
            MemberState::Ready {
                pod: "warm-x".into()
            }
        );
        let mut pending = pod.clone();
        pending.phase = "Pending".into();
        assert!(!state(&pending).is_ready(), "it must be Running");
        let mut dying = pod.clone();
        dying.terminating = true;
        assert!(!state(&dying).is_ready(), "not while being deleted");
        let mut foreign = pod.clone();
        foreign.controller_uid = Some("someone-else".into());
        assert_eq!(
            state(&foreign),
            MemberState::NotReady(Waiting::NoPod),
            "only the DaemonSet's own pods count"
        );
        // The DaemonSet's UID named from another namespace: a forged owner
        // reference (a tenant's pod), not the DaemonSet's pod.
        let mut forged = pod.clone();
        forged.namespace = "tenant".into();
        assert_eq!(
            state(&forged),
            MemberState::NotReady(Waiting::NoPod),
            "a pod in another namespace never satisfies the member"
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(3)), "3s");
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_millis(2500)), "2.5s");
        assert_eq!(human(Duration::from_millis(1)), "0.001s");
        assert_eq!(human(Duration::from_millis(1250)), "1.25s");
    }
}
