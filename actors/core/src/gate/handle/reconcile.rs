//! Reconciling, the step every input ends in: re-derive what follows from
//! what the gate has seen (members, deadline, recheck), then let `opening`
//! decide whether and how the gate opens.

use jiff::SignedDuration;

use super::members::MemberScope;
use super::{ReconcileCause, Step};
use crate::gate::event::Event;
use crate::gate::state::{GateWriteKind, Phase, StopReason, WriteStatus};
use crate::vocab::member::Readiness;

impl Step<'_> {
    /// Re-derives everything that follows from what the gate has seen, and
    /// decides. Safe to run on any input: with nothing new it emits nothing.
    pub(super) fn reconcile(&mut self, cause: ReconcileCause) {
        self.reconcile_scoped(cause, &MemberScope::All);
    }

    /// `reconcile`, re-deriving only the members `scope` names.
    pub(super) fn reconcile_scoped(&mut self, cause: ReconcileCause, scope: &MemberScope<'_>) {
        if self.s.is_finished() {
            return;
        }
        let untaint_in_flight = self.s.write.as_ref().is_some_and(|w| {
            matches!(w.kind, GateWriteKind::Untaint { .. }) && w.status == WriteStatus::InFlight
        });
        // Our own patch may already show in the watch before its response
        // arrives; while it is in flight the response decides. Once no patch
        // is in flight, the taints gone with an `opened-at` one of ours wrote
        // whose answer was lost is our opening; with an `opened-at` other than
        // the one last seen with the taint on and an `opened-by` of
        // nodegate's, another replica's; anything else is another writer's.
        if !self.has_managed_taint() {
            if !untaint_in_flight {
                let node = self.s.node.as_ref();
                let shown = node.and_then(|n| n.opened_at);
                let by_replica = node.is_some_and(|n| n.opened_by_nodegate().is_some())
                    && shown.is_some()
                    && shown != self.s.closed_opened_at;
                let mut unanswered = self.s.unanswered.iter();
                match unanswered.rfind(|u| Some(u.opened_at) == shown).cloned() {
                    Some(u) => self.emit(Event::Opened {
                        opened_by: u.opened_by,
                        at: u.opened_at,
                        resource_version: u.resource_version,
                    }),
                    None if by_replica => self.stop(StopReason::OpenedByAnotherReplica),
                    None => self.stop(StopReason::TaintRemovedElsewhere),
                }
            }
            // With our taint gone, DaemonSets that wait for it to go would
            // show up as expected: nothing worth recomputing.
            return;
        }
        let shown = self.s.node.as_ref().and_then(|n| n.opened_at);
        if shown != self.s.closed_opened_at {
            self.emit(Event::OpenedAtSeenClosed { opened_at: shown });
        }
        self.recompute_members(scope);
        self.recompute_deadline();
        self.recompute_schedule_deadline();
        self.recompute_recheck();
        self.decide_opening(cause);
    }

    pub(super) fn has_managed_taint(&self) -> bool {
        self.s
            .node
            .as_ref()
            .is_some_and(|n| n.taints.iter().any(|t| self.cfg.placement.is_managed(t)))
    }

    pub(super) fn recompute_deadline(&mut self) {
        let Some(timeout) = self.s.node.as_ref().and_then(|n| self.cfg.timeout_for(n)) else {
            return;
        };
        // A `gated-since` later than the server's now (by the evidence, or by
        // the local clock without any) is clamped to that now, once per value:
        // an agent's clock ahead must not put the deadline off (semantics.md §5.3).
        let now = self.s.server_now().unwrap_or(self.now);
        let clamp = self.s.gated_since_clamp;
        let since = self.s.node.as_ref().and_then(|n| n.gated_since);
        if let Some(since) = since.filter(|&s| s > now && clamp.is_none_or(|c| c.gated_since != s))
        {
            self.emit(Event::GatedSinceClamped {
                gated_since: since,
                to: now,
            });
        }
        // A timeout too large to add is no deadline at all.
        let timeout = SignedDuration::try_from(timeout).ok();
        let Some(at) = (self.s.gate_start().zip(timeout)).and_then(|(s, d)| s.checked_add(d).ok())
        else {
            return;
        };
        if self.s.timers.deadline != Some(at) {
            let generation = self.s.timers.deadline_generation + 1;
            self.emit(Event::DeadlineSet { at, generation });
        }
    }

    /// The schedule deadline: the gate's start plus `--schedule-timeout`,
    /// kept only while it is earlier than the deadline (semantics.md §5.2).
    /// Counted from the gate's start like the deadline, so no pod resets it.
    pub(super) fn recompute_schedule_deadline(&mut self) {
        let deadline = self.s.timers.deadline;
        let at = self
            .cfg
            .schedule_timeout
            .filter(|_| self.s.node.is_some())
            .and_then(|t| SignedDuration::try_from(t).ok())
            .zip(self.s.gate_start())
            .and_then(|(t, start)| start.checked_add(t).ok())
            .filter(|at| deadline.is_none_or(|d| *at < d))
            .filter(|at| self.s.timers.schedule_passed != Some(*at));
        if self.s.timers.schedule_deadline != at {
            let generation = self.s.timers.schedule_generation + 1;
            self.emit(Event::ScheduleDeadlineSet { at, generation });
        }
    }

    pub(super) fn recompute_recheck(&mut self) {
        if !matches!(self.s.phase, Phase::Waiting | Phase::TimedOutKept) {
            return;
        }
        let next = self
            .s
            .expected()
            .filter_map(|(_, m)| match &m.readiness {
                Some(Readiness::Waiting { available_at, .. }) => *available_at,
                _ => None,
            })
            .min();
        // No recheck needed: a pending one is left to fire and find nothing.
        if let Some(at) = next
            && self.s.timers.recheck != Some(at)
        {
            let generation = self.s.timers.recheck_generation + 1;
            self.emit(Event::RecheckScheduled { at, generation });
        }
    }
}
