//! The counts the budget and the gauges read, kept by name from the change
//! feed, and the gauges.

use std::collections::HashSet;
use std::sync::Arc;

use crate::config::{Config, Scope};
use crate::deciders::ledger::fingerprint;
use crate::model::NodeInfo;
use crate::placement::ManagedTaint;
use crate::regate;

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

/// What the counts depend on in the configuration: counted afresh when it
/// changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CountKey {
    scope: Scope,
    suspend: bool,
    taint: Option<ManagedTaint>,
}

impl CountKey {
    pub(super) fn of(cfg: &Config) -> Self {
        CountKey {
            scope: cfg.scope.clone(),
            suspend: cfg.suspend,
            taint: cfg.regate.as_ref().map(|rc| rc.taint.clone()),
        }
    }

    /// Whether counts made under this key hold for `cfg` (without building
    /// its key: asked at every change).
    pub(super) fn is_for(&self, cfg: &Config) -> bool {
        self.scope == cfg.scope
            && self.suspend == cfg.suspend
            && self.taint.as_ref() == cfg.regate.as_ref().map(|rc| &rc.taint)
    }
}

/// The nodes the budget and the gauges count, by name: kept by name, a
/// change counts once however often it is offered, and a count made from an
/// index ahead of the change feed does not count a later change twice.
#[derive(Debug)]
pub(super) struct Counts {
    pub(super) key: CountKey,
    /// In scope (`--node-selector`), by [`fingerprint`]: every managed node
    /// is in here, so it holds 8 bytes a node rather than its name.
    pub(super) managed: HashSet<u64>,
    /// Of them, suspended (config or annotation), by fingerprint.
    pub(super) suspended: HashSet<u64>,
    /// Of them, carrying the re-gate taint, by name (the gauges list them).
    pub(super) regated: HashSet<String>,
}

impl Counts {
    pub(super) fn new(key: CountKey) -> Self {
        Counts {
            key,
            managed: HashSet::new(),
            suspended: HashSet::new(),
            regated: HashSet::new(),
        }
    }

    pub(super) fn of(cfg: &Config, nodes: &[Arc<NodeInfo>]) -> Self {
        let mut counts = Counts::new(CountKey::of(cfg));
        for node in nodes {
            counts.set(&node.name, Some(node), cfg);
        }
        counts
    }

    /// Node `name` is `node` now (`None`: gone).
    pub(super) fn set(&mut self, name: &str, node: Option<&NodeInfo>, cfg: &Config) {
        let managed = node.filter(|n| cfg.scope.includes(&n.labels));
        let suspended = managed.is_some_and(|n| cfg.suspend || n.suspended);
        let regated = managed
            .zip(cfg.regate.as_ref())
            .is_some_and(|(n, rc)| regate::carries(n, rc));
        let print = fingerprint(name);
        flag(&mut self.managed, print, managed.is_some());
        flag(&mut self.suspended, print, suspended);
        member(&mut self.regated, name, regated);
    }
}

fn flag(set: &mut HashSet<u64>, print: u64, is: bool) {
    if is {
        set.insert(print);
    } else {
        set.remove(&print);
    }
}

fn member(set: &mut HashSet<String>, name: &str, is: bool) {
    if !is {
        set.remove(name);
    } else if !set.contains(name) {
        set.insert(name.to_string());
    }
}
