//! `--node-condition`: the leader writes the Node condition
//! `nodegate.dev/Open` through `nodes/status` — False with what the gate
//! waits for while a DaemonSet is held, True once it opened — and nothing
//! without the flag. Against the real local control plane (deploy/local).

mod support;

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
