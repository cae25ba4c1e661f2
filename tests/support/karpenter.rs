//! The real Karpenter (its kwok cloud provider, `deploy/local/karpenter`) on
//! a test cluster, nodegate set up the way it must be under Karpenter, and a
//! recorder of what both did to Nodes and NodeClaims, in the API server's own
//! order.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};

use super::{TestCluster, local_bin, local_script, repo_root, wait_for};

/// The startup taint's key under Karpenter: a `readiness.k8s.io/` key, which
/// Karpenter (≥ 1.13) treats as temporary while a node initializes.
pub const GATE_KEY: &str = "readiness.k8s.io/nodegate";
/// nodegate's historical default key, which Karpenter does not know.
pub const OLD_KEY: &str = "nodegate.dev/initializing";
/// The key the tests gate with. Set `OLD_KEY` here to see the tests fail the
/// way nodegate's old default made Karpenter fail (docs in the test file).
pub const KEY: &str = GATE_KEY;
/// The namespace of the tests' workloads and DaemonSets.
pub const NS: &str = "karpenter-e2e";

/// nodegate's flags under Karpenter: the defaults (`--autoscaler auto`:
/// nodes labelled `karpenter.sh/nodepool` get `readiness.k8s.io/nodegate`,
/// and open only after `karpenter.sh/registered=true`) plus a deadline long
/// enough that no gate opens by it here, and `extra`.
pub fn nodegate_flags(extra: &[&str]) -> Vec<String> {
    let mut flags = vec!["--timeout".to_string(), "180s".to_string()];
    flags.extend(extra.iter().map(|s| s.to_string()));
    flags
}

/// Runs the cluster's kubectl; panics with its output unless it succeeds.
pub fn kubectl_ok(cluster: &TestCluster, args: &[&str]) -> String {
    let kubectl = local_bin("kubectl");
    let out = Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", kubectl.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubectl {args:?} failed:\n{text}");
    text
}

/// The shipped MutatingAdmissionPolicy (the taint at Node CREATE, before any
/// controller sees the node), its parameters as a leader with the default
/// flags writes them, and its binding to
/// nodes matching `selector` (`matchLabels`), and waits until the API server
/// applies it to a dry-run node carrying those labels.
pub async fn install_admission(cluster: &TestCluster, selector: &[(&str, &str)]) {
    for file in [
        "deploy/kustomize/base/namespace.yaml",
        "deploy/kustomize/base/startup-taint.yaml",
    ] {
        kubectl_ok(cluster, &["apply", "-f", file]);
    }
    super::write_default_admission_params(&cluster.client).await;
    let labels: BTreeMap<_, _> = selector.iter().copied().collect();
    let binding = json!({"spec": {"matchResources": {"objectSelector": {"matchLabels": labels}}}});
    let binding = binding.to_string();
    kubectl_ok(
        cluster,
        &[
            "patch",
            "mutatingadmissionpolicybinding",
            "nodegate-startup-taint",
            "--type=merge",
            "-p",
            &binding,
        ],
    );
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let mut probe = super::fake_node("admission-probe", selector, &[]);
    if let Some(spec) = probe.spec.as_mut() {
        spec.taints = None;
    }
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the API server to apply the admission policy",
        Duration::from_secs(30),
        || async {
            let made = nodes
                .create(&dry, &probe)
                .await
                .map_err(|e| e.to_string())?;
            if gated(&made) {
                Ok(())
            } else {
                Err(format!("probe came back with taints {:?}", taints(&made)))
            }
        },
    )
    .await;
}

/// Karpenter started by `deploy/local/karpenter` in the test's own cluster
/// (`deploy/local/down`, run when the cluster drops, stops it by its pid).
pub struct Karpenter {
    state_dir: PathBuf,
}

