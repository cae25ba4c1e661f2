//! Everything the doctor reads from the cluster, read once and projected
//! into the plain values the checks take. Read only: every request is a GET
//! or a LIST, except the SubjectAccessReviews and the admission probe's
//! dry-run Node create, which the API server answers storing nothing.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, MutatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, Client};
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::vocab::annotations::TIMED_OUT;
use nodegate_core::vocab::model::Labels;

use super::checks::admission::{Admission, Binding, Params, WEBHOOK_NAME, Webhook};
use super::checks::karpenter::NodePool;
use super::checks::leader::LeaseSeen;
use super::checks::nodes::NodeSeen;
use super::checks::rbac::Access;
use crate::cluster::{project, snapshot};
use crate::error::{Error, Result};

/// A read that may be forbidden: `Err` says so, for a check to show.
pub type Readable<T> = std::result::Result<T, String>;

/// `Ok(Err(why))` for a forbidden read (its check shows it as not
/// checked), `Err` for any other failure (exit 1).
fn readable<T>(what: &str, r: std::result::Result<T, kube::Error>) -> Result<Readable<T>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Err(format!(
            "not checked: these credentials may not {what}"
        ))),
        Err(e) => Err(Error::kube(what.to_string())(e)),
    }
}

/// Karpenter's NodePools; `None` when the API is not served (Karpenter not
/// installed).
pub async fn nodepools(client: &Client) -> Result<Readable<Option<Vec<NodePool>>>> {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "nodepools");
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    match api.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Ok(None)),
        r => Ok(readable("list karpenter.sh NodePools", r)?.map(|list| {
            let pool = |o: &DynamicObject| {
                NodePool::from_json(o.metadata.name.as_deref().unwrap_or("?"), &o.data)
            };
            Some(list.items.iter().map(pool).collect())
        })),
    }
}

/// Every Deployment, in all namespaces (the autoscalers and Karpenter's
/// controller are found among them).
pub async fn deployments(client: &Client) -> Result<Readable<Vec<Deployment>>> {
    let list = Api::<Deployment>::all(client.clone())
        .list(&ListParams::default())
        .await;
    Ok(readable("list Deployments in all namespaces", list)?.map(|l| l.items))
}

/// nodegate's admission policies (with their bindings and parameters) and
/// webhooks (with their Services' ready endpoints).
pub async fn admission(
    client: &Client,
    probe_labels: Option<&Labels>,
) -> Result<Readable<Admission>> {
    let policies = match Api::<MutatingAdmissionPolicy>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        // An API server without MutatingAdmissionPolicy (before 1.36).
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        r => match readable("list MutatingAdmissionPolicies", r)? {
            Ok(l) => l.items,
            Err(why) => return Ok(Err(why)),
        },
    };
    let policies: Vec<String> = policies
        .iter()
        .filter(|p| {
            serde_json::to_string(&p.spec).is_ok_and(|s| s.contains("params.data.managedTaints"))
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let mut bindings = Vec::new();
    if !policies.is_empty() {
        let list = Api::<MutatingAdmissionPolicyBinding>::all(client.clone())
            .list(&ListParams::default())
            .await;
        let list = match readable("list MutatingAdmissionPolicyBindings", list)? {
            Ok(l) => l.items,
            Err(why) => return Ok(Err(why)),
        };
        for b in &list {
            let Some(spec) = &b.spec else { continue };
            let policy = spec.policy_name.clone().unwrap_or_default();
            if !policies.contains(&policy) {
                continue;
            }
            let param_ref = spec.param_ref.as_ref();
            let at = param_ref.and_then(|p| Some((p.namespace.clone()?, p.name.clone()?)));
            let params = match &at {
                None => None,
                Some((ns, name)) => Api::<ConfigMap>::namespaced(client.clone(), ns)
                    .get_opt(name)
                    .await
                    .map_err(Error::kube(format!("reading ConfigMap {ns}/{name}")))?
                    .map(|cm| {
                        let data = cm.data.unwrap_or_default();
                        Params {
                            startup_rules: data.get("startupRules").cloned(),
                            startup_taint: data.get("startupTaint").cloned(),
                            managed_taints: data.get("managedTaints").cloned(),
                            dry_run: data.get("dryRun").cloned(),
                        }
                    }),
            };
            let object_selector = spec
                .match_resources
                .as_ref()
                .and_then(|m| m.object_selector.as_ref())
                .and_then(|s| serde_json::to_value(s).ok())
                .and_then(|v| serde_json::from_value::<LabelSelector>(v).ok())
                .unwrap_or_default();
            bindings.push(Binding {
                name: b.metadata.name.clone().unwrap_or_default(),
                policy,
                params_ref: at.map(|(ns, name)| format!("{ns}/{name}")),
                params,
                object_selector,
            });
        }
    }
    let list = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await;
    let list = match readable("list MutatingWebhookConfigurations", list)? {
        Ok(l) => l.items,
        Err(why) => return Ok(Err(why)),
    };
    let mut webhooks = Vec::new();
    for c in &list {
        for w in c
            .webhooks
            .iter()
            .flatten()
            .filter(|w| w.name == WEBHOOK_NAME)
        {
            let cc = &w.client_config;
            let service = cc.service.as_ref();
            let service = service.map(|s| (s.namespace.clone(), s.name.clone()));
            let ready_endpoints = match &service {
                Some((ns, name)) => ready_endpoints(client, ns, name).await?,
                None => None,
            };
            webhooks.push(Webhook {
                configuration: c.metadata.name.clone().unwrap_or_default(),
                service: service.map(|(ns, name)| format!("{ns}/{name}")),
                url: cc.url.clone(),
                ca_bundle: cc.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty()),
                ready_endpoints,
            });
        }
    }
    let probe = match probe_labels {
        _ if policies.is_empty() && webhooks.is_empty() => None,
        Some(labels) => Some(probe(client, labels).await),
        None => Some(Err(
            "no node inside --node-selector to give the probe its labels".to_string(),
        )),
    };
    Ok(Ok(Admission {
        policies,
        bindings,
        webhooks,
        probe,
    }))
}

