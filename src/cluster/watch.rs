//! The shared watchers: one watch stream per kind for the whole process.
//!
//! Nodes (all), DaemonSets (all), DaemonSet pods (server-side filtered to pods
//! that carry the DaemonSet controller's `pod-template-generation` label and
//! are bound to a node), one watch per critical-pod entry, and with `canary`
//! one on nodegate's own canary pods (its namespace, its label). Each event is
//! projected to the compact model at once and handed to the router; whole
//! objects are never kept. A watch that fails restarts with backoff; a
//! re-list is swapped into the index whole once it is complete (see
//! `relist`), deleting the objects that vanished meanwhile. Every object's
//! `creationTimestamp` is evidence of the API server's clock (`server_time`;
//! its `managedFields` times are not: clients choose them), and `start` also
//! starts that module's probe of the server's clock.
//! This module decides nothing about gates.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use nodegate_actors::router::Router;
use nodegate_core::canary::CanaryConfig;
use nodegate_core::model::{DaemonSetInfo, NodeInfo, PodInfo};
use nodegate_core::readiness::CriticalPodEntry;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::cluster::lean::Lean;
use crate::cluster::project;
use crate::cluster::relist::{Listing, Op, Order};
use crate::cluster::server_time::{self, ServerTime};

/// The DaemonSet controller puts this label on every pod it creates; filtering
/// on it server-side keeps every other pod in the cluster off the wire.
pub const DAEMONSET_POD_LABEL: &str = "pod-template-generation";

/// Counts of what the watchers did, for health and metrics.
#[derive(Debug, Default)]
pub struct WatchStats {
    pub restarts: AtomicU64,
    pub events: AtomicU64,
    /// Watch loops that ended. A watch retries errors for ever, so a loop
    /// ends only by a panic or a closed stream: the process is then blind to
    /// that kind and `/healthz` says so.
    stopped: std::sync::Mutex<Vec<&'static str>>,
}

impl WatchStats {
    /// The kinds whose watch loop has ended.
    pub fn stopped(&self) -> Vec<&'static str> {
        match self.stopped.lock() {
            Ok(v) => v.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Records a watch loop's end however it ends, unwinding included (a panic
/// is logged by the runtime; at shutdown the runtime drops the loops too, and
/// nothing is served any more by then).
struct StopGuard {
    kind: &'static str,
    stats: Arc<WatchStats>,
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        match self.stats.stopped.lock() {
            Ok(mut v) => v.push(self.kind),
            Err(poisoned) => poisoned.into_inner().push(self.kind),
        }
    }
}

/// What one watch feeds into the router, per object. Objects are projected
/// first (so a re-list can be held as compact projections), then indexed.
trait Sink<K>: Send + 'static {
    /// The projection the router indexes.
    type Item: Send;
    /// How a re-list of this kind is swapped in (see `relist`).
    const RELIST_ORDER: Order;
    /// Projects the object; returns its identity for re-list bookkeeping
    /// with the projection, or `None` when the object is skipped.
    fn project(&mut self, obj: &K) -> Option<(Id, Self::Item)>;
    /// Indexes a projection.
    fn upsert(&mut self, item: Self::Item);
    /// Removes an object by the identity `project` returned.
    fn delete(&mut self, id: &Id);
    /// Within a re-list, lower ranks are indexed first.
    fn rank(_item: &Self::Item) -> u8 {
        0
    }
    /// Whether the index already shows exactly this projection (a re-list
    /// then holds only its identity, see `relist`).
    fn unchanged(&self, _item: &Self::Item) -> bool {
        false
    }
}

/// An indexed object's identity: a node's name or a DaemonSet's uid (with an
/// empty second part), or a pod's (node, uid).
type Id = (String, String);

struct NodeSink {
    router: Arc<Router>,
}

impl Sink<Lean<Node>> for NodeSink {
    type Item = NodeInfo;
    const RELIST_ORDER: Order = Order::UpsertsFirst;

