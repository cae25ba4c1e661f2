//! `--on-timeout replace`: at the deadline the gate keeps the node closed
//! and marks it `nodegate.dev/timed-out` (what tells the replace decider
//! the node is due); a `nodegate.dev/replace-fallback: open` recorded for
//! this gate opens it as by timeout, one of an earlier gate does not.

use std::sync::Arc;

use crate::gate_support::*;
use nodegate_core::gate::{
    Effect, Event, EventType, Input, OpenedBy, PatchOutcome, Phase, TimerKind,
};
use nodegate_core::testutil::ts;
use nodegate_core::vocab::config::OnTimeout;
use nodegate_core::vocab::model::Fallback;

fn replace_gate() -> Gate {
    let mut c = cfg();
    c.on_timeout = OnTimeout::Replace;
    let mut g = Gate::new(c);
    g.at(10)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g.at(120).feed(Input::TimerFired {
        kind: TimerKind::Deadline,
        generation: 1,
    });
    assert_eq!(g.state.phase, Phase::TimedOutKept);
    assert!(patches(&step).is_empty());
    assert!(
        step.effects
            .iter()
            .any(|e| matches!(e, Effect::MarkTimedOut(m) if m.deadline == ts(120))),
        "{:?}",
        step.effects
    );
    let step = g.at(121).feed(Input::MarkResult(PatchOutcome::Applied));
    assert_event(
        &step,
        EventType::Warning,
        "GateTimedOut",
        &["kept closed", "replace", "kube-system/broken"],
    );
    g
}

fn with_fallback(fallback: Fallback, at: i64) -> Input {
    let mut n = gated_node();
    n.resource_version = "7".into();
    n.replace.timed_out = Some(ts(120));
    n.replace.fallback = Some((fallback, ts(at)));
    Input::NodeChanged(Arc::new(n))
}

#[test]
fn replace_keeps_the_node_closed_and_marks_it_timed_out() {
    let mut g = replace_gate();
    // Nothing else happens: no opening, whatever the time.
    let input = Input::Reexamine {
        node: g.state.node.clone().expect("a started gate"),
        daemonsets: g.state.daemonsets.values().cloned().collect(),
        pods: g.state.pods.values().cloned().collect(),
    };
    let step = g.at(10_000).feed(input);
    assert!(patches(&step).is_empty());
}

#[test]
fn a_fallback_open_recorded_for_this_gate_opens_it_by_timeout() {
    let mut g = replace_gate();
    let step = g.at(130).feed(with_fallback(Fallback::Open, 125));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);
}

#[test]
fn a_fallback_keep_or_one_of_an_earlier_gate_keeps_it_closed() {
    let mut g = replace_gate();
    let step = g.at(130).feed(with_fallback(Fallback::Keep, 125));
    assert!(patches(&step).is_empty());
    // Written before this gate started (the node was created at 0; a
    // fallback dated before that belongs to an earlier life).
    let mut g = replace_gate();
    let step = g.at(130).feed(with_fallback(Fallback::Open, -100));
    assert!(patches(&step).is_empty());
}

/// The gated node at version 8, timed out at 120 and asked to be replaced
/// at 125.
fn requested_node() -> nodegate_core::vocab::model::NodeInfo {
    let mut n = gated_node();
    n.resource_version = "8".into();
    n.replace.timed_out = Some(ts(120));
    n.replace.requested = Some(ts(125));
    n
}

#[test]
fn the_request_written_on_the_node_is_journaled_with_it() {
    let mut g = replace_gate();
    let n = requested_node();
    let step = g.at(126).feed(Input::NodeChanged(Arc::new(n)));
    assert!(
        step.events.iter().any(|e| matches!(
            e,
            Event::NodeUpdated { node } if node.replace.requested == Some(ts(125))
        )),
        "{:?}",
        step.events
    );
    assert!(patches(&step).is_empty(), "still closed");
}

/// Issue 37 §4: a node whose replacement was asked for and that a person
/// then opens with `nodegate.dev/open` loses the request's marks in the
/// opening patch; a node never asked for carries no such removal.
#[test]
fn an_opening_clears_the_replace_request() {
    let mut g = replace_gate();
    let mut asked = requested_node();
    let step = g.at(126).feed(Input::NodeChanged(Arc::new(asked.clone())));
    assert!(patches(&step).is_empty(), "the request alone opens nothing");
    asked.resource_version = "9".into();
    asked.open_requested = true;
    let step = g.at(130).feed(Input::NodeChanged(Arc::new(asked)));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert_eq!(p[0].opened_by, OpenedBy::Manual);
    assert!(p[0].clear_replace_request, "{:?}", p[0]);
    assert!(!p[0].cordoned, "{:?}", p[0]);

    let mut g = replace_gate();
    let mut open = gated_node();
    open.resource_version = "8".into();
    open.replace.timed_out = Some(ts(120));
    open.open_requested = true;
    let step = g.at(130).feed(Input::NodeChanged(Arc::new(open)));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert!(!p[0].clear_replace_request, "{:?}", p[0]);
}

/// A node the replace cordoned and a person then opens: the opening clears
/// the request and says the node is cordoned, so that the reason stays
/// (the cordon is a person's to lift, and `uninstall` reports it).
#[test]
fn an_opening_of_a_cordoned_node_says_it_is_cordoned() {
    let mut g = replace_gate();
    let mut asked = requested_node();
    asked.replace.unschedulable = true;
    let step = g.at(126).feed(Input::NodeChanged(Arc::new(asked.clone())));
    assert!(patches(&step).is_empty(), "the request alone opens nothing");
    asked.resource_version = "9".into();
    asked.open_requested = true;
    let step = g.at(130).feed(Input::NodeChanged(Arc::new(asked)));
    let p = patches(&step);
    assert_eq!(p.len(), 1, "{:?}", step.events);
    assert!(p[0].clear_replace_request && p[0].cordoned, "{:?}", p[0]);
}
