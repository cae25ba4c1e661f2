//! Condition-rule taints (`conditionTaints`, semantics.md §6.5) as a
//! decider.
//!
//! A write the budget holds back is logged and counted once, and tried
//! again when room may have appeared (a count went down, a node left or
//! entered the scope) and at least every
//! [`RETRY`](crate::deciders::RETRY) while it is held. Each rule's own
//! `maxUnavailable` is counted here; `--max-unavailable` is the [`Ledger`]'s.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use super::{RuleAction, RuleVerdict};
use crate::closing::ledger::{Claims, Ledger, Room};
use crate::deciders::{
    Change, Context, Effect, Input, Level, Now, Origin, TaintChange, TaintWrite, Tally, add_taint,
    retry_after, write_on,
};
use crate::gate::{EventType, NodeEvent, PatchOutcome, Reason};
use crate::rules::conditions::taints::{self, ConditionTaintRule};
use crate::vocab::annotations;
use crate::vocab::model::NodeInfo;

/// (rule name, node name).
type Key = (String, String);

/// What one node counted for one rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Seen {
    tainted: bool,
    matching: bool,
}

/// One rule's counts over the managed nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts {
    tainted: usize,
    matching: usize,
}

/// A write whose result the index does not show yet: it holds while the
/// index shows the node at `version`, the resourceVersion the write tested.
/// An add counts as done from when it goes out, a removal once applied.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Unseen {
    version: String,
    expect: Expect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// An add went out or was applied: the taint counts as on.
    On,
    /// A removal was applied: the taint counts as off.
    Off,
    /// The write was refused (the node changed or is gone): the node is
    /// decided again only on the index's next view of it.
    Refused,
}

/// Why a due write is held back; each is logged once until the write is no
/// longer due, or held back for another reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Budget,
    DryRun(RuleAction),
    /// `suspend: true` in the configuration, or the node's
    /// `nodegate.dev/suspend` annotation: nothing is written.
    Suspended(RuleAction),
    /// The API server refused the rule's last write: the rule waits
    /// ([`REFUSED`]).
    Refused,
}

/// The wait of a rule the API server refuses (a policy that forbids its
/// taint key: 403; an invalid taint: 422). Such a write fails the same way
/// on every node and every second: retried at the usual pace it would spend
/// the shared request rate on nothing. After the wait one write of the rule
/// goes out alone, and only its success lets the others follow ([`Backoffs`]).
pub const REFUSED: Backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(300));

/// A node as one look counted it: the node (when it is managed) with its
/// verdict for each rule in force, in the rules' order.
type Judged = (Arc<NodeInfo>, Vec<RuleVerdict>);

/// The condition-rule tainter's memory.
#[derive(Debug, Default)]
pub struct RuleTainter {
    /// The first [`Change::Everything`] came: the index is complete (a
    /// budget counted on half a list would be wrong).
    synced: bool,
    /// The rules' names at the last recount, in their order (the gauges').
    rules: Vec<String>,
    /// Every managed node (inside the scope), with what it counts per rule.
    seen: HashMap<String, HashMap<String, Seen>>,
    counts: HashMap<String, Counts>,
    unseen: HashMap<Key, Unseen>,
    /// Writes out, with the verdict's words for the log and the Event.
    in_flight: HashMap<Key, String>,
    held: HashMap<Key, Hold>,
    /// Node → the earliest time to look at it again (a `for` running out, a
    /// held or failed write to try again), on the window clock.
    look_at: HashMap<String, Timestamp>,
    /// Nodes with a write due that could not go out (this replica may not
    /// write): looked at again on [`Input::MayWrite`].
    deferred: BTreeSet<String>,
    /// The earliest [`Effect::LookAgainAt`] asked for and not yet delivered.
    asked: Option<Timestamp>,
    /// The rules the API server refused, and how long they wait.
    backoffs: Option<Backoffs>,
}

impl RuleTainter {
    /// The rules' [`Backoffs`], by [`REFUSED`].
    fn backoffs(&mut self) -> &mut Backoffs {
        self.backoffs.get_or_insert_with(|| Backoffs::new(REFUSED))
    }

