//! Every transition of the pure gate, one behaviour per test, with explicit
//! time and no sleeping. The harness checks after every input that replaying
//! the journal gives the live state.

mod gate_support;

use gate_support::*;
use nodegate_core::gate::{
    Effect, Event, EventType, Expectation, Input, MemberId, OnTimeout, OpenedBy, PatchOutcome,
    Phase, Readiness, Step, StopReason, TimerKind, WriteStatus, decide,
};
use nodegate_core::model::PodInfo;
use nodegate_core::placement::ManagedTaint;
use nodegate_core::readiness::CriticalPodEntry;
use nodegate_core::selector::LabelSelector;
use nodegate_core::testutil::{labels, taint, taint_v, ts};

fn ds_member(name: &str) -> MemberId {
    MemberId::DaemonSet(format!("kube-system/{name}"))
}

// --- opening ---------------------------------------------------------------

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
    let ev = recorded(&step);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].type_, ev[0].reason.as_str()),
        (EventType::Normal, "GateOpened")
    );
    assert!(
        ev[0].note.contains("all 2 expected members Ready"),
        "{}",
        ev[0].note
    );
    assert!(
        ev[0].note.contains("6.0s after the gate started"),
        "{}",
        ev[0].note
    );
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
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
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
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
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
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
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

// --- the expected set --------------------------------------------------------

#[test]
fn daemonset_added_mid_wait_must_now_be_waited_for() {
    let a = tolerant_ds("cilium");
    let b = tolerant_ds("ebs-csi");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );

    let step = g.at(2).feed(Input::daemonset_upserted(b.clone()));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberExpected { member } if *member == ds_member("ebs-csi"))
    ));

    let step = g.at(3).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert!(patches(&step).is_empty(), "ebs-csi has no pod yet");

    let step = g
        .at(4)
        .feed(Input::pod_upserted(ready_pod("ebs-csi-1", &b)));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn pod_seen_before_its_daemonset_counts_once_the_daemonset_arrives() {
    let a = tolerant_ds("cilium");
    let b = tolerant_ds("ebs-csi");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a), ready_pod("ebs-csi-1", &b)],
    );
    g.at(2).feed(Input::daemonset_upserted(b.clone()));
    assert_eq!(
        g.state.members[&ds_member("ebs-csi")].readiness,
        Some(Readiness::Ready {
            pod: "ebs-csi-1".into()
        })
    );
}

#[test]
fn daemonset_deleted_mid_wait_opens_if_it_was_the_last_blocker() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("broken"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert_eq!(g.state.blockers().len(), 1);

    let step = g.at(2).feed(Input::DaemonSetDeleted { uid: b.uid.clone() });
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberRemoved { member } if *member == ds_member("broken"))
    ));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn daemonset_deleted_with_an_unknown_uid_changes_nothing() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![a.clone()], vec![]);
    // The old object of a recreated DaemonSet: same name, another uid.
    let step = g.at(2).feed(Input::DaemonSetDeleted {
        uid: "uid-of-an-older-cilium".into(),
    });
    assert!(step.events.is_empty());
}

#[test]
fn daemonset_changed_to_select_other_nodes_stops_being_waited_for() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("agent"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    let mut b2 = b.clone();
    b2.template
        .node_selector
        .insert("role".into(), "gpu".into());
    let step = g.at(2).feed(Input::daemonset_upserted(b2));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberNotExpected { member, .. } if *member == ds_member("agent"))
    ));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn node_relabelled_so_a_daemonset_starts_being_expected() {
    let (a, gpu) = (tolerant_ds("cilium"), gpu_ds("nvidia"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), gpu.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    assert!(!g.state.members[&ds_member("nvidia")].is_expected());

    let mut relabelled = gated_node();
    relabelled.resource_version = "2".into();
    relabelled.labels.insert("role".into(), "gpu".into());
    let step = g.at(2).feed(Input::NodeChanged(relabelled.into()));
    assert!(has_event(&step, |e| matches!(e, Event::NodeUpdated { .. })));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberExpected { member } if *member == ds_member("nvidia"))
    ));

    let step = g.at(3).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert!(
        patches(&step).is_empty(),
        "nvidia is now expected and has no pod"
    );
    let step = g
        .at(4)
        .feed(Input::pod_upserted(ready_pod("nvidia-1", &gpu)));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].resource_version, "2");
}

