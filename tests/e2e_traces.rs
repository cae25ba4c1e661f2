//! Each gate as an OpenTelemetry trace, end to end: the real `nodegate run`
//! binary with `--otlp-endpoint` against the real local control plane, its
//! spans received by a real OpenTelemetry Collector (deploy/local/build
//! --otelcol) and read back from the collector's file, then checked against
//! what the cluster itself says: the node's creation and `opened-at`, the
//! pods' Ready transitions.

use nodegate_e2e as support;

#[path = "e2e_traces/collector.rs"]
mod collector;

use std::time::{Duration, Instant};

use collector::{Collector, Span};
use jiff::{SignedDuration, Timestamp};
use support::gate::{DsSpec, Env, annotation};
use support::{Nodegate, http_get, metric, wait_for};

/// How far a span's time may be from the cluster's record of the same
/// moment: both come from the same fields (creationTimestamp, the
/// `opened-at` annotation, the pod's Ready lastTransitionTime), so only
/// the annotation's millisecond rounding may differ.
const TOLERANCE: SignedDuration = SignedDuration::from_millis(1);

fn close(what: &str, got: Timestamp, want: Timestamp, spans: &[Span]) {
    let off = got.duration_since(want).abs();
    assert!(
        off <= TOLERANCE,
        "{what}: span says {got}, the cluster says {want} ({off:?} apart)\n{spans:#?}"
    );
}

/// When `app`'s pod on `node` last became Ready, as the pod says.
async fn ready_at(env: &Env, app: &str, node: &str) -> Timestamp {
    env.pod_on(app, node)
        .await
        .expect("pod exists")
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| {
            cs.into_iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")
        })
        .and_then(|c| c.last_transition_time)
        .unwrap_or_else(|| panic!("{app} on {node} has no Ready transition"))
        .0
}

/// The shape of `node`'s trace: a root from creation to opened-at, one
/// child per expected member (cni, csi) ending at its pod's Ready time.
/// Returns the cni span's end.
async fn check_trace(env: &Env, node: &str, trace: &[Span]) -> Timestamp {
    let root = &trace[0];
    let n = env.node(node).await;
    let created = n
        .metadata
        .creation_timestamp
        .clone()
        .expect("creationTimestamp")
        .0;
    let opened_at: Timestamp = annotation(&n, "nodegate.dev/opened-at")
        .expect("opened-at")
        .parse()
        .expect("opened-at is RFC 3339");
    assert_eq!(root.name, "gate");
    close("root start (node creation)", root.start, created, trace);
    close("root end (opened-at)", root.end, opened_at, trace);
    assert_eq!(root.attr("nodegate.outcome"), "ready");
    assert_eq!(root.attr("nodegate.members.expected"), "2");
    assert_eq!(root.attr("nodegate.members.ready"), "2");
    assert_eq!(
        root.attr("k8s.node.uid"),
        n.metadata.uid.as_deref().unwrap_or("")
    );
    assert!(root.events.iter().any(|e| e == "opened"), "{root:#?}");
    assert_eq!(
        root.resource.get("service.name").map(String::as_str),
        Some("nodegate-e2e")
    );
    assert_eq!(
        root.resource
            .get("deployment.environment")
            .map(String::as_str),
        Some("e2e"),
        "OTEL_RESOURCE_ATTRIBUTES is honoured"
    );

    let children: Vec<&Span> = trace[1..].iter().collect();
    let mut names: Vec<&str> = children.iter().map(|s| s.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        ["infra/cni", "infra/csi"],
        "one child per expected member\n{trace:#?}"
    );
    for child in &children {
        assert_eq!(child.parent_span_id, root.span_id, "{child:#?}");
        close(
            &format!("{} start", child.name),
            child.start,
            created,
            trace,
        );
        assert_eq!(
            child.status_code, 0,
            "a Ready member is no error: {child:#?}"
        );
    }
    let span = |name: &str| {
        *children
            .iter()
            .find(|s| s.name == name)
            .expect("member span")
    };
    let (cni, csi) = (span("infra/cni"), span("infra/csi"));
    close(
        "cni end (its Ready time)",
        cni.end,
        ready_at(env, "cni", node).await,
        trace,
    );
    close(
        "csi end (its Ready time)",
        csi.end,
        ready_at(env, "csi", node).await,
        trace,
    );
    assert!(
        csi.end.duration_since(csi.start) > cni.end.duration_since(cni.start),
        "the held member is the longest bar\n{trace:#?}"
    );
    cni.end
}

/// One cluster, one collector, two gates: node-a's held DaemonSet is
/// released while the first nodegate runs; node-b's gate is in progress
/// when that nodegate is killed, and a second one opens it. Both traces
/// must match the cluster — node-b's too, although its first member became
/// Ready before the nodegate that exported it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gate_is_a_trace_that_matches_the_cluster_across_a_restart() {
    let started = Instant::now();
    let collector = Collector::start();
    let env = Env::new("traces").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("csi")
    })
    .await;
    let otel_env = [
        ("OTEL_SERVICE_NAME", "nodegate-e2e"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=e2e"),
    ];
    let args = ["--timeout", "5m", "--otlp-endpoint", &collector.endpoint];
    let mut first = Nodegate::start_as(&env.cluster.kubeconfig, &otel_env, &args);
    env.create_node("node-a", &[]).await;
    env.create_node("node-b", &[]).await;
    for node in ["node-a", "node-b"] {
        env.wait_pod("cni", node, true).await;
        env.wait_pod("csi", node, false).await;
    }
    // csi is held a while longer than cni: its bar must be the longer one.
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.release("csi", "node-a").await;
    env.wait_open("node-a", Duration::from_secs(15), &[&first])
        .await;
    // The node shows the patch before nodegate has its answer: the trace
    // is exported once the gate has stopped, soon after.
    let trace_a = wait_for(
        "the trace of node-a at the collector",
        Duration::from_secs(15),
        || async { collector.trace_of("node-a") },
    )
    .await;

    // node-b is still closed: restart nodegate in the middle of its gate.
    first.kill();
    let restarted = Timestamp::now();
    let second = Nodegate::start_as(&env.cluster.kubeconfig, &otel_env, &args);
    env.release("csi", "node-b").await;
    env.wait_open("node-b", Duration::from_secs(20), &[&second])
        .await;

    check_trace(&env, "node-a", &trace_a).await;
    let trace_b = wait_for(
        "the trace of node-b at the collector",
        Duration::from_secs(15),
        || async { collector.trace_of("node-b") },
    )
    .await;
    let cni_ready = check_trace(&env, "node-b", &trace_b).await;
    assert!(
        cni_ready < restarted,
        "node-b's cni became Ready before the restart, at {cni_ready}; the restarted \
         nodegate must draw it there, not at its own start ({restarted})\n{trace_b:#?}"
    );

    // Counted once the collector has answered, a moment after it wrote
    // the file.
    let addr = second.http_addr(Duration::from_secs(10));
    let text = wait_for(
        "the second nodegate to count node-b's three spans as exported",
        Duration::from_secs(10),
        || async {
            let text = http_get(&addr, "/metrics").await?.1;
            match metric(&text, "nodegate_trace_spans_exported_total") {
                Some(3.0) => Ok(text),
                other => Err(format!("nodegate_trace_spans_exported_total is {other:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        metric(
            &text,
            "nodegate_trace_spans_dropped_total{reason=\"queue_full\"}"
        ),
        Some(0.0)
    );
    eprintln!(
        "[e2e traces] done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}
