use std::time::Duration;

use super::*;
use crate::deciders::fixture::{Run, reasons, writes};
use crate::testutil::{mk_node, taint, ts};
use crate::vocab::config::Config;

const WINDOW: Duration = Duration::from_secs(60);

fn run() -> Run {
    Run::new(Config::default(), ts(10))
}

fn pod(ns: &str, name: &str, kind: Option<&str>) -> BoundPod {
    BoundPod {
        namespace: ns.into(),
        name: name.into(),
        controller_kind: kind.map(Into::into),
        mirror: false,
    }
}

fn lists(effects: &[Effect]) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ListPods { node } => Some(node.as_str()),
            _ => None,
        })
        .collect()
}

fn new_node(name: &str) -> NodeInfo {
    NodeInfo {
        created: ts(5),
        annotations_present: true,
        ..mk_node(name, &[], vec![])
    }
}

fn listed(node: &str, pods: Vec<BoundPod>) -> Input {
    Input::PodsListed {
        node: node.into(),
        pods: Ok(pods),
    }
}

#[test]
fn a_young_untainted_node_is_listed_then_tainted_once() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    assert_eq!(lists(&r.step(&mut net, change)), ["n1"]);
    let daemon = pod("kube-system", "cni-abc", Some("DaemonSet"));
    let out = r.step(&mut net, listed("n1", vec![daemon]));
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    let write = w[0].clone();
    assert_eq!(write.origin, Origin::Net);
    assert_eq!(write.resource_version, "1");
    match &write.change {
        TaintChange::Add {
            taint: t,
            existing,
            annotations,
            annotations_present,
            ..
        } => {
            assert_eq!(*t, taint("nodegate.dev/initializing", "NoSchedule"));
            assert_eq!(*existing, 0);
            assert!(annotations.is_empty());
            assert!(*annotations_present);
        }
        other => panic!("not an add: {other:?}"),
    }
    let out = r.step(
        &mut net,
        Input::Wrote {
            write,
            outcome: PatchOutcome::Applied,
        },
    );
    assert_eq!(reasons(&out), ["LateTaint (own write)"]);
    assert!(out.contains(&Effect::Count(Tally::LateTaint("tainted"))));
    assert!(net.candidates().is_empty());
    // Someone takes the taint off again: the node was decided, and stays so.
    let change = r.index.upsert(new_node("n1"));
    assert!(r.step(&mut net, change).is_empty());
}

#[test]
fn a_node_with_a_workload_pod_is_left_alone_with_a_warning() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    r.step(&mut net, change);
    let pods = vec![
        pod("kube-system", "kube-proxy", Some("DaemonSet")),
        pod("shop", "web-1", Some("ReplicaSet")),
    ];
    let out = r.step(&mut net, listed("n1", pods));
    assert!(writes(&out).is_empty());
    assert_eq!(reasons(&out), ["LateTaintSkipped"]);
    let Some(Effect::RecordEvent(ev)) = out.iter().find(|e| matches!(e, Effect::RecordEvent(_)))
    else {
        panic!("no Event: {out:?}");
    };
    assert!(ev.note.contains("shop/web-1"), "{}", ev.note);
    assert!(out.contains(&Effect::Count(Tally::LateTaint("skipped"))));
    let change = r.index.upsert(new_node("n1"));
    assert!(lists(&r.step(&mut net, change)).is_empty());
}

#[test]
fn nodes_the_net_does_not_take() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let old = NodeInfo {
        created: ts(10) - jiff::SignedDuration::from_secs(61),
        ..new_node("old")
    };
    let gated = NodeInfo {
        taints: vec![taint("nodegate.dev/initializing", "NoSchedule")],
        ..new_node("gated")
    };
    let ignored = NodeInfo {
        ignored: true,
        ..new_node("ignored")
    };
    let opened = NodeInfo {
        opened_before: true,
        ..new_node("opened")
    };
    for node in [old, gated, ignored, opened] {
        let change = r.index.upsert(node);
        assert!(r.step(&mut net, change).is_empty());
    }
    assert!(net.candidates().is_empty());
}

