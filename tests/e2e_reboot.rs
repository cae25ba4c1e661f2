//! Re-gating before an announced reboot (semantics.md §6.10) on the real
//! control plane, with the real binary and kwok nodes: a node announced for
//! a reboot (by `nodegate.dev/reboot-pending`, or by kured's lock on its
//! DaemonSet) gets the re-gate taint before the reboot; its gate does not
//! open on the pods Ready from before, opens once the node reports a new
//! boot id and its agent is Ready again, and opens by readiness when the
//! announcement is withdrawn without a reboot; a nodegate restarted while
//! the reboot is announced holds the same. kured's lock goes around the
//! re-gating budget; a person's annotation does not.
//!
//! The reboot is simulated as a kubelet would show it: a new
//! `status.nodeInfo.bootID` (status subresource), and the agent's pod
//! replaced (its status written again after the reboot).

use nodegate_e2e as support;

use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use support::gate::{DsSpec, Env, NS, daemonset, taint_keys};
use support::{Nodegate, fake_node, http_get, wait_for, watch_until};

const DEGRADED: &str = "nodegate.dev/degraded";
const AWAITING: &str = "nodegate.dev/awaiting-reboot";

/// A node agent that tolerates every taint, on the nodes labelled
/// `role=ROLE`.
fn agent(name: &str, role: &str) -> DaemonSet {
    let spec = DsSpec {
        node_selector: &[("role", role)],
        ..DsSpec::new(name)
    };
    let mut ds = serde_json::to_value(daemonset(&spec)).expect("daemonset json");
    ds["spec"]["template"]["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    serde_json::from_value(ds).expect("daemonset manifest")
}

async fn create(env: &Env, ds: &DaemonSet) {
    env.daemonsets
        .create(&PostParams::default(), ds)
        .await
        .expect("create daemonset");
}

/// An open node labelled `role=ROLE` whose agent is Ready, booted as
/// `boot-1` (kwok's nodes report no boot id; a kubelet does).
async fn healthy_node(env: &Env, name: &str, role: &str, app: &str) {
    env.cluster
        .create_node(&fake_node(name, &[("role", role)], &[]))
        .await;
    env.wait_pod(app, name, true).await;
    boot_id(env, name, "boot-1").await;
}

async fn boot_id(env: &Env, node: &str, id: &str) {
    let status = json!({"status": {"nodeInfo": {"bootID": id}}});
    env.nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patch the boot id");
}

async fn annotate_node(env: &Env, node: &str, key: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    env.nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate the node");
}

async fn degraded(env: &Env, node: &str) -> bool {
    taint_keys(&env.node(node).await)
        .iter()
        .any(|k| k == DEGRADED)
}

/// Waits until `node` carries the re-gate taint, re-gated for `why`, with
/// the boot id it had recorded (a watch of the node).
async fn wait_regated(env: &Env, ng: &Nodegate, node: &str, why: &str) {
    env.wait_node(
        node,
        &format!("{node} re-gated before its reboot"),
        Duration::from_secs(60),
        |n| {
            let n = n.ok_or("no such node")?;
            let a = n.metadata.annotations.clone().unwrap_or_default();
            let for_ = a.get("nodegate.dev/regated-for").map(String::as_str);
            let awaiting = a.get(AWAITING).map(String::as_str);
            let tainted = taint_keys(n).iter().any(|k| k == DEGRADED);
            if tainted && for_ == Some(why) && awaiting == Some("boot-1") {
                Ok(())
            } else {
                Err(format!(
                    "tainted={tainted} regated-for={for_:?} awaiting={awaiting:?}\n{}",
                    ng.logs()
                ))
            }
        },
    )
    .await;
}

/// Waits until `node` no longer carries the re-gate taint (a watch of it).
async fn wait_not_degraded(env: &Env, ng: &Nodegate, node: &str, what: &str) {
    env.wait_node(node, what, Duration::from_secs(60), |n| {
        let n = n.ok_or("no such node")?;
        if taint_keys(n).iter().any(|k| k == DEGRADED) {
            Err(format!("still degraded\n{}", ng.logs()))
        } else {
            Ok(())
        }
    })
    .await;
}

/// Waits until the gate of `node`, as nodegate's debug view shows it, waits
/// for what `says` names (an awaited sight of the gate's decision, not a
/// pause).
async fn wait_gate_says(ng: &Nodegate, node: &str, says: &str) {
    let addr = ng.debug_addr(Duration::from_secs(30));
    wait_for(
        &format!("the gate of {node} to say {says:?}"),
        Duration::from_secs(60),
        || async {
            let (code, body) = http_get(&addr, &format!("/debug/nodes/{node}")).await?;
            let v: Value = serde_json::from_str(&body).map_err(|e| format!("{code}: {e}"))?;
            match v["node_not_ready"].as_str() {
                Some(why) if why.contains(says) => Ok(()),
                other => Err(format!("node_not_ready {other:?}")),
            }
        },
    )
    .await;
}

/// Replaces `app`'s pod on `node`: its status written afresh, Ready after
/// the reboot (as the restarted kubelet does).
async fn restart_pod(env: &Env, app: &str, node: &str) {
    let pod = env.pod_on(app, node).await.expect("the agent's pod");
    let name = pod.metadata.name.expect("pod name");
    env.pods
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the pod");
    let config = watcher::Config::default()
        .labels(&format!("app={app}"))
        .fields(&format!("spec.nodeName={node}"));
    watch_until(
        &env.pods,
        config,
        &format!("{app} on {node} replaced and Ready"),
        Duration::from_secs(60),
        |pods| {
            pods.iter()
                .any(|p| {
                    p.metadata.name.as_deref() != Some(name.as_str())
                        && support::gate::is_ready(p)
                        && p.metadata.deletion_timestamp.is_none()
                })
                .then_some(())
                .ok_or_else(|| "not replaced yet".to_string())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_reboot_taints_before_and_opens_only_after_the_reboot() {
    let env = Env::new("reboot-announced").await;
    create(&env, &agent("agent", "a")).await;
    healthy_node(&env, "r1", "a", "agent").await;
    let args = [
        "--regate-after",
        "1h",
        "--reboot-announcements",
        "annotation",
        "--reboot-timeout",
        "10m",
    ];
    let mut first = Nodegate::start(&env.cluster, &args);
    let _ = first.http_addr(Duration::from_secs(30));

    // A person announces the reboot: the taint goes on before it.
    annotate_node(&env, "r1", "nodegate.dev/reboot-pending", Some("kernel")).await;
    wait_regated(&env, &first, "r1", "announced-reboot:annotation").await;
    // The agent is Ready (from before): the gate holds, waiting for the
    // reboot.
    wait_gate_says(&first, "r1", "waiting for the announced reboot").await;
    assert!(degraded(&env, "r1").await, "opened before the reboot");

    // nodegate restarts while the reboot is announced: the new process
    // knows it from the node alone, and holds the same.
    first.terminate(Duration::from_secs(20));
    let ng = Nodegate::start(&env.cluster, &args);
    let _ = ng.http_addr(Duration::from_secs(30));
    wait_gate_says(&ng, "r1", "waiting for the announced reboot").await;
    assert!(degraded(&env, "r1").await, "opened after the restart");

    // The reboot: a new boot id, the agent's status still from before.
    boot_id(&env, "r1", "boot-2").await;
    wait_gate_says(&ng, "r1", "the node rebooted; waiting for infra/agent").await;
    assert!(
        degraded(&env, "r1").await,
        "opened on a pod Ready from before"
    );

    // The agent Ready again after the reboot: the gate opens.
    restart_pod(&env, "agent", "r1").await;
    wait_not_degraded(&env, &ng, "r1", "r1 open").await;
    assert_eq!(
        env.annotation("r1", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );

    // The person removes the announcement: the record goes with it, so the
    // next announcement counts; the node is not re-gated meanwhile.
    annotate_node(&env, "r1", "nodegate.dev/reboot-pending", None).await;
    env.wait_node(
        "r1",
        "the record removed",
        Duration::from_secs(60),
        |n| match n.and_then(|n| n.metadata.annotations.as_ref()?.get(AWAITING)) {
            None => Ok(()),
            Some(v) => Err(format!("{AWAITING}={v}")),
        },
    )
    .await;
    assert!(!degraded(&env, "r1").await);
}

const LOCK: &str = "weave.works/kured-node-lock";

async fn lock(env: &Env, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": {LOCK: value}}});
    env.daemonsets
        .patch("kured", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("set kured's lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kureds_lock_regates_outside_the_budget_and_its_release_without_a_reboot_opens() {
    let env = Env::new("reboot-kured").await;
    // kured itself is the node agent here: its DaemonSet carries the lock.
    create(&env, &agent("kured", "k")).await;
    for n in ["k1", "k2"] {
        healthy_node(&env, n, "k", "kured").await;
    }
    // The budget (one node) is used up by a node whose re-gate nodegate
    // holds (suspended).
    let mut full = fake_node("k0", &[("role", "none")], &[(DEGRADED, "", "NoSchedule")]);
    full.metadata.annotations =
        Some([("nodegate.dev/suspend".to_string(), "true".to_string())].into());
    env.cluster.create_node(&full).await;
    let kured = format!("{NS}/kured");
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--regate-after",
            "1h",
            "--regate-max-unavailable",
            "1",
            // kured's lock goes around --regate-max-unavailable only:
            // --max-unavailable (50 % of three nodes: one, taken by k0)
            // would hold it too.
            "--max-unavailable",
            "100%",
            "--reboot-announcements",
            "kured-lock,annotation",
            "--kured-daemonset",
            &kured,
        ],
    );
    let _ = ng.http_addr(Duration::from_secs(30));

    // A person's announcement for k2 is held by the budget...
    annotate_node(&env, "k2", "nodegate.dev/reboot-pending", Some("bios")).await;
    wait_for(
        "k2 refused by the budget",
        Duration::from_secs(60),
        || async {
            let refused = env
                .events_for("k2")
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("RegateBudgetExhausted"));
            if refused { Ok(()) } else { Err(ng.logs()) }
        },
    )
    .await;
    assert!(!degraded(&env, "k2").await, "k2 re-gated past the budget");

    // ... kured's lock, which lets one node reboot at a time, is not.
    let value = r#"{"nodeID":"k1","metadata":{"unschedulable":false},"created":"2026-01-01T00:00:00Z","TTL":0}"#;
    lock(&env, Some(value)).await;
    wait_regated(&env, &ng, "k1", "announced-reboot:kured-lock").await;
    wait_gate_says(&ng, "k1", "waiting for the announced reboot").await;

    // kured gives up (its drain failed) and releases the lock: no reboot,
    // the record goes and the gate opens on the pods Ready all along.
    lock(&env, None).await;
    wait_not_degraded(&env, &ng, "k1", "k1 open after the release").await;
    assert_eq!(env.annotation("k1", AWAITING).await, None);
    assert_eq!(
        env.annotation("k1", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );
}

/// Whoever may annotate kured's DaemonSet could name every node in its
/// lock. A lock naming ten nodes with `maxOwners: 1` re-gates one of them
/// (the first), however roomy the budgets: with `--max-unavailable 100%`
/// and kured's lock outside `--regate-max-unavailable`, only
/// `maxOwners` and `--kured-max-holders` (default 1) bound it. A person's
/// announcement made after the lock is re-gated too, so the lock has been
/// acted on whole by then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kured_lock_naming_ten_nodes_with_max_owners_one_regates_one() {
    let env = Env::new("reboot-kured-cap").await;
    create(&env, &agent("kured", "k")).await;
    let names: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    for n in names.iter().map(String::as_str).chain(["p"]) {
        healthy_node(&env, n, "k", "kured").await;
    }
    let kured = format!("{NS}/kured");
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--regate-after",
            "1h",
            "--regate-max-unavailable",
            "5",
            "--max-unavailable",
            "100%",
            "--reboot-announcements",
            "kured-lock,annotation",
            "--kured-daemonset",
            &kured,
        ],
    );
    let _ = ng.http_addr(Duration::from_secs(30));

    let entries: Vec<Value> = names
        .iter()
        .map(|n| json!({"nodeID": n, "metadata": {"unschedulable": false}, "created": "2026-01-01T00:00:00Z", "TTL": 0}))
        .collect();
    let value = json!({"maxOwners": 1, "locks": entries}).to_string();
    lock(&env, Some(&value)).await;
    wait_regated(&env, &ng, "k0", "announced-reboot:kured-lock").await;
    annotate_node(&env, "p", "nodegate.dev/reboot-pending", Some("bios")).await;
    wait_regated(&env, &ng, "p", "announced-reboot:annotation").await;

    let mut regated = Vec::new();
    for n in &names {
        if degraded(&env, n).await {
            regated.push(n.clone());
        }
    }
    assert_eq!(
        regated,
        ["k0"],
        "only the lock's first holder\n{}",
        ng.logs()
    );
}
