//! The counts kept from the change feed against a count from scratch (the
//! pass over every node and its pods the decider made at each look before
//! it kept counts), after seeded random sequences of the changes the
//! router publishes: nodes added, changed and deleted, pods added, changed
//! and deleted (unheard while the node's gate lives, as the router routes
//! them to the gate instead), gates stopping, DaemonSets and the
//! configuration changing.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::super::{Replacer, by_key, by_uid, due, failing};
use crate::closing::replacing::Spread;
use crate::deciders::fixture::Run;
use crate::deciders::{Change, Context, Input, Now};
use crate::gate;
use crate::rules::conditions::CriticalCondition;
use crate::rules::placement::{
    self, DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE, TOLERATION_OP_EXISTS, Verdict,
};
use crate::testutil::{ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts};
use crate::vocab::config::{Config, OnTimeout};
use crate::vocab::member::{Member, MemberId};
use crate::vocab::model::{DaemonSetInfo, NodeCondition, PodPlacement};

const NOW: i64 = 10_000;
const CREATED: i64 = 5_000;
const NAMES: [&str; 8] = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"];

/// A member's spread as the decider counted it before it kept counts: one
/// pass over every node and its pods.
fn from_scratch(id: &MemberId, cx: &Context<'_>) -> Spread {
    let daemonsets = by_key(cx.view.daemonsets());
    let ds = match id {
        MemberId::DaemonSet(key) => daemonsets.get(key),
        _ => None,
    };
    let now = cx.now.for_grace();
    let mut spread = Spread::default();
    for n in cx.view.nodes() {
        let pods = cx.view.pods_on(&n.name);
        let before = spread;
        if let Some(ds) = ds {
            spread.count(ds, pods.iter().map(AsRef::as_ref));
            if spread == before
                && matches!(
                    placement::evaluate(&n, ds, &cx.config.placement),
                    Verdict::Expected
                )
            {
                spread.missing();
            }
        } else if cx.config.gates(&n) && !n.ignored {
            let member = gate::derive_member(id, &n, &daemonsets, &by_uid(&pods), cx.config, now);
            if let Some(m) = member.filter(Member::is_expected) {
                spread.nodes += 1;
                if failing(&m) {
                    spread.failing += 1;
                }
            }
        }
        if spread.failing > before.failing && due(&n, cx.config) {
            spread.due += 1;
        }
    }
    spread
}

/// xorshift64*: the same sequence for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }
}

/// The agent every node runs, tolerating everything.
fn cni() -> DaemonSetInfo {
    mk_ds(
        "infra",
        "cni",
        template_with_tolerations(vec![toleration("", TOLERATION_OP_EXISTS, "", "")]),
    )
}

/// Only on `pool=gpu` nodes; `tolerant` or not of the managed taint.
fn gpu(tolerant: bool) -> DaemonSetInfo {
    let tolerations = if tolerant {
        vec![toleration("", TOLERATION_OP_EXISTS, "", "")]
    } else {
        Vec::new()
    };
    mk_ds(
        "infra",
        "gpu",
        PodPlacement {
            node_selector: crate::testutil::labels(&[("pool", "gpu")]),
            tolerations,
            ..PodPlacement::default()
        },
    )
}

fn config(conditions: bool) -> Config {
    let mut cfg = Config {
        on_timeout: OnTimeout::Replace,
        ..Config::default()
    };
    if conditions {
        cfg.conditions = vec![CriticalCondition {
            type_: "NetworkReady".into(),
            status: "True".into(),
            node_selector: None,
        }];
    }
    cfg
}

/// The cluster, its router's live gates, and the decider fed as the
/// router's change feed feeds it.
struct World {
    run: Run,
    gates: BTreeSet<String>,
    decider: Replacer,
    rng: Rng,
}

