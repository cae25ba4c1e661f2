//! A gate's log lines under the binary's log filter: each carries
//! `gate{node=… generation=…}`, and a waiting gate holds no span open in the
//! subscriber. A span per live gate (nodegate's, or ractor's for the actor's
//! life) took a slot each, pooled at the most gates ever live and left
//! scattered over the heap after they stopped.
//!
//! Its own test binary: the subscriber is the process's, and no other test
//! may write into it.

#[path = "../actors/core/tests/gate_support/mod.rs"]
mod gate_support;

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gate_support::*;
use jiff::Timestamp;
use nodegate::settings::config::{log_filter, log_level};
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::router::Router;
use nodegate_actors::testing::{FakeClock, FakeExecutor, eventually, start_one_gate};
use nodegate_core::vocab::model::NodeInfo;
use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer, fmt};

/// The spans open in the subscriber, by name.
#[derive(Clone, Default)]
struct OpenSpans(Arc<Mutex<Vec<&'static str>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for OpenSpans {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        self.0.lock().expect("spans").push(attrs.metadata().name());
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(meta) = ctx.metadata(&id) {
            let mut open = self.0.lock().expect("spans");
            if let Some(i) = open.iter().position(|n| *n == meta.name()) {
                open.remove(i);
            }
        }
    }
}

#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    fn text(&self) -> String {
        let bytes = self.0.lock().expect("log buffer").clone();
        String::from_utf8(bytes).expect("log lines are UTF-8")
    }
}

impl io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_logs_in_its_span_and_holds_none_while_it_waits() {
    let lines = Lines::default();
    let open = OpenSpans::default();
    let writer = lines.clone();
    // The binary's filter at its default level: the journal's debug lines
    // are off, a gate's opening is logged.
    let level = log_level("info").expect("info is a level");
    let subscriber = tracing_subscriber::registry()
        .with(EnvFilter::new(log_filter(&level)))
        .with(
            fmt::layer()
                .with_ansi(false)
                .with_writer(move || writer.clone()),
        )
        .with(open.clone());
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let router = Arc::new(Router::new(Arc::new(cfg())));
    let exec = Arc::new(FakeExecutor::recording());
    let ctx = GateContext {
        router: Arc::clone(&router),
        executor: Arc::clone(&exec),
        clock: Arc::new(FakeClock::default()),
        journal_capacity: 256,
    };
    let cilium = tolerant_ds("cilium");
    let node = NodeInfo {
        created: Timestamp::now(),
        ..gated_node()
    };
    let supervisor =
        start_one_gate(ctx, cilium.clone(), node, unready_pod("cilium-1", &cilium)).await;
    // The gate has stepped through its snapshot and waits for cilium.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(router.gate(NODE).is_some(), "the gate stopped waiting");
    let held = open.0.lock().expect("spans").clone();
    assert!(held.is_empty(), "a waiting gate holds spans open: {held:?}");

    router.pod_upserted(ready_pod("cilium-1", &cilium));
    eventually("the gate to stop", || router.gate(NODE).is_none()).await;
    eventually("the opening's line", || {
        lines.text().contains("gate opened")
    })
    .await;
    let text = lines.text();
    let opened = text
        .lines()
        .find(|l| l.contains("gate opened"))
        .expect("an opening line");
    assert!(
        opened.contains(&format!(" gate{{node={NODE} generation=")),
        "the opening line is not in the gate's span alone: {opened}"
    );
    supervisor.stop(None);
}
