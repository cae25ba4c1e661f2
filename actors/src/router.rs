//! The router: writes each change the watchers deliver to the [`Index`]
//! (which publishes it on the change feed), then hints the node's gate, if
//! any, with the [`Change`]. The gate reads the object back from the index,
//! so it always sees the newest version: a message carrying the object
//! could arrive after a snapshot that already holds a newer one, and briefly
//! regress the gate. A node that needs a new gate becomes a [`SpawnRequest`]
//! (dropped while no supervisor listens). It never blocks: a DashMap guard
//! is never held across an await.
//!
//! A pod change of a gated node concerns only its gate: it is published on
//! the feed only for nodes without one (and for canary pods).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use ractor::rpc::CallResult;
use ractor::{ActorId, ActorRef, DerivedActorRef};

use crate::feed::Subscriber;
use crate::index::{Index, Map};
use crate::live::LiveConfig;
use crate::messages::{GateView, NodeMsg, SpawnRequest};
use crate::observe::{GateObserver, NoObserver, RouterEvent};
use crate::pending::{Gate, PendingPods};
use nodegate_core::deciders::{self, Change, ClusterView};
use nodegate_core::gate::Input;
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo, SliceInfo, Uid};

/// How long `view` waits for a busy actor before giving up.
const VIEW_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Router {
    config: Arc<LiveConfig>,
    gates: Map<Gate>,
    index: Index,
    /// The resourceVersion each node was at when nodegate opened it. The
    /// watch may still show that version (taint and all) after the gate
    /// stopped; it must not start a new gate.
    opened_at_version: Map<String>,
    /// The running supervisor's mailbox ([`Router::set_spawn_requests`]).
    spawn_requests: ArcSwapOption<DerivedActorRef<SpawnRequest>>,
    synced: AtomicBool,
    /// Test seam ([`Router::lose_hints`]): hints are dropped, not sent.
    losing_hints: AtomicBool,
    /// Set at most once, before the watchers start; read on every event, so
    /// a lock-free cell rather than a lock.
    observer: OnceLock<Arc<dyn GateObserver>>,
}

impl Router {
    pub fn new(config: Arc<Config>) -> Self {
        Self::with_live(Arc::new(LiveConfig::new(config)))
    }

    /// A router reading the configuration `live` holds (shared with others
    /// that read it too: the binary's entrances).
    pub fn with_live(live: Arc<LiveConfig>) -> Self {
        Router {
            config: live,
            gates: Map::default(),
            index: Index::default(),
            opened_at_version: Map::default(),
            spawn_requests: ArcSwapOption::empty(),
            synced: AtomicBool::new(false),
            losing_hints: AtomicBool::new(false),
            observer: OnceLock::new(),
        }
    }

    /// Installs the observer of the router and every gate. Only the first
    /// call counts (returns false after that): set it before feeding the
    /// router, so that no event goes unobserved.
    pub fn set_observer(&self, observer: Arc<dyn GateObserver>) -> bool {
        self.observer.set(observer).is_ok()
    }

    /// Adds `s` to the change feed ([`crate::feed`]).
    pub fn subscribe(&self, s: Arc<dyn Subscriber>) {
        self.index.subscribe(s);
    }

    /// The indexes, as the gates' snapshots and the deciders read them.
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// The installed observer, or one that ignores everything.
    pub fn observer(&self) -> &dyn GateObserver {
        let installed = self.observer.get();
        installed.map(|o| o.as_ref()).unwrap_or(&NoObserver)
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config.current()
    }

    /// The holder of the configuration in force.
    pub fn live(&self) -> &Arc<LiveConfig> {
        &self.config
    }

    /// Puts a new gate configuration in force (a config reload): every live
    /// gate is re-examined under it at once, and every node it gates that has
    /// no gate yet gets one. A gate whose node it no longer gates is not
    /// stopped here: its own re-examination decides (it stops once its node
    /// carries no managed taint, else finishes as it would have). Returns the
    /// number of live gates re-examined.
    pub fn reconfigure(&self, config: Arc<Config>) -> usize {
        self.config.store(config);
        let live = self.fan_out(|| NodeMsg::Changed(Change::Everything));
        self.request_missing_gates();
        self.index.publish(Change::Everything);
        live
    }

    // --- fed by the watchers ---

