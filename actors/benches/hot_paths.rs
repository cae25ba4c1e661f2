//! In-process benchmarks of the gate's hot paths (divan; `cargo bench -p
//! nodegate-actors`). Not run by `tests/run`.
//!
//! - `route_and_decide`: the whole path a pod watch event takes once it is
//!   projected — `Router::pod_upserted` (index + hint) → the node's actor
//!   mailbox → `gate::step` (decide, apply, effects) → journal — on real
//!   ractor actors in a single-threaded tokio runtime ("one core"). Reported
//!   per event; events/s is its inverse.
//! - `route_index_only`: a pod event for a node without a gate (index only).
//! - `gate_step_pod_event`: `gate::step` alone for one pod readiness flip.
//! - `placement`: `placement::evaluate` of one DaemonSet against a node, for
//!   D DaemonSets per decision round.
//!
//! The patch construction lives in the binary crate, so its bench is with the
//! scale driver (tests/scale/benches/patch.rs).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use divan::counter::ItemsCount;
use divan::{Bencher, black_box};
use jiff::Timestamp;
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::observe::GateObserver;
use nodegate_actors::router::Router;
use nodegate_actors::supervisor;
use nodegate_actors::testing::{FakeClock, FakeExecutor, StepCounter};
use nodegate_core::gate::journal;
use nodegate_core::gate::{self, GateState, Input};
use nodegate_core::rules::placement;
use nodegate_core::testutil::{
    ds_pod, mk_ds, mk_node, req, taint, template_with_tolerations, term, toleration,
};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

fn main() {
    divan::main();
}

const MANAGED: &str = "nodegate.dev/initializing";

/// A gated node as the benchmark cluster has them: a handful of labels, the
/// startup taint, created now (so the deadline is ahead).
fn node(name: &str) -> NodeInfo {
    let mut n = mk_node(
        name,
        &[
            ("kubernetes.io/hostname", name),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/arch", "amd64"),
            ("node.kubernetes.io/instance-type", "m7i.large"),
            ("topology.kubernetes.io/zone", "eu-west-1a"),
            ("nodegate.bench/node", "true"),
        ],
        vec![taint(MANAGED, "NoSchedule")],
    );
    n.created = Timestamp::now();
    n
}

/// D DaemonSets shaped like real infrastructure: each tolerates the startup
/// taint, half select on the OS label, every third has required affinity.
fn daemonsets(d: usize) -> Vec<DaemonSetInfo> {
    (0..d)
        .map(|i| {
            let mut t = template_with_tolerations(vec![
                toleration(MANAGED, "Exists", "", ""),
                toleration(
                    "node-role.kubernetes.io/control-plane",
                    "Exists",
                    "",
                    "NoSchedule",
                ),
            ]);
            if i % 2 == 0 {
                t.node_selector
                    .insert("kubernetes.io/os".into(), "linux".into());
            }
            if i % 3 == 0 {
                t.required_node_affinity = Some(vec![term(vec![
                    req("kubernetes.io/arch", "In", &["amd64", "arm64"]),
                    req("nodegate.bench/stuck", "DoesNotExist", &[]),
                ])]);
            }
            mk_ds("infra", &format!("agent-{i}"), t)
        })
        .collect()
}

fn pods_for(node: &str, dss: &[DaemonSetInfo]) -> Vec<PodInfo> {
    dss.iter()
        .enumerate()
        .map(|(i, ds)| {
            let mut p = ds_pod(&format!("{}-{node}", ds.name), node, ds);
            p.namespace = "infra".into();
            // The last DaemonSet never gets Ready, so the gate stays closed
            // however often the others flip.
            if i + 1 == dss.len() {
                p.ready = false;
                p.ready_since = Default::default();
            }
            p
        })
        .collect()
}

#[divan::bench(args = [6, 30])]
fn placement(bencher: Bencher, d: usize) {
    let n = node("n1");
    let dss = daemonsets(d);
    let cfg = placement::PlacementConfig::default();
    bencher.counter(ItemsCount::new(d)).bench(|| {
        for ds in &dss {
            black_box(placement::evaluate(black_box(&n), black_box(ds), &cfg));
        }
    });
}

