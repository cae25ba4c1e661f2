//! How much memory N live gates take: `cargo run --release -p nodegate-actors
//! --example gate_memory -- [NODES] [DAEMONSETS]`.
//!
//! Builds the router and the actor system the binary runs (two tokio
//! workers), indexes D DaemonSets, starts a gate on each of N nodes, and plays
//! each node's pods through the states a DaemonSet pod goes through (pending,
//! running, Ready, flipped NotReady and Ready again by the node lifecycle
//! controller) — the last DaemonSet never Ready, so every gate stays open to
//! be measured. Prints the process's resident memory before and after, from
//! /proc/self/status. The kube watchers, HTTP server and metrics are not part
//! of it: this is the gate core's share of `nodegate run`'s memory.
//!
//! `ROUNDS=K` plays only the first K pod versions (default all 5);
//! `JCAP=N` sets the journal capacity per gate (default the binary's,
//! `nodegate_core::gate::journal::DEFAULT_CAPACITY`); `TRIM=1` also prints the RSS
//! after glibc's `malloc_trim(0)` (what of it is freed memory the allocator
//! kept).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use jiff::Timestamp;
use nodegate_actors::node_actor::GateContext;
use nodegate_actors::observe::GateObserver;
use nodegate_actors::router::Router;
use nodegate_actors::supervisor;
use nodegate_actors::testing::{FakeClock, FakeExecutor, StepCounter};
use nodegate_core::gate::journal;
use nodegate_core::testutil::{
    ds_pod, mk_ds, mk_node, req, taint, template_with_tolerations, term, toleration,
};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

const MANAGED: &str = "nodegate.dev/initializing";

/// Stands in for the kube adapters; the gates measured never write, and it
/// keeps no record (which would count in the memory measured).
fn no_writes() -> FakeExecutor {
    FakeExecutor::silent().with_retry_delay(Duration::from_secs(1))
}

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
            t.node_selector
                .insert("nodegate.bench/node".into(), "true".into());
            t.required_node_affinity = Some(vec![term(vec![req(
                "nodegate.bench/stuck",
                "DoesNotExist",
                &[],
            )])]);
            mk_ds("nodegate-bench", &format!("bench-ds-{i}"), t)
        })
        .collect()
}

/// The versions a DaemonSet pod goes through on a busy node.
fn versions(ds: &DaemonSetInfo, node: &str, never_ready: bool) -> Vec<PodInfo> {
    let mut p = ds_pod(&format!("{}-{node}", ds.name), node, ds);
    p.namespace = ds.namespace.clone().into();
    p.name = format!("{}-x7f2k", ds.name).into();
    p.uid = format!("{node}-{}", ds.name).into();
    let since = p.ready_since.get();
    let mut out = Vec::new();
    for (phase, ready) in [
        ("Pending", false),
        ("Running", false),
        ("Running", true),
        ("Running", false),
        ("Running", true),
    ] {
        let mut v = p.clone();
        v.phase = phase.into();
        v.ready = ready && !never_ready;
        v.ready_since = (if v.ready { since } else { None }).into();
        out.push(v);
    }
    out
}

fn env_or(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

fn rss() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("VmRSS") || l.starts_with("VmHWM"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let d: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    println!("before: {}", rss());
    rt.block_on(async {
        let config = Arc::new(Config::default());
        let router = Arc::new(Router::new(Arc::clone(&config)));
        let steps = Arc::new(StepCounter::default());
        router.set_observer(Arc::clone(&steps) as Arc<dyn GateObserver>);
        let dss = daemonsets(d);
        for ds in &dss {
            router.daemonset_upserted(ds.clone());
        }
        let names: Vec<String> = (0..nodes).map(|i| format!("bench-{i:05}")).collect();
        for n in &names {
            router.node_upserted(node(n));
        }
        let ctx = Arc::new(GateContext {
            router: Arc::clone(&router),
            executor: Arc::new(no_writes()),
            clock: Arc::new(FakeClock::default()),
            journal_capacity: env_or("JCAP", journal::DEFAULT_CAPACITY),
        });
        let (sup, _) = supervisor::start(ctx).await.expect("supervisor");
        router.mark_synced();
        while router.gate_count() < nodes {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut sent = 0u64;
        let rounds = env_or("ROUNDS", 5).min(5);
        for round in 0..rounds {
            for n in &names {
                for (i, ds) in dss.iter().enumerate() {
                    let v = versions(ds, n, i + 1 == dss.len());
                    router.pod_upserted(v[round].clone());
                    sent += 1;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Let every gate catch up, then measure with all of them live.
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = steps.0.load(Ordering::Relaxed);
            if now == last {
                break;
            }
            last = now;
        }
        println!(
            "after {nodes} gates x {d} DaemonSets, {sent} pod events, {} gate steps: {}",
            last,
            rss()
        );
        if std::env::var("TRIM").is_ok() {
            unsafe extern "C" {
                fn malloc_trim(pad: usize) -> i32;
            }
            // SAFETY: glibc's malloc_trim takes no pointer and only returns
            // free memory to the system.
            unsafe { malloc_trim(0) };
            println!("after malloc_trim: {}", rss());
        }
        assert_eq!(router.gate_count(), nodes, "every gate is still waiting");
        sup.stop(None);
    });
}
