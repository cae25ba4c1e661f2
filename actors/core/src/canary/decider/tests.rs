use std::sync::Arc;

use super::*;
use crate::canary::{CANARY_LABEL, label_value, pod_name};
use crate::deciders::fixture::{Run, asked};
use crate::rules::placement::{DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE};
use crate::testutil::{mk_node, mk_pod, taint, ts};
use crate::vocab::config::Config;

const NOW: i64 = 1000;

fn config(cap: usize) -> Config {
    Config {
        canary: Some(CanaryConfig {
            namespace: "nodegate".into(),
            probe: false,
            max_in_flight: cap,
        }),
        ..Config::default()
    }
}

fn gated(name: &str) -> crate::vocab::model::NodeInfo {
    let mut n = mk_node(
        name,
        &[],
        vec![taint(DEFAULT_MANAGED_TAINT_KEY, EFFECT_NO_SCHEDULE)],
    );
    n.uid = format!("uid-{name}");
    n
}

fn open(name: &str) -> crate::vocab::model::NodeInfo {
    let mut n = mk_node(name, &[], vec![]);
    n.uid = format!("uid-{name}");
    n
}

fn canary(node: &str) -> PodInfo {
    let mut pod = mk_pod(&pod_name(node), node, &format!("uid-{node}"));
    pod.uid = format!("canary-uid-{node}").into();
    pod.namespace = "nodegate".into();
    pod.labels
        .insert(CANARY_LABEL.into(), label_value(node).into());
    pod.phase = "Pending".into();
    pod.ready = false;
    pod.sandbox_ready = false;
    pod
}

fn creates(effects: &[Effect]) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CreateCanary(c) => Some(c.node.as_str()),
            _ => None,
        })
        .collect()
}

fn deletes(effects: &[Effect]) -> Vec<(&str, Option<&str>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeleteCanary(d) => Some((d.name.as_str(), d.uid.as_deref())),
            _ => None,
        })
        .collect()
}

fn forced(effects: &[Effect]) -> Vec<bool> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DeleteCanary(d) => Some(d.force),
            _ => None,
        })
        .collect()
}

/// A decider that has started and listed `listed`.
fn started(run: &Run, listed: Vec<PodInfo>) -> (Canaries, Vec<Effect>) {
    let mut c = Canaries::default();
    let first = run.step(&mut c, Input::Changed(Change::Everything));
    assert_eq!(
        first,
        [Effect::ListCanaries, Effect::LookAgainAt(ts(NOW + 30))]
    );
    let out = run.step(&mut c, Input::CanariesListed(Ok(listed)));
    (c, out)
}

fn answer_creates(run: &Run, c: &mut Canaries, effects: &[Effect]) -> Vec<Effect> {
    let mut out = Vec::new();
    for e in effects {
        if let Effect::CreateCanary(create) = e {
            out.extend(run.step(
                c,
                Input::CanaryCreated {
                    create: create.clone(),
                    outcome: PatchOutcome::Applied,
                },
            ));
        }
    }
    out
}

#[test]
fn nothing_is_created_before_the_list_of_existing_canaries_answers() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let mut c = Canaries::default();
    let out = run.step(&mut c, Input::Changed(Change::Everything));
    assert!(creates(&out).is_empty());
    assert!(out.contains(&Effect::ListCanaries));
    // A node change before the answer creates nothing either.
    let change = run.index.upsert(gated("n2"));
    assert!(creates(&run.step(&mut c, change)).is_empty());
}

#[test]
fn one_canary_per_gated_node_and_none_on_an_open_one() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    run.index.upsert(gated("n2"));
    run.index.upsert(open("n3"));
    let (mut c, out) = started(&run, vec![]);
    assert_eq!(creates(&out), ["n1", "n2"]);
    let Some(Effect::CreateCanary(first)) =
        out.iter().find(|e| matches!(e, Effect::CreateCanary(_)))
    else {
        panic!("no create in {out:?}");
    };
    assert_eq!(first.name, "nodegate-canary-n1");
    assert_eq!(first.node_uid, "uid-n1");
    assert_eq!(first.label, "n1");
    answer_creates(&run, &mut c, &out);
    // Seen again (another change of the node) before the index shows the
    // pod: not created twice.
    let change = run.index.upsert(gated("n1"));
    assert!(creates(&run.step(&mut c, change)).is_empty());
}

