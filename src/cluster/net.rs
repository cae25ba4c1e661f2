//! The late-taint net (`--taint-new-nodes`, semantics.md §6.2): a new node
//! the node watch shows without a managed taint — the admission webhook was
//! down, not installed, or not asked — gets the startup taint, unless a
//! workload pod is already bound to it.
//!
//! The node watch offers every node it sees ([`Net::offer`], cheap: one pure
//! check, no I/O); candidates wait in a small map until this replica may
//! write. [`Net::run`] then lists each candidate's pods once and either puts
//! the taint on with the one conditional patch every entrance uses (Warning
//! `LateTaint`) or leaves the node alone (Warning `LateTaintSkipped`). A
//! candidate stays until it is decided, leaves the window or the watch shows
//! it tainted, so a follower that becomes leader picks up what the old leader
//! left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use nodegate_actors::live::LiveConfig;
use nodegate_actors::ports::EffectExecutor;
use nodegate_core::entrance::{self, NodeFacts, Skip};
use nodegate_core::gate::{EventType, NodeEvent, PatchOutcome, Reason};
use nodegate_core::placement::ManagedTaint;
use tokio::sync::{Notify, watch};

use crate::cluster::entrance::{node_facts, pods_on};
use crate::cluster::executor::KubeExecutor;
use crate::cluster::server_time::ServerTime;

/// How often waiting candidates are looked at again (after a conflict, a
/// failed request, or while this replica does not lead).
const RETRY: Duration = Duration::from_secs(1);

/// What the net was set up with. Scope and managed taints are read from the
/// gate configuration in force at each decision, so a config reload reaches
/// the net too; the window and dry-run are fixed at start.
#[derive(Debug, Clone)]
pub struct NetConfig {
    pub live: Arc<LiveConfig>,
    pub window: Duration,
    pub dry_run: bool,
}

/// The net's candidates, keyed by node name.
pub struct Net {
    config: NetConfig,
    window: SignedDuration,
    server_time: Arc<ServerTime>,
    candidates: Mutex<Candidates>,
    wake: Notify,
}

#[derive(Default)]
struct Candidates {
    /// Waiting to be decided, by node name.
    waiting: HashMap<String, NodeFacts>,
    /// Nodes (by uid) already tainted or skipped, with their creation time:
    /// each is decided once (a skipped node stays skipped, a tainted node
    /// whose taint someone removes is not tainted again). Kept while the node
    /// is inside the window, after which it is no candidate anyway.
    decided: HashMap<String, Option<Timestamp>>,
}

impl Net {
    pub fn new(config: NetConfig, server_time: Arc<ServerTime>) -> Self {
        let window = SignedDuration::try_from(config.window).unwrap_or(SignedDuration::MAX);
        Net {
            config,
            window,
            server_time,
            candidates: Mutex::new(Candidates::default()),
            wake: Notify::new(),
        }
    }

    /// The API server's time as far as the evidence goes, else this
    /// machine's: the window counts from a creationTimestamp.
    fn now(&self) -> Timestamp {
        self.server_time
            .now()
            .map_or_else(Timestamp::now, |t| t.max(Timestamp::now()))
    }

    fn decide(&self, facts: &NodeFacts, now: Timestamp) -> Result<(), Skip> {
        let config = self.config.live.load();
        entrance::late_taint(
            &facts.view(),
            &config.scope,
            &config.placement.managed_taints,
            now,
            self.window,
        )
    }

    /// A Node object as the watch shows it. Only a node created within the
    /// window is looked at further (most events are heartbeats of old nodes).
    pub fn offer_node(&self, n: &Node) {
        let young = n
            .metadata
            .creation_timestamp
            .as_ref()
            .is_some_and(|c| self.now().duration_since(c.0) < self.window);
        if young {
            self.offer(node_facts(n));
        }
    }

    /// A node's facts as the watch shows them now: a candidate if the net
    /// would taint it, otherwise no longer one.
    pub fn offer(&self, facts: NodeFacts) {
        let candidate = self.decide(&facts, self.now()).is_ok();
        let mut c = self.lock();
        if candidate && !c.decided.contains_key(&facts.uid) {
            c.waiting.insert(facts.name.clone(), facts);
            drop(c);
            self.wake.notify_one();
        } else {
            c.waiting.remove(&facts.name);
        }
    }

