//! Karpenter-aware opening (semantics.md §6.0, issue 27): a node Karpenter
//! is still registering (label `karpenter.sh/nodepool`, no
//! `karpenter.sh/registered=true`) does not open by readiness, since
//! Karpenter's registration would put a NodePool's `startupTaints` key back
//! (karpenter#1772), unless it carries `karpenter.sh/do-not-sync-taints=true`.
//! A managed taint put back after an opening before registration is gated
//! again with the same deadline and opens without a second Event.

use crate::gate_support::*;
use nodegate_core::gate::{Effect, EventType, Input, OpenedBy, PatchOutcome, Phase, TimerKind};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::model::NodeInfo;

fn karpenter_node(extra: &[(&str, &str)], version: &str) -> NodeInfo {
    let mut n = gated_node();
    n.labels
        .insert("karpenter.sh/nodepool".into(), "default".into());
    for (k, v) in extra {
        n.labels.insert((*k).into(), (*v).into());
    }
    n.resource_version = version.into();
    n
}

#[test]
fn a_node_karpenter_is_registering_opens_only_once_registered() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        karpenter_node(&[], "1"),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert!(g.state.all_ready());
    assert!(patches(&step).is_empty(), "opened before registration");
    assert!(!g.state.may_open_by_ready());
    let why = g.state.node_wait_reason().unwrap_or_default();
    assert!(
        why.contains("karpenter registration") && why.contains("karpenter.sh/registered=true"),
        "{why}"
    );
    // Registered false is not registered.
    let step = g.at(2).feed(Input::NodeChanged(
        karpenter_node(&[("karpenter.sh/registered", "false")], "2").into(),
    ));
    assert!(patches(&step).is_empty());

    let step = g.at(3).feed(Input::NodeChanged(
        karpenter_node(&[("karpenter.sh/registered", "true")], "3").into(),
    ));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.effects);
    assert_eq!(
        (p[0].opened_by, p[0].resource_version.as_str()),
        (OpenedBy::Ready, "3")
    );
    let step = g.at(4).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_event(&step, EventType::Normal, "GateOpened", &[]);
}

#[test]
fn do_not_sync_taints_opens_without_waiting_for_registration() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        karpenter_node(&[("karpenter.sh/do-not-sync-taints", "true")], "1"),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert_eq!(patches(&step).len(), 1, "{:?}", step.effects);
    assert_eq!(g.state.node_wait_reason(), None);
}

#[test]
fn a_taint_put_back_by_registration_is_gated_again_with_the_same_deadline_and_no_second_event() {
    let a = tolerant_ds("cilium");
    // Registration never came before the deadline: opened by it (one Event).
    let mut g = Gate::new(cfg());
    g.at(1).start(
        karpenter_node(&[], "1"),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(patches(&step)[0].opened_by, OpenedBy::Timeout);
    let step = g.at(121).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(recorded(&step).len(), 1, "the first opening is recorded");
    assert_eq!(g.state.phase, Phase::Opened);

    // Karpenter registers the node and puts its startup taint back, in one
    // write; the node keeps nodegate's opened-at. A new gate starts.
    let mut back = karpenter_node(&[("karpenter.sh/registered", "true")], "5");
    back.opened_at = Some(ts(121));
    let mut again = Gate::new(cfg());
    let step = again
        .at(122)
        .start(back, vec![a.clone()], vec![ready_pod("cilium-1", &a)]);
    assert!(again.state.reopening);
    assert_eq!(
        again.state.timers.deadline,
        Some(ts(120)),
        "the deadline still counts from the node's creation"
    );
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::RemoveTaints(_))),
        "{:?}",
        step.effects
    );
    let step = again
        .at(123)
        .feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(again.state.phase, Phase::Opened);
    assert!(
        recorded(&step).is_empty(),
        "a second Event: {:?}",
        recorded(&step)
    );
    assert!(stops(&step));

    // Not a Karpenter node, or re-gated by nodegate: every opening is recorded.
    let mut regated = karpenter_node(&[("karpenter.sh/registered", "true")], "7");
    regated.opened_at = Some(ts(121));
    regated.gated_since = Some(ts(200));
    let mut third = Gate::new(cfg());
    third
        .at(201)
        .start(regated, vec![a.clone()], vec![ready_pod("cilium-1", &a)]);
    assert!(!third.state.reopening);
    let step = third
        .at(202)
        .feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(recorded(&step).len(), 1);
}

/// explain and status say the node waits for Karpenter, in the gate's words.
#[test]
fn explain_names_the_wait_for_karpenter_registration() {
    use nodegate_core::gate::report::{ReadFacts, explain};
    let a = tolerant_ds("cilium");
    let report = explain(
        &karpenter_node(&[], "1"),
        std::slice::from_ref(&a),
        &[ready_pod("cilium-1", &a)],
        &ReadFacts::default(),
        &cfg(),
        ts(1),
    );
    assert!(
        report
            .verdict
            .starts_with("closed: waiting for karpenter registration")
            && report.verdict.contains("its one expected member is Ready"),
        "{}",
        report.verdict
    );
    assert!(
        report
            .node_not_ready
            .as_deref()
            .is_some_and(|w| w.contains("karpenter.sh/registered=true")),
        "{:?}",
        report.node_not_ready
    );
}
