//! Where a node write's time goes, split in two: the wait for a patch slot
//! and a rate token before it is sent, and the API server's answer after.
//! Read beside `nodegate_reaction_seconds`, they say how much of a reaction
//! is nodegate queueing its own writes and how much the API server.

use std::time::Duration;

use nodegate_core::gate::PatchOutcome;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// What a node write is for, as the series label it: `untaint`,
/// `mark_timed_out`, `add_taint` (an entrance or a re-gate) or `patch` (a
/// condition rule's taint). The metrics' one name for a kind of node write:
/// the write timings use all four, `nodegate_patch_attempts_total` the
/// gate's own two (`untaint`, `mark_timed_out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeWrite {
    Untaint,
    MarkTimedOut,
    AddTaint,
    Patch,
}

impl NodeWrite {
    pub const ALL: [NodeWrite; 4] = [
        NodeWrite::Untaint,
        NodeWrite::MarkTimedOut,
        NodeWrite::AddTaint,
        NodeWrite::Patch,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeWrite::Untaint => "untaint",
            NodeWrite::MarkTimedOut => "mark_timed_out",
            NodeWrite::AddTaint => "add_taint",
            NodeWrite::Patch => "patch",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

fn buckets() -> Histogram {
    // 1 ms to ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

pub struct WriteTimings {
    wait: Family<KindLabels, Histogram, fn() -> Histogram>,
    request: Family<KindLabels, Histogram, fn() -> Histogram>,
}

impl WriteTimings {
    pub(super) fn register(registry: &mut Registry) -> WriteTimings {
        let m = WriteTimings {
            wait: Family::new_with_constructor(buckets),
            request: Family::new_with_constructor(buckets),
        };
        registry.register(
            "write_wait_seconds",
            "Time a node write waited for a patch slot (--max-concurrent-patches) and a rate token (--kube-qps) before it was sent, by kind",
            m.wait.clone(),
        );
        registry.register(
            "write_request_seconds",
            "Time from sending a node write to its answer (or to giving up after --kube-request-timeout), by kind",
            m.request.clone(),
        );
        for kind in NodeWrite::ALL {
            m.wait.get_or_create_owned(&KindLabels {
                kind: kind.as_str(),
            });
            m.request.get_or_create_owned(&KindLabels {
                kind: kind.as_str(),
            });
        }
        m
    }

    /// One write: how long it waited before it was sent, and how long the
    /// request took once sent (`None` when it was never sent).
    pub fn observe(&self, kind: NodeWrite, waited: Duration, request: Option<Duration>) {
        let labels = KindLabels {
            kind: kind.as_str(),
        };
        self.wait
            .get_or_create(&labels)
            .observe(waited.as_secs_f64());
        if let Some(r) = request {
            self.request.get_or_create(&labels).observe(r.as_secs_f64());
        }
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
        PatchOutcome::NotLeader | PatchOutcome::Withdrawn => None,
    }
}