    /// How many managed nodes match each rule now, by rule name in the
    /// rules' order (the `nodegate_condition_taint_matching` gauge).
    pub fn matching(&self) -> Vec<(String, usize)> {
        self.gauge(|c| c.matching)
    }

    /// How many managed nodes carry each rule's taint now (or will, by a
    /// write of ours the index does not show yet), by rule name.
    pub fn tainted(&self) -> Vec<(String, usize)> {
        self.gauge(|c| c.tainted)
    }

    /// How many nodes are inside the scope (`--node-selector`).
    pub fn managed(&self) -> usize {
        self.seen.len()
    }

    fn gauge(&self, pick: impl Fn(&Counts) -> usize) -> Vec<(String, usize)> {
        self.rules
            .iter()
            .map(|r| (r.clone(), self.counts.get(r).map_or(0, &pick)))
            .collect()
    }

    /// Replaces what `node` counted for `rule` by `now`; true when its
    /// taint no longer counts (budget room may have appeared).
    fn set(&mut self, node: &str, rule: &str, now: Seen) -> bool {
        let before = self
            .seen
            .entry(node.to_string())
            .or_default()
            .insert(rule.to_string(), now)
            .unwrap_or_default();
        let c = self.counts.entry(rule.to_string()).or_default();
        c.tainted = shift(c.tainted, before.tainted, now.tainted);
        c.matching = shift(c.matching, before.matching, now.matching);
        before.tainted && !now.tainted
    }

    /// Drops a node that left the scope or the index from the counts and
    /// from every plan; true when it was counted.
    fn forget(&mut self, name: &str, gone: bool) -> bool {
        let counted = self.seen.remove(name);
        for (rule, s) in counted.iter().flatten() {
            if let Some(c) = self.counts.get_mut(rule) {
                c.tainted = shift(c.tainted, s.tainted, false);
                c.matching = shift(c.matching, s.matching, false);
            }
        }
        self.held.retain(|(_, n), _| n != name);
        self.look_at.remove(name);
        self.deferred.remove(name);
        if gone {
            self.unseen.retain(|(_, n), _| n != name);
        }
        counted.is_some()
    }

    /// Counts `name` as the index shows it now. Returns the node with its
    /// verdicts when it is managed, and whether budget room may have
    /// appeared (a taint stopped counting, the managed count changed).
    fn count(&mut self, name: &str, cx: &Context<'_>) -> (Option<Judged>, bool) {
        let indexed = cx.view.node(name);
        let Some(node) = indexed
            .clone()
            .filter(|n| cx.config.scope.includes(&n.labels))
        else {
            return (None, self.forget(name, indexed.is_none()));
        };
        let version = node.resource_version.as_str();
        self.unseen
            .retain(|(_, n), u| n != name || u.version == version);
        self.look_at.remove(name);
        self.deferred.remove(name);
        let mut freed = !self.seen.contains_key(name);
        let now = cx.now.for_window();
        let mut verdicts = Vec::with_capacity(cx.config.condition_taints.len());
        for rule in &cx.config.condition_taints {
            let verdict = super::evaluate(rule, &node, now);
            let key = (rule.name.clone(), name.to_string());
            let tainted = match self.unseen.get(&key).map(|u| u.expect) {
                Some(Expect::On) => true,
                Some(Expect::Off) => false,
                Some(Expect::Refused) | None => super::carries(&node, rule),
            };
            let seen = Seen {
                tainted,
                matching: verdict.matches,
            };
            freed |= self.set(name, &rule.name, seen);
            if let Some(at) = verdict.recheck_at {
                self.schedule(name, at);
            }
            verdicts.push(verdict);
        }
        (Some((node, verdicts)), freed)
    }

    fn schedule(&mut self, name: &str, at: Timestamp) {
        let entry = self.look_at.entry(name.to_string()).or_insert(at);
        *entry = (*entry).min(at);
    }

