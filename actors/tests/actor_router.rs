//! The router's compact indexes, as plain synchronous tests: no actors are
//! running, so these exercise only what the watchers feed and what a gate or
//! the supervisor reads back.

#[path = "../core/tests/gate_support/mod.rs"]
mod gate_support;

use std::sync::Arc;

use gate_support::*;
use nodegate_actors::router::Router;
use nodegate_core::gate::Input;
use nodegate_core::testutil::{mk_pod, taint};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{NodeInfo, PodInfo, SliceInfo};

fn router() -> Router {
    Router::new(Arc::new(Config::default()))
}

#[test]
fn snapshot_holds_the_node_every_daemonset_and_only_that_nodes_pods() {
    let r = router();
    let (a, b) = (tolerant_ds("cilium"), tolerant_ds("csi"));
    r.node_upserted(gated_node());
    r.daemonset_upserted(a.clone());
    r.daemonset_upserted(b.clone());
    r.pod_upserted(ready_pod("cilium-1", &a));
    r.pod_upserted(mk_pod("cilium-2", "node-b", &a.uid));

    let Some(Input::Snapshot {
        node,
        mut daemonsets,
        pods,
    }) = r.snapshot(NODE)
    else {
        panic!("no snapshot for a known node");
    };
    assert_eq!(*node, gated_node());
    daemonsets.sort_by_key(|d| d.key());
    assert_eq!(daemonsets, vec![Arc::new(a), Arc::new(b)]);
    assert_eq!(
        pods.iter().map(|p| &*p.name).collect::<Vec<_>>(),
        vec!["cilium-1"]
    );
    assert!(r.snapshot("unknown").is_none());
}

#[test]
fn unbound_pods_are_not_indexed_and_deleted_pods_leave_the_index() {
    let r = router();
    let a = tolerant_ds("cilium");
    r.pod_upserted(PodInfo {
        node_name: String::new().into(),
        ..ready_pod("cilium-pending", &a)
    });
    r.pod_upserted(ready_pod("cilium-1", &a));
    assert!(r.pod(NODE, &"uid-cilium-1".into()).is_some());
    assert!(r.pod("", &"uid-cilium-pending".into()).is_none());
    r.pod_deleted(NODE, &"uid-cilium-1".into());
    assert!(r.pod(NODE, &"uid-cilium-1".into()).is_none());
}

#[test]
fn a_node_needs_a_gate_only_while_it_carries_a_managed_taint() {
    let r = router();
    r.node_upserted(node(vec![taint("example.com/other", "NoSchedule")]));
    assert!(!r.needs_gate(NODE));
    r.node_upserted(gated_node());
    assert!(r.needs_gate(NODE));
    r.node_deleted(NODE);
    assert!(!r.needs_gate(NODE));
    assert!(r.node(NODE).is_none());
}

#[test]
fn daemonsets_are_indexed_by_uid() {
    let r = router();
    let a = tolerant_ds("cilium");
    r.daemonset_upserted(a.clone());
    assert_eq!(r.daemonset(&a.uid).as_deref(), Some(&a));
    r.daemonset_deleted(&a.uid);
    assert_eq!(r.daemonset(&a.uid), None);
}

#[test]
fn nothing_is_gated_without_a_supervisor_or_before_sync() {
    let r = router();
    r.node_upserted(gated_node());
    r.mark_synced();
    assert!(r.is_synced());
    assert_eq!(r.gate_count(), 0);
    assert!(r.gated_nodes().is_empty());
}

#[test]
fn pods_bound_to_a_node_outlive_its_deletion_and_serve_a_node_recreated_under_that_name() {
    // Kubernetes keeps pods bound to a node name when the Node object is
    // deleted; a node re-created under the name finds them running.
    let r = router();
    let a = tolerant_ds("cilium");
    r.node_upserted(gated_node());
    r.daemonset_upserted(a.clone());
    r.pod_upserted(ready_pod("cilium-1", &a));
    r.node_deleted(NODE);
    assert!(r.snapshot(NODE).is_none(), "no node, no snapshot");
    assert!(r.pod(NODE, &"uid-cilium-1".into()).is_some());

    let recreated = NodeInfo {
        uid: "uid-node-a-2".into(),
        ..gated_node()
    };
    r.node_upserted(recreated);
    let Some(Input::Snapshot { pods, .. }) = r.snapshot(NODE) else {
        panic!("no snapshot for the re-created node");
    };
    assert_eq!(
        pods.iter().map(|p| &*p.name).collect::<Vec<_>>(),
        vec!["cilium-1"]
    );
}

#[test]
fn csi_drivers_reach_the_indexed_node_whichever_watch_comes_first() {
    let r = router();
    let drivers = |name: &str| r.node(name).and_then(|n| n.csi_drivers.clone());
    // The CSINode first: the node finds its drivers when it is indexed.
    r.csinode("early", Some(vec!["a.csi.example.com".into()]));
    r.node_upserted(NodeInfo {
        name: "early".into(),
        ..gated_node()
    });
    assert_eq!(
        drivers("early"),
        Some(vec!["a.csi.example.com".to_string()])
    );
    // The node first: none until its CSINode comes, then kept across
    // later versions of the node, and gone with the CSINode.
    r.node_upserted(gated_node());
    assert_eq!(drivers(NODE), None);
    r.csinode(NODE, Some(vec!["b.csi.example.com".into()]));
    assert_eq!(drivers(NODE), Some(vec!["b.csi.example.com".to_string()]));
    r.node_upserted(NodeInfo {
        resource_version: "2".into(),
        ..gated_node()
    });
    assert_eq!(drivers(NODE), Some(vec!["b.csi.example.com".to_string()]));
    r.csinode(NODE, None);
    assert_eq!(drivers(NODE), None);
}

#[test]
fn resource_slices_reach_the_indexed_node_whichever_watch_comes_first() {
    let r = router();
    let slice = |name: &str, generation: i64| SliceInfo {
        name: name.into(),
        driver: "gpu.example.com".into(),
        pool: "p".into(),
        generation,
        slice_count: 2,
        owner_uid: String::new(),
    };
    let names = |node: &str| {
        r.node(node)
            .map(|n| {
                n.resource_slices
                    .iter()
                    .map(|s| (s.name.clone(), s.generation))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    // A slice first: the node finds it when it is indexed.
    r.resource_slice_upserted("early", slice("e", 1));
    r.node_upserted(NodeInfo {
        name: "early".into(),
        ..gated_node()
    });
    assert_eq!(names("early"), vec![("e".to_string(), 1)]);
    // The node first: slices come and change (a new generation), are kept
    // across later versions of the node, in name order, and go.
    r.node_upserted(gated_node());
    assert_eq!(names(NODE), vec![]);
    r.resource_slice_upserted(NODE, slice("b", 1));
    r.resource_slice_upserted(NODE, slice("a", 1));
    r.resource_slice_upserted(NODE, slice("b", 2));
    r.node_upserted(NodeInfo {
        resource_version: "2".into(),
        ..gated_node()
    });
    assert_eq!(
        names(NODE),
        vec![("a".to_string(), 1), ("b".to_string(), 2)]
    );
    r.resource_slice_deleted(NODE, "a");
    assert_eq!(names(NODE), vec![("b".to_string(), 2)]);
    r.resource_slice_deleted(NODE, "b");
    assert_eq!(names(NODE), vec![]);
    // Another node's slices are not this one's.
    assert_eq!(names("early"), vec![("e".to_string(), 1)]);
}
