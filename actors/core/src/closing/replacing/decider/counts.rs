//! The members' spreads, kept from the change feed (issue 37 §6,
//! "incremental counts"), so that judging a due node costs no pass over
//! every node and its pods: what each node adds to each DaemonSet's spread
//! ([`Flags`]) is recounted when that node or its pods change.
//!
//! The router publishes a pod change only for a node with no live gate (a
//! gate hears of its own pods): the pods of a gated node may change
//! unheard. Such nodes ([`Counts::unheard`]) are recounted at every look
//! that judges, from the moment one is seen gated until its gate stops or
//! the node goes.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::closing::ledger::flag;
use crate::closing::replacing::Spread;
use crate::deciders::Context;
use crate::gate;
use crate::rules::placement;
use crate::vocab::config::Config;
use crate::vocab::member::{Member, MemberId};
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};
use crate::vocab::vec_map::VecMap;

use super::{by_uid, due, failing};

#[cfg(test)]
mod tests;

/// What one node adds to one DaemonSet's spread: a bit each for
/// [`Spread::nodes`], [`Spread::failing`] and [`Spread::due`].
type Flags = u8;
const COUNTED: Flags = 1;
const FAILING: Flags = 2;
const DUE: Flags = 4;

/// A node as counted, keyed by its name.
#[derive(Debug, Clone)]
struct Counted(Arc<NodeInfo>);

impl PartialEq for Counted {
    fn eq(&self, other: &Self) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Counted {}

impl Hash for Counted {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.as_str().hash(state);
    }
}

impl Borrow<str> for Counted {
    fn borrow(&self) -> &str {
        &self.0.name
    }
}

type Names<V> = HashMap<Counted, V>;
type NameSet = HashSet<String>;

/// The spreads, as the index shows them after the inputs handled so far.
#[derive(Debug, Default)]
pub(super) struct Counts {
    /// The configuration and the DaemonSets counted under (by key, as the
    /// look keys them): the slots of [`Self::per_node`] and [`Self::totals`]
    /// follow this order.
    config: Config,
    daemonsets: VecMap<String, Arc<DaemonSetInfo>>,
    /// Per indexed node, the node as counted and where what it adds to
    /// each DaemonSet's spread is in [`Self::flags`].
    per_node: Names<u32>,
    /// What each counted node adds, one slot of as many flags as there are
    /// DaemonSets per node; the slots of nodes gone are in [`Self::free`].
    flags: Vec<Flags>,
    free: Vec<u32>,
    /// Per DaemonSet, the sum over [`Self::per_node`].
    totals: Vec<Spread>,
    /// The indexed nodes gated, in scope and not ignored: where any other
    /// member is judged.
    gated: NameSet,
    /// The nodes whose pod changes a live gate may take: seen gated since
    /// their gate last stopped.
    unheard: NameSet,
}

impl Counts {
    /// Everything counted from the whole index. The nodes whose gate may
    /// still live (although the configuration in force may no longer gate
    /// them) are carried over from `before`.
    pub(super) fn build(
        daemonsets: VecMap<String, Arc<DaemonSetInfo>>,
        cx: &Context<'_>,
        before: Option<Counts>,
    ) -> Counts {
        let unheard = before.map(|c| c.unheard).unwrap_or_default();
        let mut counts = Counts {
            config: cx.config.clone(),
            totals: vec![Spread::default(); daemonsets.len()],
            daemonsets,
            unheard,
            ..Counts::default()
        };
        let nodes = cx.view.nodes();
        counts.per_node.reserve(nodes.len());
        counts.flags.reserve(nodes.len() * counts.daemonsets.len());
        for n in &nodes {
            cx.view
                .with_pods_on(&n.name, &mut |pods| counts.put(n, pods, cx.config));
        }
        let per_node = &counts.per_node;
        counts.unheard.retain(|n| per_node.contains_key(n.as_str()));
        counts
    }

    pub(super) fn holds(
        &self,
        cfg: &Config,
        daemonsets: &VecMap<String, Arc<DaemonSetInfo>>,
    ) -> bool {
        self.config == *cfg && self.daemonsets == *daemonsets
    }

    pub(super) fn daemonsets(&self) -> &VecMap<String, Arc<DaemonSetInfo>> {
        &self.daemonsets
    }

    /// Node `name` (or its pods) changed: what it adds counted again from
    /// the index as it is now.
    pub(super) fn recount(&mut self, name: &str, cx: &Context<'_>) {
        self.take(name);
        match cx.view.node(name) {
            Some(n) => cx
                .view
                .with_pods_on(name, &mut |pods| self.put(&n, pods, cx.config)),
            None => {
                self.gated.remove(name);
                self.unheard.remove(name);
            }
        }
    }

