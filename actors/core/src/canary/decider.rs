//! The canary pods (`canary`, semantics.md §6.9) as a decider: one canary
//! per gated node, at most `maxInFlight` at once cluster-wide, deleted as
//! soon as its node is open, no longer gated, or gone.
//!
//! The index (fed by a watch on nodegate's namespace) shows each node's
//! canary; a LIST of every canary when the work starts, when this replica
//! gains the lease and every [`RESYNC`] finds the ones the index cannot
//! point to: canaries of nodes that no longer exist, left by a replica that
//! stopped. Only the leader decides.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::canary;
use crate::deciders::{
    CanaryCreate, CanaryDelete, Change, Context, Decider, Effect, Input, Level, Origin, Tally,
    retry_after,
};
use crate::gate::PatchOutcome;
use crate::vocab::config::CanaryConfig;
use crate::vocab::model::PodInfo;

/// How often the leader lists every canary again.
pub const RESYNC: SignedDuration = SignedDuration::from_secs(30);

/// A node's canaries that failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Failure {
    /// How many in a row (reset when the node is no longer gated).
    count: u32,
    /// The failed pod (empty: the create itself failed).
    uid: String,
    /// When it is replaced.
    at: Timestamp,
}

/// The canary decider's memory.
#[derive(Debug, Default)]
pub struct Canaries {
    /// Nodes holding a canary as last seen (the index, the last LIST) or
    /// getting one: each counts against the cap.
    holders: BTreeSet<String>,
    /// Creates answered but not yet in the index, by node.
    creating: BTreeSet<String>,
    /// Deletes out, by pod name.
    deleting: BTreeSet<String>,
    /// Canaries of gone nodes deleted with force (uids, by node): sent once.
    forced: BTreeMap<String, BTreeSet<String>>,
    /// Canaries the last LIST found (name, uid) by node, until the index
    /// shows that node's canaries or they are deleted.
    listed: BTreeMap<String, Vec<(String, String)>>,
    failed: BTreeMap<String, Failure>,
    /// Gated nodes waiting for a slot under the cap.
    waiting: BTreeSet<String>,
    /// When the next LIST is due; `None`: at once.
    next_list: Option<Timestamp>,
    /// A LIST answered since this replica gained the lease: nothing is
    /// created or deleted before.
    synced: bool,
}

impl Canaries {
    /// The gated nodes waiting for a slot (for the gauges and tests).
    pub fn waiting(&self) -> impl Iterator<Item = &str> {
        self.waiting.iter().map(String::as_str)
    }

    /// How many canaries count against the cap now.
    pub fn in_flight(&self) -> usize {
        self.holders.len()
    }

    /// Every node this decider has reason to look at again.
    fn known(&self) -> BTreeSet<String> {
        let waiting = self.holders.iter().chain(&self.waiting);
        let failed = self.failed.keys().chain(self.listed.keys());
        waiting.chain(failed).cloned().collect()
    }

    /// The LIST's answer: the canaries that exist now, then a pass over
    /// them and every gated node.
    fn listed(
        &mut self,
        listed: Result<Vec<PodInfo>, String>,
        cfg: &CanaryConfig,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let pods = match listed {
            Ok(pods) => pods,
            Err(error) => {
                let log = format!("cannot list the canary pods (trying again shortly): {error}");
                out.push(Effect::log(Level::Warn, "", log));
                self.next_list = Some(retry_after(cx.now.local));
                return;
            }
        };
        self.synced = true;
        self.listed.clear();
        for pod in pods.iter().filter(|p| !p.terminating) {
            let node = pod
                .labels
                .get(canary::CANARY_LABEL)
                .filter(|_| pod.node_name.is_empty())
                .unwrap_or(&pod.node_name);
            self.listed
                .entry(node.to_string())
                .or_default()
                .push((pod.name.to_string(), pod.uid.to_string()));
        }
        self.holders = self.listed.keys().chain(&self.creating).cloned().collect();
        let mut nodes = self.known();
        let gated = cx.view.nodes().into_iter().filter(|n| cx.config.gates(n));
        nodes.extend(gated.map(|n| n.name.clone()));
        for node in nodes {
            self.reconcile(&node, cfg, cx, out);
        }
    }

    /// Brings `node` in line: no canary unless gated; one, live, if gated
    /// and a slot is free.
    fn reconcile(
        &mut self,
        node: &str,
        cfg: &CanaryConfig,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let mut indexed = cx.view.pods_on(node);
        indexed.retain(|p| canary::is_canary_of(p, cfg, node));
        if !indexed.is_empty() {
            // The index caught up with the LIST and with our creates.
            self.listed.remove(node);
            self.creating.remove(node);
        }
        let gated = cx.view.node(node).is_some_and(|n| cx.config.gates(&n));
        if gated {
            self.keep(node, &indexed, cx, out);
        } else {
            self.clear(node, &indexed, cx, out);
        }
    }

