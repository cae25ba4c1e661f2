//! The periodic re-examination: a gate decides again from the cluster as
//! it is, even with no message.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{Event, Input, OpenedBy, StopReason};

#[test]
fn a_stale_gate_opens_on_the_periodic_reexamination() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    // Nothing new: the re-examination decides nothing and journals nothing.
    let step = g.at(31).feed(Input::reexamine(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    ));
    assert!(step.events.is_empty(), "{:?}", step.events);
    assert!(step.effects.is_empty(), "{:?}", step.effects);

    // The pod became Ready in the index, but its hint never reached the gate.
    let step = g.at(61).feed(Input::reexamine(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    ));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::MemberReady { pod, .. } if pod == "cilium-1"
    )));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}

#[test]
fn a_reexamination_sees_a_taint_removal_whose_hint_was_lost() {
    let mut g = Gate::new(cfg());
    g.at(1)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g.at(31).feed(Input::reexamine(
        node(vec![]),
        vec![tolerant_ds("broken")],
        vec![],
    ));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    assert_eq!(writes(&step), 0);
    assert!(stops(&step));
}

#[test]
fn a_reexamination_before_the_snapshot_starts_nothing() {
    let mut g = Gate::new(cfg());
    let step = g.feed(Input::reexamine(gated_node(), vec![], vec![]));
    assert!(step.events.is_empty());
    assert!(g.state.node.is_none());
}
