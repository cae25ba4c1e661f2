//! Deriving members from scratch: each DaemonSet's placement verdict and
//! readiness, and each critical-pod entry's.

use std::sync::Arc;

use jiff::Timestamp;

use super::state::GateState;
use crate::canary;
use crate::rules::conditions::CriticalCondition;
use crate::rules::devices::{CriticalResource, DraDriver};
use crate::rules::placement::{self, ReasonCode, Verdict};
use crate::rules::readiness::{self, CriticalPodEntry, MemberState};
use crate::rules::selector::LabelSelector;
use crate::vocab::config::{CanaryConfig, Config};
use crate::vocab::member::{Blocker, Member, MemberId, Readiness};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};
use crate::vocab::vec_map::VecMap;

/// Every member the gate should have, derived from scratch from what it has
/// seen: each DaemonSet's placement verdict and, when expected, its readiness
/// at `now`; each critical-pod entry likewise. The gate keeps its `members`
/// equal to this after every step (tests check it); it only avoids
/// re-deriving what an input cannot have changed.
pub fn derive_members(state: &GateState, cfg: &Config, now: Timestamp) -> VecMap<MemberId, Member> {
    match &state.node {
        Some(node) => derive_all(node, &state.daemonsets, &state.pods, cfg, now),
        None => VecMap::new(),
    }
}

pub(crate) fn derive_all(
    node: &NodeInfo,
    daemonsets: &VecMap<String, Arc<DaemonSetInfo>>,
    pods: &VecMap<String, Arc<PodInfo>>,
    cfg: &Config,
    now: Timestamp,
) -> VecMap<MemberId, Member> {
    // One allocation for the usual members (growing one by one took two or
    // three on every re-derivation).
    let canary = usize::from(cfg.canary.is_some());
    let mut out = VecMap::with_capacity(daemonsets.len() + cfg.critical.len() + canary);
    // Each DaemonSet's key is its member id's (no new text per derivation).
    for (key, ds) in daemonsets.iter() {
        out.insert(
            MemberId::DaemonSet(key.clone()),
            daemonset_member(node, ds, pods, cfg, now),
        );
    }
    for entry in &cfg.critical {
        out.insert(
            MemberId::Critical(entry.name.clone()),
            critical_member(node, entry, pods, now),
        );
    }
    for m in node_members(cfg) {
        out.insert(m.id(), node_member(node, m));
    }
    if let Some(canary) = &cfg.canary {
        let readiness = canary_readiness(node, canary, pods);
        out.insert(MemberId::Canary, Member::expected(readiness));
    }
    out
}

/// One member derived from scratch; `None` when it no longer exists.
pub(crate) fn derive_member(
    id: &MemberId,
    node: &NodeInfo,
    daemonsets: &VecMap<String, Arc<DaemonSetInfo>>,
    pods: &VecMap<String, Arc<PodInfo>>,
    cfg: &Config,
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
        MemberId::Condition(_) | MemberId::Resource(_) | MemberId::Dra(_) => node_members(cfg)
            .find(|m| m.id() == *id)
            .map(|m| node_member(node, m)),
        MemberId::Canary => {
            (cfg.canary.as_ref()).map(|c| Member::expected(canary_readiness(node, c, pods)))
        }
    }
}

/// The readiness of a member already known to be expected.
pub(super) fn derive_readiness(
    id: &MemberId,
    state: &GateState,
    cfg: &Config,
    now: Timestamp,
) -> Option<Readiness> {
    let node = state.node.as_ref()?;
    let pods = &state.pods;
    Some(match id {
        MemberId::Condition(_) | MemberId::Resource(_) | MemberId::Dra(_) => {
            return node_member(node, node_members(cfg).find(|m| m.id() == *id)?).readiness;
        }
        MemberId::Canary => canary_readiness(node, cfg.canary.as_ref()?, pods),
        MemberId::Critical(name) => {
            critical_readiness(cfg.critical.iter().find(|e| e.name == *name)?, pods, now)
        }
        MemberId::DaemonSet(key) => {
            daemonset_readiness(node, state.daemonsets.get(key)?, pods, now)
        }
    })
}

