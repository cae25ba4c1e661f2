//! `--max-unavailable` against re-gating and a condition rule at the same
//! instant: the closing budget is counted once, so the two together never
//! close more nodes than it allows (semantics.md §6.4, §6.5).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use crate::deciders::fixture::Index;
use crate::deciders::{Change, Context, Decider, Effect, Input, Now, TaintChange, TaintWrite};
use crate::gate::PatchOutcome;
use crate::rules::placement::TOLERATION_OP_EXISTS;
use crate::testutil::{
    condition_rule, mk_ds, mk_node, mk_pod, regate_config, template_with_tolerations, toleration,
    ts,
};
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::config::Config;
use crate::vocab::model::{DaemonSetInfo, NodeCondition, NodeInfo, PodInfo};

const GRACE: u64 = 60;
const NOW: i64 = 1000;
const KAPUT: &str = "example.com/kaput";

/// A node agent that tolerates everything, expected on every node.
fn agent() -> Arc<DaemonSetInfo> {
    let template = template_with_tolerations(vec![toleration("", TOLERATION_OP_EXISTS, "", "")]);
    Arc::new(mk_ds("infra", "cni", template))
}

fn pod(node: &str, ready: bool) -> Arc<PodInfo> {
    let ds = agent();
    let mut p = mk_pod(&format!("cni-{node}"), node, &ds.uid);
    p.namespace = ds.namespace.as_str().into();
    p.ready = ready;
    if !ready {
        // Broken well past the grace.
        p.ready_since = Some(ts(NOW - GRACE as i64 - 5)).into();
    }
    Arc::new(p)
}

fn node(name: &str, kaput: bool) -> NodeInfo {
    let mut n = NodeInfo {
        annotations_present: true,
        ..mk_node(name, &[], vec![])
    };
    if kaput {
        let c = NodeCondition {
            status: "True".to_string().into(),
            since: Some(ts(0)),
        };
        n.conditions.insert("Kaput".to_string().into(), c);
    }
    n
}

/// Re-gating and one condition rule, each with a budget of its own far
/// from used up, under `--max-unavailable 1`.
fn config() -> Config {
    let mut cfg = regate_config(GRACE, false, MaxUnavailable::Count(5));
    cfg.condition_taints = vec![condition_rule(
        "kaput",
        "Kaput",
        KAPUT,
        Some(MaxUnavailable::Count(5)),
    )];
    cfg.max_unavailable = Some(MaxUnavailable::Count(1));
    cfg
}

/// Four managed nodes, none closed: `a`'s agent has been broken past the
/// grace (due for a re-gate), `b` matches the rule, `c` and `d` are fine.
fn index() -> Index {
    let mut index = Index::default();
    index.daemonsets.push(agent());
    for (name, kaput, ready) in [
        ("a", false, false),
        ("b", true, true),
        ("c", false, true),
        ("d", false, true),
    ] {
        index.upsert(node(name, kaput));
        index.pods.push(pod(name, ready));
    }
    index
}

/// What the shells run against: the index as the node watch has it, the
/// nodes as a fresh read finds them, the configuration and the time.
struct World {
    watch: Index,
    api: Index,
    config: Config,
    now: i64,
}

impl World {
    fn new() -> Self {
        let watch = index();
        World {
            api: watch.clone(),
            watch,
            config: config(),
            now: NOW,
        }
    }
}

/// Runs `input` through each shell in turn, the way the decider shell does
/// (every effect carried out, each answer fed back before the next), with
/// the node watch delivering nothing meanwhile: a fresh read answers the
/// node as `world.api` holds it, and every write is applied. Returns the
/// writes sent.
fn step_all(shells: &mut [Box<dyn Decider>], world: &World, input: &Input) -> Vec<TaintWrite> {
    let cx = Context {
        view: &world.watch,
        config: &world.config,
        now: Now::local(ts(world.now)),
        may_write: true,
    };
    let mut sent = Vec::new();
    for shell in shells.iter_mut() {
        let mut effects: VecDeque<Effect> = shell.decide(input.clone(), &cx).into();
        while let Some(effect) = effects.pop_front() {
            let answer = match effect {
                Effect::ReadNode { node } => Input::NodeRead {
                    read: Ok(world.api.nodes.get(&node).map(|n| Box::new((**n).clone()))),
                    node,
                },
                Effect::Write(write) => {
                    sent.push(write.clone());
                    Input::Wrote {
                        write,
                        outcome: PatchOutcome::Applied,
                    }
                }
                _ => continue,
            };
            effects.extend(shell.decide(answer, &cx));
        }
    }
    sent
}

/// The nodes `writes` close: those a taint is put on.
fn closed_by(writes: &[TaintWrite]) -> BTreeSet<&str> {
    writes
        .iter()
        .filter(|w| matches!(w.change, TaintChange::Add { .. }))
        .map(|w| w.node.as_str())
        .collect()
}

/// The re-gater and a rule each want the one place left at the same
/// instant, before the watch shows either's write: one of them gets it.
#[test]
fn regate_and_a_rule_at_once_close_no_more_than_max_unavailable() {
    let world = World::new();
    let mut shells = super::shells();
    let sent = step_all(&mut shells, &world, &Input::Changed(Change::Everything));
    let closed = closed_by(&sent);
    assert!(
        closed.len() <= 1,
        "--max-unavailable 1 with no node closed lets one more node close, \
         but these writes closed {closed:?}: {sent:?}"
    );
    assert_eq!(closed.len(), 1, "the one place is taken: {sent:?}");
}

/// A rule's add the watch does not show yet holds the last place against a
/// re-gate due a step later: the re-gate is refused, naming
/// `--max-unavailable`.
#[test]
fn a_rules_add_out_holds_the_last_place_against_a_later_regate() {
    let mut world = World::new();
    // `a`'s agent is Ready at first: only the rule wants a place.
    world.watch.pods.retain(|p| p.node_name != "a");
    world.watch.pods.push(pod("a", true));
    let mut shells = super::shells();
    let sent = step_all(&mut shells, &world, &Input::Changed(Change::Everything));
    assert_eq!(closed_by(&sent), BTreeSet::from(["b"]), "{sent:?}");
    // `a`'s agent breaks, past the grace; the watch still shows `b` open.
    world.watch.pods.retain(|p| p.node_name != "a");
    world.watch.pods.push(pod("a", false));
    let input = Input::Changed(Change::Pods { node: "a".into() });
    let sent = step_all(&mut shells, &world, &input);
    assert!(closed_by(&sent).is_empty(), "{sent:?}");
}

/// A place held for a re-gate's fresh read goes to the rule once the read
/// finds nothing to re-gate (here: the node is gone): the rule's add waits
/// at most a retry.
#[test]
fn a_place_held_for_a_regate_that_does_not_happen_goes_to_the_rule() {
    let mut world = World::new();
    world.api.nodes.remove("a");
    let mut shells = super::shells();
    let sent = step_all(&mut shells, &world, &Input::Changed(Change::Everything));
    assert!(closed_by(&sent).is_empty(), "{sent:?}");
    world.now = crate::deciders::retry_after(ts(NOW)).as_second();
    let sent = step_all(&mut shells, &world, &Input::Tick);
    assert_eq!(closed_by(&sent), BTreeSet::from(["b"]), "{sent:?}");
}