#[test]
fn a_follower_keeps_candidates_and_lists_them_once_it_may_write() {
    let mut r = run();
    r.may_write = false;
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    let out = r.step(&mut net, change);
    assert!(lists(&out).is_empty());
    assert_eq!(out, [Effect::LookAgainAt(retry_after(ts(10)))]);
    assert_eq!(net.candidates(), ["n1"]);
    r.may_write = true;
    assert_eq!(lists(&r.step(&mut net, Input::MayWrite)), ["n1"]);
    // In flight: not listed twice.
    assert!(lists(&r.step(&mut net, Input::Tick)).is_empty());
}

#[test]
fn a_candidate_tainted_meanwhile_is_dropped() {
    let mut r = run();
    r.may_write = false;
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    r.step(&mut net, change);
    let tainted = NodeInfo {
        taints: vec![taint("nodegate.dev/initializing", "NoSchedule")],
        resource_version: "2".into(),
        ..new_node("n1")
    };
    let change = r.index.upsert(tainted);
    r.step(&mut net, change);
    assert!(net.candidates().is_empty());
}

#[test]
fn a_conflict_waits_for_the_next_version_and_a_failure_is_counted() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    r.step(&mut net, change);
    let write = writes(&r.step(&mut net, listed("n1", vec![])))[0].clone();
    let out = r.step(
        &mut net,
        Input::Wrote {
            write: write.clone(),
            outcome: PatchOutcome::Conflict,
        },
    );
    // The refused version is not tried again (the answer would be the
    // same): nothing until the index shows the node's next version.
    assert!(lists(&out).is_empty(), "{out:?}");
    assert!(lists(&r.step(&mut net, Input::Tick)).is_empty());
    let same = r.index.upsert(new_node("n1"));
    assert!(lists(&r.step(&mut net, same)).is_empty());
    let next = NodeInfo {
        resource_version: "2".into(),
        ..new_node("n1")
    };
    let change = r.index.upsert(next);
    assert_eq!(lists(&r.step(&mut net, change)), ["n1"]);
    let write = writes(&r.step(&mut net, listed("n1", vec![])))[0].clone();
    assert_eq!(write.resource_version, "2");
    let out = r.step(
        &mut net,
        Input::Wrote {
            write,
            outcome: PatchOutcome::Failed("boom".into()),
        },
    );
    assert!(out.contains(&Effect::Count(Tally::LateTaint("failed"))));
    // Not at once: at the next look.
    assert!(lists(&out).is_empty(), "{out:?}");
    assert!(out.contains(&Effect::LookAgainAt(retry_after(ts(10)))));
    assert!(reasons(&out).is_empty());
    assert_eq!(lists(&r.step(&mut net, Input::Tick)), ["n1"]);
}

#[test]
fn a_dry_run_writes_nothing_and_records_nothing() {
    let mut r = run();
    r.config.dry_run = true;
    r.may_write = false;
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    assert_eq!(lists(&r.step(&mut net, change)), ["n1"]);
    let out = r.step(&mut net, listed("n1", vec![]));
    assert!(writes(&out).is_empty());
    assert!(reasons(&out).is_empty());
    assert!(
        matches!(&out[..], [Effect::Log { level: Level::Info, message, .. }] if message.contains("would")),
        "{out:?}"
    );
}

#[test]
fn a_failed_list_is_tried_again() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    r.step(&mut net, change);
    let out = r.step(
        &mut net,
        Input::PodsListed {
            node: "n1".into(),
            pods: Err("timeout".into()),
        },
    );
    assert!(out.contains(&Effect::Count(Tally::LateTaint("failed"))));
    assert!(lists(&out).is_empty(), "{out:?}");
    assert_eq!(lists(&r.step(&mut net, Input::Tick)), ["n1"]);
}

#[test]
fn a_write_refused_for_leadership_waits_for_the_next_look() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    r.step(&mut net, change);
    let write = writes(&r.step(&mut net, listed("n1", vec![])))[0].clone();
    let out = r.step(
        &mut net,
        Input::Wrote {
            write,
            outcome: PatchOutcome::NotLeader,
        },
    );
    assert!(lists(&out).is_empty(), "{out:?}");
    assert_eq!(out, [Effect::LookAgainAt(retry_after(ts(10)))]);
    assert_eq!(lists(&r.step(&mut net, Input::Tick)), ["n1"]);
}

#[test]
fn nodes_indexed_before_the_lists_were_in_are_offered_then() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    // The shell drops changes before sync: the index holds the node, the
    // net has not seen it.
    r.index.upsert(new_node("early"));
    r.index.upsert(NodeInfo {
        taints: vec![taint("nodegate.dev/initializing", "NoSchedule")],
        ..new_node("gated")
    });
    let out = r.step(&mut net, Input::Changed(Change::Everything));
    assert_eq!(lists(&out), ["early"]);
    assert_eq!(net.candidates(), ["early"]);
}