#[test]
fn node_relabelled_so_a_daemonset_stops_being_expected_opens_the_gate() {
    let (a, gpu) = (tolerant_ds("cilium"), gpu_ds("nvidia"));
    let mut n = gated_node();
    n.labels.insert("role".into(), "gpu".into());
    let mut g = Gate::new(cfg());
    g.at(1).start(
        n.clone(),
        vec![a.clone(), gpu.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert_eq!(g.state.blockers()[0].member, ds_member("nvidia"));

    n.labels.remove("role");
    n.resource_version = "2".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert!(has_event(
        &step,
        |e| matches!(e, Event::MemberNotExpected { member, .. } if *member == ds_member("nvidia"))
    ));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn daemonset_not_tolerating_the_managed_taint_is_not_waited_for() {
    let (a, late) = (tolerant_ds("cilium"), intolerant_ds("web-agent"));
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone(), late],
        vec![ready_pod("cilium-1", &a)],
    );
    let member = &g.state.members[&ds_member("web-agent")];
    match &member.expectation {
        Expectation::NotExpected { reason, .. } => {
            assert!(reason.contains(MANAGED_KEY), "{reason}")
        }
        other => panic!("expected not expected, got {other:?}"),
    }
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_transient_taint_does_not_keep_a_daemonset_from_being_expected() {
    let plain = intolerant_ds("needs-plain-node");
    let mut g = Gate::new(cfg());
    // Only the managed taint blocks it; not-ready is lifted by someone else.
    let n = node(vec![
        taint("node.kubernetes.io/not-ready", "NoSchedule"),
        taint("example.com/dedicated", "NoSchedule"),
    ]);
    let mut n = n;
    n.taints.push(managed());
    g.at(1).start(n, vec![plain], vec![]);
    match &g.state.members[&ds_member("needs-plain-node")].expectation {
        Expectation::NotExpected { reason, .. } => {
            assert!(reason.contains("example.com/dedicated"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn critical_pod_entry_is_waited_for_on_matching_nodes() {
    let mut c = cfg();
    c.critical.push(CriticalPodEntry {
        name: "kube-proxy".into(),
        namespace: "kube-system".into(),
        selector: LabelSelector {
            match_labels: labels(&[("k8s-app", "kube-proxy")]),
            ..Default::default()
        },
        node_selector: None,
    });
    c.critical.push(CriticalPodEntry {
        name: "gpu-only".into(),
        namespace: "kube-system".into(),
        selector: LabelSelector {
            match_labels: labels(&[("app", "x")]),
            ..Default::default()
        },
        node_selector: Some(LabelSelector {
            match_labels: labels(&[("role", "gpu")]),
            ..Default::default()
        }),
    });
    let mut g = Gate::new(c);
    let step = g.at(1).start(gated_node(), vec![], vec![]);
    assert!(patches(&step).is_empty());
    assert_eq!(
        g.state.blockers()[0].member,
        MemberId::Critical("kube-proxy".into())
    );
    assert!(!g.state.members[&MemberId::Critical("gpu-only".into())].is_expected());

    let mut proxy = nodegate_core::testutil::mk_pod("kube-proxy-abc", NODE, "uid-node-a");
    proxy.labels = labels(&[("k8s-app", "kube-proxy")]);
    let step = g.at(2).feed(Input::pod_upserted(proxy));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn pods_on_other_nodes_are_ignored() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let elsewhere = nodegate_core::testutil::mk_pod("cilium-other", "node-b", &a.uid);
    g.at(1)
        .start(gated_node(), vec![a.clone()], vec![elsewhere.clone()]);
    assert!(g.state.pods.is_empty());
    let step = g.at(2).feed(Input::pod_upserted(elsewhere));
    assert!(step.events.is_empty());
}

// --- deadline ----------------------------------------------------------------

#[test]
fn deadline_is_creation_plus_timeout_and_fires_through_a_keyed_timer() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("broken"));
    let mut g = Gate::new(cfg());
    let step = g.at(10).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert!(
        step.effects.contains(&Effect::ScheduleTimer {
            kind: TimerKind::Deadline,
            at: ts(120),
            generation: 1
        }),
        "{:?}",
        step.effects
    );

    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert!(has_event(&step, |e| matches!(
        e,
        Event::TimedOut {
            action: OnTimeout::Open,
            ..
        }
    )));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);
    assert!(recorded(&step).is_empty(), "the Warning follows the write");

    let step = g.at(121).feed(Input::PatchResult(PatchOutcome::Applied));
    let ev = recorded(&step);
    assert_eq!(ev.len(), 1);
    assert_eq!(
        (ev[0].type_, ev[0].reason.as_str()),
        (EventType::Warning, "GateTimedOut")
    );
    assert!(
        ev[0].note.contains("kube-system/broken (no pod"),
        "{}",
        ev[0].note
    );
    assert!(
        ev[0].note.contains("1 of 2 expected members not Ready"),
        "{}",
        ev[0].note
    );
    assert_eq!(
        g.state.opened.as_ref().map(|o| o.opened_by),
        Some(OpenedBy::Timeout)
    );
}

#[test]
fn restart_past_the_deadline_decides_at_once() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(cfg());
    // A fresh gate (a restarted process) sees the node long after creation.
    let step = g.at(500).start(gated_node(), vec![b], vec![]);
    assert!(has_event(
        &step,
        |e| matches!(e, Event::TimedOut { deadline, .. } if *deadline == ts(120))
    ));
    assert_eq!(patches(&step).len(), 1);
    assert!(
        !step.effects.iter().any(|e| matches!(
            e,
            Effect::ScheduleTimer {
                kind: TimerKind::Deadline,
                ..
            }
        )),
        "no timer for a deadline already decided"
    );
}

#[test]
fn restart_before_the_deadline_keeps_the_original_deadline() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(cfg());
    let step = g.at(100).start(gated_node(), vec![b], vec![]);
    assert!(step.effects.contains(&Effect::ScheduleTimer {
        kind: TimerKind::Deadline,
        at: ts(120),
        generation: 1
    }));
    assert!(patches(&step).is_empty());
}

#[test]
fn regated_node_counts_its_deadline_from_gated_since() {
    let b = tolerant_ds("broken");
    let mut n = gated_node();
    n.gated_since = Some(ts(1000));
    let mut g = Gate::new(cfg());
    let step = g.at(1050).start(n, vec![b], vec![]);
    assert!(step.effects.contains(&Effect::ScheduleTimer {
        kind: TimerKind::Deadline,
        at: ts(1120),
        generation: 1
    }));
    assert!(patches(&step).is_empty());
}

#[test]
fn no_deadline_when_timeout_is_none() {
    let mut c = cfg();
    c.timeout = None;
    let mut g = Gate::new(c);
    let step = g
        .at(1_000_000)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    assert!(
        step.events
            .iter()
            .all(|e| !matches!(e, Event::DeadlineSet { .. } | Event::TimedOut { .. }))
    );
    assert!(patches(&step).is_empty());
}

#[test]
fn stale_timer_generation_is_ignored() {
    let mut g = Gate::new(cfg());
    g.at(10)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    for generation in [0, 2, 99] {
        let step = g.at(500).feed(Input::TimerFired {
            kind: TimerKind::Deadline,
            generation,
        });
        assert!(step.events.is_empty(), "generation {generation}");
    }
    let step = g.at(500).feed(Input::TimerFired {
        kind: TimerKind::Recheck,
        generation: 7,
    });
    assert!(step.events.is_empty());
}

#[test]
fn a_deadline_timer_that_fires_early_is_rearmed() {
    let mut g = Gate::new(cfg());
    g.at(10)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g.at(119).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert!(step.effects.contains(&Effect::ScheduleTimer {
        kind: TimerKind::Deadline,
        at: ts(120),
        generation: 2
    }));
    assert!(patches(&step).is_empty());
    // The first timer is now stale.
    assert!(
        g.at(130)
            .feed(Input::TimerFired {
                kind: TimerKind::Deadline,
                generation: 1
            })
            .events
            .is_empty()
    );
    assert_eq!(
        patches(&g.at(130).feed(Input::TimerFired {
            kind: TimerKind::Deadline,
            generation: 2
        }))
        .len(),
        1
    );
}

/// The deadline timer the shell holds after `steps`, as the node actor keeps
/// it: the last one scheduled replaces any earlier one.
fn armed_deadline<'a>(steps: impl IntoIterator<Item = &'a Step>) -> Option<(jiff::Timestamp, u64)> {
    steps
        .into_iter()
        .flat_map(|s| &s.effects)
        .filter_map(|e| match e {
            Effect::ScheduleTimer {
                kind: TimerKind::Deadline,
                at,
                generation,
            } => Some((*at, *generation)),
            _ => None,
        })
        .last()
}

#[test]
fn a_gate_that_opens_in_its_first_step_still_arms_its_deadline() {
    // A follower or a restarted process finds every member Ready at once;
    // the untaint it sends is then withdrawn, and the member never recovers.
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let mut steps = vec![g.at(10).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    )];
    assert_eq!(patches(&steps[0]).len(), 1);
    steps.push(
        g.at(20)
            .feed(Input::pod_upserted(unready_pod("cilium-1", &a))),
    );
    steps.push(g.at(21).feed(Input::PatchResult(PatchOutcome::Withdrawn)));
    assert_eq!(g.state.phase, Phase::Waiting);

    let (at, generation) = armed_deadline(&steps).expect("no deadline timer was ever armed");
    assert_eq!(at, ts(120));
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation,
    });
    assert!(has_event(&step, |e| matches!(e, Event::TimedOut { .. })));
    assert_eq!(
        patches(&step).first().map(|p| p.opened_by),
        Some(OpenedBy::Timeout)
    );
}

