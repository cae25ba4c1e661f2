//! `--on-timeout=replace` as a decider (semantics.md §5.8). Only the leader
//! writes.
//!
//! The budget counts what the API shows: every node carrying
//! `nodegate.dev/replace-requested` for its current gate and still held
//! closed by it is in flight ([`outstanding`]), and every request time this
//! replica has seen counts in the interval, also after its node is gone. So
//! a restarted or new leader counts the requests made before it, and never
//! asks twice for a node already marked: the mark is written before the
//! owner is deleted. A leader that gains the lease deletes the owner of
//! every outstanding node once more (never of one opened since, which may
//! serve workloads; the executor skips an owner already being deleted), so a
//! request cut off between the mark and the delete is finished.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::closing::ledger::flag;
use crate::closing::replacing::{self, Exhausted, Spread, Used};
use crate::deciders::{
    BUDGET_RETRY, Change, Context, Decider, Effect, Input, Level, Origin, Outcome, ReplaceAction,
    ReplaceWrite, Tally, retry_after, tell_refusal,
};
use crate::gate::{self, EventType, NodeEvent, Reason};
use crate::vocab::backoff::{Backoff, Backoffs, May};
use crate::vocab::config::{Config, OnTimeout, ReplaceConfig};
use crate::vocab::member::{Member, MemberId, Readiness};
use crate::vocab::model::{DaemonSetInfo, Fallback, NodeInfo, Owner, PodInfo};
use crate::vocab::vec_map::VecMap;

mod counts;
#[cfg(test)]
mod tests;

use counts::Counts;

/// Whether `node` waits for the leader to ask for its replacement: its
/// current gate timed out and kept it, nobody opened it since, and neither a
/// request nor a fallback is recorded for this gate.
pub fn due(node: &NodeInfo, cfg: &Config) -> bool {
    let start = replacing::gate_start(node);
    cfg.on_timeout == OnTimeout::Replace
        && cfg.gates(node)
        && !node.ignored
        && node
            .replace
            .timed_out
            .is_some_and(|t| t >= start && !opened_since(node, t))
        && node.replace.requested.is_none_or(|t| t < start)
        && replacing::fallback(node).is_none()
}

/// Whether `node`'s replacement is still outstanding: a request is
/// recorded for its current gate, the gate still holds it closed (it
/// carries a managed taint), and it has no `opened-at` since the request.
/// A node opened since or re-gated afresh is no longer in flight, and its
/// owner is never deleted again, even when a managed taint comes back
/// (Karpenter's registration puts its startup taints back on a node opened
/// before it registered): its mark is history.
pub fn outstanding(node: &NodeInfo, cfg: &Config) -> bool {
    cfg.gates(node)
        && node
            .replace
            .requested
            .is_some_and(|t| t >= replacing::gate_start(node) && !opened_since(node, t))
}

fn opened_since(node: &NodeInfo, t: Timestamp) -> bool {
    node.opened_at.is_some_and(|o| o >= t)
}

/// The members the node waits for — of every kind the gate waits for
/// (DaemonSets, critical pods, conditions, devices, the canary): expected
/// on it and not Ready there, as the gate derives them.
pub fn blocking(
    node: &NodeInfo,
    daemonsets: &VecMap<String, Arc<DaemonSetInfo>>,
    pods: &[Arc<PodInfo>],
    cfg: &Config,
    now: Timestamp,
) -> Vec<MemberId> {
    gate::derive_all(node, daemonsets, &by_uid(pods), cfg, now)
        .into_iter()
        .filter(|(_, m)| failing(m))
        .map(|(id, _)| id)
        .collect()
}

fn failing(m: &Member) -> bool {
    m.is_expected() && !m.readiness.as_ref().is_some_and(Readiness::is_ready)
}

/// Pods keyed as a gate keeps them.
fn by_uid(pods: &[Arc<PodInfo>]) -> VecMap<String, Arc<PodInfo>> {
    pods.iter()
        .map(|p| (p.uid.to_string(), Arc::clone(p)))
        .collect()
}

