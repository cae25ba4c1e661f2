//! A gate whose managed taints someone else removed: the gate ends and
//! asks the shell to record `opened-by: external` on the node, so that no
//! entrance puts the taint back — except in a dry run or while writes are
//! suspended, when it writes nothing. Taints gone in another replica's
//! untaint (an `opened-at` other than the one the node last showed with the
//! taint on, an `opened-by` of nodegate's) are that replica's opening:
//! nothing to mark, nothing to record.

use crate::gate_support::*;
use jiff::Timestamp;
use nodegate_core::gate::{
    ConditionReason, Effect, ExternalOpening, Input, OpenedBy, PatchOutcome, Phase, Step,
    StopReason, open_condition,
};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::model::{NodeInfo, OpenedByMark};

fn external(step: &Step) -> Vec<&ExternalOpening> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::MarkOpenedExternally(m) => Some(m),
            _ => None,
        })
        .collect()
}

fn removed_by_hand(cfg: nodegate_core::vocab::config::Config) -> (Gate, Step) {
    let mut g = Gate::new(cfg);
    g.at(1)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g
        .at(10)
        .feed(Input::NodeChanged(std::sync::Arc::new(node(vec![]))));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    (g, step)
}

#[test]
fn a_taint_removed_by_someone_else_is_recorded_as_an_external_opening() {
    let (_, step) = removed_by_hand(cfg());
    assert_eq!(
        external(&step),
        [&ExternalOpening {
            node: "node-a".into(),
            cordoned: false,
        }]
    );
    // Recorded before the gate ends; no untaint of its own.
    let mark = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::MarkOpenedExternally(_)));
    let stop = step
        .effects
        .iter()
        .position(|e| matches!(e, Effect::Stop(_)));
    assert!(mark < stop, "{:?}", step.effects);
    assert_eq!(writes(&step), 0);
}

#[test]
fn a_dry_run_or_a_suspended_gate_records_nothing() {
    let (_, step) = removed_by_hand(nodegate_core::vocab::config::Config {
        dry_run: true,
        ..cfg()
    });
    assert!(external(&step).is_empty(), "{:?}", step.effects);
    assert!(stops(&step));
    let (_, step) = removed_by_hand(nodegate_core::vocab::config::Config {
        suspend: true,
        ..cfg()
    });
    assert!(external(&step).is_empty(), "{:?}", step.effects);
}

/// `node-a` with the annotations an opening leaves: `opened-at`, and
/// `opened-by` when it names one of nodegate's.
fn opened(gated: bool, at: Timestamp, by: Option<OpenedBy>) -> NodeInfo {
    let mut n = if gated { gated_node() } else { node(vec![]) };
    n.opened_at = Some(at);
    n.opened_before = true;
    n.opened_by = by.map(OpenedByMark::Nodegate);
    n
}

/// Gated from `start` (the node as the gate first sees it), then seen with
/// `then`, no managed taint: the step that ends the gate.
fn taints_gone(start: NodeInfo, then: NodeInfo) -> (Gate, Step) {
    let mut g = Gate::new(cfg());
    g.at(1).start(start, vec![tolerant_ds("broken")], vec![]);
    let step = g.at(10).feed(Input::NodeChanged(then.into()));
    (g, step)
}

/// What `--node-condition` says of the gate: (open, reason).
fn condition(g: &Gate) -> Option<(bool, ConditionReason)> {
    open_condition(&g.state).map(|c| (c.open, c.reason))
}

#[test]
fn another_replicas_opening_is_neither_marked_nor_recorded_again() {
    for by in [OpenedBy::Ready, OpenedBy::Timeout, OpenedBy::Manual] {
        let (g, step) = taints_gone(gated_node(), opened(false, ts(5), Some(by)));
        assert_eq!(
            g.state.stopped,
            Some(StopReason::OpenedByAnotherReplica),
            "{by}"
        );
        assert!(external(&step).is_empty(), "{by}: {:?}", step.effects);
        assert!(recorded(&step).is_empty(), "{by}: that replica records it");
        assert!(stops(&step));
        assert_eq!(writes(&step), 0);
        // The condition says what that replica's says, should this one
        // write it (a replica that led before its watch caught up).
        assert_eq!(
            condition(&g),
            Some((true, ConditionReason::opened_by(by))),
            "{by}"
        );
    }
}

