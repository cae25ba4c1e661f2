//! Opening: the gate opens when every expected member is Ready, and an
//! opening that no longer stands is abandoned or withdrawn.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{
    Effect, Event, EventType, Input, OpenedBy, PatchOutcome, Phase, TimerKind, WriteStatus,
};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::model::PodInfo;

#[test]
fn empty_expected_set_opens_at_once() {
    let mut g = Gate::new(cfg());
    let step = g.at(3).start(gated_node(), vec![], vec![]);
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
    assert_eq!(p[0].opened_at, ts(3));
    assert_eq!(p[0].resource_version, "1");
    assert_eq!(g.state.phase, Phase::Opening);
}

#[test]
fn opens_when_the_last_member_becomes_ready_and_not_before() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("fluent-bit"));
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-x7f", &a)],
    );
    assert!(patches(&step).is_empty());
    assert_eq!(g.state.blockers().len(), 1);
    assert_eq!(g.state.blockers()[0].member, ds_member("fluent-bit"));

    let step = g
        .at(2)
        .feed(Input::pod_upserted(unready_pod("fluent-bit-1", &b)));
    assert!(patches(&step).is_empty());

    let step = g
        .at(5)
        .feed(Input::pod_upserted(ready_pod("fluent-bit-1", &b)));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberReady { pod, .. } if pod == "fluent-bit-1")
    ));
    assert_eq!(patches(&step).len(), 1);

    let step = g.at(6).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
    let ev = assert_event(
        &step,
        EventType::Normal,
        "GateOpened",
        &[
            "all 2 expected members Ready",
            "6.0s after the gate started",
        ],
    );
    assert!(ev.own_write, "the answer to this replica's untaint");
    assert!(stops(&step));
    assert!(matches!(step.effects.last(), Some(Effect::Stop(_))));
}

#[test]
fn member_ready_then_not_ready_again_keeps_the_gate_closed() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("csi"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a), pending_pod("csi-1", &b)],
    );

    let step = g
        .at(2)
        .feed(Input::pod_upserted(unready_pod("cilium-1", &a)));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberWaiting { member, .. } if *member == ds_member("cilium"))
    ));

    let step = g.at(3).feed(Input::pod_upserted(ready_pod("csi-1", &b)));
    assert!(patches(&step).is_empty(), "cilium is not Ready any more");

    let step = g.at(4).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_terminating_pod_does_not_count_and_another_ready_pod_does() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let dying = PodInfo {
        terminating: true,
        ..ready_pod("cilium-old", &a)
    };
    let step = g.at(1).start(gated_node(), vec![a.clone()], vec![dying]);
    assert!(patches(&step).is_empty());
    let step = g
        .at(2)
        .feed(Input::pod_upserted(ready_pod("cilium-new", &a)));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_member_that_stops_being_ready_during_backoff_abandons_the_retry() {
    let (mut g, a, _) = ready_cilium_gate();
    g.at(2).feed(Input::PatchResult(PatchOutcome::Failed(
        "etcd timeout".into(),
    )));
    assert_eq!(
        g.state.write.as_ref().map(|w| w.status),
        Some(WriteStatus::Backoff)
    );

    let step = g
        .at(3)
        .feed(Input::pod_upserted(unready_pod("cilium-1", &a)));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WriteAbandoned { .. }
    )));
    assert_eq!(g.state.phase, Phase::Waiting);
    assert!(g.state.write.is_none());

    let step = g.at(4).feed(Input::TimerFired {
        kind: TimerKind::Retry,
        generation: 2,
    });
    assert!(step.events.is_empty(), "the retry was abandoned");

    let step = g.at(5).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert_eq!(patches(&step).len(), 1);
    assert_eq!(g.state.write.as_ref().map(|w| w.attempt), Some(1));
}

#[test]
fn in_flight_untaint_is_withdrawn_when_a_member_stops_being_ready() {
    let (mut g, a, step) = ready_cilium_gate();
    assert_eq!(patches(&step).len(), 1);

    // The node lifecycle controller marks the pod NotReady while the patch
    // waits for a slot: the gate asks for it back, once.
    let step = g
        .at(2)
        .feed(Input::pod_upserted(unready_pod("cilium-1", &a)));
    assert!(step.effects.contains(&Effect::WithdrawWrite));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WithdrawRequested { attempt: 1, reason } if reason.contains("kube-system/cilium")
    )));
    assert_eq!(g.state.phase, Phase::Opening);
    let mut pending = unready_pod("cilium-1", &a);
    pending.phase = "Pending".into();
    let step = g.at(3).feed(Input::pod_upserted(pending));
    assert!(
        !step.effects.contains(&Effect::WithdrawWrite),
        "asked twice"
    );

    // The executor had not sent it: the gate waits again, and opens with a
    // fresh attempt once the pod is Ready again.
    let step = g.at(4).feed(Input::PatchResult(PatchOutcome::Withdrawn));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WriteAbandoned { .. }
    )));
    assert_eq!(g.state.phase, Phase::Waiting);
    assert!(g.state.write.is_none());
    assert_eq!(writes(&step), 0);
    let step = g.at(5).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert_eq!(patches(&step).len(), 1);
    assert_eq!(g.state.write.as_ref().map(|w| w.attempt), Some(1));
    g.at(6).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
}

#[test]
fn withdrawn_too_late_the_untaint_still_opens_the_node() {
    let (mut g, a, _) = ready_cilium_gate();
    g.at(2)
        .feed(Input::pod_upserted(unready_pod("cilium-1", &a)));
    assert!(g.state.write.as_ref().is_some_and(|w| w.withdrawing));
    // Already sent when the request came: the API server applied it.
    let step = g.at(3).feed(Input::PatchResult(PatchOutcome::Applied));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::Opened {
            opened_by: OpenedBy::Ready,
            ..
        }
    )));
    assert!(stops(&step));
}

#[test]
fn an_untaint_by_timeout_is_never_withdrawn() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    let step = g.at(121).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(
        patches(&step).first().map(|p| p.opened_by),
        Some(OpenedBy::Timeout)
    );
    let mut pending = unready_pod("cilium-1", &a);
    pending.phase = "Pending".into();
    let step = g.at(122).feed(Input::pod_upserted(pending));
    assert!(!step.effects.contains(&Effect::WithdrawWrite));
    assert!(g.state.write.as_ref().is_some_and(|w| !w.withdrawing));
}
