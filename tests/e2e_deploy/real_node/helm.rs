//! `helm install` on a cluster with a real node: the gate opens the real
//! node by ready only after its DaemonSet's real container is Ready, the
//! API server calls the webhook through its Service, the leader's pod is
//! deleted and the other takes over, `helm upgrade` rolls the pods with
//! never two leaders, and the pods' own token has deploy/'s rights and no
//! more.

use super::leaders::{Recorder, overlaps, terms};
use super::*;

/// Values a user could choose: the webhook (any Kubernetes version), the
/// replicas on the real node (kwok nodes run no containers; a user pins
/// nodegate to a system pool the same way), and one pool left out of
/// nodegate's care and of the webhook's (the security proofs below make
/// their own nodes there, which the installed nodegate must not touch).
const VALUES: &[&str] = &[
    "--set",
    "admission=webhook",
    "--set-json",
    r#"nodeSelector={"nodegate.dev/local-real-node":"true"}"#,
    "--set",
    "config.managedNodeSelector=example.com/pool!=vap",
    "--set-json",
    r#"admissionObjectSelector={"matchExpressions":[{"key":"example.com/pool","operator":"NotIn","values":["vap"]}]}"#,
];

fn helm(cluster: &TestCluster, what: &str, args: &[&str]) {
    let chart = repo_root().join("deploy/helm/nodegate");
    let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
    let chart = chart.to_string_lossy().into_owned();
    let mut all: Vec<&str> = args.to_vec();
    all.extend([
        "nodegate",
        chart.as_str(),
        "--namespace",
        NS,
        "--kubeconfig",
        kubeconfig.as_str(),
    ]);
    all.extend_from_slice(VALUES);
    must(what, run(&helm_bin(), &all, None));
}

#[tokio::test]
async fn helm_install_on_a_real_node_gates_it_fails_over_and_upgrades() {
    let archive = image_archive();
    let cluster = TestCluster::start_real_node("real-helm").await;
    let admin = cluster.kubeconfig.clone();
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), "default");

    // The kubelet registered the node with the startup taint, and nothing
    // has opened it.
    let n = nodes
        .get(REAL_NODE)
        .await
        .expect("the real node registered");
    assert!(
        has_taint(&n, TAINT),
        "registered without {TAINT}: {:?}",
        n.spec
    );
    assert_eq!(annotation(&n, "nodegate.dev/opened-by"), None);

    // Its infrastructure DaemonSet, whose container is not Ready until the
    // test says so, and a workload waiting for the node.
    let gate_dir = state_dir(&cluster).join("agent-gate");
    apply(&cluster, "the agent DaemonSet", &agent_daemonset(&gate_dir));
    apply(&cluster, "a workload pod", &workload_pod("app-0"));

    import_image(&cluster, &archive);
    let leaders = Recorder::start(state_dir(&cluster).join("node/pod-logs"), NS);
    helm(&cluster, "helm install", &["install", "--create-namespace"]);
    let leader = both_ready_one_leader(&cluster, NS).await;
    eprintln!("leader: {leader}");

    // nodegate runs and the real node is still closed: its agent is not
    // Ready. Then the probe passes, and the gate opens by ready.
    let n = nodes.get(REAL_NODE).await.expect("get the real node");
    assert!(
        has_taint(&n, TAINT) && annotation(&n, "nodegate.dev/opened-by").is_none(),
        "the real node opened before its agent was Ready: {:?}",
        n.metadata.annotations
    );
    let metrics = metrics_through_service(&cluster, NS);
    assert!(
        metrics.contains("nodegate_leader_known 1"),
        "/metrics through the Service:\n{metrics}"
    );
    std::fs::write(gate_dir.join("ready"), "").expect("write the agent's ready file");
    let (by, opened_at) = wait_opened(&cluster, REAL_NODE, NS).await;
    assert_eq!(by, "ready");
    agent_ready_before(&cluster, opened_at).await;

    // The workload waited for the gate: scheduled at or after the opening
    // (the API keeps whole seconds).
    let scheduled = wait_for("app-0 scheduled", Duration::from_secs(60), || async {
        let p = pods.get("app-0").await.map_err(|e| e.to_string())?;
        condition_true_since(&p, "PodScheduled").ok_or_else(|| format!("{:?}", p.status))
    })
    .await;
    assert!(
        scheduled.as_second() >= opened_at.as_second(),
        "app-0 was scheduled at {scheduled}, before the gate opened at {opened_at}"
    );

    webhook_through_the_service(&cluster, "kw-webhook").await;
    failover(&cluster, &leader).await;
    upgrade(&cluster).await;

    let logs = leaders.stop();
    let t = terms(&logs);
    let twice = overlaps(&t);
    assert!(
        twice.is_empty(),
        "two leaders at once: {twice:?}\nterms: {t:?}"
    );
    assert!(t.len() >= 2, "the leader changed at least once: {t:?}");
    for (pod, text) in &logs {
        assert!(
            !text.contains("Forbidden") && !text.contains("forbidden"),
            "{pod} hit a permission it lacks:\n{text}"
        );
    }

    // (e) The security proofs, with the token the kubelet projected into a
    // running pod.
    let pod = nodegate_pods(&cluster, NS)
        .await
        .into_iter()
        .find(|p| ready(p) && p.metadata.deletion_timestamp.is_none())
        .expect("a Ready nodegate pod");
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &projected_token(&cluster, &pod), dir.path());
    let whoami = must(
        "kubectl auth whoami with the pod's token",
        kubectl(
            &sa,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        ),
    );
    assert_eq!(
        whoami.stdout.trim(),
        format!("system:serviceaccount:{NS}:{SA}")
    );
    the_token_gets_exactly_deploys_rights(&cluster, &admin, &sa).await;
}

