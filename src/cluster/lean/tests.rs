//! The fixtures are a node and a DaemonSet's pod as kube-apiserver v1.36.3
//! served them to a watch in deploy/local (kwok nodes), managedFields and all.

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::de::DeserializeOwned;

use super::{Lean, Parts};

const NODE: &str = include_str!("node.json");
const POD: &str = include_str!("pod.json");

/// The generated type's decoding with every `fieldsV1` dropped.
fn full_without_trees<K: DeserializeOwned + kube::Resource>(json: &str) -> K {
    let mut k: K = serde_json::from_str(json).expect("the fixture decodes");
    let entries = k
        .meta_mut()
        .managed_fields
        .as_mut()
        .expect("the fixture has managedFields");
    assert!(
        entries.iter().all(|e| e.fields_v1.is_some()),
        "the fixture has fieldsV1 trees"
    );
    for e in entries.iter_mut() {
        e.fields_v1 = None;
    }
    k
}

fn lean<K: Parts>(json: &str) -> K {
    serde_json::from_str::<Lean<K>>(json)
        .expect("lean decoding")
        .0
}

#[test]
fn a_lean_node_is_the_full_node_without_its_field_trees() {
    let lean: Node = lean(NODE);
    assert_eq!(lean, full_without_trees::<Node>(NODE));
    assert!(lean.metadata.managed_fields.is_some_and(|m| m.len() == 3));
}

#[test]
fn a_lean_pod_is_the_full_pod_without_its_field_trees() {
    let lean: Pod = lean(POD);
    assert_eq!(lean, full_without_trees::<Pod>(POD));
    assert!(lean.spec.is_some() && lean.status.is_some());
}

#[test]
fn a_malformed_object_is_refused_as_the_full_type_would_be() {
    let bad = NODE.replacen(
        "\"creationTimestamp\":\"",
        "\"creationTimestamp\":\"not a time",
        1,
    );
    assert!(serde_json::from_str::<Node>(&bad).is_err());
    assert!(serde_json::from_str::<Lean<Node>>(&bad).is_err());
}
