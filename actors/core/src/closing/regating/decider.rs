//! Re-gating (`--regate-after`, semantics.md §6.4) as a decider: open nodes
//! are watched without a gate each, keeping only what the index does not
//! hold ([`Watched`]). A due node is read afresh and, if still open and
//! nodegate's, gets the re-gate taint in one conditional write. The budget
//! is counted from the index (through the [`Ledger`]) plus this replica's
//! re-gates it does not show yet, so it holds across restarts and leader
//! changes.
//!
//! Every time here is [`Now::for_grace`]: never ahead of the API server's
//! clock, so a controller clock running ahead does not shorten the grace
//! (semantics.md §5.3).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;

use crate::closing::ledger::{Claims, Counts, Ledger, Room};
use crate::closing::regating::health::examine;
use crate::closing::regating::reboot::{self, Announcement, boot_of};
use crate::closing::regating::{self, Exhausted, Health, Trigger, Watched};
use crate::deciders::{
    BUDGET_RETRY, Change, Context, Effect, Input, Level, Now, Origin, TaintChange, TaintWrite,
    Tally, add_taint, retry_after, tell_refusal, write_on,
};
use crate::gate::{EventType, NodeEvent, PatchOutcome, Reason, annotation_time};
use crate::net::entrance;
use crate::vocab::annotations;
use crate::vocab::config::{Config, RegateConfig};
use crate::vocab::model::{DaemonSetInfo, NodeInfo};

/// What re-gating does about announcements for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeforeReboot {
    /// Put the re-gate taint on now, recording the boot id.
    Regate(Announcement),
    /// Remove `nodegate.dev/awaiting-reboot`: no announcement stands, and
    /// the node is open (the record is done with) or still in the boot it
    /// was re-gated in (the announcement was withdrawn: its gate opens by
    /// readiness).
    Forget,
    Nothing,
}

/// The decision for one node: `announced` is [`reboot::announced`]'s answer.
///
/// An open node is re-gated for an announcement only if it carries no
/// record of one: a record means nodegate acted on an announcement already
/// and the node was opened since by its deadline or by hand, or rebooted
/// and opened while the announcement still showed (kured releases its lock
/// only after the node is back). Such a record is removed once no
/// announcement stands, so the next one counts. A gated node that rebooted
/// keeps its record until it opens: its gate needs it.
pub fn before_reboot(
    node: &NodeInfo,
    cfg: &Config,
    announced: Option<Announcement>,
) -> BeforeReboot {
    if cfg.regate.is_none() || !cfg.scope.includes(&node.labels) || node.ignored {
        return BeforeReboot::Nothing;
    }
    let open = !node.taints.iter().any(|t| cfg.placement.is_managed(t));
    match (announced, node.awaiting_reboot.as_deref()) {
        (Some(a), None) if open => BeforeReboot::Regate(a),
        (None, Some(awaited)) if open || boot_of(node) == awaited => BeforeReboot::Forget,
        _ => BeforeReboot::Nothing,
    }
}

/// Re-gating's gauges, for the shell to publish.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegateGauges {
    /// Managed nodes carrying the re-gate taint, with this replica's
    /// re-gates the index does not show yet.
    pub regated: usize,
    /// How many the budget allows at once.
    pub budget_allowed: usize,
    /// Open nodes to be looked at again at a set time: a member broken but
    /// still inside the grace, or due but put off (budget, leadership,
    /// suspension, a failed request).
    pub broken: usize,
    /// Managed nodes whose writes are suspended (annotation or config).
    pub suspended: usize,
}

/// A due node whose fresh read or write is out: why, and when it was found
/// due (the Event's words and `gated-since` are of that moment).
#[derive(Debug, Clone)]
struct Due {
    trigger: Trigger,
    at: Timestamp,
}

