//! The canary member (`canary`, semantics.md §6.9) against the real local
//! control plane (deploy/local) and kwok's simulated kubelets: nodegate
//! makes a canary pod on each gated node (at most `maxInFlight` at once),
//! the gate waits for its sandbox, opens once it is up, and the canary is
//! deleted when the node opens or goes; a failed canary is explained with
//! the kubelet's words and replaced; a tenant's forgery counts for nothing.
//!
//! kwok's pod stages (deploy/local/kwok-stages.yaml) make a pod Running and
//! Ready but never set `PodReadyToStartContainers`, the condition a real
//! kubelet sets once the sandbox and its network are up: the test sets it
//! by a status patch, as the kubelet would. That also shows that Ready
//! alone does not open the node.

use nodegate_e2e as support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use support::gate::{Env, NS, has_gate_taint, is_ready};
use support::{Nodegate, http_get, wait_for};

const LABEL: &str = "nodegate.dev/canary";

fn canary_name(node: &str) -> String {
    format!("nodegate-canary-{node}")
}

/// The most canaries that existed at once (created, not yet gone), as a
/// watch saw them.
fn count_canaries(pods: Api<Pod>) -> Arc<Mutex<usize>> {
    let most = Arc::new(Mutex::new(0));
    let out = Arc::clone(&most);
    tokio::spawn(async move {
        let mut live: BTreeMap<String, ()> = BTreeMap::new();
        // With backoff: without it a watch whose cluster is gone retries in a
        // busy loop and starves the test it serves.
        let mut stream = watcher(pods, watcher::Config::default().labels(LABEL))
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    live.insert(p.metadata.uid.unwrap_or_default(), ());
                }
                Ok(watcher::Event::Delete(p)) => {
                    live.remove(&p.metadata.uid.unwrap_or_default());
                }
                Ok(watcher::Event::Init) => live.clear(),
                Ok(watcher::Event::InitDone) | Err(_) => {}
            }
            let mut m = out.lock().unwrap_or_else(|e| e.into_inner());
            *m = (*m).max(live.len());
        }
    });
    most
}

/// The gate's reason for waiting on its canary, from `/debug/nodes/NAME`.
async fn canary_why(debug: &str, node: &str) -> Result<String, String> {
    let (status, body) = http_get(debug, &format!("/debug/nodes/{node}")).await?;
    if status != 200 {
        return Err(format!("{status}: {body}"));
    }
    let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    v["blocked_by"]
        .as_array()
        .and_then(|b| b.iter().find(|m| m["member"] == "canary"))
        .and_then(|m| m["why"].as_str().map(str::to_string))
        .ok_or(body)
}

async fn wait_why(debug: &str, node: &str, wanted: &str, ng: &Nodegate) {
    wait_for(
        &format!("{node}'s gate to wait on its canary: {wanted}"),
        Duration::from_secs(60),
        || async {
            let why = canary_why(debug, node).await?;
            if why.contains(wanted) {
                Ok(())
            } else {
                Err(format!("{why}\n{}", ng.logs()))
            }
        },
    )
    .await
}

async fn wait_canary(pods: &Api<Pod>, node: &str, ready: bool) -> Pod {
    let name = canary_name(node);
    wait_for(
        &format!("canary {name} (running and ready: {ready})"),
        Duration::from_secs(60),
        || async {
            let p = pods.get(&name).await.map_err(|e| e.to_string())?;
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            (p.metadata.deletion_timestamp.is_none() && (!ready || (running && is_ready(&p))))
                .then_some(p.clone())
                .ok_or(format!("{:?}", p.status))
        },
    )
    .await
}

