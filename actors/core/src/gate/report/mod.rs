//! One node's gate, explained to a person: the report `nodegate explain`
//! prints. It never judges a member itself: [`gate_state`] feeds what was
//! read through the gate's own `step`, and [`build`] reads every member from
//! that state, so that explain and the controller cannot disagree. What
//! only a full read knows (a pod's container and scheduling messages, the
//! unbound pods aimed at the node) comes in as [`ReadFacts`] and only adds
//! detail. The one judgement made here is none of the gate's: why an
//! expected member is expected (what matched, which taints it tolerates).

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde::Serialize;

use crate::canary::report::canary_row;
use crate::closing::condition_taints::report::{RuleRow, rule_rows};
use crate::closing::regating::report::{RegateReport, regate_report};
use crate::closing::replacing::report::{ReplaceReport, replace_report};
use crate::gate::derive::NodeMember;
use crate::gate::{self, GateState, Input, StopReason};
use crate::rules::placement::{self, PlacementConfig, ReasonCode};
use crate::rules::readiness::CriticalPodEntry;
use crate::vocab::config::Config;
use crate::vocab::member::{Expectation, MemberId, Readiness};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo, Taint};

pub(crate) mod rows;
mod words;
pub use rows::{EXPECTED, MemberRow, TermResult};
use rows::{NOT_EVALUATED, empty_row, judged_by_selector, member_of, node_member_row};
pub use words::{describe_waiting, expected_reason, verdict};

/// One node's gate, as explain shows it. Its JSON form is the `-o json`
/// output; the fields below are a stable interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub node: String,
    /// The node carries at least one of nodegate's managed taints.
    pub gated: bool,
    /// Every expected member is Ready now, and so is the node itself, so a
    /// gated node would open. Also computed for a node that is not gated: it
    /// says whether it would open at once if it were.
    pub would_open: bool,
    /// Why the node itself keeps its gate closed, in the gate's words
    /// ([`GateState::node_wait_reason`]); null when nothing does.
    pub node_not_ready: Option<String>,
    /// The gate's answer in one sentence.
    pub verdict: String,
    pub evaluated_at: Timestamp,
    pub created: Timestamp,
    /// Expected members of every kind, and how many of them are Ready.
    pub expected_members: usize,
    pub ready_members: usize,
    /// Sorted by namespace, then name.
    pub daemonsets: Vec<MemberRow>,
    /// In configuration order.
    pub critical_pods: Vec<MemberRow>,
    /// `criticalConditions` members, in configuration order.
    pub conditions: Vec<MemberRow>,
    /// `criticalResources` then `draDrivers` members, each in
    /// configuration order (semantics.md §6.8).
    pub devices: Vec<MemberRow>,
    /// The canary member (`canary`): one row when configured, else none.
    pub canary: Vec<MemberRow>,
    /// Each `conditionTaints` rule's verdict for the node, in
    /// configuration order.
    pub condition_taints: Vec<RuleRow>,
    pub taints: TaintSplit,
    /// Re-gating's view of the node (`--regate-after`); absent when it is
    /// off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub regate: Option<RegateReport>,
    /// `--on-timeout=replace`'s view of the node (semantics.md §5.8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replace: Option<ReplaceReport>,
}

/// The node's taints as nodegate sees them, each as `key[=value]:Effect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaintSplit {
    /// nodegate's own: what the gate lifts.
    pub managed: Vec<String>,
    /// Lifted by some other agent during start-up; ignored for placement.
    pub transient: Vec<String>,
    pub other: Vec<String>,
}

pub fn split_taints(taints: &[Taint], cfg: &PlacementConfig) -> TaintSplit {
    let mut split = TaintSplit::default();
    for t in taints {
        let bucket = if cfg.is_managed(t) {
            &mut split.managed
        } else if cfg.is_transient(t) {
            &mut split.transient
        } else {
            &mut split.other
        };
        bucket.push(t.to_string());
    }
    split
}

/// What a full Pod says about why it is not Ready, beyond the compact model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodDetail {
    /// The `PodScheduled` condition is False: its reason and message.
    pub unschedulable: Option<String>,
    /// Containers (init containers first) that are not Ready and waiting,
    /// running, or terminated with a failure: "container NAME: Reason".
    pub containers: Vec<String>,
}

/// What a full read of the cluster adds to the gate's view: detail only,
/// never a judgement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadFacts {
    /// DaemonSet pods created for the node but not bound to it yet: they
    /// never satisfy a member, but they say why a member has no pod here.
    pub unscheduled: Vec<PodInfo>,
    /// What the full Pod objects say, by `namespace/name`.
    pub details: BTreeMap<String, PodDetail>,
}

