//! The outside view: watches on the benchmark's nodes and DaemonSet pods,
//! every event stamped the moment it is received.
//!
//! It runs on its own thread and single-threaded runtime so that the proxy
//! and the setup work never delay a timestamp. It records what it sees and
//! judges nothing; `report` turns the record into numbers after the run.
//! Besides the receive time it keeps each change's resourceVersion: in
//! kube-apiserver that is the etcd revision of the write, one counter for the
//! whole cluster, so "was every expected pod Ready when the taint went" can be
//! answered exactly from revisions, whatever order two separate watch streams
//! happened to deliver their events in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::workload::{DS_LABEL, NAMESPACE, NODE_LABEL, STUCK_LABEL};

/// One observation of a change.
#[derive(Debug, Clone, Copy)]
pub struct Sighting {
    pub at: Instant,
    pub wall: Timestamp,
    /// The object's resourceVersion (etcd revision) after the change.
    pub rv: u64,
}

#[derive(Debug, Default, Clone)]
pub struct NodeRecord {
    pub stuck: bool,
    /// First sighting of the node.
    pub added: Option<Sighting>,
    pub created: Option<Timestamp>,
    /// First sighting without the startup taint.
    pub opened: Option<Sighting>,
    /// The taint came back after the node opened.
    pub retainted: bool,
    pub deleted: bool,
    /// The newest event of the node (for the floor probes: when a write of
    /// theirs arrived).
    pub last: Option<Sighting>,
    /// `nodegate.dev/opened-by` when the opening write set it (nodegate
    /// does; another controller may not). Informational only.
    pub opened_by: Option<String>,
    /// Readiness transitions of each DaemonSet's pods on this node, per pod
    /// uid: (sighting, ready after the change). A DaemonSet can briefly have
    /// two pods on a node (the DaemonSet controller creates a duplicate under
    /// load and deletes it again); it counts as Ready while any one is.
    pub ds: HashMap<String, HashMap<String, Vec<(Sighting, bool)>>>,
    /// When a pod of each DaemonSet was first seen on this node (created by
    /// the DaemonSet controller), to show where the control plane's time goes.
    pub ds_created: HashMap<String, Instant>,
}

#[derive(Debug, Default)]
pub struct Record {
    pub nodes: HashMap<String, NodeRecord>,
    /// pod uid → (node, DaemonSet, ready).
    pods: HashMap<String, (String, String, bool)>,
    /// pod uid → name, and its newest event (for the floor probes).
    pub pod_names: HashMap<String, String>,
    pub pod_last: HashMap<String, Sighting>,
    pub pod_events: u64,
    pub node_events: u64,
    pub watch_errors: u64,
}

impl Record {
    pub fn opened(&self) -> usize {
        self.nodes.values().filter(|n| n.opened.is_some()).count()
    }
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn sighting(at: Instant, rv: u64) -> Sighting {
    Sighting {
        at,
        wall: Timestamp::now(),
        rv,
    }
}

fn has_taint(n: &Node, key: &str, effect: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key && t.effect == effect))
}