/// Re-gating's memory.
#[derive(Debug, Default)]
pub struct Regater {
    /// What the index does not hold, per open node that has any.
    watched: HashMap<String, Watched>,
    /// When to look again at a node: a broken member's grace ends then, or
    /// it is due but could not be re-gated yet.
    look_at: HashMap<String, Timestamp>,
    /// When the last `RegateBudgetExhausted` Event went out, per node.
    budget_event: HashMap<String, Timestamp>,
    /// Nodes re-gated by this replica, with the resourceVersions from before
    /// the write: the one the write replaced (the fresh read's) and the one
    /// the index showed when the answer came, which may be older still.
    /// While the index shows a version from before the write (see
    /// [`before_write`]), the node counts in the budget and is not looked
    /// at.
    pending: HashMap<String, [String; 2]>,
    /// Dry run: nodes already logged as "would re-gate".
    dry_logged: HashSet<String>,
    /// Due nodes whose fresh read is out.
    reading: HashMap<String, Due>,
    /// Due nodes whose write is out.
    writing: HashMap<String, Due>,
    /// Due nodes waiting for this replica to lead.
    follower: HashSet<String>,
    /// Due nodes the budget holds only for the reads and writes out.
    held: HashSet<String>,
    /// Due nodes the budget refused: looked at again after
    /// [`BUDGET_RETRY`], or when a place frees up.
    refused: BTreeSet<String>,
    /// The look-again time last asked for (by the grace's clock).
    asked: Option<Timestamp>,
    /// Removals of `nodegate.dev/awaiting-reboot` out (semantics.md §6.10),
    /// and those applied whose node the index shows at the version from
    /// before the write: by node, the resourceVersion the write tested.
    forgetting: HashMap<String, String>,
    /// Removals of `nodegate.dev/awaiting-reboot` waiting for this replica
    /// to lead.
    forget_later: HashSet<String>,
    /// The last unreadable kured lock warned about.
    lock_warned: Option<String>,
}

impl Regater {
    /// What is remembered of `name` now, for explain and the debug views.
    pub fn watched(&self, name: &str) -> Option<&Watched> {
        self.watched.get(name)
    }

    /// Re-gating is off: nothing is remembered but the writes out, whose
    /// answers are still reported (the ledger counts on: the `suspended`
    /// gauge counts all the same).
    fn reset(&mut self) {
        *self = Regater {
            writing: std::mem::take(&mut self.writing),
            ..Regater::default()
        };
    }

    fn forget(&mut self, name: &str) {
        self.watched.remove(name);
        self.look_at.remove(name);
        self.budget_event.remove(name);
        self.pending.remove(name);
        self.dry_logged.remove(name);
        self.reading.remove(name);
        self.unhold(name);
        self.forgetting.remove(name);
        self.forget_later.remove(name);
    }

    /// `name` no longer waits for the lease or the budget.
    fn unhold(&mut self, name: &str) {
        self.follower.remove(name);
        self.held.remove(name);
        self.refused.remove(name);
    }

    fn looks<S: AsRef<str>>(
        &mut self,
        names: impl IntoIterator<Item = S>,
        cx: &Context<'_>,
        ledger: &Ledger,
        out: &mut Vec<Effect>,
    ) {
        let mut names = names.into_iter().peekable();
        if names.peek().is_none() {
            return;
        }
        let daemonsets = cx.view.daemonsets();
        for name in names {
            let name = name.as_ref();
            if let Some(trigger) = self.look(name, &daemonsets, cx, out) {
                self.act(name, trigger, cx, ledger, out);
            }
        }
    }