/// A server-side dry-run create of an untainted Node with `labels`: the
/// taints it comes back with (`KEY:EFFECT`, without the API server's own
/// `node.kubernetes.io/not-ready`), or why it could not be made.
async fn probe(client: &Client, labels: &Labels) -> std::result::Result<Vec<String>, String> {
    let name = format!("nodegate-doctor-probe-{:08x}", rand::random::<u32>());
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
    }))
    .map_err(|e| e.to_string())?;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<Node>::all(client.clone()).create(&dry, &node).await {
        Ok(made) => Ok(made
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .filter(|t| t.key != "node.kubernetes.io/not-ready")
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect()),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Err("these credentials may not create nodes (a dry run)".to_string())
        }
        Err(e) => Err(format!("the dry-run create failed: {e}")),
    }
}

/// The ready endpoints behind a Service; `None` when it is not there.
async fn ready_endpoints(client: &Client, ns: &str, name: &str) -> Result<Option<usize>> {
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(Error::kube(format!("reading Service {ns}/{name}")))?;
    if svc.is_none() {
        return Ok(None);
    }
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={name}")))
        .await
        .map_err(Error::kube(format!(
            "listing EndpointSlices of Service {ns}/{name}"
        )))?;
    Ok(Some(
        slices
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .count(),
    ))
}

/// The Lease; `Ok(Ok(None))` when it is not there.
pub async fn lease(client: &Client, ns: &str, name: &str) -> Result<Readable<Option<LeaseSeen>>> {
    let got = Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await;
    Ok(readable(&format!("get Lease {ns}/{name}"), got)?.map(|l| {
        l.and_then(|l| l.spec).map(|s| LeaseSeen {
            holder: s.holder_identity.unwrap_or_default(),
            renewed: s.renew_time.map(|t| t.0),
            duration: s
                .lease_duration_seconds
                .and_then(|d| u64::try_from(d).ok())
                .map(std::time::Duration::from_secs),
        })
    }))
}

/// Every node, as the node checks read it.
pub async fn nodes(client: &Client) -> Result<Vec<NodeSeen>> {
    let list = snapshot::nodes(client)
        .await
        .map_err(Error::kube("listing nodes"))?;
    Ok(list.iter().filter_map(node_seen).collect())
}

/// What the node checks read of `n`: its projection, and whether it is
/// annotated `nodegate.dev/timed-out`; `None` for a node without a name.
pub fn node_seen(n: &Node) -> Option<NodeSeen> {
    let info = project::node(n).0?;
    let annotations = n.metadata.annotations.as_ref();
    Some(NodeSeen {
        timed_out: annotations.is_some_and(|a| a.contains_key(TIMED_OUT)),
        suspended: info.suspended,
        created: Some(info.created),
        gated_since: info.gated_since,
        name: info.name,
        labels: info.labels,
        taints: info.taints,
    })
}

/// nodegate's Deployment, if there.
pub async fn deployment(
    client: &Client,
    ns: &str,
    name: &str,
) -> Result<Readable<Option<Deployment>>> {
    let got = Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await;
    readable(&format!("get Deployment {ns}/{name}"), got)
}

/// Whether the API server lets `account` (NAMESPACE, NAME) do each access;
/// `None` when these credentials may not ask.
pub async fn access(
    client: &Client,
    account: &(String, String),
    wanted: Vec<Access>,
) -> Result<Option<Vec<(Access, bool)>>> {
    let (ns, name) = account;
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let mut out = Vec::new();
    for a in wanted {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!("system:serviceaccount:{ns}:{name}")),
                groups: Some(vec![
                    "system:serviceaccounts".to_string(),
                    format!("system:serviceaccounts:{ns}"),
                    "system:authenticated".to_string(),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(a.verb.to_string()),
                    group: Some(a.group.to_string()),
                    resource: Some(a.resource.to_string()),
                    subresource: a.subresource.map(str::to_string),
                    namespace: a.namespace.clone(),
                    name: a.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &review).await {
            Ok(r) => out.push((a, r.status.is_some_and(|s| s.allowed))),
            Err(kube::Error::Api(s)) if s.code == 403 => return Ok(None),
            Err(e) => return Err(Error::kube("creating a SubjectAccessReview")(e)),
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_seen_reads_the_projection_and_the_timed_out_annotation() {
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"pool": "gpu"},
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {"nodegate.dev/timed-out": "2026-01-01T00:05:00Z",
                                         "nodegate.dev/suspend": "true"}},
            "spec": {"taints": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]},
        }))
        .unwrap();
        let seen = node_seen(&n).unwrap();
        assert_eq!(seen.name, "n1");
        assert!(seen.timed_out);
        assert!(seen.suspended);
        assert_eq!(seen.labels.get("pool").map(|v| v.as_ref()), Some("gpu"));
        assert_eq!(seen.taints.len(), 1);
        assert_eq!(seen.created, Some("2026-01-01T00:00:00Z".parse().unwrap()));
        let plain: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n2", "creationTimestamp": "2026-01-01T00:00:00Z"},
        }))
        .unwrap();
        let seen = node_seen(&plain).unwrap();
        assert!(!seen.timed_out);
        assert!(!seen.suspended);
        let nameless: Node = serde_json::from_value(serde_json::json!({"metadata": {}})).unwrap();
        assert_eq!(node_seen(&nameless), None);
    }
}