/// Ready as semantics.md §4 has it for the gate: not terminating, phase
/// Running, condition Ready=True. (The benchmark's DaemonSets set no
/// minReadySeconds.)
fn pod_ready(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.status.as_ref().is_some_and(|s| {
            s.phase.as_deref() == Some("Running")
                && s.conditions
                    .as_ref()
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
}

impl Record {
    fn node_seen(&mut self, n: &Node, at: Instant, taint: &(String, String)) {
        let Some(name) = n.metadata.name.clone() else {
            return;
        };
        self.node_events += 1;
        let rv = rv_of(&n.metadata);
        let r = self.nodes.entry(name).or_default();
        if r.added.is_none() {
            r.added = Some(sighting(at, rv));
            r.created = n.metadata.creation_timestamp.as_ref().map(|t| t.0);
            r.stuck = n
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.get(STUCK_LABEL).is_some_and(|v| v == "true"));
        }
        r.last = Some(sighting(at, rv));
        let tainted = has_taint(n, &taint.0, &taint.1);
        match (&r.opened, tainted) {
            (None, false) => {
                r.opened = Some(sighting(at, rv));
                r.opened_by = n
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("nodegate.dev/opened-by").cloned());
            }
            (Some(_), true) => r.retainted = true,
            _ => {}
        }
    }

    fn pod_seen(&mut self, p: &Pod, at: Instant) {
        self.pod_events += 1;
        let (Some(uid), Some(node), Some(ds)) = (
            p.metadata.uid.clone(),
            p.spec.as_ref().and_then(|s| s.node_name.clone()),
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(DS_LABEL).cloned()),
        ) else {
            return;
        };
        let ready = pod_ready(p);
        self.pod_last
            .insert(uid.clone(), sighting(at, rv_of(&p.metadata)));
        if let Some(name) = &p.metadata.name
            && !self.pod_names.contains_key(&uid)
        {
            self.pod_names.insert(uid.clone(), name.clone());
        }
        self.nodes
            .entry(node.clone())
            .or_default()
            .ds_created
            .entry(ds.clone())
            .or_insert(at);
        let before = self
            .pods
            .insert(uid.clone(), (node.clone(), ds.clone(), ready));
        if before.is_some_and(|(_, _, was)| was == ready) {
            return;
        }
        let s = sighting(at, rv_of(&p.metadata));
        self.nodes
            .entry(node)
            .or_default()
            .ds
            .entry(ds)
            .or_default()
            .entry(uid)
            .or_default()
            .push((s, ready));
    }

    fn pod_gone(&mut self, p: &Pod, at: Instant) {
        let Some(uid) = p.metadata.uid.as_deref() else {
            return;
        };
        self.pod_last.remove(uid);
        self.pod_names.remove(uid);
        if let Some((node, ds, true)) = self.pods.remove(uid) {
            // A deleted Ready pod stops counting, as of the revision of the
            // delete (a watch DELETED event carries it).
            let s = sighting(at, rv_of(&p.metadata));
            self.nodes
                .entry(node)
                .or_default()
                .ds
                .entry(ds)
                .or_default()
                .entry(uid.to_string())
                .or_default()
                .push((s, false));
        }
    }
}

/// The running watches; `stop` ends them (before the cluster goes away).
pub struct Observer {
    pub record: Arc<Mutex<Record>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Observer {
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the watches on their own thread. `taint` is (key, effect).
pub fn start(kubeconfig: std::path::PathBuf, taint: (String, String)) -> anyhow::Result<Observer> {
    let record = Arc::new(Mutex::new(Record::default()));
    let rec = Arc::clone(&record);
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let thread = std::thread::Builder::new()
        .name("observer".into())
        .spawn(move || {
            rt.block_on(async move {
                let client = match crate::client_for(&kubeconfig).await {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("[scale] observer: {e:#}");
                        return;
                    }
                };
                let nodes = watch_nodes(client.clone(), Arc::clone(&rec), taint);
                let pods = watch_pods(client, rec);
                tokio::select! {
                    _ = async { tokio::join!(nodes, pods) } => {}
                    _ = rx => {}
                }
            })
        })?;
    Ok(Observer {
        record,
        stop: Some(tx),
        thread: Some(thread),
    })
}

fn lock(r: &Mutex<Record>) -> std::sync::MutexGuard<'_, Record> {
    match r.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

async fn watch_nodes(client: kube::Client, rec: Arc<Mutex<Record>>, taint: (String, String)) {
    let api: Api<Node> = Api::all(client);
    let cfg = watcher::Config::default().labels(&format!("{NODE_LABEL}=true"));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        let at = Instant::now();
        let mut r = lock(&rec);
        match item {
            Ok(Event::Apply(n)) | Ok(Event::InitApply(n)) => r.node_seen(&n, at, &taint),
            Ok(Event::Delete(n)) => {
                if let Some(name) = n.metadata.name.as_deref()
                    && let Some(nr) = r.nodes.get_mut(name)
                {
                    nr.deleted = true;
                }
            }
            Ok(Event::Init) | Ok(Event::InitDone) => {}
            Err(e) => {
                r.watch_errors += 1;
                eprintln!("[scale] node watch: {e}");
            }
        }
    }
}

async fn watch_pods(client: kube::Client, rec: Arc<Mutex<Record>>) {
    let api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let cfg = watcher::Config::default().labels(DS_LABEL);
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        let at = Instant::now();
        let mut r = lock(&rec);
        match item {
            Ok(Event::Apply(p)) | Ok(Event::InitApply(p)) => r.pod_seen(&p, at),
            Ok(Event::Delete(p)) => r.pod_gone(&p, at),
            Ok(Event::Init) | Ok(Event::InitDone) => {}
            Err(e) => {
                r.watch_errors += 1;
                eprintln!("[scale] pod watch: {e}");
            }
        }
    }
}