    fn project(&mut self, Lean(n): &Lean<Node>) -> Option<(Id, Self::Item)> {
        let (info, oddities) = project::node(n);
        for o in oddities {
            tracing::warn!(object = %o.object, "{}", o.what);
        }
        let info = info?;
        Some(((info.name.clone(), String::new()), info))
    }
    fn upsert(&mut self, info: Self::Item) {
        self.router.node_upserted(info);
    }
    /// Same name, same resourceVersion: the same object (the CSI drivers
    /// the index adds come from another watch).
    fn unchanged(&self, info: &Self::Item) -> bool {
        !info.resource_version.is_empty()
            && self
                .router
                .node(&info.name)
                .is_some_and(|n| n.resource_version == info.resource_version)
    }
    fn delete(&mut self, id: &Id) {
        self.router.node_deleted(&id.0);
    }
}

struct DaemonSetSink {
    router: Arc<Router>,
}

impl Sink<DaemonSet> for DaemonSetSink {
    type Item = DaemonSetInfo;
    /// Every DaemonSet may add an expected member: add before removing.
    const RELIST_ORDER: Order = Order::UpsertsFirst;

    fn project(&mut self, ds: &DaemonSet) -> Option<(Id, Self::Item)> {
        let info = project::daemonset(ds)?;
        Some(((info.uid.clone(), String::new()), info))
    }
    fn upsert(&mut self, info: Self::Item) {
        self.router.daemonset_upserted(info);
    }
    fn delete(&mut self, id: &Id) {
        self.router.daemonset_deleted(&id.0);
    }
}

/// Pods, keyed by (node, uid): a pod never moves between nodes, and the router
/// indexes pods by node.
struct PodSink {
    router: Arc<Router>,
    /// Namespaces whose pods keep their labels; `None` keeps every pod's.
    /// A DaemonSet member is matched by its controller's uid, so a pod's
    /// labels matter only to a critical-pod entry, which selects within its
    /// own namespace. Dropping them elsewhere roughly halves what the index,
    /// every gate and every journal entry hold per pod (the scale benchmark's
    /// memory was mostly pod copies).
    keep_labels_in: Option<Arc<HashSet<String>>>,
    /// The canaries' namespace (`canary`): only its pods keep their
    /// sandbox condition and status note, which nothing else reads (and
    /// which would otherwise wake a gate once more per DaemonSet pod).
    canary_namespace: Option<Arc<str>>,
}

impl Sink<Lean<Pod>> for PodSink {
    type Item = PodInfo;
    /// Fewer pods can only keep a gate closed: remove before adding, and
    /// index the pods that are not Ready before the Ready ones.
    const RELIST_ORDER: Order = Order::DeletesFirst;

    fn project(&mut self, Lean(p): &Lean<Pod>) -> Option<(Id, Self::Item)> {
        let mut info = project::pod(p)?;
        if info.node_name.is_empty() {
            return None;
        }
        if let Some(keep) = &self.keep_labels_in
            && !keep.contains(&info.namespace)
        {
            info.labels = Default::default();
        }
        if self.canary_namespace.as_deref() != Some(info.namespace.as_str()) {
            info.sandbox_ready = false;
            info.status_note = None;
        }
        Some(((info.node_name.clone(), info.uid.clone()), info))
    }
    fn upsert(&mut self, info: Self::Item) {
        self.router.pod_upserted(info);
    }
    fn delete(&mut self, id: &Id) {
        self.router.pod_deleted(&id.0, &id.1);
    }
    fn rank(info: &Self::Item) -> u8 {
        u8::from(info.ready)
    }
    fn unchanged(&self, info: &Self::Item) -> bool {
        self.router
            .pod(&info.node_name, &info.uid)
            .is_some_and(|p| *p == *info)
    }
}

/// CSINodes, by node name (a CSINode is named after its node): the CSI
/// drivers each lists, for DaemonSets annotated `nodegate.dev/csi-driver`.
struct CsiNodeSink {
    router: Arc<Router>,
}