#[test]
fn a_deadline_that_moves_while_an_untaint_is_out_is_armed_again() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let mut steps = vec![g.at(10).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    )];
    // Re-gated meanwhile: the deadline moves to 50 + 120 s.
    let mut regated = gated_node();
    regated.gated_since = Some(ts(50));
    steps.push(g.at(60).feed(Input::NodeChanged(regated.into())));
    assert_eq!(g.state.phase, Phase::Opening);
    // The retry backs off, and the member stops being Ready meanwhile.
    steps.push(g.at(61).feed(Input::PatchResult(PatchOutcome::Failed(
        "etcd timeout".into(),
    ))));
    steps.push(
        g.at(62)
            .feed(Input::pod_upserted(unready_pod("cilium-1", &a))),
    );
    assert_eq!(g.state.phase, Phase::Waiting);

    let (at, generation) = armed_deadline(&steps).expect("no deadline timer was ever armed");
    assert_eq!(at, ts(170), "the moved deadline");
    let step = g.at(170).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation,
    });
    assert!(has_event(&step, |e| matches!(e, Event::TimedOut { .. })));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn on_timeout_keep_marks_the_node_and_keeps_the_taint_until_members_are_ready() {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Keep;
    let b = tolerant_ds("broken");
    let mut g = Gate::new(c);
    g.at(10).start(gated_node(), vec![b.clone()], vec![]);
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(g.state.phase, Phase::TimedOutKept);
    assert!(patches(&step).is_empty());
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::MarkTimedOut(m) if m.deadline == ts(120)))
    );

    let step = g.at(121).feed(Input::MarkResult(PatchOutcome::Applied));
    assert!(g.state.timeout_marked);
    let ev = recorded(&step);
    assert_eq!(
        (ev[0].type_, ev[0].reason.as_str()),
        (EventType::Warning, "GateTimedOut")
    );
    assert!(
        ev[0].note.contains("kept closed") && ev[0].note.contains("kube-system/broken"),
        "{}",
        ev[0].note
    );

    let step = g
        .at(300)
        .feed(Input::pod_upserted(ready_pod("broken-1", &b)));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}

