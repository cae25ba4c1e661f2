//! Folding one event into the state.

use std::borrow::Cow;
use std::sync::Arc;

use jiff::Timestamp;

use super::effect::annotation_time;
use super::event::Event;
use super::state::{
    GateState, GateWriteKind, GatedSinceClamp, MAX_UNANSWERED, OpenedRecord, Phase, TimeoutRecord,
    UNEVALUATED, UnansweredUntaint, Write, WriteStatus,
};
use crate::vocab::member::{Expectation, Member, MemberId, Readiness};
use crate::vocab::model::PodInfo;

/// Folds one fact into the state. Never fails and never consults anything but
/// the event: an event that does not fit the state (e.g. a member update for a
/// member that is not there) changes nothing. This match names every event,
/// so a new one must be given a fold.
pub fn apply(state: &mut GateState, ev: &Event) {
    match ev {
        Event::Snapshot {
            node,
            daemonsets,
            pods,
        } => {
            // A gate starts on a node with a managed taint on (or stops).
            if state.node.is_none() {
                state.closed_opened_at = node.opened_at;
            }
            state.node = Some(Arc::clone(node));
            state.reopening = crate::rules::startup::karpenter_reopening(node);
            state.daemonsets = daemonsets.iter().map(|ds| (ds.key(), ds.clone())).collect();
            state.pods = pods
                .iter()
                .map(|p| (p.uid.to_string(), p.clone()))
                .collect();
        }
        Event::NodeUpdated { node } => state.node = Some(Arc::clone(node)),
        Event::OpenedAtSeenClosed { opened_at } => state.closed_opened_at = *opened_at,
        Event::NodeVersionChanged { resource_version } => {
            if let Some(node) = &mut state.node {
                Arc::make_mut(node).resource_version = resource_version.clone();
            }
        }
        Event::DaemonSetUpdated { daemonset } => {
            state.daemonsets.insert(daemonset.key(), daemonset.clone());
        }
        Event::DaemonSetRemoved { daemonset, .. } => {
            state.daemonsets.remove(daemonset);
        }
        Event::PodStatusChanged { .. }
        | Event::MemberExpected { .. }
        | Event::MemberReady { .. }
        | Event::MemberWaiting { .. } => {
            if let Some(f) = Fold::of(ev) {
                fold(state, f);
            }
        }
        Event::PodUpdated { pod } => match state.pods.get_mut(&*pod.uid.text()) {
            // A new version of a known pod: no new key to allocate.
            Some(slot) => *slot = Arc::clone(pod),
            None => {
                state.pods.insert(pod.uid.to_string(), Arc::clone(pod));
            }
        },
        Event::PodRemoved { uid, .. } => {
            state.pods.remove(uid);
        }
        Event::MemberNotExpected {
            member,
            reason,
            code,
        } => {
            let m = Member::not_expected(reason.clone(), *code);
            state.members.insert(member.clone(), m);
        }
        Event::MemberRemoved { member } => {
            state.members.remove(member);
        }
        Event::DeadlineSet { at, generation } => {
            state.timers.deadline = Some(*at);
            state.timers.deadline_generation = *generation;
        }
        Event::DeadlineHeld { generation, .. } => {
            state.timers.deadline_generation = *generation;
        }
        Event::ScheduleDeadlineSet { at, generation } => {
            state.timers.schedule_deadline = *at;
            state.timers.schedule_generation = *generation;
        }
        Event::ScheduleDeadlinePassed { at } => {
            state.timers.schedule_passed = Some(*at);
            state.timers.schedule_deadline = None;
        }
        Event::ServerTimeSeen { at } => state.server_time = Some(*at),
        Event::GatedSinceClamped { gated_since, to } => {
            state.gated_since_clamp = Some(GatedSinceClamp {
                gated_since: *gated_since,
                to: *to,
            });
        }
        Event::RecheckScheduled { at, generation } => {
            state.timers.recheck = Some(*at);
            state.timers.recheck_generation = *generation;
        }
        Event::RecheckFired { .. } => state.timers.recheck = None,
        Event::TimedOut {
            deadline,
            by_schedule,
            action,
            expected,
            not_ready,
            node_not_ready,
        } => {
            state.timed_out = Some(TimeoutRecord {
                deadline: *deadline,
                by_schedule: *by_schedule,
                action: *action,
                expected: *expected,
                not_ready: not_ready.clone(),
                node_not_ready: node_not_ready.clone(),
            });
            if action.keeps() {
                state.phase = Phase::TimedOutKept;
            }
        }
        Event::WritesSuspended { .. } => state.suspended = true,
        Event::WritesResumed => state.suspended = false,
        Event::WouldOpen { opened_by, at, .. } => {
            state.phase = Phase::WouldOpen;
            state.opened = Some(OpenedRecord {
                opened_by: *opened_by,
                at: *at,
                resource_version: state
                    .node
                    .as_ref()
                    .map(|n| n.resource_version.clone())
                    .unwrap_or_default(),
            });
        }
        Event::UntaintSent {
            attempt,
            opened_by,
            resource_version,
            at,
            ..
        } => {
            state.phase = Phase::Opening;
            let kind = GateWriteKind::Untaint {
                opened_by: *opened_by,
            };
            state.write = Some(Write {
                resource_version: Some(resource_version.clone()),
                opened_at: Some(annotation_time(*at)),
                ..Write::sent(kind, *attempt)
            });
        }
        Event::MarkSent { attempt } => {
            state.write = Some(Write::sent(GateWriteKind::MarkTimedOut, *attempt));
        }
        Event::MarkUnanswered { error, .. } => {
            state.mark_unanswered = true;
            with_write(state, |w| w.last_error = Some(error.clone()));
        }
        Event::WriteConflict { .. } => with_write(state, |w| w.status = WriteStatus::Refreshing),
        Event::WriteFailed { error, .. } => {
            with_write(state, |w| w.last_error = Some(error.clone()))
        }
        Event::WriteUnanswered { error, .. } => {
            if let Some(w) = &mut state.write {
                w.last_error = Some(error.clone());
                w.status = WriteStatus::Refreshing;
                if let (GateWriteKind::Untaint { opened_by }, Some(opened_at), Some(rv)) =
                    (&w.kind, w.opened_at, &w.resource_version)
                {
                    if state.unanswered.len() == MAX_UNANSWERED {
                        state.unanswered.remove(0);
                    }
                    state.unanswered.push(UnansweredUntaint {
                        opened_by: *opened_by,
                        opened_at,
                        resource_version: rv.clone(),
                    });
                }
            }
        }
        Event::WriteDeferred { .. } => {
            with_write(state, |w| w.status = WriteStatus::AwaitingLeader)
        }
        Event::WithdrawRequested { .. } => with_write(state, |w| w.withdrawing = true),
        Event::RetryScheduled { attempt } => with_write(state, |w| {
            w.attempt = *attempt;
            w.status = WriteStatus::Backoff;
        }),
        Event::WriteAbandoned { .. } => {
            state.write = None;
            state.phase = match &state.timed_out {
                Some(t) if t.action.keeps() => Phase::TimedOutKept,
                _ => Phase::Waiting,
            };
        }
        Event::Opened {
            opened_by,
            at,
            resource_version,
        } => {
            state.phase = Phase::Opened;
            state.write = None;
            state.opened = Some(OpenedRecord {
                opened_by: *opened_by,
                at: *at,
                resource_version: resource_version.clone(),
            });
        }
        Event::TimeoutMarked | Event::MarkFound => {
            state.timeout_marked = true;
            state.write = None;
        }
        Event::Stopped { reason } => {
            state.phase = Phase::Gone;
            state.write = None;
            state.stopped = Some(*reason);
        }
    }
}

