//! What the shell must do because of an event.

use super::effect::{Effect, Ending, ExternalOpening, TimeoutMark, UntaintPatch, annotation_time};
use super::event::Event;
use super::input::TimerKind;
use super::notes;
use super::state::{GateState, OpenedBy, Phase, StopReason, WriteStatus};
use crate::vocab::config::Config;
use crate::vocab::model::NodeInfo;

/// What the shell must do because of `ev`, given the state after the whole
/// step (so a timer armed and made moot in the same step is not scheduled).
pub fn effects(state: &GateState, ev: &Event, cfg: &Config) -> Vec<Effect> {
    let Some(node) = &state.node else {
        return Vec::new();
    };
    match ev {
        Event::DeadlineSet { .. }
        | Event::DeadlineHeld { .. }
        | Event::ScheduleDeadlineSet { .. }
        | Event::RecheckScheduled { .. }
        | Event::RetryScheduled { .. } => timer_effects(state, ev),
        Event::UntaintSent { .. }
        | Event::MarkSent { .. }
        | Event::WriteConflict { .. }
        | Event::WriteUnanswered { .. }
        | Event::WithdrawRequested { .. } => write_effects(state, node, ev),
        Event::TimedOut { .. }
        | Event::WouldOpen { .. }
        | Event::Opened { .. }
        | Event::TimeoutMarked
        | Event::Stopped { .. } => ending_effects(state, node, ev, cfg),
        _ => Vec::new(),
    }
}

/// The timers an event arms: the deadline, the recheck, a retry.
fn timer_effects(state: &GateState, ev: &Event) -> Vec<Effect> {
    // The deadlines are armed whatever the phase while the gate lives: an
    // untaint out now may be withdrawn or abandoned later, and the gate must
    // still time out then. Not once the deadline was decided (it is decided
    // once), nor after a dry-run "would open" (nothing more is decided).
    let deadline_live =
        !state.is_finished() && state.timed_out.is_none() && state.phase != Phase::WouldOpen;
    let timers = &state.timers;
    let (kind, at, generation, live) = match ev {
        // A held deadline (not yet passed by the server's clock) is the same
        // timer, later, under the same conditions.
        Event::DeadlineSet { at, generation }
        | Event::DeadlineHeld {
            until: at,
            generation,
            ..
        } => (
            TimerKind::Deadline,
            at,
            generation,
            deadline_live && timers.deadline_generation == *generation,
        ),
        Event::ScheduleDeadlineSet {
            at: Some(at),
            generation,
        } => (
            TimerKind::ScheduleDeadline,
            at,
            generation,
            deadline_live && timers.schedule_generation == *generation,
        ),
        Event::RecheckScheduled { at, generation } => (
            TimerKind::Recheck,
            at,
            generation,
            matches!(state.phase, Phase::Waiting | Phase::TimedOutKept)
                && timers.recheck_generation == *generation,
        ),
        Event::RetryScheduled { attempt }
            if state
                .write
                .as_ref()
                .is_some_and(|w| w.attempt == *attempt && w.status == WriteStatus::Backoff) =>
        {
            return vec![Effect::ScheduleRetry { attempt: *attempt }];
        }
        _ => return Vec::new(),
    };
    if !live {
        return Vec::new();
    }
    vec![Effect::ScheduleTimer {
        kind,
        at: *at,
        generation: *generation,
    }]
}

/// The writes an event sends, re-reads or withdraws.
fn write_effects(state: &GateState, node: &NodeInfo, ev: &Event) -> Vec<Effect> {
    match ev {
        Event::UntaintSent {
            opened_by,
            resource_version,
            taints,
            at,
            ..
        } => {
            let mut taints = taints.clone();
            taints.sort_by_key(|t| std::cmp::Reverse(t.index));
            vec![Effect::RemoveTaints(UntaintPatch {
                node: node.name.clone(),
                resource_version: resource_version.clone(),
                taints,
                opened_by: *opened_by,
                opened_at: annotation_time(*at),
                annotations_present: node.annotations_present,
                clear_replace_request: node.replace.requested.is_some(),
                cordoned: node.replace.unschedulable,
            })]
        }
        Event::MarkSent { .. } => match &state.timed_out {
            Some(t) => vec![Effect::MarkTimedOut(TimeoutMark {
                node: node.name.clone(),
                deadline: t.deadline,
            })],
            None => Vec::new(),
        },
        Event::WriteConflict { .. } => vec![Effect::RefreshNode],
        // Unless the same step found the node opened (the watch showed it).
        Event::WriteUnanswered { .. } if matches!(&state.write, Some(w) if w.status == WriteStatus::Refreshing) =>
        {
            vec![Effect::RefreshNode]
        }
        Event::WithdrawRequested { .. } => vec![Effect::WithdrawWrite],
        _ => Vec::new(),
    }
}

/// The Kubernetes Events a timeout, an opening or a mark records, and the
/// end of the gate.
fn ending_effects(state: &GateState, node: &NodeInfo, ev: &Event, cfg: &Config) -> Vec<Effect> {
    // What the Events' notes count from.
    let start = state.gate_start().unwrap_or(node.created);
    match ev {
        // A Karpenter node opened again after its registration put the
        // taint back: opened, journaled, no second Event.
        Event::Opened {
            opened_by: opened_by @ (OpenedBy::Ready | OpenedBy::Timeout),
            ..
        } if state.reopening => {
            vec![Effect::Stop(Ending::Opened(*opened_by))]
        }
        Event::TimedOut { .. } if cfg.dry_run => (state.timed_out.iter())
            .map(|t| Effect::RecordEvent(notes::timed_out(node, start, t, true)))
            .collect(),
        Event::WouldOpen {
            opened_by: OpenedBy::Ready,
            taints,
            at,
        } => vec![Effect::RecordEvent(notes::would_open(
            node, state, taints, *at,
        ))],
        Event::Opened { opened_by, at, .. } => vec![
            Effect::RecordEvent(notes::opened(node, state, start, *opened_by, *at)),
            Effect::Stop(Ending::Opened(*opened_by)),
        ],
        Event::TimeoutMarked => (state.timed_out.iter())
            .map(|t| Effect::RecordEvent(notes::timed_out(node, start, t, false)))
            .collect(),
        // Someone else opened the node: recorded on it (not in a dry run,
        // nor while writes are suspended), so that no entrance puts the
        // taint back, also after a restart.
        Event::Stopped {
            reason: StopReason::TaintRemovedElsewhere,
        } if !cfg.dry_run && !cfg.suspend && !state.suspended => vec![
            Effect::MarkOpenedExternally(ExternalOpening {
                node: node.name.clone(),
                cordoned: node.replace.unschedulable,
            }),
            Effect::Stop(Ending::Stopped(StopReason::TaintRemovedElsewhere)),
        ],
        Event::Stopped { reason } => vec![Effect::Stop(Ending::Stopped(*reason))],
        _ => Vec::new(),
    }
}
