//! Deciding whether and how the gate opens, once `reconcile` has brought
//! what it derives up to date: the untaint write, its retries and
//! withdrawal, the timeout and its mark, and the suspension of writes.

use jiff::Timestamp;

use super::{ReconcileCause, Step};
use crate::closing::replacing;
use crate::gate::effect::annotation_time;
use crate::gate::event::{Event, IndexedTaint};
use crate::gate::state::{GateWriteKind, OpenedBy, Phase, WriteStatus};
use crate::gate::{derive, notes};
use crate::vocab::config::OnTimeout;
use crate::vocab::model::Fallback;

impl Step<'_> {
    pub(super) fn managed_taints(&self) -> Vec<IndexedTaint> {
        let taints = self.s.node.iter().flat_map(|n| n.taints.iter().enumerate());
        taints
            .filter(|(_, t)| self.cfg.placement.is_managed(t))
            .map(|(index, taint)| IndexedTaint {
                index,
                taint: taint.clone(),
            })
            .collect()
    }

    /// Decides, in order: whether an opening decided by readiness still
    /// stands, whether the deadline has passed, why the gate would open now,
    /// and then what to write — nothing in a dry run or while suspended.
    pub(super) fn decide_opening(&mut self, cause: ReconcileCause) {
        if self.s.phase == Phase::WouldOpen {
            return;
        }
        // Every expected member Ready, and the node itself too: a node whose
        // Ready condition has just gone Unknown still shows its pods Ready
        // until the lifecycle controller gets to them (semantics.md §5.1).
        let may_open = self.s.may_open_by_ready();
        if !may_open {
            self.drop_ready_opening();
            self.time_out_if_due();
        }
        let open_by = self.opening_cause(may_open);
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
        if self.hold_while_suspended(open_by) || self.resume_writes() {
            return;
        }
        self.write_for(open_by, cause);
    }

    /// An opening decided because everything was Ready no longer stands
    /// once something is not. One waiting to be retried is dropped; one in
    /// flight is withdrawn if the executor has not sent it yet (one already
    /// sent cannot be called back).
    fn drop_ready_opening(&mut self) {
        let ready = GateWriteKind::Untaint {
            opened_by: OpenedBy::Ready,
        };
        let Some(w) = self.s.write.as_ref().filter(|w| w.kind == ready) else {
            return;
        };
        let (in_flight, attempt) = (w.status == WriteStatus::InFlight, w.attempt);
        if in_flight && w.withdrawing {
            return;
        }
        let reason =
            notes::no_longer_all_ready(self.s.node_wait_reason().as_deref(), &self.s.blockers());
        self.emit(if in_flight {
            Event::WithdrawRequested { attempt, reason }
        } else {
            Event::WriteAbandoned { reason }
        });
    }

    /// Times the gate out once its deadline has passed, by the local clock
    /// and by the server's, while it still waits (called only when not every
    /// member is Ready); else at its schedule deadline (`--schedule-timeout`)
    /// if some expected member still has no pod on the node: those members
    /// were never scheduled. Members with a pod, Ready or not, leave it to
    /// the deadline (semantics.md §5.2).
    fn time_out_if_due(&mut self) {
        if self.s.timed_out.is_some() || self.s.phase != Phase::Waiting {
            return;
        }
        // Passed by the server's clock too, as far as the evidence shows
        // (within the slack); without any evidence, by ours (semantics.md §5.3).
        let server = self.s.server_now();
        let due = |at: Option<Timestamp>| {
            at.filter(|&at| self.now >= at && server.is_none_or(|server| server >= at))
        };
        let (deadline, by_schedule, not_ready, node_not_ready) =
            if let Some(deadline) = due(self.s.timers.deadline) {
                (
                    deadline,
                    false,
                    self.s.blockers(),
                    self.s.node_wait_reason(),
                )
            } else if let Some(at) = due(self.s.timers.schedule_deadline) {
                let never = derive::never_scheduled(self.s, self.cfg, self.now);
                if never.is_empty() {
                    // Decided: a pod lost after this (one recreated) is the
                    // deadline's business, not this one's.
                    return self.emit(Event::ScheduleDeadlinePassed { at });
                }
                (at, true, never, None)
            } else {
                return;
            };
        self.emit(Event::TimedOut {
            deadline,
            by_schedule,
            action: self.cfg.on_timeout,
            expected: self.s.expected().count(),
            not_ready,
            node_not_ready,
        });
    }

    /// Why the gate would open now, if it would: a person asked, every
    /// member is Ready, or the deadline passed with `--on-timeout=open`. Or
    /// with `replace`, when the leader refused to replace the node because
    /// its members are broken cluster-wide, with `--replace-fallback=open`:
    /// the node carries `nodegate.dev/replace-fallback: open`, and opens as
    /// by timeout.
    fn opening_cause(&self, may_open: bool) -> Option<OpenedBy> {
        let node = self.s.node.as_deref();
        let falls_back = node.is_some_and(|n| replacing::fallback(n) == Some(Fallback::Open));
        let action = self.s.timed_out.as_ref().map(|t| t.action);
        if node.is_some_and(|n| n.open_requested) {
            Some(OpenedBy::Manual)
        } else if may_open {
            Some(OpenedBy::Ready)
        } else if action == Some(OnTimeout::Open)
            || (action == Some(OnTimeout::Replace) && falls_back)
        {
            Some(OpenedBy::Timeout)
        } else {
            None
        }
    }

    /// A timeout kept (`--on-timeout=keep` or `replace`) whose mark is not
    /// written yet. With `replace` the mark is also what tells the replace
    /// decider that the node is due (semantics.md §5.8).
    fn mark_owed(&self) -> bool {
        self.s.timed_out.as_ref().is_some_and(|t| t.action.keeps()) && !self.s.timeout_marked
    }

    /// The node carries the `timed-out` mark of this gate's deadline
    /// already (as written: to the millisecond).
    fn mark_on_node(&self) -> bool {
        let (Some(t), Some(node)) = (&self.s.timed_out, &self.s.node) else {
            return false;
        };
        node.replace.timed_out == Some(annotation_time(t.deadline))
    }

    /// Suspended: decide and journal, write nothing; an in-flight write is
    /// let finish. Returns whether writes are suspended.
    fn hold_while_suspended(&mut self, open_by: Option<OpenedBy>) -> bool {
        let suspended_by = if self.cfg.suspend {
            "config"
        } else if self.s.node.as_ref().is_some_and(|n| n.suspended) {
            "annotation"
        } else {
            return false;
        };
        let in_flight = matches!(&self.s.write, Some(w) if w.status == WriteStatus::InFlight);
        // A mark the node shows already is not one it would send.
        let mark_done = self.mark_on_node();
        let mark_owed = self.mark_owed() && !mark_done;
        let write_held = (self.s.write.as_ref())
            .is_some_and(|w| !(w.kind == GateWriteKind::MarkTimedOut && mark_done));
        let would_send = open_by.is_some() || mark_owed || write_held;
        if would_send && !in_flight && !self.s.suspended {
            self.emit(Event::WritesSuspended {
                opened_by: open_by,
                by: suspended_by.to_string(),
            });
        }
        true
    }

    /// A suspension lifted: act at once on what the gate finds. A write held
    /// in backoff or behind a re-read missed the input that would have moved
    /// it on, so it is sent now. Returns whether it was.
    fn resume_writes(&mut self) -> bool {
        if !self.s.suspended {
            return false;
        }
        self.emit(Event::WritesResumed);
        let Some(w) = self.s.write.clone() else {
            return false;
        };
        if w.status == WriteStatus::InFlight {
            return false;
        }
        // A mark the node shows is done: the gate decides on (it may open).
        if self.mark_shown() {
            return false;
        }
        self.resend(&w.kind, w.attempt.saturating_add(1));
        true
    }

    /// The gate's write, a mark not in flight, shows on the node already:
    /// the mark is done ([`Self::mark_done`]). Returns whether it was.
    fn mark_shown(&mut self) -> bool {
        let held = (self.s.write.as_ref()).is_some_and(|w| {
            w.kind == GateWriteKind::MarkTimedOut && w.status != WriteStatus::InFlight
        });
        if !held || !self.mark_on_node() {
            return false;
        }
        self.mark_done();
        true
    }

    /// The mark the gate owes shows on the node. If no mark of this gate
    /// went unanswered, none of its own was applied (each was refused for
    /// leadership, or failed outright): the mark is another replica's, or
    /// this replica's before a restart, and was reported by whoever wrote
    /// it. Else it may be this gate's own, and is reported here (at worst a
    /// second time).
    fn mark_done(&mut self) {
        self.emit(if self.s.mark_unanswered {
            Event::TimeoutMarked
        } else {
            Event::MarkFound
        });
    }

    /// Starts, replaces or moves on the gate's one write, given why it would
    /// open (`open_by`) and why `reconcile` runs.
    fn write_for(&mut self, open_by: Option<OpenedBy>, cause: ReconcileCause) {
        if open_by.is_none() && self.mark_shown() {
            return;
        }
        match (open_by, self.s.write.clone()) {
            (Some(opened_by), None) => self.send_untaint(opened_by, 1),
            (Some(opened_by), Some(w)) if w.kind == GateWriteKind::MarkTimedOut => {
                // The mark no longer matters once the node can open; an
                // in-flight one is let finish first (one write at a time).
                if w.status != WriteStatus::InFlight {
                    self.emit(Event::WriteAbandoned {
                        reason: "opening instead".to_string(),
                    });
                    self.send_untaint(opened_by, 1);
                }
            }
            // An outstanding write moves on when `cause` is the one it waits for.
            (_, Some(w)) => {
                let next = match (w.status, cause) {
                    (WriteStatus::Backoff, ReconcileCause::RetryDue) => w.attempt,
                    // Not only on LeadershipGained: that one message may never come
                    // (a lapse the elector did not see), so the periodic
                    // re-examination and the deadline re-send too. A follower's
                    // executor refuses again at no cost.
                    (
                        WriteStatus::AwaitingLeader,
                        ReconcileCause::Leadership | ReconcileCause::Reexamine,
                    ) => w.attempt.saturating_add(1),
                    (WriteStatus::Refreshing, ReconcileCause::Refreshed) => {
                        return self.emit(Event::RetryScheduled {
                            attempt: w.attempt.saturating_add(1),
                        });
                    }
                    _ => return,
                };
                self.resend(&w.kind, next);
            }
            (None, None) if self.mark_owed() => {
                if self.mark_on_node() {
                    self.mark_done();
                } else {
                    self.emit(Event::MarkSent { attempt: 1 });
                }
            }
            (None, None) => {}
        }
    }

    fn resend(&mut self, kind: &GateWriteKind, attempt: u32) {
        match *kind {
            GateWriteKind::Untaint { opened_by } => self.send_untaint(opened_by, attempt),
            GateWriteKind::MarkTimedOut => self.emit(Event::MarkSent { attempt }),
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