/// The agent's pod on the real node turned Ready (its probe, for real) no
/// later than the gate opened.
async fn agent_ready_before(cluster: &TestCluster, opened_at: Timestamp) {
    let ks: Api<Pod> = Api::namespaced(cluster.client.clone(), "kube-system");
    let agents = ks
        .list(&ListParams::default().labels("app=node-agent"))
        .await
        .expect("list the agent's pods");
    let on_real = agents
        .items
        .iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(REAL_NODE))
        .expect("the agent has a pod on the real node");
    let ready_at = condition_true_since(on_real, "Ready").expect("the agent's pod is Ready");
    assert!(
        ready_at.as_second() <= opened_at.as_second(),
        "the gate opened at {opened_at}, before the agent was Ready at {ready_at}"
    );
}

/// (c) A node created without a taint comes back from CREATE with it: the
/// API server called nodegate's webhook through its Service (no admission
/// policy is installed in this mode).
async fn webhook_through_the_service(cluster: &TestCluster, name: &str) {
    let config = must(
        "get the webhook configuration",
        kubectl(
            &cluster.kubeconfig,
            &[
                "get",
                "mutatingwebhookconfiguration",
                "nodegate",
                "-o",
                "json",
            ],
            None,
        ),
    );
    let config: Value = serde_json::from_str(&config.stdout).expect("webhook configuration JSON");
    assert_eq!(
        config["webhooks"][0]["clientConfig"]["service"]["name"], "nodegate-webhook",
        "the webhook is called through its Service: {config}"
    );
    let policies = kubectl(
        &cluster.kubeconfig,
        &["get", "mutatingadmissionpolicies", "-o", "name"],
        None,
    );
    assert!(
        !policies.stdout.contains("nodegate"),
        "webhook mode installs no admission policy: {}",
        policies.stdout
    );
    let created = cluster.create_node(&fake_node(name, &[], &[])).await;
    assert!(
        has_taint(&created, TAINT),
        "{name} came back from CREATE without {TAINT}: {:?}",
        created.spec
    );
}

/// (b) Deleting the leader's pod: the other replica takes the Lease within
/// the lease duration (the leader releases it on the way out), and a node
/// created meanwhile is still gated and opened.
async fn failover(cluster: &TestCluster, leader: &str) {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NS);
    let before = leases.get("nodegate").await.expect("the Lease");
    let duration = before
        .spec
        .as_ref()
        .and_then(|s| s.lease_duration_seconds)
        .expect("the Lease has a duration");
    let deleted_at = Timestamp::now();
    must(
        "delete the leader's pod",
        kubectl(
            &cluster.kubeconfig,
            &["-n", NS, "delete", "pod", leader, "--wait=false"],
            None,
        ),
    );
    webhook_through_the_service(cluster, "kw-failover").await;
    let (holder, acquired) = wait_for("another holder", Duration::from_secs(60), || async {
        let l = leases.get("nodegate").await.map_err(|e| e.to_string())?;
        let spec = l.spec.unwrap_or_default();
        match (spec.holder_identity, spec.acquire_time) {
            (Some(h), Some(at)) if !h.is_empty() && !h.starts_with(leader) => Ok((h, at.0)),
            (h, _) => Err(format!("holder {h:?}")),
        }
    })
    .await;
    eprintln!(
        "new leader {holder}, {:?} after the delete",
        acquired.duration_since(deleted_at)
    );
    assert!(
        acquired.duration_since(deleted_at).as_secs() < i64::from(duration),
        "the Lease changed hands {:?} after the leader's pod was deleted (lease duration {duration}s)",
        acquired.duration_since(deleted_at)
    );
    let (by, _) = wait_opened(cluster, "kw-failover", NS).await;
    assert_eq!(
        by, "ready",
        "the node created during the failover was opened by ready"
    );
    both_ready_one_leader(cluster, NS).await;
}

/// (b) `helm upgrade` with a changed value rolls both pods (maxUnavailable
/// 0); the caller judges from the logs that no two led at once.
async fn upgrade(cluster: &TestCluster) {
    helm(
        cluster,
        "helm upgrade",
        &[
            "upgrade",
            "--reuse-values",
            "--set",
            "config.logLevel=debug",
        ],
    );
    wait_for(
        "both pods rolled to the new values",
        Duration::from_secs(180),
        || async {
            let pods = nodegate_pods(cluster, NS).await;
            let rolled = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| {
                    p.spec.as_ref().is_some_and(|s| {
                        s.containers[0]
                            .args
                            .as_ref()
                            .is_some_and(|a| a.iter().any(|x| x == "--log-level=debug"))
                    })
                })
                .filter(|p| ready(p))
                .count();
            if rolled == 2 && pods.len() == 2 {
                Ok(())
            } else {
                Err(format!("{rolled} of {} pods rolled and Ready", pods.len()))
            }
        },
    )
    .await;
    both_ready_one_leader(cluster, NS).await;
}
