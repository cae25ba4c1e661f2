//! `--on-timeout=replace`, the I/O of the replace decider's writes
//! (semantics.md §5.8): the mark on the node, then the delete of its proven
//! owner ([`carry_out`]).

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    Preconditions,
};
use nodegate_core::deciders::{Outcome, ReplaceAction, ReplaceWrite};
use nodegate_core::gate::PatchOutcome;
use nodegate_core::vocab::annotations::{
    REPLACE_FALLBACK, REPLACE_FALLBACK_AT, REPLACE_REASON, REPLACE_REQUESTED,
};
use nodegate_core::vocab::model::Owner;
use serde_json::{Value, json};

use crate::cluster::patch::{pointer_segment, rfc3339, version_test};
use crate::cluster::writer::{Unsent, Writer};
use crate::serve::metrics::NodeWrite;

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
    let mut ops = vec![version_test(&w.resource_version)];
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

/// Carries out one replace write. A request proves the owner first (see
/// [`prove`]): an owner that cannot be proven is answered
/// [`Outcome::NoOwner`] with nothing written, and the decider falls
/// back instead. Then the mark (if any), then the owner's delete, with the
/// owner's UID as a precondition (for a request or a delete again), each
/// through the writer's one path.
pub async fn carry_out(writer: &Writer, w: &ReplaceWrite, may_write: impl Fn() -> bool) -> Outcome {
    // The proof is several requests in a row (the node, then its owner or a
    // LIST of NodeClaims a page at a time), sent as one: it gets three
    // requests' time, and so does the delete.
    let timeout = writer.request_timeout().saturating_mul(3);
    let owner_request = (None, false);
    let (owner, again) = match &w.action {
        ReplaceAction::Request { owner, .. } => (owner, false),
        ReplaceAction::DeleteOwner { owner, .. } => (owner, true),
        // A fallback only marks the node.
        ReplaceAction::Fallback { .. } => (&Owner::None, false),
    };
    let proven = if *owner == Owner::None {
        None
    } else {
        // A read: asked of any replica that got this far.
        let found = prove(writer.client(), owner, &w.node, &w.uid);
        match writer.send(owner_request, timeout, || true, found).await {
            Ok(Ok(Found::Proven(p))) => Some(p),
            // Marked already: nothing (more) of it to delete.
            Ok(Ok(Found::NotProven(_))) if again => return Outcome::Applied,
            Ok(Ok(Found::NotProven(why))) => return Outcome::NoOwner(why),
            Ok(Err(e)) if again => return Outcome::OwnerFailed(e),
            Ok(Err(e)) => return Outcome::Failed(e),
            Err(e) if again => return Outcome::OwnerFailed(e.to_string()),
            Err(e) => return Outcome::Failed(format!("finding the node's owner: {e}")),
        }
    };
    if let Some(body) = mark(w) {
        let body = Patch::Json::<()>(body);
        let lane = (NodeWrite::Patch, false);
        match writer.patch_node(lane, &w.node, &body, &may_write).await {
            PatchOutcome::Applied => {}
            other => return other,
        }
    }
    let Some(proven) = proven else {
        return Outcome::Applied;
    };
    let deleted = writer.send(owner_request, timeout, may_write, proven.delete());
    match deleted.await {
        Ok(Ok(deleted)) => deleted.map_or(Outcome::Applied, Outcome::OwnerDeleted),
        Ok(Err(e)) => Outcome::OwnerFailed(e),
        Err(Unsent::NotLeader) => {
            Outcome::OwnerFailed("this replica lost the lease before the delete".into())
        }
        Err(e) => Outcome::OwnerFailed(e.to_string()),
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

enum Found {
    /// The owner, proven from its own side.
    Proven(Box<Proven>),
    /// Why no owner could be proven (none exists, it is being deleted, or
    /// it does not name this node).
    NotProven(String),
}

/// An owner proven to own the node: deleted only as this very object.
struct Proven {
    api: Api<DynamicObject>,
    name: String,
    uid: String,
    /// `nodeclaim/NAME` or `machine/NAMESPACE/NAME`.
    what: String,
}

impl Proven {
    /// Deletes the owner if it is still the object proven (a UID
    /// precondition); what was deleted, `None` when it is gone already or
    /// another object took its name.
    async fn delete(self) -> Result<Option<String>, String> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&self.name, &params).await {
            Ok(_) => Ok(Some(self.what)),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(None),
            Err(e) => Err(format!("deleting {}: {e}", self.what)),
        }
    }
}

fn status_str<'a>(o: &'a DynamicObject, pointer: &str) -> Option<&'a str> {
    o.data.pointer(pointer).and_then(Value::as_str)
}

fn uid_of(o: &DynamicObject) -> &str {
    o.metadata.uid.as_deref().unwrap_or_default()
}

