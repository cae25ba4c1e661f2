//! The startup taint at Node CREATE without a webhook: the shipped
//! MutatingAdmissionPolicy (deploy/kustomize/base/startup-taint.yaml) on
//! deploy/local's real API server. The API server evaluates it itself, so
//! most of these run with nodegate not running at all.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;
use support::gate::{DsSpec, Env, TAINT, annotation, has_gate_taint};
use support::{Nodegate, fake_node, repo_root, wait_for};

const POLICY_FILE: &str = "deploy/kustomize/base/startup-taint.yaml";
const NAMESPACE_FILE: &str = "deploy/kustomize/base/namespace.yaml";

/// Applies the shipped policy, its binding and its parameters, then waits
/// until the API server applies it: a server-side dry-run create of a probe
/// node comes back tainted (nothing is stored by a dry run).
async fn install_policy(env: &Env) {
    for file in [NAMESPACE_FILE, POLICY_FILE] {
        kubectl_ok(
            env,
            &["apply", "-f", &repo_root().join(file).to_string_lossy()],
        );
    }
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for(
        "the API server to apply the policy",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            let dry = dry.clone();
            async move {
                let probe = untainted("policy-probe");
                let made = nodes
                    .create(&dry, &probe)
                    .await
                    .map_err(|e| e.to_string())?;
                if has_gate_taint(&made) {
                    Ok(())
                } else {
                    Err(format!("probe came back with taints {:?}", taints(&made)))
                }
            }
        },
    )
    .await;
}

/// A client with the cluster admin's credentials that impersonates `user`
/// in `groups` (the API server then authorizes and admits the request as
/// that identity).
async fn client_as(kubeconfig: &std::path::Path, user: &str, groups: &[&str]) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", kubeconfig.display()));
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", kubeconfig.display()));
    config.auth_info.impersonate = Some(user.to_string());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| g.to_string()).collect());
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// Runs the cluster's kubectl; panics with its output unless it succeeds.
fn kubectl_ok(env: &Env, args: &[&str]) -> String {
    let kubectl = support::local_bin("kubectl");
    let out = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&env.cluster.kubeconfig)
        .args(args)
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

/// A fake node with no `spec.taints` at all.
fn untainted(name: &str) -> Node {
    let mut n = fake_node(name, &[], &[]);
    if let Some(spec) = n.spec.as_mut() {
        spec.taints = None;
    }
    n
}

/// The node's taints as `KEY[=VALUE]:EFFECT`, without the
/// `node.kubernetes.io/not-ready` taint the API server's own admission
/// (TaintNodesByCondition) adds to every new node.
fn taints(n: &Node) -> Vec<String> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .filter(|t| t.key != "node.kubernetes.io/not-ready")
                .map(|t| match &t.value {
                    Some(v) => format!("{}={v}:{}", t.key, t.effect),
                    None => format!("{}:{}", t.key, t.effect),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How many times the node carries the startup taint's key.
fn startup_count(n: &Node) -> usize {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map_or(0, |ts| ts.iter().filter(|t| t.key == TAINT).count())
}

fn with_annotation(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_taints_a_new_node_at_create_with_nodegate_not_running() {
    let env = Env::new("policy-create").await;
    install_policy(&env).await;
    let made = env.cluster.create_node(&untainted("plain")).await;
    assert_eq!(
        taints(&made),
        vec![format!("{TAINT}:NoSchedule")],
        "an untainted node must come back from CREATE with the startup taint (and nothing else)"
    );

    // A node that already has other taints gets the startup taint appended.
    let other = fake_node("foreign", &[], &[("example.com/gpu", "", "NoExecute")]);
    let made = env.cluster.create_node(&other).await;
    assert_eq!(
        taints(&made),
        vec![
            "example.com/gpu:NoExecute".to_string(),
            format!("{TAINT}:NoSchedule")
        ]
    );

    // Registered with a managed taint (any value): no second one.
    let pre = fake_node("pre", &[], &[(TAINT, "by-kubelet", "NoSchedule")]);
    let made = env.cluster.create_node(&pre).await;
    assert_eq!(startup_count(&made), 1, "taints: {:?}", taints(&made));
    assert_eq!(
        taints(&made),
        vec![format!("{TAINT}=by-kubelet:NoSchedule")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_leaves_ignored_nodes_and_nodes_outside_the_selector_alone() {
    let env = Env::new("policy-scope").await;
    install_policy(&env).await;
    let ignored = with_annotation(untainted("ignored"), "nodegate.dev/ignore", "true");
    let made = env.cluster.create_node(&ignored).await;
    assert_eq!(startup_count(&made), 0, "taints: {:?}", taints(&made));

    // A node identity cannot opt its own node out: the ignore annotation is
    // not honoured when the creator is in group system:nodes.
    let node_identity = client_as(
        &env.cluster.kubeconfig,
        "system:node:kubelet-made",
        &["system:nodes", "system:authenticated"],
    )
    .await;
    let as_node: Api<Node> = Api::all(node_identity);
    let made = as_node
        .create(
            &PostParams::default(),
            &with_annotation(untainted("kubelet-made"), "nodegate.dev/ignore", "true"),
        )
        .await
        .unwrap_or_else(|e| panic!("create as the node identity: {e}"));
    assert_eq!(
        startup_count(&made),
        1,
        "a node identity's ignore annotation must not skip the taint: {:?}",
        taints(&made)
    );

    // The binding's objectSelector is nodegate's --node-selector.
    kubectl_ok(
        &env,
        &[
            "patch",
            "mutatingadmissionpolicybinding",
            "nodegate-startup-taint",
            "--type=merge",
            "-p",
            &json!({"spec": {"matchResources": {"objectSelector": {
                "matchExpressions": [{"key": "nodegate.test/unmanaged", "operator": "DoesNotExist"}]
            }}}})
            .to_string(),
        ],
    );
    let nodes: Api<Node> = Api::all(env.cluster.client.clone());
    let outside = fake_node("outside", &[("nodegate.test/unmanaged", "yes")], &[]);
    // The binding change reaches the API server's policy cache shortly after
    // the patch: wait for a dry-run create of an outside node to come back
    // untainted, then create the real one.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("the selector to apply", Duration::from_secs(30), || {
        let (nodes, dry, outside) = (nodes.clone(), dry.clone(), outside.clone());
        async move {
            let made = nodes
                .create(&dry, &outside)
                .await
                .map_err(|e| e.to_string())?;
            match startup_count(&made) {
                0 => Ok(()),
                _ => Err(format!("still tainted: {:?}", taints(&made))),
            }
        }
    })
    .await;
    let made = env.cluster.create_node(&outside).await;
    assert_eq!(startup_count(&made), 0, "taints: {:?}", taints(&made));
    let inside = env.cluster.create_node(&untainted("inside")).await;
    assert_eq!(startup_count(&inside), 1, "taints: {:?}", taints(&inside));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_policy_tainted_opens_by_ready() {
    let env = Env::new("policy-opens").await;
    install_policy(&env).await;
    env.create_ds(DsSpec::new("agent")).await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    let made = env.cluster.create_node(&untainted("worker")).await;
    assert_eq!(startup_count(&made), 1, "taints: {:?}", taints(&made));
    env.wait_pod("agent", "worker", true).await;
    env.wait_open("worker", Duration::from_secs(60), &[&ng])
        .await;
    let node = env.node("worker").await;
    assert_eq!(
        annotation(&node, "nodegate.dev/opened-by").as_deref(),
        Some("ready"),
        "annotations: {:?}",
        node.metadata.annotations
    );
}
