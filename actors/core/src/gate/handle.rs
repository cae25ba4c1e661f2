//! The decider behind `decide`: one module per input family, each ending
//! in `reconcile`.

mod members;
mod observations;
mod opening;
mod reconcile;
mod timers;
mod writes;

use jiff::Timestamp;

use super::apply::apply;
use super::event::Event;
use super::input::Input;
use super::state::{GateState, StopReason};
use crate::vocab::config::Config;

/// `decide` on the state itself: each event is applied as it is emitted, so
/// afterwards `state` is what folding the returned events gives.
pub(super) fn decide_in_place(
    state: &mut GateState,
    input: &Input,
    cfg: &Config,
    now: Timestamp,
) -> Vec<Event> {
    if state.is_finished() {
        return Vec::new();
    }
    let mut d = Step {
        s: state,
        events: Vec::new(),
        cfg,
        now,
    };
    d.input(input);
    d.events
}

struct Step<'a> {
    s: &'a mut GateState,
    events: Vec<Event>,
    cfg: &'a Config,
    now: Timestamp,
}

/// Why `reconcile` runs, for the write transitions that only a particular
/// input may trigger.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReconcileCause {
    Observation,
    RetryDue,
    Refreshed,
    Leadership,
    /// The periodic re-examination.
    Reexamine,
}

impl Step<'_> {
    /// Records a fact: applied to the state at once, so later decisions in
    /// the same step see it, then kept for the caller.
    fn emit(&mut self, ev: Event) {
        apply(self.s, &ev);
        self.events.push(ev);
    }

    /// Ends the gate without opening it.
    fn stop(&mut self, reason: StopReason) {
        self.emit(Event::Stopped { reason });
    }

    /// Whether `name` is the gated node's (false before the first snapshot).
    fn is_this_node(&self, name: &str) -> bool {
        self.s.node.as_ref().is_some_and(|n| n.name == name)
    }

    fn input(&mut self, input: &Input) {
        match input {
            Input::Snapshot {
                node,
                daemonsets,
                pods,
            } => self.snapshot(node, daemonsets, pods, ReconcileCause::Observation),
            // Evidence of the server's clock is kept even before the
            // snapshot, so that the first decision already has it.
            Input::ServerTime(at) => self.server_time(*at),
            // Nothing but a snapshot can start a gate: deciding on a partial
            // view (say, a node without its DaemonSets) would open it at once.
            _ if self.s.node.is_none() => {}
            Input::NodeChanged(node) => self.node_changed(node),
            Input::NodeDeleted => self.stop(StopReason::NodeDeleted),
            Input::DaemonSetUpserted(ds) => self.daemonset_upserted(ds),
            Input::DaemonSetDeleted { uid } => self.daemonset_deleted(uid),
            Input::PodUpserted(pod) => self.pod_upserted(pod),
            Input::PodDeleted { uid } => self.pod_deleted(uid),
            Input::TimerFired { kind, generation } => self.timer(*kind, *generation),
            Input::PatchResult(outcome) => self.write_result(outcome, true),
            Input::MarkResult(outcome) => self.write_result(outcome, false),
            Input::NodeRefreshed(result) => self.refreshed(result),
            Input::LeadershipGained => self.reconcile(ReconcileCause::Leadership),
            Input::Reexamine {
                node,
                daemonsets,
                pods,
            } => self.snapshot(node, daemonsets, pods, ReconcileCause::Reexamine),
        }
    }
}
