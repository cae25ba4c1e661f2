//! nodegate as users run it: its image, imported into a real node's
//! containerd (deploy/local/up --real-node), installed by `helm install`
//! and by `kubectl apply -k`, running as two real pods with their projected
//! ServiceAccount token, gating the real node its kubelet registered with
//! the startup taint until a real DaemonSet container's readiness probe
//! passes.
//!
//! One real node runs per machine, so these tests take a machine-wide lock
//! (TestCluster::start_real_node) and run one after the other.

use super::*;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

use super::rbac::{the_token_gets_exactly_deploys_rights, token_kubeconfig};

#[path = "real_node/leaders.rs"]
mod leaders;

const REAL_NODE: &str = "real-node-1";
/// The label the real node's kubelet registers with (deploy/local).
const REAL_LABEL: &str = "nodegate.dev/local-real-node";
const BUSYBOX: &str = "nodegate.dev/local/busybox:1";

fn state_dir(cluster: &TestCluster) -> PathBuf {
    cluster
        .state_dir()
        .expect(
            "the real-node tests start their own cluster (NODEGATE_E2E_KUBECONFIG is not for them)",
        )
        .to_path_buf()
}

/// nodegate's image archive: `$NODEGATE_IMAGE_ARCHIVE`, or what
/// `deploy/image/build` prints (it returns at once when the image is built;
/// after a commit it rebuilds the binary, minutes: call it before the
/// cluster starts, or the real node's deadline runs meanwhile).
fn image_archive() -> PathBuf {
    if let Some(p) = std::env::var_os("NODEGATE_IMAGE_ARCHIVE") {
        return PathBuf::from(p);
    }
    let out = run(&repo_root().join("deploy/image/build"), &[], None);
    let out = must("deploy/image/build", out);
    PathBuf::from(out.stdout.trim())
}

/// Imports nodegate's image (the archive `image_archive` gave) into the real
/// node's containerd, under the name the manifests use
/// (ghcr.io/nodegate/nodegate:VERSION): no registry.
fn import_image(cluster: &TestCluster, archive: &Path) {
    let dir = state_dir(cluster);
    must(
        "import nodegate's image into the real node",
        run(
            &repo_root().join("deploy/local/real-node"),
            &[
                "import",
                "--state-dir",
                &dir.to_string_lossy(),
                &archive.to_string_lossy(),
            ],
            None,
        ),
    );
}

/// An infrastructure DaemonSet in kube-system (where the shipped install
/// looks for them) that tolerates everything, as CNI agents do. Its real
/// container turns Ready when its exec readiness probe finds `ready` in a
/// host directory the test controls.
fn agent_daemonset(host_dir: &Path) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "node-agent", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "node-agent"}},
            "template": {
                "metadata": {"labels": {"app": "node-agent"}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "agent",
                        "image": BUSYBOX,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/sleep", "2147483647"],
                        "readinessProbe": {
                            "exec": {"command": ["/bin/test", "-f", "/gate/ready"]},
                            "periodSeconds": 1,
                        },
                        "volumeMounts": [{"name": "gate", "mountPath": "/gate", "readOnly": true}],
                    }],
                    "volumes": [{"name": "gate", "hostPath": {
                        "path": host_dir.to_string_lossy(), "type": "DirectoryOrCreate",
                    }}],
                },
            },
        },
    })
}

/// A workload with no toleration, for the real node only.
fn workload_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {REAL_LABEL: "true"},
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                "command": ["/bin/sleep", "2147483647"],
            }],
        },
    })
}

fn apply(cluster: &TestCluster, what: &str, obj: &Value) {
    must(
        what,
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            Some(&to_stream(&[obj])),
        ),
    );
}

fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

/// The lastTransitionTime of a pod's condition, when it is True.
fn condition_true_since(p: &Pod, kind: &str) -> Option<Timestamp> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

fn ready(p: &Pod) -> bool {
    condition_true_since(p, "Ready").is_some()
}

