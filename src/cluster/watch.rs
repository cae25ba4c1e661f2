//! The shared watches, one stream per kind for the whole process
//! (docs/architecture.md, From a watch to a gate). Each event is projected at
//! once and handed to the router; whole objects are never kept. Every
//! object's `creationTimestamp` is evidence of the API server's clock
//! (`server_time`). This module decides nothing about gates.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::CSINode;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use nodegate_actors::router::Router;
use nodegate_core::rules::readiness::CriticalPodEntry;
use nodegate_core::vocab::config::CanaryConfig;
use nodegate_core::vocab::model::{
    DaemonSetInfo, Interner, NodeInfo, PodInfo, Shared, SliceInfo, Uid,
};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::cluster::lean::Lean;
use crate::cluster::project;
use crate::cluster::protobuf::{self, Proto, Wire, WireNode, WirePod};
use crate::cluster::relist::{Listing, Op};
use crate::cluster::server_time::{self, ServerTime, lock};

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
        lock(&self.stopped).clone()
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
        lock(&self.stats.stopped).push(self.kind);
    }
}

/// What one watch feeds into the router, per object. Objects are projected
/// first (so a re-list can be held as compact projections), then indexed.
trait Sink<K>: Send + 'static {
    /// The projection the router indexes.
    type Item: Send;
    /// An indexed object's identity, as the re-list bookkeeping keys it.
    type Id: Clone + Eq + std::hash::Hash + Send;
    /// The object's identity and projection, or `None` to skip it.
    fn project(&mut self, obj: &K) -> Option<(Self::Id, Self::Item)>;
    fn upsert(&mut self, item: Self::Item);
    /// Removes an object by the identity `project` returned.
    fn delete(&mut self, id: &Self::Id);
    /// Whether indexing this projection may open a gate: within a re-list
    /// it then waits until the vanished objects are swept (see `relist`).
    fn may_open(_item: &Self::Item) -> bool {
        false
    }
    /// Whether the index already shows exactly this projection (a re-list
    /// then only marks its identity as listed, see `relist`).
    fn unchanged(&self, _item: &Self::Item) -> bool {
        false
    }
}

/// An indexed object's identity: a node's name or a DaemonSet's uid (with an
/// empty second part), or a ResourceSlice's (node, name).
type Id = (Shared, Shared);

/// A pod's identity: (node, uid), its node shared with the pod's projection
/// (a reference count) and its uid 16 bytes: 32 bytes a pod in the watch's
/// table.
type PodId = (Shared, Uid);

struct NodeSink {
    router: Arc<Router>,
    interner: Interner,
}

impl Sink<WireNode> for NodeSink {
    /// Nodes stream: deleting a vanished node opens no other node, so
    /// every listed node is indexed at once and the sweep comes last.
    type Item = NodeInfo;
    type Id = Id;

    fn project(&mut self, n: &WireNode) -> Option<(Id, Self::Item)> {
        let (info, oddities) = project::node_in(&n.view(), &mut self.interner);
        for o in oddities {
            tracing::warn!(object = %o.object, "{}", o.what);
        }
        let info = info?;
        Some(((info.name.as_str().into(), Shared::default()), info))
    }
    fn upsert(&mut self, info: Self::Item) {
        self.router.node_upserted(info);
    }
    /// Same name, same resourceVersion: the same object (the CSI drivers
    /// the index adds come from another watch).
    fn unchanged(&self, info: &Self::Item) -> bool {
        let same = |n: Arc<NodeInfo>| n.resource_version == info.resource_version;
        !info.resource_version.is_empty() && self.router.node(&info.name).is_some_and(same)
    }
    /// The index lets go of the node first, so that its values are among
    /// those the interner may forget.
    fn delete(&mut self, id: &Id) {
        self.router.node_deleted(&id.0);
        self.interner.released();
    }
}

struct DaemonSetSink {
    router: Arc<Router>,
}

impl Sink<DaemonSet> for DaemonSetSink {
    /// Every DaemonSet may add an expected member: listed ones are indexed
    /// at once, the vanished ones swept last.
    type Item = DaemonSetInfo;
    type Id = Id;

