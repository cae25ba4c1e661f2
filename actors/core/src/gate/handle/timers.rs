//! Timers: the deadline, a member's availability recheck, and the backoff
//! before a write is retried.

use jiff::Timestamp;

use super::members::MemberScope;
use super::{ReconcileCause, Step};
use crate::gate::event::Event;
use crate::gate::input::TimerKind;
use crate::gate::state::{Phase, WriteStatus};

impl Step<'_> {
    pub(super) fn timer(&mut self, kind: TimerKind, generation: u64) {
        match kind {
            TimerKind::Deadline => {
                // Acted on in any phase: it decides the deadline while
                // Waiting and, like a re-examination, re-sends a write that
                // waits for leadership; elsewhere (an untaint in flight,
                // already timed out) deciding again changes nothing.
                let t = &self.s.timers;
                let Some(at) = t.deadline.filter(|_| t.deadline_generation == generation) else {
                    return;
                };
                if self.now < at {
                    // Fired early (the shell's timer and the clock disagree):
                    // re-arm rather than lose the deadline.
                    self.emit(Event::DeadlineSet {
                        at,
                        generation: generation + 1,
                    });
                } else if self.s.timed_out.is_none()
                    && self.s.phase != Phase::WouldOpen
                    && let Some(judged) = self.s.server_now()
                    && judged < at
                    && let Ok(until) = self.now.checked_add(at.duration_since(judged))
                {
                    // Passed by the local clock but not by the server's, as
                    // far as the evidence shows: the controller's clock is
                    // ahead. Look again when the rest of the gap has passed
                    // (the shell brings fresh evidence with the timer):
                    // `judged` is the server's now as the gate judges it (the
                    // evidence plus the slack).
                    let server = self.s.server_time.unwrap_or(judged);
                    let ahead = self.now.duration_since(server);
                    self.emit(Event::DeadlineHeld {
                        deadline: at,
                        server_time: server,
                        until,
                        generation: generation + 1,
                        reason: format!(
                            "the deadline has not passed by the API server's clock (it read at least {server}): \
                             the controller's clock is ahead of the API server's by {}s",
                            ahead.as_secs()
                        ),
                    });
                }
                self.reconcile(ReconcileCause::Reexamine);
            }
            TimerKind::ScheduleDeadline => {
                let t = &self.s.timers;
                let live = t.schedule_generation == generation;
                let Some(at) = t.schedule_deadline.filter(|_| live) else {
                    return;
                };
                if self.now < at {
                    // Fired early: re-arm rather than lose it.
                    self.emit(Event::ScheduleDeadlineSet {
                        at: Some(at),
                        generation: generation + 1,
                    });
                }
                // Not passed by the server's clock yet: the next
                // re-examination decides it (about every 30 s).
                self.reconcile(ReconcileCause::Reexamine);
            }
            TimerKind::Recheck => {
                if self.s.timers.recheck_generation != generation || self.s.timers.recheck.is_none()
                {
                    return;
                }
                self.emit(Event::RecheckFired { generation });
                self.reconcile(ReconcileCause::Observation);
            }
            TimerKind::Retry => {
                let due = self.s.write.as_ref().is_some_and(|w| {
                    w.status == WriteStatus::Backoff && u64::from(w.attempt) == generation
                });
                if due {
                    self.reconcile(ReconcileCause::RetryDue);
                }
            }
        }
    }

    /// New evidence of the API server's clock. Journalled only while it can
    /// still decide something: a deadline undecided and not yet passed by
    /// the evidence before it (so a gate records a few, not one per look).
    pub(super) fn server_time(&mut self, at: Timestamp) {
        let s = &self.s;
        let matters = s
            .node
            .as_ref()
            .map_or(self.cfg.timeout, |n| self.cfg.timeout_for(n))
            .is_some()
            && s.timed_out.is_none()
            && s.server_time.is_none_or(|old| {
                at > old && s.timers.deadline.is_none_or(|deadline| old < deadline)
            });
        if !matters {
            return;
        }
        self.emit(Event::ServerTimeSeen { at });
        if self.s.node.is_some() {
            self.reconcile_scoped(ReconcileCause::Observation, &MemberScope::Nothing);
        }
    }
}
