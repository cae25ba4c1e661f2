//! The one write path for every taint nodegate puts on (the late-taint net,
//! backfill; later re-gating and condition taints), and what it reads first:
//! a node's facts and the pods bound to it.
//!
//! The decisions are the core's (`nodegate_core::entrance`); this module
//! projects objects into what they need and sends the patch.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use nodegate_core::entrance::{BoundPod, IGNORE_ANNOTATION, NodeFacts};
use nodegate_core::model::Taint;
use serde_json::{Value, json};

use crate::cluster::patch::{pointer_segment, rfc3339};
use crate::cluster::project::{labels, taint};
use nodegate_core::annotations::{
    GATED_SINCE as GATED_SINCE_ANNOTATION, OPENED_AT as OPENED_AT_ANNOTATION,
};
use nodegate_core::gate::PatchOutcome;

use crate::cluster::writer::{FIELD_MANAGER, outcome};

/// The mirror-pod annotation the kubelet sets on the API copy of a static pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// What the entrances need of a Node object. An unparsable `opened-at` counts
/// as present (nodegate wrote something there: the node was opened before).
pub fn node_facts(n: &Node) -> NodeFacts {
    let annotations = n.metadata.annotations.as_ref();
    let annotation = |k: &str| annotations.and_then(|a| a.get(k));
    let spec_taints = n.spec.as_ref().and_then(|s| s.taints.as_ref());
    NodeFacts {
        name: n.metadata.name.clone().unwrap_or_default(),
        uid: n.metadata.uid.clone().unwrap_or_default(),
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
        labels: labels(n.metadata.labels.as_ref()),
        taints: spec_taints
            .map(|ts| ts.iter().map(taint).collect())
            .unwrap_or_default(),
        taints_present: spec_taints.is_some(),
        annotations_present: annotations.is_some(),
        ignored: annotation(IGNORE_ANNOTATION).is_some_and(|v| v == "true"),
        opened_before: annotation(OPENED_AT_ANNOTATION)
            .map(|v| v.parse().unwrap_or(Timestamp::UNIX_EPOCH)),
        created: n.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// A pod's metadata as the "is there a workload" rule reads it.
pub fn bound_pod(meta: &ObjectMeta) -> BoundPod {
    BoundPod {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        controller_kind: meta
            .owner_references
            .as_ref()
            .and_then(|os| os.iter().find(|o| o.controller == Some(true)))
            .map(|o| o.kind.clone()),
        mirror: meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
    }
}

/// One LIST of the pods bound to `node` (every namespace).
pub async fn pods_on(client: &kube::Client, node: &str) -> Result<Vec<BoundPod>, kube::Error> {
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods
        .list_metadata(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await?;
    Ok(list.items.iter().map(|p| bound_pod(&p.metadata)).collect())
}

/// The conditional patch that puts `taint` on the node as it was read
/// (`facts`): it tests the resourceVersion, so any change since makes the API
/// server refuse it whole. It also sets `annotations` (nodegate's own, e.g.
/// `nodegate.dev/gated-since`, from which the deadline then counts).
pub fn add_taint(
    facts: &NodeFacts,
    taint: &Taint,
    annotations: &[(&str, String)],
) -> json_patch::Patch {
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": facts.resource_version}),
    ];
    let t = json!({"key": taint.key, "effect": taint.effect});
    if facts.taints_present {
        ops.push(json!({"op": "add", "path": "/spec/taints/-", "value": t}));
    } else {
        ops.push(json!({"op": "add", "path": "/spec/taints", "value": [t]}));
    }
    if !annotations.is_empty() {
        if facts.annotations_present {
            for (k, v) in annotations {
                ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer_segment(k)), "value": v}));
            }
        } else {
            let map: serde_json::Map<String, Value> = annotations
                .iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
                .collect();
            ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": map}));
        }
    }
    // Every op above is built from the json! macro in a shape json_patch
    // accepts; a failure here is a bug in this function, reported as such.
    serde_json::from_value(Value::Array(ops))
        .unwrap_or_else(|e| panic!("add-taint patch is malformed: {e}"))
}

/// `nodegate.dev/gated-since` at `at`, as [`add_taint`] takes it.
pub fn gated_since(at: Timestamp) -> (&'static str, String) {
    (GATED_SINCE_ANNOTATION, rfc3339(at))
}

/// Sends [`add_taint`] as nodegate's field manager.
pub async fn put_taint(
    client: &kube::Client,
    facts: &NodeFacts,
    taint: &Taint,
    annotations: &[(&str, String)],
) -> PatchOutcome {
    let patch = add_taint(facts, taint, annotations);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let nodes: Api<Node> = Api::all(client.clone());
    outcome(
        nodes
            .patch(&facts.name, &params, &Patch::Json::<()>(patch))
            .await
            .map(|_| ()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(taints_present: bool, annotations_present: bool) -> NodeFacts {
        NodeFacts {
            name: "n1".into(),
            resource_version: "42".into(),
            taints_present,
            annotations_present,
            ..NodeFacts::default()
        }
    }

    fn json(p: json_patch::Patch) -> Value {
        serde_json::to_value(p).expect("a patch serializes")
    }

    fn startup() -> Taint {
        Taint::new("nodegate.dev/initializing", "", "NoSchedule")
    }

    #[test]
    fn the_patch_tests_the_version_and_appends_to_an_existing_list() {
        assert_eq!(
            json(add_taint(&facts(true, true), &startup(), &[])),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/spec/taints/-", "value": {"key": "nodegate.dev/initializing", "effect": "NoSchedule"}},
            ])
        );
    }

    #[test]
    fn the_patch_creates_the_lists_it_needs() {
        let at: Timestamp = "2026-01-01T00:00:00.5Z".parse().expect("time");
        assert_eq!(
            json(add_taint(
                &facts(false, false),
                &startup(),
                &[gated_since(at)]
            )),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "add", "path": "/spec/taints", "value": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]},
                {"op": "add", "path": "/metadata/annotations", "value": {"nodegate.dev/gated-since": "2026-01-01T00:00:00.5Z"}},
            ])
        );
        assert_eq!(
            json(add_taint(
                &facts(true, true),
                &startup(),
                &[gated_since(at)]
            ))[2],
            json!({"op": "add", "path": "/metadata/annotations/nodegate.dev~1gated-since", "value": "2026-01-01T00:00:00.5Z"})
        );
    }
}