impl Karpenter {
    /// Starts Karpenter with `nodepool` (a manifest; `None`: the script's
    /// default NodePool `default`) and waits until it is ready.
    pub fn start(cluster: &TestCluster, nodepool: Option<&Value>) -> Karpenter {
        let state_dir = cluster
            .state_dir()
            .unwrap_or_else(|| {
                panic!("the Karpenter tests start Karpenter in their own cluster: unset NODEGATE_E2E_KUBECONFIG")
            })
            .to_path_buf();
        let mut cmd = Command::new(local_script("karpenter"));
        cmd.arg("start").arg("--state-dir").arg(&state_dir);
        let file = state_dir.join("nodepool.json");
        if let Some(np) = nodepool {
            std::fs::write(&file, np.to_string())
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", file.display()));
            cmd.arg("--nodepool").arg(&file);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run deploy/local/karpenter: {e}"));
        assert!(
            out.status.success(),
            "deploy/local/karpenter start failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Karpenter { state_dir }
    }

    /// Karpenter's pid, as `deploy/local/proc` verifies it.
    pub fn pid(&self) -> i32 {
        let out = self.proc(&["pid", "karpenter"]);
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| {
                panic!(
                    "Karpenter is not running in {}: {}",
                    self.state_dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to Karpenter, through
    /// `deploy/local/proc`, which signals only the process it started.
    pub fn signal(&self, signal: &str) {
        let out = self.proc(&["signal", "karpenter", signal]);
        assert!(
            out.status.success(),
            "SIG{signal} to Karpenter failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    fn proc(&self, args: &[&str]) -> std::process::Output {
        Command::new(local_script("proc"))
            .arg(args[0])
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(&args[1..])
            .output()
            .unwrap_or_else(|e| panic!("cannot run deploy/local/proc: {e}"))
    }

    /// The end of Karpenter's log (for failure output).
    pub fn log_tail(&self, lines: usize) -> String {
        let text =
            std::fs::read_to_string(self.state_dir.join("logs/karpenter.log")).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// A NodePool named `name` like the script's default (one 4-CPU instance
/// type; empty and underused nodes consolidated after 5 s), with `startup`
/// taints (`KEY:EFFECT`) in `startupTaints`.
pub fn nodepool(name: &str, startup: &[&str]) -> Value {
    let startup: Vec<Value> = startup
        .iter()
        .map(|t| {
            let (key, effect) = t.split_once(':').unwrap_or((t, "NoSchedule"));
            json!({"key": key, "effect": effect})
        })
        .collect();
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                    "requirements": [{
                        "key": "node.kubernetes.io/instance-type",
                        "operator": "In",
                        "values": ["c-4x-amd64-linux"],
                    }],
                    "startupTaints": startup,
                    "expireAfter": "Never",
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "5s"},
        },
    })
}

pub fn nodepool_api(cluster: &TestCluster) -> Api<DynamicObject> {
    let ar = karpenter_resource("NodePool", "nodepools");
    Api::all_with(cluster.client.clone(), &ar)
}

pub fn nodeclaims(cluster: &TestCluster) -> Api<DynamicObject> {
    let ar = karpenter_resource("NodeClaim", "nodeclaims");
    Api::all_with(cluster.client.clone(), &ar)
}

fn karpenter_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// An infrastructure DaemonSet as node agents are (CNI, kube-proxy, log
/// shippers): it tolerates every taint, requests 100m CPU, and its pods
/// (kwok) are Running at once and Ready `ready_after` later.
pub fn agent(name: &str, ready_after: &str) -> DaemonSet {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {"nodegate.test/ready-after": ready_after},
                },
                "spec": {
                    "containers": [{
                        "name": "agent",
                        "image": "registry.invalid/agent:1",
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    }],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

/// A workload of `replicas` pods of 850m CPU (four fit a node beside the
/// agents), on nodes of NodePool `pool`. It tolerates no startup taint.
pub fn workload(name: &str, replicas: i32, pool: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": pool},
                    "containers": [{
                        "name": "app",
                        "image": "registry.invalid/app:1",
                        "resources": {"requests": {"cpu": "850m", "memory": "256Mi"}},
                    }],
                },
            },
        },
    }))
    .expect("deployment manifest")
}

/// Creates the agents and the namespace.
pub async fn create_agents(cluster: &TestCluster, agents: &[DaemonSet]) {
    cluster.namespace(NS).await;
    let api: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), NS);
    for ds in agents {
        api.create(&PostParams::default(), ds)
            .await
            .unwrap_or_else(|e| panic!("create daemonset {:?}: {e}", ds.metadata.name));
    }
}

pub async fn create_workload(cluster: &TestCluster, d: &Deployment) {
    let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), NS);
    api.create(&PostParams::default(), d)
        .await
        .unwrap_or_else(|e| panic!("create deployment {:?}: {e}", d.metadata.name));
}

/// Waits until `n` pods of `app` run (phase Running, on a node).
pub async fn wait_running(cluster: &TestCluster, app: &str, n: usize, within: Duration) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    wait_for(&format!("{n} pods of {app} running"), within, || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await
            .map_err(|e| e.to_string())?;
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running >= n {
            Ok(())
        } else {
            Err(format!("{running} of {n} running"))
        }
    })
    .await
}

/// Labels the pod of DaemonSet `app` on `node` `nodegate.test/crash=true`:
/// kwok turns it into a restarting, never-Ready container.
pub async fn break_agent_on(cluster: &TestCluster, app: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap_or_else(|e| panic!("list {app} pods: {e}"));
    let pod = list
        .items
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .unwrap_or_else(|| panic!("no {app} pod on {node}"));
    let name = pod.metadata.name.unwrap_or_default();
    let patch = json!({"metadata": {"labels": {"nodegate.test/crash": "true"}}});
    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("break {name}: {e}"));
}

