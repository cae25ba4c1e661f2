//! What the router holds for a large cluster of open nodes, and what a
//! forced re-list adds: `cargo run --release --example open_memory --
//! [NODES] [DAEMONSETS] [PAGE]` (default 65000 6 500).
//!
//! Feeds the router the binary runs through the watches' own handling
//! (`cluster::watch`: projection, re-list mark and sweep, index), with
//! objects decoded from JSON bytes exactly as the kube client decodes what
//! the API server sends: list pages (`ObjectList`, `PAGE` objects a page,
//! the watcher's default) and watch events (`WatchEvent`, one line each).
//! The objects are rendered from recorded-shape templates next to this file
//! (`open_memory/*.json`): a kubelet node of a GKE-like pool (25 labels, 11
//! conditions, 40 images, managedFields; 16.6 kB of JSON), a DaemonSet and
//! one of its pods (7.1 kB). Every node is open (no managed taint), so no
//! gate runs: this is the floor any replica pays for the cluster's size.
//!
//! Steps, each followed by the resident memory (VmRSS) and the live heap (a
//! counting allocator):
//! 1. the DaemonSets, nodes and DaemonSet pods are listed (one pod per
//!    DaemonSet per node);
//! 2. every node sends a heartbeat (a MODIFIED node, new resourceVersion)
//!    and every pod of DaemonSet 0 a status update, as watch events;
//! 3. a watch gap, then a forced re-list: meanwhile 1 % of the nodes were
//!    deleted with their pods, DaemonSet 0's pod on another 1 % was replaced
//!    by a new Ready one, and every node heartbeat again. The example checks
//!    that the index then shows exactly what the re-list listed.
//!
//! The peak (VmHWM) is printed at the end: it includes the re-list. No API
//! server is contacted.

use std::collections::HashSet;
use std::sync::Arc;

use kube::core::{ObjectList, WatchEvent};
use kube::runtime::watcher::Event;
use nodegate::cluster::server_time::ServerTime;
use nodegate::cluster::watch::{self, WatchFeed};
use nodegate_actors::router::Router;
use nodegate_core::deciders::ClusterView;
use nodegate_core::vocab::config::Config;
use serde::de::DeserializeOwned;

/// The binary's allocator, counting the bytes live on the heap.
#[global_allocator]
static GLOBAL: nodegate_alloc::Counting = nodegate_alloc::Counting;

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resident memory and live heap, in KiB.
#[derive(Clone, Copy)]
struct Mem {
    rss: u64,
    heap: u64,
}

fn mem() -> Mem {
    Mem {
        rss: status_kib("VmRSS"),
        heap: (nodegate_alloc::live_bytes() / 1024) as u64,
    }
}

fn arg(i: usize, default: usize) -> usize {
    match std::env::args().nth(i) {
        Some(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("argument {i} ({v:?}) is not a whole number")),
        None => default,
    }
}

/// A JSON object with `{{key}}` placeholders, split once.
struct Template {
    literals: Vec<&'static str>,
    keys: Vec<&'static str>,
}

impl Template {
    fn new(text: &'static str) -> Self {
        let mut literals = Vec::new();
        let mut keys = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find("{{") {
            let close = open + rest[open..].find("}}").expect("a closed placeholder");
            literals.push(&rest[..open]);
            keys.push(&rest[open + 2..close]);
            rest = &rest[close + 2..];
        }
        literals.push(rest);
        Template { literals, keys }
    }

    fn render(&self, out: &mut String, value: impl Fn(&str) -> String) {
        for (lit, key) in self.literals.iter().zip(&self.keys) {
            out.push_str(lit);
            out.push_str(&value(key));
        }
        out.push_str(self.literals.last().expect("one literal at least"));
    }
}

fn uid(kind: u32, a: usize, b: usize) -> String {
    format!(
        "{kind:08x}-{:04x}-4{:03x}-8000-{:012x}",
        a >> 16,
        a & 0xfff,
        b
    )
}

fn node_name(i: usize) -> String {
    format!(
        "gke-prod-pool-{}-{:08x}-{i:05}",
        i % 8,
        i * 2_654_435_761 % 0xffff_ffff
    )
}

/// Everything the templates ask of one object.
struct Fields<'a> {
    node: usize,
    ds: usize,
    /// Replaced pods get a new uid and name.
    generation: usize,
    rv: u64,
    ds_names: &'a [String],
}

