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
//! The allocator is the binary's (`nodegate-alloc`); measure a candidate with
//! `--features nodegate-alloc/jemalloc` (or `mimalloc`, `glibc-tuned`,
//! `system`).
//!
//! `ROUNDS=K` plays only the first K pod versions (default all 5);
//! `JCAP=N` sets the journal capacity per gate (default the binary's,
//! `nodegate_core::gate::journal::DEFAULT_CAPACITY`); `TRIM=1` also prints the RSS
//! after `nodegate_alloc::give_back` (glibc's `malloc_trim(0)`: what of it is
//! freed memory the allocator kept).
//!
//! `WAVES=K` measures instead whether memory goes back: K waves, each of N
//! new nodes gated, played as above, then deleted with their pods until no
//! gate is left. Prints the RSS before any node (the cold baseline), with
//! each wave live and after it is gone, at the end after `SETTLE` seconds
//! idle (default 12, longer than the `glibc-tuned` allocator's trim period)
//! and after `nodegate_alloc::give_back`, each against the baseline and
//! with the live heap (what of the RSS is still allocated).

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

/// The binary's allocator, counting the bytes live on the heap.
#[global_allocator]
static GLOBAL: nodegate_alloc::Counting = nodegate_alloc::Counting;

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

/// Waits until the gates have taken no step for 200 ms; returns the steps.
async fn quiesce(steps: &StepCounter) -> u64 {
    let mut last = steps.0.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = steps.0.load(Ordering::Relaxed);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// `WAVES=K`: K waves of N gated nodes, each deleted once played; the RSS
/// against the cold baseline after each and at the end.
async fn waves(
    router: &Router,
    steps: &StepCounter,
    dss: &[DaemonSetInfo],
    nodes: usize,
    waves: usize,
) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let cold = nodegate_alloc::resident_kib();
    println!(
        "cold baseline: {:.1} MiB, heap {:.1} MiB",
        mib(cold),
        nodegate_alloc::live_bytes() as f64 / 1048576.0
    );
    let show = |what: &str, (kib, heap): (u64, usize)| {
        println!(
            "{what}: {:.1} MiB ({:.2}x the baseline), heap {:.1} MiB",
            mib(kib),
            kib as f64 / cold.max(1) as f64,
            heap as f64 / 1048576.0
        );
    };
    let now = || (nodegate_alloc::resident_kib(), nodegate_alloc::live_bytes());
    for wave in 0..waves {
        let names: Vec<String> = (0..nodes)
            .map(|i| format!("wave{wave:03}-{i:05}"))
            .collect();
        for n in &names {
            router.node_upserted(node(n));
        }
        while router.gate_count() < nodes {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for round in 0..5 {
            for n in &names {
                for (i, ds) in dss.iter().enumerate() {
                    router.pod_upserted(versions(ds, n, i + 1 == dss.len())[round].clone());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        quiesce(steps).await;
        let live = now();
        for n in &names {
            for ds in dss {
                router.pod_deleted(n, &format!("{n}-{}", ds.name).into());
            }
            router.node_deleted(n);
        }
        while router.gate_count() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        quiesce(steps).await;
        show(&format!("wave {}, {nodes} gates live", wave + 1), live);
        show(&format!("wave {}, all gone", wave + 1), now());
    }
    let settle = env_or("SETTLE", 12);
    tokio::time::sleep(Duration::from_secs(settle as u64)).await;
    show(&format!("after {settle} s idle"), now());
    nodegate_alloc::give_back();
    show("after give_back", now());
}

fn main() {
    nodegate_alloc::restart_with_tunables();
    nodegate_alloc::init();
    println!("allocator: {}", nodegate_alloc::NAME);
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
        let wave_count = env_or("WAVES", 0);
        let names: Vec<String> = (0..nodes).map(|i| format!("bench-{i:05}")).collect();
        if wave_count == 0 {
            for n in &names {
                router.node_upserted(node(n));
            }
        }
        let ctx = Arc::new(GateContext {
            router: Arc::clone(&router),
            executor: Arc::new(no_writes()),
            clock: Arc::new(FakeClock::default()),
            journal_capacity: env_or("JCAP", journal::DEFAULT_CAPACITY),
        });
        let (sup, _) = supervisor::start(ctx).await.expect("supervisor");
        router.mark_synced();
        if wave_count > 0 {
            waves(&router, &steps, &dss, nodes, wave_count).await;
            sup.stop(None);
            return;
        }
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
        let last = quiesce(&steps).await;
        println!(
            "after {nodes} gates x {d} DaemonSets, {sent} pod events, {} gate steps: {}",
            last,
            rss()
        );
        if std::env::var("TRIM").is_ok() {
            let started = std::time::Instant::now();
            nodegate_alloc::give_back();
            let took = started.elapsed();
            println!("after give_back (it took {took:?}): {}", rss());
        }
        assert_eq!(router.gate_count(), nodes, "every gate is still waiting");
        sup.stop(None);
    });
}
