//! Re-gating an open node (semantics.md §6.4): when an expected member has
//! had no Ready pod for the grace, or the node rebooted, nodegate puts the
//! re-gate taint back on and the gate runs as for a new node.
//!
//! [`examine`] is the whole decision for one node, over what the router's
//! indexes hold plus the little [`Watched`] remembers between looks; the
//! [`MaxUnavailable`] budget is checked by the caller, which counts the
//! cluster's nodes. Pure: time is an argument.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::budget::MaxUnavailable;
use crate::config::{Config, RegateConfig};
use crate::model::{DaemonSetInfo, NodeInfo, NodeReady, PodInfo};
use crate::placement::{self, Verdict, first_untolerated_taint, with_default_tolerations};
use crate::readiness::{self, MemberState};

/// The default `--regate-taint`: a managed taint, but never the startup
/// taint (autoscalers treat a startup taint that comes back as permanent).
pub const DEFAULT_REGATE_TAINT_KEY: &str = "nodegate.dev/degraded";

/// What is remembered about one open node between looks: the boot id it
/// was first seen with (`--regate-on-reboot`), and since when each broken
/// member that has no Ready condition to count from was first seen broken.
/// Empty for a healthy node, which is then not remembered at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Watched {
    pub boot_id: Option<Box<str>>,
    /// (member, first seen broken), sorted by member.
    pub missing_since: Vec<(Box<str>, Timestamp)>,
    /// A reboot seen and not yet acted on, (from, to): it stays due until
    /// the node carries the re-gate taint (the caller's write may be refused
    /// by the budget, a conflict or leadership, and must be tried again).
    pub reboot: Option<(Box<str>, Box<str>)>,
    /// The opening (`opened-at`) whose broken members are excused, and those
    /// members: a node opened by its deadline or by hand was opened with
    /// them broken on purpose, and re-gating it for them would undo that.
    /// Each is excused until it has been seen Ready once.
    pub excused: Option<(Timestamp, Vec<Box<str>>)>,
}

impl Watched {
    pub fn is_empty(&self) -> bool {
        self.boot_id.is_none()
            && self.missing_since.is_empty()
            && self.reboot.is_none()
            && self.excused.is_none()
    }
}

/// Where the broken-since time of a member comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The `lastTransitionTime` of its pod's Ready condition (cluster time:
    /// a restart of nodegate does not reset it).
    PodCondition,
    /// When nodegate first saw the member without a Ready pod (no pod, or a
    /// pod without a Ready condition to count from).
    FirstSeen,
}

/// An expected member without a Ready pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The DaemonSet, `namespace/name`.
    pub member: String,
    pub since: Timestamp,
    pub source: Since,
    /// What it waits for, in the gate's words.
    pub waiting: String,
}

impl Broken {
    pub fn broken_for(&self, now: Timestamp) -> SignedDuration {
        now.duration_since(self.since)
    }
}

/// Why a node is re-gated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// These members have had no Ready pod for the grace or longer.
    Members(Vec<Broken>),
    /// `status.nodeInfo.bootID` changed (`--regate-on-reboot`).
    Reboot { from: String, to: String },
    /// A reboot is announced and has not happened yet
    /// (`--reboot-announcements`, semantics.md §6.10).
    Announced(crate::reboot::Announcement),
}

impl Trigger {
    /// The `nodegate.dev/regated-for` annotation: the members, comma
    /// separated, or `reboot`.
    pub fn annotation(&self) -> String {
        match self {
            Trigger::Members(m) => m
                .iter()
                .map(|b| b.member.as_str())
                .collect::<Vec<_>>()
                .join(","),
            Trigger::Reboot { .. } => "reboot".to_string(),
            Trigger::Announced(a) => {
                format!("{}{}", crate::reboot::REGATED_FOR_PREFIX, a.source)
            }
        }
    }

