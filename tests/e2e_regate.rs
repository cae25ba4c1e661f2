//! Re-gating on the real control plane, with the real binary: open nodes
//! whose DaemonSet breaks, or that reboot, get the re-gate taint and open
//! again when their members are Ready; a rolling update that stays inside the
//! grace re-gates nothing; a bad rollout re-gates no more nodes than the
//! budget allows.

use nodegate_e2e as support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::gate::{DsSpec, Env, NS, annotation, daemonset, taint_keys};
use support::{Nodegate, fake_node, http_get, metric, wait_for};

const DEGRADED: &str = "nodegate.dev/degraded";
/// The grace: long enough for kwok to replace a pod, short for a test.
const GRACE: &str = "6s";

/// A DaemonSet that tolerates every taint (as node agents do), on the nodes
/// labelled `role=ROLE`, rolled out to every node at once (a bad rollout
/// reaches them all) when `all_at_once`.
fn agent(name: &str, role: &str, ready_after: Option<&str>, all_at_once: bool) -> DaemonSet {
    let spec = DsSpec {
        node_selector: &[("role", role)],
        ready_after,
        ..DsSpec::new(name)
    };
    let mut ds = serde_json::to_value(daemonset(&spec)).expect("daemonset json");
    ds["spec"]["template"]["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    if all_at_once {
        ds["spec"]["updateStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}});
    }
    serde_json::from_value(ds).expect("daemonset manifest")
}

/// An untainted node: open from the start, as after its gate opened.
fn open_node(name: &str, role: &str) -> Node {
    fake_node(name, &[("role", role)], &[])
}

async fn create(env: &Env, ds: &DaemonSet) {
    env.daemonsets
        .create(&PostParams::default(), ds)
        .await
        .expect("create daemonset");
}

/// A new revision of `name` whose pods are held not Ready (a bad rollout),
/// or, with `hold` false, whose pods are fine (a routine rollout).
async fn roll(env: &Env, name: &str, hold: bool, revision: &str) {
    let mut labels = json!({"nodegate.test/revision": revision});
    if hold {
        labels["nodegate.test/hold-not-ready"] = json!("true");
    }
    env.daemonsets
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": labels}}}})),
        )
        .await
        .expect("roll the daemonset");
}

async fn boot_id(env: &Env, node: &str, id: &str) {
    let status = json!({"status": {"nodeInfo": {"bootID": id}}});
    env.nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch the boot id");
}

async fn has_degraded(env: &Env, node: &str) -> bool {
    taint_keys(&env.node(node).await)
        .iter()
        .any(|k| k == DEGRADED)
}

async fn events(env: &Env, node: &str, reason: &str) -> usize {
    env.events_for(node)
        .await
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .count()
}

