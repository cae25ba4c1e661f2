//! The closing ledger: `--max-unavailable` counted once, in one place, for
//! both ways nodegate closes an open node on its own initiative — re-gating
//! (semantics.md §6.4) and a condition rule's taint (§6.5).
//!
//! It holds the managed nodes and those of them the index shows closed by
//! nodegate ([`closed_by_nodegate`]), kept by the closing decider from the
//! change feed (each [`Change::Node`], counted afresh at
//! [`Change::Everything`] or when the configuration they depend on
//! changed), and each method's writes out that close a node and that the
//! index does not show yet ([`Claims`]). Both methods ask it before closing
//! a node ([`Ledger::room`]); they run in one decider, one after the other in
//! each step, so the second sees the first's write. Each method's own budget
//! (`--regate-max-unavailable`, a rule's `maxUnavailable`) is checked by the
//! method as before; this one is the cap over both.

use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};

use super::{Change, Context, Input, Origin, closed_by_nodegate};
use crate::config::{Config, Scope};
use crate::model::{NodeInfo, Taint};
use crate::placement::ManagedTaint;
use crate::regate::Exhausted;

/// One method's writes out that close a node and that the index does not
/// show closed yet, by node name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// Sent or applied: each counts as closed.
    pub sure: BTreeSet<String>,
    /// Out, and may end without closing the node (re-gating's fresh reads
    /// and writes out): each holds a place until it is answered.
    pub maybe: BTreeSet<String>,
}

/// What `--max-unavailable` says about closing one more node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Room {
    Allows,
    /// Room only if none of the writes out that may close a node does:
    /// decided again when one of them is answered.
    Held(Exhausted),
    Refused(Exhausted),
}

/// What the counts depend on in the configuration: counted afresh when it
/// changes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    scope: Scope,
    regate_taint: Option<ManagedTaint>,
    rule_taints: Vec<Taint>,
}

impl Key {
    fn of(cfg: &Config) -> Self {
        Key {
            scope: cfg.scope.clone(),
            regate_taint: cfg.regate.as_ref().map(|rc| rc.taint.clone()),
            rule_taints: cfg
                .condition_taints
                .iter()
                .map(|r| r.taint.clone())
                .collect(),
        }
    }

    /// Whether counts made under this key hold for `cfg` (without building
    /// its key: asked at every step).
    fn is_for(&self, cfg: &Config) -> bool {
        self.scope == cfg.scope
            && self.regate_taint.as_ref() == cfg.regate.as_ref().map(|rc| &rc.taint)
            && self.rule_taints.len() == cfg.condition_taints.len()
            && self
                .rule_taints
                .iter()
                .zip(&cfg.condition_taints)
                .all(|(t, r)| *t == r.taint)
    }
}

/// `--max-unavailable`'s counts.
#[derive(Debug, Default)]
pub struct Ledger {
    key: Option<Key>,
    /// Managed nodes (`--node-selector`), by fingerprint.
    managed: HashSet<u64>,
    /// Of them, the index shows closed by nodegate, by fingerprint.
    closed: HashSet<u64>,
    /// Places this step's change of the index freed.
    freed: usize,
    /// Re-gating's writes out, as it left them at the end of its last turn.
    regate: Claims,
    /// The condition rules' writes out, likewise.
    rules: Claims,
}

impl Ledger {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in the index's change a step starts with (or counts afresh,
    /// if the configuration the counts depend on changed).
    pub fn begin(&mut self, input: &Input, cx: &Context<'_>) {
        self.freed = 0;
        let stale = self.key.as_ref().is_none_or(|k| !k.is_for(cx.config));
        match input {
            Input::Changed(Change::Everything) => self.recount(cx),
            _ if stale => self.recount(cx),
            Input::Changed(Change::Node { name, after, .. }) => {
                self.see(name, after.as_deref(), cx.config);
            }
            _ => {}
        }
    }

    fn recount(&mut self, cx: &Context<'_>) {
        let before = self.closed.len();
        self.key = Some(Key::of(cx.config));
        self.managed.clear();
        self.closed.clear();
        for node in cx.view.nodes() {
            self.see(&node.name, Some(&node), cx.config);
        }
        self.freed = before.saturating_sub(self.closed.len());
    }

    /// Node `name` is `node` now (`None`: gone).
    fn see(&mut self, name: &str, node: Option<&NodeInfo>, cfg: &Config) {
        let print = fingerprint(name);
        let managed = node.filter(|n| cfg.scope.includes(&n.labels));
        let closed = managed.is_some_and(|n| closed_by_nodegate(n, cfg));
        if managed.is_some() {
            self.managed.insert(print);
        } else {
            self.managed.remove(&print);
        }
        if closed {
            self.closed.insert(print);
        } else if self.closed.remove(&print) {
            self.freed += 1;
        }
    }

    /// Places this step's change of the index freed: nodes that no longer
    /// show closed by nodegate.
    pub fn freed(&self) -> usize {
        self.freed
    }

    /// `origin`'s writes out, as it leaves them at the end of its turn.
    pub fn report(&mut self, origin: Origin, claims: Claims) {
        match origin {
            Origin::Regate => self.regate = claims,
            Origin::Rules => self.rules = claims,
            Origin::Net | Origin::Replace | Origin::Canary => {}
        }
    }

    /// Whether `origin` may close one more node (`node`, when closing it
    /// closes no further node if it is closed already), with `own` its
    /// writes out now and the other method's as it last reported them.
    /// Refused when the nodes shown closed and the writes sent reach the
    /// cap; held when the writes that may yet close a node would.
    pub fn room(&self, cfg: &Config, origin: Origin, own: &Claims, node: Option<&str>) -> Room {
        let Some(cap) = cfg.max_unavailable else {
            return Room::Allows;
        };
        let other = match origin {
            Origin::Regate => &self.rules,
            _ => &self.regate,
        };
        let claimed = |n: &str| {
            [own, other]
                .iter()
                .any(|c| c.sure.contains(n) || c.maybe.contains(n))
        };
        if node.is_some_and(|n| self.closed.contains(&fingerprint(n)) || claimed(n)) {
            return Room::Allows;
        }
        let managed = self.managed.len();
        let exhausted = |in_use| Exhausted {
            allowed: cap.allowed(managed),
            in_use,
            managed,
            max_unavailable: cap,
            total: true,
        };
        let sure = self.in_use(own.sure.iter().chain(&other.sure));
        if cap.room(managed, sure) == 0 {
            return Room::Refused(exhausted(sure));
        }
        let all = self.in_use(
            (own.sure.iter().chain(&other.sure)).chain(own.maybe.iter().chain(&other.maybe)),
        );
        if cap.room(managed, all) == 0 {
            return Room::Held(exhausted(all));
        }
        Room::Allows
    }

    /// The nodes shown closed, with those of `claimed` not shown yet (each
    /// once).
    fn in_use<'a>(&self, claimed: impl Iterator<Item = &'a String>) -> usize {
        let unseen: HashSet<&str> = claimed
            .filter(|n| !self.closed.contains(&fingerprint(n)))
            .map(String::as_str)
            .collect();
        self.closed.len() + unseen.len()
    }
}

/// A node name's 64-bit fingerprint (SipHash with fixed keys: the same in
/// every process). Two names of one cluster sharing one would miscount the
/// budget by one node; at 65,000 nodes the chance is about 1 in 10^10.
pub(crate) fn fingerprint(name: &str) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}