#[test]
fn the_cap_holds_the_rest_back_until_a_canary_goes() {
    let mut run = Run::new(config(2), ts(NOW));
    for n in ["n1", "n2", "n3"] {
        run.index.upsert(gated(n));
    }
    let (mut c, out) = started(&run, vec![]);
    assert_eq!(creates(&out), ["n1", "n2"]);
    assert_eq!(c.waiting().collect::<Vec<_>>(), ["n3"]);
    answer_creates(&run, &mut c, &out);
    run.index.pods.push(Arc::new(canary("n1")));
    run.index.pods.push(Arc::new(canary("n2")));
    let out = run.step(&mut c, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(creates(&out).is_empty());
    // n1 opens: its canary is deleted, but the slot is free only once the
    // pod is gone.
    let change = run.index.upsert(open("n1"));
    let out = run.step(&mut c, change);
    assert_eq!(
        deletes(&out),
        [("nodegate-canary-n1", Some("canary-uid-n1"))]
    );
    assert!(creates(&out).is_empty());
    run.index.pods.retain(|p| p.node_name != "n1");
    let out = run.step(&mut c, Input::Changed(Change::Pods { node: "n1".into() }));
    assert_eq!(creates(&out), ["n3"]);
    assert_eq!(c.in_flight(), 2);
}

#[test]
fn the_list_finds_canaries_of_open_and_vanished_nodes_and_deletes_them() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    run.index.upsert(open("n2"));
    // n3 no longer exists; nor does the index show its canary.
    run.index.pods.push(Arc::new(canary("n1")));
    run.index.pods.push(Arc::new(canary("n2")));
    let (_, out) = started(&run, vec![canary("n1"), canary("n2"), canary("n3")]);
    let mut gone = deletes(&out);
    gone.sort_unstable();
    assert_eq!(
        gone,
        [
            ("nodegate-canary-n2", Some("canary-uid-n2")),
            ("nodegate-canary-n3", Some("canary-uid-n3")),
        ]
    );
    assert!(creates(&out).is_empty(), "n1 has its canary: {out:?}");
}

#[test]
fn a_canary_goes_when_its_node_opens_ends_or_is_deleted() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    run.index.upsert(gated("n2"));
    run.index.pods.push(Arc::new(canary("n1")));
    run.index.pods.push(Arc::new(canary("n2")));
    let (mut c, out) = started(&run, vec![canary("n1"), canary("n2")]);
    assert!(deletes(&out).is_empty() && creates(&out).is_empty());
    let change = run.index.upsert(open("n1"));
    let out = run.step(&mut c, change);
    assert_eq!(
        deletes(&out),
        [("nodegate-canary-n1", Some("canary-uid-n1"))]
    );
    assert_eq!(forced(&out), [false], "the kubelet stops it gracefully");
    let change = run.index.delete("n2");
    let out = run.step(&mut c, change);
    assert_eq!(
        deletes(&out),
        [("nodegate-canary-n2", Some("canary-uid-n2"))]
    );
    assert_eq!(
        forced(&out),
        [true],
        "no kubelet will finish a graceful delete"
    );
    // A delete out is not sent again.
    let again = run.step(&mut c, Input::Changed(Change::Pods { node: "n2".into() }));
    assert!(deletes(&again).is_empty());
}

#[test]
fn a_canary_stuck_terminating_on_a_gone_node_is_forced_once() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let mut dying = canary("n1");
    dying.terminating = true;
    run.index.pods.push(Arc::new(dying.clone()));
    let (mut c, out) = started(&run, vec![]);
    assert!(deletes(&out).is_empty(), "being deleted already: {out:?}");
    let change = run.index.delete("n1");
    let out = run.step(&mut c, change);
    assert_eq!(
        deletes(&out),
        [("nodegate-canary-n1", Some("canary-uid-n1"))]
    );
    assert_eq!(forced(&out), [true]);
    let Some(Effect::DeleteCanary(delete)) = out
        .into_iter()
        .find(|e| matches!(e, Effect::DeleteCanary(_)))
    else {
        panic!("no delete");
    };
    run.step(
        &mut c,
        Input::CanaryDeleted {
            delete,
            outcome: PatchOutcome::Applied,
        },
    );
    let again = run.step(&mut c, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(deletes(&again).is_empty(), "forced once: {again:?}");
    // Gone from the index: the slot is free.
    run.index.pods.clear();
    run.step(&mut c, Input::Changed(Change::Pods { node: "n1".into() }));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn a_canary_created_but_not_yet_indexed_is_deleted_by_name_when_the_node_opens() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let (mut c, out) = started(&run, vec![]);
    answer_creates(&run, &mut c, &out);
    let change = run.index.upsert(open("n1"));
    assert_eq!(
        deletes(&run.step(&mut c, change)),
        [("nodegate-canary-n1", None)]
    );
}

