//! Re-gating (`--regate-after`, semantics.md §6.4): open nodes are watched
//! without a gate each, and one whose member stays broken for the grace (or
//! that rebooted, with `--regate-on-reboot`) gets the re-gate taint; its gate
//! then starts like any other.
//!
//! The router tells [`Regater::touched`] which open node changed (its node
//! object or one of its pods), or that everything may have (a DaemonSet, the
//! configuration). [`Regater::run`] looks at those nodes with the core's
//! [`regate::examine`] over the router's indexes, and again at the moment a
//! broken member's grace runs out. What it keeps per open node is only what
//! the indexes do not hold: a [`Watched`] (its boot id, and first-seen times
//! of members with no pod), and nothing at all for a healthy node without
//! `--regate-on-reboot`.
//!
//! Only the leader writes. The budget is counted from the router's node index
//! (the nodes carrying the re-gate taint now), plus the nodes this replica
//! re-gated that the watch does not show yet, so it holds across restarts and
//! leader changes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use nodegate_actors::ports::EffectExecutor;
use nodegate_actors::router::Router;
use nodegate_core::entrance;
use nodegate_core::gate::{EventType, GateConfig, NodeEvent, PatchOutcome, Reason};
use nodegate_core::regate::{self, Health, RegateConfig, Trigger, Watched};
use tokio::sync::{Notify, watch};

use crate::cluster::entrance::{gated_since, node_facts};
use crate::cluster::executor::KubeExecutor;
use crate::cluster::server_time::ServerTime;
use crate::serve::metrics::RegateGauges;
use nodegate_core::annotations::REGATED_FOR as REGATED_FOR_ANNOTATION;

/// The longest wait between looks: nodes refused by the budget, waiting for
/// leadership, or suspended are looked at again this often.
const TICK: Duration = Duration::from_secs(1);

/// How long the fresh read of a node before its re-gate may take.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// At most one `RegateBudgetExhausted` Event per node this often.
const BUDGET_EVENT_EVERY: SignedDuration = SignedDuration::from_secs(600);

pub struct Regater {
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
    dry_run: bool,
    state: Mutex<State>,
    wake: Notify,
}

#[derive(Default)]
struct State {
    /// Open nodes to look at on the next pass.
    dirty: HashSet<String>,
    /// Every node is to be looked at (a DaemonSet or the config changed).
    all_dirty: bool,
    /// What the indexes do not hold, per open node that has any.
    watched: HashMap<String, Watched>,
    /// When to look again at a node: a broken member's grace ends then, or
    /// it is due but could not be re-gated yet (budget, leadership,
    /// suspension).
    look_at: HashMap<String, Timestamp>,
    /// When the last `RegateBudgetExhausted` Event went out per node.
    budget_event: HashMap<String, Timestamp>,
    /// Nodes re-gated by this replica, with the resourceVersion the patch
    /// replaced: until the index shows another version of the node (the
    /// patched one, or any later), it is counted in the budget and not
    /// looked at.
    pending: HashMap<String, String>,
    /// Dry-run: nodes already logged as "would re-gate".
    dry_logged: HashSet<String>,
    /// When the gauges were last set (at most once a [`TICK`]: counting
    /// walks every indexed node).
    published: Option<std::time::Instant>,
}

impl Regater {
    pub fn new(router: Arc<Router>, server_time: Arc<ServerTime>, dry_run: bool) -> Self {
        Regater {
            router,
            server_time,
            dry_run,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
        }
    }