/// Waits until every pod of `app` on `nodes` is Ready and of the newest
/// revision (the rollout finished).
async fn wait_rolled_out(env: &Env, app: &str, revision: &str, count: usize) {
    wait_for(
        &format!("{app} rolled out to revision {revision}"),
        Duration::from_secs(90),
        || async {
            let pods = env
                .pods
                .list(
                    &ListParams::default()
                        .labels(&format!("app={app},nodegate.test/revision={revision}")),
                )
                .await
                .map_err(|e| e.to_string())?;
            let ready = pods
                .items
                .iter()
                .filter(|p| support::gate::is_ready(p) && p.metadata.deletion_timestamp.is_none())
                .count();
            if ready == count {
                Ok(())
            } else {
                Err(format!("{ready} of {count} Ready"))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_agent_and_reboot_regate_and_a_routine_rollout_does_not() {
    let env = Env::new("regate").await;
    // The agent's bad revision reaches both of its nodes at once: with one
    // at a time the DaemonSet controller would pick either node first (it
    // walks a Go map), and `broken` might keep its Ready old pod.
    create(&env, &agent("agent", "a", None, true)).await;
    create(&env, &agent("roller", "r", Some("1s"), false)).await;
    for (n, role) in [
        ("broken", "a"),
        ("rebooted", "a"),
        ("roll-1", "r"),
        ("roll-2", "r"),
    ] {
        env.cluster.create_node(&open_node(n, role)).await;
    }
    for n in ["broken", "rebooted"] {
        env.wait_pod("agent", n, true).await;
    }
    for n in ["roll-1", "roll-2"] {
        env.wait_pod("roller", n, true).await;
    }
    // kwok's nodes report no boot id: give one, as a kubelet does.
    boot_id(&env, "rebooted", "boot-1").await;
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--regate-after",
            GRACE,
            "--regate-on-reboot",
            "--regate-max-unavailable",
            "3",
        ],
    );
    let _ = ng.http_addr(Duration::from_secs(30));

    // (b) A routine rollout (new pods Ready a second after they start) stays
    // inside the grace: nothing is re-gated.
    roll(&env, "roller", false, "2").await;
    // (d) A new boot id: re-gated at once. (The first one must have been
    // seen: nodegate looks at every node once its watches are in.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = env
        .node("rebooted")
        .await
        .status
        .and_then(|s| s.node_info)
        .map(|i| i.boot_id);
    assert_eq!(kept.as_deref(), Some("boot-1"), "kwok kept the boot id");
    boot_id(&env, "rebooted", "boot-2").await;
    wait_for(
        "rebooted re-gated for the reboot",
        Duration::from_secs(30),
        || async {
            match env
                .annotation("rebooted", "nodegate.dev/regated-for")
                .await
                .as_deref()
            {
                Some("reboot") => Ok(()),
                other => Err(format!("regated-for {other:?}\n{}", ng.logs())),
            }
        },
    )
    .await;
    // Its pods are still Ready: the gate opens it again at once.
    env.wait_open("rebooted", Duration::from_secs(30), &[&ng])
        .await;
    wait_for(
        "rebooted open, without the re-gate taint",
        Duration::from_secs(30),
        || async {
            if has_degraded(&env, "rebooted").await {
                Err("still degraded".to_string())
            } else {
                Ok(())
            }
        },
    )
    .await;
    // Re-gated once for its one reboot, however quickly its gate opened it
    // again (before nodegate saw the taint, it once re-gated it again).
    let addr = ng.http_addr(Duration::from_secs(30));
    let text = http_get(&addr, "/metrics").await.expect("GET /metrics").1;
    assert_eq!(
        metric(&text, "nodegate_regates_total{trigger=\"reboot\"}"),
        Some(1.0),
        "{}",
        ng.logs()
    );

    // (a) The agent's new revision is held not Ready: after the grace the
    // node is re-gated, naming the member.
    roll(&env, "agent", true, "2").await;
    wait_for("broken re-gated", Duration::from_secs(60), || async {
        if has_degraded(&env, "broken").await {
            Ok(())
        } else {
            Err(format!("not re-gated\n{}", ng.logs()))
        }
    })
    .await;
    let n = env.node("broken").await;
    assert_eq!(
        annotation(&n, "nodegate.dev/regated-for").as_deref(),
        Some("infra/agent")
    );
    assert!(annotation(&n, "nodegate.dev/gated-since").is_some());
    // The Event is recorded after the taint lands: wait for it, then a
    // moment more, and there is exactly one.
    wait_for(
        "broken's NodeRegated Event",
        Duration::from_secs(30),
        || async {
            match events(&env, "broken", "NodeRegated").await {
                0 => Err("no NodeRegated Event yet".to_string()),
                _ => Ok(()),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count = events(&env, "broken", "NodeRegated").await;
    assert_eq!(count, 1, "{count} NodeRegated Events\n{}", ng.logs());

    // Workloads are no longer scheduled there: a pod pinned to the node by
    // its hostname label stays Pending, refused for an untolerated taint
    // (the only one the node carries is the re-gate taint).
    let workload: Pod = serde_json::from_value(json!({
        "metadata": {"name": "workload", "namespace": NS},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "broken"},
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
        },
    }))
    .expect("pod manifest");
    env.pods
        .create(&PostParams::default(), &workload)
        .await
        .expect("create workload");
    wait_for(
        "the workload is refused by the scheduler",
        Duration::from_secs(30),
        || async {
            let p = env.pods.get("workload").await.map_err(|e| e.to_string())?;
            let unschedulable = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.message
                                .as_deref()
                                .is_some_and(|m| m.contains("untolerated taint"))
                    })
                });
            let bound = p.spec.as_ref().and_then(|s| s.node_name.clone());
            match (unschedulable, bound) {
                (_, Some(n)) => panic!("the workload was bound to {n} while the node was re-gated"),
                (true, None) => Ok(()),
                (false, None) => Err(format!("not yet judged: {:?}", p.status)),
            }
        },
    )
    .await;

    // The hold is lifted: the node opens again, by readiness.
    env.release("agent", "broken").await;
    wait_for("broken opened again", Duration::from_secs(30), || async {
        let n = env.node("broken").await;
        if taint_keys(&n).iter().any(|k| k == DEGRADED) {
            Err("still re-gated".to_string())
        } else {
            Ok(annotation(&n, "nodegate.dev/opened-by"))
        }
    })
    .await;
    assert_eq!(
        env.annotation("broken", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );

    // (b), judged at the end: the routine rollout finished long ago, and no
    // node of it was ever re-gated.
    wait_rolled_out(&env, "roller", "2", 2).await;
    for n in ["roll-1", "roll-2"] {
        assert!(
            !has_degraded(&env, n).await,
            "{n} re-gated by a routine rollout\n{}",
            ng.logs()
        );
        assert_eq!(events(&env, n, "NodeRegated").await, 0, "{n}");
        assert!(
            env.annotation(n, "nodegate.dev/regated-for")
                .await
                .is_none(),
            "{n}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rollout_regates_no_more_nodes_than_the_budget() {
    const NODES: usize = 20;
    const BUDGET: usize = 3;
    let env = Env::new("regate-budget").await;
    create(&env, &agent("agent", "fleet", None, true)).await;
    let names: Vec<String> = (0..NODES).map(|i| format!("fleet-{i:02}")).collect();
    for n in &names {
        env.cluster.create_node(&open_node(n, "fleet")).await;
    }
    for n in &names {
        env.wait_pod("agent", n, true).await;
    }
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--regate-after",
            GRACE,
            "--regate-max-unavailable",
            &BUDGET.to_string(),
        ],
    );
    let _ = ng.http_addr(Duration::from_secs(30));
    roll(&env, "agent", true, "bad").await;

    // Watch the whole fleet until every node has been refused or re-gated:
    // at no look may more than the budget carry the taint.
    let mut most = 0;
    let mut regated = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let nodes = env
            .nodes
            .list(&ListParams::default().labels("role=fleet"))
            .await
            .expect("list nodes");
        let now: BTreeSet<String> = nodes
            .items
            .iter()
            .filter(|n| taint_keys(n).iter().any(|k| k == DEGRADED))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        most = most.max(now.len());
        assert!(
            now.len() <= BUDGET,
            "{} nodes re-gated at once (budget {BUDGET}): {now:?}\n{}",
            now.len(),
            ng.logs()
        );
        regated.extend(now);
        let mut refused = 0;
        for n in &names {
            if events(&env, n, "RegateBudgetExhausted").await > 0 {
                refused += 1;
            }
        }
        if regated.len() == BUDGET && refused == NODES - BUDGET {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after 90s: re-gated {regated:?}, {refused} nodes with RegateBudgetExhausted\n{}",
            ng.logs()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(most, BUDGET);
    // Nothing more: a while later the same three carry it, one NodeRegated
    // each, and no other node was re-gated.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut total = 0;
    for n in &names {
        let count = events(&env, n, "NodeRegated").await;
        assert_eq!(
            count,
            usize::from(regated.contains(n)),
            "{n}: {count} NodeRegated"
        );
        total += count;
        assert_eq!(has_degraded(&env, n).await, regated.contains(n), "{n}");
    }
    assert_eq!(total, BUDGET);
}

/// Hardening: an operator takes `nodegate.dev/degraded` off a
/// re-gated node by hand (`kubectl taint … nodegate.dev/degraded-`) to put
/// it back in service while the broken agent is fixed. The member's grace
/// counted from its pod's old transition, so the node was re-gated again
/// within a second. The removal is now respected until the member has been
/// Ready once: a watch on the node sees the taint stay off for the review's
/// ten seconds; once the agent is fixed and breaks again, the node is
/// re-gated as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_gate_taint_removed_by_hand_is_not_put_back() {
    use futures::{StreamExt, TryStreamExt};
    use kube::runtime::watcher;
    let env = Env::new("regate-by-hand").await;
    create(&env, &agent("agent", "h", None, false)).await;
    env.cluster.create_node(&open_node("hand", "h")).await;
    env.wait_pod("agent", "hand", true).await;
    let ng = Nodegate::start(&env.cluster, &["--regate-after", GRACE]);
    let _ = ng.http_addr(Duration::from_secs(30));
    roll(&env, "agent", true, "bad").await;
    wait_for("hand re-gated", Duration::from_secs(60), || async {
        if has_degraded(&env, "hand").await {
            Ok(())
        } else {
            Err(format!("not re-gated\n{}", ng.logs()))
        }
    })
    .await;

    let out = env
        .cluster
        .kubectl(&["taint", "node", "hand", &format!("{DEGRADED}-")]);
    assert!(out.contains("untainted"), "kubectl taint: {out}");
    let cfg = watcher::Config::default().fields("metadata.name=hand");
    let mut events_of_hand = watcher::watcher(env.nodes.clone(), cfg).boxed();
    let watched = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(ev)) = events_of_hand.try_next().await {
            if let watcher::Event::Apply(n) | watcher::Event::InitApply(n) = ev {
                assert!(
                    !taint_keys(&n).iter().any(|k| k == DEGRADED),
                    "nodegate put the re-gate taint back after it was taken off by hand\n{}",
                    ng.logs()
                );
            }
        }
    })
    .await;
    assert!(watched.is_err(), "the watch on hand ended early");

    // The agent is fixed (Ready once), then breaks again: re-gated as usual.
    env.release("agent", "hand").await;
    env.wait_pod("agent", "hand", true).await;
    roll(&env, "agent", true, "bad-again").await;
    wait_for(
        "hand re-gated once its agent broke again",
        Duration::from_secs(60),
        || async {
            if has_degraded(&env, "hand").await {
                Ok(())
            } else {
                Err(format!("not re-gated\n{}", ng.logs()))
            }
        },
    )
    .await;
}