    pub fn node_upserted(&self, node: NodeInfo) {
        let name = node.name.clone();
        let version = node.resource_version.clone();
        let gated = self.carries_managed_taint(&node);
        let change = self.index.upsert_node(node);
        let routed = self.hint(&name, |_| Some(NodeMsg::Changed(change)));
        self.observed(RouterEvent::NodeUpserted, routed);
        if routed {
            return;
        }
        if gated {
            self.request_gate(&name, &version);
        } else {
            self.opened_at_version.remove(&name);
        }
    }

    /// The node's pods stay indexed (see [`Index::delete_node`]).
    pub fn node_deleted(&self, name: &str) {
        let change = self.index.delete_node(name);
        self.opened_at_version.remove(name);
        let routed = self.hint(name, |_| Some(NodeMsg::Changed(change)));
        self.observed(RouterEvent::NodeDeleted, routed);
    }

    /// The CSINode of node `name` lists `drivers`, or (`None`) is gone: no
    /// driver is registered there.
    pub fn csinode(&self, name: &str, drivers: Option<Vec<String>>) {
        let change = self.index.set_csi_drivers(name, drivers);
        self.hint(name, |_| change.map(NodeMsg::Changed));
    }

    /// ResourceSlice `slice`, local to node `node`, was added or changed.
    pub fn resource_slice_upserted(&self, node: &str, slice: SliceInfo) {
        let change = self.index.upsert_slice(node, slice);
        self.hint(node, |_| change.map(NodeMsg::Changed));
    }

    /// ResourceSlice `name`, local to node `node`, is gone.
    pub fn resource_slice_deleted(&self, node: &str, name: &str) {
        let change = self.index.delete_slice(node, name);
        self.hint(node, |_| change.map(NodeMsg::Changed));
    }

    /// A DaemonSet whose projection did not change (a status update: its
    /// pods' progress changes the counts on every step of a rollout) reaches
    /// no gate; fanning it out would put one message in every live gate's
    /// mailbox for nothing.
    pub fn daemonset_upserted(&self, ds: DaemonSetInfo) {
        let uid = ds.uid.clone();
        // An invalid or overlong csi-driver annotation is not waited for
        // (readiness::csi_drivers); said once per change of the DaemonSet.
        let csi_problem = nodegate_core::rules::readiness::csi_driver_problems(&ds)
            .map(|p| (format!("{}/{}", ds.namespace, ds.name), p));
        // Outside --daemonset-namespaces no gate waits for it: indexed, not
        // fanned out (a reload that admits the namespace re-examines every
        // gate from the index).
        let allowed = self.config().placement.daemonset_allowed(&ds.namespace);
        let changed = self.index.upsert_daemonset(ds);
        if changed && let Some((daemonset, problem)) = csi_problem {
            tracing::warn!(%daemonset, "{problem}");
        }
        let routed = changed
            && allowed
            && self.fan_out(|| NodeMsg::Changed(Change::DaemonSet { uid: uid.clone() })) > 0;
        self.observed(RouterEvent::DaemonSetUpserted, routed);
    }

    pub fn daemonset_deleted(&self, uid: &str) {
        self.index.delete_daemonset(uid);
        let uid = uid.to_string();
        let routed = self.fan_out(|| NodeMsg::Changed(Change::DaemonSet { uid: uid.clone() })) > 0;
        self.observed(RouterEvent::DaemonSetDeleted, routed);
    }

    /// Pods not bound to a node yet are of no interest to any gate.
    pub fn pod_upserted(&self, pod: PodInfo) {
        if pod.node_name.is_empty() {
            return;
        }
        let pod = Arc::new(pod);
        self.index.upsert_pod(&pod);
        let routed = self.pod_hint(&pod.node_name, &pod.uid);
        self.observed(RouterEvent::PodUpserted, routed);
        if !routed || self.is_canary_namespace(&pod.namespace) {
            self.index.publish_with(|| Change::Pods {
                node: pod.node_name.to_string(),
            });
        }
    }

    pub fn pod_deleted(&self, node_name: &str, uid: &Uid) {
        let removed = self.index.delete_pod(node_name, uid);
        let routed = self.pod_hint(node_name, uid);
        self.observed(RouterEvent::PodDeleted, routed);
        let canary = removed.is_some_and(|p| self.is_canary_namespace(&p.namespace));
        if !routed || canary {
            self.index.publish_with(|| Change::Pods {
                node: node_name.to_string(),
            });
        }
    }

