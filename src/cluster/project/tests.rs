use super::*;
use nodegate_core::vocab::model::OpenedBy;
use serde_json::json;

#[test]
fn node_projection_keeps_taints_labels_and_gated_since() {
    let n: Node = serde_json::from_value(json!({
        "metadata": {
            "name": "n1", "uid": "u1", "resourceVersion": "42",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"zone": "a"},
            "annotations": {"nodegate.dev/gated-since": "2026-01-02T04:00:00Z"},
        },
        "spec": {"taints": [
            {"key": "nodegate.dev/initializing", "effect": "NoSchedule"},
            {"key": "gpu", "value": "true", "effect": "NoExecute"},
        ]},
    }))
    .unwrap();
    let (info, odd) = node(&n);
    let info = info.unwrap();
    assert!(odd.is_empty());
    assert_eq!(info.resource_version, "42");
    assert_eq!(info.labels.get("zone").map(Shared::as_str), Some("a"));
    assert_eq!(
        info.taints[0],
        Taint::new("nodegate.dev/initializing", "", "NoSchedule")
    );
    assert_eq!(info.taints[1], Taint::new("gpu", "true", "NoExecute"));
    assert_eq!(info.created.to_string(), "2026-01-02T03:04:05Z");
    assert_eq!(
        info.gated_since.map(|t| t.to_string()).as_deref(),
        Some("2026-01-02T04:00:00Z")
    );
}

#[test]
fn node_projection_reads_the_ready_condition() {
    let with = |conditions: serde_json::Value| {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "creationTimestamp": "2026-01-02T03:04:05Z"},
            "status": {"conditions": conditions},
        }))
        .unwrap();
        node(&n).0.unwrap().ready
    };
    let cond = |status: &str| {
        json!([
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": status},
        ])
    };
    assert_eq!(with(cond("True")), NodeReady::True);
    assert_eq!(with(cond("False")), NodeReady::False);
    assert_eq!(with(cond("Unknown")), NodeReady::Unknown);
    assert_eq!(
        with(json!([])),
        NodeReady::Unknown,
        "no Ready condition yet"
    );
    let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap();
    assert_eq!(node(&bare).0.unwrap().ready, NodeReady::Unknown);
}

#[test]
fn node_projection_reads_nodegates_opened_at() {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "creationTimestamp": "2026-01-02T03:04:05Z",
                     "annotations": {"nodegate.dev/opened-at": "2026-01-02T03:05:00.123Z",
                                     "nodegate.dev/opened-by": "ready"}},
    }))
    .unwrap();
    let (info, odd) = node(&n);
    assert!(odd.is_empty());
    let info = info.unwrap();
    assert_eq!(
        info.opened_at.map(|t| t.to_string()).as_deref(),
        Some("2026-01-02T03:05:00.123Z")
    );
    assert_eq!(info.opened_by_nodegate(), Some(OpenedBy::Ready));
    assert!(!info.opened_unready());
    // Only nodegate's own openings are read as one; `timeout`, `manual`
    // and `external` opened the node with members not Ready.
    for (by, read, unready) in [
        ("timeout", Some(OpenedBy::Timeout), true),
        ("manual", Some(OpenedBy::Manual), true),
        ("external", None, true),
        ("Ready", None, false),
        ("", None, false),
    ] {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "annotations": {"nodegate.dev/opened-by": by}},
        }))
        .unwrap();
        let info = node(&n).0.unwrap();
        assert_eq!(info.opened_by_nodegate(), read, "{by}");
        assert_eq!(info.opened_unready(), unready, "{by}");
    }
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "creationTimestamp": "2026-01-02T03:04:05Z",
                     "annotations": {"nodegate.dev/opened-at": "soon"}},
    }))
    .unwrap();
    let (info, odd) = node(&n);
    assert_eq!(info.unwrap().opened_at, None);
    assert_eq!(odd.len(), 1, "{odd:?}");
}

#[test]
fn unparsable_gated_since_is_reported_and_ignored() {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "creationTimestamp": "2026-01-02T03:04:05Z",
                     "annotations": {"nodegate.dev/gated-since": "yesterday"}},
    }))
    .unwrap();
    let (info, odd) = node(&n);
    assert_eq!(info.unwrap().gated_since, None);
    assert_eq!(odd.len(), 1);
    assert!(odd[0].what.contains("\"yesterday\""), "{odd:?}");
}

