//! Condition-rule taints (`conditionTaints`, semantics.md §6.5): the leader
//! puts a rule's taint on every managed node that matches the rule and, with
//! `remove: whenCleared`, takes it off a node that stops matching.
//!
//! The tainter reads the router's node index (fed by the node watch; no
//! watch of its own) once a second: every node inside `--node-selector` is
//! judged against every rule by the pure core (`conditions::rules`), which
//! also counts each rule's budget. Rules come from the gate configuration in
//! force, so a config reload reaches them at the next pass. Only a replica
//! that may write (the leader) writes, each write a conditional patch
//! ([`patch`]) through the executor's slots and rate; in dry-run it logs
//! what it would do. A patch refused because the node changed is simply
//! decided again on the newer view at the next pass.

pub mod patch;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use nodegate_actors::live::LiveConfig;
use nodegate_actors::ports::EffectExecutor;
use nodegate_actors::router::Router;
use nodegate_core::conditions::rules::{
    self, ConditionTaintRule, RemovePolicy, RuleAction, RuleVerdict,
};
use nodegate_core::gate::{EventType, NodeEvent, PatchOutcome, Reason};
use nodegate_core::model::NodeInfo;
use tokio::sync::watch;

use crate::cluster::executor::KubeExecutor;
use crate::cluster::server_time::ServerTime;

/// How often the node index is judged against the rules.
const PASS: Duration = Duration::from_secs(1);
/// How long a taint this replica added counts against its rule's budget
/// before the node watch shows it (it normally does within milliseconds).
const UNSEEN_GRACE: Duration = Duration::from_secs(30);

pub struct Tainter {
    live: Arc<LiveConfig>,
    router: Arc<Router>,
    server_time: Arc<ServerTime>,
    dry_run: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// (rule, node) taints added but not yet shown by the watch.
    unseen: HashMap<(String, String), Instant>,
    /// (rule, node) writes held back now — by the budget, or by dry run —
    /// each logged (and a budget's counted) once, until it is no longer due.
    held: HashSet<(String, String)>,
}

/// One write a pass found due.
struct Due {
    rule: usize,
    node: NodeInfo,
    verdict: RuleVerdict,
}

impl Tainter {
    pub fn new(
        live: Arc<LiveConfig>,
        router: Arc<Router>,
        server_time: Arc<ServerTime>,
        dry_run: bool,
    ) -> Self {
        Tainter {
            live,
            router,
            server_time,
            dry_run,
            state: Mutex::new(State::default()),
        }
    }