    fn project(&mut self, ds: &DaemonSet) -> Option<(Id, Self::Item)> {
        let info = project::daemonset(ds)?;
        Some(((info.uid.as_str().into(), Shared::default()), info))
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
    interner: Interner,
    /// The canaries' namespace (`canary`): only its pods keep their
    /// sandbox condition and status note, which nothing else reads (and
    /// which would otherwise wake a gate once more per DaemonSet pod).
    canary_namespace: Option<Arc<str>>,
}

impl Sink<WirePod> for PodSink {
    /// Fewer pods can only keep a gate closed: a listed pod that is not
    /// Ready is indexed at once, a Ready one after the sweep.
    type Item = PodInfo;
    type Id = PodId;

    fn project(&mut self, p: &WirePod) -> Option<(PodId, Self::Item)> {
        let view = p.view();
        if view.node_name.as_deref().is_none_or(str::is_empty) {
            return None;
        }
        let namespace = view.namespace.as_deref()?;
        let keep = project::Keep {
            labels: self
                .keep_labels_in
                .as_ref()
                .is_none_or(|k| k.contains(namespace)),
            note: self.canary_namespace.as_deref() == Some(namespace),
        };
        let mut info = project::pod_in(&view, &mut self.interner, keep)?;
        // A uid that is not a UUID is text: one copy a pod, not one a
        // version (the listing keeps the first version's as the pod's
        // identity, and later versions share it).
        if info.uid.is_text()
            && let Some(indexed) = self.router.pod(&info.node_name, &info.uid)
        {
            info.uid = indexed.uid.clone();
        }
        Some(((info.node_name.clone(), info.uid.clone()), info))
    }
    fn upsert(&mut self, info: Self::Item) {
        self.router.pod_upserted(info);
    }
    fn delete(&mut self, id: &PodId) {
        self.router.pod_deleted(&id.0, &id.1);
        self.interner.released();
    }
    fn may_open(info: &Self::Item) -> bool {
        info.ready || info.ready_annotation
    }
    fn unchanged(&self, info: &Self::Item) -> bool {
        let indexed = self.router.pod(&info.node_name, &info.uid);
        indexed.is_some_and(|p| *p == *info)
    }
}

/// CSINodes, by node name (a CSINode is named after its node): the CSI
/// drivers each lists, for DaemonSets annotated `nodegate.dev/csi-driver`.
struct CsiNodeSink {
    router: Arc<Router>,
}

impl Sink<CSINode> for CsiNodeSink {
    /// A listed driver can only open a node: indexed after the sweep.
    type Item = (String, Vec<String>);
    type Id = Id;

    fn project(&mut self, c: &CSINode) -> Option<(Id, Self::Item)> {
        let (name, drivers) = project::csinode(c)?;
        Some(((name.as_str().into(), Shared::default()), (name, drivers)))
    }
    fn upsert(&mut self, (name, drivers): Self::Item) {
        self.router.csinode(&name, Some(drivers));
    }
    fn may_open(_item: &Self::Item) -> bool {
        true
    }
    fn delete(&mut self, id: &Id) {
        self.router.csinode(&id.0, None);
    }
}

/// ResourceSlices local to a node (`spec.nodeName`), by (node, name): what
/// `draDrivers` reads. A slice's node name is immutable, and the deleted
/// object still carries it.
struct ResourceSliceSink {
    router: Arc<Router>,
}

impl Sink<ResourceSlice> for ResourceSliceSink {
    type Item = (String, SliceInfo);
    type Id = Id;