/// DaemonSets keyed as a gate keeps them.
fn by_key(daemonsets: Vec<Arc<DaemonSetInfo>>) -> VecMap<String, Arc<DaemonSetInfo>> {
    daemonsets.into_iter().map(|ds| (ds.key(), ds)).collect()
}

/// The wait after a node's owner could not be found or deleted, each spread
/// over its second half: an owner lookup (a LIST of every NodeClaim when the
/// node has no ownerReference) or delete that keeps failing — a verb not
/// granted, an API answering errors — is tried at most about once in 5 min.
pub const OWNER_RETRY: Backoff = Backoff::new(Duration::from_secs(20), Duration::from_secs(300));

/// The replace decider's memory.
#[derive(Debug, Default)]
pub struct Replacer {
    /// Request times seen on nodes (or written by this replica), kept for
    /// the interval even after the node is gone.
    seen: HashMap<String, Timestamp>,
    /// This replica's requests the index does not show yet.
    pending: HashSet<String>,
    /// Writes out (requests, deletes again, fallbacks).
    writing: HashSet<String>,
    /// The requests among them: they count in the budget until answered.
    requesting: HashSet<String>,
    /// Marked nodes whose owner this replica deleted (or found gone).
    owner_done: HashSet<String>,
    /// When the last `ReplaceBudgetExhausted` Event went out, per node.
    budget_event: HashMap<String, Timestamp>,
    /// Due nodes the budget refused.
    refused: BTreeSet<String>,
    /// Spreads of the members judged during one input.
    spreads: HashMap<MemberId, Spread>,
    /// The spreads kept from the change feed ([`counts`]).
    counts: Option<Counts>,
    /// Whether this input's look counted the nodes whose pods may change
    /// unheard ([`Counts::refresh`]).
    refreshed: bool,
    /// What the budget counts, kept from the change feed so that a look
    /// costs no pass over every node (issue 37 §6): the request time on each
    /// indexed node that carries one, and the indexed nodes whose request is
    /// [`outstanding`]. Rebuilt at every full look and whenever the
    /// configuration (which decides what is outstanding) is not `tracked_for`.
    marks: HashMap<String, Timestamp>,
    in_flight: HashSet<String>,
    tracked_for: Option<Config>,
    /// Per node, the failed owner lookups or deletes in a row (issue 37 §6;
    /// made at first use: [`Self::owner_backoff`]).
    owner_backoff: Option<Backoffs>,
}

impl Replacer {
    /// The owners' [`Backoffs`], by [`OWNER_RETRY`] spread per node.
    fn owner_backoff(&mut self) -> &mut Backoffs {
        self.owner_backoff
            .get_or_insert_with(|| Backoffs::spread(OWNER_RETRY))
    }

    /// The request times this replica counts, for explain and tests.
    pub fn requests(&self) -> &HashMap<String, Timestamp> {
        &self.seen
    }

    /// Whether `name` is due but refused by the budget now.
    pub fn refused(&self, name: &str) -> bool {
        self.refused.contains(name)
    }

    fn note(&mut self, node: &NodeInfo) {
        if let Some(at) = node.replace.requested {
            self.seen.entry(node.name.clone()).or_insert(at);
            self.pending.remove(&node.name);
        }
    }

    /// Keeps [`Self::marks`] and [`Self::in_flight`] for one node.
    fn track(&mut self, node: &NodeInfo, cfg: &Config) {
        let name = node.name.as_str();
        match node.replace.requested {
            Some(at) => self.marks.insert(name.to_string(), at),
            None => self.marks.remove(name),
        };
        flag(&mut self.in_flight, name, outstanding(node, cfg));
    }

    /// [`Self::marks`] and [`Self::in_flight`] built afresh from `nodes`
    /// (every indexed node), and every request on them noted.
    fn rebuild(&mut self, nodes: &[Arc<NodeInfo>], cfg: &Config) {
        self.marks.clear();
        self.in_flight.clear();
        for n in nodes {
            self.note(n);
            self.track(n, cfg);
        }
        if self.tracked_for.as_ref() != Some(cfg) {
            self.tracked_for = Some(cfg.clone());
        }
    }

