//! The late-taint net (`--taint-new-nodes`, semantics.md §6.2) as a
//! decider: a new node the index shows without a managed taint — the
//! admission webhook was down, not installed, or not asked — gets the
//! startup taint, unless a workload pod is already bound to it.
//!
//! A node created within the window that [`entrance::late_taint`] would
//! taint becomes a candidate; while this replica may write, its pods are
//! listed once, then it is tainted (Warning `LateTaint`) or left alone
//! (Warning `LateTaintSkipped`). A candidate stays until it is decided,
//! leaves the window or the index shows it tainted, so a follower that
//! becomes leader picks up what the old leader left. Each node (by uid) is
//! decided once, and so is a node the index ever showed with a managed
//! taint: if that taint goes without nodegate's `opened-at`, an operator
//! removed it, and the net does not put it back (the gate then records
//! `opened-by: external`, which keeps every replica's net off it after a
//! restart).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::deciders::{
    Change, Context, Decider, Effect, Input, Level, Origin, TaintChange, TaintWrite, Tally,
    add_taint, retry_after, write_on,
};
use crate::gate::{PatchOutcome, Reason};
use crate::net::entrance::{self, BoundPod, Skip};
use crate::vocab::model::NodeInfo;

/// The net's memory.
#[derive(Debug, Default)]
pub struct Net {
    window: SignedDuration,
    /// Waiting to be decided, by node name, as the index last showed them.
    waiting: HashMap<String, Arc<NodeInfo>>,
    /// Candidates whose pod list or write is out: not sent again until it
    /// answers.
    in_flight: HashSet<String>,
    /// Nodes (by uid) already tainted or skipped, with their creation time;
    /// kept while the node is inside the window.
    decided: HashMap<String, Timestamp>,
    /// Candidates whose write the API server refused because the node had
    /// changed, with the resourceVersion refused: not listed again until the
    /// index shows another version (then decided on that one).
    refused: HashMap<String, String>,
    /// Candidates whose pod LIST or write failed (or was refused for
    /// leadership): tried again at the next look, not at once.
    backoff: HashSet<String>,
    /// Whether a look is already asked for.
    look_pending: bool,
}