#[test]
fn a_failed_canary_stays_for_its_backoff_then_is_replaced_doubling_each_time() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let mut failed = canary("n1");
    failed.phase = "Failed".into();
    failed.status_note = Some("OutOfpods".into());
    run.index.pods.push(Arc::new(failed.clone()));
    let (mut c, out) = started(&run, vec![failed.clone()]);
    assert!(deletes(&out).is_empty(), "kept for explain: {out:?}");
    assert!(out.contains(&Effect::Count(Tally::CanaryFailed)));
    assert!(asked(&out).contains(&ts(NOW + 5)));
    run.now = ts(NOW + 5);
    let out = run.step(&mut c, Input::Tick);
    assert_eq!(
        deletes(&out),
        [("nodegate-canary-n1", Some("canary-uid-n1"))]
    );
    // Gone: made again at once.
    run.index.pods.clear();
    let out = run.step(&mut c, Input::Changed(Change::Pods { node: "n1".into() }));
    assert_eq!(creates(&out), ["n1"]);
    answer_creates(&run, &mut c, &out);
    // The new one fails too: twice the wait.
    failed.uid = "second".into();
    run.index.pods.push(Arc::new(failed));
    let out = run.step(&mut c, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(deletes(&out).is_empty());
    assert!(asked(&out).contains(&ts(NOW + 5 + 10)));
}

#[test]
fn a_refused_create_is_tried_again_after_a_backoff() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let (mut c, out) = started(&run, vec![]);
    let Some(Effect::CreateCanary(create)) = out.first().cloned() else {
        panic!("{out:?}");
    };
    let out = run.step(
        &mut c,
        Input::CanaryCreated {
            create,
            outcome: PatchOutcome::Failed("pods \"nodegate-canary-n1\" is forbidden".into()),
        },
    );
    assert!(creates(&out).is_empty());
    assert!(asked(&out).contains(&ts(NOW + 5)));
    assert_eq!(c.in_flight(), 0, "a refused create holds no slot");
    run.now = ts(NOW + 5);
    assert_eq!(creates(&run.step(&mut c, Input::Tick)), ["n1"]);
}

#[test]
fn a_forged_canary_holds_nothing_and_is_not_touched() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let mut forged = canary("n1");
    forged.namespace = "tenant".into();
    run.index.pods.push(Arc::new(forged));
    let (_, out) = started(&run, vec![]);
    assert_eq!(creates(&out), ["n1"]);
    assert!(deletes(&out).is_empty());
}

#[test]
fn a_follower_decides_nothing_and_a_new_leader_starts_from_a_list() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    run.may_write = false;
    let mut c = Canaries::default();
    assert!(
        run.step(&mut c, Input::Changed(Change::Everything))
            .is_empty()
    );
    let change = run.index.upsert(gated("n2"));
    assert!(run.step(&mut c, change).is_empty());
    run.may_write = true;
    let out = run.step(&mut c, Input::MayWrite);
    assert!(out.contains(&Effect::ListCanaries), "{out:?}");
    assert!(creates(&out).is_empty());
    let out = run.step(&mut c, Input::CanariesListed(Ok(vec![])));
    assert_eq!(creates(&out), ["n1", "n2"]);
}

#[test]
fn suspend_creates_nothing_but_still_cleans_up() {
    let mut cfg = config(10);
    cfg.suspend = true;
    let mut run = Run::new(cfg, ts(NOW));
    run.index.upsert(gated("n1"));
    run.index.upsert(open("n2"));
    let (_, out) = started(&run, vec![canary("n2")]);
    assert!(creates(&out).is_empty());
    assert_eq!(
        deletes(&out),
        [("nodegate-canary-n2", Some("canary-uid-n2"))]
    );
}

#[test]
fn without_the_canary_key_the_decider_does_nothing() {
    let mut run = Run::new(Config::default(), ts(NOW));
    run.index.upsert(gated("n1"));
    let mut c = Canaries::default();
    assert!(
        run.step(&mut c, Input::Changed(Change::Everything))
            .is_empty()
    );
}

#[test]
fn a_failed_list_is_asked_again_shortly_and_nothing_is_decided_meanwhile() {
    let mut run = Run::new(config(10), ts(NOW));
    run.index.upsert(gated("n1"));
    let mut c = Canaries::default();
    run.step(&mut c, Input::Changed(Change::Everything));
    let out = run.step(
        &mut c,
        Input::CanariesListed(Err("pods is forbidden".into())),
    );
    assert!(creates(&out).is_empty());
    assert!(asked(&out).contains(&ts(NOW + 1)), "{out:?}");
    run.now = ts(NOW + 1);
    let out = run.step(&mut c, Input::Tick);
    assert_eq!(out.first(), Some(&Effect::ListCanaries), "{out:?}");
    let out = run.step(&mut c, Input::CanariesListed(Ok(vec![])));
    assert_eq!(creates(&out), ["n1"]);
}
