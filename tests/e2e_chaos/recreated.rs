//! Scenario 2: a node re-created under the same name.

use super::*;

/// 2. A gated node whose members are all Ready opens; it is deleted and
/// re-created under the same name (new uid), tainted again, while its
/// DaemonSet pods keep running (Kubernetes keeps pods bound to a deleted
/// node's name). It must open by ready, not by its new deadline, which is
/// far (`TIMEOUT`): how soon it opens is the machine's speed, what opens it
/// is nodegate's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_recreated_under_the_same_name_opens_by_ready() {
    const TIMEOUT: Duration = Duration::from_secs(600);
    let _took = Stopwatch::start("node_recreated_under_the_same_name_opens_by_ready");
    let env = Env::new("chaos-recreate").await;
    let faults = Faults::new(&env.cluster);
    create_daemonsets(&env, &[("cni", false), ("csi", false)]).await;
    let ng = Replica::start(&env.cluster, "nodegate", &["--timeout", "600s"]).await;
    let names = ["again-1", "again-2", "again-3"];
    let mut first = Vec::new();
    for n in names {
        first.push(create(&env, &gated_node(n, &[])).await);
    }
    let mut verdicts = Verdicts::default();
    let promised = first
        .iter()
        .map(|n| (n.name.clone(), deadline_of(n.at, TIMEOUT) + GRACE))
        .collect();
    let opened = await_openings(&faults, &env.nodes, &promised).await;
    judge_openings(&opened, &mut verdicts);
    check_ready_openings(&env, &[&ng], &faults, &first, &opened, &mut verdicts).await;
    faults.note("first incarnations open");
    wait_pods(&env, &first, &[("cni", true), ("csi", true)]).await;
    let pods_before = pods_on(&env, &names).await;

    for n in names {
        env.nodes
            .delete(n, &DeleteParams::default())
            .await
            .expect("delete node");
    }
    for n in names {
        wait_for(&format!("{n} gone"), Duration::from_secs(30), || async {
            match env.nodes.get_opt(n).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    faults.note("nodes deleted");
    let mut again = Vec::new();
    for n in names {
        again.push(create(&env, &gated_node(n, &[])).await);
    }
    faults.note("nodes re-created under the same names, tainted");
    for (before, after) in first.iter().zip(&again) {
        assert_ne!(before.uid, after.uid, "{}: same uid", after.name);
    }
    // The premise: the same pods, still Ready, are bound to the names.
    let pods_after = pods_on(&env, &names).await;
    assert_eq!(
        pods_before, pods_after,
        "the premise failed: the pods did not survive the node's deletion"
    );

    let promised = again
        .iter()
        .map(|n| (n.name.clone(), deadline_of(n.at, TIMEOUT) + GRACE))
        .collect();
    let opened = await_openings(&faults, &env.nodes, &promised).await;
    for (node, r) in &opened {
        if let Err(e) = r {
            verdicts.fail(
                node,
                format!(
                    "re-created with every member's pod Ready, not open by its deadline \
                     ({TIMEOUT:?}): {e}"
                ),
            );
        }
    }
    let openings =
        check_ready_openings(&env, &[&ng], &faults, &again, &opened, &mut verdicts).await;
    for n in &again {
        let now = env.node(&n.name).await;
        if now.metadata.uid.as_deref() != Some(n.uid.as_str()) {
            verdicts.fail(&n.name, "the re-created node was replaced again");
        }
        if let Some(o) = openings.get(&n.name)
            && o.by != "ready"
        {
            verdicts.fail(&n.name, format!("opened by {:?}, not by ready", o.by));
        }
    }
    verdicts.conclude(&[&ng], &faults).await;
}

/// Per node name, its pods (name, uid, Ready) by `spec.nodeName`.
async fn pods_on(env: &Env, names: &[&str]) -> BTreeMap<String, BTreeSet<(String, String, bool)>> {
    let mut out = BTreeMap::new();
    for n in names {
        let pods = env
            .pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={n}")))
            .await
            .expect("list pods");
        out.insert(
            n.to_string(),
            pods.items
                .iter()
                .map(|p| {
                    (
                        p.metadata.name.clone().unwrap_or_default(),
                        p.metadata.uid.clone().unwrap_or_default(),
                        pod_ready(p),
                    )
                })
                .collect(),
        );
    }
    out
}