    /// The metric label: `members`, `reboot` or `announced`.
    pub fn kind(&self) -> &'static str {
        match self {
            Trigger::Members(_) => "members",
            Trigger::Reboot { .. } => "reboot",
            Trigger::Announced(_) => "announced",
        }
    }

    /// Whether acting on it goes around the budgets: only an announcement
    /// from an orchestrator that bounds its own disruption.
    pub fn bypasses_budget(&self) -> bool {
        matches!(self, Trigger::Announced(a) if a.source.bypasses_budget())
    }
}

/// Why an open node is not watched at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotWatched {
    /// `--regate-after` is 0.
    Off,
    /// Outside `--node-selector`.
    OutOfScope,
    /// Annotated `nodegate.dev/ignore: "true"`.
    Ignored,
    /// It carries a managed taint: its gate is in charge.
    Gated,
    /// Its own Ready condition is not True: the node lifecycle controller
    /// taints such a node itself.
    NodeNotReady,
}

/// [`examine`]'s verdict for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    NotWatched(NotWatched),
    /// Every expected member that tolerates the re-gate taint is Ready.
    Healthy,
    /// Some are broken, none for the whole grace yet; look again at
    /// `regate_at`.
    Broken {
        members: Vec<Broken>,
        regate_at: Timestamp,
    },
    /// Re-gate the node now (if the budget allows).
    Regate(Trigger),
}

/// The decision for one node at `now`. `memory` is updated: the boot id is
/// recorded the first time, and first-seen times are kept for broken members
/// without a Ready condition and dropped for the others.
pub fn examine<'a>(
    node: &NodeInfo,
    daemonsets: impl IntoIterator<Item = &'a Arc<DaemonSetInfo>>,
    pods: &[Arc<PodInfo>],
    cfg: &Config,
    memory: &mut Watched,
    now: Timestamp,
) -> Health {
    let Some(rc) = &cfg.regate else {
        *memory = Watched::default();
        return Health::NotWatched(NotWatched::Off);
    };
    if let Some(why) = not_watched(node, cfg) {
        *memory = Watched::default();
        return Health::NotWatched(why);
    }
    if rc.on_reboot
        && let Some(trigger) = reboot_due(node, memory)
    {
        return Health::Regate(trigger);
    }
    if node.ready != NodeReady::True {
        memory.missing_since.clear();
        return Health::NotWatched(NotWatched::NodeNotReady);
    }
    let mut broken = broken_members(node, daemonsets, pods, cfg, rc, memory, now);
    excuse(node, memory, &mut broken);
    grace_verdict(broken, rc, now)
}

/// Why an open node in reach of `--regate-after` is not watched, before its
/// own Ready condition is looked at: out of scope, ignored, or gated.
fn not_watched(node: &NodeInfo, cfg: &Config) -> Option<NotWatched> {
    if !cfg.scope.includes(&node.labels) {
        Some(NotWatched::OutOfScope)
    } else if node.ignored {
        Some(NotWatched::Ignored)
    } else if node.taints.iter().any(|t| cfg.placement.is_managed(t)) {
        Some(NotWatched::Gated)
    } else {
        None
    }
}

/// `--regate-on-reboot`: records the boot id the first time, notes a change
/// of it as a reboot (forgetting the first-seen times, which belong to the
/// boot before), and returns the reboot trigger while one is due. A node
/// reporting no boot id is left as it is.
fn reboot_due(node: &NodeInfo, memory: &mut Watched) -> Option<Trigger> {
    let now_boot = node.boot_id.as_deref().filter(|b| !b.is_empty())?;
    match memory.boot_id.as_deref() {
        Some(seen) if seen != now_boot => {
            memory.reboot = Some((seen.into(), now_boot.into()));
            memory.boot_id = Some(now_boot.into());
            memory.missing_since.clear();
        }
        Some(_) => {}
        None => memory.boot_id = Some(now_boot.into()),
    }
    memory.reboot.as_ref().map(|(from, to)| Trigger::Reboot {
        from: from.to_string(),
        to: to.to_string(),
    })
}