    /// The core's verdict for one node, with the memory kept up to date;
    /// `Some` when the node is due for a re-gate.
    fn look(
        &mut self,
        name: &str,
        daemonsets: &[Arc<DaemonSetInfo>],
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) -> Option<Trigger> {
        let Some(node) = cx.view.node(name) else {
            self.forget(name);
            return None;
        };
        // The index does not show our write yet: wait for it. (Once it moved
        // on, the feed's change of the node, in order with the counts, ends
        // the pending write: see `changed`.)
        let version = &node.resource_version;
        if self
            .pending
            .get(name)
            .is_some_and(|b| before_write(b, version))
        {
            return None;
        }
        let now = cx.now.for_grace();
        let health = match self.announcement(&node, daemonsets, cx, out) {
            Some(trigger) => Health::Regate(trigger),
            None => {
                let mut memory = self.watched.remove(name).unwrap_or_default();
                let pods = cx.view.pods_on(name);
                let health = examine(&node, daemonsets, &pods, cx.config, &mut memory, now);
                if !memory.is_empty() {
                    self.watched.insert(name.to_string(), memory);
                }
                health
            }
        };
        if !matches!(health, Health::Regate(_)) || cx.config.suspend || node.suspended {
            // Not due (or not to be acted on): a read out is not written on.
            self.reading.remove(name);
            self.unhold(name);
        }
        match health {
            Health::Regate(_) if cx.config.suspend || node.suspended => {
                let log = "re-gating suspended: would re-gate";
                out.push(Effect::log(Level::Debug, name, log));
                self.look_at.insert(name.to_string(), retry_after(now));
                None
            }
            Health::Regate(trigger) => Some(trigger),
            Health::Broken { regate_at, members } => {
                // Said when the time to look again is new, not at every
                // look (every heartbeat of the node would say it again).
                if self.look_at.get(name) != Some(&regate_at) {
                    let members = regating::describe(&members, now);
                    let log = format!(
                        "member broken; re-gating at {regate_at} if still broken: {members}"
                    );
                    out.push(Effect::log(Level::Debug, name, log));
                    self.look_at.insert(name.to_string(), regate_at);
                }
                None
            }
            Health::Healthy | Health::NotWatched(_) => {
                self.look_at.remove(name);
                self.budget_event.remove(name);
                self.dry_logged.remove(name);
                None
            }
        }
    }

    /// A due node: read it afresh if nothing holds it back.
    fn act(
        &mut self,
        name: &str,
        trigger: Trigger,
        cx: &Context<'_>,
        ledger: &Ledger,
        out: &mut Vec<Effect>,
    ) {
        let now = cx.now.for_grace();
        if let Some(due) = self.reading.get_mut(name) {
            *due = Due { trigger, at: now };
            self.look_at.remove(name);
            return;
        }
        if self.writing.contains_key(name) {
            self.look_at.remove(name);
            return;
        }
        let Some(rc) = cx.config.regate.as_ref() else {
            return;
        };
        if cx.config.dry_run {
            // Time does not make a due node less due: the next change of
            // the node or its pods is looked at all the same.
            self.look_at.remove(name);
            if self.dry_logged.insert(name.to_string()) {
                let log = format!("dry run: would re-gate: {}", words(&trigger, now));
                out.push(Effect::log(Level::Info, name, log));
            }
            return;
        }
        if !cx.may_write {
            self.look_at.insert(name.to_string(), retry_after(now));
            self.follower.insert(name.to_string());
            return;
        }
        // An announcement that bounds its own disruption (kured's lock) goes
        // around `--regate-max-unavailable` (semantics.md §6.10), never around
        // `--max-unavailable`, the cap on every node nodegate keeps closed.
        let room = if trigger.bypasses_budget() {
            ledger.room(cx.config, Origin::Regate, &self.claims(), None)
        } else {
            self.budget(rc, cx, ledger)
        };
        match room {
            Room::Allows => {}
            Room::Held(_) => {
                self.look_at.insert(name.to_string(), retry_after(now));
                self.held.insert(name.to_string());
                return;
            }
            Room::Refused(exhausted) => return self.refused(name, &trigger, exhausted, cx, out),
        }
        self.look_at.remove(name);
        self.unhold(name);
        let node = name.to_string();
        self.reading.insert(node.clone(), Due { trigger, at: now });
        out.push(Effect::ReadNode { node });
    }

