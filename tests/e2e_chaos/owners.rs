//! Scenario 8: replace's owners under faults. A workload cluster whose every
//! owner lookup is a 404 (Cluster API keeps its Machines elsewhere) must not
//! fill the in-flight budget for ever; and a node a person opened after its
//! replace request keeps its owner when the leader is killed and the
//! managed taint comes back (semantics.md §5.8).

use kube::api::PostParams;
use support::Nodegate;
use support::gate::DsSpec;
use support::owners::{capi_node, cordoned, create_machine, has_event, owner_kinds, reasons};

use super::*;

/// A Cluster API workload cluster: its Machines live in the management
/// cluster, so every lookup of a node's Machine here is a 404. Two stuck
/// CAPI-annotated nodes whose Machines do not exist get the fallback
/// (`keep`), are not requested and do not fill `--replace-in-flight 2`; a
/// third stuck node, whose Machine names it, is then replaced (its Machine
/// deleted) rather than refused for ever with `ReplaceBudgetExhausted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_do_not_exist_fill_no_budget() {
    let env = Env::new("replace-capi-404").await;
    let (machines, _) = owner_kinds(&env).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            "5",
            "--replace-in-flight",
            "2",
            // The agent fails on every node: not judged a breakage here.
            "--replace-breakage",
            "100%",
        ],
    );
    for name in ["elsewhere-a", "elsewhere-b"] {
        env.cluster
            .create_node(&capi_node(name, &format!("m-{name}")))
            .await;
    }
    for name in ["elsewhere-a", "elsewhere-b"] {
        wait_for(
            &format!("the fallback on {name}"),
            Duration::from_secs(60),
            || async {
                env.annotation(name, "nodegate.dev/replace-fallback")
                    .await
                    .ok_or_else(|| format!("no fallback on {name} yet\n{}", ng.logs()))
            },
        )
        .await;
        let n = env.node(name).await;
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-requested"),
            None,
            "{name}"
        );
        assert!(!cordoned(&n), "{name} must not be cordoned");
    }
    let third = env
        .cluster
        .create_node(&capi_node("third", "m-third"))
        .await;
    let uid = third.metadata.uid.clone().expect("a node uid");
    create_machine(&machines, "m-third", "third", &uid).await;
    wait_for(
        "the third node's Machine deleted",
        Duration::from_secs(60),
        || async {
            match machines.get_opt("m-third").await {
                Ok(None) => Ok(()),
                other => Err(format!("m-third: {other:?}\n{}", ng.logs())),
            }
        },
    )
    .await;
    assert!(
        annotation(&env.node("third").await, "nodegate.dev/replace-requested").is_some(),
        "the third node is marked"
    );
    assert!(
        !has_event(&env, "third", "ReplaceBudgetExhausted").await,
        "the third node was never refused"
    );
}

/// Issue 37 §4: a node asked to be replaced that a person then opens is no
/// longer being replaced. `marked` has no owner at its deadline, so it is
/// cordoned and marked; then it gains one (Cluster API's annotations and a
/// Machine whose `status.nodeRef` names it by name and UID) and a person
/// opens it with `nodegate.dev/open`. The opening removes the request's
/// marks; the leader is killed, the managed taint comes back (as
/// Karpenter's registration puts its startup taints back on a node opened
/// before it registered), and the restarted leader leaves the Machine
/// alone: a serving node is not terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opened_marked_node_keeps_its_owner_across_a_leader_restart() {
    let env = Env::new("replace-opened").await;
    let (machines, _) = owner_kinds(&env).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let flags = [
        "--timeout",
        "3s",
        "--on-timeout",
        "replace",
        "--replace-budget",
        "5",
        "--replace-in-flight",
        "5",
        "--replace-breakage",
        "100%",
    ];
    let mut ng = Nodegate::start(&env.cluster, &flags);
    let node = env.create_node("marked", &[]).await;
    let at = wait_for("marked to be marked", Duration::from_secs(60), || async {
        env.annotation("marked", "nodegate.dev/replace-requested")
            .await
            .ok_or_else(|| ng.logs())
    })
    .await;
    assert!(cordoned(&env.node("marked").await), "no owner: cordoned");

    // It gains an owner that proves it owns the node.
    let uid = node.metadata.uid.clone().expect("a node uid");
    create_machine(&machines, "marked-m", "marked", &uid).await;
    let pp = PatchParams::default();
    env.nodes
        .patch(
            "marked",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {
                "cluster.x-k8s.io/machine": "marked-m",
                "cluster.x-k8s.io/cluster-namespace": "capi",
            }}})),
        )
        .await
        .expect("annotate marked with its Machine");

    // A person opens it.
    env.nodes
        .patch(
            "marked",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {"nodegate.dev/open": "true"}}})),
        )
        .await
        .expect("ask to open marked");
    env.wait_open("marked", Duration::from_secs(30), &[&ng])
        .await;
    let opened = env.node("marked").await;
    assert!(annotation(&opened, "nodegate.dev/opened-at").is_some());
    assert_eq!(
        annotation(&opened, "nodegate.dev/replace-requested"),
        None,
        "the opening removes the request (it was {at})"
    );
    assert!(
        cordoned(&opened) && annotation(&opened, "nodegate.dev/replace-reason").is_some(),
        "the cordon stays for a person to lift, and its reason says why"
    );

    // The leader is killed; the managed taint comes back.
    ng.kill();
    let mut n = env.node("marked").await;
    n.spec
        .get_or_insert_default()
        .taints
        .get_or_insert_default()
        .push(
            serde_json::from_value(
                json!({"key": "nodegate.dev/initializing", "effect": "NoSchedule"}),
            )
            .expect("a taint"),
        );
    env.nodes
        .replace("marked", &PostParams::default(), &n)
        .await
        .expect("put the managed taint back on marked");

    // A new leader, seen to look and act: another stuck node with no owner
    // is cordoned and marked after the restart.
    let ng = Nodegate::start(&env.cluster, &flags);
    env.create_node("later", &[]).await;
    wait_for("later to be marked", Duration::from_secs(60), || async {
        env.annotation("later", "nodegate.dev/replace-requested")
            .await
            .ok_or_else(|| ng.logs())
    })
    .await;
    assert!(
        machines
            .get_opt("marked-m")
            .await
            .expect("get marked-m")
            .is_some_and(|m| m.metadata.deletion_timestamp.is_none()),
        "the Machine of a node opened since its request is not deleted:\n{}",
        ng.logs()
    );
    let marked = env.node("marked").await;
    assert_eq!(
        annotation(&marked, "nodegate.dev/replace-requested"),
        None,
        "no request again for a node opened after its deadline"
    );
    let replaced = reasons(&env, "marked")
        .await
        .into_iter()
        .filter(|r| r == "GateReplaced")
        .count();
    assert_eq!(
        replaced, 1,
        "one GateReplaced on marked, from before the opening"
    );
}