#[test]
fn a_removal_by_hand_of_a_taint_that_came_back_after_an_opening_is_external() {
    // Opened at 0s, the taint back (by hand, or a re-registration): the
    // node keeps that opening's annotations, and the gate its start.
    let start = opened(true, ts(0), Some(OpenedBy::Ready));
    let (g, step) = taints_gone(start.clone(), opened(false, ts(0), Some(OpenedBy::Ready)));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    assert_eq!(external(&step).len(), 1, "{:?}", step.effects);
    assert_eq!(
        condition(&g),
        Some((true, ConditionReason::OpenedExternally))
    );
    // Another replica's opening of the same node writes a new opened-at.
    let (g, step) = taints_gone(start, opened(false, ts(7), Some(OpenedBy::Timeout)));
    assert_eq!(g.state.stopped, Some(StopReason::OpenedByAnotherReplica));
    assert!(external(&step).is_empty(), "{:?}", step.effects);
    assert_eq!(
        condition(&g),
        Some((true, ConditionReason::OpenedByTimeout))
    );
}

#[test]
fn a_new_opened_at_without_an_opened_by_of_nodegates_is_external() {
    for by in [None, Some(OpenedBy::Ready)] {
        // No opened-by, or `external` (a gate recorded someone else's
        // removal): not an untaint of nodegate's.
        for mark in [None, Some(OpenedByMark::External)] {
            let mut then = opened(false, ts(5), None);
            then.opened_by = mark;
            let start = match by {
                Some(by) => opened(true, ts(0), Some(by)),
                None => gated_node(),
            };
            let (g, step) = taints_gone(start, then);
            assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
            assert_eq!(external(&step).len(), 1, "{:?}", step.effects);
        }
    }
}

#[test]
fn another_replicas_opening_seen_while_an_untaint_of_ours_is_in_flight() {
    // Our untaint is out and the other replica's opening shows: in the
    // watch before our conflict (the node the gate then holds decides), or
    // only in the re-read the conflict asks for.
    for watch_first in [true, false] {
        let (mut g, _, step) = ready_cilium_gate();
        assert_eq!(patches(&step).len(), 1);
        let theirs = opened(false, ts(2), Some(OpenedBy::Ready));
        if watch_first {
            let step = g.at(2).feed(Input::NodeChanged(theirs.clone().into()));
            assert!(!stops(&step), "our patch is in flight: its answer decides");
        }
        let mut step = g.at(3).feed(Input::PatchResult(PatchOutcome::Conflict));
        assert_eq!(step.effects.first(), Some(&Effect::RefreshNode));
        if !watch_first {
            step = g.at(4).feed(Input::NodeRefreshed(Ok(Some(theirs))));
        }
        assert_eq!(g.state.stopped, Some(StopReason::OpenedByAnotherReplica));
        assert_eq!(g.state.phase, Phase::Gone);
        assert!(stops(&step), "{:?}", step.effects);
        assert!(external(&step).is_empty(), "{:?}", step.effects);
        assert!(recorded(&step).is_empty());
    }
}

#[test]
fn an_opening_the_gate_never_saw_open_moves_what_counts_as_new() {
    // Started on a node opened at 0s; the taint came back after another
    // opening (at 5s, by timeout) the gate saw only closed again. A person
    // then takes the taint off: no untaint wrote that 5s, it is external.
    let mut g = Gate::new(cfg());
    g.at(1).start(
        opened(true, ts(0), Some(OpenedBy::Ready)),
        vec![tolerant_ds("broken")],
        vec![],
    );
    g.at(6).feed(Input::NodeChanged(
        opened(true, ts(5), Some(OpenedBy::Timeout)).into(),
    ));
    assert_eq!(g.state.closed_opened_at, Some(ts(5)));
    let step = g.at(7).feed(Input::NodeChanged(
        opened(false, ts(5), Some(OpenedBy::Timeout)).into(),
    ));
    assert_eq!(g.state.stopped, Some(StopReason::TaintRemovedElsewhere));
    assert_eq!(external(&step).len(), 1, "{:?}", step.effects);
}

#[test]
fn another_replicas_opening_seen_by_a_re_examination_after_one() {
    // Re-examinations record the node whole (a snapshot): not one may take
    // the opened-at it shows for one seen with the taint on.
    let ds = tolerant_ds("broken");
    let mut g = Gate::new(cfg());
    let start = opened(true, ts(0), Some(OpenedBy::Ready));
    g.at(1).start(start.clone(), vec![ds.clone()], vec![]);
    let mut relabelled = start;
    relabelled.labels.insert("role".into(), "gpu".into());
    let step = g
        .at(30)
        .feed(Input::reexamine(relabelled, vec![ds.clone()], vec![]));
    assert_eq!(step.events.len(), 1, "{:?}", step.events);
    assert_eq!(g.state.closed_opened_at, Some(ts(0)));
    let theirs = opened(false, ts(40), Some(OpenedBy::Ready));
    let step = g.at(60).feed(Input::reexamine(theirs, vec![ds], vec![]));
    assert_eq!(g.state.stopped, Some(StopReason::OpenedByAnotherReplica));
    assert!(external(&step).is_empty(), "{:?}", step.effects);
}
