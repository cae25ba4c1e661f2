//! The cluster of `tests/e2e_explain*.rs`, set up the way a new user's would
//! look — a cordoned node, a GPU node, zone labels, an arm64 node, an edge
//! node with a transient taint, and the usual mix of DaemonSets, one for each
//! way a DaemonSet can stand on a node — and how to run `nodegate explain`
//! against it.
#![allow(dead_code)] // each test file uses a different part

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{TestCluster, fake_node, wait_for};

pub const NS: &str = "infra";
pub const GATE: &str = "nodegate.dev/initializing";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const ARCH: &str = "kubernetes.io/arch";
pub const GPU: &str = "nvidia.com/gpu";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

pub const CONFIG: &str = "\
criticalPods:
- name: agent-everywhere
  namespace: infra
  selector:
    matchLabels: {app: everywhere}
- name: arm-firmware
  namespace: infra
  selector:
    matchLabels: {app: firmware}
  nodeSelector:
    matchLabels: {kubernetes.io/arch: arm64}
";

/// A DaemonSet in `NS` whose pod spec is `spec_extra` over one container.
pub fn daemonset(name: &str, spec_extra: Value, annotations: Value, hold: bool) -> DaemonSet {
    let mut pod_spec = json!({
        "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
    });
    if let (Some(base), Some(extra)) = (pod_spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    let mut labels = json!({"app": name});
    if hold {
        labels["nodegate.test/hold-not-ready"] = json!("true");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        },
    }))
    .expect("daemonset manifest")
}

pub fn tolerate(keys: &[&str]) -> Value {
    Value::Array(
        keys.iter()
            .map(|k| json!({"key": k, "operator": "Exists"}))
            .collect(),
    )
}

/// The DaemonSets a new user's cluster typically has, one for each way a
/// DaemonSet can stand on a node.
pub fn daemonsets() -> Vec<DaemonSet> {
    let mut patient = daemonset(
        "patient",
        json!({"tolerations": tolerate(&[GATE, GPU])}),
        json!({}),
        false,
    );
    if let Some(spec) = patient.spec.as_mut() {
        spec.min_ready_seconds = Some(3600);
    }
    vec![
        // A log agent: tolerates everything.
        daemonset(
            "everywhere",
            json!({"tolerations": [{"operator": "Exists"}]}),
            json!({}),
            false,
        ),
        daemonset(
            "arm-only",
            json!({"nodeSelector": {ARCH: "arm64"}, "tolerations": tolerate(&[GATE])}),
            json!({}),
            false,
        ),
        daemonset(
            "zone-a",
            json!({
                "tolerations": tolerate(&[GATE]),
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": ZONE, "operator": "In", "values": ["a"]}]}]}}},
            }),
            json!({}),
            false,
        ),
        daemonset(
            "no-gpu",
            json!({"tolerations": tolerate(&[GATE])}),
            json!({}),
            false,
        ),
        daemonset(
            "ignored",
            json!({"tolerations": [{"operator": "Exists"}]}),
            json!({"nodegate.dev/ignore": "true"}),
            false,
        ),
        daemonset(
            "held",
            json!({"tolerations": tolerate(&[GATE, GPU])}),
            json!({}),
            true,
        ),
        // Does not tolerate nodegate's taint: can only start once it is gone.
        daemonset("after-gate", json!({}), json!({}), false),
        patient,
        // More CPU than any node has: the scheduler leaves it Pending.
        daemonset(
            "hungry",
            json!({
                "nodeSelector": {ARCH: "arm64"},
                "tolerations": tolerate(&[GATE]),
                "containers": [{"name": "agent", "image": "registry.invalid/agent:1",
                                "resources": {"requests": {"cpu": "100"}}}],
            }),
            json!({}),
            false,
        ),
    ]
}

pub fn taints_of(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| ts.iter().map(|t| t.key.clone()).collect())
        .unwrap_or_default()
}

pub fn pod_state(p: &Pod) -> (bool, bool) {
    let conds = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    let is = |ty: &str, st: &str| {
        conds.is_some_and(|cs| cs.iter().any(|c| c.type_ == ty && c.status == st))
    };
    (is("Ready", "True"), is("PodScheduled", "False"))
}

