//! What the scale-up benchmark watches and what it computes from it: every
//! pod of the workload and of the DaemonSets, every Karpenter node and every
//! NodeClaim, each change stamped with the driver's own clock when the watch
//! delivered it (one process, one clock, so differences are comparable).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;

/// The label of the workload's pods (`app=load`).
pub const LOAD: &str = "load";

#[derive(Default)]
struct Seen {
    /// Workload pod uid → (first seen, Running seen, its node).
    pods: BTreeMap<String, (Instant, Option<Instant>, Option<String>)>,
    /// Node → first seen, first seen gated, first seen open after that.
    nodes: BTreeMap<String, NodeSeen>,
    /// Node → agent pod uid → first seen Ready.
    agents: BTreeMap<String, BTreeMap<String, Instant>>,
    claims: BTreeSet<String>,
}

#[derive(Default, Clone)]
struct NodeSeen {
    created: Option<Instant>,
    gated: bool,
    opened: Option<Instant>,
}

/// The watches, running until dropped.
pub struct Observer {
    seen: Arc<Mutex<Seen>>,
    key: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Observer {
    pub fn start(client: &kube::Client, ns: &str, key: &str) -> Observer {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let mut tasks = Vec::new();
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let s = seen.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = watcher::watcher(pods, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        eprintln!("[scaleup] a watch failed (retrying): {e}");
                        continue;
                    }
                };
                if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = ev
                    && let Ok(mut s) = s.lock()
                {
                    on_pod(&mut s, &p, Instant::now());
                }
            }
        }));
        let nodes: Api<Node> = Api::all(client.clone());
        let cfg = watcher::Config::default().labels("karpenter.sh/nodepool");
        let (s, k) = (seen.clone(), key.to_string());
        tasks.push(tokio::spawn(async move {
            let mut stream = watcher::watcher(nodes, cfg).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        eprintln!("[scaleup] a watch failed (retrying): {e}");
                        continue;
                    }
                };
                if let watcher::Event::Apply(n) | watcher::Event::InitApply(n) = ev
                    && let Ok(mut s) = s.lock()
                {
                    on_node(&mut s, &n, &k, Instant::now());
                }
            }
        }));
        let ar = ApiResource {
            group: "karpenter.sh".into(),
            version: "v1".into(),
            api_version: "karpenter.sh/v1".into(),
            kind: "NodeClaim".into(),
            plural: "nodeclaims".into(),
        };
        let claims: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let s = seen.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = watcher::watcher(claims, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = stream.next().await {
                let ev = match ev {
                    Ok(ev) => ev,
                    Err(e) => {
                        eprintln!("[scaleup] a watch failed (retrying): {e}");
                        continue;
                    }
                };
                if let watcher::Event::Apply(c) | watcher::Event::InitApply(c) = ev
                    && let (Some(name), Ok(mut s)) = (c.metadata.name, s.lock())
                {
                    s.claims.insert(name);
                }
            }
        }));
        Observer {
            seen,
            key: key.to_string(),
            tasks,
        }
    }

    /// How many workload pods run.
    pub fn running(&self) -> usize {
        self.seen
            .lock()
            .map(|s| s.pods.values().filter(|p| p.1.is_some()).count())
            .unwrap_or(0)
    }

    pub fn result(&self, gated: bool) -> RunResult {
        let s = match self.seen.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        compute(&s, gated, &self.key)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn label<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn on_pod(s: &mut Seen, p: &Pod, now: Instant) {
    let Some(uid) = p.metadata.uid.clone() else {
        return;
    };
    let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
    let status = p.status.as_ref();
    let running = status.and_then(|s| s.phase.as_deref()) == Some("Running");
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let app = label(&p.metadata, "app").unwrap_or_default();
    if app == LOAD {
        let e = s.pods.entry(uid).or_insert((now, None, None));
        if running && e.1.is_none() {
            e.1 = Some(now);
            e.2 = node;
        }
    } else if ready && let Some(node) = node {
        s.agents.entry(node).or_default().entry(uid).or_insert(now);
    }
}

fn on_node(s: &mut Seen, n: &Node, key: &str, now: Instant) {
    let Some(name) = n.metadata.name.clone() else {
        return;
    };
    let gated = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key));
    let e = s.nodes.entry(name).or_default();
    e.created.get_or_insert(now);
    if gated {
        e.gated = true;
    } else if e.gated && e.opened.is_none() {
        e.opened = Some(now);
    }
}

