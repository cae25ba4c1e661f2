//! Reconciling: after every input, re-derive what follows from what the gate
//! has seen (members, deadline, recheck) and decide whether and how it opens —
//! the untaint write, its retries and withdrawal, the timeout and its mark.

use jiff::SignedDuration;

use super::members::Scope;
use super::{Decider, Trigger};
use crate::gate::config::OnTimeout;
use crate::gate::event::{Event, IndexedTaint};
use crate::gate::member::Readiness;
use crate::gate::notes;
use crate::gate::state::{
    OpenedBy, Phase, StopReason, UnansweredUntaint, Write, WriteKind, WriteStatus,
};

impl Decider<'_> {
    pub(super) fn managed_taints(&self) -> Vec<IndexedTaint> {
        let Some(node) = &self.s.node else {
            return Vec::new();
        };
        node.taints
            .iter()
            .enumerate()
            .filter(|(_, t)| self.cfg.placement.is_managed(t))
            .map(|(index, taint)| IndexedTaint {
                index,
                taint: taint.clone(),
            })
            .collect()
    }

    /// Re-derives everything that follows from what the gate has seen, and
    /// decides. Safe to run on any input: with nothing new it emits nothing.
    pub(super) fn reconcile(&mut self, trigger: Trigger) {
        self.reconcile_scoped(trigger, &Scope::All);
    }

    /// `reconcile`, re-deriving only the members `scope` names.
    pub(super) fn reconcile_scoped(&mut self, trigger: Trigger, scope: &Scope<'_>) {
        if self.s.is_finished() {
            return;
        }
        let untaint_in_flight = self.s.write.as_ref().is_some_and(|w| {
            matches!(w.kind, WriteKind::Untaint { .. }) && w.status == WriteStatus::InFlight
        });
        // Our own patch may already show in the watch before its response
        // arrives; while it is in flight the response decides. Once no patch
        // is in flight, the taints gone with an `opened-at` one of ours wrote
        // whose answer was lost is our opening; anything else is another
        // writer's.
        if !self.has_managed_taint() {
            if !untaint_in_flight {
                match self.own_unanswered_opening() {
                    Some(u) => self.emit(Event::Opened {
                        opened_by: u.opened_by,
                        at: u.opened_at,
                        resource_version: u.resource_version,
                    }),
                    None => self.emit(Event::Stopped {
                        reason: StopReason::TaintRemovedElsewhere,
                    }),
                }
            }
            // With our taint gone, DaemonSets that wait for it to go would
            // show up as expected: nothing worth recomputing.
            return;
        }
        self.recompute_members(scope);
        self.recompute_deadline();
        self.recompute_recheck();
        self.decide_opening(trigger);
    }

    /// The unanswered untaint whose `nodegate.dev/opened-at` the node shows,
    /// if any: that patch was applied.
    fn own_unanswered_opening(&self) -> Option<UnansweredUntaint> {
        let shown = self.s.node.as_ref()?.opened_at?;
        self.s
            .unanswered
            .iter()
            .rev()
            .find(|u| u.opened_at == shown)
            .cloned()
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
        self.clamp_gated_since();
        let Some(start) = self.s.gate_start() else {
            return;
        };
        // A timeout too large to add is no deadline at all.
        let Some(at) = SignedDuration::try_from(timeout)
            .ok()
            .and_then(|d| start.checked_add(d).ok())
        else {
            return;
        };
        if self.s.timers.deadline != Some(at) {
            let generation = self.s.timers.deadline_generation + 1;
            self.emit(Event::DeadlineSet { at, generation });
        }
    }

    /// A `gated-since` later than the server's now (by the evidence, or by
    /// the local clock without any) is clamped to that now, once per value:
    /// an agent's clock ahead must not put the deadline off (semantics.md §5.3).
    fn clamp_gated_since(&mut self) {
        let Some(since) = self.s.node.as_ref().and_then(|n| n.gated_since) else {
            return;
        };
        if self
            .s
            .gated_since_clamp
            .is_some_and(|c| c.gated_since == since)
        {
            return;
        }
        let now = self.s.server_now().unwrap_or(self.now);
        if since > now {
            self.emit(Event::GatedSinceClamped {
                gated_since: since,
                to: now,
            });
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
                Some(Readiness::Waiting {
                    available_at: Some(at),
                    ..
                }) => Some(*at),
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

    pub(super) fn decide_opening(&mut self, trigger: Trigger) {
        if self.s.phase == Phase::WouldOpen {
            return;
        }
        // Every expected member Ready, and the node itself too: a node whose
        // Ready condition has just gone Unknown still shows its pods Ready
        // until the lifecycle controller gets to them (semantics.md §5.1).
        let may_open = self.s.may_open_by_ready();

        // An opening decided because everything was Ready no longer stands
        // once something is not. One waiting to be retried is dropped; one in
        // flight is withdrawn if the executor has not sent it yet (one already
        // sent cannot be called back).
        if !may_open
            && let Some(w) = &self.s.write
            && w.kind
                == (WriteKind::Untaint {
                    opened_by: OpenedBy::Ready,
                })
        {
            let (in_flight, withdrawing, attempt) =
                (w.status == WriteStatus::InFlight, w.withdrawing, w.attempt);
            let reason = || {
                notes::no_longer_all_ready(self.s.node_wait_reason().as_deref(), &self.s.blockers())
            };
            if !in_flight {
                let reason = reason();
                self.emit(Event::WriteAbandoned { reason });
            } else if !withdrawing {
                let reason = reason();
                self.emit(Event::WithdrawRequested { attempt, reason });
            }
        }

        if !may_open
            && self.s.timed_out.is_none()
            && matches!(self.s.phase, Phase::Waiting)
            && let Some(deadline) = self.s.timers.deadline
            && self.now >= deadline
            && self.s.server_reached(deadline)
        {
            let not_ready = self.s.blockers();
            let expected = self.s.expected().count();
            self.emit(Event::TimedOut {
                deadline,
                action: self.cfg.on_timeout,
                expected,
                not_ready,
                node_not_ready: self.s.node_wait_reason(),
            });
        }

        let node = self.s.node.as_ref();
        let open_by = if node.is_some_and(|n| n.open_requested) {
            Some(OpenedBy::Manual)
        } else if may_open {
            Some(OpenedBy::Ready)
        } else if self
            .s
            .timed_out
            .as_ref()
            .is_some_and(|t| t.action == OnTimeout::Open)
        {
            Some(OpenedBy::Timeout)
        } else {
            None
        };

        if self.cfg.dry_run {
            if let Some(opened_by) = open_by {
                let taints = self.managed_taints();
                self.emit(Event::WouldOpen {
                    opened_by,
                    taints,
                    at: self.now,
                });
            }
            return;
        }

        // Suspended: decide and journal, write nothing; an in-flight write
        // is let finish. Lifted: act at once on what the gate finds.
        let suspended_by = if self.cfg.suspend {
            Some("config")
        } else if self.s.node.as_ref().is_some_and(|n| n.suspended) {
            Some("annotation")
        } else {
            None
        };
        if let Some(by) = suspended_by {
            let keep_mark = self
                .s
                .timed_out
                .as_ref()
                .is_some_and(|t| t.action == OnTimeout::Keep)
                && !self.s.timeout_marked;
            let in_flight = self
                .s
                .write
                .as_ref()
                .is_some_and(|w| w.status == WriteStatus::InFlight);
            let would_send = open_by.is_some() || keep_mark || self.s.write.is_some();
            if would_send && !in_flight && !self.s.suspended {
                self.emit(Event::WritesSuspended {
                    opened_by: open_by,
                    by: by.to_string(),
                });
            }
            return;
        }
        if self.s.suspended {
            self.emit(Event::WritesResumed);
            // A write held in backoff or behind a re-read missed the input
            // that would have moved it on: send it now.
            if let Some(w) = self.s.write.clone()
                && w.status != WriteStatus::InFlight
            {
                let attempt = w.attempt.saturating_add(1);
                return match w.kind {
                    WriteKind::Untaint { opened_by } => self.send_untaint(opened_by, attempt),
                    WriteKind::MarkTimedOut => self.emit(Event::MarkSent { attempt }),
                };
            }
        }

        match (open_by, self.s.write.clone()) {
            (Some(opened_by), None) => self.send_untaint(opened_by, 1),
            (Some(opened_by), Some(w)) if w.kind == WriteKind::MarkTimedOut => {
                // The mark no longer matters once the node can open; an
                // in-flight one is let finish first (one write at a time).
                if w.status != WriteStatus::InFlight {
                    self.emit(Event::WriteAbandoned {
                        reason: "opening instead".to_string(),
                    });
                    self.send_untaint(opened_by, 1);
                }
            }
            (_, Some(w)) => self.advance_write(&w, trigger),
            (None, None) => {
                if self
                    .s
                    .timed_out
                    .as_ref()
                    .is_some_and(|t| t.action == OnTimeout::Keep)
                    && !self.s.timeout_marked
                {
                    self.emit(Event::MarkSent { attempt: 1 });
                }
            }
        }
    }

    /// Moves an outstanding write on when the trigger is the one it waits for.
    pub(super) fn advance_write(&mut self, w: &Write, trigger: Trigger) {
        let next = match (w.status, trigger) {
            (WriteStatus::Backoff, Trigger::RetryDue) => w.attempt,
            // Not only on LeadershipGained: that one message may never come
            // (a lapse the elector did not see), so the periodic
            // re-examination and the deadline re-send too. A follower's
            // executor refuses again at no cost.
            (WriteStatus::AwaitingLeader, Trigger::Leadership | Trigger::Reexamine) => {
                w.attempt.saturating_add(1)
            }
            (WriteStatus::Refreshing, Trigger::Refreshed) => {
                return self.emit(Event::RetryScheduled {
                    attempt: w.attempt.saturating_add(1),
                });
            }
            _ => return,
        };
        match w.kind {
            WriteKind::Untaint { opened_by } => self.send_untaint(opened_by, next),
            WriteKind::MarkTimedOut => self.emit(Event::MarkSent { attempt: next }),
        }
    }

    pub(super) fn send_untaint(&mut self, opened_by: OpenedBy, attempt: u32) {
        let taints = self.managed_taints();
        let Some(node) = &self.s.node else { return };
        let resource_version = node.resource_version.clone();
        self.emit(Event::UntaintSent {
            attempt,
            opened_by,
            resource_version,
            taints,
            at: self.now,
        });
    }
}
