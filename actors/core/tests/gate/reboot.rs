//! A node re-gated before an announced reboot (semantics.md §6.10): its
//! gate holds while the node reports the boot id it was re-gated in, and
//! after the reboot until each member Ready from before is Ready again
//! since the taint; a withdrawal (the record removed) lets it open by
//! readiness; `--reboot-timeout` is its deadline; a gate started afresh (a
//! new leader) decides the same from the node.

use std::sync::Arc;
use std::time::Duration;

use crate::gate_support::*;
use nodegate_core::closing::regating::DEFAULT_REGATE_TAINT_KEY;
use nodegate_core::gate::{Event, Input, OpenedBy, TimerKind};
use nodegate_core::rules::placement::{EFFECT_NO_SCHEDULE, ManagedTaint};
use nodegate_core::testutil::{taint, ts};
use nodegate_core::vocab::config::{AnnouncedReboots, Config, OnTimeout, RegateConfig};
use nodegate_core::vocab::model::{NodeInfo, PodInfo};

/// The taint went on at 1000 s.
const TAINTED: i64 = 1000;

fn reboot_cfg() -> Config {
    let regate = ManagedTaint::new(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE);
    let mut c = cfg();
    c.placement.managed_taints.push(regate.clone());
    c.regate = Some(RegateConfig {
        after: Duration::from_secs(60),
        taint: regate,
        timeout: None,
        on_reboot: true,
        max_unavailable: Default::default(),
    });
    c.reboots = AnnouncedReboots {
        timeout: Some(Duration::from_secs(600)),
        ..AnnouncedReboots::default()
    };
    c
}

/// The node as re-gating left it: the re-gate taint, `gated-since` at
/// [`TAINTED`], the boot id `boot-1` recorded; reporting `boot`.
fn announced_node(boot: &str, version: &str) -> NodeInfo {
    let mut n = node(vec![taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE)]);
    n.gated_since = Some(ts(TAINTED));
    n.regated_for = Some("announced-reboot:kured-lock".into());
    n.awaiting_reboot = Some("boot-1".into());
    n.boot_id = Some(boot.into());
    n.resource_version = version.into();
    n
}

/// `cilium-1`, Ready since `since`.
fn ready_since(ds: &nodegate_core::vocab::model::DaemonSetInfo, since: i64) -> PodInfo {
    PodInfo {
        ready_since: Some(ts(since)).into(),
        ..ready_pod("cilium-1", ds)
    }
}

#[test]
fn pods_ready_from_before_the_reboot_do_not_open_it_and_ready_after_it_does() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(reboot_cfg());
    // Every member Ready (since long before): held, the node has not rebooted.
    let step = g.at(TAINTED + 1).start(
        announced_node("boot-1", "1"),
        vec![a.clone()],
        vec![ready_since(&a, 500)],
    );
    assert!(g.state.all_ready());
    assert!(patches(&step).is_empty(), "{step:?}");
    assert!(!g.state.may_open_by_ready());
    let why = g.state.node_wait_reason().unwrap_or_default();
    assert!(why.contains("announced reboot"), "{why}");
    // A new boot id, the pod's status still from before: held.
    let step = g
        .at(TAINTED + 100)
        .feed(Input::NodeChanged(announced_node("boot-2", "2").into()));
    assert!(patches(&step).is_empty(), "{step:?}");
    let why = g.state.node_wait_reason().unwrap_or_default();
    assert!(why.contains("kube-system/cilium"), "{why}");
    // The restarted kubelet: not Ready, then Ready again since the reboot.
    let step = g
        .at(TAINTED + 110)
        .feed(Input::PodUpserted(Arc::new(PodInfo {
            ready: false,
            ready_since: Some(ts(TAINTED + 105)).into(),
            ..ready_pod("cilium-1", &a)
        })));
    assert!(patches(&step).is_empty());
    let step = g
        .at(TAINTED + 120)
        .feed(Input::PodUpserted(Arc::new(ready_since(&a, TAINTED + 118))));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{step:?}");
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}

#[test]
fn a_withdrawn_announcement_opens_it_by_readiness_without_a_reboot() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(reboot_cfg());
    let step = g.at(TAINTED + 1).start(
        announced_node("boot-1", "1"),
        vec![a.clone()],
        vec![ready_since(&a, 500)],
    );
    assert!(patches(&step).is_empty());
    // Re-gating removed the record: the pods from before count.
    let mut withdrawn = announced_node("boot-1", "2");
    withdrawn.awaiting_reboot = None;
    let step = g
        .at(TAINTED + 30)
        .feed(Input::NodeChanged(withdrawn.into()));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{step:?}");
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}

/// The reboot never comes: `--reboot-timeout` after the taint the deadline
/// does what `--on-timeout` says, and says why.
#[test]
fn the_reboot_timeout_is_the_deadline_of_a_gate_waiting_for_a_reboot() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(reboot_cfg());
    g.at(TAINTED + 1).start(
        announced_node("boot-1", "1"),
        vec![a.clone()],
        vec![ready_since(&a, 500)],
    );
    assert_eq!(g.state.timers.deadline, Some(ts(TAINTED + 600)));
    let generation = g.state.timers.deadline_generation;
    let step = g.at(TAINTED + 600).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation,
    });
    let timed_out = step.events.iter().find_map(|e| match e {
        Event::TimedOut {
            action,
            node_not_ready,
            ..
        } => Some((*action, node_not_ready.clone())),
        _ => None,
    });
    let (action, why) = timed_out.unwrap_or_else(|| panic!("no timeout: {step:?}"));
    assert_eq!(action, OnTimeout::Open);
    assert!(why.unwrap_or_default().contains("announced reboot"));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{step:?}");
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);
    // Without --reboot-timeout, --regate-timeout's (none here: no deadline).
    let mut c = reboot_cfg();
    c.reboots.timeout = None;
    let mut g = Gate::new(c);
    g.at(TAINTED + 1).start(
        announced_node("boot-1", "1"),
        vec![a.clone()],
        vec![ready_since(&a, 500)],
    );
    assert_eq!(g.state.timers.deadline, None);
}

/// A gate started afresh (a new leader, a restart) on a node re-gated
/// before its reboot knows it from the node alone: before the reboot, and
/// after it with the pods' status still from before.
#[test]
fn a_gate_started_afresh_holds_the_same() {
    let a = tolerant_ds("cilium");
    for boot in ["boot-1", "boot-2"] {
        let mut g = Gate::new(reboot_cfg());
        let step = g.at(TAINTED + 200).start(
            announced_node(boot, "5"),
            vec![a.clone()],
            vec![ready_since(&a, 500)],
        );
        assert!(patches(&step).is_empty(), "{boot}: {step:?}");
        assert!(g.state.node_wait_reason().is_some(), "{boot}");
    }
}
