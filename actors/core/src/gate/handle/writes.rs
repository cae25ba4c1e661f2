//! The results of the gate's writes: untaint patches, timed-out marks, and
//! the node re-read after a conflict.

use std::sync::Arc;

use super::{ReconcileCause, Step};
use crate::gate::event::Event;
use crate::gate::input::PatchOutcome;
use crate::gate::state::{GateWriteKind, StopReason, WriteStatus};
use crate::vocab::model::NodeInfo;

impl Step<'_> {
    /// The answer to the write in flight: an untaint's (`PatchResult`,
    /// `untaint`) or a timed-out mark's (`MarkResult`).
    pub(super) fn write_result(&mut self, outcome: &PatchOutcome, untaint: bool) {
        let Some(w) = &self.s.write else { return };
        let opened_by = match w.kind {
            GateWriteKind::Untaint { opened_by } => Some(opened_by),
            GateWriteKind::MarkTimedOut => None,
        };
        if opened_by.is_some() != untaint || w.status != WriteStatus::InFlight {
            return;
        }
        let attempt = w.attempt;
        match (outcome, opened_by) {
            (PatchOutcome::Applied, Some(opened_by)) => {
                let resource_version = w.resource_version.clone().unwrap_or_default();
                return self.emit(Event::Opened {
                    opened_by,
                    at: self.now,
                    resource_version,
                });
            }
            (PatchOutcome::Applied, None) => self.emit(Event::TimeoutMarked),
            (PatchOutcome::NotFound, _) => return self.stop(StopReason::NodeNotFound),
            (PatchOutcome::NotLeader, _) => self.emit(Event::WriteDeferred { attempt }),
            (PatchOutcome::Conflict, Some(_)) => self.emit(Event::WriteConflict { attempt }),
            // An untaint may have been applied: look at the node before
            // retrying (a re-read that shows it opened ends the gate as
            // opened, see `reconcile_scoped`), as after a conflict.
            (PatchOutcome::Ambiguous(error), Some(_)) => self.emit(Event::WriteUnanswered {
                attempt,
                error: error.clone(),
            }),
            (PatchOutcome::Withdrawn, Some(_)) => self.emit(Event::WriteAbandoned {
                reason: "withdrawn before it was sent".to_string(),
            }),
            // Only an untaint is ever withdrawn; a mark answered so was not
            // written, so it is sent again like a deferred one.
            (PatchOutcome::Withdrawn, None) => self.emit(Event::RetryScheduled {
                attempt: attempt.saturating_add(1),
            }),
            // The mark is an unconditional merge patch: a conflict is just a
            // failure worth retrying, and so is a lost answer (sending the
            // same annotation twice is harmless), remembered: the mark may
            // have been applied.
            (PatchOutcome::Conflict, None) => self.fail_and_retry(attempt, "conflict".to_string()),
            (PatchOutcome::Ambiguous(error), None) => {
                let error = error.clone();
                self.retry_after(Event::MarkUnanswered { attempt, error }, attempt);
            }
            // The last three are a replace write's own: no untaint or mark
            // gets one.
            (
                PatchOutcome::Failed(error)
                | PatchOutcome::OwnerDeleted(error)
                | PatchOutcome::OwnerFailed(error)
                | PatchOutcome::NoOwner(error),
                _,
            ) => self.fail_and_retry(attempt, error.clone()),
        }
        self.reconcile(ReconcileCause::Observation);
    }

    pub(super) fn refreshed(&mut self, result: &Result<Option<NodeInfo>, String>) {
        match result {
            Ok(None) => self.stop(StopReason::NodeNotFound),
            Ok(Some(node)) => {
                if self.is_this_node(&node.name) {
                    self.observe_node(&Arc::new(node.clone()));
                }
                self.reconcile(ReconcileCause::Refreshed);
            }
            Err(error) => {
                if let Some(w) = &self.s.write
                    && w.status == WriteStatus::Refreshing
                {
                    self.fail_and_retry(w.attempt, format!("re-reading the node: {error}"));
                }
                self.reconcile(ReconcileCause::Observation);
            }
        }
    }
    /// Attempt `attempt` failed with `error`: the next one after a backoff.
    fn fail_and_retry(&mut self, attempt: u32, error: String) {
        self.retry_after(Event::WriteFailed { attempt, error }, attempt);
    }

    /// `outcome` (how attempt `attempt` ended), then the next attempt after
    /// a backoff.
    fn retry_after(&mut self, outcome: Event, attempt: u32) {
        self.emit(outcome);
        self.emit(Event::RetryScheduled {
            attempt: attempt.saturating_add(1),
        });
    }
}