    pub fn forget(&self, name: &str) {
        self.lock().waiting.remove(name);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Candidates> {
        self.candidates.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node is decided (tainted, skipped, or gone): never again.
    fn settle(&self, facts: &NodeFacts) {
        let mut c = self.lock();
        c.waiting.remove(&facts.name);
        c.decided.insert(facts.uid.clone(), facts.created);
    }

    /// Decides candidates until `stop`. Only writes while `executor` may.
    pub async fn run(
        self: Arc<Self>,
        executor: Arc<KubeExecutor>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let may_write = || self.config.dry_run || executor.leader.admits_write();
            if may_write() {
                let now = self.now();
                let waiting: Vec<NodeFacts> = {
                    let mut c = self.lock();
                    c.waiting.retain(|_, f| self.decide(f, now).is_ok());
                    let window = self.window;
                    c.decided.retain(|_, created| {
                        created.is_some_and(|t| now.duration_since(t) < window)
                    });
                    c.waiting.values().cloned().collect()
                };
                for facts in waiting {
                    self.one(&executor, facts).await;
                }
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(RETRY) => {}
                _ = stop.changed() => return,
            }
        }
    }

    async fn one(&self, executor: &KubeExecutor, facts: NodeFacts) {
        let writer = &executor.writer;
        let pods = match pods_on(writer.client(), &facts.name).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(node = %facts.name, error = %e, "late taint: cannot list the node's pods; trying again");
                executor.metrics.late_taint("failed");
                return;
            }
        };
        let age = facts
            .created
            .map(|c| self.now().duration_since(c).as_secs_f64())
            .unwrap_or(0.0);
        let workload = entrance::workload_pods(&pods);
        if !workload.is_empty() {
            let why = Skip::HasWorkload(workload).to_string();
            tracing::info!(node = %facts.name, %why, "late taint skipped");
            self.settle(&facts);
            executor.metrics.late_taint("skipped");
            if !self.config.dry_run {
                warn(
                    executor,
                    &facts,
                    Reason::LateTaintSkipped,
                    format!(
                        "Node arrived without a managed taint ({age:.0}s after creation) and \
                         was left alone: it {why}"
                    ),
                )
                .await;
            }
            return;
        }
        let Some(taint) = self
            .config
            .live
            .load()
            .placement
            .managed_taints
            .first()
            .map(ManagedTaint::to_taint)
        else {
            return;
        };
        if self.config.dry_run {
            tracing::info!(node = %facts.name, %taint, "dry run: would put the startup taint on");
            self.settle(&facts);
            return;
        }
        let outcome = writer
            .add_taint(&facts, &taint, &[], || executor.leader.admits_write())
            .await;
        match outcome {
            PatchOutcome::Applied => {
                tracing::info!(node = %facts.name, %taint, after_seconds = age, "late taint: put the startup taint on");
                self.settle(&facts);
                executor.metrics.late_taint("tainted");
                warn(
                    executor,
                    &facts,
                    Reason::LateTaint,
                    format!(
                        "Node arrived without a managed taint; nodegate put {taint} on it \
                         {age:.0}s after creation (the admission webhook did not)"
                    ),
                )
                .await;
            }
            // Changed since the watch showed it: the watch's newer view
            // replaces the candidate (or removes it), then it is decided again.
            PatchOutcome::Conflict => {
                tracing::debug!(node = %facts.name, "late taint: the node changed; deciding again");
            }
            PatchOutcome::NotFound => {
                self.lock().waiting.remove(&facts.name);
            }
            PatchOutcome::NotLeader | PatchOutcome::Withdrawn => {}
            PatchOutcome::Failed(e) | PatchOutcome::Ambiguous(e) => {
                tracing::warn!(node = %facts.name, error = %e, "late taint: the patch failed; trying again");
                executor.metrics.late_taint("failed");
            }
        }
    }
}

/// A Warning about the node, recorded by the leader (the executor's rule for
/// every Event).
async fn warn(executor: &KubeExecutor, facts: &NodeFacts, reason: Reason, note: String) {
    let event = NodeEvent::new(&facts.name, &facts.uid, EventType::Warning, reason, note);
    executor.record_event(event).await;
}