/// The pod an expected member waits on, by the same readiness rules the
/// gate's own members follow; `None` when it is Ready or has no pod yet.
/// For presentation: the gate keeps only the words, not the pod.
pub fn waited_pod(
    id: &MemberId,
    state: &GateState,
    cfg: &Config,
    now: Timestamp,
) -> Option<String> {
    match member_state(id, state, cfg, now)? {
        MemberState::NotReady(w) => w.pod().map(str::to_string),
        MemberState::Ready { .. } => None,
    }
}

/// The expected members with no pod on the node at all: never scheduled
/// there, as the node's pods show now (semantics.md §5.2). Conditions have
/// no pod and are never among them.
pub fn never_scheduled(state: &GateState, cfg: &Config, now: Timestamp) -> Vec<Blocker> {
    state
        .expected()
        .filter(|(id, _)| {
            matches!(
                member_state(id, state, cfg, now),
                Some(MemberState::NotReady(readiness::Waiting::NoPod))
            )
        })
        .map(|(id, _)| Blocker {
            member: id.clone(),
            why: NEVER_SCHEDULED.to_string(),
        })
        .collect()
}

/// How a member with no pod on the node at its schedule deadline is named.
pub const NEVER_SCHEDULED: &str = "never scheduled: no pod on the node";

fn member_state(
    id: &MemberId,
    state: &GateState,
    cfg: &Config,
    now: Timestamp,
) -> Option<MemberState> {
    let pods = state.pods.values().map(AsRef::as_ref);
    Some(match id {
        MemberId::DaemonSet(key) => {
            readiness::daemonset_member(state.daemonsets.get(key)?, pods, now)
        }
        MemberId::Critical(name) => {
            readiness::critical_member(cfg.critical.iter().find(|e| e.name == *name)?, pods, now)
        }
        // nodegate makes the canary's pod itself: it is never a member
        // the schedule deadline is about.
        MemberId::Condition(_) | MemberId::Resource(_) | MemberId::Dra(_) | MemberId::Canary => {
            return None;
        }
    })
}

fn daemonset_member(
    node: &NodeInfo,
    ds: &DaemonSetInfo,
    pods: &VecMap<String, Arc<PodInfo>>,
    cfg: &Config,
    now: Timestamp,
) -> Member {
    match placement::evaluate(node, ds, &cfg.placement) {
        Verdict::Expected => Member::expected(daemonset_readiness(node, ds, pods, now)),
        Verdict::NotExpected(reason) => Member::not_expected(reason.to_string(), reason.kind()),
    }
}

fn critical_member(
    node: &NodeInfo,
    entry: &CriticalPodEntry,
    pods: &VecMap<String, Arc<PodInfo>>,
    now: Timestamp,
) -> Member {
    if readiness::critical_applies(entry, node) {
        Member::expected(critical_readiness(entry, pods, now))
    } else {
        selector_mismatch("entry", entry.node_selector.as_ref())
    }
}

/// A critical-pod entry, condition or device whose node selector the node
/// does not match (`what` names which).
pub(super) fn selector_mismatch(what: &str, selector: Option<&LabelSelector>) -> Member {
    let selector = selector.map(ToString::to_string).unwrap_or_default();
    Member::not_expected(
        format!("the node does not match the {what}'s node selector {selector:?}"),
        ReasonCode::NodeSelector,
    )
}

/// An expected DaemonSet's readiness on the node: its pods', then its CSI
/// drivers'.
fn daemonset_readiness(
    node: &NodeInfo,
    ds: &DaemonSetInfo,
    pods: &VecMap<String, Arc<PodInfo>>,
    now: Timestamp,
) -> Readiness {
    let member = readiness::daemonset_member(ds, pods.values().map(AsRef::as_ref), now);
    csi_readiness(node, ds, Readiness::from_member_state(member))
}

fn critical_readiness(
    entry: &CriticalPodEntry,
    pods: &VecMap<String, Arc<PodInfo>>,
    now: Timestamp,
) -> Readiness {
    let member = readiness::critical_member(entry, pods.values().map(AsRef::as_ref), now);
    Readiness::of_critical(entry, member)
}

/// The canary member, expected on every gated node while `canary` is
/// configured, is Ready as [`canary::readiness`] says.
fn canary_readiness(
    node: &NodeInfo,
    cfg: &CanaryConfig,
    pods: &VecMap<String, Arc<PodInfo>>,
) -> Readiness {
    canary::readiness(pods.values().map(AsRef::as_ref), cfg, &node.name)
}

