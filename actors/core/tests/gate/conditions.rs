//! The gate with the readiness signals of semantics.md §6.5, 6.7 beyond a
//! pod's Ready: a node condition as a member (`criticalConditions`), a CSI
//! DaemonSet waiting for its driver in the node's CSINode, and a pod's own
//! `nodegate.dev/ready` annotation. Every step is replay-checked.

use crate::gate_support::*;
use nodegate_core::gate::Input;
use nodegate_core::rules::conditions::CriticalCondition;
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::vocab::annotations::CSI_DRIVER as CSI_DRIVER_ANNOTATION;
use nodegate_core::vocab::member::{MemberId, Readiness};
use nodegate_core::vocab::model::NodeCondition;

fn network_ready() -> CriticalCondition {
    CriticalCondition {
        type_: "NetworkReady".into(),
        status: "True".into(),
        node_selector: None,
    }
}

fn with_condition(
    mut n: nodegate_core::vocab::model::NodeInfo,
    status: &str,
    rv: &str,
) -> nodegate_core::vocab::model::NodeInfo {
    n.conditions.insert(
        "NetworkReady".into(),
        NodeCondition {
            status: status.into(),
            since: None,
        },
    );
    n.resource_version = rv.into();
    n
}

#[test]
fn a_node_waits_for_its_critical_condition_and_opens_when_reported() {
    let mut cfg = cfg();
    cfg.conditions = vec![network_ready()];
    let mut g = Gate::new(cfg);
    let s = g.start(gated_node(), vec![], vec![]);
    assert!(patches(&s).is_empty(), "the condition is not reported yet");
    let id = MemberId::Condition("NetworkReady".into());
    assert_eq!(id.to_string(), "condition:NetworkReady");
    assert_eq!("condition:NetworkReady".parse::<MemberId>(), Ok(id.clone()));
    let Some(Readiness::Waiting { why, .. }) = &g.state.members[&id].readiness else {
        panic!("{:?}", g.state.members);
    };
    assert!(why.contains("Unknown"), "{why}");
    let s = g.at(1).feed(Input::NodeChanged(
        with_condition(gated_node(), "False", "2").into(),
    ));
    assert!(patches(&s).is_empty(), "False is not True");
    let s = g.at(2).feed(Input::NodeChanged(
        with_condition(gated_node(), "True", "3").into(),
    ));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}

#[test]
fn a_critical_condition_outside_its_node_selector_is_not_waited_for() {
    let mut cfg = cfg();
    let mut c = network_ready();
    c.node_selector = Some(LabelSelector::parse("zone=b").unwrap());
    cfg.conditions = vec![c];
    let mut g = Gate::new(cfg);
    let s = g.start(gated_node(), vec![], vec![]);
    assert_eq!(patches(&s).len(), 1, "node-a is in zone a");
}

#[test]
fn a_csi_daemonset_is_ready_only_once_the_csinode_lists_its_driver() {
    let mut ds = tolerant_ds("csi-node");
    ds.annotations.insert(
        CSI_DRIVER_ANNOTATION.into(),
        "ebs.csi.aws.com, efs.csi.aws.com".into(),
    );
    let pod = ready_pod("csi-node-x", &ds);
    let mut g = Gate::new(cfg());
    let s = g.start(gated_node(), vec![ds.clone()], vec![pod]);
    assert!(patches(&s).is_empty(), "no CSINode yet");
    let id = MemberId::daemonset(&ds);
    let Some(Readiness::Waiting { why, .. }) = &g.state.members[&id].readiness else {
        panic!("{:?}", g.state.members);
    };
    assert!(
        why.contains("ebs.csi.aws.com, efs.csi.aws.com") && why.contains("no CSINode"),
        "{why}"
    );
    let mut n = gated_node();
    n.csi_drivers = Some(vec!["ebs.csi.aws.com".into()]);
    n.resource_version = "2".into();
    let s = g.at(1).feed(Input::NodeChanged(n.clone().into()));
    assert!(patches(&s).is_empty(), "one of two drivers");
    n.csi_drivers = Some(vec!["efs.csi.aws.com".into(), "ebs.csi.aws.com".into()]);
    n.resource_version = "3".into();
    let s = g.at(2).feed(Input::NodeChanged(n.into()));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}

#[test]
fn a_pod_annotated_ready_satisfies_its_member_despite_its_probe() {
    let ds = tolerant_ds("warmup");
    let mut pod = unready_pod("warmup-x", &ds);
    let mut g = Gate::new(cfg());
    let s = g.start(gated_node(), vec![ds], vec![pod.clone()]);
    assert!(patches(&s).is_empty());
    pod.ready_annotation = true;
    let s = g.at(1).feed(Input::pod_upserted(pod));
    assert_eq!(patches(&s).len(), 1, "{s:?}");
}