/// The expected members that tolerate the re-gate taint and have no Ready
/// pod on the node, each with since when it is broken. First-seen times are
/// recorded for those without a Ready condition to count from, and dropped
/// for every other member.
fn broken_members<'a>(
    node: &NodeInfo,
    daemonsets: impl IntoIterator<Item = &'a Arc<DaemonSetInfo>>,
    pods: &[Arc<PodInfo>],
    cfg: &Config,
    rc: &RegateConfig,
    memory: &mut Watched,
    now: Timestamp,
) -> Vec<Broken> {
    let regate_taint = rc.taint.to_taint();
    let mut broken = Vec::new();
    for ds in daemonsets {
        if !matches!(
            placement::evaluate(node, ds, &cfg.placement),
            Verdict::Expected
        ) {
            continue;
        }
        let tolerations =
            with_default_tolerations(&ds.template.tolerations, ds.template.host_network);
        if first_untolerated_taint([&regate_taint], &tolerations).is_some() {
            continue;
        }
        let on_node = pods.iter().map(AsRef::as_ref);
        if let MemberState::NotReady(waiting) = readiness::daemonset_member(ds, on_node, now) {
            let (since, source) = match condition_since(ds, pods) {
                Some(t) => (t, Since::PodCondition),
                None => (first_seen(memory, &ds.key(), now), Since::FirstSeen),
            };
            broken.push(Broken {
                member: ds.key(),
                since,
                source,
                waiting: waiting.to_string(),
            });
        }
    }
    memory.missing_since.retain(|(m, _)| {
        broken
            .iter()
            .any(|b| b.source == Since::FirstSeen && *b.member == **m)
    });
    broken
}

/// The verdict over the broken members not excused: re-gate for those broken
/// for the whole grace, or else when the first of the others will be.
fn grace_verdict(broken: Vec<Broken>, rc: &RegateConfig, now: Timestamp) -> Health {
    let grace = SignedDuration::try_from(rc.after).unwrap_or(SignedDuration::MAX);
    let due_at = |b: &Broken| b.since.checked_add(grace).unwrap_or(Timestamp::MAX);
    let (due, waiting): (Vec<Broken>, Vec<Broken>) =
        broken.into_iter().partition(|b| due_at(b) <= now);
    if !due.is_empty() {
        return Health::Regate(Trigger::Members(due));
    }
    match waiting.iter().map(due_at).min() {
        Some(regate_at) => Health::Broken {
            members: waiting,
            regate_at,
        },
        None => Health::Healthy,
    }
}

/// A node opened by its deadline or by hand (`opened-by: timeout|manual`),
/// or whose re-gate taint someone took off (see [`excused_opening`]): the
/// members broken at the first look after that opening are excused until
/// each has been Ready once, and left out of `broken`. (After a restart of
/// nodegate, the first look is the first after the opening.)
fn excuse(node: &NodeInfo, memory: &mut Watched, broken: &mut Vec<Broken>) {
    let Some(opened) = excused_opening(node) else {
        memory.excused = None;
        return;
    };
    if memory.excused.as_ref().is_none_or(|(at, _)| *at != opened) {
        let list = broken.iter().map(|b| b.member.as_str().into()).collect();
        memory.excused = Some((opened, list));
    }
    if let Some((_, excused)) = memory.excused.as_mut() {
        // Ready once (not broken now): no longer excused.
        excused.retain(|m| broken.iter().any(|b| *b.member == **m));
        broken.retain(|b| !excused.iter().any(|m| **m == *b.member));
    }
}

