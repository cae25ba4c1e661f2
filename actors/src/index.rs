//! The index: the compact projections the watchers deliver, and the change
//! [`Feed`] on which every change of them is published. I/O-free and
//! lock-free for readers (DashMaps; a guard is never held across an await).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use nodegate_core::deciders::{self, Change, ClusterView};
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo, Shared, SliceInfo, Uid};

use crate::feed::{Feed, Subscriber};

/// Every lookup on the hot path hashes a node name or a uid, several times
/// per event: a fast seeded hasher rather than SipHash. The keys come from
/// the API server, not from arbitrary clients.
pub(crate) type Hasher = foldhash::fast::RandomState;
pub(crate) type Map<V> = DashMap<String, V, Hasher>;

#[derive(Default)]
pub struct Index {
    nodes: Map<Arc<NodeInfo>>,
    /// Shared with every gate (and its journal) that holds the same version.
    daemonsets: Map<Arc<DaemonSetInfo>>,
    /// node name → its pods. A node has a handful (one per DaemonSet and
    /// a few critical pods): a vector searched by uid costs 8 bytes a pod,
    /// a hash map keyed by a copy of the uid about 100. The key is the
    /// name the pods share.
    pods: DashMap<Shared, Vec<Arc<PodInfo>>, Hasher>,
    /// node name → the CSI drivers its CSINode lists (the CSINode watch);
    /// copied into the indexed node as `NodeInfo::csi_drivers`.
    csi_drivers: Map<Vec<String>>,
    /// node name → slice name → the ResourceSlices local to it (the
    /// ResourceSlice watch, while `draDrivers` is configured); copied into
    /// the indexed node as `NodeInfo::resource_slices`.
    resource_slices: Map<BTreeMap<String, SliceInfo>>,
    pub(crate) feed: Feed,
    /// The newest node resourceVersion indexed (as a number; the API
    /// server's are etcd revisions, delivered in order by the watch).
    node_version: AtomicU64,
}

impl Index {
    /// Adds `s` to the change feed.
    pub fn subscribe(&self, s: Arc<dyn Subscriber>) {
        self.feed.subscribe(s);
    }

    pub(crate) fn publish(&self, change: Change) {
        self.feed.publish(deciders::Input::Changed(change));
    }

    /// Publishes the change `make` builds, if anyone listens (a pod event
    /// is the hottest path: nothing is built for nobody).
    pub(crate) fn publish_with(&self, make: impl FnOnce() -> Change) {
        if self.feed.is_heard() {
            self.publish(make());
        }
    }

    /// Indexes `node` (with the CSI drivers held for it), publishes the
    /// change and returns it (for the node's gate).
    pub(crate) fn upsert_node(&self, mut node: NodeInfo) -> Change {
        let name = node.name.clone();
        if let Ok(v) = node.resource_version.parse::<u64>() {
            self.node_version.fetch_max(v, Ordering::Relaxed);
        }
        node.csi_drivers = self.csi_drivers.get(&name).map(|d| d.clone());
        node.resource_slices = self.slices_of(&name);
        let before = self.nodes.insert(name.clone(), Arc::new(node));
        // A CSINode or ResourceSlice seen between the reads above and the
        // insert.
        self.sync_devices(&name);
        let after = self.node(&name);
        let change = Change::Node {
            name,
            before,
            after,
        };
        self.publish_with(|| change.clone());
        change
    }

    /// The node's pods stay indexed: Kubernetes keeps pods bound to a node
    /// name when the Node object goes (the pod garbage collector deletes
    /// them later, and the pod watch then removes them here), and a node
    /// re-created under that name must find the ones still running.
    pub(crate) fn delete_node(&self, name: &str) -> Change {
        let before = self.nodes.remove(name).map(|(_, n)| n);
        let change = Change::Node {
            name: name.to_string(),
            before,
            after: None,
        };
        self.publish(change.clone());
        change
    }

    /// The CSINode of `name` lists `drivers` (or, `None`, is gone); the
    /// change of the indexed node, if any (for its gate: the deciders do
    /// not read the CSI drivers and are not told).
    pub(crate) fn set_csi_drivers(
        &self,
        name: &str,
        drivers: Option<Vec<String>>,
    ) -> Option<Change> {
        if let Some(d) = drivers {
            self.csi_drivers.insert(name.to_string(), d);
        } else {
            self.csi_drivers.remove(name);
        }
        self.sync_devices(name)
    }

    /// Copies the CSI drivers and ResourceSlices held for `name` into its
    /// indexed node; the change when that changed the node. Every writer of
    /// the node or of either map ends with this, under the node's entry
    /// lock, so they converge whatever the interleaving of the node,
    /// CSINode and ResourceSlice watches.
    fn sync_devices(&self, name: &str) -> Option<Change> {
        let mut node = self.nodes.get_mut(name)?;
        let drivers = self.csi_drivers.get(name).map(|d| d.clone());
        let slices = self.slices_of(name);
        if node.csi_drivers == drivers && node.resource_slices == slices {
            return None;
        }
        let before = Arc::clone(&*node);
        let after = Arc::make_mut(&mut *node);
        (after.csi_drivers, after.resource_slices) = (drivers, slices);
        Some(Change::Node {
            name: name.to_string(),
            before: Some(before),
            after: Some(Arc::clone(&*node)),
        })
    }