#[test]
fn on_timeout_keep_retries_a_failed_mark_and_waits_for_leadership() {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Keep;
    let mut g = Gate::new(c);
    g.at(200)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g
        .at(201)
        .feed(Input::MarkResult(PatchOutcome::Failed("boom".into())));
    assert!(step.effects.contains(&Effect::ScheduleRetry { attempt: 2 }));
    let step = g.at(202).feed(Input::TimerFired {
        kind: TimerKind::Retry,
        generation: 2,
    });
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::MarkTimedOut(_)))
    );
    g.at(203).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let step = g.at(204).feed(Input::LeadershipGained);
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::MarkTimedOut(_)))
    );
}

// --- minReadySeconds ---------------------------------------------------------

#[test]
fn min_ready_seconds_schedules_a_recheck_instead_of_polling() {
    let mut a = tolerant_ds("cilium");
    a.min_ready_seconds = 10;
    let pod = PodInfo {
        ready_since: Some(ts(5)),
        ..ready_pod("cilium-1", &a)
    };
    let mut g = Gate::new(cfg());
    let step = g.at(6).start(gated_node(), vec![a.clone()], vec![pod]);
    assert!(patches(&step).is_empty());
    assert!(step.effects.contains(&Effect::ScheduleTimer {
        kind: TimerKind::Recheck,
        at: ts(15),
        generation: 1
    }));

    // Unrelated inputs before then neither open nor re-arm the recheck.
    let step = g.at(8).feed(Input::LeadershipGained);
    assert!(step.events.is_empty());

    let step = g.at(15).feed(Input::TimerFired {
        kind: TimerKind::Recheck,
        generation: 1,
    });
    assert!(has_event(&step, |e| matches!(e, Event::MemberReady { .. })));
    assert_eq!(patches(&step).len(), 1);
}