/// A Ready DaemonSet annotated `nodegate.dev/csi-driver: NAME[,NAME]` is
/// Ready on the node only once the node's CSINode lists every named driver
/// (semantics.md §6.7); otherwise it waits, naming the missing drivers.
fn csi_readiness(node: &NodeInfo, ds: &DaemonSetInfo, readiness: Readiness) -> Readiness {
    let Readiness::Ready { pod } = &readiness else {
        return readiness;
    };
    let wanted = readiness::csi_drivers(ds);
    if wanted.is_empty() {
        return readiness;
    }
    let listed = node.csi_drivers.as_deref().unwrap_or_default();
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| !listed.iter().any(|l| l == w))
        .collect();
    if missing.is_empty() {
        return readiness;
    }
    let whose = if node.csi_drivers.is_none() {
        "the node has no CSINode yet"
    } else {
        "the node's CSINode does not list it yet"
    };
    Readiness::waiting(format!(
        "pod {pod} is Ready but CSI driver {} is not registered ({whose})",
        missing.join(", ")
    ))
}

/// A member judged from the node alone, like node conditions: a
/// `criticalConditions`, `criticalResources` or `draDrivers` entry
/// (semantics.md §6.5, §6.8). Each kind joins [`node_members`] once instead
/// of having a case in every function that derives, reads or reports a
/// member.
pub(crate) trait NodeMember {
    fn id(&self) -> MemberId;
    /// The member's name without its kind: its explain row's name.
    fn name(&self) -> &str;
    /// What explain shows as the member's selector, if anything.
    fn row_selector(&self) -> Option<String> {
        None
    }
    /// How a report and a selector mismatch name the kind ("condition").
    fn what(&self) -> &'static str;
    fn node_selector(&self) -> Option<&LabelSelector>;
    /// `Ok` with what satisfies it on `node`, else why not.
    fn judge(&self, node: &NodeInfo) -> Result<String, String>;
}

impl NodeMember for CriticalCondition {
    fn id(&self) -> MemberId {
        MemberId::Condition(self.type_.clone())
    }
    fn name(&self) -> &str {
        &self.type_
    }
    fn row_selector(&self) -> Option<String> {
        Some(format!("{}={}", self.type_, self.status))
    }
    fn what(&self) -> &'static str {
        "condition"
    }
    fn node_selector(&self) -> Option<&LabelSelector> {
        self.node_selector.as_ref()
    }
    /// Ready once the node reports the wanted status.
    fn judge(&self, node: &NodeInfo) -> Result<String, String> {
        match self.waiting(node) {
            None => Ok(format!("condition {}={}", self.type_, self.status)),
            Some(why) => Err(why),
        }
    }
}

/// A device member: named by one field, judged by its own `judge`.
macro_rules! device_member {
    ($type:ident, $name:ident, $id:path, $what:literal) => {
        impl NodeMember for $type {
            fn id(&self) -> MemberId {
                $id(self.$name.clone())
            }
            fn name(&self) -> &str {
                &self.$name
            }
            fn what(&self) -> &'static str {
                $what
            }
            fn node_selector(&self) -> Option<&LabelSelector> {
                self.node_selector.as_ref()
            }
            fn judge(&self, node: &NodeInfo) -> Result<String, String> {
                $type::judge(self, node)
            }
        }
    };
}
device_member!(CriticalResource, resource, MemberId::Resource, "resource");
device_member!(DraDriver, driver, MemberId::Dra, "DRA driver");

/// Every configured member judged from the node alone: conditions, then
/// resources, then DRA drivers, each in configuration order.
pub(crate) fn node_members(cfg: &Config) -> impl Iterator<Item = &dyn NodeMember> {
    let conditions = cfg.conditions.iter().map(|c| c as &dyn NodeMember);
    let resources = cfg.resources.iter().map(|r| r as &dyn NodeMember);
    let drivers = cfg.dra_drivers.iter().map(|d| d as &dyn NodeMember);
    conditions.chain(resources).chain(drivers)
}

/// Expected where its node selector matches; Ready as [`NodeMember::judge`]
/// says.
fn node_member(node: &NodeInfo, m: &dyn NodeMember) -> Member {
    let selector = m.node_selector();
    if !selector.is_none_or(|s| s.matches(&node.labels)) {
        return selector_mismatch(m.what(), selector);
    }
    Member::expected(match m.judge(node) {
        Ok(what) => Readiness::Ready { pod: what },
        Err(why) => Readiness::waiting(why),
    })
}
