//! What the shell must do because of an event.

use super::config::{GateConfig, OnTimeout};
use super::effect::{Effect, EventType, TimeoutMark, UntaintPatch};
use super::event::Event;
use super::input::TimerKind;
use super::notes::{not_ready_text, ready_text, record, since, taint_list};
use super::state::{GateState, OpenedBy, Phase, WriteStatus};

/// What the shell must do because of `ev`, given the state after the whole
/// step (so a timer armed and made moot in the same step is not scheduled).
pub fn effects(state: &GateState, ev: &Event, cfg: &GateConfig) -> Vec<Effect> {
    let Some(node) = &state.node else {
        return Vec::new();
    };
    match ev {
        Event::DeadlineSet { at, generation }
            if state.phase == Phase::Waiting && state.timers.deadline_generation == *generation =>
        {
            vec![Effect::ScheduleTimer {
                kind: TimerKind::Deadline,
                at: *at,
                generation: *generation,
            }]
        }
        Event::RecheckScheduled { at, generation }
            if matches!(state.phase, Phase::Waiting | Phase::TimedOutKept)
                && state.timers.recheck_generation == *generation =>
        {
            vec![Effect::ScheduleTimer {
                kind: TimerKind::Recheck,
                at: *at,
                generation: *generation,
            }]
        }
        Event::RetryScheduled { attempt }
            if state
                .write
                .as_ref()
                .is_some_and(|w| w.attempt == *attempt && w.status == WriteStatus::Backoff) =>
        {
            vec![Effect::ScheduleRetry { attempt: *attempt }]
        }
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
                opened_at: *at,
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
        Event::WithdrawRequested { .. } => vec![Effect::WithdrawWrite],
        Event::TimedOut {
            deadline,
            action,
            expected,
            not_ready,
        } if cfg.dry_run => {
            let what = match action {
                OnTimeout::Open => "would open the node anyway",
                OnTimeout::Keep => "would keep the node closed",
            };
            let note = format!(
                "dry-run: deadline passed {} after the gate started; {what}; {}",
                since(node, *deadline),
                not_ready_text(*expected, not_ready)
            );
            vec![record(node, EventType::Warning, "GateTimedOut", note)]
        }
        Event::WouldOpen {
            opened_by: OpenedBy::Ready,
            taints,
            at,
        } => {
            let note = format!(
                "dry-run: would remove {} now: {}, {} after the gate started",
                taint_list(taints),
                ready_text(state),
                since(node, *at)
            );
            vec![record(node, EventType::Normal, "GateWouldOpen", note)]
        }
        Event::Opened {
            opened_by: OpenedBy::Ready,
            at,
            ..
        } => {
            let note = format!(
                "opened: {}, {} after the gate started",
                ready_text(state),
                since(node, *at)
            );
            vec![
                record(node, EventType::Normal, "GateOpened", note),
                Effect::Stop("opened".to_string()),
            ]
        }
        Event::Opened {
            opened_by: OpenedBy::Timeout,
            at,
            ..
        } => {
            let note = match &state.timed_out {
                Some(t) => format!(
                    "deadline passed {} after the gate started; opened anyway {} after the gate started; {}",
                    since(node, t.deadline),
                    since(node, *at),
                    not_ready_text(t.expected, &t.not_ready)
                ),
                None => format!(
                    "opened by timeout {} after the gate started",
                    since(node, *at)
                ),
            };
            vec![
                record(node, EventType::Warning, "GateTimedOut", note),
                Effect::Stop("opened by timeout".to_string()),
            ]
        }
        Event::TimeoutMarked => match &state.timed_out {
            Some(t) => {
                let note = format!(
                    "deadline passed {} after the gate started; kept closed (--on-timeout=keep); {}",
                    since(node, t.deadline),
                    not_ready_text(t.expected, &t.not_ready)
                );
                vec![record(node, EventType::Warning, "GateTimedOut", note)]
            }
            None => Vec::new(),
        },
        Event::Stopped { reason } => vec![Effect::Stop(reason.to_string())],
        _ => Vec::new(),
    }
}