/// Proves the node's owner from the owner's side ([`machine_owns`],
/// [`claim_owns_by_reference`], [`owning_nodeclaim`]): the node's own labels
/// and annotations (which its kubelet may write) only say where to look.
async fn prove(
    client: &Client,
    owner: &Owner,
    node: &str,
    node_uid: &str,
) -> Result<Found, String> {
    match owner {
        Owner::None => Ok(Found::NotProven("no owner known".into())),
        Owner::Machine { namespace, name } => {
            let what = format!("machine/{namespace}/{name}");
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &machines());
            let Some(m) = read(&api, name, &what).await? else {
                return Ok(Found::NotProven(format!(
                    "{what}, named by the node's annotations, does not exist"
                )));
            };
            Ok(match machine_owns(&m, node, node_uid) {
                Ok(uid) => Found::Proven(Box::new(Proven {
                    api,
                    name: name.clone(),
                    uid,
                    what,
                })),
                Err(why) => Found::NotProven(format!("{what}: {why}")),
            })
        }
        Owner::NodeClaim => {
            let nodes: Api<Node> = Api::all(client.clone());
            let found = read(&nodes, node, &format!("node {node}")).await?;
            let Some(n) = found.filter(|n| n.metadata.uid.as_deref() == Some(node_uid)) else {
                return Ok(Found::NotProven(format!(
                    "node {node} (uid {node_uid}) is gone"
                )));
            };
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &nodeclaims());
            let mut owners = n.metadata.owner_references.iter().flatten();
            let reference = owners
                .find(|r| r.kind == "NodeClaim" && r.api_version.starts_with("karpenter.sh/"));
            let (claim, why) = if let Some(r) = reference {
                let what = format!("nodeclaim/{}", r.name);
                match read(&api, &r.name, &what).await? {
                    None => (
                        None,
                        format!("{what}, the node's owner reference, does not exist"),
                    ),
                    Some(c) => match claim_owns_by_reference(&c, &r.uid, node) {
                        Ok(()) => (Some(c), String::new()),
                        Err(why) => (None, format!("{what}: {why}")),
                    },
                }
            } else {
                let provider_id = n.spec.as_ref().and_then(|s| s.provider_id.as_deref());
                let provider_id = provider_id.filter(|p| !p.is_empty());
                let claim = find_nodeclaim(&api, node, provider_id).await?;
                let why = format!(
                    "no NodeClaim names it in an ownerReference, and none has both status.nodeName {node} and status.providerID {}",
                    provider_id.unwrap_or("(the node has none)")
                );
                (claim, why)
            };
            Ok(match claim {
                Some(c) => {
                    let name = c.metadata.name.clone().unwrap_or_default();
                    Found::Proven(Box::new(Proven {
                        uid: uid_of(&c).to_string(),
                        what: format!("nodeclaim/{name}"),
                        name,
                        api,
                    }))
                }
                None => Found::NotProven(why),
            })
        }
    }
}

/// Object `name` of `api`, if it exists (`what` names it in the error).
async fn read<K>(api: &Api<K>, name: &str, what: &str) -> Result<Option<K>, String>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let found = api.get_opt(name).await;
    found.map_err(|e| format!("reading {what}: {e}"))
}

const NODECLAIM_PAGE: u32 = 500;

/// [`owning_nodeclaim`] over every NodeClaim, read a page at a time and
/// stopping at the first match (only for a node with no ownerReference).
async fn find_nodeclaim(
    api: &Api<DynamicObject>,
    node: &str,
    provider_id: Option<&str>,
) -> Result<Option<DynamicObject>, String> {
    if provider_id.is_none() {
        return Ok(None);
    }
    let mut params = ListParams::default().limit(NODECLAIM_PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|e| format!("listing karpenter.sh NodeClaims: {e}"))?;
        if let Some(c) = owning_nodeclaim(&page.items, node, provider_id) {
            return Ok(Some(c.clone()));
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(None),
        }
    }
}

/// The Machine's UID if it owns `node`: its `status.nodeRef` names the node
/// by name and UID, and it is not being deleted; else why not.
pub fn machine_owns(m: &DynamicObject, node: &str, node_uid: &str) -> Result<String, String> {
    if m.metadata.deletion_timestamp.is_some() {
        return Err("already being deleted".into());
    }
    let name = status_str(m, "/status/nodeRef/name");
    let uid = status_str(m, "/status/nodeRef/uid");
    if name != Some(node) || uid != Some(node_uid) {
        return Err(format!(
            "its status.nodeRef ({} uid {}) does not name this node ({node} uid {node_uid})",
            name.unwrap_or("no name"),
            uid.unwrap_or("none")
        ));
    }
    Ok(uid_of(m).to_string())
}

/// Whether the NodeClaim the node's ownerReference names (`ref_uid`) is
/// that very claim, owns `node` by its own `status.nodeName`, and is not
/// being deleted.
pub fn claim_owns_by_reference(c: &DynamicObject, ref_uid: &str, node: &str) -> Result<(), String> {
    if uid_of(c) != ref_uid {
        return Err(format!(
            "its uid {} is not the one the node's ownerReference names ({ref_uid})",
            uid_of(c)
        ));
    }
    if c.metadata.deletion_timestamp.is_some() {
        return Err("already being deleted".into());
    }
    match status_str(c, "/status/nodeName") {
        Some(n) if n == node => Ok(()),
        other => Err(format!(
            "its status.nodeName ({}) is not this node",
            other.unwrap_or("none")
        )),
    }
}

/// With no ownerReference on the node: the NodeClaim whose
/// `status.nodeName` is `node` and whose `status.providerID` is the node's,
/// not being deleted. A match on one of them alone proves nothing.
pub fn owning_nodeclaim<'a>(
    claims: &'a [DynamicObject],
    node: &str,
    provider_id: Option<&str>,
) -> Option<&'a DynamicObject> {
    let provider_id = provider_id?;
    claims.iter().find(|c| {
        c.metadata.deletion_timestamp.is_none()
            && status_str(c, "/status/nodeName") == Some(node)
            && status_str(c, "/status/providerID") == Some(provider_id)
    })
}

#[cfg(test)]
mod tests;
