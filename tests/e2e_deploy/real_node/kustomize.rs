//! `kubectl apply -k deploy/kustomize/base` on a cluster with a real node:
//! the admission policy mode, exactly as shipped.

use super::*;

#[tokio::test]
async fn kustomize_base_on_a_real_node_runs_gates_and_taints_by_policy() {
    let archive = image_archive();
    let cluster = TestCluster::start_real_node("real-kustomize").await;

    // The agent is Ready as soon as its container starts.
    let gate_dir = state_dir(&cluster).join("agent-gate");
    std::fs::create_dir_all(&gate_dir).expect("make the agent's gate dir");
    std::fs::write(gate_dir.join("ready"), "").expect("write the agent's ready file");
    apply(&cluster, "the agent DaemonSet", &agent_daemonset(&gate_dir));

    import_image(&cluster, &archive);
    // As shipped. The only schedulable node is the real one (no kwok node
    // exists yet), so both replicas land there: the base prefers, and does
    // not require, replicas on different nodes and zones.
    let base = repo_root().join("deploy/kustomize/base");
    must(
        "kubectl apply -k deploy/kustomize/base",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-k", &base.to_string_lossy()],
            None,
        ),
    );
    let leader = both_ready_one_leader(&cluster, NS).await;
    eprintln!("leader: {leader}");
    let (by, _) = wait_opened(&cluster, REAL_NODE, NS).await;
    assert_eq!(by, "ready");

    // The shipped admission policy (no webhook in this mode) taints a new
    // node at CREATE, and the gate opens it.
    let hooks = kubectl(
        &cluster.kubeconfig,
        &["get", "mutatingwebhookconfigurations", "-o", "name"],
        None,
    );
    assert!(
        !hooks.stdout.contains("nodegate"),
        "the base installs no webhook: {}",
        hooks.stdout
    );
    let created = cluster.create_node(&fake_node("kw-policy", &[], &[])).await;
    let taints = created.spec.as_ref().and_then(|s| s.taints.clone());
    assert!(
        has_taint(&created, TAINT),
        "kw-policy came back from CREATE without {TAINT}: {taints:?}"
    );
    let (by, _) = wait_opened(&cluster, "kw-policy", NS).await;
    assert_eq!(by, "ready");

    // /metrics through the Service; both pods answer there (the Service
    // picks one), and each knows the leader.
    let metrics = metrics_through_service(&cluster, NS);
    assert!(
        metrics.contains("nodegate_leader_known 1"),
        "/metrics through the Service:\n{metrics}"
    );
    report_resources(&cluster).await;
}

/// What the real pods used, for docs/operations.md: each container's
/// memory (cgroup v1 memory.usage_in_bytes is per container here, as the
/// kubelet runs them under the runtime's own cgroups) and the process RSS.
async fn report_resources(cluster: &TestCluster) {
    for p in nodegate_pods(cluster, NS).await {
        let name = pod_name(&p);
        let out = cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            &name,
            "-o",
            "jsonpath={.status.containerStatuses[0].containerID}",
        ]);
        let id = out.trim().trim_start_matches("containerd://").to_string();
        let usage = std::fs::read_to_string(format!(
            "/sys/fs/cgroup/memory/k8s.io/{id}/memory.usage_in_bytes"
        ))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
        eprintln!(
            "[resources] {name}: container memory {} MiB",
            usage.map_or("unknown".to_string(), |b| format!(
                "{:.1}",
                b as f64 / 1048576.0
            ))
        );
    }
}
