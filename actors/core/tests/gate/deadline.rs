//! The deadline: creation (or `gated-since`) plus the timeout, on a keyed
//! timer; `--on-timeout open` and `keep`.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{
    Effect, Event, EventType, Input, OpenedBy, PatchOutcome, Phase, Step, TimerKind,
};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::config::OnTimeout;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo};

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
    let ev = assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &[
            "kube-system/broken (no pod",
            "1 of 2 expected members not Ready",
        ],
    );
    assert!(ev.own_write, "the answer to this replica's untaint");
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
pub(crate) fn armed_deadline<'a>(
    steps: impl IntoIterator<Item = &'a Step>,
) -> Option<(jiff::Timestamp, u64)> {
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
    let ev = assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &["kept closed", "kube-system/broken"],
    );
    assert!(ev.own_write, "the answer to this replica's mark");

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

/// A gate with `--on-timeout keep` on a node whose one member never got a
/// pod, started at 200 s, past its deadline (120 s): its mark is out.
fn kept_gate(b: &DaemonSetInfo) -> Gate {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Keep;
    let mut g = Gate::new(c);
    g.at(200).start(gated_node(), vec![b.clone()], vec![]);
    g
}

/// The gated node at `rv`, carrying the timeout mark of the deadline at
/// 120 s.
fn marked(rv: &str) -> NodeInfo {
    let mut n = gated_node();
    n.replace.timed_out = Some(ts(120));
    n.resource_version = rv.into();
    n
}

/// The mark the node shows was taken as another replica's: marked, with
/// no Event of this gate's.
fn assert_found(g: &Gate, step: &Step) {
    assert!(g.state.timeout_marked, "{:?}", step.events);
    assert!(has_event(step, |e| matches!(e, Event::MarkFound)));
    assert!(recorded(step).is_empty(), "{:?}", recorded(step));
}

/// The mark the node shows may be this gate's own: marked and reported,
/// as this replica's write.
fn assert_reported(g: &Gate, step: &Step) {
    assert!(g.state.timeout_marked, "{:?}", step.events);
    let ev = assert_event(step, EventType::Warning, "GateTimedOut", &["kept closed"]);
    assert!(ev.own_write);
}

/// A follower's mark waits for the lease while the leader writes the same
/// mark. Once the node shows it, the mark is done: when this replica leads
/// it writes no second mark and records no second `GateTimedOut`.
#[test]
fn on_timeout_keep_takes_the_mark_another_replica_wrote_as_done() {
    let mut g = kept_gate(&tolerant_ds("broken"));
    g.at(201).feed(Input::MarkResult(PatchOutcome::NotLeader));
    assert!(!g.state.timeout_marked);
    let marked = marked("2");
    let step = g.at(202).feed(Input::NodeChanged(marked.into()));
    assert_found(&g, &step);
    let step = g.at(203).feed(Input::LeadershipGained);
    assert_eq!(writes(&step), 0, "{:?}", step.effects);
    assert!(recorded(&step).is_empty(), "{:?}", recorded(&step));
    assert_eq!(g.state.phase, Phase::TimedOutKept);
}

/// A restarted replica's gate passes the deadline again and finds the node
/// marked for it: no second mark, no second `GateTimedOut`. A mark of
/// another deadline is not this gate's: the mark is written.
#[test]
fn a_restarted_gate_finds_its_own_mark_and_writes_no_second_one() {
    for (on_node, owed) in [(ts(120), false), (ts(60), true)] {
        let mut c = cfg();
        c.on_timeout = OnTimeout::Keep;
        let mut g = Gate::new(c);
        let mut node = gated_node();
        node.replace.timed_out = Some(on_node);
        let step = g.at(200).start(node, vec![tolerant_ds("broken")], vec![]);
        assert_eq!(g.state.phase, Phase::TimedOutKept, "{on_node}");
        assert_eq!(
            writes(&step),
            usize::from(owed),
            "{on_node}: {:?}",
            step.effects
        );
        assert_eq!(g.state.timeout_marked, !owed, "{on_node}");
        assert!(recorded(&step).is_empty(), "{:?}", recorded(&step));
    }
}

/// This replica's mark was applied but its answer was lost; the node shows
/// it before the retry. The mark is taken as written and reported (it may
/// be this replica's own: no other replica would report it).
#[test]
fn a_mark_whose_answer_was_lost_is_reported_once_the_node_shows_it() {
    let mut g = kept_gate(&tolerant_ds("broken"));
    let lost = PatchOutcome::Ambiguous("no answer within 10s".into());
    g.at(201).feed(Input::MarkResult(lost));
    let marked = marked("2");
    let step = g.at(202).feed(Input::NodeChanged(marked.into()));
    assert_eq!(writes(&step), 0, "{:?}", step.effects);
    assert_reported(&g, &step);
}

/// A follower's mark waits for the lease while writes are suspended on the
/// node; the leader marks the node meanwhile. When the suspension is lifted
/// the mark is found, not written again.
#[test]
fn a_suspension_lifted_finds_the_mark_another_replica_wrote() {
    let mut g = kept_gate(&tolerant_ds("broken"));
    g.at(201).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let node = |rv: &str, suspended: bool, mark: bool| {
        let mut n = marked(rv);
        n.suspended = suspended;
        n.replace.timed_out = n.replace.timed_out.filter(|_| mark);
        n
    };
    g.at(202)
        .feed(Input::NodeChanged(node("2", true, false).into()));
    g.at(203)
        .feed(Input::NodeChanged(node("3", true, true).into()));
    assert!(!g.state.timeout_marked, "decided nothing while suspended");
    let step = g
        .at(204)
        .feed(Input::NodeChanged(node("4", false, true).into()));
    assert_eq!(writes(&step), 0, "{:?}", step.effects);
    assert_found(&g, &step);
    let step = g.at(205).feed(Input::LeadershipGained);
    assert_eq!(writes(&step), 0, "{:?}", step.effects);
    assert!(recorded(&step).is_empty(), "{:?}", recorded(&step));
}

