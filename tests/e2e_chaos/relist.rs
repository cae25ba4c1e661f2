//! Scenario 1: a re-list after an API server restart.

use super::*;

/// Pods the re-list scenario's pod watch lists after the test's own (their
/// namespace sorts after it): a re-list long enough that a gate, running on
/// the other core, acts while it is still being delivered. Without them the
/// whole re-list is delivered within microseconds and the gates would see only
/// its end, whatever order it was applied in.
const FILLER: usize = 1500;
const FILLER_NS: &str = "zz-filler";

/// `count` pending pods that look like DaemonSet pods to nodegate's pod watch
/// (bound, `pod-template-generation` label), on a node kwok does not manage,
/// so nothing ever changes them.
async fn create_filler(env: &Env, count: usize) {
    let client = env.cluster.client.clone();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": FILLER_NS}})).expect("namespace"),
        )
        .await
        .expect("create filler namespace");
    env.nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "filler"}})).expect("node"),
        )
        .await
        .expect("create filler node");
    const WRITERS: usize = 16;
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let pods: Api<Pod> = Api::namespaced(client.clone(), FILLER_NS);
        writers.spawn(async move {
            for i in (w..count).step_by(WRITERS) {
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("filler-{i:05}"),
                        "labels": {"pod-template-generation": "1"},
                    },
                    "spec": {
                        "nodeName": "filler",
                        "containers": [{"name": "c", "image": "filler"}],
                    },
                }))
                .expect("filler pod");
                pods.create(&PostParams::default(), &pod)
                    .await
                    .expect("create filler pod");
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("filler writer");
    }
}