    /// `name`'s gate stopped: its pod changes reach the feed again, and
    /// those it took meanwhile are counted now.
    pub(super) fn gate_stopped(&mut self, name: &str, cx: &Context<'_>) {
        self.recount(name, cx);
        if !cx.view.node(name).is_some_and(|n| cx.config.gates(&n)) {
            self.unheard.remove(name);
        }
    }

    /// The nodes whose pods may have changed unheard, counted again: once
    /// per look that judges.
    pub(super) fn refresh(&mut self, cx: &Context<'_>) {
        let names: Vec<String> = self.unheard.iter().cloned().collect();
        for name in names {
            self.recount(&name, cx);
        }
    }

    /// How member `id` fares across the cluster: a DaemonSet's from the kept
    /// counts, any other member's counted now over the gated nodes.
    pub(super) fn spread(&self, id: &MemberId, cx: &Context<'_>) -> Spread {
        if let MemberId::DaemonSet(key) = id {
            let slot = self.daemonsets.iter().position(|(k, _)| k == key);
            return slot.map(|slot| self.totals[slot]).unwrap_or_default();
        }
        let now = cx.now.for_grace();
        let mut spread = Spread::default();
        for name in &self.gated {
            let Some(n) = cx
                .view
                .node(name)
                .filter(|n| cx.config.gates(n) && !n.ignored)
            else {
                continue;
            };
            let pods = cx.view.pods_on(name);
            let member =
                gate::derive_member(id, &n, &self.daemonsets, &by_uid(&pods), cx.config, now);
            if let Some(m) = member.filter(Member::is_expected) {
                spread.nodes += 1;
                if failing(&m) {
                    spread.failing += 1;
                    if due(&n, cx.config) {
                        spread.due += 1;
                    }
                }
            }
        }
        spread
    }

    /// Removes what node `name` added.
    fn take(&mut self, name: &str) {
        if let Some(slot) = self.per_node.remove(name) {
            let width = self.totals.len();
            let at = slot as usize * width;
            self.free.push(slot);
            for (total, f) in self.totals.iter_mut().zip(&self.flags[at..at + width]) {
                total.nodes -= usize::from(f & COUNTED != 0);
                total.failing -= usize::from(f & FAILING != 0);
                total.due -= usize::from(f & DUE != 0);
            }
        }
    }

    /// Adds what `node` adds (nothing counted for it before), and notes
    /// whether it is gated.
    fn put(&mut self, node: &Arc<NodeInfo>, pods: &[Arc<PodInfo>], cfg: &Config) {
        let width = self.totals.len();
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.flags.len() / width.max(1)).unwrap_or(u32::MAX);
                self.flags.resize(self.flags.len() + width, 0);
                slot
            }
        };
        let at = slot as usize * width;
        for ((total, f), ds) in self
            .totals
            .iter_mut()
            .zip(&mut self.flags[at..at + width])
            .zip(self.daemonsets.values())
        {
            *f = flags(node, ds, pods, cfg);
            total.nodes += usize::from(*f & COUNTED != 0);
            total.failing += usize::from(*f & FAILING != 0);
            total.due += usize::from(*f & DUE != 0);
        }
        self.per_node.insert(Counted(Arc::clone(node)), slot);
        let gates = cfg.gates(node);
        if gates {
            flag(&mut self.unheard, node.name.as_str(), true);
        }
        flag(&mut self.gated, node.name.as_str(), gates && !node.ignored);
    }
}

/// What `node` adds to `ds`'s spread: counted where it has a pod (pods
/// being deleted left out), and where it is expected but has none (none
/// could be made: a quota, an admission refusal, no pod IP), which counts
/// as failing; failing where no pod is Ready; due where failing and the
/// node is due.
fn flags(node: &NodeInfo, ds: &DaemonSetInfo, pods: &[Arc<PodInfo>], cfg: &Config) -> Flags {
    let mut s = Spread::default();
    s.count(ds, pods.iter().map(AsRef::as_ref));
    if s == Spread::default() && placement::evaluate(node, ds, &cfg.placement).is_expected() {
        s.missing();
    }
    let failing = s.failing > 0;
    // The bits are distinct: their sum is their union.
    Flags::from(s.nodes > 0) * COUNTED
        + Flags::from(failing) * FAILING
        + Flags::from(failing && due(node, cfg)) * DUE
}
