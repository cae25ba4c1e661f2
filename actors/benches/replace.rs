//! The replace decider at scale (issue 37 §6; divan; `cargo bench -p
//! nodegate-actors --bench replace`). Not run by `tests/run`.
//!
//! A bad image during a scale-up: 65,000 nodes in the index (the actors'
//! own, filled through the router as the watches fill it), of which 5,000
//! timed out with their agent not Ready and are due for replacement, and
//! two more already asked to be replaced fill `--replace-in-flight 2`. The
//! agent fails on 5,002 of 65,000 nodes, under `--replace-breakage 20%`,
//! but 5,000 due nodes wait for it: judged, it is broken cluster-wide.
//!
//! The decider keeps each member's spread from the change feed: it counts
//! every node and its pods once, at the feed's `Change::Everything` (the
//! initial lists are in; a DaemonSet or the configuration changed), which
//! every replica hears, leader or not, before anything else.
//!
//! - `sync`: that count, a follower's `Change::Everything` from an empty
//!   memory (it writes nothing, so judges nothing).
//! - `first_look`: a new leader's first look (`MayWrite`) after it:
//!   5,000 refusals, each with its `ReplaceBudgetExhausted` Event.
//! - `tick`: the look every 10 s while nodes are refused, once the Events
//!   are out.
//! - `first_look_with_room`: the first look with no node marked yet: every
//!   due node judged, all 5,000 sharing one blocker (the agent), and each
//!   gets the fallback, which spends no budget.
//! - `cold_look_with_room`: the same look from an empty memory, the count
//!   included: what a leader's `Change::Everything` costs with room, once
//!   per DaemonSet or configuration change (and what
//!   `first_look_with_room` measured before the counts were kept).
//!
//! The target is one look under 50 ms. The figures are reported, not
//! asserted (speed is asserted nowhere in the ordinary tests).

use std::sync::Arc;

use divan::{Bencher, black_box};
use nodegate_actors::router::Router;
use nodegate_core::closing::replacing::decider::Replacer;
use nodegate_core::deciders::ReplaceAction;
use nodegate_core::deciders::{Change, Context, Decider, Effect, Input, Now};
use nodegate_core::rules::placement::DEFAULT_MANAGED_TAINT_KEY;
use nodegate_core::testutil::{
    ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts,
};
use nodegate_core::vocab::config::{Config, OnTimeout};
use nodegate_core::vocab::model::{DaemonSetInfo, KARPENTER_NODEPOOL_LABEL, NodeInfo, Owner};

fn main() {
    divan::main();
}

const NODES: usize = 65_000;
const DUE: usize = 5_000;
const MARKED: usize = 2;
/// Every stuck node was created here and timed out 120 s later.
const CREATED: i64 = 1_000_000;
const NOW: i64 = CREATED + 3_600;

fn config() -> Config {
    Config {
        on_timeout: OnTimeout::Replace,
        ..Config::default()
    }
}

/// Two DaemonSets every node runs (a CNI and a CSI agent), tolerating
/// everything.
fn daemonsets() -> Vec<DaemonSetInfo> {
    ["cni", "csi"]
        .into_iter()
        .map(|name| {
            mk_ds(
                "infra",
                name,
                template_with_tolerations(vec![toleration("", "Exists", "", "")]),
            )
        })
        .collect()
}

fn node(name: &str, stuck: bool) -> NodeInfo {
    let labels = [
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("node.kubernetes.io/instance-type", "m7i.large"),
        ("topology.kubernetes.io/zone", "eu-west-1a"),
        (KARPENTER_NODEPOOL_LABEL, "default"),
    ];
    let taints = if stuck {
        vec![taint(DEFAULT_MANAGED_TAINT_KEY, "NoSchedule")]
    } else {
        Vec::new()
    };
    let mut n = mk_node(name, &labels, taints);
    n.created = ts(CREATED);
    n.annotations_present = true;
    n.replace.owner = Owner::NodeClaim;
    n.replace.provider_id = Some(format!("kwok://{name}").into());
    if stuck {
        n.replace.timed_out = Some(ts(CREATED + 120));
    }
    n
}