#[test]
fn daemonset_projection_keeps_placement_and_only_nodegate_annotations() {
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "cilium", "namespace": "kube-system", "uid": "d1",
                     "annotations": {"nodegate.dev/ignore": "true", "other": "x"}},
        "spec": {
            "minReadySeconds": 10,
            "selector": {"matchLabels": {"app": "cilium"}},
            "template": {"spec": {
                "containers": [{"name": "c"}],
                "hostNetwork": true,
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"operator": "Exists"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}],
                                           "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n9"]}]}]
                }}},
            }},
        },
    }))
    .unwrap();
    let info = daemonset(&ds).unwrap();
    assert_eq!(info.key(), "kube-system/cilium");
    assert_eq!(info.min_ready_seconds, 10);
    assert_eq!(info.annotations.len(), 1);
    assert!(info.template.host_network);
    assert_eq!(info.template.tolerations[0].operator, "Exists");
    let terms = info.template.required_node_affinity.unwrap();
    assert_eq!(terms[0].match_expressions[0].values, vec!["b".to_string()]);
    assert_eq!(terms[0].match_fields[0].key, "metadata.name");
}

#[test]
fn pod_projection_reads_controller_owner_and_ready_transition() {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "pu",
                     "deletionTimestamp": "2026-01-01T00:00:00Z",
                     "ownerReferences": [
                        {"apiVersion": "v1", "kind": "X", "name": "x", "uid": "not-controller"},
                        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "d1", "controller": true}]},
        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}]},
    }))
    .unwrap();
    let info = pod(&p).unwrap();
    assert_eq!(info.controller_uid.as_deref(), Some("d1"));
    assert!(info.terminating);
    assert!(info.ready);
    assert_eq!(info.node_name, "n1");
    assert_eq!(
        info.ready_since.get().map(|t| t.to_string()).as_deref(),
        Some("2026-01-01T00:00:05Z")
    );
}

#[test]
fn devices_project_only_extended_resources_and_node_local_slices() {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "g", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"allocatable": {"cpu": "8", "pods": "110", "hugepages-2Mi": "0",
                                   "nvidia.com/gpu": "4", "example.com/fpga": "0"}},
    }))
    .unwrap();
    let info = node(&n).0.unwrap();
    assert_eq!(
        info.extended_allocatable,
        BTreeMap::from([
            ("example.com/fpga".to_string(), "0".to_string()),
            ("nvidia.com/gpu".to_string(), "4".to_string()),
        ])
    );
    let slice = |placement: serde_json::Value| -> ResourceSlice {
        let mut spec = json!({
            "driver": "gpu.example.com",
            "pool": {"name": "p", "generation": 3, "resourceSliceCount": 2},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), placement.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": spec})).unwrap()
    };
    assert_eq!(
        resource_slice(&slice(json!({"nodeName": "g"}))),
        Some((
            "g".to_string(),
            SliceInfo {
                name: "s".into(),
                driver: "gpu.example.com".into(),
                pool: "p".into(),
                generation: 3,
                slice_count: 2,
                owner_uid: String::new(),
            }
        ))
    );
    // The ownerReference to the Node of spec.nodeName gives the owner's UID;
    // one to another node, or to something else, gives none.
    let owned = |refs: serde_json::Value| {
        let mut s = slice(json!({"nodeName": "g"}));
        s.metadata.owner_references = serde_json::from_value(refs).unwrap();
        resource_slice(&s).map(|(_, s)| s.owner_uid)
    };
    assert_eq!(
        owned(json!([{"apiVersion": "v1", "kind": "Node", "name": "g", "uid": "u-g"}])),
        Some("u-g".to_string())
    );
    for other in [
        json!([{"apiVersion": "v1", "kind": "Node", "name": "h", "uid": "u-h"}]),
        json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "g", "uid": "u-d"}]),
        json!(null),
    ] {
        assert_eq!(owned(other.clone()), Some(String::new()), "{other}");
    }
    for shared in [
        json!({"allNodes": true}),
        json!({"perDeviceNodeSelection": true}),
        json!({"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "rack", "operator": "In", "values": ["r1"]}]}]}}),
    ] {
        assert_eq!(resource_slice(&slice(shared.clone())), None, "{shared}");
    }
}
