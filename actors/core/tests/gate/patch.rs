//! The patch protocol: one conditional patch, conflicts and re-reads, 404s,
//! leadership, retries, one write in flight.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::deadline::armed_deadline;
use crate::gate_support::*;
use nodegate_core::gate::{
    Effect, Event, Input, OpenedBy, PatchOutcome, Phase, StopReason, TimerKind, WriteStatus,
};
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::testutil::{taint, taint_v};
use nodegate_core::vocab::config::OnTimeout;

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
    let (mut g, a, _) = ready_cilium_gate();
    let mut n = gated_node();
    n.resource_version = "2".into();
    let step = g.at(2).feed(Input::NodeChanged(n.into()));
    assert_eq!(writes(&step), 0);
    let step = g.at(2).feed(Input::pod_upserted(ready_pod("cilium-2", &a)));
    assert_eq!(writes(&step), 0);
}