    /// ResourceSlice `slice`, local to node `node`, was added or changed;
    /// the change of the indexed node, if any (for its gate alone, as with
    /// the CSI drivers).
    pub(crate) fn upsert_slice(&self, node: &str, slice: SliceInfo) -> Option<Change> {
        self.resource_slices
            .entry(node.to_string())
            .or_default()
            .insert(slice.name.clone(), slice);
        self.sync_devices(node)
    }

    /// ResourceSlice `name`, local to node `node`, is gone; the change of
    /// the indexed node, if any.
    pub(crate) fn delete_slice(&self, node: &str, name: &str) -> Option<Change> {
        if let Some(mut slices) = self.resource_slices.get_mut(node) {
            slices.remove(name);
        }
        self.resource_slices
            .remove_if(node, |_, slices| slices.is_empty());
        self.sync_devices(node)
    }

    fn slices_of(&self, node: &str) -> Vec<SliceInfo> {
        let slices = self.resource_slices.get(node);
        slices
            .map(|s| s.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Indexes `ds`; false (and nothing published) when its projection did
    /// not change (a status update).
    pub(crate) fn upsert_daemonset(&self, ds: DaemonSetInfo) -> bool {
        if self.daemonset(&ds.uid).is_some_and(|known| *known == ds) {
            return false;
        }
        let uid = ds.uid.clone();
        self.daemonsets.insert(uid.clone(), Arc::new(ds));
        self.publish(Change::DaemonSet { uid });
        true
    }

    pub(crate) fn delete_daemonset(&self, uid: &str) {
        self.daemonsets.remove(uid);
        self.publish(Change::DaemonSet { uid: uid.into() });
    }

    /// Indexes a pod bound to a node (the caller leaves out unbound ones).
    pub(crate) fn upsert_pod(&self, pod: &Arc<PodInfo>) {
        // The common case, a known pod on a known node, allocates nothing
        // for the index.
        let mut bucket = self.pods.entry(pod.node_name.clone()).or_default();
        match bucket.iter_mut().find(|p| p.uid == pod.uid) {
            Some(slot) => *slot = Arc::clone(pod),
            None => bucket.push(Arc::clone(pod)),
        }
    }

    pub(crate) fn delete_pod(&self, node_name: &str, uid: &Uid) -> Option<Arc<PodInfo>> {
        let removed = self.pods.get_mut(node_name).and_then(|mut bucket| {
            let at = bucket.iter().position(|p| p.uid == *uid)?;
            Some(bucket.remove(at))
        });
        self.pods
            .remove_if(node_name, |_, bucket| bucket.is_empty());
        removed
    }

    /// How many entries each of the index's maps holds, by name, for the
    /// metrics (`nodegate_map_entries`), so that a leak under node churn
    /// shows; counting the pods visits every node's bucket.
    pub fn sizes(&self) -> [(&'static str, usize); 6] {
        let pods = self.pods.iter().map(|bucket| bucket.len()).sum();
        [
            ("index_nodes", self.nodes.len()),
            ("index_daemonsets", self.daemonsets.len()),
            ("index_pod_nodes", self.pods.len()),
            ("index_pods", pods),
            ("index_csi_drivers", self.csi_drivers.len()),
            ("index_resource_slice_nodes", self.resource_slices.len()),
        ]
    }

    /// The newest node resourceVersion the index has seen (0: none, or
    /// none that reads as a number).
    pub fn node_version_seen(&self) -> u64 {
        self.node_version.load(Ordering::Relaxed)
    }

    pub fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.nodes.get(name).map(|n| n.clone())
    }

    pub fn daemonset(&self, uid: &str) -> Option<Arc<DaemonSetInfo>> {
        self.daemonsets.get(uid).map(|d| d.clone())
    }

    pub fn pod(&self, node_name: &str, uid: &Uid) -> Option<Arc<PodInfo>> {
        self.pods
            .get(node_name)
            .and_then(|bucket| bucket.iter().find(|p| p.uid == *uid).cloned())
    }

    /// The names and versions of the indexed nodes `keep` holds for.
    pub(crate) fn nodes_where(&self, keep: impl Fn(&NodeInfo) -> bool) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .filter(|n| keep(n.value()))
            .map(|n| (n.name.clone(), n.resource_version.clone()))
            .collect()
    }
}

impl ClusterView for Index {
    fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        Index::node(self, name)
    }

    fn pods_on(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.pods.get(node).map(|b| b.clone()).unwrap_or_default()
    }

    /// Lends the node's bucket: `f` must not touch the index (it holds the
    /// bucket's shard for reading meanwhile).
    fn with_pods_on(&self, node: &str, f: &mut dyn FnMut(&[Arc<PodInfo>])) {
        match self.pods.get(node) {
            Some(bucket) => f(&bucket),
            None => f(&[]),
        }
    }

    fn daemonsets(&self) -> Vec<Arc<DaemonSetInfo>> {
        self.daemonsets.iter().map(|d| d.value().clone()).collect()
    }

    fn nodes(&self) -> Vec<Arc<NodeInfo>> {
        self.nodes.iter().map(|n| n.value().clone()).collect()
    }
}