async fn wait_gone(pods: &Api<Pod>, name: &str, ng: &Nodegate) {
    wait_for(
        &format!("canary {name} deleted"),
        Duration::from_secs(60),
        || async {
            match pods.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(p)) => Err(format!(
                    "still there (deleting: {})\n{}",
                    p.metadata.deletion_timestamp.is_some(),
                    ng.logs()
                )),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// Sets `PodReadyToStartContainers` as the kubelet does once the sandbox
/// and its network are up.
async fn sandbox_up(pods: &Api<Pod>, name: &str) {
    let patch = json!({"status": {"conditions": [{
        "type": "PodReadyToStartContainers",
        "status": "True",
        "lastTransitionTime": jiff::Timestamp::now().to_string(),
    }]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap_or_else(|e| panic!("status patch of {name}: {e}"));
}

/// A tenant's forgery: a pod in its own namespace on `node`, labelled like
/// a canary (and like a DaemonSet's pod, so nodegate's pod watch sees it),
/// its sandbox up and Ready by its own status patch.
async fn forge(env: &Env, node: &str) -> Api<Pod> {
    env.cluster.namespace("tenant").await;
    let tenant: Api<Pod> = Api::namespaced(env.cluster.client.clone(), "tenant");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "forged", "labels": {LABEL: node, "pod-template-generation": "1"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "forged"}],
                 "tolerations": [{"operator": "Exists"}]},
    }))
    .expect("forged pod manifest");
    tenant
        .create(&PostParams::default(), &pod)
        .await
        .expect("create the forgery");
    sandbox_up(&tenant, "forged").await;
    tenant
}

fn config(dir: &tempfile::TempDir) -> String {
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        format!("canary:\n  namespace: {NS}\n  maxInFlight: 1\n"),
    )
    .expect("write config");
    file.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gate_waits_for_its_canarys_sandbox_and_every_canary_goes_with_its_gate() {
    let env = Env::new("canary").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = config(&dir);
    let ng = Nodegate::start(&env.cluster, &["--timeout", "10m", "--config", &file]);
    let debug = ng.debug_addr(Duration::from_secs(30));
    let most = count_canaries(env.pods.clone());

    // Two gated nodes, one canary at a time: a gets one, b waits for a slot.
    env.create_node("canary-a", &[]).await;
    let a = wait_canary(&env.pods, "canary-a", true).await;
    env.create_node("canary-b", &[]).await;
    wait_why(&debug, "canary-b", "at most 1 at once", &ng).await;

    // a's canary: bound by nodegate, hardened, owned by its node.
    let spec = a.spec.clone().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some("canary-a"));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let owner = &a.metadata.owner_references.clone().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Node", "canary-a")
    );

    // Running and Ready (kwok), but no sandbox condition: a stays closed,
    // and a tenant's forged canary with its sandbox up does not open it.
    let tenant = forge(&env, "canary-a").await;
    wait_why(
        &debug,
        "canary-a",
        "canary pod nodegate-canary-canary-a has no sandbox yet",
        &ng,
    )
    .await;
    assert!(has_gate_taint(&env.node("canary-a").await));

    // The sandbox is up: a opens, its canary goes, b gets the slot.
    sandbox_up(&env.pods, &canary_name("canary-a")).await;
    env.wait_open("canary-a", Duration::from_secs(30), &[&ng])
        .await;
    wait_gone(&env.pods, &canary_name("canary-a"), &ng).await;
    let b = wait_canary(&env.pods, "canary-b", true).await;

    // b's canary fails as a rejected pod does: the gate says why, and the
    // leader replaces it after its backoff.
    let failed = json!({"status": {"phase": "Failed", "reason": "OutOfpods",
        "message": "Node didn't have enough resource: pods"}});
    env.pods
        .patch_status(
            &canary_name("canary-b"),
            &PatchParams::default(),
            &Patch::Merge(failed),
        )
        .await
        .expect("fail the canary");
    wait_why(
        &debug,
        "canary-b",
        "failed: OutOfpods: Node didn't have enough resource: pods",
        &ng,
    )
    .await;
    let old_uid = b.metadata.uid.clone();
    wait_for("b's canary replaced", Duration::from_secs(60), || async {
        let p = env
            .pods
            .get(&canary_name("canary-b"))
            .await
            .map_err(|e| e.to_string())?;
        (p.metadata.uid != old_uid && p.metadata.deletion_timestamp.is_none())
            .then_some(())
            .ok_or(format!("{:?}\n{}", p.status, ng.logs()))
    })
    .await;

    // b goes while gated: its canary goes with it.
    env.nodes
        .delete("canary-b", &DeleteParams::default())
        .await
        .expect("delete node");
    wait_gone(&env.pods, &canary_name("canary-b"), &ng).await;

    let left = env
        .pods
        .list(&ListParams::default().labels(LABEL))
        .await
        .expect("list canaries");
    assert!(left.items.is_empty(), "canaries left: {:?}", left.items);
    let most = most.lock().map(|m| *m).unwrap_or(usize::MAX);
    assert!(most <= 1, "{most} canaries at once under maxInFlight 1");
    assert!(
        tenant.get_opt("forged").await.ok().flatten().is_some(),
        "nodegate touched the tenant's pod"
    );
}

