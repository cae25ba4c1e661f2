//! The node's own readiness (semantics.md §5.1): a gate opens by readiness only
//! while the node's Ready condition is True and it carries neither
//! `node.kubernetes.io/not-ready` nor `node.kubernetes.io/unreachable`. When a
//! node stops answering, the node lifecycle controller first writes the node
//! (Ready=Unknown) and only then marks its pods NotReady: a gate that took
//! that node write for a status update would open the node in between.

use crate::gate_support::*;
use nodegate_core::gate::{
    Effect, Event, EventType, Input, NODE_NOT_READY, OpenedBy, PatchOutcome, Phase, TimerKind,
};
use nodegate_core::testutil::taint;
use nodegate_core::vocab::config::OnTimeout;
use nodegate_core::vocab::model::{NodeInfo, NodeReady, Taint};

/// The gated node at `version`, its Ready condition `ready`.
fn gated_at(ready: NodeReady, version: &str) -> NodeInfo {
    let mut n = gated_node();
    n.ready = ready;
    n.resource_version = version.into();
    n
}

#[test]
fn all_members_ready_on_a_node_whose_ready_condition_is_unknown_does_not_open() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_at(NodeReady::Unknown, "1"),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert!(g.state.all_ready());
    assert!(patches(&step).is_empty(), "the node is not Ready");
    assert_eq!(g.state.phase, Phase::Waiting);
    assert!(!g.state.may_open_by_ready());
    assert_eq!(
        g.state.node_wait_reason().as_deref(),
        Some("the node is not Ready (its Ready condition is Unknown)")
    );

    let step = g
        .at(2)
        .feed(Input::NodeChanged(gated_at(NodeReady::False, "2").into()));
    assert!(patches(&step).is_empty(), "the node is still not Ready");

    // Ready again: the gate opens, testing the version that says so.
    let step = g
        .at(5)
        .feed(Input::NodeChanged(gated_at(NodeReady::True, "3").into()));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
    assert_eq!(p[0].resource_version, "3");
    g.at(6).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
}

#[test]
fn the_node_write_that_comes_before_its_pods_go_not_ready_does_not_open_it() {
    // The benchmarks' premature opening: one member is still starting when
    // the node stops answering. The lifecycle controller writes the node
    // (Ready=Unknown) first; the last pod turns Ready before the controller
    // gets to marking the pods NotReady.
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("csi"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a), pending_pod("csi-1", &b)],
    );
    let step = g
        .at(2)
        .feed(Input::NodeChanged(gated_at(NodeReady::Unknown, "2").into()));
    assert!(patches(&step).is_empty());
    let step = g.at(3).feed(Input::pod_upserted(ready_pod("csi-1", &b)));
    assert!(g.state.all_ready());
    assert!(
        patches(&step).is_empty(),
        "opened a node whose Ready condition is Unknown"
    );
}

#[test]
fn an_untaint_in_flight_is_withdrawn_when_the_node_goes_not_ready() {
    let (mut g, _, step) = ready_cilium_gate();
    assert_eq!(patches(&step).len(), 1);
    let step = g
        .at(2)
        .feed(Input::NodeChanged(gated_at(NodeReady::Unknown, "2").into()));
    assert!(step.effects.contains(&Effect::WithdrawWrite));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WithdrawRequested { reason, .. } if reason.contains("the node is not Ready")
    )));
}

#[test]
fn a_conflict_whose_re_read_shows_the_node_not_ready_abandons_the_opening() {
    let (mut g, _, _) = ready_cilium_gate();
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::Conflict));
    assert_eq!(step.effects, vec![Effect::RefreshNode]);
    let step = g.at(3).feed(Input::NodeRefreshed(Ok(Some(gated_at(
        NodeReady::Unknown,
        "2",
    )))));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WriteAbandoned { reason } if reason.contains("the node is not Ready")
    )));
    assert_eq!(writes(&step), 0);
    assert!(
        !step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::ScheduleRetry { .. }))
    );
    assert_eq!(g.state.phase, Phase::Waiting);
}

#[test]
fn the_not_ready_and_unreachable_taints_keep_a_node_closed_whatever_its_condition() {
    let taints: [Taint; 3] = [
        taint("node.kubernetes.io/not-ready", "NoSchedule"),
        taint("node.kubernetes.io/not-ready", "NoExecute"),
        taint("node.kubernetes.io/unreachable", "NoExecute"),
    ];
    for t in taints {
        let a = tolerant_ds("cilium");
        let mut g = Gate::new(cfg());
        let mut n = gated_node();
        n.taints.push(t.clone());
        let step = g
            .at(1)
            .start(n, vec![a.clone()], vec![ready_pod("cilium-1", &a)]);
        assert!(patches(&step).is_empty(), "opened a node tainted {t}");
        assert_eq!(
            g.state.node_wait_reason(),
            Some(format!("the node is not Ready (it carries {t})"))
        );
        let step = g
            .at(2)
            .feed(Input::NodeChanged(gated_at(NodeReady::True, "2").into()));
        assert_eq!(patches(&step).len(), 1, "{t} lifted: the node opens");
    }
}

#[test]
fn at_the_deadline_a_node_that_is_not_ready_opens_by_timeout() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(10).start(
        gated_at(NodeReady::Unknown, "1"),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert!(patches(&step).is_empty());
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert!(has_event(&step, |e| matches!(
        e,
        Event::TimedOut {
            action: OnTimeout::Open,
            not_ready,
            node_not_ready: Some(why),
            ..
        } if not_ready.is_empty() && why.starts_with(NODE_NOT_READY)
    )));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);

    let step = g.at(121).feed(Input::PatchResult(PatchOutcome::Applied));
    // The Warning says why.
    let ev = assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &["the node is not Ready"],
    );
    assert!(
        ev.note.ends_with(
            "the node is not Ready (its Ready condition is Unknown); the 1 expected member is Ready"
        ),
        "{}",
        ev.note
    );
    assert_eq!(
        g.state.opened.as_ref().map(|o| o.opened_by),
        Some(OpenedBy::Timeout)
    );
}

#[test]
fn on_timeout_keep_opens_by_readiness_only_once_the_node_is_ready() {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Keep;
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(c);
    g.at(10).start(
        gated_at(NodeReady::False, "1"),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(g.state.phase, Phase::TimedOutKept);
    assert!(patches(&step).is_empty());
    g.at(121).feed(Input::MarkResult(PatchOutcome::Applied));
    let step = g
        .at(300)
        .feed(Input::NodeChanged(gated_at(NodeReady::True, "3").into()));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}
