//! What the entrances that read cluster objects themselves need of a pod
//! (`nodegate backfill`, and the late-taint net's LIST through the
//! executor); and backfill's taint, sent with the same patch as every
//! decider's (`patch::add_taint`). Nodes are read as `project::node` makes
//! them, like everywhere else.
//!
//! The decisions are the core's (`nodegate_core::net::entrance`).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use nodegate_core::net::entrance::BoundPod;
use nodegate_core::vocab::model::{NodeInfo, Taint};

use crate::cluster::patch::{self, rfc3339};
use nodegate_core::gate::PatchOutcome;
use nodegate_core::vocab::annotations::GATED_SINCE as GATED_SINCE_ANNOTATION;

use crate::cluster::writer::{FIELD_MANAGER, outcome};

/// The mirror-pod annotation the kubelet sets on the API copy of a static pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

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

/// `nodegate.dev/gated-since` at `at`, as [`put_taint`] takes it.
pub fn gated_since(at: Timestamp) -> (&'static str, String) {
    (GATED_SINCE_ANNOTATION, rfc3339(at))
}

/// Puts `taint` on the node as it was read, with `annotations`, sent as
/// nodegate's field manager.
pub async fn put_taint(
    client: &kube::Client,
    node: &NodeInfo,
    taint: &Taint,
    annotations: &[(&'static str, String)],
) -> PatchOutcome {
    let patch = patch::add_taint(
        &node.resource_version,
        taint,
        node.taints.len(),
        annotations,
        node.annotations_present,
        Timestamp::now(),
    );
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let nodes: Api<Node> = Api::all(client.clone());
    outcome(
        nodes
            .patch(&node.name, &params, &Patch::Json::<()>(patch))
            .await
            .map(|_| ()),
    )
}