/// The value of the `nodegate_map_entries` sample of `map` on a page.
fn map_entries(page: &str, map: &str) -> Option<f64> {
    let prefix = format!("nodegate_map_entries{{map=\"{map}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

/// Node churn leaves nothing behind: a node deleted while its gate is
/// closed and one deleted while re-gated take their per-node series
/// (`nodegate_gate_age_seconds{node}`, `nodegate_regated_node_age_seconds{node}`)
/// with them, and every map that grows with the nodes
/// (`nodegate_map_entries`) comes back to what it held before they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_takes_its_series_and_map_entries_with_it() {
    let env = Env::new("regate-churn").await;
    create(&env, &agent("agent", "a", None, false)).await;
    env.cluster.create_node(&open_node("regated", "a")).await;
    env.wait_pod("agent", "regated", true).await;
    let ng = Nodegate::start(&env.cluster, &["--regate-after", GRACE]);
    let addr = ng.http_addr(Duration::from_secs(30));
    let page = || async {
        support::http_get(&addr, "/metrics")
            .await
            .map(|(_, body)| body)
    };
    let before = wait_for("a first page", Duration::from_secs(30), || async {
        let p = page().await?;
        map_entries(&p, "index_nodes")
            .filter(|n| *n >= 1.0)
            .map(|_| p.clone())
            .ok_or_else(|| format!("no nodegate_map_entries yet\n{p}"))
    })
    .await;

    // The agent's new revision is never Ready: "regated" is re-gated after
    // the grace, and "gated", joining now, stays gated.
    roll(&env, "agent", true, "2").await;
    env.cluster
        .create_node(&support::gate::gated_node("gated", &[("role", "a")]))
        .await;
    let series = [
        "nodegate_gate_age_seconds{node=\"gated\"}",
        "nodegate_regated_node_age_seconds{node=\"regated\"}",
    ];
    wait_for("both per-node series", Duration::from_secs(90), || async {
        let p = page().await?;
        match series.iter().find(|s| !p.contains(*s)) {
            None => Ok(()),
            Some(missing) => Err(format!("{missing} missing\n{}", ng.logs())),
        }
    })
    .await;

    // Both nodes go, and their pods with them (as the pod garbage collector
    // would delete them, without its delay).
    for n in ["gated", "regated"] {
        env.nodes
            .delete(n, &Default::default())
            .await
            .expect("delete node");
    }
    env.pods
        .delete_collection(
            &kube::api::DeleteParams::default().grace_period(0),
            &ListParams::default().labels("app=agent"),
        )
        .await
        .expect("delete the agent's pods");
    let maps = [
        "router_gates",
        "router_opened_at_version",
        "index_nodes",
        "index_pod_nodes",
        "index_pods",
        "metrics_gates",
        "metrics_gate_age_series",
        "metrics_regated_age_series",
    ];
    wait_for(
        "the series gone and every map back to its size before",
        Duration::from_secs(90),
        || async {
            let p = page().await?;
            let mut wrong: Vec<String> = series
                .iter()
                .filter(|s| p.contains(*s))
                .map(|s| format!("{s} still exported"))
                .collect();
            for m in maps {
                let (was, now) = (map_entries(&before, m), map_entries(&p, m));
                // Before: one open node and its one pod, nothing gated.
                let want = match m {
                    "index_nodes" | "index_pod_nodes" | "index_pods" => Some(0.0),
                    _ => was,
                };
                if now != want {
                    wrong.push(format!("{m}: {now:?}, want {want:?} (before: {was:?})"));
                }
            }
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(wrong.join("; "))
            }
        },
    )
    .await;
}
