//! The switches an operator reaches for (semantics.md §6.6): a suspension
//! (node annotation or config) under which the gate decides and journals but
//! writes nothing, acting at once when it is lifted; and the one-shot
//! `nodegate.dev/open` that opens a node whatever its members.

use crate::gate_support::*;
use nodegate_core::gate::{Effect, Event, Input, OpenedBy, PatchOutcome, Phase, TimerKind};
use nodegate_core::vocab::model::NodeInfo;

fn suspended(mut n: NodeInfo, on: bool, version: &str) -> NodeInfo {
    n.suspended = on;
    n.resource_version = version.into();
    n
}

fn suspensions(step: &nodegate_core::gate::Step) -> usize {
    step.events
        .iter()
        .filter(|e| matches!(e, Event::WritesSuspended { .. }))
        .count()
}

#[test]
fn a_suspended_node_times_out_in_the_journal_only_and_opens_when_lifted() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        suspended(gated_node(), true, "1"),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    assert_eq!(writes(&step), 0);
    assert_eq!(suspensions(&step), 0, "nothing to hold yet");

    let generation = g.state.timers.deadline_generation;
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation,
    });
    assert!(
        has_event(&step, |e| matches!(e, Event::TimedOut { .. })),
        "the deadline is decided and journalled: {:?}",
        step.events
    );
    assert_eq!(writes(&step), 0, "suspended: no write");
    assert!(recorded(&step).is_empty(), "suspended: no Event either");
    assert_eq!(suspensions(&step), 1);
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WritesSuspended { opened_by: Some(OpenedBy::Timeout), by } if by == "annotation"
    )));

    // Still suspended: held once, not journalled again on every input.
    let step = g.at(130).feed(Input::NodeChanged(
        suspended(gated_node(), true, "2").into(),
    ));
    assert_eq!((writes(&step), suspensions(&step)), (0, 0));

    let step = g.at(140).feed(Input::NodeChanged(
        suspended(gated_node(), false, "3").into(),
    ));
    assert!(has_event(&step, |e| matches!(e, Event::WritesResumed)));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "lifted: acts at once: {:?}", step.effects);
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);
    assert_eq!(p[0].resource_version, "3");
}

#[test]
fn a_suspension_in_config_holds_an_opening_by_ready() {
    let a = tolerant_ds("cilium");
    let mut c = cfg();
    c.suspend = true;
    let mut g = Gate::new(c);
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![ready_pod("cilium-1", &a)],
    );
    assert_eq!(writes(&step), 0);
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WritesSuspended { opened_by: Some(OpenedBy::Ready), by } if by == "config"
    )));
    assert_eq!(g.state.phase, Phase::Waiting);
}

#[test]
fn a_suspension_mid_opening_lets_the_sent_write_finish_and_holds_its_retry() {
    let (mut g, _, step) = ready_cilium_gate();
    assert_eq!(patches(&step).len(), 1, "the untaint is out");

    // Suspended while the untaint is in flight: nothing to cancel or hold.
    let step = g.at(2).feed(Input::NodeChanged(
        suspended(gated_node(), true, "2").into(),
    ));
    assert_eq!((writes(&step), suspensions(&step)), (0, 0));

    // The answer: a conflict (the node moved on). The gate re-reads, but
    // the retry is held.
    let step = g.at(3).feed(Input::PatchResult(PatchOutcome::Conflict));
    assert_eq!(step.effects, vec![Effect::RefreshNode]);
    assert_eq!(
        suspensions(&step),
        1,
        "the retry is held: {:?}",
        step.events
    );
    let step = g.at(4).feed(Input::NodeRefreshed(Ok(Some(suspended(
        gated_node(),
        true,
        "3",
    )))));
    assert_eq!(writes(&step), 0, "suspended: the retry is held");
    assert_eq!(suspensions(&step), 0, "held once: {:?}", step.events);

    // Lifted: the held retry goes out at once, with the current version.
    let step = g.at(5).feed(Input::NodeChanged(
        suspended(gated_node(), false, "4").into(),
    ));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert_eq!(
        (p[0].opened_by, p[0].resource_version.as_str()),
        (OpenedBy::Ready, "4")
    );
}

#[test]
fn the_open_annotation_opens_at_once_whatever_the_members() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let step = g.at(1).start(
        gated_node(),
        vec![a.clone()],
        vec![unready_pod("cilium-1", &a)],
    );
    assert_eq!(writes(&step), 0);

    let mut asked = gated_node();
    asked.open_requested = true;
    asked.resource_version = "2".into();
    let step = g.at(5).feed(Input::NodeChanged(asked.into()));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert_eq!(p[0].opened_by, OpenedBy::Manual);

    let step = g.at(6).feed(Input::PatchResult(PatchOutcome::Applied));
    assert_eq!(g.state.phase, Phase::Opened);
    let notes: Vec<&str> = recorded(&step).iter().map(|e| e.note.as_str()).collect();
    assert!(
        notes.iter().any(|n| n.starts_with("opened on request")),
        "{notes:?}"
    );
    assert!(
        recorded(&step).iter().all(|e| e.own_write),
        "the answer to this replica's untaint"
    );
    assert!(stops(&step));
}

#[test]
fn a_suspension_also_holds_a_manual_opening() {
    let a = tolerant_ds("cilium");
    let mut g = Gate::new(cfg());
    let mut n = suspended(gated_node(), true, "1");
    n.open_requested = true;
    let step = g
        .at(1)
        .start(n, vec![a.clone()], vec![unready_pod("cilium-1", &a)]);
    assert_eq!(writes(&step), 0);
    assert!(has_event(&step, |e| matches!(
        e,
        Event::WritesSuspended {
            opened_by: Some(OpenedBy::Manual),
            ..
        }
    )));
}
