//! The re-gating part of an explain report (semantics.md §6.4), judged by
//! [`examine`] with nothing remembered: explain sees the node once, so a
//! member with no pod counts from now, as for a controller that just started.

use std::sync::Arc;

use jiff::Timestamp;
use serde::Serialize;

use crate::closing::regating::decider::{BeforeReboot, before_reboot};
use crate::closing::regating::health::examine;
use crate::closing::regating::{Health, NotWatched, Since, Trigger, Watched, carries, reboot};
use crate::gate::GateState;
use crate::vocab::annotations;
use crate::vocab::config::Config;
use crate::vocab::model::{NodeInfo, PodInfo};

/// Re-gating's view of the node. Absent from the report when re-gating is
/// off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegateReport {
    /// What re-gating makes of the node now, in one sentence.
    pub verdict: String,
    /// `nodegate.dev/regated-for` of a node carrying the re-gate taint.
    pub regated_for: Option<String>,
    /// Expected members (that tolerate the re-gate taint) without a Ready pod.
    pub broken: Vec<BrokenMember>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokenMember {
    pub member: String,
    pub broken_for_seconds: i64,
    /// `pod_ready_condition` (its pod's Ready condition changed then) or
    /// `first_seen` (no pod to count from: counted from now).
    pub counted_from: &'static str,
    pub waiting: String,
}

pub(crate) fn regate_report(
    node: &NodeInfo,
    state: &GateState,
    cfg: &Config,
    now: Timestamp,
) -> Option<RegateReport> {
    let rc = cfg.regate.as_ref()?;
    let pods: Vec<Arc<PodInfo>> = state.pods.values().cloned().collect();
    let announced = reboot::announced(node, &cfg.reboots, state.daemonsets.values(), now);
    let health = match before_reboot(node, cfg, announced) {
        BeforeReboot::Regate(a) => Health::Regate(Trigger::Announced(a)),
        _ => {
            let daemonsets = state.daemonsets.values();
            examine(node, daemonsets, &pods, cfg, &mut Watched::default(), now)
        }
    };
    let regated_for =
        carries(node, rc).then(|| node.regated_for.as_deref().unwrap_or("").to_string());
    let grace = humantime_secs(rc.after.as_secs());
    let verdict = match &health {
        Health::NotWatched(why) => not_watched_verdict(*why, regated_for.as_deref())?,
        Health::Healthy => format!(
            "every member that tolerates {} has a Ready pod: nothing to re-gate",
            rc.taint.to_taint()
        ),
        Health::Broken { regate_at, .. } => format!(
            "re-gated in {}s (at {regate_at:.0}) if still broken then (grace {grace})",
            regate_at.duration_since(now).as_secs().max(0)
        ),
        Health::Regate(Trigger::Members(_)) => format!(
            "due for re-gating now (broken for the grace, {grace}): the controller re-gates it unless \
             the budget is used up or writes are suspended"
        ),
        Health::Regate(Trigger::Reboot { .. }) => "due for re-gating: it rebooted".to_string(),
        Health::Regate(Trigger::Announced(a)) => {
            format!("due for re-gating before an announced reboot: {}", a.detail)
        }
    };
    let broken = match health {
        Health::Broken { members, .. } | Health::Regate(Trigger::Members(members)) => members,
        _ => Vec::new(),
    };
    Some(RegateReport {
        verdict,
        regated_for: regated_for.filter(|w| !w.is_empty()),
        broken: broken
            .into_iter()
            .map(|b| BrokenMember {
                broken_for_seconds: b.broken_for(now).as_secs().max(0),
                counted_from: match b.source {
                    Since::PodCondition => "pod_ready_condition",
                    Since::FirstSeen => "first_seen",
                },
                member: b.member,
                waiting: b.waiting,
            })
            .collect(),
    })
}

/// The verdict on a node re-gating does not watch, and why; `None` while
/// re-gating is off.
fn not_watched_verdict(why: NotWatched, regated_for: Option<&str>) -> Option<String> {
    Some(match why {
        NotWatched::Gated => match regated_for {
            Some(why) if !why.is_empty() => {
                format!("re-gated for {why}; it opens again when its members are Ready")
            }
            Some(_) => "re-gated; it opens again when its members are Ready".to_string(),
            None => "closed by a startup taint: re-gating watches it once it opens".to_string(),
        },
        NotWatched::OutOfScope => "not watched: outside --node-selector".to_string(),
        NotWatched::Ignored => format!("not watched: annotated {}=true", annotations::NODE_IGNORE),
        NotWatched::NodeNotReady => {
            "not watched while the node itself is not Ready (the node lifecycle controller taints it)"
                .to_string()
        }
        NotWatched::Off => return None,
    })
}

fn humantime_secs(s: u64) -> String {
    match s {
        0..60 => format!("{s}s"),
        _ if s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{}m{}s", s / 60, s % 60),
    }
}
