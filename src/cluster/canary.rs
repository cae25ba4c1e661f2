//! The canary pods' requests (semantics.md §6.9): the pod nodegate makes on
//! a gated node, its deletion, and the LIST of every canary. The canary
//! decider decides; the writer sends each request.
//!
//! The pod is bound with `spec.nodeName` (no scheduler), tolerates exactly
//! the managed taints (a NoExecute one would otherwise make the kubelet
//! refuse it), runs with nothing it does not need, and is owned by its
//! Node, so the garbage collector removes it with the node should nodegate
//! not be running then.
//! `restartPolicy: Always`: a container that exits is the kubelet's to
//! restart; a canary that ends (`Failed`: refused at admission, evicted) is
//! nodegate's to replace.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, SeccompProfile, SecurityContext,
    Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use nodegate_core::canary::CANARY_LABEL;
use nodegate_core::deciders::{CanaryCreate, CanaryDelete};
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::vocab::model::PodInfo;

use crate::cluster::project;
use crate::settings::config::CanaryPod;

/// The user a canary runs as when the image says nothing (the pause
/// image's own).
const CANARY_USER: i64 = 65535;
/// Seconds a canary gets to stop: it holds nothing worth a clean stop.
const GRACE_SECONDS: i64 = 1;
/// The field manager and `app.kubernetes.io/managed-by` of every canary.
const MANAGER: &str = "nodegate";

/// What the writer needs to make and remove canaries.
pub struct Canaries {
    pub namespace: String,
    pub pod: CanaryPod,
    /// The managed taints at start, which every canary tolerates.
    pub tolerate: Vec<ManagedTaint>,
}

impl Canaries {
    fn api(&self, client: &Client) -> Api<Pod> {
        Api::namespaced(client.clone(), &self.namespace)
    }

    /// The canary for `c`, created (the writer bounds and times it).
    pub async fn create(&self, client: &Client, c: &CanaryCreate) -> Result<(), kube::Error> {
        let pod = build(c, &self.namespace, &self.pod, &self.tolerate);
        let params = PostParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        self.api(client).create(&params, &pod).await.map(|_| ())
    }

    /// The canary `d` names, deleted (the writer bounds and times it).
    pub async fn delete(&self, client: &Client, d: &CanaryDelete) -> Result<(), kube::Error> {
        let params = DeleteParams {
            grace_period_seconds: d.force.then_some(0),
            preconditions: d.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        self.api(client).delete(&d.name, &params).await.map(|_| ())
    }

    /// Every canary in the namespace (a quorum read), projected like the
    /// watch projects them.
    pub async fn list(&self, client: &Client) -> Result<Vec<PodInfo>, String> {
        let params = ListParams::default().labels(CANARY_LABEL);
        match self.api(client).list(&params).await {
            Ok(list) => Ok(list.items.iter().filter_map(project::pod).collect()),
            Err(e) => Err(format!(
                "listing pods labelled {CANARY_LABEL} in namespace {}: {e}",
                self.namespace
            )),
        }
    }
}

/// The canary pod for `c`.
pub fn build(c: &CanaryCreate, namespace: &str, t: &CanaryPod, tolerate: &[ManagedTaint]) -> Pod {
    let labels = [
        (CANARY_LABEL, c.label.as_str()),
        ("app.kubernetes.io/managed-by", MANAGER),
        ("app.kubernetes.io/name", "nodegate-canary"),
    ];
    Pod {
        metadata: ObjectMeta {
            name: Some(c.name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some(labels.map(|(k, v)| (k.to_string(), v.to_string())).into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: c.node.clone(),
                uid: c.node_uid.clone(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(spec(c, t, tolerate)),
        status: None,
    }
}

fn spec(c: &CanaryCreate, t: &CanaryPod, tolerate: &[ManagedTaint]) -> PodSpec {
    let tolerations = tolerate.iter().map(|m| Toleration {
        key: Some(m.key.clone()),
        operator: Some("Exists".into()),
        effect: Some(m.effect.clone()).filter(|e| !e.is_empty()),
        ..Default::default()
    });
    PodSpec {
        node_name: Some(c.node.clone()),
        restart_policy: Some("Always".into()),
        termination_grace_period_seconds: Some(GRACE_SECONDS),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        priority_class_name: t.priority_class_name.clone(),
        tolerations: Some(tolerations.collect()),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(CANARY_USER),
            run_as_group: Some(CANARY_USER),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        containers: vec![Container {
            name: "canary".into(),
            image: Some(t.image.clone()),
            image_pull_policy: Some(t.image_pull_policy.clone()),
            readiness_probe: t.readiness_probe.clone(),
            resources: Some(t.resources.clone()),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                privileged: Some(false),
                read_only_root_filesystem: Some(true),
                run_as_non_root: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