pub fn taints(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect()
        })
        .unwrap_or_default()
}

/// The node carries the gate's key.
pub fn gated(n: &Node) -> bool {
    has_taint(n, KEY)
}

pub fn has_taint(n: &Node, key: &str) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == key))
}

fn label<'a>(n: &'a Node, key: &str) -> Option<&'a str> {
    n.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// One Node or NodeClaim as the recorder saw it at one resourceVersion.
#[derive(Clone, Debug)]
pub enum Seen {
    Node {
        rv: u64,
        name: String,
        provider: String,
        /// Its `karpenter.sh/nodepool` label.
        pool: String,
        gated: bool,
        registered: bool,
        /// Karpenter's `karpenter.sh/disrupted` taint (it is draining it).
        disrupted: bool,
        /// Being deleted, or gone.
        deleting: bool,
    },
    Claim {
        rv: u64,
        name: String,
        provider: String,
        pool: String,
        initialized: bool,
        deleting: bool,
    },
}

impl Seen {
    fn rv(&self) -> u64 {
        match self {
            Seen::Node { rv, .. } | Seen::Claim { rv, .. } => *rv,
        }
    }

    pub fn pool(&self) -> &str {
        match self {
            Seen::Node { pool, .. } | Seen::Claim { pool, .. } => pool,
        }
    }
}

/// Every change to Karpenter's Nodes and to every NodeClaim from the moment
/// it starts, as two watches saw them. A resourceVersion is opaque to
/// clients in general; on this single etcd it is etcd's revision, so sorting
/// by it orders the two streams as the API server committed them.
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    pub fn start(cluster: &TestCluster) -> Recorder {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let nodes: Api<Node> = Api::all(cluster.client.clone());
        let cfg = watcher::Config::default().labels("karpenter.sh/nodepool");
        let node_seen = seen.clone();
        let node_task = tokio::spawn(async move {
            let mut stream = watcher::watcher(nodes, cfg).default_backoff().boxed();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let (n, gone) = match ev {
                    watcher::Event::Apply(n) | watcher::Event::InitApply(n) => (n, false),
                    watcher::Event::Delete(n) => (n, true),
                    _ => continue,
                };
                push(&node_seen, node_seen_at(&n, gone));
            }
        });
        let claims = nodeclaims(cluster);
        let claim_seen = seen.clone();
        let claim_task = tokio::spawn(async move {
            let mut stream = watcher::watcher(claims, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let (c, gone) = match ev {
                    watcher::Event::Apply(c) | watcher::Event::InitApply(c) => (c, false),
                    watcher::Event::Delete(c) => (c, true),
                    _ => continue,
                };
                push(&claim_seen, claim_seen_at(&c, gone));
            }
        });
        Recorder {
            seen,
            tasks: vec![node_task, claim_task],
        }
    }

    /// Everything seen so far, in the API server's order.
    pub fn timeline(&self) -> Vec<Seen> {
        let mut all = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        all.sort_by_key(Seen::rv);
        all
    }

    /// Everything seen so far of NodePool `pool`'s nodes and NodeClaims.
    pub fn timeline_of(&self, pool: &str) -> Vec<Seen> {
        self.timeline()
            .into_iter()
            .filter(|s| s.pool() == pool)
            .collect()
    }

    /// The names of every NodeClaim of NodePool `pool` seen.
    pub fn claims(&self, pool: &str) -> BTreeSet<String> {
        self.timeline_of(pool)
            .into_iter()
            .filter_map(|s| match s {
                Seen::Claim { name, .. } => Some(name),
                _ => None,
            })
            .collect()
    }

    /// The timeline, one line per change, for failure output.
    pub fn dump(&self) -> String {
        self.timeline()
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn push(seen: &Mutex<Vec<Seen>>, s: Option<Seen>) {
    if let (Some(s), Ok(mut all)) = (s, seen.lock()) {
        all.push(s);
    }
}

fn rv_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

fn node_seen_at(n: &Node, gone: bool) -> Option<Seen> {
    Some(Seen::Node {
        rv: rv_of(&n.metadata)?,
        name: n.metadata.name.clone()?,
        provider: n.spec.as_ref()?.provider_id.clone().unwrap_or_default(),
        pool: label(n, "karpenter.sh/nodepool")
            .unwrap_or_default()
            .to_string(),
        gated: gated(n),
        registered: label(n, "karpenter.sh/registered") == Some("true"),
        disrupted: has_taint(n, "karpenter.sh/disrupted"),
        deleting: gone || n.metadata.deletion_timestamp.is_some(),
    })
}

fn claim_seen_at(c: &DynamicObject, gone: bool) -> Option<Seen> {
    let status = c.data.get("status");
    let initialized = status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Initialized" && c["status"] == "True")
        });
    Some(Seen::Claim {
        rv: rv_of(&c.metadata)?,
        name: c.metadata.name.clone()?,
        provider: status
            .and_then(|s| s.get("providerID"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        pool: c
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("karpenter.sh/nodepool").cloned())
            .unwrap_or_default(),
        initialized,
        deleting: gone || c.metadata.deletion_timestamp.is_some(),
    })
}