/// nodegate's pods in `ns`: (name, Ready, uid, node).
async fn nodegate_pods(cluster: &TestCluster, ns: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let lp = ListParams::default().labels("app.kubernetes.io/name=nodegate");
    pods.list(&lp).await.map(|l| l.items).unwrap_or_default()
}

fn pod_name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

/// Both replicas Running and Ready, on the real node, and one of them holds
/// the Lease. Returns the holder's pod name.
async fn both_ready_one_leader(cluster: &TestCluster, ns: &str) -> String {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), ns);
    wait_for(
        "both nodegate pods Ready on the real node, and a Lease holder among them",
        Duration::from_secs(120),
        || async {
            let pods = nodegate_pods(cluster, ns).await;
            let live: Vec<&Pod> = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let summary = || {
                live.iter()
                    .map(|p| format!("{} ready={}", pod_name(p), ready(p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if live.len() != 2 || !live.iter().all(|p| ready(p)) {
                return Err(format!("pods: [{}]", summary()));
            }
            for p in &live {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                assert_eq!(
                    node.as_deref(),
                    Some(REAL_NODE),
                    "nodegate pod {} must run on the real node",
                    pod_name(p)
                );
            }
            let holder = lease_holder(&leases)
                .await
                .ok_or_else(|| format!("no Lease holder; pods: [{}]", summary()))?;
            live.iter()
                .map(|p| pod_name(p))
                .find(|n| holder.starts_with(n.as_str()))
                .ok_or_else(|| format!("holder {holder} is not a live pod: [{}]", summary()))
        },
    )
    .await
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("nodegate")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Waits for `node` to be opened; returns (opened-by, opened-at).
async fn wait_opened(cluster: &TestCluster, node: &str, ns: &str) -> (String, Timestamp) {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    wait_for_or(
        &format!("node {node} opened"),
        Duration::from_secs(90),
        || async {
            let n = nodes.get(node).await.map_err(|e| e.to_string())?;
            match (
                annotation(&n, "nodegate.dev/opened-by"),
                annotation(&n, "nodegate.dev/opened-at"),
            ) {
                (Some(by), Some(at)) if !has_taint(&n, TAINT) => {
                    let at: Timestamp = at
                        .parse()
                        .map_err(|e| format!("opened-at {at:?} does not parse: {e}"))?;
                    Ok((by, at))
                }
                _ => Err(format!("taints {:?}", n.spec.and_then(|s| s.taints))),
            }
        },
        || {
            let logs = cluster.kubectl(&[
                "-n",
                ns,
                "logs",
                "-l",
                "app.kubernetes.io/name=nodegate",
                "--tail=20",
            ]);
            format!("nodegate's logs:\n{logs}")
        },
    )
    .await
}

/// The token the kubelet projected into a running pod, read from the real
/// node's volume directory (the pod's own credential, not a TokenRequest
/// made for the test).
fn projected_token(cluster: &TestCluster, pod: &Pod) -> String {
    let uid = pod.metadata.uid.clone().expect("a pod has a uid");
    let volumes = state_dir(cluster)
        .join("node/kubelet/pods")
        .join(&uid)
        .join("volumes/kubernetes.io~projected");
    let entries = std::fs::read_dir(&volumes)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", volumes.display()));
    for e in entries.flatten() {
        let token = e.path().join("token");
        if let Ok(t) = std::fs::read_to_string(&token) {
            return t.trim().to_string();
        }
    }
    panic!("no projected token under {}", volumes.display())
}

/// /metrics through the metrics Service (the API server's service proxy
/// picks a ready endpoint).
fn metrics_through_service(cluster: &TestCluster, ns: &str) -> String {
    let path = format!("/api/v1/namespaces/{ns}/services/nodegate-metrics:8080/proxy/metrics");
    must(
        "scrape /metrics through the Service",
        kubectl(&cluster.kubeconfig, &["get", "--raw", &path], None),
    )
    .stdout
}

#[path = "real_node/helm.rs"]
mod helm;
#[path = "real_node/kustomize.rs"]
mod kustomize;
#[path = "real_node/registry.rs"]
mod registry;