    /// The budget used now (the request times from before the interval
    /// forgotten first): what the nodes carry and what this replica
    /// remembers.
    fn used(&mut self, cx: &Context<'_>) -> Used {
        let rc = &cx.config.replace;
        let interval = SignedDuration::try_from(rc.interval).unwrap_or(SignedDuration::MAX);
        let now = cx.now.for_grace();
        let since = now.checked_sub(interval).unwrap_or(Timestamp::MIN);
        self.seen.retain(|_, at| *at > since);
        let unseen = self
            .pending
            .iter()
            .chain(&self.requesting)
            .filter(|n| !self.in_flight.contains(*n))
            .collect::<HashSet<_>>()
            .len();
        let on_nodes = self.marks.iter().filter(|(_, at)| **at > since);
        let recent = self
            .seen
            .keys()
            .chain(&self.requesting)
            .chain(on_nodes.map(|(name, _)| name))
            .collect::<HashSet<_>>()
            .len();
        Used {
            recent,
            in_flight: self.in_flight.len() + unseen,
        }
    }

    /// Every node: noted, and those that carry a deadline or a request
    /// looked at, the longest timed out first. The others cannot be due or
    /// outstanding: they are only dropped from the refused set.
    fn scan(&mut self, cx: &Context<'_>, out: &mut Vec<Effect>) {
        let nodes = cx.view.nodes();
        self.rebuild(&nodes, cx.config);
        let mut candidates: Vec<Arc<NodeInfo>> = nodes
            .into_iter()
            .filter(|n| n.replace.timed_out.is_some() || n.replace.requested.is_some())
            .collect();
        candidates
            .sort_by(|a, b| (a.replace.timed_out, &a.name).cmp(&(b.replace.timed_out, &b.name)));
        let names: HashSet<&str> = candidates.iter().map(|n| n.name.as_str()).collect();
        self.refused.retain(|n| names.contains(n.as_str()));
        for n in candidates {
            self.look(&n, cx, out);
        }
    }

    /// One node: its owner deleted again if this replica has not yet, and a
    /// request (or a fallback) if it is due.
    fn look(&mut self, node: &Arc<NodeInfo>, cx: &Context<'_>, out: &mut Vec<Effect>) {
        let name = node.name.as_str();
        if self.writing.contains(name) || !cx.may_write || cx.config.suspend || node.suspended {
            return;
        }
        let delete_again = outstanding(node, cx.config)
            && node.replace.owner != Owner::None
            && !self.owner_done.contains(name);
        if !delete_again && !due(node, cx.config) {
            self.refused.remove(name);
            return;
        }
        let now = cx.now.for_grace();
        if let May::WaitUntil(at) = self.owner_backoff().may(name, now, 0) {
            out.push(Effect::LookAgainAt(at));
            return;
        }
        if delete_again {
            self.writing.insert(name.to_string());
            out.push(Effect::Replace(write_for(
                node,
                ReplaceAction::DeleteOwner {
                    owner: node.replace.owner.clone(),
                    provider_id: node.replace.provider_id.as_deref().map(str::to_string),
                },
            )));
            return;
        }
        let rc = &cx.config.replace;
        // A full budget refuses before anything is judged: with thousands
        // of due nodes, judging each (its members; the gated nodes counted
        // again for their spread) would cost work per look for nothing.
        // The judgement comes at the first look with room, before any
        // request, so a broken member still means no replacement.
        if let Err(exhausted) = replacing::budget_allows(rc, self.used(cx)) {
            return self.refuse(node, exhausted, now, out);
        }
        // The DaemonSets in force, as the counts (made sure at the input's
        // start) hold them.
        let fresh;
        let daemonsets = match &self.counts {
            Some(counts) => counts.daemonsets(),
            None => {
                fresh = by_key(cx.view.daemonsets());
                &fresh
            }
        };
        let pods = cx.view.pods_on(name);
        let blocking = blocking(node, daemonsets, &pods, cx.config, now);
        self.refused.remove(name);
        for id in &blocking {
            let spread = self.spread(id, cx);
            if spread.broken(rc.breakage) {
                return self.fall_back(node, id, spread, rc, now, out);
            }
        }
        let waiting: Vec<String> = blocking.iter().map(ToString::to_string).collect();
        let owner = node.replace.owner.clone();
        let reason = replacing::reason(&owner, &waiting);
        self.writing.insert(name.to_string());
        self.requesting.insert(name.to_string());
        out.push(Effect::Replace(write_for(
            node,
            ReplaceAction::Request {
                owner,
                provider_id: node.replace.provider_id.as_deref().map(str::to_string),
                at: crate::gate::annotation_time(now),
                reason,
            },
        )));
    }