impl Sink<CSINode> for CsiNodeSink {
    type Item = (String, Vec<String>);
    /// A listed driver can only open a node: remove before adding.
    const RELIST_ORDER: Order = Order::DeletesFirst;

    fn project(&mut self, c: &CSINode) -> Option<(Id, Self::Item)> {
        let (name, drivers) = project::csinode(c)?;
        Some(((name.clone(), String::new()), (name, drivers)))
    }
    fn upsert(&mut self, (name, drivers): Self::Item) {
        self.router.csinode_upserted(&name, drivers);
    }
    fn delete(&mut self, id: &Id) {
        self.router.csinode_deleted(&id.0);
    }
}

fn delete_id<K: Resource>(obj: &K, by_name: bool) -> Id {
    let meta = obj.meta();
    if by_name {
        (meta.name.clone().unwrap_or_default(), String::new())
    } else {
        (meta.uid.clone().unwrap_or_default(), String::new())
    }
}

/// Where a watch loop reports: its first complete list (`synced`), its
/// counts, and the server-stamped times of what it sees.
#[derive(Clone)]
struct Reports {
    synced: mpsc::Sender<&'static str>,
    stats: Arc<WatchStats>,
    server_time: Arc<ServerTime>,
}

/// Runs one watch until the process ends. Sends its `kind` on `synced` once,
/// after the first complete list.
async fn run<K, S>(
    kind: &'static str,
    api: Api<K>,
    config: watcher::Config,
    mut sink: S,
    reports: Reports,
    id_of_deleted: impl Fn(&K) -> Id + Send + 'static,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    S: Sink<K>,
{
    let Reports {
        synced,
        stats,
        server_time,
    } = reports;
    let _guard = StopGuard {
        kind,
        stats: Arc::clone(&stats),
    };
    // The objects this watch has indexed, so a re-list can delete the ones
    // that disappeared while the watch was down; the re-list's changes are
    // swapped in whole at InitDone (unchanged objects are not held).
    let mut listing: Listing<Id, S::Item> = Listing::default();
    let mut first_sync = true;
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    while let Some(item) = stream.next().await {
        stats.events.fetch_add(1, Ordering::Relaxed);
        match item {
            Ok(Event::Apply(obj)) => {
                server_time.saw_object(obj.meta());
                if let Some((id, item)) = sink.project(&obj) {
                    listing.applied(id);
                    sink.upsert(item);
                }
            }
            Ok(Event::Delete(obj)) => {
                // A pod's identity needs its node, which the deleted object
                // still carries; nodes and DaemonSets go by name / uid.
                let id = id_of_deleted(&obj);
                if listing.deleted(&id) {
                    sink.delete(&id);
                }
            }
            Ok(Event::Init) => listing.begin(),
            Ok(Event::InitApply(obj)) => {
                server_time.saw_object(obj.meta());
                if let Some((id, item)) = sink.project(&obj) {
                    if sink.unchanged(&item) {
                        listing.listed_unchanged(id);
                    } else if let Some(item) = listing.listed(id, item) {
                        sink.upsert(item);
                    }
                }
            }
            Ok(Event::InitDone) => {
                for op in listing.done(S::RELIST_ORDER, S::rank) {
                    match op {
                        Op::Upsert(item) => sink.upsert(item),
                        Op::Delete(id) => sink.delete(&id),
                    }
                }
                if first_sync {
                    first_sync = false;
                    let _ = synced.send(kind).await;
                }
            }
            Err(e) => {
                stats.restarts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
            }
        }
    }
}

fn pod_id(Lean(p): &Lean<Pod>) -> Id {
    (
        p.spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        p.metadata.uid.clone().unwrap_or_default(),
    )
}

/// How many watch streams `start` opens, each of which reports its first
/// complete list once: nodes, DaemonSets, DaemonSet pods, CSINodes, one
/// per critical-pod entry, and the canaries' with `canary`.
pub fn watch_count(critical: &[CriticalPodEntry], canary: Option<&CanaryConfig>) -> usize {
    4 + critical.len() + usize::from(canary.is_some())
}

/// Starts every watcher and returns at once with a receiver on which each
/// watch sends its kind after its first complete list (the caller waits for
/// all of them before it reports ready).
pub async fn start(
    client: Client,
    router: Arc<Router>,
    (critical, canary): (&[CriticalPodEntry], Option<&CanaryConfig>),
    stats: Arc<WatchStats>,
    server_time: Arc<ServerTime>,
) -> mpsc::Receiver<&'static str> {
    let (tx, rx) = mpsc::channel(watch_count(critical, canary));
    let reports = Reports {
        synced: tx,
        stats,
        server_time: Arc::clone(&server_time),
    };
    // Evidence of the API server's clock when the lists' stamps are old.
    tokio::spawn(server_time::probe(client.clone(), Arc::clone(&server_time)));
    let bound = "spec.nodeName!=";
    // The same pod may come from both pod watches; in these namespaces both
    // must index it identically, labels and all.
    let mut critical_namespaces: HashSet<String> =
        critical.iter().map(|e| e.namespace.clone()).collect();
    // A canary is recognised by its label, in its namespace.
    critical_namespaces.extend(canary.map(|c| c.namespace.clone()));
    let critical_namespaces = Arc::new(critical_namespaces);
    let canary_namespace: Option<Arc<str>> = canary.map(|c| Arc::from(c.namespace.as_str()));

    tokio::spawn(run(
        "nodes",
        Api::<Lean<Node>>::all(client.clone()),
        watcher::Config::default(),
        NodeSink {
            router: Arc::clone(&router),
        },
        reports.clone(),
        |n: &Lean<Node>| delete_id(n, true),
    ));
    tokio::spawn(run(
        "daemonsets",
        Api::<DaemonSet>::all(client.clone()),
        watcher::Config::default(),
        DaemonSetSink {
            router: Arc::clone(&router),
        },
        reports.clone(),
        |d: &DaemonSet| delete_id(d, false),
    ));
    tokio::spawn(run(
        "daemonset pods",
        Api::<Lean<Pod>>::all(client.clone()),
        watcher::Config::default()
            .labels(DAEMONSET_POD_LABEL)
            .fields(bound),
        PodSink {
            router: Arc::clone(&router),
            keep_labels_in: Some(Arc::clone(&critical_namespaces)),
            canary_namespace: canary_namespace.clone(),
        },
        reports.clone(),
        pod_id,
    ));
    tokio::spawn(run(
        "csinodes",
        Api::<CSINode>::all(client.clone()),
        watcher::Config::default(),
        CsiNodeSink {
            router: Arc::clone(&router),
        },
        reports.clone(),
        |c: &CSINode| delete_id(c, true),
    ));
    for entry in critical {
        let selector = entry.selector.to_string();
        tokio::spawn(run(
            "critical pods",
            Api::<Lean<Pod>>::namespaced(client.clone(), &entry.namespace),
            watcher::Config::default().labels(&selector).fields(bound),
            PodSink {
                router: Arc::clone(&router),
                keep_labels_in: None,
                canary_namespace: canary_namespace.clone(),
            },
            reports.clone(),
            pod_id,
        ));
    }
    if let Some(c) = canary {
        // nodegate's own canaries: its namespace, its label, bound pods.
        tokio::spawn(run(
            "canary pods",
            Api::<Lean<Pod>>::namespaced(client.clone(), &c.namespace),
            watcher::Config::default()
                .labels(nodegate_core::canary::CANARY_LABEL)
                .fields(bound),
            PodSink {
                router: Arc::clone(&router),
                keep_labels_in: None,
                canary_namespace,
            },
            reports.clone(),
            pod_id,
        ));
    }
    rx
}