    /// The fresh read's answer: the write, if the node is still open and
    /// nodegate's.
    fn read(
        &mut self,
        name: &str,
        read: Result<Option<Box<NodeInfo>>, String>,
        cx: &Context<'_>,
    ) -> Vec<Effect> {
        let Some(due) = self.reading.remove(name) else {
            return Vec::new();
        };
        let now = cx.now.for_grace();
        let node = match read {
            Ok(Some(node)) => node,
            Ok(None) => {
                self.forget(name);
                return Vec::new();
            }
            Err(e) => {
                self.look_at.insert(name.to_string(), retry_after(now));
                let message = format!("re-gate: cannot read the node; trying again: {e}");
                return vec![Effect::log(Level::Warn, name, message)];
            }
        };
        let cfg = cx.config;
        let Some(rc) = cfg.regate.as_ref() else {
            return Vec::new();
        };
        if cfg.dry_run || cfg.suspend {
            // The configuration changed while the read was out.
            self.look_at.insert(name.to_string(), retry_after(now));
            return Vec::new();
        }
        let view = entrance::view(&node);
        if let Err(skip) = entrance::open_and_ours(&view, &cfg.scope, &cfg.placement.managed_taints)
        {
            // The index shows the change soon, and the node is looked at.
            self.look_at.remove(name);
            let message = format!("re-gate: not open any more: {skip}");
            return vec![Effect::log(Level::Debug, name, message)];
        }
        let write = regate_write(&node, rc, &due);
        self.writing.insert(name.to_string(), due);
        vec![Effect::Write(write)]
    }

    fn wrote(
        &mut self,
        write: &TaintWrite,
        outcome: PatchOutcome,
        cx: &Context<'_>,
        ledger: &Ledger,
    ) -> Vec<Effect> {
        let name = write.node.as_str();
        if write.origin != Origin::Regate {
            return Vec::new();
        }
        if let TaintChange::Annotate { .. } = write.change {
            return self.forgot(write, outcome, cx);
        }
        let Some(due) = self.writing.remove(name) else {
            return Vec::new();
        };
        let now = cx.now.for_grace();
        let mut out = Vec::new();
        use crate::vocab::write::Outcome::*;
        match outcome {
            Applied => {
                let TaintChange::Add { taint, .. } = &write.change else {
                    return out;
                };
                let why = words(&due.trigger, due.at);
                let indexed = cx
                    .view
                    .node(name)
                    .map_or_else(String::new, |n| n.resource_version.clone());
                self.pending
                    .insert(name.to_string(), [write.resource_version.clone(), indexed]);
                self.look_at.remove(name);
                self.budget_event.remove(name);
                // The reboot is acted on: the node carries the taint now. Its
                // gate may open it again before the index shows the taint at
                // all, and the reboot must not be taken for a new one then.
                if let Some(memory) = self.watched.get_mut(name) {
                    memory.reboot = None;
                }
                let note = match &due.trigger {
                    Trigger::Announced(_) => format!(
                        "nodegate put {taint} on the node before its reboot: {why}; it opens \
                         again after the reboot, once its members are Ready again"
                    ),
                    _ => format!(
                        "nodegate put {taint} on the node: {why}; it opens again when they are Ready"
                    ),
                };
                let log = format!("re-gated: put {taint} on: {why}");
                out.push(Effect::log(Level::Warn, name, log));
                out.push(Effect::Count(Tally::Regated(due.trigger.kind())));
                out.push(Effect::warning_of_own_write(
                    name,
                    &write.uid,
                    Reason::NodeRegated,
                    note,
                ));
            }
            NotFound => self.forget(name),
            // The node changed since the read (or this replica stopped
            // leading): decided again now.
            Conflict | NotLeader | Withdrawn => {
                self.looks([name], cx, ledger, &mut out);
            }
            // A replace write's own answers: no taint write gets one.
            Failed(e) | Ambiguous(e) | OwnerDeleted(e) | OwnerFailed(e) | NoOwner(e) => {
                self.look_at.insert(name.to_string(), retry_after(now));
                let message = format!("re-gate: the patch failed; trying again: {e}");
                out.push(Effect::log(Level::Warn, name, message));
            }
        }
        out
    }