    /// How member `id` fares across the cluster ([`Spread`]), judged once
    /// per input, the nodes whose pods may have changed unheard counted
    /// again first.
    fn spread(&mut self, id: &MemberId, cx: &Context<'_>) -> Spread {
        if let Some(s) = self.spreads.get(id) {
            return *s;
        }
        let refresh = !self.refreshed;
        self.refreshed = true;
        let counts = self.counts(cx);
        if refresh {
            counts.refresh(cx);
        }
        let spread = counts.spread(id, cx);
        self.spreads.insert(id.clone(), spread);
        spread
    }

    /// The counts, built afresh unless they hold under the configuration
    /// and the DaemonSets in force.
    fn counts(&mut self, cx: &Context<'_>) -> &mut Counts {
        let daemonsets = by_key(cx.view.daemonsets());
        let counts = match self.counts.take() {
            Some(c) if c.holds(cx.config, &daemonsets) => c,
            before => Counts::build(daemonsets, cx, before),
        };
        self.counts.insert(counts)
    }

    /// Node `name` or its pods changed: counted again (the counts hold,
    /// made sure at the start of each input).
    fn recount(&mut self, name: &str, cx: &Context<'_>) {
        if let Some(counts) = self.counts.as_mut() {
            counts.recount(name, cx);
        }
    }

    fn fall_back(
        &mut self,
        node: &NodeInfo,
        member: &MemberId,
        spread: Spread,
        rc: &ReplaceConfig,
        now: Timestamp,
        out: &mut Vec<Effect>,
    ) {
        let why = if spread.due >= 2 {
            "shared by nodes past their deadline".to_string()
        } else {
            format!("more than --replace-breakage {}", rc.breakage)
        };
        let why = format!(
            "{member} is broken cluster-wide ({spread}, {why}); replacing nodes cannot fix it"
        );
        self.writing.insert(node.name.clone());
        let action = fallback_action(rc.fallback, &why, now);
        out.push(Effect::Replace(write_for(node, action)));
    }

    fn refuse(
        &mut self,
        node: &NodeInfo,
        exhausted: Exhausted,
        now: Timestamp,
        out: &mut Vec<Effect>,
    ) {
        let name = node.name.as_str();
        self.refused.insert(name.to_string());
        out.push(Effect::Count(Tally::ReplaceBudgetExhausted));
        let again = now.checked_add(BUDGET_RETRY).unwrap_or(now);
        out.push(Effect::LookAgainAt(again));
        tell_refusal(
            &mut self.budget_event,
            name,
            now,
            || {
                let note = format!("Not replaced yet although its deadline passed: {exhausted}");
                let reason = Reason::ReplaceBudgetExhausted;
                let event =
                    NodeEvent::new(name, &node.uid, EventType::Warning, reason, note.clone());
                (note, Some(event))
            },
            out,
        );
    }