impl World {
    fn new(seed: u64) -> World {
        let mut run = Run::new(config(true), ts(NOW));
        run.may_write = false;
        run.index.daemonsets = vec![Arc::new(cni()), Arc::new(gpu(true))];
        let mut w = World {
            run,
            gates: BTreeSet::new(),
            decider: Replacer::default(),
            rng: Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1),
        };
        w.feed(Input::Changed(Change::Everything));
        w
    }

    fn feed(&mut self, input: Input) {
        self.run.step(&mut self.decider, input);
    }

    /// The router publishes a pod change only for a node with no live gate.
    fn pods_changed(&mut self, node: &str) {
        if !self.gates.contains(node) {
            self.feed(Input::Changed(Change::Pods { node: node.into() }));
        }
    }

    /// Every node the configuration gates has a gate (the router asks for
    /// one when it sees such a node, and at a reload).
    fn start_gates(&mut self) {
        for n in self.run.index.nodes.values() {
            if self.run.config.gates(n) {
                self.gates.insert(n.name.clone());
            }
        }
    }

    fn stop_gate(&mut self, name: &str) {
        if self.gates.remove(name) {
            self.feed(Input::Changed(Change::GateStopped { node: name.into() }));
        }
    }

    fn step(&mut self) {
        match self.rng.below(12) {
            0..=2 => self.upsert_node(),
            3 => {
                let name = self.rng.pick(&NAMES);
                if self.run.index.nodes.contains_key(name) {
                    let input = self.run.index.delete(name);
                    self.feed(input);
                    // The gate stops when its node goes.
                    self.stop_gate(name);
                }
            }
            4..=6 => self.upsert_pod(),
            7 => {
                if !self.run.index.pods.is_empty() {
                    let at = self.rng.below(self.run.index.pods.len());
                    let node = self.run.index.pods.remove(at).node_name.to_string();
                    self.pods_changed(&node);
                }
            }
            8 => {
                // A gate stops once its node carries no managed taint.
                let stoppable: Vec<String> = self
                    .gates
                    .iter()
                    .filter(|g| {
                        !self
                            .run
                            .index
                            .nodes
                            .get(g.as_str())
                            .is_some_and(|n| self.run.config.gates(n))
                    })
                    .cloned()
                    .collect();
                if !stoppable.is_empty() {
                    let name = stoppable[self.rng.below(stoppable.len())].clone();
                    self.stop_gate(&name);
                }
            }
            9 => {
                // A DaemonSet added, removed or changed.
                let tolerant = self.rng.chance(50);
                let dss = &mut self.run.index.daemonsets;
                match dss.iter().position(|d| d.name == "gpu") {
                    Some(at) if self.rng.chance(50) => {
                        dss.remove(at);
                    }
                    Some(at) => dss[at] = Arc::new(gpu(tolerant)),
                    None => dss.push(Arc::new(gpu(tolerant))),
                }
                self.feed(Input::Changed(Change::Everything));
            }
            10 => {
                // A reload: the critical condition on or off.
                let on = self.run.config.conditions.is_empty();
                self.run.config = config(on);
                self.start_gates();
                self.feed(Input::Changed(Change::Everything));
            }
            _ => self.feed(Input::Tick),
        }
    }

    fn upsert_node(&mut self) {
        let name = self.rng.pick(&NAMES);
        let taints = if self.rng.chance(50) {
            vec![taint(DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE)]
        } else {
            Vec::new()
        };
        let labels: &[(&str, &str)] = if self.rng.chance(40) {
            &[("pool", "gpu")]
        } else {
            &[]
        };
        let mut n = mk_node(name, labels, taints);
        n.created = ts(CREATED);
        n.ignored = self.rng.chance(15);
        if self.rng.chance(60) {
            n.replace.timed_out = Some(ts(CREATED + 120));
        }
        if self.rng.chance(15) {
            n.replace.requested = Some(ts(CREATED + 200));
        }
        let status = if self.rng.chance(50) { "True" } else { "False" };
        n.conditions.insert(
            "NetworkReady".into(),
            NodeCondition {
                status: status.into(),
                since: None,
            },
        );
        let gated = self.run.config.gates(&n);
        let input = self.run.index.upsert(n);
        if gated {
            self.gates.insert(name.to_string());
        }
        self.feed(input);
    }

    fn upsert_pod(&mut self) {
        let node = self.rng.pick(&NAMES);
        let ds = if self.rng.chance(60) {
            Arc::new(cni())
        } else {
            Arc::new(gpu(true))
        };
        let k = self.rng.below(2);
        let mut p = ds_pod(&format!("{}-{node}-{k}", ds.name), node, &ds);
        p.ready = self.rng.chance(50);
        p.terminating = self.rng.chance(15);
        let pods = &mut self.run.index.pods;
        match pods.iter().position(|q| q.uid == p.uid) {
            Some(at) => pods[at] = Arc::new(p),
            None => pods.push(Arc::new(p)),
        }
        self.pods_changed(node);
    }

    /// What a look judges, against a count from scratch; and the nodes
    /// recounted at each look are exactly those whose gate lives.
    fn check(&mut self, seed: u64, step: usize) {
        let cx = Context {
            view: &self.run.index,
            config: &self.run.config,
            now: Now::local(self.run.now),
            may_write: false,
        };
        let counts = self.decider.counts(&cx);
        counts.refresh(&cx);
        let members = [
            MemberId::DaemonSet("infra/cni".into()),
            MemberId::DaemonSet("infra/gpu".into()),
            MemberId::Condition("NetworkReady".into()),
        ];
        for id in &members {
            assert_eq!(
                counts.spread(id, &cx),
                from_scratch(id, &cx),
                "seed {seed}, step {step}: {id}"
            );
        }
        let unheard: BTreeSet<String> = counts.unheard.iter().cloned().collect();
        assert_eq!(unheard, self.gates, "seed {seed}, step {step}: unheard");
    }
}

#[test]
fn the_counts_kept_from_the_feed_equal_a_count_from_scratch() {
    for seed in 0..300 {
        let mut w = World::new(seed);
        for step in 0..80 {
            w.step();
            w.check(seed, step);
        }
    }
}

/// The check itself: a pod change the decider never hears of on a node
/// with no gate is not in the counts, and the comparison sees it.
#[test]
fn a_pod_change_not_fed_shows_against_the_count_from_scratch() {
    let mut w = World::new(1);
    let input = w.run.index.upsert(mk_node("n0", &[], Vec::new()));
    w.feed(input);
    // The agent turns up Ready where the decider counted it missing.
    let p = ds_pod("cni-n0-0", "n0", &cni());
    assert!(p.ready);
    w.run.index.pods.push(Arc::new(p));
    let cx = Context {
        view: &w.run.index,
        config: &w.run.config,
        now: Now::local(w.run.now),
        may_write: false,
    };
    let id = MemberId::DaemonSet("infra/cni".into());
    let counts = w.decider.counts(&cx);
    counts.refresh(&cx);
    assert_ne!(counts.spread(&id, &cx), from_scratch(&id, &cx));
}