/// Quantiles in milliseconds.
#[derive(Debug, Default, Serialize, Clone, Copy)]
pub struct Ms {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
    pub n: usize,
}

pub fn quantiles(mut v: Vec<f64>) -> Ms {
    if v.is_empty() {
        return Ms::default();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Ms {
        p50: at(0.50),
        p99: at(0.99),
        max: v[v.len() - 1],
        n: v.len(),
    }
}

#[derive(Debug, Serialize, Clone)]
pub struct RunResult {
    pub gated: bool,
    pub pods: usize,
    pub pods_running: usize,
    pub nodeclaims: usize,
    /// A workload pod's first sighting to its Running.
    pub pending_to_running_ms: Ms,
    /// A node's first sighting to all its DaemonSets' pods Ready.
    pub daemonsets_ready_ms: Ms,
    /// A node's first sighting to its gate opening (gated runs).
    pub gated_ms: Ms,
    /// The gate's opening after the node's DaemonSets were all Ready.
    pub gate_after_daemonsets_ms: Ms,
    /// Of all the time the workload's pods spent pending, the share during
    /// which the node each later ran on was already there and gated.
    pub gate_share: f64,
    /// Nodes that were never seen gated (gated runs; should be 0).
    pub nodes_never_gated: usize,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn compute(s: &Seen, gated: bool, _key: &str) -> RunResult {
    let waits: Vec<f64> = s
        .pods
        .values()
        .filter_map(|(seen, run, _)| Some(ms(run.as_ref()?.duration_since(*seen))))
        .collect();
    let mut ds_ready = Vec::new();
    let mut held = Vec::new();
    let mut after_ds = Vec::new();
    let mut never_gated = 0;
    for (name, n) in &s.nodes {
        let Some(created) = n.created else { continue };
        let all_ready = s.agents.get(name).and_then(|a| a.values().max().copied());
        if let Some(r) = all_ready {
            ds_ready.push(ms(r.saturating_duration_since(created)));
        }
        if gated && !n.gated {
            never_gated += 1;
        }
        if let Some(open) = n.opened {
            held.push(ms(open.duration_since(created)));
            if let Some(r) = all_ready {
                after_ds.push(ms(open.saturating_duration_since(r)));
            }
        }
    }
    RunResult {
        gated,
        pods: s.pods.len(),
        pods_running: waits.len(),
        nodeclaims: s.claims.len(),
        pending_to_running_ms: quantiles(waits.clone()),
        daemonsets_ready_ms: quantiles(ds_ready),
        gated_ms: quantiles(held),
        gate_after_daemonsets_ms: quantiles(after_ds),
        gate_share: gate_share(s, waits.iter().sum()),
        nodes_never_gated: never_gated,
    }
}

/// The part of the pods' pending time during which their node existed and
/// was gated, over all their pending time.
fn gate_share(s: &Seen, total_ms: f64) -> f64 {
    if total_ms <= 0.0 {
        return 0.0;
    }
    let mut gated = 0.0;
    for (seen, run, node) in s.pods.values() {
        let (Some(run), Some(node)) = (run, node) else {
            continue;
        };
        let Some(n) = s.nodes.get(node) else { continue };
        let (Some(created), Some(open)) = (n.created, n.opened) else {
            continue;
        };
        let from = created.max(*seen);
        let to = open.min(*run);
        if to > from {
            gated += ms(to.duration_since(from));
        }
    }
    gated / total_ms
}