/// `kubectl auth can-i VERB RESOURCE -n NS` as nodegate's ServiceAccount
/// (impersonated): true for "yes".
fn can_i(cluster: &support::TestCluster, verb: &str, resource: &str, ns: &str) -> bool {
    // `pods/eviction` is a subresource: kubectl reads RESOURCE/NAME.
    let (resource, sub) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(format!("--subresource={s}"))),
        None => (resource, None),
    };
    let mut args = vec![
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        ns,
        "--as",
        "system:serviceaccount:nodegate-system:nodegate",
    ];
    args.extend(sub.as_deref());
    let out = cluster.kubectl(&args);
    match out.trim() {
        "yes" => true,
        s if s.starts_with("no") => false,
        other => panic!("kubectl auth can-i {verb} {resource} -n {ns}: {other}"),
    }
}

/// The Role named `*-canary` among rendered manifests, as JSON.
fn canary_roles(manifests: &str) -> Vec<Value> {
    manifests
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(|v| {
            v["kind"] == "Role"
                && v["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("-canary"))
        })
        .collect()
}

fn helm_template(root: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "template",
        "ng",
        "deploy/helm/nodegate",
        "-n",
        "nodegate-system",
    ];
    args.extend_from_slice(extra);
    let out = std::process::Command::new(support::local_bin("helm"))
        .current_dir(root)
        .args(&args)
        .output()
        .expect("helm runs");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The canary's grant, in the kustomize component and the Helm chart alike:
/// create, delete, list and watch pods in nodegate's namespace — a Role,
/// bound to nodegate's ServiceAccount — and nothing else; the chart renders
/// it only when `config.canary.enabled`. Asked of the real API server with
/// the ServiceAccount impersonated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_grant_is_a_role_on_pods_in_nodegates_namespace_only() {
    let root = &*support::repo_root().display().to_string();
    let cluster = support::TestCluster::start("canary-rbac").await;
    cluster.namespace("nodegate-system").await;
    let component = format!("{root}/deploy/kustomize/components/canary/rbac.yaml");
    let applied = cluster.kubectl(&["apply", "-f", &component]);
    assert!(applied.contains("created"), "{applied}");

    for verb in ["create", "delete", "list", "watch"] {
        assert!(can_i(&cluster, verb, "pods", "nodegate-system"), "{verb}");
    }
    for verb in ["update", "patch", "get", "deletecollection"] {
        assert!(!can_i(&cluster, verb, "pods", "nodegate-system"), "{verb}");
    }
    assert!(!can_i(&cluster, "patch", "pods/status", "nodegate-system"));
    assert!(!can_i(
        &cluster,
        "create",
        "pods/eviction",
        "nodegate-system"
    ));
    for ns in ["default", "kube-system"] {
        assert!(!can_i(&cluster, "create", "pods", ns), "create in {ns}");
        assert!(!can_i(&cluster, "delete", "pods", ns), "delete in {ns}");
    }

    // The chart: the same rules, only when enabled.
    let kustomize = canary_roles(&std::fs::read_to_string(&component).expect("read component"));
    let on = canary_roles(&helm_template(
        root,
        &["--set", "config.canary.enabled=true"],
    ));
    assert_eq!(on.len(), 1, "{on:?}");
    assert_eq!(on[0]["rules"], kustomize[0]["rules"]);
    assert_eq!(on[0]["metadata"]["namespace"], "nodegate-system");
    assert!(canary_roles(&helm_template(root, &[])).is_empty());
}
