//! `minReadySeconds`: a recheck is scheduled instead of polling.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{Effect, Event, Input, TimerKind};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::model::PodInfo;

#[test]
fn min_ready_seconds_schedules_a_recheck_instead_of_polling() {
    let mut a = tolerant_ds("cilium");
    a.min_ready_seconds = 10;
    let pod = PodInfo {
        ready_since: Some(ts(5)).into(),
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
