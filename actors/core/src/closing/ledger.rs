//! The closing ledger: `--max-unavailable` counted once, in one place, for
//! re-gating (semantics.md §6.4) and condition-rule taints (§6.5). It keeps
//! the index's [`Counts`] from the change feed (counted afresh when a change
//! reaches every node or the configuration they depend on changed)
//! and each method's writes out that the index does not show yet
//! ([`Claims`]); both methods ask [`Ledger::room`] before closing a node.

use std::borrow::Borrow;
use std::collections::{BTreeSet, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::closing::regating::{self, Exhausted};
use crate::deciders::{Change, Context, Input, Origin, closed_by_nodegate};
use crate::rules::placement::ManagedTaint;
use crate::vocab::config::{Config, Scope};
use crate::vocab::model::{NodeInfo, Taint};

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

/// The closing budgets' counts, and the writes out.
#[derive(Debug, Default)]
pub struct Ledger {
    /// `None` until the first step.
    counts: Option<Counts>,
    /// Places of `--max-unavailable` this step's change of the index freed.
    freed: usize,
    /// Whether the node this step's change is about carried the re-gate
    /// taint before it.
    was_regated: Option<(String, bool)>,
    /// Re-gating's writes out, as it left them at the end of its last turn.
    regate: Claims,
    /// The condition rules' writes out, likewise.
    rules: Claims,
}

impl Ledger {
    /// Takes in the index's change a step starts with (counting afresh if
    /// the configuration the counts depend on changed).
    pub fn begin(&mut self, input: &Input, cx: &Context<'_>) {
        self.freed = 0;
        self.was_regated = None;
        let stale = self.counts().is_none_or(|c| !c.key.is_for(cx.config));
        if stale || matches!(input, Input::Changed(c) if c.reaches_every_node()) {
            let before = self.counts.as_ref().map_or(0, |c| c.closed.len());
            let counts = Counts::of(cx.config, &cx.view.nodes());
            self.freed = before.saturating_sub(counts.closed.len());
            self.counts = Some(counts);
        }
        if let (Input::Changed(Change::Node { name, after, .. }), Some(counts)) =
            (input, self.counts.as_mut())
        {
            let before = counts.closed.len();
            self.was_regated = Some((name.clone(), counts.regated.contains(name)));
            counts.set(name, after.as_deref(), cx.config);
            self.freed += before.saturating_sub(counts.closed.len());
        }
    }

    pub(crate) fn counts(&self) -> Option<&Counts> {
        self.counts.as_ref()
    }

    /// `f` of the counts kept, or of a count made now if the configuration
    /// changed since (the next step counts afresh).
    pub(crate) fn with_counts<T>(&self, cx: &Context<'_>, f: impl FnOnce(&Counts) -> T) -> T {
        match &self.counts {
            Some(c) if c.key.is_for(cx.config) => f(c),
            _ => f(&Counts::of(cx.config, &cx.view.nodes())),
        }
    }

    /// Whether `name` carried the re-gate taint before this step's change
    /// of it.
    pub fn was_regated(&self, name: &str) -> bool {
        match &self.was_regated {
            Some((n, was)) if n == name => *was,
            _ => self.counts().is_some_and(|c| c.regated.contains(name)),
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

    /// Whether `origin` may close one more node, with `own` its writes out
    /// now and the other method's as it last reported them. With `node`
    /// (the rules), a node already closed or being closed is allowed: it
    /// closes no further node; without (re-gating), every node counts as a
    /// further one. Refused when the nodes shown closed and the writes sent
    /// reach the cap; held when the writes that may yet close a node would.
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
        let Some(counts) = self.counts.as_ref() else {
            return Room::Allows;
        };
        if node.is_some_and(|n| counts.closed.contains(&fingerprint(n)) || claimed(n)) {
            return Room::Allows;
        }
        let managed = counts.managed.len();
        let exhausted = |in_use| Exhausted {
            allowed: cap.allowed(managed),
            in_use,
            managed,
            max_unavailable: cap,
            total: true,
        };
        let claimed_sure = own.sure.iter().chain(&other.sure);
        let sure = in_use(counts, claimed_sure.clone());
        if cap.room(managed, sure) == 0 {
            return Room::Refused(exhausted(sure));
        }
        let all = in_use(counts, claimed_sure.chain(&own.maybe).chain(&other.maybe));
        if cap.room(managed, all) == 0 {
            return Room::Held(exhausted(all));
        }
        Room::Allows
    }
}

/// The nodes shown closed, with those of `claimed` not shown yet (each
/// once).
fn in_use<'a>(counts: &Counts, claimed: impl Iterator<Item = &'a String>) -> usize {
    let unseen: HashSet<&str> = claimed
        .filter(|n| !counts.closed.contains(&fingerprint(n)))
        .map(String::as_str)
        .collect();
    counts.closed.len() + unseen.len()
}

/// What the counts depend on in the configuration: counted afresh when it
/// changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct CountKey {
    scope: Scope,
    suspend: bool,
    taint: Option<ManagedTaint>,
    /// The condition rules' taints (`--max-unavailable` counts them).
    rule_taints: Vec<Taint>,
}