    fn project(&mut self, s: &ResourceSlice) -> Option<(Id, Self::Item)> {
        let (node, slice) = project::resource_slice(s)?;
        let id = (node.as_str().into(), slice.name.as_str().into());
        Some((id, (node, slice)))
    }
    fn upsert(&mut self, (node, slice): Self::Item) {
        self.router.resource_slice_upserted(&node, slice);
    }
    /// A slice can complete its pool, so within a re-list it waits for the
    /// sweep like a Ready pod.
    fn may_open(_item: &Self::Item) -> bool {
        true
    }
    fn delete(&mut self, id: &Id) {
        let (node, name) = id;
        self.router.resource_slice_deleted(node, name);
    }
}

fn slice_id(s: &ResourceSlice) -> Id {
    let node = s.spec.node_name.as_deref().unwrap_or_default();
    let name = s.metadata.name.as_deref().unwrap_or_default();
    (node.into(), name.into())
}

fn delete_id<K: Resource>(obj: &K, by_name: bool) -> Id {
    let meta = obj.meta();
    let id = if by_name { &meta.name } else { &meta.uid };
    (id.as_deref().unwrap_or_default().into(), Shared::default())
}

/// How a watch names a deleted object it may no longer be able to project.
type IdOfDeleted<K, I> = Box<dyn Fn(&K) -> I + Send>;

/// One watch's handling: projection, the re-list's mark and sweep, the index.
struct Indexing<K, S: Sink<K>> {
    sink: S,
    listing: Listing<S::Id, S::Item>,
    server_time: Arc<ServerTime>,
    id_of_deleted: IdOfDeleted<K, S::Id>,
}

/// The handling of one watch's events, without the stream: what the memory
/// example (`examples/open_memory.rs`) and the tests feed with events
/// decoded from the API server's JSON.
pub type WatchFeed<K> = Box<dyn Handle<K>>;

/// A [`WatchFeed`]'s handling.
pub trait Handle<K>: Send {
    /// Handles one event as the watch loop does; true at the end of a
    /// complete list.
    fn handle(&mut self, event: Event<K>) -> bool;
    /// How many objects this watch has indexed.
    fn known(&self) -> usize;
    /// How many projections a re-list in progress holds back.
    fn held(&self) -> usize;
}

/// What a watched object tells of the API server's clock.
pub trait Stamped {
    /// Its `creationTimestamp`.
    fn created(&self) -> Option<Timestamp>;
}

macro_rules! stamped {
    ($($kind:ty),*) => {$(
        impl Stamped for $kind {
            fn created(&self) -> Option<Timestamp> {
                self.meta().creation_timestamp.as_ref().map(|t| t.0)
            }
        }
    )*};
}

stamped!(DaemonSet, CSINode, ResourceSlice);

impl Stamped for WireNode {
    fn created(&self) -> Option<Timestamp> {
        WireNode::created(self)
    }
}

impl Stamped for WirePod {
    fn created(&self) -> Option<Timestamp> {
        WirePod::created(self)
    }
}

impl<K: Stamped + Send + 'static, S: Sink<K>> Handle<K> for Indexing<K, S> {
    fn handle(&mut self, event: Event<K>) -> bool {
        match event {
            Event::Apply(obj) => {
                self.server_time.saw_created(obj.created());
                if let Some((id, item)) = self.sink.project(&obj) {
                    self.listing.applied(id);
                    self.sink.upsert(item);
                }
            }
            Event::Delete(obj) => {
                // A pod's identity needs its node, which the deleted object
                // still carries; nodes and DaemonSets go by name / uid.
                let id = (self.id_of_deleted)(&obj);
                if self.listing.deleted(&id) {
                    self.sink.delete(&id);
                }
            }
            Event::Init => self.listing.begin(),
            Event::InitApply(obj) => {
                self.server_time.saw_created(obj.created());
                if let Some((id, item)) = self.sink.project(&obj) {
                    if self.sink.unchanged(&item) {
                        self.listing.listed_unchanged(id);
                    } else {
                        let may_open = S::may_open(&item);
                        if let Some(item) = self.listing.listed(id, item, may_open) {
                            self.sink.upsert(item);
                        }
                    }
                }
            }
            Event::InitDone => {
                for op in self.listing.done() {
                    match op {
                        Op::Upsert(item) => self.sink.upsert(item),
                        Op::Delete(id) => self.sink.delete(&id),
                    }
                }
                return true;
            }
        }
        false
    }
    fn known(&self) -> usize {
        self.listing.known()
    }
    fn held(&self) -> usize {
        self.listing.held()
    }
}

/// One watch's loop state: its handling, and whom it tells of its first
/// complete list.
struct Watching<K> {
    kind: &'static str,
    /// The encoding on the wire: "protobuf" or "json".
    encoding: &'static str,
    feed: WatchFeed<K>,
    guard: StopGuard,
    /// Until the first complete list: where to say so.
    synced: Option<mpsc::Sender<&'static str>>,
}

