//! Shared pieces of the gate's end-to-end tests: the test namespace, the
//! startup taint, DaemonSets built from a `DsSpec`, and an `Env` holding a
//! fresh cluster with the APIs the scenarios use.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;

use super::{Nodegate, TestCluster, fake_node};

pub const NS: &str = "infra";
pub const TAINT: &str = "nodegate.dev/initializing";

pub struct DsSpec<'a> {
    pub name: &'a str,
    /// Tolerate nodegate's startup taint (every infrastructure DaemonSet
    /// that must run before workloads does).
    pub tolerate_gate: bool,
    /// Running but not Ready until `Env::release`.
    pub hold: bool,
    pub ready_after: Option<&'a str>,
    pub node_selector: &'a [(&'a str, &'a str)],
}

impl<'a> DsSpec<'a> {
    pub fn new(name: &'a str) -> Self {
        DsSpec {
            name,
            tolerate_gate: true,
            hold: false,
            ready_after: None,
            node_selector: &[],
        }
    }
}

pub fn daemonset(s: &DsSpec) -> DaemonSet {
    let mut labels = BTreeMap::from([("app".to_string(), s.name.to_string())]);
    if s.hold {
        labels.insert("nodegate.test/hold-not-ready".into(), "true".into());
    }
    let mut annotations = BTreeMap::new();
    if let Some(d) = s.ready_after {
        annotations.insert("nodegate.test/ready-after".to_string(), d.to_string());
    }
    let tolerations = if s.tolerate_gate {
        json!([{"key": TAINT, "operator": "Exists"}])
    } else {
        json!([])
    };
    let node_selector: BTreeMap<_, _> = s
        .node_selector
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": s.name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": s.name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": tolerations,
                    "nodeSelector": node_selector,
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

/// A fake node carrying the startup taint.
pub fn gated_node(name: &str, labels: &[(&str, &str)]) -> Node {
    fake_node(name, labels, &[(TAINT, "", "NoSchedule")])
}

pub fn has_gate_taint(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT))
}

pub fn taint_keys(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| ts.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

pub fn annotation(n: &Node, key: &str) -> Option<String> {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key).cloned())
}

pub fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A fresh cluster with the test namespace, and the APIs the scenarios use.
pub struct Env {
    pub cluster: TestCluster,
    pub nodes: Api<Node>,
    pub pods: Api<Pod>,
    pub daemonsets: Api<DaemonSet>,
}

impl Env {
    pub async fn new(test: &str) -> Env {
        let cluster = TestCluster::start(test).await;
        cluster.namespace(NS).await;
        let c = cluster.client.clone();
        Env {
            nodes: Api::all(c.clone()),
            pods: Api::namespaced(c.clone(), NS),
            daemonsets: Api::namespaced(c, NS),
            cluster,
        }
    }

    pub async fn create_ds(&self, s: DsSpec<'_>) {
        self.daemonsets
            .create(&PostParams::default(), &daemonset(&s))
            .await
            .expect("create daemonset");
    }

    /// Creates a gated fake node (see `gated_node`).
    pub async fn create_node(&self, name: &str, labels: &[(&str, &str)]) -> Node {
        self.cluster.create_node(&gated_node(name, labels)).await
    }

    pub async fn node(&self, name: &str) -> Node {
        self.nodes
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("get node {name}: {e}"))
    }

    /// The node's annotation `key`; `None` also when the node is not there.
    pub async fn annotation(&self, node: &str, key: &str) -> Option<String> {
        self.nodes
            .get(node)
            .await
            .ok()
            .and_then(|n| annotation(&n, key))
    }

    /// Waits until the node has no gate taint; returns when it was observed.
    /// On failure prints the node, the pods and the logs of `logs`.
    pub async fn wait_open(&self, name: &str, within: Duration, logs: &[&Nodegate]) -> Instant {
        let cond = |n: Option<&Node>| n.is_some_and(|n| !has_gate_taint(n));
        match tokio::time::timeout(within, await_condition(self.nodes.clone(), name, cond)).await {
            Ok(Ok(_)) => Instant::now(),
            other => panic!(
                "node {name} did not open within {within:?} ({other:?})\nnode: {:?}\npods:\n{}\nnodegate logs:\n{}",
                self.nodes
                    .get(name)
                    .await
                    .ok()
                    .map(|n| (taint_keys(&n), n.metadata.annotations)),
                self.cluster.kubectl(&["get", "pods", "-A", "-o", "wide"]),
                logs.iter()
                    .map(|n| n.logs())
                    .collect::<Vec<_>>()
                    .join("\n----\n")
            ),
        }
    }

    pub async fn pod_on(&self, app: &str, node: &str) -> Result<Pod, String> {
        let list = self
            .pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .ok_or_else(|| format!("no {app} pod on {node} yet"))
    }

    /// Waits up to 60 s for `app`'s pod on `node` to be Running and Ready
    /// (`ready`) or Running and not Ready (`!ready`), as a watch of the
    /// node's pods of `app` sees them.
    pub async fn wait_pod(&self, app: &str, node: &str, ready: bool) {
        let config = kube::runtime::watcher::Config::default()
            .labels(&format!("app={app}"))
            .fields(&format!("spec.nodeName={node}"));
        super::watch_until(
            &self.pods,
            config,
            &format!("{app} on {node} (ready={ready})"),
            Duration::from_secs(60),
            |pods| {
                let states: Vec<String> = pods
                    .iter()
                    .map(|p| {
                        let running =
                            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                        if running && is_ready(p) == ready {
                            return String::new();
                        }
                        format!("running={running} ready={}", is_ready(p))
                    })
                    .collect();
                if states.iter().any(String::is_empty) {
                    Ok(())
                } else if states.is_empty() {
                    Err(format!("no {app} pod on {node} yet"))
                } else {
                    Err(format!("{app} on {node}: {}", states.join(", ")))
                }
            },
        )
        .await
    }

    /// Waits until `check` accepts the node `name`, as a watch of it sees
    /// it (`None`: there is no such node).
    pub async fn wait_node<T>(
        &self,
        name: &str,
        what: &str,
        within: Duration,
        check: impl FnMut(Option<&Node>) -> Result<T, String>,
    ) -> T {
        super::watch_one(&self.nodes, name, what, within, check).await
    }

    /// Lets a held pod (`DsSpec::hold`) become Ready.
    pub async fn release(&self, app: &str, node: &str) {
        let p = self.pod_on(app, node).await.expect("held pod exists");
        let name = p.metadata.name.expect("pod name");
        self.pods
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"nodegate.test/hold-not-ready": null}}}),
                ),
            )
            .await
            .expect("release held pod");
    }

    /// The events (events.k8s.io) in `default` regarding `node`.
    pub async fn events_for(&self, node: &str) -> Vec<KubeEvent> {
        let api: Api<KubeEvent> = Api::namespaced(self.cluster.client.clone(), "default");
        api.list(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
                    .collect()
            })
            .unwrap_or_default()
    }
}