impl CountKey {
    fn of(cfg: &Config) -> Self {
        CountKey {
            scope: cfg.scope.clone(),
            suspend: cfg.suspend,
            taint: cfg.regate.as_ref().map(|rc| rc.taint.clone()),
            rule_taints: cfg
                .condition_taints
                .iter()
                .map(|r| r.taint.clone())
                .collect(),
        }
    }

    /// Whether counts made under this key hold for `cfg` (without building
    /// its key: asked at every change).
    fn is_for(&self, cfg: &Config) -> bool {
        self.scope == cfg.scope
            && self.suspend == cfg.suspend
            && self.taint.as_ref() == cfg.regate.as_ref().map(|rc| &rc.taint)
            && (self.rule_taints.iter()).eq(cfg.condition_taints.iter().map(|r| &r.taint))
    }
}

/// The nodes the closing budgets and re-gating's gauges count, by name:
/// kept by name, a change counts once however often it is offered, and a
/// count made from an index ahead of the change feed does not count a later
/// change twice.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    key: CountKey,
    /// In scope (`--node-selector`), by [`fingerprint`]: every managed node
    /// is in here, so it holds 8 bytes a node rather than its name.
    pub(crate) managed: HashSet<u64>,
    /// Of them, suspended (config or annotation), by fingerprint.
    pub(crate) suspended: HashSet<u64>,
    /// Of them, carrying the re-gate taint, by name (the gauges list them):
    /// `--regate-max-unavailable`'s count.
    pub(crate) regated: HashSet<String>,
    /// Of them, closed by nodegate on its own initiative (the re-gate taint
    /// or a rule's), by fingerprint: `--max-unavailable`'s count.
    pub(crate) closed: HashSet<u64>,
}

impl Counts {
    pub(crate) fn of(cfg: &Config, nodes: &[Arc<NodeInfo>]) -> Self {
        let mut counts = Counts {
            key: CountKey::of(cfg),
            ..Counts::default()
        };
        for node in nodes {
            counts.set(&node.name, Some(node), cfg);
        }
        counts
    }

    /// Node `name` is `node` now (`None`: gone).
    pub(crate) fn set(&mut self, name: &str, node: Option<&NodeInfo>, cfg: &Config) {
        let managed = node.filter(|n| cfg.scope.includes(&n.labels));
        let suspended = managed.is_some_and(|n| cfg.suspend || n.suspended);
        let regated = managed
            .zip(cfg.regate.as_ref())
            .is_some_and(|(n, rc)| regating::carries(n, rc));
        let closed = managed.is_some_and(|n| closed_by_nodegate(n, cfg));
        let print = fingerprint(name);
        flag(&mut self.managed, &print, managed.is_some());
        flag(&mut self.suspended, &print, suspended);
        flag(&mut self.closed, &print, closed);
        flag(&mut self.regated, name, regated);
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

/// `key` in `set` or not, as `is` says (a key already in is not copied
/// again).
pub(crate) fn flag<K, Q>(set: &mut HashSet<K>, key: &Q, is: bool)
where
    K: Hash + Eq + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
{
    if is && !set.contains(key) {
        set.insert(key.to_owned());
    } else if !is && !set.is_empty() {
        set.remove(key);
    }
}