impl<K> Watching<K> {
    fn take(&mut self, item: Result<Event<K>, impl std::fmt::Display>) {
        self.guard.stats.events.fetch_add(1, Ordering::Relaxed);
        match item {
            Ok(event) => {
                if self.feed.handle(event)
                    && let Some(synced) = self.synced.take()
                {
                    let (kind, encoding) = (self.kind, self.encoding);
                    tracing::info!(kind, encoding, "initial list complete");
                    // The channel has room for every watch's one message.
                    let _ = synced.try_send(kind);
                }
            }
            Err(e) => {
                self.guard.stats.restarts.fetch_add(1, Ordering::Relaxed);
                let kind = self.kind;
                tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
            }
        }
    }

    /// Watches as JSON (kube's `watcher`) until the process ends, each
    /// object made a `K` by `into`.
    async fn json<J>(mut self, api: Api<J>, config: watcher::Config, into: fn(J) -> K)
    where
        J: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        self.encoding = "json";
        let mut stream = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(item) = stream.next().await {
            self.take(item.map(|event| map_event(event, into)));
        }
    }
}

/// Spawns one watch, which runs until the process ends, counting into
/// `stats`. Sends its `kind` on `synced` once, after the first complete list.
fn spawn<K>(
    kind: &'static str,
    api: Api<K>,
    config: watcher::Config,
    feed: WatchFeed<K>,
    to: (&mpsc::Sender<&'static str>, &Arc<WatchStats>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let watching = watching(kind, feed, to);
    tokio::spawn(watching.json(api, config, std::convert::identity));
}

/// A watch event with its object made another type.
fn map_event<J, K>(event: Event<J>, into: fn(J) -> K) -> Event<K> {
    match event {
        Event::Apply(o) => Event::Apply(into(o)),
        Event::Delete(o) => Event::Delete(into(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(into(o)),
        Event::InitDone => Event::InitDone,
    }
}

fn watching<K>(
    kind: &'static str,
    feed: WatchFeed<K>,
    (synced, stats): (&mpsc::Sender<&'static str>, &Arc<WatchStats>),
) -> Watching<K> {
    let guard = StopGuard {
        kind,
        stats: Arc::clone(stats),
    };
    let synced = Some(synced.clone());
    let encoding = "protobuf";
    Watching {
        kind,
        encoding,
        feed,
        guard,
        synced,
    }
}

/// [`spawn`] in protobuf (`protobuf`), and as JSON (`J`, made a `K` by
/// `into`) once the API server refuses protobuf for this kind.
fn spawn_protobuf<J, K>(
    kind: &'static str,
    (api, into): (Api<J>, fn(J) -> K),
    config: watcher::Config,
    feed: WatchFeed<K>,
    to: (&mpsc::Sender<&'static str>, &Arc<WatchStats>),
) where
    J: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    K: Proto + Send + 'static,
{
    let mut watching = watching(kind, feed, to);
    tokio::spawn(async move {
        let client = api.clone().into_client();
        let path = api.resource_url().to_owned();
        let why = protobuf::run(&client, &path, &config, &mut |item| watching.take(item)).await;
        tracing::info!(kind, answer = %why, "the API server refused protobuf; watching as JSON");
        watching.json(api, config, into).await;
    });
}

fn pod_id(p: &WirePod) -> PodId {
    let (node, uid) = p.bound_id();
    (node.as_ref().into(), uid.as_ref().into())
}

fn feed<K: Stamped + Send + 'static, S: Sink<K>>(
    sink: S,
    server_time: Arc<ServerTime>,
    id_of_deleted: impl Fn(&K) -> S::Id + Send + 'static,
) -> WatchFeed<K> {
    Box::new(Indexing {
        sink,
        listing: Listing::default(),
        server_time,
        id_of_deleted: Box::new(id_of_deleted),
    })
}

/// The node watch's handling.
pub fn node_feed(router: Arc<Router>, server_time: Arc<ServerTime>) -> WatchFeed<WireNode> {
    let interner = Interner::default();
    let sink = NodeSink { router, interner };
    let by_name = |n: &WireNode| {
        let name = n.view().name.unwrap_or_default();
        (name.as_ref().into(), Shared::default())
    };
    feed(sink, server_time, by_name)
}

/// The DaemonSet watch's handling.
pub fn daemonset_feed(router: Arc<Router>, server_time: Arc<ServerTime>) -> WatchFeed<DaemonSet> {
    let by_uid = |d: &DaemonSet| delete_id(d, false);
    feed(DaemonSetSink { router }, server_time, by_uid)
}

/// The DaemonSet pod watch's handling (see `PodSink`'s fields).
pub fn daemonset_pod_feed(
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
    critical_namespaces: Arc<HashSet<String>>,
    canary_namespace: Option<Arc<str>>,
) -> WatchFeed<WirePod> {
    let keep_labels_in = Some(critical_namespaces);
    pod_feed(router, server_time, keep_labels_in, canary_namespace)
}

fn pod_feed(
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
    keep_labels_in: Option<Arc<HashSet<String>>>,
    canary_namespace: Option<Arc<str>>,
) -> WatchFeed<WirePod> {
    let sink = PodSink {
        router,
        keep_labels_in,
        interner: Interner::default(),
        canary_namespace,
    };
    feed(sink, server_time, pod_id)
}

/// How many watch streams `start` opens (each reports its first complete
/// list once).
pub fn watch_count(
    critical: &[CriticalPodEntry],
    resource_slices: bool,
    canary: Option<&CanaryConfig>,
) -> usize {
    4 + critical.len() + usize::from(resource_slices) + usize::from(canary.is_some())
}

/// Starts every watcher and returns at once with a receiver on which each
/// watch sends its kind after its first complete list (the caller waits for
/// all of them before it reports ready).
pub async fn start(
    client: Client,
    router: Arc<Router>,
    (critical, canary): (&[CriticalPodEntry], Option<&CanaryConfig>),
    resource_slices: bool,
    stats: Arc<WatchStats>,
    server_time: Arc<ServerTime>,
) -> mpsc::Receiver<&'static str> {
    let (tx, rx) = mpsc::channel(watch_count(critical, resource_slices, canary));
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
    let r = || Arc::clone(&router);
    let t = || Arc::clone(&server_time);
    let c = || client.clone();
    let to = (&tx, &stats);

    let all = watcher::Config::default;
    // Where the API server refuses protobuf, the JSON objects.
    let json_node: fn(Lean<Node>) -> WireNode = Wire::Json;
    let json_pod: fn(Lean<Pod>) -> WirePod = Wire::Json;
    let nodes = (Api::all(c()), json_node);
    spawn_protobuf("nodes", nodes, all(), node_feed(r(), t()), to);
    let daemonsets = (
        Api::all(c()),
        std::convert::identity as fn(DaemonSet) -> DaemonSet,
    );
    spawn_protobuf(
        "daemonsets",
        daemonsets,
        all(),
        daemonset_feed(r(), t()),
        to,
    );
    let pods = daemonset_pod_feed(r(), t(), critical_namespaces, canary_namespace.clone());
    let daemonset_pods = all().labels(DAEMONSET_POD_LABEL).fields(bound);
    let api = (Api::all(c()), json_pod);
    spawn_protobuf("daemonset pods", api, daemonset_pods, pods, to);
    let by_name = |c: &CSINode| delete_id(c, true);
    let csinodes = feed(CsiNodeSink { router: r() }, t(), by_name);
    spawn("csinodes", Api::all(c()), all(), csinodes, to);
    if resource_slices {
        // Only while draDrivers is configured: the kind (and the RBAC to
        // list it) exists only where DRA is in use.
        let slices = feed(ResourceSliceSink { router: r() }, t(), slice_id);
        spawn("resourceslices", Api::all(c()), all(), slices, to);
    }
    for entry in critical {
        let selected = all().labels(&entry.selector.to_string()).fields(bound);
        let pods = pod_feed(r(), t(), None, canary_namespace.clone());
        let api = (Api::namespaced(c(), &entry.namespace), json_pod);
        spawn_protobuf("critical pods", api, selected, pods, to);
    }
    if let Some(canary) = canary {
        let canaries = all().labels(nodegate_core::canary::CANARY_LABEL);
        let pods = pod_feed(r(), t(), None, canary_namespace);
        let api = (Api::namespaced(c(), &canary.namespace), json_pod);
        spawn_protobuf("canary pods", api, canaries.fields(bound), pods, to);
    }
    rx
}