// --- the patch protocol ------------------------------------------------------

#[test]
fn foreign_taints_are_never_in_the_patch() {
    let n = node(vec![
        taint("example.com/dedicated", "NoSchedule"),
        managed(),
        taint_v("example.com/maintenance", "yes", "NoExecute"),
        taint(MANAGED_KEY, "NoExecute"), // same key, other effect: not ours
    ]);
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(n, vec![], vec![]);
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].taints.len(), 1);
    assert_eq!(
        (p[0].taints[0].index, &p[0].taints[0].taint),
        (1, &managed())
    );
}

#[test]
fn multiple_managed_taints_go_in_one_patch_highest_index_first() {
    let mut c = cfg();
    c.placement
        .managed_taints
        .push(ManagedTaint::new("example.com/regate", "NoExecute"));
    let n = node(vec![
        taint("other/a", "NoSchedule"),
        managed(),
        taint("other/b", "PreferNoSchedule"),
        taint("example.com/regate", "NoExecute"),
    ]);
    let mut g = Gate::new(c);
    let step = g.at(1).start(n.clone(), vec![], vec![]);
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    let got: Vec<(usize, String)> = p[0]
        .taints
        .iter()
        .map(|t| (t.index, t.taint.to_string()))
        .collect();
    assert_eq!(
        got,
        vec![
            (3, "example.com/regate:NoExecute".to_string()),
            (1, format!("{MANAGED_KEY}:NoSchedule"))
        ]
    );
    for t in &p[0].taints {
        assert_eq!(n.taints[t.index], t.taint);
    }
}

