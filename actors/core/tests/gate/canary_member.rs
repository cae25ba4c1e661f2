//! The gate with the canary member (semantics.md §6.9): it waits for the
//! canary pod nodegate runs on the node, counts it Ready once its sandbox
//! is up (and its probe passes where configured), and never counts a
//! forgery. Every step is replay-checked.

use crate::gate_support::*;
use nodegate_core::canary::{CANARY_LABEL, label_value, pod_name};
use nodegate_core::gate::Input;
use nodegate_core::testutil::mk_pod;
use nodegate_core::vocab::config::{CanaryConfig, Config};
use nodegate_core::vocab::member::{MemberId, Readiness};
use nodegate_core::vocab::model::PodInfo;

fn canary_cfg(probe: bool) -> Config {
    let mut cfg = cfg();
    cfg.canary = Some(CanaryConfig {
        namespace: "nodegate".into(),
        probe,
        max_in_flight: 10,
    });
    cfg
}

fn canary(namespace: &str, uid: &str) -> PodInfo {
    let node = gated_node().name;
    let mut pod = mk_pod(&pod_name(&node), &node, &gated_node().uid);
    pod.uid = uid.into();
    pod.namespace = namespace.into();
    pod.labels
        .insert(CANARY_LABEL.into(), label_value(&node).into());
    pod.phase = "Pending".into();
    pod.ready = false;
    pod.sandbox_ready = false;
    pod
}

fn why(g: &Gate) -> String {
    match &g.state.members[&MemberId::Canary].readiness {
        Some(Readiness::Waiting { why, .. }) => why.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_node_waits_for_its_canarys_sandbox_and_opens_when_it_is_up() {
    let mut g = Gate::new(canary_cfg(false));
    let s = g.start(gated_node(), vec![], vec![]);
    assert!(patches(&s).is_empty(), "no canary yet");
    assert_eq!(MemberId::Canary.to_string(), "canary");
    assert_eq!("canary".parse::<MemberId>(), Ok(MemberId::Canary));
    assert!(
        why(&g).starts_with("no canary pod on the node yet"),
        "{}",
        why(&g)
    );
    let pod = canary("nodegate", "c1");
    let s = g.at(1).feed(Input::pod_upserted(pod.clone()));
    assert!(patches(&s).is_empty(), "Pending, no sandbox");
    assert!(why(&g).contains("has no sandbox yet"), "{}", why(&g));
    let mut up = pod;
    up.sandbox_ready = true;
    up.phase = "Running".into();
    let s = g.at(2).feed(Input::pod_upserted(up));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}

#[test]
fn with_a_probe_the_canary_must_also_be_ready() {
    let mut g = Gate::new(canary_cfg(true));
    let mut pod = canary("nodegate", "c1");
    pod.sandbox_ready = true;
    let s = g.start(gated_node(), vec![], vec![pod.clone()]);
    assert!(patches(&s).is_empty());
    assert!(why(&g).contains("readiness probe"), "{}", why(&g));
    pod.ready = true;
    let s = g.at(1).feed(Input::pod_upserted(pod));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}

#[test]
fn a_forged_canary_in_a_tenant_namespace_never_opens_the_node() {
    let mut g = Gate::new(canary_cfg(false));
    let mut forged = canary("tenant", "f1");
    forged.sandbox_ready = true;
    forged.ready = true;
    forged.phase = "Running".into();
    let s = g.start(gated_node(), vec![], vec![forged]);
    assert!(patches(&s).is_empty(), "{s:?}");
    assert!(why(&g).starts_with("no canary pod"), "{}", why(&g));
}

#[test]
fn a_failed_canary_is_explained_with_the_kubelets_words() {
    let mut g = Gate::new(canary_cfg(false));
    let mut pod = canary("nodegate", "c1");
    pod.phase = "Failed".into();
    pod.status_note = Some("OutOfpods: Node didn't have enough resource: pods".into());
    g.start(gated_node(), vec![], vec![pod]);
    assert_eq!(
        why(&g),
        "canary pod nodegate-canary-node-a failed: OutOfpods: Node didn't have enough resource: pods; nodegate replaces it after a backoff"
    );
}