    /// The change feed, with re-gating on.
    fn changed(
        &mut self,
        change: Change,
        cx: &Context<'_>,
        ledger: &Ledger,
        out: &mut Vec<Effect>,
    ) {
        match change {
            Change::Node { name, after, .. } => {
                // The node's place in re-gating's budget before this change
                // (the ledger has taken the change in already).
                let before = ledger.was_regated(&name) || self.pending.contains_key(&name);
                // Another version than those before our write, in the same
                // step as the counts see it: counted as it shows (with the
                // taint, or without it if it was taken off since).
                if let Some(versions) = self.pending.get(&name)
                    && after.is_none_or(|a| !before_write(versions, &a.resource_version))
                {
                    self.pending.remove(&name);
                }
                self.looks([name.as_str()], cx, ledger, out);
                // Places freed (of re-gating's budget, or of
                // `--max-unavailable`, by this change): as many refused nodes
                // looked at now.
                let after = ledger.counts().is_some_and(|c| c.regated.contains(&name))
                    || self.pending.contains_key(&name);
                let freed = usize::from(before && !after).max(ledger.freed());
                let first: Vec<String> = self
                    .refused
                    .iter()
                    .filter(|n| **n != name)
                    .take(freed)
                    .cloned()
                    .collect();
                self.looks(first, cx, ledger, out);
            }
            Change::Pods { node } | Change::GateStopped { node } => {
                self.looks([node], cx, ledger, out);
            }
            Change::Everything | Change::DaemonSet { .. } => {
                let mut nodes = cx.view.nodes();
                nodes.sort_unstable_by(|a, b| a.name.cmp(&b.name));
                self.looks(nodes.iter().map(|n| n.name.as_str()), cx, ledger, out);
            }
        }
    }

    /// Asks to be looked at again at the earliest time set, when that
    /// changed, or after a [`Input::Tick`] (which used up the one asked for).
    fn ask(&mut self, tick: bool, now: Now, out: &mut Vec<Effect>) {
        match self.look_at.values().min().copied() {
            None => self.asked = None,
            Some(at) if tick || self.asked != Some(at) => {
                self.asked = Some(at);
                out.push(Effect::LookAgainAt(now.to_local(now.for_grace(), at)));
            }
            Some(_) => {}
        }
    }

    /// One input, with `ledger` for `--max-unavailable`.
    pub(crate) fn decide(
        &mut self,
        input: Input,
        cx: &Context<'_>,
        ledger: &Ledger,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        if cx.config.regate.is_none() {
            self.reset();
            if let Input::Wrote { write, outcome } = input {
                out = self.wrote(&write, outcome, cx, ledger);
            }
            return out;
        }
        let out_before = self.reading.len() + self.writing.len();
        let tick = matches!(input, Input::Tick);
        match input {
            Input::Changed(change) => self.changed(change, cx, ledger, &mut out),
            Input::Tick => {
                let now = cx.now.for_grace();
                let due = self.look_at.iter().filter(|(_, at)| **at <= now);
                let due: BTreeSet<String> = due.map(|(name, _)| name.clone()).collect();
                self.looks(due, cx, ledger, &mut out);
            }
            Input::MayWrite => {
                let waiting: BTreeSet<String> = self
                    .follower
                    .drain()
                    .chain(self.forget_later.drain())
                    .collect();
                self.looks(waiting, cx, ledger, &mut out);
            }
            Input::NodeRead { node, read } => out = self.read(&node, read, cx),
            Input::Wrote { write, outcome } => out = self.wrote(&write, outcome, cx, ledger),
            Input::PodsListed { .. }
            | Input::Replaced { .. }
            | Input::CanaryCreated { .. }
            | Input::CanaryDeleted { .. }
            | Input::CanariesListed(_) => {}
        }
        if self.reading.len() + self.writing.len() < out_before && !self.held.is_empty() {
            let held: BTreeSet<String> = self.held.drain().collect();
            self.looks(held, cx, ledger, &mut out);
        }
        self.ask(tick, cx.now, &mut out);
        out
    }

    /// The gauges now.
    pub fn gauges(&self, cx: &Context<'_>, ledger: &Ledger) -> RegateGauges {
        ledger.with_counts(cx, |counts| {
            let (regated, budget_allowed) = match &cx.config.regate {
                Some(rc) => (
                    counts.regated.len() + self.unseen(counts),
                    rc.max_unavailable.allowed(counts.managed.len()),
                ),
                None => (0, 0),
            };
            RegateGauges {
                regated,
                budget_allowed,
                broken: self.look_at.len(),
                suspended: counts.suspended.len(),
            }
        })
    }

