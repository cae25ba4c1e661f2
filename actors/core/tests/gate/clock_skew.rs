//! Clock skew (semantics.md §5.3): the deadline is API-server
//! time, the timer fires on the controller's clock, and an opening by
//! deadline needs the deadline passed by the server's clock too — as the
//! evidence the shell hands in (`Input::ServerTime`) shows it.

use crate::gate_support::*;
use nodegate_core::gate::{Effect, Event, Input, OpenedBy, Step, TimerKind};
use nodegate_core::testutil::ts;

fn deadline_fired(generation: u64) -> Input {
    Input::TimerFired {
        kind: TimerKind::Deadline,
        generation,
    }
}

fn timed_out(step: &Step) -> bool {
    has_event(step, |e| matches!(e, Event::TimedOut { .. }))
}

/// The deadline timers `step` asks for: (local instant, generation).
fn deadline_timers(step: &Step) -> Vec<(jiff::Timestamp, u64)> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::ScheduleTimer {
                kind: TimerKind::Deadline,
                at,
                generation,
            } => Some((*at, *generation)),
            _ => None,
        })
        .collect()
}

fn journal_json(g: &Gate) -> String {
    g.journal
        .entries()
        .map(|e| serde_json::to_string(&e).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_controller_clock_ten_minutes_ahead_opens_only_when_the_server_clock_passes_the_deadline() {
    // The node is created at server time 0; the controller's clock reads
    // 600 s then. Its deadline is 120 (server time).
    let mut g = Gate::new(cfg());
    g.at(600).feed(Input::ServerTime(ts(0)));
    let step = g
        .at(600)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    assert!(
        !timed_out(&step) && patches(&step).is_empty(),
        "opened at the local deadline although the server's clock reads 0: {:?}",
        step.events
    );

    // The timer, set for 120 (already past locally), fires at once; the
    // server still reads 0: held, re-armed for the 120 s still to go.
    let generation = g.state.timers.deadline_generation;
    g.at(600).feed(Input::ServerTime(ts(0)));
    let step = g.at(600).feed(deadline_fired(generation));
    assert!(!timed_out(&step) && patches(&step).is_empty());
    let timers = deadline_timers(&step);
    assert_eq!(timers.len(), 1, "{:?}", step.effects);
    assert_eq!(
        timers[0].0,
        ts(718),
        "re-armed for the remaining gap, less the evidence's slack"
    );
    let journal = journal_json(&g);
    assert!(
        journal.contains("the controller's clock is ahead of the API server's by 600s"),
        "{journal}"
    );

    // Half way, more evidence: still short of the deadline.
    let step = g.at(660).feed(Input::ServerTime(ts(60)));
    assert!(!timed_out(&step) && patches(&step).is_empty());

    // At the re-armed instant the shell brings fresh evidence with the
    // timer: the server's clock has reached the deadline.
    let evidence = g.at(718).feed(Input::ServerTime(ts(118)));
    let timer = g.at(718).feed(deadline_fired(timers[0].1));
    let step = Step {
        events: [evidence.events, timer.events].concat(),
        effects: [evidence.effects, timer.effects].concat(),
    };
    assert!(timed_out(&step), "{:?}", step.events);
    let p = patches(&step);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].opened_by, OpenedBy::Timeout);
}