fn value(f: &Fields, key: &str) -> String {
    let i = f.node;
    match key {
        "name" | "node" => node_name(i),
        "uid" if f.ds == usize::MAX => uid(0x0d0e, i, 0),
        "uid" => uid(0x90d0 + f.generation as u32, i, f.ds),
        "rv" => f.rv.to_string(),
        "pool" => (i % 8).to_string(),
        "zone" => ["a", "b", "c", "f"][i % 4].to_string(),
        "instance" => (4_000_000_000_000_000_000u64 + i as u64).to_string(),
        "sec" => format!("{:02}", i % 60),
        "min" => format!("{:02}", (i / 60) % 60),
        "a" => ((i >> 8) & 0xff).to_string(),
        "b" => (i & 0xff).to_string(),
        "machine" | "boot" => format!("{:032x}", i as u128 * 0x9e37_79b9_7f4a_7c15),
        "ds" => f.ds_names[f.ds % f.ds_names.len()].clone(),
        "dsuid" => uid(0xd5, f.ds, 0),
        "suffix" => format!("{:05x}", (i * 7 + f.ds * 131 + f.generation * 17) % 0xfffff),
        "cid" => format!("{:064x}", (i as u128) << 32 | f.ds as u128),
        other => panic!("the templates name an unknown placeholder {other:?}"),
    }
}

/// Feeds one complete list, page by page, each page decoded from its JSON.
fn list<K: DeserializeOwned + Clone>(
    feed: &mut WatchFeed<K>,
    kind: &str,
    objects: &[Fields],
    template: &Template,
    page: usize,
) -> usize {
    feed.handle(Event::Init);
    let mut held = 0;
    let mut body = String::new();
    for chunk in objects.chunks(page.max(1)) {
        body.clear();
        body.push_str(&format!(
            r#"{{"kind":"{kind}List","apiVersion":"v1","metadata":{{"resourceVersion":"1","continue":"x"}},"items":["#
        ));
        for (n, f) in chunk.iter().enumerate() {
            if n > 0 {
                body.push(',');
            }
            template.render(&mut body, |k| value(f, k));
        }
        body.push_str("]}");
        let decoded: ObjectList<K> = serde_json::from_slice(body.as_bytes())
            .unwrap_or_else(|e| panic!("a {kind} list page does not decode: {e}"));
        for obj in decoded.items {
            feed.handle(Event::InitApply(obj));
        }
        held = held.max(feed.held());
    }
    feed.handle(Event::InitDone);
    held
}