/// A gate past its snapshot, and the pod whose readiness the bench flips.
fn gate_with_pods(d: usize) -> (GateState, Config, PodInfo) {
    let cfg = Config::default();
    let n = node("n1");
    let dss = daemonsets(d);
    let pods = pods_for("n1", &dss);
    let mut state = GateState::default();
    gate::step(
        &mut state,
        &Input::snapshot(n, dss, pods.clone()),
        &cfg,
        Timestamp::now(),
    );
    (state, cfg, pods[0].clone())
}

#[divan::bench(args = [6, 30])]
fn gate_step_pod_event(bencher: Bencher, d: usize) {
    let (mut state, cfg, pod) = gate_with_pods(d);
    let mut flip = pod.clone();
    flip.ready = false;
    let inputs = [Input::pod_upserted(flip), Input::pod_upserted(pod)];
    let now = Timestamp::now();
    let mut i = 0usize;
    bencher.bench_local(|| {
        i += 1;
        black_box(gate::step(&mut state, &inputs[i % 2], &cfg, now))
    });
}

/// Stands in for the kube adapters; the benchmarked gates never write, and
/// it keeps no record of what they would.
fn no_writes() -> FakeExecutor {
    FakeExecutor::silent().with_retry_delay(Duration::from_secs(1))
}

const GATED_NODES: usize = 100;
const EVENTS_PER_SAMPLE: usize = 50_000;

#[divan::bench(sample_count = 20, sample_size = 1)]
fn route_and_decide(bencher: Bencher) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("tokio runtime: {e}"),
    };
    let config = Arc::new(Config::default());
    let router = Arc::new(Router::new(Arc::clone(&config)));
    let steps = Arc::new(StepCounter::default());
    router.set_observer(Arc::clone(&steps) as Arc<dyn GateObserver>);
    let dss = daemonsets(6);
    let names: Vec<String> = (0..GATED_NODES).map(|i| format!("node-{i:04}")).collect();
    // Per node: the pod that flips, as Ready and as not Ready.
    let flips: Vec<[PodInfo; 2]> = names
        .iter()
        .map(|n| {
            let p = pods_for(n, &dss)[0].clone();
            let mut q = p.clone();
            q.ready = false;
            [q, p]
        })
        .collect();
    let supervisor = rt.block_on(async {
        for ds in &dss {
            router.daemonset_upserted(ds.clone());
        }
        for n in &names {
            router.node_upserted(node(n));
            for p in pods_for(n, &dss) {
                router.pod_upserted(p);
            }
        }
        let ctx = Arc::new(GateContext {
            router: Arc::clone(&router),
            executor: Arc::new(no_writes()),
            clock: Arc::new(FakeClock::default()),
            journal_capacity: journal::DEFAULT_CAPACITY,
        });
        let (sup, _) = match supervisor::start(ctx).await {
            Ok(s) => s,
            Err(e) => panic!("supervisor: {e}"),
        };
        router.mark_synced();
        // Wait until every gate runs.
        while router.gate_count() < GATED_NODES
            || steps.0.load(Ordering::Relaxed) < GATED_NODES as u64
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sup
    });
    // Which version each node's pod goes to next; every event must flip it,
    // or the step counter (the barrier) would wait for a step that never
    // comes.
    let mut next = vec![0usize; GATED_NODES];
    bencher
        .counter(ItemsCount::new(EVENTS_PER_SAMPLE))
        .bench_local(|| {
            rt.block_on(async {
                let mut target = steps.0.load(Ordering::Relaxed);
                // One event per node per round, then wait until every gate
                // has decided it: a gate reads a pod back from the index when
                // it handles the hint, so a burst of flips to one node would
                // coalesce into fewer decisions and flatter the number.
                for _ in 0..EVENTS_PER_SAMPLE / GATED_NODES {
                    for (node, flip) in flips.iter().enumerate() {
                        router.pod_upserted(flip[next[node]].clone());
                        next[node] ^= 1;
                    }
                    target += GATED_NODES as u64;
                    while steps.0.load(Ordering::Relaxed) < target {
                        tokio::task::yield_now().await;
                    }
                }
            });
        });
    supervisor.stop(None);
}

#[divan::bench]
fn route_index_only(bencher: Bencher) {
    let router = Router::new(Arc::new(Config::default()));
    let dss = daemonsets(6);
    let pods = pods_for("free-node", &dss);
    let mut i = 0usize;
    bencher.bench_local(|| {
        i += 1;
        router.pod_upserted(pods[i % pods.len()].clone());
    });
}