    fn answered(
        &mut self,
        write: ReplaceWrite,
        outcome: Outcome,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let name = write.node.clone();
        self.writing.remove(&name);
        self.requesting.remove(&name);
        let now = cx.now.for_grace();
        match (write.action, outcome) {
            (
                ReplaceAction::Request { owner, at, .. },
                outcome @ (Outcome::Applied | Outcome::OwnerDeleted(_)),
            ) => {
                self.owner_backoff().applied(&name);
                self.requested(&name, at);
                self.owner_done.insert(name.clone());
                let what = match outcome {
                    Outcome::OwnerDeleted(obj) => format!("deleted its owner {obj}"),
                    _ => "no owner known: cordoned and marked nodegate.dev/replace-requested for the cluster-autoscaler or a person".to_string(),
                };
                out.push(replaced(&owner, "requested"));
                self.replaced_event(&write.uid, &name, &what, out);
            }
            (ReplaceAction::Request { owner, at, .. }, Outcome::OwnerFailed(e)) => {
                self.requested(&name, at);
                out.push(replaced(&owner, "owner_failed"));
                let what = format!("marked, but deleting its owner failed ({e}); trying again");
                self.replaced_event(&write.uid, &name, &what, out);
                let until = self.owner_backoff().refused(&name, now);
                out.push(Effect::LookAgainAt(until));
            }
            (ReplaceAction::Request { .. }, Outcome::NoOwner(why)) => {
                let why = format!("no owner could be proven to own the node ({why})");
                let action = fallback_action(cx.config.replace.fallback, &why, now);
                self.writing.insert(name);
                out.push(Effect::Replace(ReplaceWrite { action, ..write }));
            }
            (ReplaceAction::DeleteOwner { .. }, Outcome::Applied | Outcome::OwnerDeleted(_)) => {
                self.owner_backoff().applied(&name);
                self.owner_done.insert(name);
            }
            (ReplaceAction::DeleteOwner { .. }, Outcome::OwnerFailed(e)) => {
                let until = self.owner_backoff().refused(&name, now);
                let log = format!(
                    "cannot delete the owner of a node asked to be replaced: {e}; trying again at {until}"
                );
                out.push(Effect::log(Level::Warn, &name, log));
                out.push(Effect::LookAgainAt(until));
            }
            (
                ReplaceAction::Fallback { fallback, note, .. },
                Outcome::Applied | Outcome::OwnerDeleted(_),
            ) => {
                out.push(Effect::Count(Tally::ReplaceSkipped(fallback.as_str())));
                out.push(Effect::log(Level::Warn, &name, note.clone()));
                let reason = Reason::ReplaceSkipped;
                out.push(Effect::warning_of_own_write(
                    &name, &write.uid, reason, note,
                ));
            }
            // Looked at again when this replica leads (MayWrite), or gone.
            (_, Outcome::NotLeader | Outcome::Withdrawn | Outcome::NotFound) => {}
            (_, Outcome::Conflict) => out.push(Effect::LookAgainAt(retry_after(now))),
            (action, Outcome::Failed(e) | Outcome::Ambiguous(e)) => {
                let at = if let ReplaceAction::Request { owner, .. } = action {
                    out.push(replaced(&owner, "failed"));
                    // A request fails here also when its owner cannot be
                    // looked up (a LIST refused or failing): it backs off as
                    // a failed delete does.
                    self.owner_backoff().refused(&name, now)
                } else {
                    retry_after(now)
                };
                let log = format!("cannot write the replace mark: {e}; trying again at {at}");
                out.push(Effect::log(Level::Warn, &name, log));
                out.push(Effect::LookAgainAt(at));
            }
            // A fallback write never deletes an owner, and only a request
            // proves one first.
            (ReplaceAction::Fallback { .. }, Outcome::OwnerFailed(_))
            | (
                ReplaceAction::Fallback { .. } | ReplaceAction::DeleteOwner { .. },
                Outcome::NoOwner(_),
            ) => {}
        }
    }

    fn requested(&mut self, name: &str, at: Timestamp) {
        self.seen.insert(name.to_string(), at);
        self.pending.insert(name.to_string());
    }

    fn replaced_event(&self, uid: &str, name: &str, what: &str, out: &mut Vec<Effect>) {
        let note = format!("Deadline passed with --on-timeout=replace: {what}");
        out.push(Effect::log(Level::Info, name, note.clone()));
        out.push(Effect::warning_of_own_write(
            name,
            uid,
            Reason::GateReplaced,
            note,
        ));
    }
}

