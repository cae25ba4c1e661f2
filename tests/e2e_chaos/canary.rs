//! Scenario 6: a canary pod never leaks across a leader change (`canary`,
//! semantics.md §6.9).

use super::*;

const CANARY_LABEL: &str = "nodegate.dev/canary";

fn canary_of(node: &str) -> String {
    format!("nodegate-canary-{node}")
}

/// The canaries in the namespace that are not being deleted, by node.
async fn live_canaries(pods: &Api<Pod>) -> BTreeMap<String, Pod> {
    pods.list(&ListParams::default().labels(CANARY_LABEL))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| Some((p.spec.as_ref()?.node_name.clone()?, p)))
                .collect()
        })
        .unwrap_or_default()
}

/// What the kubelet sets once a pod's sandbox and network are up (kwok
/// does not).
async fn sandbox_up(pods: &Api<Pod>, node: &str) {
    let patch = json!({"status": {"conditions": [{
        "type": "PodReadyToStartContainers",
        "status": "True",
        "lastTransitionTime": Timestamp::now().to_string(),
    }]}});
    pods.patch_status(
        &canary_of(node),
        &PatchParams::default(),
        &Patch::Strategic(patch),
    )
    .await
    .unwrap_or_else(|e| panic!("status patch of {node}'s canary: {e}"));
}

/// 6. Two replicas with `canary`; eight gated nodes, each with its canary.
/// Two open by their canary right before the leader is SIGKILLed; while no
/// replica leads, two are opened by hand and two are deleted; two stay
/// gated. Once the follower leads: no canary is left for a node that is
/// open or gone, the gated ones keep theirs, and none was ever made twice
/// for one node at once (one name per node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_pod_never_leaks_across_a_leader_change() {
    let _took = Stopwatch::start("a_canary_pod_never_leaks_across_a_leader_change");
    let env = Env::new("chaos-canary").await;
    let faults = Faults::new(&env.cluster);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, format!("canary:\n  namespace: {NS}\n")).expect("write config");
    let file = file.to_string_lossy().into_owned();
    let args: Vec<&str> = ELECTION
        .iter()
        .copied()
        .chain(["--timeout", "10m", "--config", &file])
        .collect();
    let mut a = Replica::start(&env.cluster, "nodegate-a", &args).await;
    a.wait_leader(Duration::from_secs(30)).await;
    let b = Replica::start(&env.cluster, "nodegate-b", &args).await;
    faults.note("nodegate-a leads, nodegate-b follows");

    let names: Vec<String> = (1..=8).map(|i| format!("canary-{i}")).collect();
    for n in &names {
        create(&env, &gated_node(n, &[])).await;
    }
    wait_for(
        "a canary on every node",
        Duration::from_secs(60),
        || async {
            let live = live_canaries(&env.pods).await;
            (live.len() == names.len()).then_some(()).ok_or(format!(
                "{:?}\n{}",
                live.keys().collect::<Vec<_>>(),
                a.ng.logs()
            ))
        },
    )
    .await;
    faults.note("eight canaries");

    // 1-2 open by their canary; the leader dies right after.
    for n in &names[0..2] {
        sandbox_up(&env.pods, n).await;
    }
    faults.kill(&mut a);
    // While no replica leads: 3-4 opened by hand, 5-6 deleted.
    for n in &names[2..4] {
        env.nodes
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"taints": null}})),
            )
            .await
            .expect("open by hand");
    }
    for n in &names[4..6] {
        env.nodes
            .delete(n, &DeleteParams::default())
            .await
            .expect("delete node");
    }
    faults.note("3-4 opened by hand, 5-6 deleted, no leader");
    b.wait_leader(Duration::from_secs(30)).await;
    faults.note("nodegate-b leads");

    // Judged from the API only: nothing left for 1-6, 7-8 keep theirs.
    let gone: BTreeSet<&str> = names[0..6].iter().map(String::as_str).collect();
    wait_for(
        "no canary for an open or deleted node",
        Duration::from_secs(60),
        || async {
            let live = live_canaries(&env.pods).await;
            let leaked: Vec<&String> = live.keys().filter(|n| gone.contains(n.as_str())).collect();
            leaked
                .is_empty()
                .then_some(())
                .ok_or(format!("leaked: {leaked:?}\n{}", faults.timeline()))
        },
    )
    .await;
    let live = live_canaries(&env.pods).await;
    for n in &names[6..8] {
        assert!(
            live.contains_key(n) && has_gate_taint(&env.nodes.get(n).await.expect("node")),
            "{n} is gated and must keep its canary: {:?}\n{}\n{}",
            live.keys().collect::<Vec<_>>(),
            faults.timeline(),
            b.ng.logs()
        );
    }
    for n in &names[0..4] {
        assert!(
            !has_gate_taint(&env.nodes.get(n).await.expect("node")),
            "{n} should be open"
        );
    }
}