    /// The router's [`open_node_touched`](nodegate_actors::observe::GateObserver::open_node_touched).
    pub fn touched(&self, node: Option<&str>) {
        let mut s = self.lock();
        match node {
            Some(n) => {
                if !s.all_dirty && !s.dirty.contains(n) {
                    s.dirty.insert(n.to_string());
                }
            }
            None => s.all_dirty = true,
        }
        drop(s);
        self.wake.notify_one();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The API server's time as far as the evidence goes, else this
    /// machine's: the grace counts from pods' condition times.
    fn now(&self) -> Timestamp {
        // Never ahead of what the API server's clock is known to have
        // reached: a controller clock running ahead must not shorten the
        // grace (semantics.md §5, "Clock skew").
        self.server_time.now().unwrap_or_else(Timestamp::now)
    }

    /// Looks at open nodes until `stop`. Writes only while `executor` may.
    pub async fn run(
        self: Arc<Self>,
        executor: Arc<KubeExecutor>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            if self.router.is_synced() {
                self.pass(&executor).await;
            }
            let sleep = self.until_next_look();
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = stop.changed() => return,
            }
        }
    }

    fn until_next_look(&self) -> Duration {
        let now = self.now();
        self.lock()
            .look_at
            .values()
            .min()
            .map(|at| at.duration_since(now))
            .and_then(|d| Duration::try_from(d).ok())
            .map_or(TICK, |d| d.min(TICK))
    }

    /// One pass: every node touched since the last, and every node whose
    /// time to look again has come.
    async fn pass(&self, executor: &KubeExecutor) {
        let cfg = self.router.config();
        if cfg.regate.is_none() {
            let published = self.lock().published;
            *self.lock() = State {
                published,
                ..State::default()
            };
            self.publish(executor, &cfg, 0);
            return;
        }
        let now = self.now();
        let names: Vec<String> = {
            let mut s = self.lock();
            let mut names: HashSet<String> = if std::mem::take(&mut s.all_dirty) {
                s.dirty.clear();
                self.router.node_names().into_iter().collect()
            } else {
                std::mem::take(&mut s.dirty)
            };
            names.extend(
                s.look_at
                    .iter()
                    .filter(|(_, at)| **at <= now)
                    .map(|(n, _)| n.clone()),
            );
            names.into_iter().collect()
        };
        for name in names {
            if let Some(trigger) = self.look(&name, &cfg, now) {
                self.regate(executor, &cfg, &name, trigger, now).await;
            }
        }
        let broken = self.lock().look_at.len();
        self.publish(executor, &cfg, broken);
    }

    /// The core's verdict for one node, with the memory kept up to date;
    /// `Some` when the node is due for a re-gate.
    fn look(&self, name: &str, cfg: &GateConfig, now: Timestamp) -> Option<Trigger> {
        let view = self.router.open_view(name);
        let mut s = self.lock();
        let Some(view) = view else {
            s.forget(name);
            return None;
        };
        match s.pending.get(name) {
            // The watch has not shown our patch yet: wait for it.
            Some(before) if *before == view.node.resource_version => return None,
            Some(_) => {
                s.pending.remove(name);
            }
            None => {}
        }
        let mut memory = s.watched.remove(name).unwrap_or_default();
        let health = regate::examine(
            &view.node,
            &view.daemonsets,
            &view.pods,
            cfg,
            &mut memory,
            now,
        );
        if !memory.is_empty() {
            s.watched.insert(name.to_string(), memory);
        }
        match health {
            Health::Regate(trigger) => {
                if cfg.suspend || view.node.suspended {
                    tracing::debug!(node = name, "re-gating suspended: would re-gate");
                    s.look_at.insert(name.to_string(), tick_after(now));
                    return None;
                }
                Some(trigger)
            }
            Health::Broken { regate_at, members } => {
                tracing::debug!(node = name, members = %regate::describe(&members, now), %regate_at, "member broken; re-gating if still broken then");
                s.look_at.insert(name.to_string(), regate_at);
                None
            }
            Health::Healthy | Health::NotWatched(_) => {
                s.look_at.remove(name);
                s.budget_event.remove(name);
                s.dry_logged.remove(name);
                None
            }
        }
    }

    async fn regate(
        &self,
        executor: &KubeExecutor,
        cfg: &GateConfig,
        name: &str,
        trigger: Trigger,
        now: Timestamp,
    ) {
        let Some(rc) = &cfg.regate else { return };
        let why = words(&trigger, now);
        if self.dry_run {
            if self.lock().dry_logged.insert(name.to_string()) {
                tracing::info!(node = name, %why, "dry run: would re-gate");
            }
            return;
        }
        if !executor.leader.admits_write() {
            self.lock()
                .look_at
                .insert(name.to_string(), tick_after(now));
            return;
        }
        if let Err(exhausted) = self.budget(cfg, rc) {
            self.budget_refused(executor, name, &why, exhausted, now)
                .await;
            return;
        }
        // A fresh read: the patch tests this version, and the node must still
        // be open and ours.
        let nodes: Api<Node> = Api::all(executor.writer.client().clone());
        let read = tokio::time::timeout(READ_TIMEOUT, nodes.get_opt(name)).await;
        let node = match read {
            Ok(Ok(Some(n))) => n,
            Ok(Ok(None)) => return self.lock().forget(name),
            failed => {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {READ_TIMEOUT:?}"),
                };
                tracing::warn!(node = name, %error, "re-gate: cannot read the node; trying again");
                self.lock()
                    .look_at
                    .insert(name.to_string(), tick_after(now));
                return;
            }
        };
        let facts = node_facts(&node);
        if let Err(skip) =
            entrance::open_and_ours(&facts.view(), &cfg.scope, &cfg.placement.managed_taints)
        {
            tracing::debug!(node = name, %skip, "re-gate: not open any more");
            return;
        }
        let taint = rc.taint.to_taint();
        let annotations = [
            gated_since(now),
            (REGATED_FOR_ANNOTATION, trigger.annotation()),
        ];
        let outcome = executor
            .writer
            .add_taint(&facts, &taint, &annotations, || {
                executor.leader.admits_write()
            })
            .await;
        match outcome {
            PatchOutcome::Applied => {
                tracing::warn!(node = name, %taint, %why, "re-gated");
                {
                    let mut s = self.lock();
                    s.pending
                        .insert(name.to_string(), facts.resource_version.clone());
                    s.look_at.remove(name);
                    s.budget_event.remove(name);
                }
                executor.metrics.regate.regated(trigger.kind());
                let note = format!(
                    "nodegate put {taint} on the node: {why}; it opens again when they are Ready"
                );
                let event = NodeEvent::new(
                    &facts.name,
                    &facts.uid,
                    EventType::Warning,
                    Reason::NodeRegated,
                    note,
                );
                executor.record_event(event).await;
            }
            PatchOutcome::NotFound => self.lock().forget(name),
            // The node changed since the read (or this replica stopped
            // leading): the next look decides again.
            PatchOutcome::Conflict | PatchOutcome::NotLeader | PatchOutcome::Withdrawn => {
                self.lock().look_at.insert(name.to_string(), now);
                self.wake.notify_one();
            }
            PatchOutcome::Failed(e) | PatchOutcome::Ambiguous(e) => {
                tracing::warn!(node = name, error = %e, "re-gate: the patch failed; trying again");
                self.lock()
                    .look_at
                    .insert(name.to_string(), tick_after(now));
            }
        }
    }

    /// Whether one more node may be re-gated: counted from the nodes in
    /// scope the index shows with the re-gate taint, plus this replica's own
    /// re-gates the watch has not shown yet.
    fn budget(&self, cfg: &GateConfig, rc: &RegateConfig) -> Result<(), regate::Exhausted> {
        let (managed, in_use) = self.count(cfg, rc);
        regate::budget_allows(rc, managed, in_use)
    }

    fn count(&self, cfg: &GateConfig, rc: &RegateConfig) -> (usize, usize) {
        let pending: Vec<(String, String)> = self
            .lock()
            .pending
            .iter()
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        let (managed, shown) = self.router.budget_counts(cfg, rc);
        // Re-gated by this replica, and the index still shows the version
        // before the patch (so without the taint).
        let unseen = pending
            .iter()
            .filter(|(n, before)| {
                self.router
                    .node(n)
                    .is_some_and(|n| n.resource_version == *before)
            })
            .count();
        (managed, shown + unseen)
    }

    async fn budget_refused(
        &self,
        executor: &KubeExecutor,
        name: &str,
        why: &str,
        exhausted: regate::Exhausted,
        now: Timestamp,
    ) {
        executor.metrics.regate.budget_exhausted();
        let announce = {
            let mut s = self.lock();
            s.look_at.insert(name.to_string(), tick_after(now));
            let due = s
                .budget_event
                .get(name)
                .is_none_or(|last| now.duration_since(*last) >= BUDGET_EVENT_EVERY);
            if due {
                s.budget_event.insert(name.to_string(), now);
            }
            due
        };
        if !announce {
            return;
        }
        tracing::warn!(node = name, %why, budget = %exhausted, "not re-gated: the budget is used up");
        let Some(node) = self.router.node(name) else {
            return;
        };
        let note = format!("Not re-gated although {why}: {exhausted}");
        let reason = Reason::RegateBudgetExhausted;
        let event = NodeEvent::new(name, &node.uid, EventType::Warning, reason, note);
        executor.record_event(event).await;
    }

    /// The gauges, from the indexes as they are after a pass.
    fn publish(&self, executor: &KubeExecutor, cfg: &GateConfig, broken: usize) {
        {
            let mut s = self.lock();
            let now = std::time::Instant::now();
            if s.published.is_some_and(|at| now.duration_since(at) < TICK) {
                return;
            }
            s.published = Some(now);
        }
        let suspended = self
            .router
            .count_nodes(|n| cfg.scope.includes(&n.labels) && (cfg.suspend || n.suspended));
        let (regated, allowed, ages) = match &cfg.regate {
            Some(rc) => {
                let (managed, in_use) = self.count(cfg, rc);
                let now = self.now();
                let ages = self.router.nodes_where(|n| {
                    (cfg.scope.includes(&n.labels) && regate::carries(n, rc)).then(|| {
                        let since = n.gated_since.unwrap_or(n.created);
                        (
                            n.name.clone(),
                            now.duration_since(since).as_secs_f64().max(0.0),
                        )
                    })
                });
                (in_use, rc.max_unavailable.allowed(managed), ages)
            }
            None => (0, 0, Vec::new()),
        };
        executor.metrics.regate.regated_ages(&ages);
        executor.metrics.regate.gauges(RegateGauges {
            regated,
            budget_allowed: allowed,
            broken,
            suspended,
        });
    }

    /// What is remembered of `name` now, for explain and the debug views.
    pub fn watched(&self, name: &str) -> Option<Watched> {
        self.lock().watched.get(name).cloned()
    }
}

impl State {
    fn forget(&mut self, name: &str) {
        self.watched.remove(name);
        self.look_at.remove(name);
        self.budget_event.remove(name);
        self.pending.remove(name);
        self.dry_logged.remove(name);
    }
}

fn tick_after(now: Timestamp) -> Timestamp {
    now.checked_add(SignedDuration::try_from(TICK).unwrap_or(SignedDuration::ZERO))
        .unwrap_or(now)
}

/// Why a node is (or would be) re-gated, for Events and logs.
fn words(trigger: &Trigger, now: Timestamp) -> String {
    match trigger {
        Trigger::Members(m) => format!(
            "without a Ready pod for the grace: {}",
            regate::describe(m, now)
        ),
        Trigger::Reboot { from, to } => format!("the node rebooted (boot id {from} is now {to})"),
    }
}