/// The index of the scenario above, as the watches would fill it, with
/// `marked` of the stuck nodes already asked to be replaced.
fn cluster(marked: usize) -> Router {
    let router = Router::new(Arc::new(config()));
    let dss = daemonsets();
    for ds in &dss {
        router.daemonset_upserted(ds.clone());
    }
    for i in 0..NODES {
        let name = format!("node-{i:05}");
        let stuck = i < DUE + MARKED;
        let mut n = node(&name, stuck);
        if i < marked {
            n.replace.requested = Some(ts(NOW - 60));
        }
        router.node_upserted(n);
        for (j, ds) in dss.iter().enumerate() {
            let mut p = ds_pod(&format!("{}-{name}", ds.name), &name, ds);
            // The CNI agent never turns Ready on the stuck nodes.
            p.ready = !(stuck && j == 0);
            router.pod_upserted(p);
        }
    }
    router
}

fn look(router: &Router, cfg: &Config, replacer: &mut Replacer, input: Input) -> usize {
    let cx = Context {
        view: router.index(),
        config: cfg,
        now: Now::local(ts(NOW)),
        may_write: true,
    };
    replacer.decide(input, &cx).len()
}

/// A replica's memory after the initial lists, as a follower hears them.
fn synced(router: &Router, cfg: &Config) -> Replacer {
    let mut replacer = Replacer::default();
    let cx = Context {
        view: router.index(),
        config: cfg,
        now: Now::local(ts(NOW)),
        may_write: false,
    };
    let out = replacer.decide(Input::Changed(Change::Everything), &cx);
    assert!(out.is_empty(), "a follower writes nothing: {out:?}");
    replacer
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn sync(bencher: Bencher) {
    let router = cluster(MARKED);
    let cfg = config();
    bencher.bench_local(|| black_box(synced(&router, &cfg)));
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn first_look(bencher: Bencher) {
    let router = cluster(MARKED);
    let cfg = config();
    bencher
        .with_inputs(|| synced(&router, &cfg))
        .bench_local_refs(|replacer| {
            black_box(look(&router, &cfg, replacer, Input::MayWrite));
        });
    let mut replacer = synced(&router, &cfg);
    look(&router, &cfg, &mut replacer, Input::MayWrite);
    let refused = (0..NODES)
        .filter(|i| replacer.refused(&format!("node-{i:05}")))
        .count();
    assert_eq!(refused, DUE, "the scenario: every due node refused");
}

/// The same look with room (no node marked yet): every due node is judged
/// (the agent's spread from the counts kept) and falls back, since the due
/// nodes share their blocker.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn first_look_with_room(bencher: Bencher) {
    let router = cluster(0);
    let cfg = config();
    bencher
        .with_inputs(|| synced(&router, &cfg))
        .bench_local_refs(|replacer| {
            black_box(look(&router, &cfg, replacer, Input::MayWrite));
        });
    assert_every_due_node_falls_back(&router, &cfg, synced(&router, &cfg));
}

/// The look with room from an empty memory: every node and its pods
/// counted first.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn cold_look_with_room(bencher: Bencher) {
    let router = cluster(0);
    let cfg = config();
    bencher
        .with_inputs(Replacer::default)
        .bench_local_refs(|replacer| {
            black_box(look(&router, &cfg, replacer, Input::MayWrite));
        });
    assert_every_due_node_falls_back(&router, &cfg, Replacer::default());
}

fn assert_every_due_node_falls_back(router: &Router, cfg: &Config, mut replacer: Replacer) {
    let cx = Context {
        view: router.index(),
        config: cfg,
        now: Now::local(ts(NOW)),
        may_write: true,
    };
    let out = replacer.decide(Input::MayWrite, &cx);
    let fallbacks = out
        .iter()
        .filter(|e| {
            matches!(e, Effect::Replace(w) if matches!(w.action, ReplaceAction::Fallback { .. }))
        })
        .count();
    assert_eq!(
        fallbacks,
        DUE + MARKED,
        "the scenario: every due node falls back"
    );
}

#[divan::bench(sample_count = 5, sample_size = 1)]
fn tick(bencher: Bencher) {
    let router = cluster(MARKED);
    let cfg = config();
    let mut replacer = synced(&router, &cfg);
    look(&router, &cfg, &mut replacer, Input::MayWrite);
    bencher.bench_local(|| black_box(look(&router, &cfg, &mut replacer, Input::Tick)));
}