    /// This replica's re-gates the counts do not show yet (see `pending`).
    fn unseen(&self, counts: &Counts) -> usize {
        self.pending
            .keys()
            .filter(|name| !counts.regated.contains(*name))
            .count()
    }

    /// For the ledger: re-gates the index does not show yet are sure; fresh
    /// reads and writes out may each end in a re-gate.
    pub(crate) fn claims(&self) -> Claims {
        let out = self.reading.keys().chain(self.writing.keys());
        Claims {
            sure: self.pending.keys().cloned().collect(),
            maybe: out.cloned().collect(),
        }
    }

    /// The announced reboot `node` is due for, if any; removes the record of
    /// one that no longer stands.
    fn announcement(
        &mut self,
        node: &NodeInfo,
        daemonsets: &[Arc<DaemonSetInfo>],
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) -> Option<Trigger> {
        let cfg = cx.config;
        if cfg.reboots.sources.is_empty() && node.awaiting_reboot.is_none() {
            return None;
        }
        let now = cx.now.for_grace();
        let lock = reboot::kured_lock_of(&cfg.reboots, daemonsets, now);
        // A kured lock that is not kured's JSON announces nothing: said once
        // per value.
        if let Some(Err(e)) = &lock
            && self.lock_warned.as_ref() != Some(e)
        {
            let message = format!("kured's lock on {}: {e}", cfg.reboots.kured_daemonset);
            out.push(Effect::log(Level::Warn, &node.name, message));
            self.lock_warned = Some(e.clone());
        }
        let announced = reboot::announced_given(node, &cfg.reboots, lock.as_ref());
        match before_reboot(node, cfg, announced) {
            BeforeReboot::Regate(a) => Some(Trigger::Announced(a)),
            BeforeReboot::Forget => {
                self.forget_awaiting(node, cx, out);
                None
            }
            BeforeReboot::Nothing => None,
        }
    }

    /// Removes `nodegate.dev/awaiting-reboot` from `node` as the index shows
    /// it, unless a removal tested against this version is out or applied.
    fn forget_awaiting(&mut self, node: &NodeInfo, cx: &Context<'_>, out: &mut Vec<Effect>) {
        let name = node.name.as_str();
        if self.forgetting.get(name) == Some(&node.resource_version) {
            return;
        }
        self.forgetting.remove(name);
        let cfg = cx.config;
        if cfg.dry_run || cfg.suspend || node.suspended {
            return;
        }
        if !cx.may_write {
            self.forget_later.insert(name.to_string());
            return;
        }
        self.forgetting
            .insert(name.to_string(), node.resource_version.clone());
        let annotations = vec![(annotations::AWAITING_REBOOT, None)];
        let change = TaintChange::Annotate { annotations };
        out.push(Effect::Write(write_on(Origin::Regate, node, change)));
    }

    /// The answer to a removal of `nodegate.dev/awaiting-reboot`.
    fn forgot(
        &mut self,
        write: &TaintWrite,
        outcome: PatchOutcome,
        cx: &Context<'_>,
    ) -> Vec<Effect> {
        let name = write.node.as_str();
        let now = cx.now.for_grace();
        use crate::vocab::write::Outcome::*;
        match outcome {
            Applied => {
                let message = "no reboot announcement stands any more: removed \
                               nodegate.dev/awaiting-reboot (its gate, if any, opens by readiness)";
                vec![Effect::log(Level::Info, name, message)]
            }
            // The node changed since: decided again on the index's next
            // version of it (the entry holds back the version tested).
            Conflict => Vec::new(),
            NotFound => {
                self.forget(name);
                Vec::new()
            }
            NotLeader | Withdrawn => {
                self.forgetting.remove(name);
                self.forget_later.insert(name.to_string());
                Vec::new()
            }
            Failed(e) | Ambiguous(e) | OwnerDeleted(e) | OwnerFailed(e) | NoOwner(e) => {
                self.forgetting.remove(name);
                self.look_at.insert(name.to_string(), retry_after(now));
                let message =
                    format!("removing nodegate.dev/awaiting-reboot failed; trying again: {e}");
                vec![Effect::log(Level::Warn, name, message)]
            }
        }
    }

