//! The trace exporter's series: spans exported, and spans dropped — the
//! queue was full (the collector is slower than the gates) or the
//! collector refused or never answered the export.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Label, reg, word_enum};

word_enum! {
    /// Why spans were dropped.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum SpanDrop {
        QueueFull = "queue_full",
        ExportFailed = "export_failed",
    }
}

impl SpanDrop {
    fn labels(self) -> Label {
        [("reason", self.as_str())]
    }
}

/// Cheap to clone: the counters are shared.
#[derive(Clone)]
pub struct TraceMetrics {
    exported: Counter,
    dropped: Family<Label, Counter>,
}

impl TraceMetrics {
    pub(super) fn register(r: &mut Registry) -> TraceMetrics {
        let m = TraceMetrics {
            exported: reg(
                r,
                "trace_spans_exported",
                "Gate trace spans the OTLP collector accepted (--otlp-endpoint)",
            ),
            dropped: reg(
                r,
                "trace_spans_dropped",
                "Gate trace spans not exported, by reason: queue_full (the exporter fell behind; gates never wait for it) or export_failed (the collector refused or did not answer)",
            ),
        };
        for reason in SpanDrop::ALL {
            m.dropped.get_or_create_owned(&reason.labels());
        }
        m
    }

    pub fn exported(&self, spans: usize) {
        self.exported.inc_by(spans as u64);
    }

    pub fn dropped(&self, reason: SpanDrop, spans: usize) {
        self.dropped
            .get_or_create(&reason.labels())
            .inc_by(spans as u64);
    }

    /// Spans dropped for `reason` so far.
    pub fn dropped_count(&self, reason: SpanDrop) -> u64 {
        self.dropped.get_or_create(&reason.labels()).get()
    }
}
