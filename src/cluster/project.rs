//! Projections: whole Kubernetes objects in, the compact model of
//! `nodegate_core::model` out.
//!
//! These are the projections every part reads (nodes — the gate, the
//! deciders, the webhook and backfill alike —, DaemonSets, pods, CSINodes);
//! only the workload check projects pods into a smaller fact of its own
//! (`BoundPod`, in `cluster::entrance`). Past the
//! cluster adapters, the program sees only what the core reasons about.
//! Projections never fail: a field the gate cannot use (an unparsable
//! annotation, a missing timestamp) is reported to the caller and treated as
//! absent, because a controller must keep working on the rest of the cluster
//! while one object is odd.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{self as core, Node, Pod};
use k8s_openapi::api::storage::v1::CSINode;
use nodegate_core::model::{
    DaemonSetInfo, NodeCondition, NodeInfo, NodeReady, NodeSelectorRequirement, NodeSelectorTerm,
    PodInfo, PodPlacement, Taint, Toleration,
};

use nodegate_core::annotations;

/// Something a projection had to ignore; the caller logs it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oddity {
    pub object: String,
    pub what: String,
}

pub fn node(n: &Node) -> (Option<NodeInfo>, Vec<Oddity>) {
    let mut odd = Vec::new();
    let Some(name) = n.metadata.name.clone() else {
        return (
            None,
            vec![Oddity {
                object: "node".into(),
                what: "has no name".into(),
            }],
        );
    };
    let created = match &n.metadata.creation_timestamp {
        Some(t) => t.0,
        None => {
            // The API server always sets it; an object without one cannot have a
            // meaningful deadline, so the epoch makes it "long past" and the
            // gate decides at once rather than waiting forever.
            odd.push(Oddity {
                object: format!("node/{name}"),
                what: "has no creationTimestamp".into(),
            });
            Timestamp::UNIX_EPOCH
        }
    };
    let found = n.metadata.annotations.as_ref();
    let gated_since = time_annotation(
        found,
        annotations::GATED_SINCE,
        "using creationTimestamp",
        &name,
        &mut odd,
    );
    let flag = |key: &str| found.and_then(|a| a.get(key)).is_some_and(|v| v == "true");
    let opened_at = time_annotation(found, annotations::OPENED_AT, "ignored", &name, &mut odd);
    let taints = n
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| ts.iter().map(taint).collect())
        .unwrap_or_default();
    let (ready, conditions) = node_conditions(n);
    let info = NodeInfo {
        conditions,
        csi_drivers: None,
        uid: n.metadata.uid.clone().unwrap_or_default(),
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
        labels: labels(n.metadata.labels.as_ref()),
        taints,
        created,
        gated_since,
        ready,
        opened_at,
        name,
        opened_before: found.is_some_and(|a| a.contains_key(annotations::OPENED_AT)),
        annotations_present: found.is_some(),
        suspended: flag(annotations::SUSPEND),
        open_requested: flag(annotations::OPEN),
        ignored: flag(annotations::NODE_IGNORE),
        opened_unready: found
            .and_then(|a| a.get(annotations::OPENED_BY))
            .is_some_and(|v| v == "timeout" || v == "manual" || v == "external"),
        regated_for: found
            .and_then(|a| a.get(annotations::REGATED_FOR))
            .map(|v| v.as_str().into()),
        rule_taints: found
            .and_then(|a| a.get(annotations::CONDITION_TAINTS))
            .map(|v| v.as_str().into()),
        boot_id: n
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map(|i| i.boot_id.as_str())
            .filter(|b| !b.is_empty())
            .map(Into::into),
    };
    (Some(info), odd)
}

/// The time in annotation `key` of a node, if it has one that parses; one
/// that does not is reported in `odd` (`otherwise` says what happens
/// instead) and treated as absent.
fn time_annotation(
    found: Option<&BTreeMap<String, String>>,
    key: &str,
    otherwise: &str,
    name: &str,
    odd: &mut Vec<Oddity>,
) -> Option<Timestamp> {
    let v = found?.get(key)?;
    match v.parse::<Timestamp>() {
        Ok(t) => Some(t),
        Err(e) => {
            odd.push(Oddity {
                object: format!("node/{name}"),
                what: format!("annotation {key}={v:?} is not an RFC 3339 time ({e}); {otherwise}"),
            });
            None
        }
    }
}

/// The node's Ready condition, and every condition by type.
fn node_conditions(n: &Node) -> (NodeReady, BTreeMap<String, NodeCondition>) {
    let listed = n.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = listed
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map_or(NodeReady::Unknown, |c| NodeReady::from_status(&c.status));
    let conditions = listed
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let cond = NodeCondition {
                        status: c.status.clone(),
                        since: c.last_transition_time.as_ref().map(|t| t.0),
                    };
                    (c.type_.clone(), cond)
                })
                .collect()
        })
        .unwrap_or_default();
    (ready, conditions)
}

pub fn taint(t: &core::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone(),
    }
}

