//! What a tenant of the cluster cannot do to a gate, on the real API server.
//!
//! A DaemonSet's pods are its own only in its own namespace: an owner
//! reference is namespace-local in Kubernetes, so a pod in another namespace
//! naming the DaemonSet's UID as its controller is a forgery, and it never
//! satisfies the member however Ready it is.
//!
//! With `--daemonset-namespaces`, a DaemonSet outside the listed namespaces
//! is no member at all: a tenant's DaemonSet that never turns Ready holds no
//! node closed.

use nodegate_e2e as support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::gate::{DsSpec, Env, annotation, daemonset, has_gate_taint};
use support::{Nodegate, http_get, wait_for};

const TENANT: &str = "tenant";

/// The pod a tenant would write to open a node early: bound to the node,
/// claiming the DaemonSet `uid` as controller, labelled as a DaemonSet pod
/// (nodegate's pod watch selects on it) and annotated Ready.
fn forged_pod(node: &str, ds_name: &str, uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": "forged",
            "namespace": TENANT,
            "labels": {"pod-template-generation": "1"},
            "annotations": {"nodegate.dev/ready": "true"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds_name,
                "uid": uid, "controller": true
            }]
        },
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "registry.invalid/forged:1"}]
        }
    }))
    .expect("pod manifest")
}

/// Whether one entry of the gate's journal (`/debug/nodes/NODE`) holds
/// every one of `words`.
fn journal_shows(detail: &Value, words: &[&str]) -> bool {
    detail["journal"].as_array().is_some_and(|entries| {
        entries.iter().any(|e| {
            let text = e["event"].to_string();
            words.iter().all(|w| text.contains(w))
        })
    })
}

/// The gate's detail once its journal shows one of `alternatives`, each
/// a set of words in one entry.
async fn detail_showing(debug: &str, node: &str, alternatives: &[&[&str]]) -> Value {
    wait_for(
        &format!("{node}'s gate to journal one of {alternatives:?}"),
        Duration::from_secs(30),
        || async {
            let (_, body) = http_get(debug, &format!("/debug/nodes/{node}")).await?;
            let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
            if alternatives.iter().any(|words| journal_shows(&v, words)) {
                Ok(v)
            } else {
                Err(body)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_forging_a_daemonset_owner_from_another_namespace_satisfies_no_member() {
    let env = Env::new("tenant-forged-owner").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    let debug = ng.debug_addr(Duration::from_secs(30));
    env.create_node("node-a", &[]).await;
    env.wait_pod("agent", "node-a", false).await;

    let uid = env
        .daemonsets
        .get("agent")
        .await
        .expect("get the DaemonSet")
        .metadata
        .uid
        .expect("the DaemonSet's uid");
    env.cluster.namespace(TENANT).await;
    let pods: Api<Pod> = Api::namespaced(env.cluster.client.clone(), TENANT);
    pods.create(&PostParams::default(), &forged_pod("node-a", "agent", &uid))
        .await
        .expect("create the forged pod");

    // The gate has seen the forged pod Running: the step that journals it
    // also judges the member again (before the fix it journalled
    // `member_ready` with the forged pod there and sent the untaint). The
    // garbage collector deletes the forged pod within milliseconds, its
    // owner being in another namespace (that was enough to open the node);
    // if it wins the race, the gate saw it go, and nothing is proven either
    // way, but nothing may have been opened either ...
    let running: &[&str] = &["\"forged\"", "Running"];
    let removed: &[&str] = &["pod_removed", "tenant/forged"];
    let detail = detail_showing(&debug, "node-a", &[running, removed]).await;
    assert!(
        !journal_shows(&detail, &["member_ready", "forged"]),
        "the forged pod made the member Ready: {detail}"
    );
    // ... and the gate still waits for the DaemonSet's own pod.
    let agent = detail["expected"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["member"] == "infra/agent"))
        .unwrap_or_else(|| panic!("no infra/agent member: {detail}"));
    assert_eq!(agent["ready"], false, "{detail}\n{}", ng.logs());
    assert!(
        has_gate_taint(&env.node("node-a").await),
        "the forged pod opened the node:\n{}",
        ng.logs()
    );

    // The DaemonSet's own pod opens it.
    env.release("agent", "node-a").await;
    env.wait_open("node-a", Duration::from_secs(30), &[&ng])
        .await;
}

/// `daemonset(spec)`, in `namespace`, tolerating every taint (what a tenant
/// would write to land on every node).
fn daemonset_in(namespace: &str, spec: DsSpec) -> DaemonSet {
    let mut ds = daemonset(&spec);
    ds.metadata.namespace = Some(namespace.to_string());
    if let Some(pod) = ds.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        pod.tolerations = Some(vec![
            serde_json::from_value(json!({"operator": "Exists"})).expect("toleration"),
        ]);
    }
    ds
}

/// Hardening: a tenant allowed to create DaemonSets in their own
/// namespace deploys one that tolerates everything and never turns Ready.
/// With `--daemonset-namespaces kube-system`, a new node opens by the
/// readiness of the system DaemonSet alone, long before its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_daemonset_outside_the_allowed_namespaces_holds_no_node_closed() {
    let env = Env::new("tenant-daemonset-namespaces").await;
    let c = env.cluster.client.clone();
    env.cluster.namespace(TENANT).await;
    let system: Api<DaemonSet> = Api::namespaced(c.clone(), "kube-system");
    system
        .create(
            &PostParams::default(),
            &daemonset_in("kube-system", DsSpec::new("cni")),
        )
        .await
        .expect("create the system DaemonSet");
    let tenant: Api<DaemonSet> = Api::namespaced(c.clone(), TENANT);
    tenant
        .create(
            &PostParams::default(),
            &daemonset_in(
                TENANT,
                DsSpec {
                    hold: true,
                    ..DsSpec::new("never-ready")
                },
            ),
        )
        .await
        .expect("create the tenant's DaemonSet");

    let ng = Nodegate::start(
        &env.cluster,
        &["--timeout", "5m", "--daemonset-namespaces", "kube-system"],
    );
    env.create_node("node-a", &[]).await;
    // The tenant's pod is on the node, Running and never Ready ...
    let tenant_pods: Api<Pod> = Api::namespaced(c, TENANT);
    wait_for(
        "the tenant's pod Running on node-a",
        Duration::from_secs(60),
        || async {
            let list = tenant_pods
                .list(&ListParams::default().labels("app=never-ready"))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .iter()
                .find(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-a")
                        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .map(|_| ())
                .ok_or_else(|| {
                    format!(
                        "{:?}",
                        list.items.iter().map(|p| &p.status).collect::<Vec<_>>()
                    )
                })
        },
    )
    .await;
    // ... and the node opens by readiness (the deadline is 5 minutes away).
    env.wait_open("node-a", Duration::from_secs(60), &[&ng])
        .await;
    assert_eq!(
        annotation(&env.node("node-a").await, "nodegate.dev/opened-by").as_deref(),
        Some("ready"),
        "{}",
        ng.logs()
    );
}