/// 1. Nodes wait for a held DaemonSet. kube-apiserver is killed; while it is
/// down, through a second API server no component knows, Ready pods are
/// deleted or made not Ready and held pods made Ready. It is started again
/// from its own command line, so every watch resumed from before gets 410
/// and re-lists. No node may open `by ready` at a revision where one of its
/// members had no Ready pod; the nodes whose members all became Ready open
/// by ready, long before their deadline; then the others' deadlines are
/// moved to a few seconds ahead, and they open by deadline + 2 s.
///
/// No deadline depends on how fast the machine is: the deadline is far
/// (`TIMEOUT`) while the fault and the re-list play out, however long the
/// API server takes to come back (41.5 s was seen on a cold CI machine,
/// where a 25 s deadline opened the ready nodes by timeout), and is brought
/// near only once the ready nodes opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relist_after_apiserver_restart_opens_no_node_early() {
    /// Far beyond any fault; reached only if a node never opens by ready.
    const TIMEOUT: Duration = Duration::from_secs(600);
    /// How far ahead the others' deadlines move once the ready nodes open.
    const SOON: jiff::SignedDuration = jiff::SignedDuration::from_secs(3);
    let _took = Stopwatch::start("relist_after_apiserver_restart_opens_no_node_early");
    let env = Env::new("chaos-relist").await;
    let faults = Faults::new(&env.cluster);
    // Started first: it takes the API server's start-up time, which the
    // outage itself should not.
    let side = faults.side_door().await;
    // `base` is Ready everywhere; `agent` is held everywhere.
    create_daemonsets(&env, &[("base", false), ("agent", true)]).await;
    let ng = Replica::start(&env.cluster, "nodegate", &["--timeout", "600s"]).await;
    // del: base pod deleted, agent made Ready. unready: base pod made not
    // Ready, agent made Ready. ready: agent made Ready. still: untouched.
    let groups = ["del", "unready", "ready", "still"];
    let mut nodes = Vec::new();
    for g in groups {
        for i in 1..=2 {
            nodes.push(create(&env, &gated_node(&format!("{g}-{i}"), &[])).await);
        }
    }
    faults.note("8 gated nodes created");
    create_filler(&env, FILLER).await;
    faults.note(format!(
        "{FILLER} filler DaemonSet-like pods created in namespace {FILLER_NS}"
    ));
    wait_pods(&env, &nodes, &[("base", true), ("agent", false)]).await;
    // From now on a re-created base pod is held (OnDelete: no pod changes).
    env.daemonsets
        .patch(
            "base",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"labels": {HOLD_LABEL: "true"}}}}}),
            ),
        )
        .await
        .expect("hold base's new pods");

    faults.stop("kube-apiserver").await;
    let pods: Api<Pod> = Api::namespaced(side.client.clone(), NS);
    for n in &nodes {
        let group = n.name.split('-').next().unwrap_or_default();
        let base = pod_of(&pods, "base", &n.name).await;
        let base = base.metadata.name.expect("pod name");
        match n.name.as_str() {
            // Gone at once, and terminating (kwok deletes it when back).
            "del-1" => {
                pods.delete(&base, &DeleteParams::default().grace_period(0))
                    .await
                    .expect("delete base pod");
            }
            "del-2" => {
                pods.delete(&base, &DeleteParams::default())
                    .await
                    .expect("delete base pod");
            }
            _ if group == "unready" => set_ready(&pods, &base, false).await,
            _ => {}
        }
        if group != "still" {
            let agent = pod_of(&pods, "agent", &n.name).await;
            set_ready(&pods, &agent.metadata.name.expect("pod name"), true).await;
        }
    }
    faults.note("through the side door: base pods of del-* deleted, of unready-* not Ready; agent pods of del-*, unready-*, ready-* Ready");
    let fault_end = faults.start("kube-apiserver").await;
    drop(side);

    // The ready nodes first: by ready, after the re-list, with their far
    // deadline as the promise (a node that waits for it opened by timeout,
    // which the checks below refuse).
    let (ready, others): (Vec<&Created>, Vec<&Created>) =
        nodes.iter().partition(|n| n.name.starts_with("ready-"));
    let promised: BTreeMap<String, Instant> = ready
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                deadline_of(n.at, TIMEOUT).max(fault_end) + GRACE,
            )
        })
        .collect();
    let mut opened = await_openings(&faults, &env.nodes, &promised).await;
    faults.note("the ready nodes open, or late");
    // Then the others' deadlines, moved near: they open by timeout, each at
    // a revision the checks examine like the others'.
    let soon = Timestamp::now() + SOON;
    for n in &others {
        set_deadline(&env.nodes, &n.name, soon, TIMEOUT).await;
    }
    faults.note("the other nodes' deadlines moved 3 s ahead");
    let promised: BTreeMap<String, Instant> = others
        .iter()
        .map(|n| (n.name.clone(), instant_of(soon) + GRACE))
        .collect();
    opened.extend(await_openings(&faults, &env.nodes, &promised).await);
    faults.note("every node open, or late");
    let mut verdicts = Verdicts::default();
    judge_openings(&opened, &mut verdicts);
    let openings =
        check_ready_openings(&env, &[&ng], &faults, &nodes, &opened, &mut verdicts).await;
    for (node, o) in &openings {
        if node.starts_with("ready-") && o.by != "ready" {
            verdicts.fail(
                node,
                format!(
                    "every member was Ready from the outage on, long before the deadline, \
                     yet it opened by {:?}",
                    o.by
                ),
            );
        }
        // The oracle's own check: these nodes never had every member Ready,
        // so it must see a blocker at the revision they opened.
        if !node.starts_with("ready-") && o.unready.is_empty() {
            verdicts.fail(
                node,
                format!(
                    "the check itself is broken: it saw every member Ready when the node \
                     opened (by {:?}), which never happened here",
                    o.by
                ),
            );
        }
    }
    eprintln!("opened-by: {:?}", opened_by(&openings));
    // The scenario is only what it claims if the watches re-listed.
    let logs = ng.ng.logs();
    let relisted: BTreeSet<&str> = logs
        .lines()
        .filter(|l| l.contains("watch failed") && l.contains("too old resource version"))
        .filter_map(|l| l.split("kind=\"").nth(1)?.split('"').next())
        .collect();
    eprintln!("watches that got 410 Gone and re-listed: {relisted:?}");
    for kind in ["nodes", "daemonsets", "daemonset pods"] {
        if !relisted.contains(kind) {
            verdicts.fail(
                "(all)",
                format!("the {kind} watch got no 410 Gone: the restart forced no re-list of it"),
            );
        }
    }
    verdicts.conclude(&[&ng], &faults).await;
}
