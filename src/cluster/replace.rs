//! `--on-timeout=replace`, the I/O (semantics.md §5.8): the replace
//! decider's mark on the node, then the delete of its owner — a Karpenter
//! NodeClaim (found by `status.nodeName`, else by `status.providerID`) or a
//! Cluster API Machine (named by the node's annotations). With no owner
//! known the mark cordons the node. Nothing here decides: the decider in
//! `nodegate_core::deciders::replace` did.

use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use nodegate_core::annotations::{
    REPLACE_FALLBACK, REPLACE_FALLBACK_AT, REPLACE_REASON, REPLACE_REQUESTED,
};
use nodegate_core::deciders::replace::{ReplaceAction, ReplaceOutcome, ReplaceWrite};
use nodegate_core::gate::PatchOutcome;
use nodegate_core::model::Owner;
use serde_json::{Value, json};

use crate::cluster::patch::{pointer_segment, rfc3339};
use crate::cluster::writer::Writer;

/// The conditional JSON patch that marks the node, or `None` when the
/// action writes nothing on it (a delete of the owner again). It tests
/// the resourceVersion the decider read; it sets only nodegate.dev/
/// annotations, and `spec.unschedulable: true` for a request with no owner
/// known: exactly what the admission policy nodegate-node-changes lets it.
pub fn mark(w: &ReplaceWrite) -> Option<json_patch::Patch> {
    let (annotations, cordon): (Vec<(&str, String)>, bool) = match &w.action {
        ReplaceAction::Request {
            owner, at, reason, ..
        } => (
            vec![
                (REPLACE_REQUESTED, rfc3339(*at)),
                (REPLACE_REASON, reason.clone()),
            ],
            *owner == Owner::None,
        ),
        ReplaceAction::Fallback { fallback, at, .. } => (
            vec![
                (REPLACE_FALLBACK, fallback.as_str().to_string()),
                (REPLACE_FALLBACK_AT, rfc3339(*at)),
            ],
            false,
        ),
        ReplaceAction::DeleteOwner { .. } => return None,
    };
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": w.resource_version}),
    ];
    if !w.annotations_present {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": {}}));
    }
    for (k, v) in annotations {
        let path = format!("/metadata/annotations/{}", pointer_segment(k));
        ops.push(json!({"op": "add", "path": path, "value": v}));
    }
    if cordon {
        ops.push(json!({"op": "add", "path": "/spec/unschedulable", "value": true}));
    }
    // Every op is built above in a shape json_patch accepts.
    serde_json::from_value(Value::Array(ops)).ok()
}

/// Carries out one replace write: the mark (if any), then the owner's
/// delete (for a request or a delete again).
pub async fn carry_out(
    writer: &Writer,
    w: &ReplaceWrite,
    may_write: impl Fn() -> bool,
) -> ReplaceOutcome {
    if let Some(body) = mark(w) {
        match writer.write_replace(&w.node, body, &may_write).await {
            PatchOutcome::Applied => {}
            other => return ReplaceOutcome::NotWritten(other),
        }
    }
    let (owner, provider_id) = match &w.action {
        ReplaceAction::Request {
            owner, provider_id, ..
        }
        | ReplaceAction::DeleteOwner { owner, provider_id } => (owner, provider_id.as_deref()),
        ReplaceAction::Fallback { .. } => return ReplaceOutcome::Done { deleted: None },
    };
    if !may_write() {
        return ReplaceOutcome::OwnerFailed("this replica lost the lease before the delete".into());
    }
    let timeout = writer.request_timeout();
    let deleted = delete_owner(writer.client(), owner, &w.node, provider_id);
    match tokio::time::timeout(timeout.saturating_mul(3), deleted).await {
        Ok(Ok(deleted)) => ReplaceOutcome::Done { deleted },
        Ok(Err(e)) => ReplaceOutcome::OwnerFailed(e),
        Err(_) => ReplaceOutcome::OwnerFailed(format!(
            "no answer within {}",
            humantime::format_duration(timeout.saturating_mul(3))
        )),
    }
}

fn nodeclaims() -> ApiResource {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    ApiResource::from_gvk_with_plural(&gvk, "nodeclaims")
}

/// Cluster API's Machine, at the version every current release serves.
fn machines() -> ApiResource {
    let gvk = GroupVersionKind::gvk("cluster.x-k8s.io", "v1beta1", "Machine");
    ApiResource::from_gvk_with_plural(&gvk, "machines")
}

/// Deletes the owner; what was deleted (`None`: nothing to delete — no
/// owner known, or it is gone already).
async fn delete_owner(
    client: &Client,
    owner: &Owner,
    node: &str,
    provider_id: Option<&str>,
) -> Result<Option<String>, String> {
    match owner {
        Owner::None => Ok(None),
        Owner::NodeClaim => {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &nodeclaims());
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing karpenter.sh NodeClaims: {e}"))?;
            let Some(name) = owning_nodeclaim(&list.items, node, provider_id) else {
                return Ok(None);
            };
            delete(&api, &name, "nodeclaim").await
        }
        Owner::Machine { namespace, name } => {
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &machines());
            delete(&api, name, &format!("machine/{namespace}")).await
        }
    }
}

/// The NodeClaim whose `status.nodeName` is `node`, else the one whose
/// `status.providerID` is the node's.
pub fn owning_nodeclaim(
    claims: &[DynamicObject],
    node: &str,
    provider_id: Option<&str>,
) -> Option<String> {
    let status = |o: &DynamicObject, field: &str| {
        o.data
            .get("status")
            .and_then(|s| s.get(field))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let by = |field: &str, value: &str| {
        claims
            .iter()
            .find(|o| status(o, field).as_deref() == Some(value))
            .and_then(|o| o.metadata.name.clone())
    };
    by("nodeName", node).or_else(|| provider_id.and_then(|p| by("providerID", p)))
}

async fn delete(
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
) -> Result<Option<String>, String> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(Some(format!("{what}/{name}"))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(format!("deleting {what}/{name}: {e}")),
    }
}

#[cfg(test)]
mod tests;
