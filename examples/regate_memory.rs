//! What re-gating costs per open node: `cargo run --release --example
//! regate_memory -- [NODES] [DAEMONSETS] [BROKEN_PERCENT]`.
//!
//! Fills the router the binary runs with N open nodes (no managed taint,
//! each with a boot id and one Ready pod per DaemonSet, D DaemonSets that
//! tolerate everything), then runs the real closing decider (re-gating and
//! the condition rules, none configured here) in its shell,
//! on the router's change feed, over them twice: first
//! with re-gating off, then on (`--regate-after 1h --regate-on-reboot`, a
//! live reconfiguration as a config reload makes). Before that, the given
//! share of nodes get one member with no pod (so the re-gater remembers when
//! it first saw each missing). Prints the resident memory at each step, from
//! /proc/self/status; the difference is what watching open nodes adds to
//! the indexes the router holds anyway. No API server is contacted: no node
//! is due within the hour, so nothing is written.

use std::sync::Arc;
use std::time::Duration;

use nodegate::cluster::leader::Leadership;
use nodegate::cluster::server_time::{ServerTime, SystemClock};
use nodegate::cluster::writer::Writer;
use nodegate::serve::metrics::Metrics;
use nodegate_actors::decider_shell;
use nodegate_actors::router::Router;
use nodegate_core::closing::decider::Closing;
use nodegate_core::closing::regating::DEFAULT_REGATE_TAINT_KEY;
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::testutil::{mk_ds, mk_node, mk_pod, template_with_tolerations, toleration};
use nodegate_core::vocab::config::{Config, RegateConfig};

/// The binary's allocator.
#[global_allocator]
static GLOBAL: nodegate_alloc::Allocator = nodegate_alloc::Allocator;

fn arg(i: usize, default: usize) -> usize {
    match std::env::args().nth(i) {
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("argument {i} ({v:?}) is not a whole number")),
        None => default,
    }
}

fn main() {
    nodegate_alloc::restart_with_tunables();
    nodegate_alloc::init();
    println!("allocator: {}", nodegate_alloc::NAME);
    let nodes = arg(1, 5000);
    let d = arg(2, 6);
    let broken_percent = arg(3, 10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    rt.block_on(async move {
        let start = nodegate_alloc::resident_kib();
        let router = Arc::new(Router::new(Arc::new(Config::default())));
        let clock = Arc::new(SystemClock {
            server_time: Arc::new(ServerTime::new()),
        });

        let dss: Vec<_> = (0..d)
            .map(|i| {
                let t = template_with_tolerations(vec![toleration("", "Exists", "", "")]);
                mk_ds("infra", &format!("agent-{i}"), t)
            })
            .collect();
        for ds in &dss {
            router.daemonset_upserted(ds.clone());
        }
        let broken_every = (100 / broken_percent.max(1)).max(1);
        for i in 0..nodes {
            let name = format!("node-{i:05}");
            let mut n = mk_node(&name, &[("kubernetes.io/hostname", &name)], vec![]);
            n.boot_id = Some(format!("8a1c2b3d-0000-4000-8000-{i:012}").into());
            router.node_upserted(n);
            for (j, ds) in dss.iter().enumerate() {
                // One member of every broken node has no pod at all.
                if broken_percent > 0 && i % broken_every == 0 && j == 0 {
                    continue;
                }
                let mut p = mk_pod(&format!("{}-{i}", ds.name), &name, &ds.uid);
                p.uid = format!("{name}-{}", ds.name).into();
                router.pod_upserted(p);
            }
        }
        let indexed = nodegate_alloc::resident_kib();

        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("a URL"),
        ))
        .expect("a client that is never used");
        let leadership = Arc::new(Leadership::always());
        let metrics = Arc::new(Metrics::new(Arc::clone(&leadership)));
        let executor = Arc::new(
            Writer::new(
                client,
                16,
                50.0,
                100,
                Duration::from_secs(10),
                "regate-memory".into(),
            )
            .serving(leadership, metrics, None),
        );
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = decider_shell::start(Closing::default(), &router, executor, clock, None, stopped);
        router.mark_synced();

        // Off: the re-gater looks at nothing and remembers nothing.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let off = nodegate_alloc::resident_kib();

        let regate = ManagedTaint::new(DEFAULT_REGATE_TAINT_KEY, "NoSchedule");
        let mut on = Config::default();
        on.placement.managed_taints.push(regate.clone());
        on.regate = Some(RegateConfig {
            after: Duration::from_secs(3600),
            taint: regate,
            timeout: None,
            on_reboot: true,
            max_unavailable: Default::default(),
        });
        router.reconfigure(Arc::new(on));
        tokio::time::sleep(Duration::from_secs(3)).await;
        let watching = nodegate_alloc::resident_kib();
        let _ = stop.send(true);
        let closing = task.await.expect("the closing shell ran to its end");
        let regater = closing.regater();
        let remembered = (0..nodes)
            .filter(|i| regater.watched(&format!("node-{i:05}")).is_some())
            .count();

        let per = |kib: u64| kib as f64 * 1024.0 / nodes as f64;
        println!("{nodes} open nodes, {d} DaemonSets, {broken_percent}% with a member missing");
        println!("  RSS at start                 {start:>8} KiB");
        println!(
            "  RSS with the indexes          {indexed:>8} KiB  ({:.0} B per node: what the router holds anyway)",
            per(indexed.saturating_sub(start))
        );
        println!("  RSS, re-gating off            {off:>8} KiB");
        println!(
            "  RSS, re-gating on             {watching:>8} KiB  (+{:.0} B per open node; {remembered} nodes remembered)",
            per(watching.saturating_sub(off))
        );
    });
}
