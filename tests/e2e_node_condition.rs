//! `--node-condition`: the leader writes the Node condition
//! `nodegate.dev/Open` through `nodes/status` — False with what the gate
//! waits for while a DaemonSet is held, True once it opened — and nothing
//! without the flag. Against the real local control plane (deploy/local).

use nodegate_e2e as support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use support::gate::{DsSpec, Env, NS};
use support::{Nodegate, wait_for};

const OPEN: &str = "nodegate.dev/Open";

fn open_condition(node: &Node) -> Option<NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == OPEN)
        .cloned()
}

fn has_ready_condition(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready"))
}

async fn wait_condition(env: &Env, node: &str, status: &str, ng: &Nodegate) -> NodeCondition {
    wait_for(
        &format!("{OPEN}={status} on {node}"),
        Duration::from_secs(30),
        || async {
            let n = env.node(node).await;
            match open_condition(&n) {
                Some(c) if c.status == status => Ok(c),
                other => Err(format!("{other:?}\n{}", ng.logs())),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_open_condition_is_false_while_held_true_once_opened_and_absent_without_the_flag() {
    let env = Env::new("node-condition").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("csi")
    })
    .await;

    // Without the flag: the node opens, and no condition is written.
    let mut plain = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    env.create_node("node-plain", &[]).await;
    env.wait_pod("csi", "node-plain", false).await;
    env.release("csi", "node-plain").await;
    env.wait_open("node-plain", Duration::from_secs(30), &[&plain])
        .await;
    let node = env.node("node-plain").await;
    assert_eq!(
        open_condition(&node),
        None,
        "a condition was written without --node-condition:\n{}",
        plain.logs()
    );
    plain.kill();

    // With the flag: False, naming the held DaemonSet, then True.
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m", "--node-condition"]);
    env.create_node("node-a", &[]).await;
    env.wait_pod("csi", "node-a", false).await;
    let closed = wait_condition(&env, "node-a", "False", &ng).await;
    assert_eq!(closed.reason.as_deref(), Some("Waiting"), "{closed:?}");
    let message = closed.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("waiting for 1 of 1: ") && message.contains(&format!("{NS}/csi")),
        "the message names what the gate waits for: {message}"
    );
    assert!(
        closed.last_transition_time.is_some(),
        "the first write sets lastTransitionTime: {closed:?}"
    );
    assert!(
        has_ready_condition(&env.node("node-a").await),
        "the patch must leave the other conditions alone"
    );

    env.release("csi", "node-a").await;
    env.wait_open("node-a", Duration::from_secs(30), &[&ng])
        .await;
    let open = wait_condition(&env, "node-a", "True", &ng).await;
    assert_eq!(open.reason.as_deref(), Some("OpenedByReady"), "{open:?}");
    assert!(
        open.last_transition_time >= closed.last_transition_time,
        "{open:?} after {closed:?}"
    );
    assert!(has_ready_condition(&env.node("node-a").await));
}

/// `kubectl patch node NODE --subresource=status` as nodegate's
/// ServiceAccount (impersonated): `Ok`, or the API server's refusal.
fn sa_patch_status(env: &Env, node: &str, patch: &serde_json::Value) -> Result<(), String> {
    let out = std::process::Command::new(support::local_bin("kubectl"))
        .arg("--kubeconfig")
        .arg(&env.cluster.kubeconfig)
        .args([
            &format!("--as=system:serviceaccount:{NS}:nodegate"),
            "patch",
            "node",
            node,
            "--subresource=status",
            "--type=strategic",
            "-p",
            &patch.to_string(),
        ])
        .output()
        .expect("kubectl runs");
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The shipped policy `nodegate-node-changes` (deploy/kustomize/base) with
/// the grant `--node-condition` needs: through `nodes/status` the
/// ServiceAccount may write its `nodegate.dev/Open` condition and nothing
/// else — not another condition, another status field, or a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_lets_nodegate_write_only_its_condition_through_the_status() {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Api, PostParams};
    let env = Env::new("node-condition-policy").await;
    let c = env.cluster.client.clone();
    let pp = PostParams::default();
    let sa: ServiceAccount = serde_json::from_value(
        serde_json::json!({"metadata": {"name": "nodegate", "namespace": NS}}),
    )
    .expect("sa");
    Api::<ServiceAccount>::namespaced(c.clone(), NS)
        .create(&pp, &sa)
        .await
        .expect("create sa");
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "test-nodegate"},
        "rules": [{"apiGroups": [""], "resources": ["nodes", "nodes/status"], "verbs": ["get", "patch"]}],
    }))
    .expect("role");
    Api::<ClusterRole>::all(c.clone())
        .create(&pp, &role)
        .await
        .expect("create role");
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "test-nodegate", "labels": {"nodegate.dev/policy-subject": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "test-nodegate"},
        "subjects": [{"kind": "ServiceAccount", "name": "nodegate", "namespace": NS}],
    }))
    .expect("binding");
    Api::<ClusterRoleBinding>::all(c)
        .create(&pp, &binding)
        .await
        .expect("create binding");
    let policy = support::repo_root().join("deploy/kustomize/base/admissionpolicy.yaml");
    let applied = env
        .cluster
        .kubectl(&["apply", "-f", policy.to_str().expect("utf-8 path")]);
    assert!(applied.contains("nodegate-node-changes"), "{applied}");
    env.cluster
        .create_node(&support::fake_node("vap-status", &[], &[]))
        .await;

    // Each attempt a new message: one allowed before the policy is loaded
    // must not make the next an empty change.
    let mut attempt = 0;
    let env_ref = &env;
    let refused = wait_for(
        "the policy to refuse another condition through nodes/status",
        Duration::from_secs(30),
        || {
            attempt += 1;
            let foreign = serde_json::json!({"status": {"conditions": [
                {"type": "example.com/Other", "status": "True", "reason": "Stolen", "message": format!("attempt {attempt}")}
            ]}});
            async move {
                match sa_patch_status(env_ref, "vap-status", &foreign) {
                    Ok(()) => Err("another condition was allowed".to_string()),
                    Err(e) if e.contains("nodegate-node-changes") => Ok(e),
                    Err(e) => Err(e),
                }
            }
        },
    )
    .await;
    assert!(refused.contains("nodegate.dev/Open condition"), "{refused}");
    let addresses = serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.9.9.9"}]}});
    let err = sa_patch_status(&env, "vap-status", &addresses).expect_err("addresses changed");
    assert!(err.contains("nodegate-node-changes"), "{err}");
    let label = serde_json::json!({"metadata": {"labels": {"example.com/stolen": "x"}}});
    let err = sa_patch_status(&env, "vap-status", &label).expect_err("a label through status");
    assert!(err.contains("labels"), "{err}");
    let own = serde_json::json!({"status": {"conditions": [
        {"type": OPEN, "status": "False", "reason": "Waiting", "message": "waiting for 1 of 1: infra/csi (no pod yet)",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}
    ]}});
    sa_patch_status(&env, "vap-status", &own).expect("its own condition is allowed");
    let node = env.node("vap-status").await;
    assert_eq!(
        open_condition(&node).map(|c| c.status),
        Some("False".to_string())
    );
}
