//! The schedule deadline (`--schedule-timeout`): an earlier deadline for
//! members that never got a pod on the node, counted from the gate's start
//! like the deadline; members with a pod wait for `--timeout`.

use std::time::Duration;

use crate::gate_support::*;
use nodegate_core::gate::{
    Effect, Event, EventType, Input, OpenedBy, PatchOutcome, Phase, TimerKind,
};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::config::{Config, OnTimeout};

/// The defaults with a 30 s schedule deadline (the deadline stays 120 s).
fn two_clocks() -> Config {
    let mut c = cfg();
    c.schedule_timeout = Some(Duration::from_secs(30));
    c
}

fn schedule_fired(generation: u64) -> Input {
    Input::TimerFired {
        kind: TimerKind::ScheduleDeadline,
        generation,
    }
}

fn timed_out(step: &nodegate_core::gate::Step) -> Option<(bool, jiff::Timestamp)> {
    step.events.iter().find_map(|e| match e {
        Event::TimedOut {
            by_schedule,
            deadline,
            ..
        } => Some((*by_schedule, *deadline)),
        _ => None,
    })
}

#[test]
fn a_member_never_scheduled_opens_the_node_at_the_schedule_deadline() {
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("broken"));
    let mut g = Gate::new(two_clocks());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone(), b.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert!(
        step.effects.contains(&Effect::ScheduleTimer {
            kind: TimerKind::ScheduleDeadline,
            at: ts(30),
            generation: 1
        }),
        "{:?}",
        step.effects
    );
    let step = g.at(30).feed(schedule_fired(1));
    assert_eq!(timed_out(&step), Some((true, ts(30))));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);

    let step = g.at(31).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &[
            "schedule deadline (--schedule-timeout) passed 30.0s after the gate started",
            "kube-system/broken (never scheduled",
        ],
    );
}

#[test]
fn a_member_with_a_pod_not_ready_waits_for_the_deadline() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(two_clocks());
    g.at(1).start(
        gated_node(),
        vec![b.clone()],
        vec![unready_pod("broken-1", &b)],
    );
    let step = g.at(30).feed(schedule_fired(1));
    assert_eq!(timed_out(&step), None);
    assert!(patches(&step).is_empty());
    assert_eq!(g.state.phase, Phase::Waiting);

    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(timed_out(&step), Some((false, ts(120))));
}

#[test]
fn a_pod_that_appears_before_the_schedule_deadline_cancels_it() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(two_clocks());
    g.at(1).start(gated_node(), vec![b.clone()], vec![]);
    g.at(20)
        .feed(Input::pod_upserted(pending_pod("broken-1", &b)));
    let step = g.at(30).feed(schedule_fired(1));
    assert_eq!(timed_out(&step), None);
    assert!(patches(&step).is_empty());
}

#[test]
fn a_crash_looping_or_recreated_pod_resets_neither_clock() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(two_clocks());
    g.at(1).start(
        gated_node(),
        vec![b.clone()],
        vec![unready_pod("broken-1", &b)],
    );
    // The pod crashes (back to Pending) and starts again, then is recreated.
    g.at(10)
        .feed(Input::pod_upserted(pending_pod("broken-1", &b)));
    g.at(12)
        .feed(Input::pod_upserted(unready_pod("broken-1", &b)));
    assert_eq!(g.state.timers.deadline, Some(ts(120)));
    assert_eq!(g.state.timers.schedule_deadline, Some(ts(30)));
    let step = g.at(30).feed(schedule_fired(1));
    assert_eq!(
        timed_out(&step),
        None,
        "it has a pod: not the schedule clock's"
    );
    // Deleted after the schedule deadline and not yet recreated: the
    // schedule deadline was decided, only the deadline remains.
    let uid = unready_pod("broken-1", &b).uid;
    let step = g.at(40).feed(Input::PodDeleted {
        uid: uid.to_string(),
    });
    assert_eq!(timed_out(&step), None);
    g.at(41)
        .feed(Input::pod_upserted(unready_pod("broken-2", &b)));
    assert_eq!(g.state.timers.deadline, Some(ts(120)));
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(timed_out(&step), Some((false, ts(120))));
}

#[test]
fn keep_marks_the_node_at_the_schedule_deadline_and_still_opens_by_ready() {
    let mut c = two_clocks();
    c.on_timeout = OnTimeout::Keep;
    let b = tolerant_ds("broken");
    let mut g = Gate::new(c);
    g.at(1).start(gated_node(), vec![b.clone()], vec![]);
    let step = g.at(30).feed(schedule_fired(1));
    assert_eq!(timed_out(&step), Some((true, ts(30))));
    assert_eq!(g.state.phase, Phase::TimedOutKept);
    assert!(patches(&step).is_empty());
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::MarkTimedOut(m) if m.deadline == ts(30)))
    );
    let step = g.at(31).feed(Input::MarkResult(PatchOutcome::Applied));
    assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &[
            "schedule deadline (--schedule-timeout)",
            "kept closed",
            "kube-system/broken (never scheduled",
        ],
    );
    let step = g
        .at(60)
        .feed(Input::pod_upserted(ready_pod("broken-1", &b)));
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Ready);
}

#[test]
fn no_schedule_deadline_unless_configured_and_earlier_than_the_deadline() {
    let b = tolerant_ds("broken");
    let mut g = Gate::new(cfg());
    g.at(1).start(gated_node(), vec![b.clone()], vec![]);
    assert_eq!(g.state.timers.schedule_deadline, None);
    let mut c = two_clocks();
    c.timeout = Some(Duration::from_secs(20));
    let mut g = Gate::new(c);
    g.at(1).start(gated_node(), vec![b], vec![]);
    assert_eq!(g.state.timers.schedule_deadline, None);
}