    /// Counts `names` (in this order) as the index shows them now and, with
    /// `act`, decides each. When budget room may have appeared, the nodes
    /// held back by the budget are counted and decided again as well.
    fn look(
        &mut self,
        names: &[String],
        act: bool,
        cx: &Context<'_>,
        ledger: &Ledger,
        out: &mut Vec<Effect>,
    ) {
        let mut judged = Vec::new();
        // A node no longer closed by nodegate frees a place of
        // `--max-unavailable`.
        let mut freed = ledger.freed() > 0;
        for name in names {
            let (node, f) = self.count(name, cx);
            freed |= f;
            if act {
                judged.extend(node);
            }
        }
        if freed {
            let held: BTreeSet<String> = self
                .held
                .iter()
                .filter(|(_, h)| **h == Hold::Budget)
                .map(|((_, n), _)| n.clone())
                .filter(|n| !act || !names.contains(n))
                .collect();
            for name in held {
                judged.extend(self.count(&name, cx).0);
            }
        }
        for (node, verdicts) in judged {
            self.act(&node, &verdicts, cx, ledger, out);
        }
    }

    /// Decides `node` against every rule, as counted a moment ago.
    fn act(
        &mut self,
        node: &Arc<NodeInfo>,
        verdicts: &[RuleVerdict],
        cx: &Context<'_>,
        ledger: &Ledger,
        out: &mut Vec<Effect>,
    ) {
        let dry_run = cx.config.dry_run;
        for (rule, verdict) in cx.config.condition_taints.iter().zip(verdicts) {
            let key = (rule.name.clone(), node.name.clone());
            // Not with a write out, or one the index does not show yet
            // (what `count` left of `unseen` is about this very version).
            let idle = !self.in_flight.contains_key(&key) && !self.unseen.contains_key(&key);
            let tainted = self.counts.get(&rule.name).map_or(0, |c| c.tainted);
            let decided =
                idle.then(|| super::decide(rule, node, verdict, tainted, self.seen.len()));
            let Some(mut action) = decided.flatten() else {
                self.held.remove(&key);
                continue;
            };
            let room = (action == RuleAction::Add && cx.config.max_unavailable.is_some())
                .then(|| ledger.room(cx.config, Origin::Rules, &self.claims(), Some(&node.name)));
            let total = match room {
                Some(Room::Held(exhausted) | Room::Refused(exhausted)) => Some(exhausted),
                _ => None,
            };
            if total.is_some() {
                action = RuleAction::BudgetBlocked;
            }
            if !dry_run && !cx.may_write {
                self.deferred.insert(node.name.clone());
                continue;
            }
            match action {
                RuleAction::BudgetBlocked => {
                    self.schedule(&node.name, retry_after(cx.now.for_window()));
                    if self.hold(key, Hold::Budget) {
                        let why = total.map_or_else(
                            || "the rule's maxUnavailable is used up".to_string(),
                            |e| e.to_string(),
                        );
                        let what = format!("condition taint held back: {why}");
                        out.push(info(&node.name, &what, rule, None));
                        out.push(Effect::Count(Tally::RuleBudgetBlocked(rule.name.clone())));
                    }
                }
                RuleAction::Add | RuleAction::Remove
                    if cx.config.suspend || node.suspended || dry_run =>
                {
                    let (hold, mode) = if cx.config.suspend || node.suspended {
                        (Hold::Suspended(action), "suspended")
                    } else {
                        (Hold::DryRun(action), "dry run")
                    };
                    if self.hold(key, hold) {
                        let what = match action {
                            RuleAction::Add => "would put the condition taint on",
                            _ => "would take the condition taint off",
                        };
                        let what = format!("{mode}: {what}");
                        out.push(info(&node.name, &what, rule, Some(&verdict.why)));
                    }
                }
                RuleAction::Add | RuleAction::Remove => {
                    if !self.refused(&key, cx, out)
                        && let Some(change) = change(action, rule, node, cx.now)
                    {
                        out.push(self.send(key, node, &verdict.why, change));
                    }
                }
            }
        }
    }