    /// A node that is not gated (open, out of scope) or gone: every canary
    /// of it goes.
    fn clear(
        &mut self,
        node: &str,
        indexed: &[Arc<PodInfo>],
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        self.waiting.remove(node);
        self.failed.remove(node);
        let gone = cx.view.node(node).is_none();
        let why = if gone { "node_gone" } else { "not_gated" };
        // A canary being deleted gracefully on a node that is gone is
        // forced, once: no kubelet will finish it.
        let forced = |p: &PodInfo| {
            self.forced
                .get(node)
                .is_some_and(|f| f.contains(&*p.uid.text()))
        };
        let mut doomed: Vec<(String, Option<String>)> = indexed
            .iter()
            .filter(|p| !p.terminating || (gone && !forced(p)))
            .map(|p| (p.name.to_string(), Some(p.uid.to_string())))
            .collect();
        let listed = self.listed.get(node).into_iter().flatten();
        doomed.extend(listed.map(|(name, uid)| (name.clone(), Some(uid.clone()))));
        if self.creating.contains(node) {
            doomed.push((canary::pod_name(node), None));
        }
        let any = !indexed.is_empty() || !doomed.is_empty();
        for (name, uid) in doomed {
            if self.deleting.insert(name.clone()) {
                if let Some(uid) = uid.as_ref().filter(|_| gone) {
                    self.forced
                        .entry(node.to_string())
                        .or_default()
                        .insert(uid.clone());
                }
                out.push(Effect::DeleteCanary(CanaryDelete {
                    node: node.to_string(),
                    name,
                    uid,
                    force: gone,
                }));
                out.push(Effect::Count(Tally::CanaryDeleted(why)));
            }
        }
        if !any {
            self.holders.remove(node);
            self.forced.remove(node);
        }
    }

    /// A gated node: its canary stays while live, is replaced after a
    /// backoff when it ended, and is made when there is none and a slot
    /// is free.
    fn keep(
        &mut self,
        node: &str,
        indexed: &[Arc<PodInfo>],
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let now = cx.now.local;
        let ended = indexed
            .iter()
            .find(|p| !p.terminating && canary::has_ended(p));
        // Live, ended, being deleted (a new one follows), or not yet indexed.
        if !indexed.is_empty() || self.listed.contains_key(node) || self.creating.contains(node) {
            self.holders.insert(node.to_string());
            self.waiting.remove(node);
            if let Some(pod) = ended {
                self.replace_ended(node, pod, now, out);
            }
        } else {
            self.holders.remove(node);
            if self.failed.get(node).is_none_or(|f| f.at <= now) {
                self.waiting.insert(node.to_string());
            }
        }
    }

    /// A canary that ended: counted once, kept until its backoff is over
    /// (explain shows the kubelet's reason meanwhile), then deleted.
    fn replace_ended(&mut self, node: &str, pod: &PodInfo, now: Timestamp, out: &mut Vec<Effect>) {
        let failure = self.failed.entry(node.to_string()).or_default();
        if pod.uid != failure.uid {
            failure.again(pod.uid.to_string(), now);
            out.push(Effect::Count(Tally::CanaryFailed));
            let note = pod.status_note.as_deref().map(|n| format!(": {n}"));
            let (name, phase, at) = (&pod.name, pod.phase.to_lowercase(), failure.at);
            let log = format!(
                "canary pod {name} {phase}{}; replacing it at {at}",
                note.unwrap_or_default()
            );
            out.push(Effect::log(Level::Warn, node, log));
        }
        if failure.at <= now && self.deleting.insert(pod.name.to_string()) {
            out.push(Effect::DeleteCanary(CanaryDelete {
                node: node.to_string(),
                name: pod.name.to_string(),
                uid: Some(pod.uid.to_string()),
                force: false,
            }));
            out.push(Effect::Count(Tally::CanaryDeleted("failed")));
        }
    }

    /// Creates a canary for waiting nodes while slots are free, in name
    /// order; a node no longer gated leaves the queue. Under `suspend`
    /// nothing is created (canaries are still deleted: cleaning up never
    /// opens a node).
    fn fill_slots(&mut self, cfg: &CanaryConfig, cx: &Context<'_>, out: &mut Vec<Effect>) {
        if !cx.may_write || !self.synced || cx.config.suspend {
            return;
        }
        let queue: Vec<String> = self.waiting.iter().cloned().collect();
        for node in queue {
            if self.holders.len() >= cfg.max_in_flight {
                return;
            }
            self.waiting.remove(&node);
            let Some(info) = cx.view.node(&node).filter(|n| cx.config.gates(n)) else {
                continue;
            };
            self.holders.insert(node.clone());
            self.creating.insert(node.clone());
            out.push(Effect::CreateCanary(CanaryCreate {
                name: canary::pod_name(&node),
                label: canary::label_value(&node),
                node_uid: info.uid.clone(),
                node,
            }));
        }
    }