/// The four events a journal holds most (a pod's status, a member expected,
/// Ready or waiting) with their strings borrowed. [`apply`] folds them through
/// [`fold`], and so does a journal evicting one from its compact form, which
/// then builds no owned strings only to drop them: one fold, whichever form
/// the event comes in. The member is a `Cow` because the journal's form has
/// no `MemberId` to lend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fold<'a> {
    PodStatus {
        pod: &'a str,
        uid: &'a str,
        status: Status<'a>,
    },
    MemberExpected {
        member: Cow<'a, MemberId>,
    },
    MemberReady {
        member: Cow<'a, MemberId>,
        pod: &'a str,
    },
    MemberWaiting {
        member: Cow<'a, MemberId>,
        why: &'a str,
        available_at: Option<Timestamp>,
    },
}

/// A pod's status as [`Event::PodStatusChanged`] carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status<'a> {
    pub(crate) phase: &'a str,
    pub(crate) ready: bool,
    pub(crate) ready_since: Option<Timestamp>,
    pub(crate) terminating: bool,
}

impl<'a> Fold<'a> {
    /// The borrowed form of `ev`, if it is one of the four.
    pub(crate) fn of(ev: &'a Event) -> Option<Self> {
        Some(match ev {
            Event::PodStatusChanged {
                pod,
                uid,
                phase,
                ready,
                ready_since,
                terminating,
            } => Fold::PodStatus {
                pod,
                uid,
                status: Status {
                    phase,
                    ready: *ready,
                    ready_since: *ready_since,
                    terminating: *terminating,
                },
            },
            Event::MemberExpected { member } => Fold::MemberExpected {
                member: Cow::Borrowed(member),
            },
            Event::MemberReady { member, pod } => Fold::MemberReady {
                member: Cow::Borrowed(member),
                pod,
            },
            Event::MemberWaiting {
                member,
                why,
                available_at,
            } => Fold::MemberWaiting {
                member: Cow::Borrowed(member),
                why,
                available_at: *available_at,
            },
            _ => return None,
        })
    }