#[test]
fn suspend_holds_the_net_like_every_writer() {
    let mut r = run();
    r.config.suspend = true;
    let mut net = Net::new(WINDOW);
    let change = r.index.upsert(new_node("n1"));
    let out = r.step(&mut net, change);
    assert!(lists(&out).is_empty(), "{out:?}");
    assert_eq!(out, [Effect::LookAgainAt(retry_after(ts(10)))]);
    assert_eq!(net.candidates(), ["n1"], "kept for when it is lifted");
    r.config.suspend = false;
    assert_eq!(lists(&r.step(&mut net, Input::Tick)), ["n1"]);
}

#[test]
fn a_suspended_new_node_is_not_listed() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let suspended = NodeInfo {
        suspended: true,
        ..new_node("n1")
    };
    let change = r.index.upsert(suspended);
    assert!(lists(&r.step(&mut net, change)).is_empty());
    let change = r.index.upsert(new_node("n1"));
    assert_eq!(lists(&r.step(&mut net, change)), ["n1"]);
}

/// Hardening: a node created with the startup taint (the
/// webhook's) whose taint an operator removes by hand, before nodegate's
/// `opened-by: external` reaches the index, is not tainted again.
#[test]
fn a_taint_removed_by_hand_is_not_put_back() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let gated = NodeInfo {
        taints: vec![taint("nodegate.dev/initializing", "NoSchedule")],
        ..new_node("n1")
    };
    let change = r.index.upsert(gated);
    assert!(r.step(&mut net, change).is_empty());
    let by_hand = NodeInfo {
        resource_version: "2".into(),
        ..new_node("n1")
    };
    let change = r.index.upsert(by_hand);
    assert!(r.step(&mut net, change).is_empty());
    assert!(net.candidates().is_empty());
    assert!(lists(&r.step(&mut net, Input::Tick)).is_empty());
}

/// The same after a restart or a leader change: a new net that never saw
/// the taint finds `opened-at` (the gate's `opened-by: external` record) and
/// leaves the node alone.
#[test]
fn a_node_recorded_as_opened_externally_is_left_alone_by_a_new_net() {
    let mut r = run();
    let mut net = Net::new(WINDOW);
    let recorded = NodeInfo {
        opened_before: true,
        ..new_node("n1")
    };
    r.index.upsert(recorded);
    assert!(
        r.step(&mut net, Input::Changed(Change::Everything))
            .is_empty()
    );
    assert!(net.candidates().is_empty());
}

/// The net adds the taint chosen for the node's labels, not the first
/// `--taint`; a node carrying a rule's taint is gated already.
#[test]
fn the_net_adds_the_taint_chosen_for_the_labels() {
    use crate::rules::placement::ManagedTaint;
    use crate::rules::startup::{Autoscaler, KARPENTER_TAINT_KEY, StartupTaints};
    let mut cfg = Config::default();
    let first = cfg.placement.managed_taints[0].clone();
    cfg.startup = StartupTaints::new(Vec::new(), &[Autoscaler::Auto], first.clone());
    cfg.placement.managed_taints = cfg.startup.managed(&[first]);
    let mut r = Run::new(cfg, ts(10));
    let mut net = Net::new(WINDOW);
    let mut node = new_node("k1");
    node.labels
        .insert("karpenter.sh/nodepool".into(), "default".into());
    let change = r.index.upsert(node.clone());
    assert_eq!(lists(&r.step(&mut net, change)), ["k1"]);
    let out = r.step(&mut net, listed("k1", vec![]));
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    match &w[0].change {
        TaintChange::Add { taint: t, .. } => {
            assert_eq!(*t, taint(KARPENTER_TAINT_KEY, "NoSchedule"));
        }
        other => panic!("not an add: {other:?}"),
    }
    // Registered by Karpenter with the readiness key already: no second one.
    let mut net = Net::new(WINDOW);
    node.name = "k2".into();
    node.uid = "k2".into();
    node.taints = vec![ManagedTaint::new(KARPENTER_TAINT_KEY, "NoSchedule").to_taint()];
    let change = r.index.upsert(node);
    assert!(lists(&r.step(&mut net, change)).is_empty());
}