#[test]
fn conflict_then_refresh_then_success() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::Conflict));
    assert_eq!(step.effects, vec![Effect::RefreshNode]);

    // Another writer added a taint in front of ours meanwhile.
    let mut fresh = node(vec![taint("example.com/new", "NoSchedule"), managed()]);
    fresh.resource_version = "7".into();
    let step = g.at(3).feed(Input::NodeRefreshed(Ok(Some(fresh))));
    assert_eq!(step.effects, vec![Effect::ScheduleRetry { attempt: 2 }]);

    let step = g.at(4).feed(Input::TimerFired {
        kind: TimerKind::Retry,
        generation: 2,
    });
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].resource_version, "7");
    assert_eq!(
        (p[0].taints[0].index, &p[0].taints[0].taint),
        (1, &managed())
    );

    let step = g.at(5).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
    assert_eq!(
        g.state.opened.as_ref().map(|o| o.resource_version.as_str()),
        Some("7")
    );
    assert!(stops(&step));
}

#[test]
fn conflict_where_the_refresh_shows_the_taint_gone_stops() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    g.at(2).feed(Input::PatchResult(PatchOutcome::Conflict));
    let mut fresh = node(vec![]);
    fresh.resource_version = "8".into();
    let step = g.at(3).feed(Input::NodeRefreshed(Ok(Some(fresh))));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    assert_eq!(g.state.phase, Phase::Gone);
    assert!(stops(&step));
    assert_eq!(writes(&step), 0);
}

#[test]
fn conflict_where_the_refresh_shows_new_labels_re_decides() {
    let (a, gpu) = (tolerant_ds("cilium"), gpu_ds("nvidia"));
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone(), gpu],
        vec![ready_pod("cilium-1", &a)],
    );
    g.at(2).feed(Input::PatchResult(PatchOutcome::Conflict));
    let mut fresh = gated_node();
    fresh.resource_version = "9".into();
    fresh.labels.insert("role".into(), "gpu".into());
    let step = g.at(3).feed(Input::NodeRefreshed(Ok(Some(fresh))));
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WriteAbandoned { .. }
    )));
    assert_eq!(g.state.phase, Phase::Waiting);
    assert!(
        step.effects
            .iter()
            .all(|e| !matches!(e, Effect::ScheduleRetry { .. }))
    );
}

#[test]
fn refresh_failure_retries_with_backoff() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    g.at(2).feed(Input::PatchResult(PatchOutcome::Conflict));
    let step = g
        .at(3)
        .feed(Input::NodeRefreshed(Err("connection reset".into())));
    assert_eq!(step.effects, vec![Effect::ScheduleRetry { attempt: 2 }]);
    assert!(
        g.state
            .write
            .as_ref()
            .and_then(|w| w.last_error.as_deref())
            .is_some_and(|e| e.contains("reset"))
    );
}

#[test]
fn not_found_on_the_patch_stops() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::NotFound));
    assert_eq!(g.state.stopped, Some(StopReason::NodeNotFound));
    assert!(stops(&step));
}

#[test]
fn not_found_on_the_refresh_stops() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    g.at(2).feed(Input::PatchResult(PatchOutcome::Conflict));
    let step = g.at(3).feed(Input::NodeRefreshed(Ok(None)));
    assert_eq!(g.state.stopped, Some(StopReason::NodeNotFound));
    assert!(stops(&step));
}

