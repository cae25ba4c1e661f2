//! The owners `--on-timeout replace` deletes, for the tests that need them:
//! the Machine and NodeClaim kinds as CustomResourceDefinitions, nodes that
//! name a Cluster API Machine, and what a replace leaves on a node (its
//! cordon, its Events).

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::gate::{Env, gated_node};
use super::wait_for;

pub fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

pub async fn reasons(env: &Env, node: &str) -> Vec<String> {
    env.events_for(node)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// Whether an Event with this reason was recorded for the node.
pub async fn has_event(env: &Env, node: &str, reason: &str) -> bool {
    reasons(env, node).await.iter().any(|r| r == reason)
}

/// A CustomResourceDefinition as small as these tests need: the group,
/// version and kind nodegate asks for, any fields, a status subresource.
pub fn crd(group: &str, kind: &str, plural: &str, version: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{
                "name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates the Machine `capi/NAME` whose `status.nodeRef` names the node
/// `node` with the UID `uid` (its own, or, to forge a claim, another's).
pub async fn create_machine(api: &Api<DynamicObject>, name: &str, node: &str, uid: &str) {
    create_with_status(
        api,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "capi"},
            "spec": {"clusterName": "workload"},
        }),
        json!({"nodeRef": {"kind": "Node", "name": node, "uid": uid}}),
    )
    .await;
}

/// Creates `obj` and sets its `status`.
pub async fn create_with_status(api: &Api<DynamicObject>, obj: Value, status: Value) {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    let name = obj.metadata.name.clone().expect("a name");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

/// Installs the Machine and NodeClaim kinds (and the namespace `capi`);
/// their APIs once served: Machines in `capi`, NodeClaims.
pub async fn owner_kinds(env: &Env) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let crds: Api<DynamicObject> = Api::all_with(
        env.cluster.client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    for c in [
        crd("cluster.x-k8s.io", "Machine", "machines", "v1beta1", true),
        crd("karpenter.sh", "NodeClaim", "nodeclaims", "v1", false),
    ] {
        let c: DynamicObject = serde_json::from_value(c).expect("crd");
        crds.create(&PostParams::default(), &c)
            .await
            .expect("create CRD");
    }
    env.cluster.namespace("capi").await;
    let client = env.cluster.client.clone();
    let machine_res = resource("cluster.x-k8s.io", "v1beta1", "Machine", "machines");
    let claim_res = resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims");
    let machines: Api<DynamicObject> = Api::namespaced_with(client.clone(), "capi", &machine_res);
    let claims: Api<DynamicObject> = Api::all_with(client, &claim_res);
    wait_for("the CRDs served", Duration::from_secs(30), || async {
        match (
            machines.list(&Default::default()).await,
            claims.list(&Default::default()).await,
        ) {
            (Ok(_), Ok(_)) => Ok(()),
            (m, c) => Err(format!("{:?} {:?}", m.err(), c.err())),
        }
    })
    .await;
    (machines, claims)
}

/// A gated node whose Cluster API annotations name the Machine
/// `capi/MACHINE`.
pub fn capi_node(name: &str, machine: &str) -> Node {
    let mut n = gated_node(name, &[]);
    n.metadata.annotations = Some(
        [
            ("cluster.x-k8s.io/machine", machine),
            ("cluster.x-k8s.io/cluster-namespace", "capi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    n
}