    /// Whether one more node may be re-gated: re-gating's own budget, where
    /// the reads and writes out hold a node the budget would refuse if they
    /// all ended in a re-gate; then `--max-unavailable`, from the ledger.
    fn budget(&mut self, rc: &RegateConfig, cx: &Context<'_>, ledger: &Ledger) -> Room {
        let out = self.reading.len() + self.writing.len();
        let Some(counts) = ledger.counts() else {
            return Room::Allows;
        };
        let managed = counts.managed.len();
        let in_use = counts.regated.len() + self.unseen(counts);
        if let Err(exhausted) = regating::budget_allows(rc, managed, in_use) {
            return Room::Refused(exhausted);
        }
        let held = regating::budget_allows(rc, managed, in_use + out).err();
        let total = ledger.room(cx.config, Origin::Regate, &self.claims(), None);
        match (total, held) {
            (Room::Allows, Some(exhausted)) if out > 0 => Room::Held(exhausted),
            (total, _) => total,
        }
    }

    fn refused(
        &mut self,
        name: &str,
        trigger: &Trigger,
        exhausted: Exhausted,
        cx: &Context<'_>,
        out: &mut Vec<Effect>,
    ) {
        let now = cx.now.for_grace();
        out.push(Effect::Count(Tally::RegateBudgetExhausted));
        let again = now.checked_add(BUDGET_RETRY).unwrap_or(now);
        self.look_at.insert(name.to_string(), again);
        self.refused.insert(name.to_string());
        tell_refusal(
            &mut self.budget_event,
            name,
            now,
            || {
                let why = words(trigger, now);
                let event = cx.view.node(name).map(|node| {
                    let note = format!("Not re-gated although {why}: {exhausted}");
                    let reason = Reason::RegateBudgetExhausted;
                    NodeEvent::new(name, &node.uid, EventType::Warning, reason, note)
                });
                let log = format!("not re-gated: the budget is used up ({exhausted}); {why}");
                (log, event)
            },
            out,
        );
    }
}

/// Whether the index, showing a node at `version`, shows it from before
/// this replica's write whose versions from before are `before` (the fresh
/// read's, the index's when the answer came). A version between the two is
/// from before as well: the index may lag the fresh read by several of the
/// node's heartbeats, and counting the node as shown there would free its
/// place in the budget for another node while the taint is on. The API
/// server's resourceVersions are etcd revisions, rising for an object and
/// delivered in order by the watch; one that is not a number is compared
/// only for equality.
fn before_write(before: &[String; 2], version: &str) -> bool {
    if before.iter().any(|v| v == version) {
        return true;
    }
    match (before[0].parse::<u64>(), version.parse::<u64>()) {
        (Ok(read), Ok(shown)) => shown < read,
        _ => false,
    }
}

/// The write that re-gates `node` as the fresh read shows it.
fn regate_write(node: &NodeInfo, rc: &RegateConfig, due: &Due) -> TaintWrite {
    let since = annotation_time(due.at).to_string();
    let mut annotations = vec![
        (annotations::GATED_SINCE, since),
        (annotations::REGATED_FOR, due.trigger.annotation()),
    ];
    if let Trigger::Announced(_) = due.trigger {
        // The boot the node is in as the fresh read shows it: its gate
        // holds until it reports another (semantics.md §6.10).
        annotations.push((annotations::AWAITING_REBOOT, boot_of(node).to_string()));
    }
    let change = add_taint(node, rc.taint.to_taint(), annotations, due.at);
    write_on(Origin::Regate, node, change)
}

/// Why a node is (or would be) re-gated, for Events and logs.
pub fn words(trigger: &Trigger, now: Timestamp) -> String {
    match trigger {
        Trigger::Members(m) => format!(
            "without a Ready pod for the grace: {}",
            regating::describe(m, now)
        ),
        Trigger::Reboot { from, to } => format!("the node rebooted (boot id {from} is now {to})"),
        Trigger::Announced(a) => format!("a reboot is announced: {}", a.detail),
    }
}

#[cfg(test)]
mod tests;
