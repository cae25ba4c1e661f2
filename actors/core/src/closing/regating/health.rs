//! How one open node is doing, for re-gating: [`examine`] reads what the
//! index holds of the node and its DaemonSet pods, and the little
//! [`Watched`] remembers of it, and says whether the node is watched, well,
//! within the grace, or due to be re-gated. The decider acts on the verdict;
//! `explain` reports it.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::closing::regating::{Broken, Health, NotWatched, Since, Trigger, Watched};
use crate::rules::placement::{self, DaemonTolerations, first_untolerated_taint};
use crate::rules::readiness::{self, MemberState};
use crate::vocab::config::{Config, RegateConfig};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, NodeReady, PodInfo};

/// How one open node is doing at `now`, from what the index holds and the
/// little the decider remembers of it (`memory`, updated).
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
        if !placement::evaluate(node, ds, &cfg.placement).is_expected() {
            continue;
        }
        let tolerations =
            DaemonTolerations::new(&ds.template.tolerations, ds.template.host_network);
        if first_untolerated_taint([&regate_taint], tolerations).is_some() {
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

/// Leaves out of `broken` the members excused by [`excused_opening`]: those
/// broken at the first look after that opening, until each has been Ready
/// once. (After a restart of nodegate, the first look is the first after
/// the opening.)
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
/// hand to put the node back in service.
fn excused_opening(node: &NodeInfo) -> Option<Timestamp> {
    if let (Some(opened), true) = (node.opened_at, node.opened_unready()) {
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
        .filter_map(|p| p.ready_since.get())
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

#[cfg(test)]
mod tests;