    /// Called once every watcher has delivered its initial list. Until then no
    /// gate starts: a gate that saw the node before the DaemonSets would find
    /// nothing to wait for and open at once.
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
        self.request_missing_gates();
        self.index.publish(Change::Everything);
    }

    /// Requests a gate for every indexed node that is gated and has none.
    fn request_missing_gates(&self) {
        if !self.is_synced() {
            return;
        }
        let gated = self.index.nodes_where(|n| self.carries_managed_taint(n));
        for (name, version) in gated {
            if !self.gates.contains_key(&name) {
                self.request_gate(&name, &version);
            }
        }
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// This replica now holds the lease: gates re-send writes that the
    /// executor refused while it did not.
    pub fn leadership_gained(&self) {
        self.fan_out(|| NodeMsg::input(Input::LeadershipGained));
        self.index.feed.publish(deciders::Input::MayWrite);
    }

    // --- read by gates, the supervisor and the debug endpoints ---

    pub fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.index.node(name)
    }

    pub fn daemonset(&self, uid: &str) -> Option<Arc<DaemonSetInfo>> {
        self.index.daemonset(uid)
    }

    pub fn pod(&self, node_name: &str, uid: &Uid) -> Option<Arc<PodInfo>> {
        self.index.pod(node_name, uid)
    }

    /// The cluster as the indexes show it, as a gate's first input.
    pub fn snapshot(&self, name: &str) -> Option<Input> {
        self.indexed(name, |node, daemonsets, pods| Input::Snapshot {
            node,
            daemonsets,
            pods,
        })
    }

    /// The same view as [`snapshot`](Self::snapshot), as a live gate's
    /// periodic re-examination.
    pub fn reexamination(&self, name: &str) -> Option<Input> {
        self.indexed(name, |node, daemonsets, pods| Input::Reexamine {
            node,
            daemonsets,
            pods,
        })
    }

    fn indexed<T>(
        &self,
        name: &str,
        input: impl FnOnce(Arc<NodeInfo>, Vec<Arc<DaemonSetInfo>>, Vec<Arc<PodInfo>>) -> T,
    ) -> Option<T> {
        let node = self.node(name)?;
        let daemonsets = self.index.daemonsets();
        let pods = self.index.pods_on(name);
        Some(input(node, daemonsets, pods))
    }

    /// Whether the indexes say this node needs a gate now.
    pub fn needs_gate(&self, name: &str) -> bool {
        self.node(name).is_some_and(|n| {
            self.carries_managed_taint(&n) && !self.opened_at(name, &n.resource_version)
        })
    }

    pub fn gate(&self, name: &str) -> Option<ActorRef<NodeMsg>> {
        self.gates.get(name).map(|g| g.actor.clone())
    }

    pub fn gated_nodes(&self) -> Vec<String> {
        let mut names: Vec<String> = self.gates.iter().map(|g| g.key().clone()).collect();
        names.sort();
        names
    }

    pub fn gate_count(&self) -> usize {
        self.gates.len()
    }

    /// How many entries each of the router's maps holds (the supervisor keeps
    /// one per live gate too), then [`Index::sizes`], by name
    /// (`nodegate_map_entries`).
    pub fn map_sizes(&self) -> Vec<(&'static str, usize)> {
        let mut sizes = vec![
            ("router_gates", self.gates.len()),
            ("router_opened_at_version", self.opened_at_version.len()),
        ];
        sizes.extend(self.index.sizes());
        sizes
    }

    /// A live gate's state and journal; `None` when the node has no gate (or
    /// it did not answer within a few seconds).
    pub async fn view(&self, name: &str) -> Option<GateView> {
        let gate = self.gate(name)?;
        match gate.call(NodeMsg::View, Some(VIEW_TIMEOUT)).await {
            Ok(CallResult::Success(view)) => Some(view),
            _ => None,
        }
    }

    // --- bookkeeping for the actor system ---

    /// Registers `gate` as `name`'s; returns the set in which the router
    /// leaves the pods that changed for it to look at.
    pub(crate) fn register(&self, name: &str, gate: ActorRef<NodeMsg>) -> Arc<PendingPods> {
        let pods = Arc::<PendingPods>::default();
        let gate = Gate {
            actor: gate,
            pods: Arc::clone(&pods),
        };
        self.gates.insert(name.to_string(), gate);
        pods
    }

    /// Forgets `name`'s gate only if it is still `id`: a replacement may
    /// already be registered.
    pub(crate) fn unregister(&self, name: &str, id: ActorId) {
        self.gates
            .remove_if(name, |_, gate| gate.actor.get_id() == id);
    }

    /// `name`'s gate stopped cleanly: the node is open now (or gone), which
    /// the deciders hear at once rather than at the node's next change.
    pub(crate) fn gate_stopped(&self, name: &str) {
        self.index
            .publish(Change::GateStopped { node: name.into() });
    }

    pub(crate) fn remember_opened(&self, name: &str, resource_version: &str) {
        // Only worth remembering while the index still shows that version.
        if self
            .node(name)
            .is_some_and(|n| n.resource_version == resource_version)
        {
            self.opened_at_version
                .insert(name.to_string(), resource_version.to_string());
        }
    }

    /// Installs (or, with `None`, removes) the receiver of this router's
    /// `SpawnRequest`s; the last call wins.
    pub(crate) fn set_spawn_requests(&self, receiver: Option<DerivedActorRef<SpawnRequest>>) {
        self.spawn_requests.store(receiver.map(Arc::new));
    }

    /// Whether the node is gated: inside `--node-selector` and carrying a
    /// managed taint.
    fn carries_managed_taint(&self, node: &NodeInfo) -> bool {
        self.config.load().gates(node)
    }

    fn opened_at(&self, name: &str, version: &str) -> bool {
        self.opened_at_version
            .get(name)
            .is_some_and(|v| *v == version)
    }

    fn request_gate(&self, name: &str, version: &str) {
        if !self.is_synced() || self.opened_at(name, version) {
            return;
        }
        self.opened_at_version.remove(name);
        if let Some(receiver) = &*self.spawn_requests.load() {
            // A stopped receiver means shutdown: nothing to start.
            let _ = receiver.send_message(SpawnRequest { node: name.into() });
        }
    }

    /// Test seam: while `lose` is true every hint and fan-out is dropped
    /// after the index is updated, as a lost message would be, so tests can
    /// show that a gate does not depend on any one message.
    #[doc(hidden)]
    pub fn lose_hints(&self, lose: bool) {
        self.losing_hints.store(lose, Ordering::Relaxed);
    }

    fn observed(&self, event: RouterEvent, routed: bool) {
        self.observer().router_event(event, routed);
    }

    /// Sends what `msg` makes of `name`'s gate, if it has one, to it; true
    /// when it has one. A gate that stopped a moment ago simply misses it.
    fn hint(&self, name: &str, msg: impl FnOnce(&Gate) -> Option<NodeMsg>) -> bool {
        let Some(gate) = self.gates.get(name) else {
            return false;
        };
        if !self.losing_hints.load(Ordering::Relaxed)
            && let Some(msg) = msg(gate.value())
        {
            let _ = gate.actor.cast(msg);
        }
        true
    }

    /// Tells `name`'s gate that pod `uid` changed, through its pending set
    /// (see [`PendingPods`]): one wake however many versions come.
    fn pod_hint(&self, name: &str, uid: &Uid) -> bool {
        self.hint(name, |gate| {
            let wake = gate.pods.add(&uid.text());
            wake.then(|| NodeMsg::Changed(Change::Pods { node: name.into() }))
        })
    }

    /// Whether pods of `namespace` may be canaries (`canary`): their
    /// changes go to the canary decider as well as to the node's gate (a
    /// routed pod is otherwise the gate's alone).
    fn is_canary_namespace(&self, namespace: &str) -> bool {
        matches!(&self.config().canary, Some(c) if c.namespace == namespace)
    }

    /// Sends `msg` to every live gate; returns how many there were.
    fn fan_out(&self, msg: impl Fn() -> NodeMsg) -> usize {
        let lost = self.losing_hints.load(Ordering::Relaxed);
        let mut live = 0;
        for gate in self.gates.iter() {
            if !lost {
                let _ = gate.actor.cast(msg());
            }
            live += 1;
        }
        live
    }
}
