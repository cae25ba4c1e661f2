//! Where a node write's time goes, split in two: the wait for a patch slot
//! and a rate token before it is sent, and the API server's answer after.
//! Read beside `nodegate_reaction_seconds`, they say how much of a reaction
//! is nodegate queueing its own writes and how much the API server.

use std::time::Duration;

use nodegate_core::gate::PatchOutcome;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{Label, reg_with, word_enum};

word_enum! {
    /// What a node write is for, as the series label it: `add_taint` is an
    /// entrance or a re-gate, `patch` a condition rule's taint. The write
    /// timings use all four, `nodegate_patch_attempts_total` the gate's two.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum NodeWrite {
        Untaint = "untaint",
        MarkTimedOut = "mark_timed_out",
        AddTaint = "add_taint",
        Patch = "patch",
    }
}

/// The `result` label of a patch attempt; `None` for a write that was never
/// sent (this replica is not the leader, or the gate withdrew it).
pub fn patch_result(outcome: &PatchOutcome) -> Option<&'static str> {
    match outcome {
        PatchOutcome::Applied => Some("ok"),
        PatchOutcome::Conflict => Some("conflict"),
        PatchOutcome::NotFound => Some("not_found"),
        PatchOutcome::Failed(_) | PatchOutcome::Ambiguous(_) => Some("error"),
        // A replace write's own answers: no counted patch gets one.
        PatchOutcome::OwnerDeleted(_) => Some("ok"),
        PatchOutcome::OwnerFailed(_) | PatchOutcome::NoOwner(_) => Some("error"),
        PatchOutcome::NotLeader | PatchOutcome::Withdrawn => None,
    }
}

pub(super) const PATCH_RESULTS: [&str; 4] = ["ok", "conflict", "not_found", "error"];

fn buckets() -> Histogram {
    // 1 ms to ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// Event seen → untaint sent: 50 µs to 5 s, finest below 10 ms, where the
/// target (p50 ≤ 1 ms, p99 ≤ 10 ms) is read.
const EVENT_TO_PATCH_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05,
    0.1, 0.5, 1.0, 5.0,
];

pub struct WriteTimings {
    wait: Family<Label, Histogram, fn() -> Histogram>,
    request: Family<Label, Histogram, fn() -> Histogram>,
    event_to_patch: Histogram,
}

impl WriteTimings {
    pub(super) fn register(r: &mut Registry) -> WriteTimings {
        let m = WriteTimings {
            event_to_patch: reg_with(
                r,
                "event_to_patch_seconds",
                "nodegate's own share of a reaction: the pod watch event that woke a gate reaching the router → the untaint it caused sent (slot and token wait included); openings a pod event caused",
                Histogram::new(EVENT_TO_PATCH_BUCKETS),
            ),
            wait: reg_with(
                r,
                "write_wait_seconds",
                "Time a node write waited for a patch slot (--max-concurrent-patches) and a rate token (--kube-qps) before it was sent, by kind",
                Family::new_with_constructor(buckets),
            ),
            request: reg_with(
                r,
                "write_request_seconds",
                "Time from sending a node write to its answer (or to giving up after --kube-request-timeout), by kind",
                Family::new_with_constructor(buckets),
            ),
        };
        for kind in NodeWrite::ALL {
            let labels = [("kind", kind.as_str())];
            m.wait.get_or_create_owned(&labels);
            m.request.get_or_create_owned(&labels);
        }
        m
    }

    /// One untaint a pod event caused went out, `took` after the event
    /// reached the router.
    pub fn event_to_patch(&self, took: Duration) {
        self.event_to_patch.observe(took.as_secs_f64());
    }

    /// One write: how long it waited before it was sent, and how long the
    /// request took once sent (`None` when it was never sent).
    pub fn observe(&self, kind: NodeWrite, waited: Duration, request: Option<Duration>) {
        let labels = [("kind", kind.as_str())];
        self.wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
        if let Some(r) = request {
            self.request.get_or_create(&labels).observe(r.as_secs_f64());
        }
    }
}