impl Net {
    /// A net for nodes created less than `window` ago.
    pub fn new(window: Duration) -> Self {
        Net {
            window: SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX),
            ..Net::default()
        }
    }

    /// The candidates now, by name (for tests and the debug views).
    pub fn candidates(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.waiting.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    fn candidate(&self, node: &NodeInfo, cx: &Context<'_>) -> bool {
        let (view, cfg) = (entrance::view(node), cx.config);
        let managed = &cfg.placement.managed_taints;
        let late =
            entrance::late_taint(&view, &cfg.scope, managed, cx.now.for_window(), self.window);
        late.is_ok() && !self.decided.contains_key(&node.uid)
    }

    /// A node carrying a managed taint was gated by some entrance: it is
    /// decided, whatever becomes of that taint.
    fn note_gated(&mut self, node: &NodeInfo, cx: &Context<'_>) {
        let managed = &cx.config.placement;
        if node.taints.iter().any(|t| managed.is_managed(t)) {
            self.decided.insert(node.uid.clone(), node.created);
        }
    }

    fn offer(&mut self, name: &str, node: Option<&Arc<NodeInfo>>, cx: &Context<'_>) -> Vec<Effect> {
        if let Some(n) = node {
            self.note_gated(n, cx);
        }
        match node {
            Some(n) if self.candidate(n, cx) => {
                // Refused at another version: decided on this one.
                if self.refused.get(name) != Some(&n.resource_version) {
                    self.refused.remove(name);
                }
                self.waiting.insert(name.to_string(), Arc::clone(n));
                self.work(cx)
            }
            _ => {
                self.forget(name);
                Vec::new()
            }
        }
    }

    /// Every node of the index offered at once (the initial lists are in,
    /// or the configuration changed): the candidates among them join the
    /// waiting ones, then one round of work.
    fn offer_all(&mut self, cx: &Context<'_>) -> Vec<Effect> {
        for node in cx.view.nodes() {
            self.note_gated(&node, cx);
            if self.candidate(&node, cx) {
                self.waiting.insert(node.name.clone(), node);
            }
        }
        self.work(cx)
    }

    fn forget(&mut self, name: &str) {
        self.waiting.remove(name);
        self.refused.remove(name);
        self.backoff.remove(name);
    }

    /// Lists the pods of every waiting candidate not already in flight nor
    /// backing off, if this replica may write; asks to look again later for
    /// the others.
    fn work(&mut self, cx: &Context<'_>) -> Vec<Effect> {
        let now = cx.now.for_window();
        let window = self.window;
        self.decided
            .retain(|_, created| now.duration_since(*created) < window);
        let stale: Vec<String> = self
            .waiting
            .iter()
            .filter(|(_, n)| !self.candidate(n, cx))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            self.forget(&name);
        }
        let mut ready: Vec<String> = self
            .waiting
            .iter()
            .filter(|(n, _)| !self.in_flight.contains(*n) && !self.refused.contains_key(*n))
            .filter(|(n, _)| !self.backoff.contains(*n))
            // Suspended (the node's annotation): waits, as under `suspend`.
            .filter(|(_, node)| !node.suspended)
            .map(|(n, _)| n.clone())
            .collect();
        ready.sort_unstable();
        let suspended = self.waiting.values().any(|n| n.suspended);
        // `suspend: true` stops the net like every writer: candidates wait.
        let acting = (cx.may_write || cx.config.dry_run) && !cx.config.suspend;
        let held = !self.backoff.is_empty() || suspended || (!acting && !ready.is_empty());
        let mut out = Vec::new();
        if acting {
            for name in ready {
                self.in_flight.insert(name.clone());
                out.push(Effect::ListPods { node: name });
            }
        }
        if held && !self.look_pending {
            self.look_pending = true;
            out.push(Effect::LookAgainAt(retry_after(cx.now.local)));
        }
        out
    }

    fn settle(&mut self, node: &NodeInfo) {
        self.forget(&node.name);
        self.in_flight.remove(&node.name);
        self.decided.insert(node.uid.clone(), node.created);
    }

    fn listed(
        &mut self,
        name: &str,
        pods: Result<Vec<BoundPod>, String>,
        cx: &Context<'_>,
    ) -> Vec<Effect> {
        let Some(node) = self.waiting.get(name).cloned() else {
            self.in_flight.remove(name);
            return Vec::new();
        };
        let pods = match pods {
            Ok(p) => p,
            Err(e) => {
                self.in_flight.remove(name);
                let message = format!("late taint: cannot list the node's pods; trying again: {e}");
                return self.failed(name, message, cx);
            }
        };
        let workload = entrance::workload_pods(&pods);
        if !workload.is_empty() {
            return self.skip(&node, workload, cx);
        }
        let taint = cx.config.startup.for_node(&node.labels).to_taint();
        if cx.config.dry_run {
            self.settle(&node);
            let log = format!("dry run: would put the startup taint {taint} on");
            return vec![Effect::log(Level::Info, name, log)];
        }
        let change = add_taint(&node, taint, Vec::new(), cx.now.for_window());
        vec![Effect::Write(write_on(Origin::Net, &node, change))]
    }

    /// The node has workload pods: left alone, once and for all.
    fn skip(&mut self, node: &NodeInfo, workload: Vec<String>, cx: &Context<'_>) -> Vec<Effect> {
        let why = Skip::HasWorkload(workload).to_string();
        let age = age(node, cx);
        self.settle(node);
        let log = format!("late taint skipped: {why}");
        let mut out = vec![
            Effect::log(Level::Info, &node.name, log),
            Effect::Count(Tally::LateTaint("skipped")),
        ];
        if !cx.config.dry_run {
            let note = format!(
                "Node arrived without a managed taint ({age:.0}s after creation) and was left \
                 alone: it {why}"
            );
            let reason = Reason::LateTaintSkipped;
            out.push(Effect::warning(&node.name, &node.uid, reason, note));
        }
        out
    }

    fn wrote(
        &mut self,
        write: &TaintWrite,
        outcome: PatchOutcome,
        cx: &Context<'_>,
    ) -> Vec<Effect> {
        let name = write.node.as_str();
        self.in_flight.remove(name);
        let Some(node) = self.waiting.get(name).cloned() else {
            return Vec::new();
        };
        use crate::vocab::write::Outcome::*;
        match outcome {
            Applied => {
                let TaintChange::Add { taint, .. } = &write.change else {
                    return Vec::new();
                };
                let age = age(&node, cx);
                self.settle(&node);
                let log = format!(
                    "late taint: put the startup taint {taint} on {age:.1}s after creation"
                );
                let note = format!(
                    "Node arrived without a managed taint; nodegate put {taint} on it \
                     {age:.0}s after creation (the admission webhook did not)"
                );
                vec![
                    Effect::log(Level::Info, name, log),
                    Effect::Count(Tally::LateTaint("tainted")),
                    Effect::warning_of_own_write(&node.name, &node.uid, Reason::LateTaint, note),
                ]
            }
            // Changed since the index showed it: the index's newer view
            // replaces the candidate (or removes it), then it is decided
            // again.
            Conflict => {
                self.refused
                    .insert(name.to_string(), write.resource_version.clone());
                let log = "late taint: the node changed; deciding again on its next version";
                vec![Effect::log(Level::Debug, name, log)]
            }
            NotFound => {
                self.forget(name);
                Vec::new()
            }
            NotLeader | Withdrawn => {
                self.backoff.insert(name.to_string());
                self.work(cx)
            }
            // A replace write's own answers: no taint write gets one.
            Failed(e) | Ambiguous(e) | OwnerDeleted(e) | OwnerFailed(e) | NoOwner(e) => {
                let message = format!("late taint: the patch failed; trying again: {e}");
                self.failed(name, message, cx)
            }
        }
    }

    /// A pod LIST or a write that failed: said and counted, and tried again
    /// at the next look.
    fn failed(&mut self, name: &str, message: String, cx: &Context<'_>) -> Vec<Effect> {
        self.backoff.insert(name.to_string());
        let mut out = vec![
            Effect::log(Level::Warn, name, message),
            Effect::Count(Tally::LateTaint("failed")),
        ];
        out.extend(self.work(cx));
        out
    }
}

/// The seconds since `node` was created, on the window's clock.
fn age(node: &NodeInfo, cx: &Context<'_>) -> f64 {
    let now = cx.now.for_window();
    now.duration_since(node.created).as_secs_f64()
}

impl Decider for Net {
    fn origin(&self) -> Origin {
        Origin::Net
    }

    fn decide(&mut self, input: Input, cx: &Context<'_>) -> Vec<Effect> {
        match input {
            Input::Changed(Change::Node { name, after, .. }) => {
                self.offer(&name, after.as_ref(), cx)
            }
            Input::Changed(Change::Everything | Change::DaemonSet { .. }) => self.offer_all(cx),
            Input::MayWrite => self.work(cx),
            Input::Tick => {
                self.look_pending = false;
                self.backoff.clear();
                self.work(cx)
            }
            Input::Changed(Change::Pods { .. } | Change::GateStopped { .. }) => Vec::new(),
            Input::PodsListed { node, pods } => self.listed(&node, pods, cx),
            Input::Wrote { write, outcome } => self.wrote(&write, outcome, cx),
            Input::NodeRead { .. }
            | Input::Replaced { .. }
            | Input::CanaryCreated { .. }
            | Input::CanaryDeleted { .. }
            | Input::CanariesListed(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