// ---------------------------------------------------------------------------
// The gate's state

/// The gate's state for what was read, at `now`: one snapshot through the
/// gate's own `step`. A node without a managed taint stops its gate at once,
/// before members are derived; its members are then the gate's own
/// `derive_members` — what the gate would wait for, were the node gated.
pub fn gate_state(
    node: &NodeInfo,
    daemonsets: &[DaemonSetInfo],
    pods: &[PodInfo],
    cfg: &Config,
    now: Timestamp,
) -> GateState {
    let mut state = GateState::default();
    let input = Input::snapshot(node.clone(), daemonsets.to_vec(), pods.to_vec());
    gate::step(&mut state, &input, cfg, now);
    if !is_gated(&state) {
        state.members = gate::derive_members(&state, cfg, now);
    }
    state
}

/// The gate found a managed taint on the node.
pub fn is_gated(state: &GateState) -> bool {
    state.node.is_some() && state.stopped != Some(StopReason::NotGated)
}

/// Some expected DaemonSet has no pod on the node: only then can unbound
/// pods aimed at the node explain anything.
pub fn some_daemonset_has_no_pod(state: &GateState, cfg: &Config, now: Timestamp) -> bool {
    state.expected().any(|(id, m)| {
        matches!(id, MemberId::DaemonSet(_))
            && matches!(m.readiness, Some(Readiness::Waiting { .. }))
            && gate::waited_pod(id, state, cfg, now).is_none()
    })
}

// ---------------------------------------------------------------------------
// The report

/// The report of what was read: [`gate_state`], then [`build`].
pub fn explain(
    node: &NodeInfo,
    daemonsets: &[DaemonSetInfo],
    pods: &[PodInfo],
    facts: &ReadFacts,
    cfg: &Config,
    now: Timestamp,
) -> Report {
    let state = gate_state(node, daemonsets, pods, cfg, now);
    build_for(node, &state, cfg, facts, now)
}

/// The report of a gate's state at `now`; `None` before the gate has seen
/// its node. `cfg` must be the configuration the state was built with.
pub fn build(state: &GateState, cfg: &Config, facts: &ReadFacts, now: Timestamp) -> Option<Report> {
    let node = state.node.as_ref()?;
    Some(build_for(node, state, cfg, facts, now))
}

/// What every member's row is read from.
struct Ctx<'a> {
    state: &'a GateState,
    cfg: &'a Config,
    facts: &'a ReadFacts,
    now: Timestamp,
}

fn build_for(
    node: &NodeInfo,
    state: &GateState,
    cfg: &Config,
    facts: &ReadFacts,
    now: Timestamp,
) -> Report {
    let cx = &Ctx {
        state,
        cfg,
        facts,
        now,
    };
    let mut dss: Vec<&DaemonSetInfo> = state.daemonsets.values().map(AsRef::as_ref).collect();
    dss.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    let daemonsets: Vec<MemberRow> = dss.iter().map(|ds| daemonset_row(cx, node, ds)).collect();
    let critical_pods: Vec<MemberRow> = cfg.critical.iter().map(|e| critical_row(cx, e)).collect();
    let node_row = |m: &dyn NodeMember| node_member_row(state, m);
    let conditions: Vec<MemberRow> = cfg.conditions.iter().map(|c| node_row(c)).collect();
    let resources = cfg.resources.iter().map(|r| node_row(r));
    let drivers = cfg.dra_drivers.iter().map(|d| node_row(d));
    let devices: Vec<MemberRow> = resources.chain(drivers).collect();
    let canary: Vec<MemberRow> = cfg.canary.iter().map(|c| canary_row(state, c)).collect();

    let gated = is_gated(state);
    let node_not_ready = state.node_wait_reason();
    let expected = state.expected().count();
    let blockers: Vec<&MemberRow> = daemonsets
        .iter()
        .chain(&critical_pods)
        .chain(&conditions)
        .chain(&devices)
        .chain(&canary)
        .filter(|r| r.expected && r.ready != Some(true))
        .collect();
    Report {
        node: node.name.clone(),
        gated,
        would_open: state.may_open_by_ready(),
        verdict: verdict(gated, expected, &blockers, node_not_ready.as_deref()),
        node_not_ready,
        evaluated_at: now,
        created: node.created,
        expected_members: expected,
        ready_members: expected - state.blockers().len(),
        taints: split_taints(&node.taints, &cfg.placement),
        daemonsets,
        critical_pods,
        regate: regate_report(node, state, cfg, now),
        replace: replace_report(node, cfg),
        conditions,
        devices,
        canary,
        condition_taints: rule_rows(node, cfg, now),
    }
}