#[test]
fn node_deleted_mid_wait_stops() {
    let mut g = Gate::new(cfg());
    g.at(1)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g.at(2).feed(Input::NodeDeleted);
    assert_eq!(g.state.stopped, Some(StopReason::NodeDeleted));
    assert_eq!(
        step.effects,
        vec![Effect::Stop(StopReason::NodeDeleted.into())]
    );
    // Nothing moves a finished gate.
    assert!(
        g.at(3)
            .feed(Input::TimerFired {
                kind: TimerKind::Deadline,
                generation: 1
            })
            .events
            .is_empty()
    );
}

#[test]
fn managed_taint_removed_by_someone_else_stops() {
    let mut g = Gate::new(cfg());
    g.at(1)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let mut n = node(vec![]);
    n.resource_version = "2".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    assert!(stops(&step));
}

#[test]
fn our_own_removal_seen_in_the_watch_before_the_response_does_not_stop() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let mut n = node(vec![]);
    n.resource_version = "2".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert!(!stops(&step));
    assert!(
        matches!(step.events.as_slice(), [Event::NodeUpdated { .. }]),
        "nothing but the sighting: {:?}",
        step.events
    );
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
    assert_eq!(recorded(&step)[0].reason, "GateOpened");
    // The version our patch tested, not the one it produced.
    assert_eq!(
        g.state.opened.as_ref().map(|o| o.resource_version.as_str()),
        Some("1")
    );
}

#[test]
fn node_without_a_managed_taint_is_not_gated() {
    let mut g = Gate::new(cfg());
    let step = g
        .at(1)
        .start(node(vec![taint("other", "NoSchedule")]), vec![], vec![]);
    assert_eq!(g.state.stopped, Some(StopReason::NotGated));
    assert_eq!(writes(&step), 0);
    assert!(stops(&step));
}

#[test]
fn not_leader_defers_the_write_until_leadership_is_gained() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let step = g.at(2).feed(Input::PatchResult(PatchOutcome::NotLeader));
    assert!(step.effects.is_empty());
    assert_eq!(
        g.state.write.as_ref().map(|w| w.status),
        Some(WriteStatus::AwaitingLeader)
    );
    let step = g.at(30).feed(Input::LeadershipGained);
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(g.state.write.as_ref().map(|w| w.attempt), Some(2));
}

/// The gate's own view again, as the periodic re-examination brings it.
fn reexamine_unchanged(g: &Gate) -> Input {
    Input::Reexamine {
        node: g.state.node.clone().expect("a started gate"),
        daemonsets: g.state.daemonsets.values().cloned().collect(),
        pods: g.state.pods.values().cloned().collect(),
    }
}

#[test]
fn a_write_refused_for_leadership_is_re_sent_on_the_periodic_reexamination() {
    // The elector renewed late and never said leadership came back: the
    // LeadershipGained this write waits for never comes.
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    g.at(2).feed(Input::PatchResult(PatchOutcome::NotLeader));
    let input = reexamine_unchanged(&g);
    let step = g.at(32).feed(input);
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
    assert_eq!(g.state.write.as_ref().map(|w| w.attempt), Some(2));
    // Refused again (still no lease): the next period tries again.
    g.at(33).feed(Input::PatchResult(PatchOutcome::NotLeader));
    let input = reexamine_unchanged(&g);
    assert_eq!(patches(&g.at(63).feed(input)).len(), 1);
    g.at(64).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
}

#[test]
fn an_opening_by_timeout_refused_for_leadership_is_re_sent_on_the_periodic_reexamination() {
    let mut g = Gate::new(cfg());
    g.at(200)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    g.at(201).feed(Input::PatchResult(PatchOutcome::NotLeader));
    let input = reexamine_unchanged(&g);
    let step = g.at(231).feed(input);
    assert_eq!(
        patches(&step).first().map(|p| p.opened_by),
        Some(OpenedBy::Timeout)
    );
}