/// Feeds one MODIFIED watch event per object, each decoded from its line.
fn modified<K: DeserializeOwned + Clone>(
    feed: &mut WatchFeed<K>,
    objects: &[Fields],
    template: &Template,
) {
    let mut line = String::new();
    for f in objects {
        line.clear();
        line.push_str(r#"{"type":"MODIFIED","object":"#);
        template.render(&mut line, |k| value(f, k));
        line.push('}');
        match serde_json::from_slice::<WatchEvent<K>>(line.as_bytes()) {
            Ok(WatchEvent::Modified(obj)) => {
                feed.handle(Event::Apply(obj));
            }
            Ok(_) => panic!("a MODIFIED line decoded as another event"),
            Err(e) => panic!("a watch line does not decode: {e}"),
        }
    }
}

fn report(step: &str, m: Mem) {
    println!(
        "  {step:<44} RSS {:>8.1} MiB   heap {:>8.1} MiB",
        m.rss as f64 / 1024.0,
        m.heap as f64 / 1024.0
    );
}

fn per_item(what: &str, count: usize, before: Mem, after: Mem) {
    let per = |a: u64, b: u64| (b.saturating_sub(a)) as f64 * 1024.0 / count.max(1) as f64;
    println!(
        "  per {what:<40} RSS {:>8.0} B     heap {:>8.0} B",
        per(before.rss, after.rss),
        per(before.heap, after.heap)
    );
}

fn main() {
    nodegate_alloc::restart_with_tunables();
    nodegate_alloc::init();
    println!("allocator: {}", nodegate_alloc::NAME);
    let nodes = arg(1, 65_000);
    let d = arg(2, 6);
    let page = arg(3, 500);
    let node_t = Template::new(include_str!("open_memory/node.json"));
    let ds_t = Template::new(include_str!("open_memory/daemonset.json"));
    let pod_t = Template::new(include_str!("open_memory/pod.json"));
    let ds_names: Vec<String> = [
        "fluent-bit",
        "gke-metrics-agent",
        "netd",
        "pdcsi-node",
        "kube-proxy",
        "cilium",
    ]
    .iter()
    .cycle()
    .take(d)
    .enumerate()
    .map(|(j, n)| {
        if j < 6 {
            n.to_string()
        } else {
            format!("{n}-{j}")
        }
    })
    .collect();
    let start = mem();

    let router = Arc::new(Router::new(Arc::new(Config::default())));
    let time = Arc::new(ServerTime::new());
    let mut ds_feed = watch::daemonset_feed(Arc::clone(&router), Arc::clone(&time));
    let mut node_feed = watch::node_feed(Arc::clone(&router), Arc::clone(&time));
    let mut pod_feed = watch::daemonset_pod_feed(
        Arc::clone(&router),
        Arc::clone(&time),
        Arc::new(HashSet::new()),
        None,
    );

    let f = |node, ds, generation, rv| Fields {
        node,
        ds,
        generation,
        rv,
        ds_names: &ds_names,
    };
    let dss: Vec<Fields> = (0..d).map(|j| f(0, j, 0, 10)).collect();
    list(&mut ds_feed, "DaemonSet", &dss, &ds_t, page);
    let with_ds = mem();

    let all_nodes: Vec<Fields> = (0..nodes)
        .map(|i| f(i, usize::MAX, 0, 100 + i as u64))
        .collect();
    list(&mut node_feed, "Node", &all_nodes, &node_t, page);
    let with_nodes = mem();

    let all_pods: Vec<Fields> = (0..nodes)
        .flat_map(|i| (0..d).map(move |j| (i, j)))
        .map(|(i, j)| f(i, j, 0, 1_000_000 + (i * d + j) as u64))
        .collect();
    list(&mut pod_feed, "Pod", &all_pods, &pod_t, page);
    router.mark_synced();
    let listed = mem();

    // Steady watching: a heartbeat from every node, a status update from
    // every pod of the first DaemonSet.
    let beat: Vec<Fields> = (0..nodes)
        .map(|i| f(i, usize::MAX, 0, 10_000_000 + i as u64))
        .collect();
    modified(&mut node_feed, &beat, &node_t);
    let ds0: Vec<Fields> = (0..nodes)
        .map(|i| f(i, 0, 0, 20_000_000 + i as u64))
        .collect();
    modified(&mut pod_feed, &ds0, &pod_t);
    let watched = mem();
    let hwm_before_relist = status_kib("VmHWM");

    // The gap: 1 % of the nodes deleted with their pods, DaemonSet 0's pod
    // replaced on another 1 %, every node heartbeat again; then a re-list.
    let gone = |i: usize| i % 100 == 7;
    let replaced = |i: usize| i % 100 == 13;
    let relisted_nodes: Vec<Fields> = (0..nodes)
        .filter(|&i| !gone(i))
        .map(|i| f(i, usize::MAX, 0, 30_000_000 + i as u64))
        .collect();
    let relisted_pods: Vec<Fields> = (0..nodes)
        .filter(|&i| !gone(i))
        .flat_map(|i| (0..d).map(move |j| (i, j)))
        .map(|(i, j)| {
            let generation = usize::from(j == 0 && replaced(i));
            f(i, j, generation, 40_000_000 + (i * d + j) as u64)
        })
        .collect();
    list(&mut node_feed, "Node", &relisted_nodes, &node_t, page);
    let held = list(&mut pod_feed, "Pod", &relisted_pods, &pod_t, page);
    let relisted = mem();

    // The index shows exactly what the re-list listed.
    let indexed_nodes = router.index().nodes().len();
    let indexed_pods: usize = (0..nodes)
        .map(|i| router.index().pods_on(&node_name(i)).len())
        .sum();
    assert_eq!(
        indexed_nodes,
        relisted_nodes.len(),
        "nodes after the re-list"
    );
    assert_eq!(indexed_pods, relisted_pods.len(), "pods after the re-list");
    let replaced_uid = uid(0x90d1, 13, 0);
    assert!(
        router
            .index()
            .pod(&node_name(13), &replaced_uid.as_str().into())
            .is_some()
            && router
                .index()
                .pod(&node_name(13), &uid(0x90d0, 13, 0).into())
                .is_none(),
        "the replaced pod is swapped"
    );

    println!(
        "{nodes} open nodes, {d} DaemonSets, {} DaemonSet pods, pages of {page}",
        all_pods.len()
    );
    report("at start", start);
    report("DaemonSets listed", with_ds);
    report("nodes listed", with_nodes);
    report("pods listed (steady)", listed);
    report("after a heartbeat of every node (steady)", watched);
    report("after the forced re-list", relisted);
    per_item(
        "open node (its projection, index entry)",
        nodes,
        with_ds,
        with_nodes,
    );
    per_item("DaemonSet pod", all_pods.len(), with_nodes, listed);
    println!(
        "  re-list: {} nodes and {} pods listed, {} nodes and {} pods swept, at most {held} pods held",
        relisted_nodes.len(),
        relisted_pods.len(),
        nodes - relisted_nodes.len(),
        all_pods.len() - relisted_pods.len()
    );
    println!(
        "  peak RSS (VmHWM): {:.1} MiB before the re-list, {:.1} MiB overall",
        hwm_before_relist as f64 / 1024.0,
        status_kib("VmHWM") as f64 / 1024.0
    );
    println!(
        "  watches know {} nodes, {} pods",
        node_feed.known(),
        pod_feed.known()
    );
}
