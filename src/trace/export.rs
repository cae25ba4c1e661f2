//! Sending the gates' traces to an OTLP collector without ever holding up a
//! gate: a bounded queue fed with `try_send` (a full one drops and counts),
//! drained by one task; see docs/development.md, "The export queue".

use std::time::Duration;

use nodegate_core::gate::GateState;
use nodegate_core::gate::journal::Journal;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::trace::SpanExporter as _;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::build::{GateTrace, gate_trace};
use super::config::TraceConfig;
use super::spans::{scope, span_data};
use crate::serve::metrics::{SpanDrop, TraceMetrics};

/// How many gates' traces may wait for the exporter: a scale-up of this many
/// nodes opening while the collector is slow loses nothing.
pub const QUEUE: usize = 4096;

/// A batch takes no further trace once it has this many spans (a trace is
/// never split, so one request may carry more).
pub const MAX_BATCH: usize = 512;

/// How long shutdown waits for the queue to drain.
const DRAIN: Duration = Duration::from_secs(3);

/// Where the gate observer puts finished gates' traces. Cheap to call:
/// builds the plan and `try_send`s it.
pub struct TraceSink {
    queue: mpsc::Sender<GateTrace>,
    metrics: TraceMetrics,
}

impl TraceSink {
    /// A gate stopped: queue its trace if it opened.
    pub fn gate_stopped(&self, state: &GateState, journal: &Journal) {
        let Some(trace) = gate_trace(state, journal) else {
            return;
        };
        let spans = trace.span_count();
        if self.queue.try_send(trace).is_err() {
            self.metrics.dropped(SpanDrop::QueueFull, spans);
        }
    }
}

/// Starts the exporter task for `config`; the sink feeds it. The task ends
/// when `shutdown` turns true, after a last drain.
pub fn start(
    config: TraceConfig,
    metrics: TraceMetrics,
    shutdown: watch::Receiver<bool>,
) -> (TraceSink, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let task = tokio::spawn(run(config, rx, metrics.clone(), shutdown));
    (TraceSink { queue: tx, metrics }, task)
}

async fn run(
    config: TraceConfig,
    mut queue: mpsc::Receiver<GateTrace>,
    metrics: TraceMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut exporter = config.exporter;
    exporter.set_resource(&config.resource);
    let scope = scope();
    loop {
        let first = tokio::select! {
            t = queue.recv() => t,
            _ = shutdown.wait_for(|stop| *stop) => None,
        };
        let Some(first) = first else { break };
        export(&exporter, batch(first, &mut queue, &scope), &metrics).await;
    }
    // Whatever is still queued gets one bounded chance.
    let drain = async {
        while let Ok(first) = queue.try_recv() {
            export(&exporter, batch(first, &mut queue, &scope), &metrics).await;
        }
    };
    if tokio::time::timeout(DRAIN, drain).await.is_err() {
        let left = std::iter::from_fn(|| queue.try_recv().ok()).map(|t| t.span_count());
        metrics.dropped(SpanDrop::ExportFailed, left.sum());
    }
    let _ = exporter.shutdown();
}

/// `first` and whatever else is queued, up to [`MAX_BATCH`] spans (a trace
/// is never split).
fn batch(
    first: GateTrace,
    queue: &mut mpsc::Receiver<GateTrace>,
    scope: &InstrumentationScope,
) -> Vec<SpanData> {
    let mut spans = span_data(&first, scope);
    while spans.len() < MAX_BATCH
        && let Ok(t) = queue.try_recv()
    {
        spans.extend(span_data(&t, scope));
    }
    spans
}

async fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    spans: Vec<SpanData>,
    metrics: &TraceMetrics,
) {
    let n = spans.len();
    match exporter.export(spans).await {
        Ok(()) => metrics.exported(n),
        Err(e) => {
            metrics.dropped(SpanDrop::ExportFailed, n);
            tracing::warn!(error = %e, spans = n, "cannot export gate traces; they are dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use nodegate_core::gate::{self, Input, PatchOutcome};

    use nodegate_core::testutil::{
        ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts,
    };
    use nodegate_core::vocab::config::Config;
    use nodegate_core::vocab::model::{NodeInfo, PodInfo};

    use super::*;
    use crate::cluster::leader::Leadership;
    use crate::serve::metrics::Metrics;

    /// A gate that opened at once, with its journal: a root and one member.
    fn opened_gate() -> (GateState, Journal) {
        let ds = mk_ds(
            "infra",
            "cni",
            template_with_tolerations(vec![toleration("", "Exists", "", "")]),
        );
        let node = NodeInfo {
            created: ts(0),
            ..mk_node(
                "node-a",
                &[],
                vec![taint("nodegate.dev/initializing", "NoSchedule")],
            )
        };
        let pod = PodInfo {
            ready: true,
            ready_since: Some(ts(1)).into(),
            ..ds_pod("cni-1", "node-a", &ds)
        };
        let (mut state, mut journal) = (GateState::default(), Journal::default());
        let cfg = Config::default();
        for input in [
            Input::snapshot(node, vec![ds], vec![pod]),
            Input::PatchResult(PatchOutcome::Applied),
        ] {
            for event in gate::step(&mut state, &input, &cfg, ts(2)).events {
                journal.record(ts(2), event);
            }
        }
        assert!(state.opened.is_some());
        (state, journal)
    }

    #[test]
    fn a_full_queue_drops_and_counts_the_trace_and_never_waits() {
        let metrics = Metrics::new(Arc::new(Leadership::always())).traces.clone();
        // No task drains this queue of one: the first trace fills it.
        let (tx, mut rx) = mpsc::channel(1);
        let sink = TraceSink {
            queue: tx,
            metrics: metrics.clone(),
        };
        let (state, journal) = opened_gate();
        sink.gate_stopped(&state, &journal);
        assert_eq!(metrics.dropped_count(SpanDrop::QueueFull), 0);
        sink.gate_stopped(&state, &journal);
        assert_eq!(
            metrics.dropped_count(SpanDrop::QueueFull),
            2,
            "the second trace's root and member span"
        );
        assert!(rx.try_recv().is_ok(), "the first one is queued");
        // A gate that did not open sends nothing, and drops nothing.
        sink.gate_stopped(&GateState::default(), &Journal::default());
        assert!(rx.try_recv().is_err());
        assert_eq!(metrics.dropped_count(SpanDrop::QueueFull), 2);
    }
}