    fn now(&self) -> Timestamp {
        self.server_time
            .now()
            .map_or_else(Timestamp::now, |t| t.max(Timestamp::now()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Judges the nodes once a second until `stop`.
    pub async fn run(
        self: Arc<Self>,
        executor: Arc<KubeExecutor>,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            if self.router.is_synced() {
                self.pass(&executor).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(PASS) => {}
                _ = stop.changed() => return,
            }
        }
    }

    async fn pass(&self, executor: &KubeExecutor) {
        let config = self.live.current();
        let rules = &config.condition_taints;
        if rules.is_empty() {
            return;
        }
        let now = self.now();
        let mut managed = 0usize;
        let mut tainted = vec![0usize; rules.len()];
        let mut matching = vec![0usize; rules.len()];
        let mut due: Vec<Due> = Vec::new();
        {
            let mut st = self.lock();
            st.unseen.retain(|_, at| at.elapsed() < UNSEEN_GRACE);
            let unseen = &mut st.unseen;
            self.router.for_each_node(|n| {
                if !config.scope.includes(&n.labels) {
                    return;
                }
                managed += 1;
                for (i, rule) in rules.iter().enumerate() {
                    let has = n.taints.iter().any(|t| rules::same_taint(t, &rule.taint));
                    let key = (rule.name.clone(), n.name.clone());
                    if has {
                        unseen.remove(&key);
                        tainted[i] += 1;
                    } else if unseen.contains_key(&key) {
                        tainted[i] += 1;
                    }
                    let verdict = rules::evaluate(rule, n, now);
                    if verdict.matches {
                        matching[i] += 1;
                    }
                    let write = if verdict.matches {
                        !has && !unseen.contains_key(&key)
                    } else {
                        has && rule.remove == RemovePolicy::WhenCleared
                    };
                    if write {
                        due.push(Due {
                            rule: i,
                            node: n.clone(),
                            verdict,
                        });
                    }
                }
            });
        }
        for (rule, count) in rules.iter().zip(&matching) {
            executor.metrics.conditions.matching(&rule.name, *count);
        }
        let still_due: HashSet<(String, String)> = due
            .iter()
            .map(|d| (rules[d.rule].name.clone(), d.node.name.clone()))
            .collect();
        self.lock().held.retain(|k| still_due.contains(k));
        if due.is_empty() || !(self.dry_run || executor.leader.admits_write()) {
            return;
        }
        for d in due {
            let rule = &rules[d.rule];
            let action = rules::decide(rule, &d.node, &d.verdict, tainted[d.rule], managed);
            match action {
                Some(RuleAction::Add) if self.add(executor, rule, &d, now).await => {
                    tainted[d.rule] += 1;
                }
                Some(RuleAction::Remove) => self.remove(executor, rule, &d).await,
                Some(RuleAction::BudgetBlocked) => {
                    if self.first_hold(rule, &d.node.name) {
                        tracing::info!(rule = %rule.name, node = %d.node.name, taint = %rule.taint,
                            "condition taint held back: the rule's maxUnavailable is used up");
                        executor.metrics.conditions.budget_blocked(&rule.name);
                    }
                }
                Some(RuleAction::Add) | None => {}
            }
        }
    }

    /// Puts the rule's taint on; true when it was applied.
    async fn add(
        &self,
        executor: &KubeExecutor,
        rule: &ConditionTaintRule,
        d: &Due,
        now: Timestamp,
    ) -> bool {
        let node = &d.node.name;
        if self.dry_run {
            if self.first_hold(rule, node) {
                tracing::info!(rule = %rule.name, %node, taint = %rule.taint, why = %d.verdict.why,
                    "dry run: would put the condition taint on");
            }
            return false;
        }
        let body = patch::add(&d.node, &rule.taint, now);
        let outcome = executor
            .writer
            .patch_node_json(node, body, || executor.leader.admits_write())
            .await;
        if !self.settled(&outcome, rule, node, "put on") {
            return false;
        }
        self.lock()
            .unseen
            .insert((rule.name.clone(), node.clone()), Instant::now());
        executor.metrics.conditions.added(&rule.name);
        tracing::info!(rule = %rule.name, %node, taint = %rule.taint, why = %d.verdict.why,
            "condition taint put on");
        let note = format!(
            "Rule {} matches ({}): nodegate put {} on the node",
            rule.name, d.verdict.why, rule.taint
        );
        record(executor, &d.node, Reason::ConditionTaintAdded, note).await;
        true
    }

    async fn remove(&self, executor: &KubeExecutor, rule: &ConditionTaintRule, d: &Due) {
        let node = &d.node.name;
        if self.dry_run {
            if self.first_hold(rule, node) {
                tracing::info!(rule = %rule.name, %node, taint = %rule.taint, why = %d.verdict.why,
                    "dry run: would take the condition taint off");
            }
            return;
        }
        let Some(index) = d
            .node
            .taints
            .iter()
            .position(|t| rules::same_taint(t, &rule.taint))
        else {
            return;
        };
        let Some(body) = patch::remove(&d.node, index) else {
            return;
        };
        let outcome = executor
            .writer
            .patch_node_json(node, body, || executor.leader.admits_write())
            .await;
        if !self.settled(&outcome, rule, node, "take off") {
            return;
        }
        executor.metrics.conditions.removed(&rule.name);
        tracing::info!(rule = %rule.name, %node, taint = %rule.taint, why = %d.verdict.why,
            "condition taint taken off");
        let note = format!(
            "Rule {} no longer matches ({}): nodegate took {} off the node",
            rule.name, d.verdict.why, rule.taint
        );
        record(executor, &d.node, Reason::ConditionTaintRemoved, note).await;
    }

    /// True the first time a write for (rule, node) is held back, until it
    /// is no longer due.
    fn first_hold(&self, rule: &ConditionTaintRule, node: &str) -> bool {
        self.lock()
            .held
            .insert((rule.name.clone(), node.to_string()))
    }

    /// Whether the write was applied; anything else is logged and left for
    /// the next pass, which decides again on the watch's newer view.
    fn settled(
        &self,
        outcome: &PatchOutcome,
        rule: &ConditionTaintRule,
        node: &str,
        what: &str,
    ) -> bool {
        match outcome {
            PatchOutcome::Applied => true,
            PatchOutcome::Conflict => {
                tracing::debug!(rule = %rule.name, %node, "condition taint: the node changed; deciding again");
                false
            }
            PatchOutcome::NotFound | PatchOutcome::NotLeader | PatchOutcome::Withdrawn => false,
            PatchOutcome::Failed(e) | PatchOutcome::Ambiguous(e) => {
                tracing::warn!(rule = %rule.name, %node, error = %e,
                    "condition taint: could not {what} the taint; trying again");
                false
            }
        }
    }
}

async fn record(executor: &KubeExecutor, node: &NodeInfo, reason: Reason, note: String) {
    let event = NodeEvent::new(&node.name, &node.uid, EventType::Normal, reason, note);
    executor.record_event(event).await;
}