    /// True the first time a write for `key` is held back for `why`, until
    /// it is no longer due.
    fn hold(&mut self, key: Key, why: Hold) -> bool {
        self.held.insert(key, why) != Some(why)
    }

    /// Sends `change` for `rule` on `node`. An add counts as done at once
    /// (the budget must not let a second one out meanwhile).
    fn send(&mut self, key: Key, node: &NodeInfo, why: &str, change: TaintChange) -> Effect {
        self.held.remove(&key);
        self.in_flight.insert(key.clone(), why.to_string());
        if matches!(change, TaintChange::Add { .. }) {
            let version = &node.resource_version;
            self.unseen.insert(key.clone(), unseen(version, Expect::On));
            let counted = self.seen.get(&node.name).and_then(|s| s.get(&key.0));
            let matching = counted.is_some_and(|s| s.matching);
            let seen = Seen {
                tainted: true,
                matching,
            };
            self.set(&node.name, &key.0, seen);
        }
        Effect::Write(TaintWrite {
            tag: Some(key.0),
            ..write_on(Origin::Rules, node, change)
        })
    }

    fn wrote(
        &mut self,
        write: &TaintWrite,
        outcome: PatchOutcome,
        cx: &Context<'_>,
        ledger: &Ledger,
    ) -> Vec<Effect> {
        let Some(rule) = write.tag.clone() else {
            return Vec::new();
        };
        let adding = matches!(write.change, TaintChange::Add { .. });
        let what = if adding { "put on" } else { "take off" };
        let name = write.node.clone();
        let key = (rule.clone(), name.clone());
        let why = self.in_flight.remove(&key).unwrap_or_default();
        let mut out = Vec::new();
        // Whether to decide the node again now, to leave it for the
        // lease's return, or to try again after a while.
        let (mut act, mut defer, mut retry) = (false, false, None);
        let now = cx.now.for_window();
        let version = write.resource_version.as_str();
        use crate::vocab::write::Outcome::*;
        match outcome {
            Applied => {
                self.backoffs().applied(&rule);
                if !adding {
                    self.unseen.insert(key, unseen(version, Expect::Off));
                }
                out.extend(applied(write, &rule, &why, cx));
                act = true;
            }
            Conflict => {
                self.unseen.insert(key, unseen(version, Expect::Refused));
                let log =
                    format!("condition taint: the node changed; deciding again (rule {rule})");
                out.push(Effect::log(Level::Debug, &name, log));
                act = true;
            }
            NotFound => {
                self.unseen.insert(key, unseen(version, Expect::Refused));
            }
            NotLeader | Withdrawn => {
                self.unseen.remove(&key);
                defer = true;
            }
            Failed(e) => {
                // Refused (a policy, an invalid taint) or never sent: the
                // same write would fail again at once.
                self.unseen.remove(&key);
                let until = self.backoffs().refused(&rule, now);
                let log = format!(
                    "condition taint: could not {what} the taint; rule {rule}'s writes wait until {until}: {e}"
                );
                out.push(Effect::log(Level::Warn, &name, log));
                retry = Some(until);
            }
            // A replace write's own answers: no taint write gets one.
            Ambiguous(e) | OwnerDeleted(e) | OwnerFailed(e) | NoOwner(e) => {
                self.unseen.remove(&key);
                let log = format!(
                    "condition taint: could not {what} the taint; trying again (rule {rule}): {e}"
                );
                out.push(Effect::log(Level::Warn, &name, log));
                retry = Some(retry_after(now));
            }
        }
        if !self.synced || cx.config.condition_taints.is_empty() {
            return out;
        }
        // Our write's expectation changed: count the node again (a taint
        // that stopped counting makes room for held nodes) and, where the
        // answer says so, decide it again on the index's view.
        self.look(std::slice::from_ref(&name), act, cx, ledger, &mut out);
        if defer {
            self.deferred.insert(name.clone());
        }
        if let Some(at) = retry
            && self.seen.contains_key(&name)
        {
            self.schedule(&name, at);
        }
        out
    }