/// What a node went through, replayed from the timeline.
#[derive(Default, Debug)]
struct NodeState {
    name: String,
    gated: bool,
    ever_gated: bool,
    opened: bool,
    registered: bool,
}

/// Replays `timeline` and returns every breach of what Karpenter must see
/// from a gated node (tests (b) and (c)):
/// - a node's NodeClaim becomes Initialized while its node is gated, or
///   before the node ever carried the gate (the admission did not gate it);
/// - a gated node gets Karpenter's disruption taint or is deleted, or its
///   NodeClaim is deleted while the node is gated;
/// - with `registration`: the gate opens before `karpenter.sh/registered`,
///   or the key comes back after the gate opened (a bounce).
pub fn breaches(timeline: &[Seen], registration: bool) -> Vec<String> {
    let mut nodes: BTreeMap<String, NodeState> = BTreeMap::new();
    let mut initialized: BTreeSet<String> = BTreeSet::new();
    let mut out = Vec::new();
    for s in timeline {
        match s {
            Seen::Node { .. } => node_step(s, &mut nodes, registration, &mut out),
            Seen::Claim {
                rv,
                name,
                provider,
                initialized: init,
                deleting,
                ..
            } => {
                let node = nodes.get(provider);
                let gated_now = node.is_some_and(|n| n.gated);
                if *deleting && gated_now {
                    out.push(format!(
                        "rv {rv}: NodeClaim {name} deleted while its node is gated"
                    ));
                }
                if *init && initialized.insert(name.clone()) {
                    match node {
                        None => out.push(format!(
                            "rv {rv}: NodeClaim {name} Initialized before its node was seen"
                        )),
                        Some(n) if !n.ever_gated => out.push(format!(
                            "rv {rv}: NodeClaim {name} Initialized but node {} never carried {KEY}",
                            n.name
                        )),
                        Some(n) if n.gated => out.push(format!(
                            "rv {rv}: NodeClaim {name} Initialized while node {} is gated",
                            n.name
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
    }
    out
}

fn node_step(
    s: &Seen,
    nodes: &mut BTreeMap<String, NodeState>,
    registration: bool,
    out: &mut Vec<String>,
) {
    let Seen::Node {
        rv,
        name,
        provider,
        gated,
        registered,
        disrupted,
        deleting,
        ..
    } = s
    else {
        return;
    };
    let st = nodes.entry(provider.clone()).or_default();
    st.name = name.clone();
    if *gated && (*disrupted || *deleting) {
        out.push(format!(
            "rv {rv}: node {name} disrupted (taint {disrupted}, deleted {deleting}) while gated"
        ));
    }
    if *gated && st.opened && registration {
        out.push(format!(
            "rv {rv}: {KEY} came back on {name} after the gate opened (a bounce)"
        ));
    }
    if !*gated && st.gated {
        st.opened = true;
        if registration && !*registered {
            out.push(format!(
                "rv {rv}: the gate on {name} opened before karpenter.sh/registered=true"
            ));
        }
    }
    st.gated = *gated;
    st.ever_gated |= *gated;
    st.registered = *registered;
}

/// Waits until every live NodeClaim of `pool` is Initialized (and there is
/// one at least); returns their names.
pub async fn wait_initialized(cluster: &TestCluster, pool: &str, within: Duration) -> Vec<String> {
    let api = nodeclaims(cluster);
    let lp = ListParams::default().labels(&format!("karpenter.sh/nodepool={pool}"));
    wait_for(
        &format!("every NodeClaim of {pool} Initialized"),
        within,
        || async {
            let list = api.list(&lp).await.map_err(|e| e.to_string())?;
            let live: Vec<_> = list
                .items
                .iter()
                .filter_map(|c| claim_seen_at(c, false))
                .filter(|s| {
                    matches!(
                        s,
                        Seen::Claim {
                            deleting: false,
                            ..
                        }
                    )
                })
                .collect();
            let waiting: Vec<_> = live
                .iter()
                .filter(|s| {
                    matches!(
                        s,
                        Seen::Claim {
                            initialized: false,
                            ..
                        }
                    )
                })
                .collect();
            if !live.is_empty() && waiting.is_empty() {
                Ok(live
                    .iter()
                    .filter_map(|s| match s {
                        Seen::Claim { name, .. } => Some(name.clone()),
                        _ => None,
                    })
                    .collect())
            } else {
                Err(format!("{} live, not Initialized: {waiting:?}", live.len()))
            }
        },
    )
    .await
}
