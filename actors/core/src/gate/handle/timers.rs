//! Timers: the deadline, a member's availability recheck, and the backoff
//! before a write is retried.

use super::{Decider, Trigger};
use crate::gate::event::Event;
use crate::gate::input::TimerKind;
use crate::gate::state::WriteStatus;

impl Decider<'_> {
    pub(super) fn timer(&mut self, kind: TimerKind, generation: u64) {
        match kind {
            TimerKind::Deadline => {
                // Acted on in any phase: it decides the deadline while
                // Waiting and, like a re-examination, re-sends a write that
                // waits for leadership; elsewhere (an untaint in flight,
                // already timed out) deciding again changes nothing.
                let t = &self.s.timers;
                if t.deadline_generation != generation {
                    return;
                }
                let Some(at) = t.deadline else { return };
                if self.now < at {
                    // Fired early (the shell's timer and the clock disagree):
                    // re-arm rather than lose the deadline.
                    self.emit(Event::DeadlineSet {
                        at,
                        generation: generation + 1,
                    });
                }
                self.reconcile(Trigger::Reexamine);
            }
            TimerKind::Recheck => {
                if self.s.timers.recheck_generation != generation || self.s.timers.recheck.is_none()
                {
                    return;
                }
                self.emit(Event::RecheckFired { generation });
                self.reconcile(Trigger::Observation);
            }
            TimerKind::Retry => {
                let due = self.s.write.as_ref().is_some_and(|w| {
                    w.status == WriteStatus::Backoff && u64::from(w.attempt) == generation
                });
                if due {
                    self.reconcile(Trigger::RetryDue);
                }
            }
        }
    }
}