/// `fallback` instead of the replacement, for `why` (its Event's words).
fn fallback_action(fallback: Fallback, why: &str, now: Timestamp) -> ReplaceAction {
    let instead = match fallback {
        Fallback::Open => "opened as by --on-timeout=open",
        Fallback::Keep => "kept closed as by --on-timeout=keep",
    };
    let note = format!("Not replaced: {why}; {instead} (--replace-fallback={fallback})");
    let at = crate::gate::annotation_time(now);
    ReplaceAction::Fallback { fallback, at, note }
}

/// The count of a replace request's `outcome`.
fn replaced(owner: &Owner, outcome: &'static str) -> Effect {
    let owner = owner.kind();
    Effect::Count(Tally::Replaced { owner, outcome })
}

fn write_for(node: &NodeInfo, action: ReplaceAction) -> ReplaceWrite {
    ReplaceWrite {
        node: node.name.clone(),
        uid: node.uid.clone(),
        resource_version: node.resource_version.clone(),
        annotations_present: node.annotations_present,
        action,
    }
}

impl Decider for Replacer {
    fn origin(&self) -> Origin {
        Origin::Replace
    }

    /// Its in-flight budget counts replace marks from the index.
    fn budgeted(&self) -> bool {
        true
    }

    fn decide(&mut self, input: Input, cx: &Context<'_>) -> Vec<Effect> {
        let mut out = Vec::new();
        if cx.config.on_timeout != OnTimeout::Replace {
            // Still note requests, so that turning replace on later counts
            // them; and report the answers of writes out. What the budget
            // counts is built afresh when replace is on again.
            self.tracked_for = None;
            self.counts = None;
            if let Input::Replaced { write, outcome } = input {
                self.answered(write, outcome, cx, &mut out);
            }
            return out;
        }
        self.spreads.clear();
        self.refreshed = false;
        let every = matches!(input, Input::Changed(ref c) if c.reaches_every_node());
        if every {
            // A DaemonSet, the configuration or the initial lists: counted
            // afresh (the nodes a gate may still hold carried over).
            if let Some(before) = self.counts.take() {
                let daemonsets = by_key(cx.view.daemonsets());
                self.counts = Some(Counts::build(daemonsets, cx, Some(before)));
            }
        }
        self.counts(cx);
        let full_look = every || matches!(input, Input::Tick | Input::MayWrite);
        if !full_look && self.tracked_for.as_ref() != Some(cx.config) {
            // The first input, or the first under another configuration:
            // what the budget counts comes from the whole index once.
            self.rebuild(&cx.view.nodes(), cx.config);
        }
        match input {
            Input::Changed(Change::Node { after: Some(n), .. }) => {
                self.recount(&n.name, cx);
                self.note(&n);
                self.track(&n, cx.config);
                self.look(&n, cx, &mut out);
            }
            Input::Changed(Change::Node {
                name, after: None, ..
            }) => {
                self.recount(&name, cx);
                self.marks.remove(&name);
                self.in_flight.remove(&name);
                self.owner_backoff().applied(&name);
                self.pending.remove(&name);
                self.owner_done.remove(&name);
                self.budget_event.remove(&name);
                if !self.refused.is_empty() {
                    out.push(Effect::LookAgainAt(cx.now.local));
                }
                self.refused.remove(&name);
            }
            Input::Changed(Change::Everything | Change::DaemonSet { .. })
            | Input::Tick
            | Input::MayWrite => self.scan(cx, &mut out),
            Input::Changed(Change::Pods { node }) => self.recount(&node, cx),
            Input::Changed(Change::GateStopped { node }) => {
                if let Some(counts) = self.counts.as_mut() {
                    counts.gate_stopped(&node, cx);
                }
            }
            Input::Replaced { write, outcome } => self.answered(write, outcome, cx, &mut out),
            Input::Wrote { .. }
            | Input::PodsListed { .. }
            | Input::NodeRead { .. }
            | Input::CanaryCreated { .. }
            | Input::CanaryDeleted { .. }
            | Input::CanariesListed(_) => {}
        }
        out
    }
}