/// A mark sent, its answer lost (it may have been applied); the retry is
/// refused for leadership. The node then shows the mark: reported, since it
/// may be this replica's own and no other replica reports it.
#[test]
fn a_mark_unanswered_once_is_reported_even_after_a_refused_retry() {
    let mut g = kept_gate(&tolerant_ds("broken"));
    let lost = PatchOutcome::Ambiguous("no answer within 10s".into());
    g.at(201).feed(Input::MarkResult(lost));
    let step = g.at(202).feed(Input::TimerFired {
        kind: TimerKind::Retry,
        generation: 2,
    });
    assert_eq!(writes(&step), 1, "the retry: {:?}", step.effects);
    g.at(203).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let marked = marked("2");
    let step = g.at(204).feed(Input::NodeChanged(marked.into()));
    assert_reported(&g, &step);
}

/// A mark that failed outright (a 4xx) was not applied: the mark the node
/// then shows is another replica's, which reports it. Found, not reported.
#[test]
fn a_mark_that_failed_outright_takes_the_mark_shown_as_another_replicas() {
    let mut g = kept_gate(&tolerant_ds("broken"));
    let refused = PatchOutcome::Failed("422 Unprocessable Entity".into());
    g.at(201).feed(Input::MarkResult(refused));
    let marked = marked("2");
    let step = g.at(202).feed(Input::NodeChanged(marked.into()));
    assert_found(&g, &step);
}

/// Writes are suspended on a node already marked for the gate's deadline:
/// the mark is not a write the gate holds back, so no suspension is
/// journaled for it.
#[test]
fn a_suspended_gate_holds_back_no_mark_the_node_shows() {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Keep;
    let mut g = Gate::new(c);
    let mut node = gated_node();
    node.suspended = true;
    node.replace.timed_out = Some(ts(120));
    let step = g.at(200).start(node, vec![tolerant_ds("broken")], vec![]);
    assert_eq!(g.state.phase, Phase::TimedOutKept);
    assert_eq!(writes(&step), 0, "{:?}", step.effects);
    assert!(
        !has_event(&step, |e| matches!(e, Event::WritesSuspended { .. })),
        "{:?}",
        step.events
    );
}

/// A suspension lifted on a node that may open now, with a mark waiting
/// that the node already shows: the untaint goes out in the same step.
#[test]
fn a_suspension_lifted_opens_at_once_past_a_mark_the_node_shows() {
    let b = tolerant_ds("broken");
    let mut g = kept_gate(&b);
    g.at(201).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let node = |rv: &str, suspended: bool| NodeInfo {
        suspended,
        ..marked(rv)
    };
    g.at(202).feed(Input::NodeChanged(node("2", true).into()));
    g.at(203)
        .feed(Input::pod_upserted(ready_pod("broken-1", &b)));
    let step = g.at(204).feed(Input::NodeChanged(node("3", false).into()));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.effects);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
    assert_found(&g, &step);
}

/// Writes are suspended on the node in the same change that shows the mark
/// the gate's refused write waits to send: nothing is held back.
#[test]
fn a_held_mark_the_node_shows_is_not_held_back_by_a_suspension() {
    let mut g = kept_gate(&tolerant_ds("broken"));
    g.at(201).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let node = NodeInfo {
        suspended: true,
        ..marked("2")
    };
    let step = g.at(202).feed(Input::NodeChanged(node.into()));
    assert!(
        !has_event(&step, |e| matches!(e, Event::WritesSuspended { .. })),
        "{:?}",
        step.events
    );
    assert_eq!(writes(&step), 0, "{:?}", step.effects);
}

/// A mark unanswered (it may have been applied) gives way to an opening;
/// the untaint meets a conflict and, a member no longer Ready, is
/// abandoned; the mark is owed again, and refused for leadership. The mark
/// the node shows is still reported: it may be this gate's own, whatever
/// became of that first write.
#[test]
fn a_mark_unanswered_then_given_up_for_an_opening_is_still_reported() {
    let b = tolerant_ds("broken");
    let mut g = kept_gate(&b);
    let lost = PatchOutcome::Ambiguous("no answer within 10s".into());
    g.at(201).feed(Input::MarkResult(lost));
    let step = g
        .at(202)
        .feed(Input::pod_upserted(ready_pod("broken-1", &b)));
    assert_eq!(
        patches(&step).len(),
        1,
        "opening instead: {:?}",
        step.effects
    );
    g.at(203).feed(Input::PatchResult(PatchOutcome::Conflict));
    let step = g
        .at(204)
        .feed(Input::pod_upserted(unready_pod("broken-1", &b)));
    assert_eq!(writes(&step), 1, "the mark again: {:?}", step.effects);
    g.at(205).feed(Input::MarkResult(PatchOutcome::NotLeader));
    let marked = marked("2");
    let step = g.at(206).feed(Input::NodeRefreshed(Ok(Some(marked))));
    assert_reported(&g, &step);
}
