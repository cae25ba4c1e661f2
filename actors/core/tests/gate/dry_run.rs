//! Dry run: the gate decides and records, and writes nothing.
//! (The gate's transitions, one behaviour per test, with explicit time and
//! no sleeping; every step is replay-checked.)

use crate::gate_support::*;
use nodegate_core::gate::{Event, EventType, Input, OpenedBy, Phase};
use nodegate_core::vocab::config::OnTimeout;

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
    assert!(!ev[0].own_write, "a decision every replica reaches");
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
        let ev = assert_event(&step, EventType::Warning, "GateTimedOut", &[]);
        assert!(ev.note.starts_with("dry-run:"), "{}", ev.note);
        assert!(!ev.own_write, "a decision every replica reaches");
    }
}