    fn created(
        &mut self,
        create: CanaryCreate,
        outcome: PatchOutcome,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let node = create.node;
        use crate::vocab::write::Outcome::*;
        match outcome {
            Applied => out.push(Effect::Count(Tally::CanaryCreated)),
            // A pod of that name exists (the index is behind, or the old
            // canary is still being deleted): look again shortly.
            Conflict => {
                self.creating.remove(&node);
                self.listed
                    .entry(node.clone())
                    .or_default()
                    .push((create.name, String::new()));
            }
            NotLeader | Withdrawn => {
                self.creating.remove(&node);
                self.holders.remove(&node);
            }
            // A replace write's own answers: no canary create gets one.
            NotFound | Failed(_) | Ambiguous(_) | OwnerDeleted(_) | OwnerFailed(_) | NoOwner(_) => {
                self.creating.remove(&node);
                self.holders.remove(&node);
                let failure = self.failed.entry(node.clone()).or_default();
                failure.again(String::new(), cx.now.local);
                let (name, at) = (&create.name, failure.at);
                let log =
                    format!("cannot create canary pod {name}: {outcome:?}; trying again at {at}");
                out.push(Effect::log(Level::Warn, &node, log));
            }
        }
    }

    fn deleted(
        &mut self,
        delete: CanaryDelete,
        outcome: PatchOutcome,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        self.deleting.remove(&delete.name);
        match outcome {
            PatchOutcome::Applied | PatchOutcome::NotFound | PatchOutcome::Conflict => {
                if let Some(pods) = self.listed.get_mut(&delete.node) {
                    pods.retain(|(name, _)| *name != delete.name);
                    if pods.is_empty() {
                        self.listed.remove(&delete.node);
                    }
                }
            }
            other => {
                let name = &delete.name;
                let log =
                    format!("cannot delete canary pod {name}: {other:?}; trying again shortly");
                out.push(Effect::log(Level::Warn, &delete.node, log));
                // A LIST shortly, and a pass over every canary after it.
                let soon = retry_after(cx.now.local);
                self.next_list = Some(self.next_list.map_or(soon, |at| at.min(soon)));
            }
        }
    }
}

impl Decider for Canaries {
    fn origin(&self) -> Origin {
        Origin::Canary
    }

    fn decide(&mut self, input: Input, cx: &Context<'_>) -> Vec<Effect> {
        let Some(cfg) = cx.config.canary.clone() else {
            return Vec::new();
        };
        let now = cx.now.local;
        let mut out = Vec::new();
        // Decisions wait for a LIST answered while leading; asking for the
        // LIST (below) does not.
        let deciding = cx.may_write && self.synced;
        match input {
            // What the decisions rest on may have changed: a LIST, then a
            // pass over every canary and gated node.
            Input::Changed(Change::Everything | Change::DaemonSet { .. }) => self.next_list = None,
            // Everything this replica believed, dropped: it just gained the
            // lease, and a LIST follows.
            Input::MayWrite => *self = Canaries::default(),
            Input::Changed(
                Change::Node { name: node, .. }
                | Change::Pods { node }
                | Change::GateStopped { node },
            ) => {
                if deciding {
                    self.reconcile(&node, &cfg, cx, &mut out);
                }
            }
            Input::Tick => {
                if deciding && self.next_list.is_some_and(|at| at > now) {
                    for node in self.known() {
                        self.reconcile(&node, &cfg, cx, &mut out);
                    }
                }
            }
            Input::CanariesListed(listed) => self.listed(listed, &cfg, cx, &mut out),
            Input::CanaryCreated { create, outcome } => self.created(create, outcome, cx, &mut out),
            Input::CanaryDeleted { delete, outcome } => self.deleted(delete, outcome, cx, &mut out),
            Input::Wrote { .. }
            | Input::PodsListed { .. }
            | Input::NodeRead { .. }
            | Input::Replaced { .. } => {}
        }
        if cx.may_write && self.next_list.is_none_or(|at| at <= now) {
            // Asked for once at a time: nothing else is decided until it
            // answers (the shell answers before the next input).
            self.next_list = Some(now.checked_add(RESYNC).unwrap_or(now));
            out.push(Effect::ListCanaries);
        }
        self.fill_slots(&cfg, cx, &mut out);
        // The earliest time something is due: a LIST, a failed canary's
        // replacement.
        let replacements = self.failed.values().map(|f| f.at).filter(|at| *at > now);
        let next = self.next_list.into_iter().chain(replacements).min();
        out.extend(next.map(Effect::LookAgainAt));
        out
    }
}

impl Failure {
    /// One more failure in a row, of pod `uid` (empty: the create): the
    /// node's next canary waits for the backoff.
    fn again(&mut self, uid: String, now: Timestamp) {
        self.count += 1;
        self.uid = uid;
        let wait = SignedDuration::try_from(canary::BACKOFF.ceiling(self.count));
        self.at = wait
            .ok()
            .and_then(|d| now.checked_add(d).ok())
            .unwrap_or(now);
    }
}

#[cfg(test)]
mod tests;