    /// Every node the index holds, counted afresh and decided: the rules
    /// or the scope may have changed.
    fn everything(&mut self, cx: &Context<'_>, ledger: &Ledger) -> Vec<Effect> {
        let rules = &cx.config.condition_taints;
        self.rules = rules.iter().map(|r| r.name.clone()).collect();
        self.seen.clear();
        self.counts.clear();
        self.look_at.clear();
        self.deferred.clear();
        let known = |r: &str| rules.iter().any(|rule| rule.name == r);
        self.held.retain(|(r, _), _| known(r));
        self.unseen.retain(|(r, _), _| known(r));
        self.backoffs().retain(known);
        if rules.is_empty() {
            return Vec::new();
        }
        let mut names: Vec<String> = cx.view.nodes().iter().map(|n| n.name.clone()).collect();
        names.sort_unstable();
        self.looked(&names, cx, ledger)
    }

    /// The nodes whose time to look again has come, with `also`, in order.
    fn due(&self, cx: &Context<'_>, mut also: BTreeSet<String>) -> Vec<String> {
        let now = cx.now.for_window();
        let due = self.look_at.iter().filter(|(_, at)| **at <= now);
        also.extend(due.map(|(n, _)| n.clone()));
        also.into_iter().collect()
    }

    fn looked(&mut self, names: &[String], cx: &Context<'_>, ledger: &Ledger) -> Vec<Effect> {
        let mut out = Vec::new();
        self.look(names, true, cx, ledger, &mut out);
        out
    }

    /// Asks to be woken for the earliest look planned, unless an earlier
    /// one is asked for already.
    fn ask(&mut self, now: Now, out: &mut Vec<Effect>) {
        let Some(first) = self.look_at.values().min().copied() else {
            return;
        };
        if self.asked.is_some_and(|a| a <= first) {
            return;
        }
        self.asked = Some(first);
        out.push(Effect::LookAgainAt(now.to_local(now.for_window(), first)));
    }

    /// One input, with `ledger` for `--max-unavailable`.
    pub(crate) fn decide(
        &mut self,
        input: Input,
        cx: &Context<'_>,
        ledger: &Ledger,
    ) -> Vec<Effect> {
        let mut out = match input {
            // Only the initial lists being in (or a new configuration) makes
            // the rules' view complete; nothing is decided before it.
            Input::Changed(Change::Everything) => {
                self.synced = true;
                self.everything(cx, ledger)
            }
            Input::Wrote { write, outcome } => self.wrote(&write, outcome, cx, ledger),
            _ if !self.synced || cx.config.condition_taints.is_empty() => return Vec::new(),
            Input::Changed(Change::DaemonSet { .. }) => self.everything(cx, ledger),
            Input::Changed(Change::Node { name, .. }) => self.looked(&[name], cx, ledger),
            Input::Tick => {
                self.asked = None;
                self.looked(&self.due(cx, BTreeSet::new()), cx, ledger)
            }
            Input::MayWrite => {
                let deferred = std::mem::take(&mut self.deferred);
                self.looked(&self.due(cx, deferred), cx, ledger)
            }
            // Named one by one, so that a new input is a compile error here.
            Input::Changed(Change::Pods { .. } | Change::GateStopped { .. })
            | Input::PodsListed { .. }
            | Input::NodeRead { .. }
            | Input::Replaced { .. }
            | Input::CanaryCreated { .. }
            | Input::CanaryDeleted { .. }
            | Input::CanariesListed(_) => return Vec::new(),
        };
        self.ask(cx.now, &mut out);
        out
    }

    /// Whether the write due for `key` waits because the API server refused
    /// its rule: then the node is looked at again when it may go, and the
    /// wait is logged once.
    fn refused(&mut self, key: &Key, cx: &Context<'_>, out: &mut Vec<Effect>) -> bool {
        let now = cx.now.for_window();
        let (rule, node) = key;
        let sent = self.in_flight.keys().filter(|(r, _)| r == rule).count();
        let at = match self.backoffs().may(rule, now, sent) {
            May::Write => return false,
            May::WaitUntil(until) => until,
            May::WaitForProbe => retry_after(now),
        };
        self.schedule(node, at);
        if self.hold(key.clone(), Hold::Refused) {
            let log = format!(
                "condition taint held back: the API server refused rule {rule}'s last write; \
                 its writes wait until {at}"
            );
            out.push(Effect::log(Level::Info, node, log));
        }
        true
    }