#[test]
fn a_mark_refused_for_leadership_is_re_sent_on_the_periodic_reexamination() {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Keep;
    let mut g = Gate::new(c);
    g.at(200)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    g.at(201).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let input = reexamine_unchanged(&g);
    let step = g.at(231).feed(input);
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::MarkTimedOut(_))),
        "{:?}",
        step.events
    );
}

#[test]
fn the_deadline_re_sends_a_write_waiting_for_leadership() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let first = g.at(10).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    g.at(11).feed(Input::PatchResult(PatchOutcome::NotLeader));
    let (at, generation) = armed_deadline([&first]).expect("a deadline timer");
    let step = g.at(at.as_second()).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation,
    });
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}

#[test]
fn failed_write_retries_and_a_stale_retry_timer_is_ignored() {
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![], vec![]);
    let step = g
        .at(2)
        .feed(Input::PatchResult(PatchOutcome::Failed("503".into())));
    assert_eq!(step.effects, vec![Effect::ScheduleRetry { attempt: 2 }]);
    assert!(
        g.at(3)
            .feed(Input::TimerFired {
                kind: TimerKind::Retry,
                generation: 1
            })
            .events
            .is_empty()
    );
    assert_eq!(
        patches(&g.at(3).feed(Input::TimerFired {
            kind: TimerKind::Retry,
            generation: 2
        }))
        .len(),
        1
    );
    // A result that no write is waiting for changes nothing.
    g.at(4)
        .feed(Input::PatchResult(PatchOutcome::Failed("503".into())));
    let step = g.at(5).feed(Input::MarkResult(PatchOutcome::Applied));
    assert!(step.events.is_empty());
}

#[test]
fn only_one_write_is_in_flight_at_a_time() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    let mut n = gated_node();
    n.resource_version = "2".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert_eq!(writes(&step), 0);
    let step = g.at(2).feed(Input::pod_upserted(ready_pod("cilium-2", &a)));
    assert_eq!(writes(&step), 0);
}

// --- the periodic re-examination --------------------------------------------

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

// --- dry-run -----------------------------------------------------------------

#[test]
fn dry_run_decides_and_records_but_writes_nothing() {
    let mut c = cfg();
    c.dry_run = true;
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(c);
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    assert_eq!(writes(&step), 0);
    let step = g.at(4).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert_eq!(writes(&step), 0);
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WouldOpen {
            opened_by: OpenedBy::Ready,
            ..
        }
    )));
    assert_eq!(g.state.phase, Phase::WouldOpen);
    let ev = recorded(&step);
    assert_eq!(ev[0].reason, "GateWouldOpen");
    assert!(
        ev[0].note.starts_with("dry-run: would remove"),
        "{}",
        ev[0].note
    );
    assert!(
        !stops(&step),
        "a dry-run gate keeps watching so it is not restarted"
    );

    // It does not flip back and forth afterwards.
    g.at(5)
        .feed(Input::pod_upserted(unready_pod("cilium-1", &a)));
    let step = g.at(6).feed(Input::pod_upserted(ready_pod("cilium-1", &a)));
    assert!(!has_event(&step, |e| matches!(e, Event::WouldOpen { .. })));
}

#[test]
fn dry_run_timeout_writes_nothing_either_way() {
    for action in [OnTimeout::Open, OnTimeout::Keep] {
        let mut c = cfg();
        c.dry_run = true;
        c.on_timeout = action;
        let mut g = Gate::new(c);
        let step = g
            .at(500)
            .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
        assert_eq!(writes(&step), 0, "{action:?}");
        let ev = recorded(&step);
        assert_eq!(ev.len(), 1);
        assert_eq!(
            (ev[0].type_, ev[0].reason.as_str()),
            (EventType::Warning, "GateTimedOut")
        );
        assert!(ev[0].note.starts_with("dry-run:"), "{}", ev[0].note);
    }
}

// --- the journal as a trace ----------------------------------------------------

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
    let mut g = Gate::new(cfg()).with_journal(nodegate_core::journal::Journal::new(3));
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