pub fn daemonset(ds: &DaemonSet) -> Option<DaemonSetInfo> {
    let namespace = ds.metadata.namespace.clone()?;
    let name = ds.metadata.name.clone()?;
    let spec = ds.spec.as_ref();
    let template = spec
        .and_then(|s| s.template.spec.as_ref())
        .map(placement)
        .unwrap_or_default();
    let kept = ds
        .metadata
        .annotations
        .as_ref()
        .map(|a| {
            a.iter()
                .filter(|(k, _)| k.starts_with(annotations::PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    Some(DaemonSetInfo {
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        labels: labels(ds.metadata.labels.as_ref()),
        annotations: kept,
        template,
        min_ready_seconds: spec.and_then(|s| s.min_ready_seconds).unwrap_or(0),
        namespace,
        name,
    })
}

/// The placement-relevant part of a pod spec.
pub fn placement(spec: &core::PodSpec) -> PodPlacement {
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|sel| sel.node_selector_terms.iter().map(term).collect());
    PodPlacement {
        node_selector: spec
            .node_selector
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        required_node_affinity: required,
        tolerations: spec
            .tolerations
            .as_ref()
            .map(|ts| ts.iter().map(toleration).collect())
            .unwrap_or_default(),
        node_name: spec.node_name.clone().unwrap_or_default(),
        host_network: spec.host_network.unwrap_or(false),
    }
}

fn term(t: &core::NodeSelectorTerm) -> NodeSelectorTerm {
    let reqs = |rs: &Option<Vec<core::NodeSelectorRequirement>>| {
        rs.as_ref()
            .map(|rs| {
                rs.iter()
                    .map(|r| NodeSelectorRequirement {
                        key: r.key.clone(),
                        operator: r.operator.clone(),
                        values: r.values.clone().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    NodeSelectorTerm {
        match_expressions: reqs(&t.match_expressions),
        match_fields: reqs(&t.match_fields),
    }
}

fn toleration(t: &core::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator: t.operator.clone().unwrap_or_default(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone().unwrap_or_default(),
    }
}

pub fn pod(p: &Pod) -> Option<PodInfo> {
    let namespace = p.metadata.namespace.clone()?;
    let name = p.metadata.name.clone()?;
    let controller_uid = p
        .metadata
        .owner_references
        .as_ref()
        .and_then(|refs| refs.iter().find(|r| r.controller == Some(true)))
        .map(|r| r.uid.clone());
    let status = p.status.as_ref();
    let ready_cond = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    Some(PodInfo {
        uid: p.metadata.uid.clone().unwrap_or_default(),
        node_name: p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        labels: labels(p.metadata.labels.as_ref()),
        controller_uid,
        terminating: p.metadata.deletion_timestamp.is_some(),
        phase: status.and_then(|s| s.phase.clone()).unwrap_or_default(),
        ready: ready_cond.is_some_and(|c| c.status == "True"),
        ready_since: ready_cond
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
        ready_annotation: p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::POD_READY))
            .is_some_and(|v| v == "true"),
        sandbox_ready: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == SANDBOX_CONDITION))
            .is_some_and(|c| c.status == "True"),
        status_note: status.and_then(pod_status_note),
        namespace,
        name,
    })
}

/// The pod condition the kubelet sets once the pod's sandbox and network
/// are up (Kubernetes 1.29+; the canary member's proof).
pub const SANDBOX_CONDITION: &str = "PodReadyToStartContainers";

/// Why a pod is not running, in the kubelet's words: the pod's own reason
/// and message (a rejected or evicted pod), else the first container
/// waiting or terminated with a reason, else a condition that is not True
/// and says why. At most [`NOTE_MAX`] bytes.
fn pod_status_note(s: &core::PodStatus) -> Option<String> {
    let join = |reason: Option<&String>, message: Option<&String>| match (
        reason.filter(|r| !r.is_empty()),
        message.filter(|m| !m.is_empty()),
    ) {
        (Some(r), Some(m)) => Some(format!("{r}: {m}")),
        (Some(r), None) => Some(r.clone()),
        (None, Some(m)) => Some(m.clone()),
        (None, None) => None,
    };
    let own = join(s.reason.as_ref(), s.message.as_ref());
    let container = || {
        s.container_statuses.iter().flatten().find_map(|c| {
            let state = c.state.as_ref()?;
            if let Some(w) = &state.waiting {
                return join(w.reason.as_ref(), w.message.as_ref());
            }
            let t = state.terminated.as_ref()?;
            join(t.reason.as_ref(), t.message.as_ref())
        })
    };
    let condition = || {
        s.conditions.iter().flatten().find_map(|c| {
            (c.status != "True")
                .then(|| join(c.reason.as_ref(), c.message.as_ref()))
                .flatten()
        })
    };
    let mut note = own.or_else(container).or_else(condition)?;
    if note.len() > NOTE_MAX {
        let mut cut = NOTE_MAX;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
    }
    Some(note)
}

/// The longest note kept of a pod's status.
pub const NOTE_MAX: usize = 256;

/// A CSINode: its node's name (a CSINode is named after its node) and the
/// names of the CSI drivers it lists.
pub fn csinode(c: &CSINode) -> Option<(String, Vec<String>)> {
    let name = c.metadata.name.clone()?;
    Some((
        name,
        c.spec.drivers.iter().map(|d| d.name.clone()).collect(),
    ))
}

pub fn labels(l: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    l.cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert_eq!(info.labels.get("zone").map(String::as_str), Some("a"));
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
        assert_eq!(
            info.unwrap().opened_at.map(|t| t.to_string()).as_deref(),
            Some("2026-01-02T03:05:00.123Z")
        );
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
            info.ready_since.map(|t| t.to_string()).as_deref(),
            Some("2026-01-01T00:00:05Z")
        );
    }
}