    /// For the ledger: its adds the index does not show yet.
    pub(crate) fn claims(&self) -> Claims {
        let adds = self.unseen.iter().filter(|(_, u)| u.expect == Expect::On);
        Claims {
            sure: adds.map(|((_, n), _)| n.clone()).collect(),
            maybe: Default::default(),
        }
    }
}

/// The write `action` needs on `node`: the rule's taint put on after the
/// others, or the node's taint that is the rule's taken off.
fn change(
    action: RuleAction,
    rule: &ConditionTaintRule,
    node: &NodeInfo,
    now: Now,
) -> Option<TaintChange> {
    let others = || {
        let list = node.rule_taints.as_deref().unwrap_or_default();
        list.split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != rule.name)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    if action == RuleAction::Add {
        // The taint and the record that nodegate put it on, in one patch.
        let mut owners = others();
        owners.push(rule.name.clone());
        owners.sort_unstable();
        let annotations = vec![(annotations::CONDITION_TAINTS, owners.join(","))];
        let change = add_taint(node, rule.taint.clone(), annotations, now.for_window());
        return Some(change);
    }
    let index = node
        .taints
        .iter()
        .position(|t| taints::same_taint(t, &rule.taint))?;
    let taint = node.taints.get(index)?.clone();
    let owners = others();
    let record = (!owners.is_empty()).then(|| owners.join(","));
    Some(TaintChange::Remove {
        index,
        taint,
        annotations: vec![(annotations::CONDITION_TAINTS, record)],
    })
}

fn info(node: &str, what: &str, rule: &ConditionTaintRule, why: Option<&str>) -> Effect {
    let why = why.map(|why| format!(": {why}")).unwrap_or_default();
    let message = format!("{what} (rule {}, taint {}){why}", rule.name, rule.taint);
    Effect::log(Level::Info, node, message)
}

/// The count, the log line and the Event of an applied write.
fn applied(write: &TaintWrite, rule: &str, why: &str, cx: &Context<'_>) -> Vec<Effect> {
    let (tally, what, reason, note) = match &write.change {
        // The rules write no annotation on its own.
        TaintChange::Annotate { .. } => return Vec::new(),
        TaintChange::Add { taint, .. } => (
            Tally::RuleAdded(rule.to_string()),
            format!("condition taint put on (rule {rule}, taint {taint})"),
            Reason::ConditionTaintAdded,
            format!("Rule {rule} matches ({why}): nodegate put {taint} on the node"),
        ),
        TaintChange::Remove { taint, .. } => {
            // The rule's taint as configured, as the log and Event name it.
            let rules = &cx.config.condition_taints;
            let taint = rules
                .iter()
                .find(|r| r.name == rule)
                .map_or(taint, |r| &r.taint);
            (
                Tally::RuleRemoved(rule.to_string()),
                format!("condition taint taken off (rule {rule}, taint {taint})"),
                Reason::ConditionTaintRemoved,
                format!(
                    "Rule {rule} no longer matches ({why}): nodegate took {taint} off the node"
                ),
            )
        }
    };
    let event = NodeEvent::new(&write.node, &write.uid, EventType::Normal, reason, note);
    let event = event.of_own_write();
    vec![
        Effect::Count(tally),
        Effect::log(Level::Info, &write.node, format!("{what}: {why}")),
        Effect::RecordEvent(event),
    ]
}

/// `count` moved by one node's contribution going from `before` to `now`.
fn shift(count: usize, before: bool, now: bool) -> usize {
    (count + usize::from(now)).saturating_sub(usize::from(before))
}

fn unseen(version: &str, expect: Expect) -> Unseen {
    Unseen {
        version: version.to_string(),
        expect,
    }
}

use crate::vocab::backoff::{Backoff, Backoffs, May};

#[cfg(test)]
mod tests;
