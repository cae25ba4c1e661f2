//! The journal as a trace: its events as JSON, and inputs that change
//! nothing.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{Event, Input, NodeEvent, PatchOutcome, decide};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::member::MemberId;

#[test]
fn events_read_well_as_json() {
    let ev = Event::MemberReady {
        member: ds_member("cilium"),
        pod: "cilium-x7f".into(),
    };
    assert_eq!(
        serde_json::to_string(&ev).unwrap(),
        r#"{"member_ready":{"member":"kube-system/cilium","pod":"cilium-x7f"}}"#
    );
    let ev = Event::MemberWaiting {
        member: MemberId::Critical("kube-proxy".into()),
        why: "no pod yet".into(),
        available_at: None,
    };
    assert_eq!(
        serde_json::to_string(&ev).unwrap(),
        r#"{"member_waiting":{"member":"critical:kube-proxy","why":"no pod yet"}}"#
    );
    let back: Event = serde_json::from_str(&serde_json::to_string(&ev).unwrap()).unwrap();
    assert_eq!(back, ev);
}

#[test]
fn kubernetes_events_carry_their_type_under_type() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::Applied));
    let json = serde_json::to_value(recorded(&step)[0]).unwrap();
    assert_eq!(json["type"], "Normal");
    assert_eq!(json["reason"], "GateOpened");
    // The answer to this replica's own write says so, and reads back so.
    assert_eq!(json["own_write"], true);
    let back: NodeEvent = serde_json::from_value(json).unwrap();
    assert_eq!(&back, recorded(&step)[0]);
}

#[test]
fn a_deleted_pod_makes_its_member_wait_again() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("csi"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b],
        vec![ready_pod("cilium-1", &a)],
    );
    let step = g.at(2).feed(Input::PodDeleted {
        uid: "uid-cilium-1".into(),
    });
    assert!(has_event(
        &step,
        |e| matches!(e, Event::PodRemoved { pod, .. } if pod == "kube-system/cilium-1")
    ));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberWaiting { member, why, .. }
        if *member == ds_member("cilium") && why == "no pod yet")
    ));
}

#[test]
fn inputs_before_the_snapshot_are_ignored() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    for input in [
        Input::NodeChanged(gated_node().into()),
        Input::daemonset_upserted(a.clone()),
        Input::pod_upserted(ready_pod("cilium-1", &a)),
        Input::LeadershipGained,
    ] {
        assert!(g.feed(input).events.is_empty());
    }
}

#[test]
fn repeating_an_input_changes_nothing() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("csi"));
    let mut g = Gate::new(cfg());
    let snapshot = Input::snapshot(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    g.at(1).feed(snapshot.clone());
    for input in [
        snapshot,
        Input::NodeChanged(gated_node().into()),
        Input::daemonset_upserted(b.clone()),
        Input::pod_upserted(ready_pod("cilium-1", &a)),
        Input::PodDeleted {
            uid: "never-seen".into(),
        },
    ] {
        let events = decide(&g.state, &input, &g.cfg, ts(2));
        assert!(events.is_empty(), "{input:?} gave {events:?}");
    }
}

#[test]
fn a_snapshot_listing_an_object_twice_is_still_unchanged_when_repeated() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let pod = ready_pod("cilium-1", &a);
    let snapshot = Input::snapshot(
        gated_node(),
        vec![a.clone(), a.clone()],
        vec![pod.clone(), pod],
    );
    g.at(1).feed(snapshot.clone());
    assert_eq!(g.state.pods.len(), 1);
    assert!(decide(&g.state, &snapshot, &g.cfg, ts(1)).is_empty());
}

#[test]
fn a_status_only_node_update_is_journalled_briefly() {
    let mut g = Gate::new(cfg());
    g.at(1)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let mut n = gated_node();
    n.resource_version = "42".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert_eq!(
        step.events,
        vec![Event::NodeVersionChanged {
            resource_version: "42".into()
        }]
    );
}

#[test]
fn a_bounded_journal_still_replays_to_the_live_state() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg()).with_journal(nodegate_core::gate::journal::Journal::new(3));
    g.at(1)
        .start(gated_node(), vec![a.clone(), tolerant_ds("csi")], vec![]);
    for i in 0..20 {
        let pod = if i % 2 == 0 {
            ready_pod("cilium-1", &a)
        } else {
            unready_pod("cilium-1", &a)
        };
        g.at(2 + i).feed(Input::pod_upserted(pod));
    }
    assert_eq!(g.journal.len(), 3);
    assert!(g.journal.dropped() > 0);
    // (the harness has checked replay == live after every input)
}

#[test]
fn a_status_change_keeps_the_indexed_pod_itself_not_a_copy() {
    let agent = tolerant_ds("agent");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![agent.clone()],
        vec![unready_pod("agent-x1", &agent)],
    );
    let indexed = std::sync::Arc::new(ready_pod("agent-x1", &agent));
    let step = g
        .at(3)
        .feed(Input::PodUpserted(std::sync::Arc::clone(&indexed)));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::PodStatusChanged { .. }
    )));
    assert!(std::sync::Arc::ptr_eq(
        &g.state.pods["uid-agent-x1"],
        &indexed
    ));
}