/// Waits until every pod the DaemonSet controller, scheduler and kwok will
/// produce is there and in its final state.
pub async fn wait_settled(pods: &Api<Pod>, extra: &[(&str, &str, bool)]) {
    // (app, node or "" for unbound, Ready?)
    let want: &[(&str, &str, bool)] = &[
        ("everywhere", "ng-cordoned", true),
        ("everywhere", "ng-gpu", true),
        ("everywhere", "ng-arm", true),
        ("everywhere", "ng-edge", true),
        ("ignored", "ng-cordoned", true),
        ("ignored", "ng-gpu", true),
        ("ignored", "ng-arm", true),
        ("ignored", "ng-edge", true),
        ("arm-only", "ng-arm", true),
        ("zone-a", "ng-cordoned", true),
        ("zone-a", "ng-arm", true),
        ("no-gpu", "ng-cordoned", true),
        ("no-gpu", "ng-arm", true),
        ("held", "ng-cordoned", false),
        ("held", "ng-gpu", false),
        ("held", "ng-arm", false),
        ("after-gate", "ng-cordoned", true),
        ("patient", "ng-cordoned", true),
        ("patient", "ng-gpu", true),
        ("patient", "ng-arm", true),
        ("hungry", "", false),
    ];
    wait_for(
        "every DaemonSet pod in its final state",
        Duration::from_secs(120),
        || async {
            let list = pods
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut have: Vec<(String, String, bool)> = Vec::new();
            for p in &list.items {
                let app = p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("app"))
                    .cloned()
                    .unwrap_or_default();
                let node = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let (ready, unschedulable) = pod_state(p);
                // The unbound pod counts once the scheduler has said why.
                if node.is_empty() && !unschedulable {
                    continue;
                }
                have.push((app, node, ready));
            }
            have.sort();
            let mut want: Vec<(String, String, bool)> = want
                .iter()
                .chain(extra)
                .map(|(a, n, r)| (a.to_string(), n.to_string(), *r))
                .collect();
            want.sort();
            if have == want {
                Ok(())
            } else {
                Err(format!("want {want:?}\nhave {have:?}"))
            }
        },
    )
    .await
}

pub fn explain(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("explain")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nodegate explain: {e}"))
}

pub fn explain_json(kubeconfig: &Path, config: &Path, node: &str) -> Value {
    let out = explain(
        kubeconfig,
        &[
            node,
            "-o",
            "json",
            "--config",
            config.to_str().expect("utf-8 path"),
        ],
    );
    assert!(
        out.status.success(),
        "explain {node} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "explain {node} -o json printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

pub fn show_table(kubeconfig: &Path, config: &Path, node: &str) {
    let out = explain(
        kubeconfig,
        &[node, "--config", config.to_str().expect("utf-8 path")],
    );
    assert!(out.status.success(), "explain {node} (table) failed");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("---- nodegate explain {node} ----\n{text}");
    for line in text.lines() {
        assert!(line.chars().count() <= 100, "line wider than 100: {line:?}");
    }
}

/// Creates the four nodes, cordons one, creates [`daemonsets`] and `extra`
/// (DaemonSets in `NS`), and waits until every pod they produce is in its
/// final state (`extra_pods`: the extra DaemonSets' pods, as
/// [`wait_settled`] counts them).
pub async fn new_users_cluster(
    cluster: &TestCluster,
    extra: &[DaemonSet],
    extra_pods: &[(&str, &str, bool)],
) {
    cluster.namespace(NS).await;
    let c = cluster.client.clone();
    let nodes: Api<Node> = Api::all(c.clone());
    let pods: Api<Pod> = Api::namespaced(c.clone(), NS);
    let dss: Api<DaemonSet> = Api::namespaced(c, NS);

    let gate = (GATE, "", "NoSchedule");
    cluster
        .create_node(&fake_node(
            "ng-cordoned",
            &[(ZONE, "a"), (ARCH, "amd64")],
            &[],
        ))
        .await;
    cluster
        .create_node(&fake_node(
            "ng-gpu",
            &[(ZONE, "b"), (ARCH, "amd64")],
            &[gate, (GPU, "present", "NoSchedule")],
        ))
        .await;
    cluster
        .create_node(&fake_node(
            "ng-arm",
            &[(ZONE, "a"), (ARCH, "arm64")],
            &[gate],
        ))
        .await;
    cluster
        .create_node(&fake_node(
            "ng-edge",
            &[(ZONE, "c"), (ARCH, "amd64")],
            &[
                gate,
                ("dedicated", "edge", "NoExecute"),
                (
                    "node.cloudprovider.kubernetes.io/uninitialized",
                    "true",
                    "NoSchedule",
                ),
            ],
        ))
        .await;
    // `kubectl cordon`: the node lifecycle controller turns it into a taint.
    nodes
        .patch(
            "ng-cordoned",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon ng-cordoned");
    wait_for(
        "the cordon's taint on ng-cordoned",
        Duration::from_secs(60),
        || async {
            let n = nodes.get("ng-cordoned").await.map_err(|e| e.to_string())?;
            let keys = taints_of(&n);
            if keys.iter().any(|k| k == UNSCHEDULABLE) {
                Ok(())
            } else {
                Err(format!("taints {keys:?}"))
            }
        },
    )
    .await;

    for ds in daemonsets() {
        dss.create(&PostParams::default(), &ds)
            .await
            .expect("create daemonset");
    }
    for ds in extra {
        dss.create(&PostParams::default(), ds)
            .await
            .expect("create extra daemonset");
    }
    wait_settled(&pods, extra_pods).await;
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