/// The opening whose broken members are excused, if any: one nodegate made
/// with members broken on purpose (`opened-at`, with `opened-by` timeout,
/// manual or external), or one nodegate did not make at all — the node was
/// re-gated (`regated-for`, `gated-since`), it is open now, and nodegate
/// wrote no `opened-at` since: an operator took the re-gate taint off by
/// hand to put the node back in service. That
/// removal is respected until the members broken then have been Ready once;
/// it is known by its `gated-since`.
fn excused_opening(node: &NodeInfo) -> Option<Timestamp> {
    if let (Some(opened), true) = (node.opened_at, node.opened_unready) {
        return Some(opened);
    }
    node.regated_for.as_ref()?;
    let regated = node.gated_since?;
    node.opened_at
        .is_none_or(|opened| opened < regated)
        .then_some(regated)
}

/// The latest `lastTransitionTime` of a Ready condition that is not True,
/// among the member's own pods on the node that are not being deleted: the
/// newest pod decides, so a pod replaced by a rolling update counts from its
/// replacement.
fn condition_since(ds: &DaemonSetInfo, pods: &[Arc<PodInfo>]) -> Option<Timestamp> {
    pods.iter()
        .filter(|p| p.controlled_by(ds))
        .filter(|p| !p.terminating && !p.ready)
        .filter_map(|p| p.ready_since)
        .max()
}

fn first_seen(memory: &mut Watched, member: &str, now: Timestamp) -> Timestamp {
    match memory
        .missing_since
        .binary_search_by(|(m, _)| (**m).cmp(member))
    {
        Ok(i) => memory.missing_since[i].1,
        Err(i) => {
            memory.missing_since.insert(i, (member.into(), now));
            now
        }
    }
}

/// What the budget counts, from the nodes as the cluster shows them (so a
/// restarted or new leader counts the same): the nodes in scope, and those of
/// them carrying the re-gate taint now.
pub fn budget_counts<N: std::ops::Deref<Target = NodeInfo>>(
    nodes: impl IntoIterator<Item = N>,
    cfg: &Config,
    rc: &RegateConfig,
) -> (usize, usize) {
    let mut managed = 0;
    let mut in_use = 0;
    for n in nodes {
        if cfg.scope.includes(&n.labels) {
            managed += 1;
            if carries(&n, rc) {
                in_use += 1;
            }
        }
    }
    (managed, in_use)
}

/// Whether `node` carries the re-gate taint.
pub fn carries(node: &NodeInfo, rc: &RegateConfig) -> bool {
    node.taints.iter().any(|t| rc.taint.matches(t))
}

/// The budget: whether one more node may carry the re-gate taint, with
/// `in_use` of the `managed` nodes already carrying it.
pub fn budget_allows(rc: &RegateConfig, managed: usize, in_use: usize) -> Result<(), Exhausted> {
    if rc.max_unavailable.room(managed, in_use) > 0 {
        Ok(())
    } else {
        Err(Exhausted {
            allowed: rc.max_unavailable.allowed(managed),
            in_use,
            managed,
            max_unavailable: rc.max_unavailable,
            total: false,
        })
    }
}

/// The budget is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted {
    pub allowed: usize,
    pub in_use: usize,
    pub managed: usize,
    pub max_unavailable: MaxUnavailable,
    /// The cap on all nodes nodegate keeps closed (`--max-unavailable`),
    /// rather than re-gating's own budget.
    pub total: bool,
}

impl std::fmt::Display for Exhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.total {
            return write!(
                f,
                "{} of the {} nodes --max-unavailable {} lets nodegate keep closed ({} managed nodes) are already re-gated or carry a condition rule's taint",
                self.in_use, self.allowed, self.max_unavailable, self.managed
            );
        }
        write!(
            f,
            "{} of the {} re-gated nodes --regate-max-unavailable {} allows ({} managed nodes) are already re-gated",
            self.in_use, self.allowed, self.max_unavailable, self.managed
        )
    }
}

/// Words for an Event and the log: each member, what it waits for and how
/// long it has been broken.
pub fn describe(members: &[Broken], now: Timestamp) -> String {
    members
        .iter()
        .map(|b| {
            format!(
                "{} ({}; for {}s)",
                b.member,
                b.waiting,
                b.broken_for(now).as_secs().max(0)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