#[test]
fn evidence_that_passes_the_deadline_decides_it_without_a_timer() {
    let mut g = Gate::new(cfg());
    g.at(600).feed(Input::ServerTime(ts(0)));
    g.at(600)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let step = g.at(700).feed(Input::ServerTime(ts(117)));
    assert!(!timed_out(&step));
    // Within the slack (the evidence counts whole seconds and arrives late).
    let step = g.at(701).feed(Input::ServerTime(ts(118)));
    assert!(timed_out(&step), "{:?}", step.events);
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_gated_since_in_the_future_is_clamped_to_the_servers_now() {
    // The agent that re-gated the node has a clock 4000 s ahead: its
    // gated-since reads 5000 while the server's clock reads 1000.
    let mut n = gated_node();
    n.gated_since = Some(ts(5000));
    let mut g = Gate::new(cfg());
    g.at(1000).feed(Input::ServerTime(ts(1000)));
    let step = g.at(1000).start(n, vec![tolerant_ds("broken")], vec![]);
    assert_eq!(
        deadline_timers(&step),
        vec![(ts(1122), g.state.timers.deadline_generation)],
        "the deadline counts from the server's now (the evidence and its \
         slack), not from the future"
    );
    let journal = journal_json(&g);
    assert!(journal.contains("gated_since_clamped"), "{journal}");

    let step = g.at(1119).feed(Input::ServerTime(ts(1119)));
    assert!(!timed_out(&step));
    let step = g.at(1122).feed(Input::ServerTime(ts(1122)));
    assert!(timed_out(&step));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_gated_since_in_the_past_is_kept() {
    let mut n = gated_node();
    n.gated_since = Some(ts(1000));
    let mut g = Gate::new(cfg());
    g.at(1050).feed(Input::ServerTime(ts(1050)));
    let step = g.at(1050).start(n, vec![tolerant_ds("broken")], vec![]);
    assert_eq!(deadline_timers(&step)[0].0, ts(1120));
    assert!(!journal_json(&g).contains("gated_since_clamped"));
}

#[test]
fn without_any_server_time_the_gate_trusts_its_clock() {
    // No evidence at all: the pure gate alone (as `explain` runs it) has
    // only its clock. The controller always has evidence before a gate
    // starts (the lists' own timestamps); see semantics.md §5.3.
    let mut g = Gate::new(cfg());
    let step = g
        .at(600)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    assert!(timed_out(&step));
    assert_eq!(patches(&step).len(), 1);
}

#[test]
fn a_controller_clock_behind_delays_the_opening_by_the_skew() {
    // The controller's clock is 60 s behind: it reads 0 when the server
    // reads 60, the node's creation. The deadline (180 server time) is
    // acted on at the local 180, i.e. server time 240.
    let mut n = gated_node();
    n.created = ts(60);
    let mut g = Gate::new(cfg());
    g.at(0).feed(Input::ServerTime(ts(60)));
    let step = g.at(0).start(n, vec![tolerant_ds("broken")], vec![]);
    assert_eq!(deadline_timers(&step)[0].0, ts(180));
    let step = g.at(120).feed(Input::ServerTime(ts(180)));
    assert!(!timed_out(&step), "the local clock has not reached it");
    g.at(180).feed(Input::ServerTime(ts(240)));
    let generation = g.state.timers.deadline_generation;
    let step = g.at(180).feed(deadline_fired(generation));
    assert!(timed_out(&step));
}

#[test]
fn server_time_is_journalled_only_while_it_can_matter() {
    let mut g = Gate::new(cfg());
    g.at(0)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    let first = g.at(10).feed(Input::ServerTime(ts(10)));
    assert_eq!(first.events.len(), 1, "{:?}", first.events);
    // Not newer: nothing.
    assert!(g.at(11).feed(Input::ServerTime(ts(9))).events.is_empty());
    // Past the deadline: decided, and nothing more to learn.
    g.at(130).feed(Input::ServerTime(ts(130)));
    assert!(g.state.timed_out.is_some());
    assert!(g.at(140).feed(Input::ServerTime(ts(140))).events.is_empty());
}

#[test]
fn the_warning_of_a_clamped_gate_counts_from_the_clamped_start() {
    let mut n = gated_node();
    n.gated_since = Some(ts(5000));
    let mut g = Gate::new(cfg());
    g.at(1000).feed(Input::ServerTime(ts(1000)));
    g.at(1000).start(n, vec![tolerant_ds("broken")], vec![]);
    g.at(1122).feed(Input::ServerTime(ts(1122)));
    let step = g.at(1123).feed(Input::PatchResult(
        nodegate_core::gate::PatchOutcome::Applied,
    ));
    let ev = recorded(&step);
    assert_eq!(ev.len(), 1);
    assert!(
        ev[0]
            .note
            .starts_with("deadline passed 120.0s after the gate started; opened anyway 121.0s"),
        "{}",
        ev[0].note
    );
}

#[test]
fn synchronised_clocks_do_not_hold_the_deadline_for_the_evidences_lateness() {
    // Clocks agree; the evidence is a second late, as its whole seconds and
    // its way here make it: the deadline is acted on at once, no hold.
    let mut g = Gate::new(cfg());
    g.at(0).feed(Input::ServerTime(ts(0)));
    g.at(0)
        .start(gated_node(), vec![tolerant_ds("broken")], vec![]);
    g.at(120).feed(Input::ServerTime(ts(119)));
    let generation = g.state.timers.deadline_generation;
    let step = g.at(120).feed(deadline_fired(generation));
    assert!(
        g.state.timed_out.is_some(),
        "held for a second of lateness: {:?}",
        step.events
    );
    assert!(!journal_json(&g).contains("deadline_held"));
}

#[test]
fn a_gated_since_a_second_ahead_of_late_evidence_is_not_clamped() {
    let mut n = gated_node();
    n.gated_since = Some(ts(1001));
    let mut g = Gate::new(cfg());
    g.at(1001).feed(Input::ServerTime(ts(1000)));
    g.at(1001).start(n, vec![tolerant_ds("broken")], vec![]);
    assert!(!journal_json(&g).contains("gated_since_clamped"));
}
