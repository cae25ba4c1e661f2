//! Backfill's taint, sent with the same patch as every decider's
//! (`patch::add_taint`). The pods it looks at are listed by
//! `writer::pods_on`, as the late-taint net's are; nodes are read as
//! `project::node` makes them, like everywhere else.
//!
//! The decisions are the core's (`nodegate_core::net::entrance`).

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use nodegate_core::vocab::model::{NodeInfo, Taint};

use crate::cluster::patch::{self, rfc3339};
use nodegate_core::gate::PatchOutcome;
use nodegate_core::vocab::annotations::GATED_SINCE as GATED_SINCE_ANNOTATION;

use crate::cluster::writer::{FIELD_MANAGER, outcome};

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