fn daemonset_row(cx: &Ctx<'_>, node: &NodeInfo, ds: &DaemonSetInfo) -> MemberRow {
    let id = MemberId::daemonset(ds);
    let mut row = empty_row(&id, &ds.namespace, &ds.name);
    row.node_affinity = ds.template.required_node_affinity.as_ref().map(|terms| {
        placement::explain_terms(terms, &node.name, &node.labels)
            .into_iter()
            .enumerate()
            .map(|(i, r)| TermResult {
                term: i + 1,
                matches: r.is_ok(),
                why: r.err().map(|f| f.to_string()),
            })
            .collect()
    });
    let member = member_of(cx.state, &id);
    match &member.expectation {
        Expectation::NotExpected { reason, code } => {
            row.reason = reason.clone();
            row.reason_code = code.to_string();
            if *code == ReasonCode::NodeAffinity
                && let Some(terms) = row.node_affinity.as_ref().filter(|t| !t.is_empty())
            {
                // One line per term reads better than the one-sentence form.
                row.detail
                    .push("no term of its required node affinity matches:".into());
                row.detail.extend(terms.iter().map(|t| {
                    let why = t.why.as_deref().unwrap_or("matches");
                    format!("  term {}: {why}", t.term)
                }));
            }
        }
        Expectation::Expected => {
            row.expected = true;
            let terms = row.node_affinity.as_deref();
            row.reason = expected_reason(node, ds, &cx.cfg.placement, terms);
            row.reason_code = EXPECTED.into();
            fill_readiness(cx, &mut row, &id, Some(ds));
        }
    }
    row
}

fn critical_row(cx: &Ctx<'_>, entry: &CriticalPodEntry) -> MemberRow {
    let id = MemberId::Critical(entry.name.clone());
    let mut row = empty_row(&id, &entry.namespace, &entry.name);
    row.selector = Some(entry.selector.to_string());
    let member = member_of(cx.state, &id);
    if judged_by_selector(&mut row, member, "entry", entry.node_selector.as_ref()) {
        // Critical pods are static or mirror pods, never created unbound:
        // there is no pending pod to look for, and no minReadySeconds.
        fill_readiness(cx, &mut row, &id, None);
    }
    row
}

/// Ready/pod/waiting of an expected member, from the gate's readiness. For
/// "no pod yet", an unbound pod made for this node tells the real story:
/// usually the scheduler's reason for not placing it. `ds` is the member's
/// DaemonSet (its unbound pods, its minReadySeconds); `None` for a critical
/// entry.
fn fill_readiness(cx: &Ctx<'_>, row: &mut MemberRow, id: &MemberId, ds: Option<&DaemonSetInfo>) {
    let owner_uid = ds.map(|ds| ds.uid.as_str());
    let min_ready =
        Duration::from_secs(ds.map_or(0, |ds| u64::try_from(ds.min_ready_seconds).unwrap_or(0)));
    let waited = gate::waited_pod(id, cx.state, cx.cfg, cx.now);
    row.ready = Some(false);
    match &member_of(cx.state, id).readiness {
        Some(Readiness::Ready { pod }) => {
            row.ready = Some(true);
            row.pod = Some(pod.clone());
        }
        None => row.waiting = Some(NOT_EVALUATED.to_string()),
        Some(Readiness::Waiting { why, .. }) if waited.is_none() => {
            let pending = cx
                .facts
                .unscheduled
                .iter()
                .filter(|p| owner_uid.is_some() && p.controller_uid.as_deref() == owner_uid)
                .min_by_key(|&p| &p.name);
            row.waiting = Some(why.clone());
            if let Some(p) = pending {
                let detail = cx.facts.details.get(&p.key());
                row.waiting = Some(match detail.and_then(|d| d.unschedulable.as_deref()) {
                    Some(msg) => format!("pod {} is Pending, not scheduled: {msg}", p.name),
                    None => format!("pod {} is Pending, not scheduled yet", p.name),
                });
                row.pod = Some(p.name.to_string());
            }
        }
        Some(Readiness::Waiting {
            why, available_at, ..
        }) => {
            let pod = waited.as_deref().unwrap_or_default();
            row.pod = waited.clone();
            row.waiting = Some(match available_at {
                Some(at) => Readiness::not_available_text(pod, min_ready, *at, Some(cx.now)),
                None => {
                    let seen = cx
                        .state
                        .pods
                        .values()
                        .find(|p| p.namespace == *row.namespace && *p.name == *pod);
                    let detail = cx.facts.details.get(&format!("{}/{pod}", row.namespace));
                    describe_waiting(why, seen.map(AsRef::as_ref), detail)
                }
            });
        }
    }
}