    /// The event this is the borrowed form of.
    pub(crate) fn into_event(self) -> Event {
        match self {
            Fold::PodStatus { pod, uid, status } => Event::PodStatusChanged {
                pod: pod.into(),
                uid: uid.into(),
                phase: status.phase.into(),
                ready: status.ready,
                ready_since: status.ready_since,
                terminating: status.terminating,
            },
            Fold::MemberExpected { member } => Event::MemberExpected {
                member: member.into_owned(),
            },
            Fold::MemberReady { member, pod } => Event::MemberReady {
                member: member.into_owned(),
                pod: pod.into(),
            },
            Fold::MemberWaiting {
                member,
                why,
                available_at,
            } => Event::MemberWaiting {
                member: member.into_owned(),
                why: why.into(),
                available_at,
            },
        }
    }
}

/// [`apply`] for the events [`Fold`] names.
pub(crate) fn fold(state: &mut GateState, f: Fold<'_>) {
    match f {
        Fold::PodStatus { uid, status, .. } => {
            if let Some(slot) = state.pods.get_mut(uid) {
                set_status(Arc::make_mut(slot), status);
            }
        }
        Fold::MemberExpected { member } => {
            let slot = state.members.entry(member.into_owned());
            slot.or_insert(UNEVALUATED.clone()).expectation = Expectation::Expected;
        }
        Fold::MemberReady { member, pod } => {
            if let Some(m) = state.members.get_mut(&*member) {
                m.readiness = Some(Readiness::Ready { pod: pod.into() });
            }
        }
        Fold::MemberWaiting {
            member,
            why,
            available_at,
        } => {
            if let Some(m) = state.members.get_mut(&*member) {
                m.readiness = Some(Readiness::Waiting {
                    why: why.into(),
                    available_at,
                });
            }
        }
    }
}

/// `apply` for an event that `shared` — the version of a pod the caller
/// holds, shared with the router's index — already embodies: a status-only
/// change of that pod ([`Event::PodStatusChanged`]) makes the state hold
/// `shared` itself, where [`apply`] would edit a copy of the old version into
/// an equal value. Same state by value (a replay, which has only the event,
/// rebuilds it exactly), but no copy of the pod per gate. Here rather than
/// an overwrite after `emit`, so that every change to the state stays in
/// this module: `apply` then an overwrite would clone the pod (the index
/// holds another reference) for nothing on the most frequent input.
pub(super) fn apply_sharing(state: &mut GateState, ev: &Event, shared: &Arc<PodInfo>) {
    let Some(Fold::PodStatus { uid, status, .. }) = Fold::of(ev) else {
        return apply(state, ev);
    };
    match state.pods.get_mut(uid) {
        Some(slot) if *uid == shared.uid => {
            debug_assert!(
                {
                    let mut folded = PodInfo::clone(slot);
                    set_status(&mut folded, status);
                    folded == **shared
                },
                "the shared pod {uid} is not what applying the event gives"
            );
            *slot = Arc::clone(shared);
        }
        _ => apply(state, ev),
    }
}

fn set_status(p: &mut PodInfo, status: Status<'_>) {
    if *p.phase != *status.phase {
        p.phase = status.phase.into();
    }
    p.ready = status.ready;
    p.ready_since = status.ready_since.into();
    p.terminating = status.terminating;
}

fn with_write(state: &mut GateState, change: impl FnOnce(&mut Write)) {
    if let Some(w) = &mut state.write {
        change(w);
    }
}
