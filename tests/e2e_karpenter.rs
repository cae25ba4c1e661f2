//! nodegate under the real Karpenter (v1.14.3, its kwok cloud provider, run
//! by `deploy/local/karpenter`): Karpenter launches NodeClaims for pending
//! pods, its kwok provider creates the Nodes, deploy/local's kwok runs them,
//! the shipped admission policy puts the startup taint on at CREATE and
//! nodegate opens each node once its DaemonSets are Ready.
//!
//! What is judged is what the API server shows, recorded by two watches
//! (Nodes, NodeClaims) and ordered by resourceVersion
//! (`support::karpenter::Recorder`).
//!
//! The key is `support::karpenter::KEY` (`readiness.k8s.io/nodegate`). With
//! nodegate's old default, `nodegate.dev/initializing`, set there, Karpenter
//! does not know the taint: it decides that the pending pods cannot land on
//! the gated nodes, launches more NodeClaims, and marks every node
//! Initialized while it is still gated — both tests below then fail (see the
//! report in each).

use nodegate_e2e as support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::json;
use support::karpenter::{
    KEY, Karpenter, NS, Recorder, Seen, agent, breaches, break_agent_on, create_agents,
    create_workload, has_taint, install_admission, nodegate_flags, nodepool, wait_initialized,
    wait_running, workload,
};
use support::{Nodegate, TestCluster, wait_for};

/// The DaemonSets of every test: node agents Ready a few seconds after they
/// start.
fn agents() -> Vec<k8s_openapi::api::apps::v1::DaemonSet> {
    vec![agent("agent-a", "2s"), agent("agent-b", "4s")]
}

/// Pods of 850m CPU: four fit a 4-CPU node beside the agents, so 20 pods
/// need 5 nodes.
const PODS: i32 = 20;

/// (a) and (b): the same 20 pending pods, first on NodePool `plain` without
/// nodegate, then on NodePool `gated` with nodegate and its admission
/// policy. With nodegate, Karpenter launches no more NodeClaims than without;
/// no gated node is disrupted; every NodeClaim becomes Initialized only
/// after nodegate opened its node; every pod runs.
#[tokio::test(flavor = "multi_thread")]
async fn karpenter_launches_no_more_nodes_for_gated_nodes_and_waits_for_the_gate() {
    let cluster = TestCluster::start("karpenter-scale-up").await;
    create_agents(&cluster, &agents()).await;
    let pools = json!({"apiVersion": "v1", "kind": "List", "items": [
        nodepool("plain", &[]),
        nodepool("gated", &[]),
    ]});
    let karpenter = Karpenter::start(&cluster, Some(&pools));
    let recorder = Recorder::start(&cluster);

    // Without nodegate.
    create_workload(&cluster, &workload("plain", PODS, "plain")).await;
    wait_running(&cluster, "plain", PODS as usize, Duration::from_secs(180)).await;
    wait_initialized(&cluster, "plain", Duration::from_secs(60)).await;
    let without = recorder.claims("plain");

    // With nodegate, on nodes of the other pool only.
    install_admission(&cluster, &[("karpenter.sh/nodepool", "gated")]).await;
    let ng = Nodegate::start(
        &cluster,
        &str_refs(&nodegate_flags(&[
            "--node-selector",
            "karpenter.sh/nodepool=gated",
        ])),
    );
    let _ = ng.http_addr(Duration::from_secs(30));
    create_workload(&cluster, &workload("gated", PODS, "gated")).await;
    wait_running(&cluster, "gated", PODS as usize, Duration::from_secs(180)).await;
    wait_initialized(&cluster, "gated", Duration::from_secs(60)).await;
    let with = recorder.claims("gated");
    eprintln!(
        "NodeClaims for {PODS} pods: {} without nodegate, {} with nodegate (key {KEY})",
        without.len(),
        with.len()
    );

    let found = breaches(&recorder.timeline_of("gated"), false);
    let report = || {
        format!(
            "{} NodeClaims without nodegate {without:?}, {} with {with:?}\nbreaches:\n{}\ntimeline:\n{}\nKarpenter:\n{}",
            without.len(),
            with.len(),
            found.join("\n"),
            recorder.dump(),
            karpenter.log_tail(30)
        )
    };
    assert!(
        !without.is_empty() && with.len() <= without.len(),
        "Karpenter launched more NodeClaims for gated nodes: {}",
        report()
    );
    assert!(found.is_empty(), "{}", report());
}

/// (d) A node nodegate re-gates (one agent broken for longer than
/// `--regate-after`) keeps its NodeClaim: Karpenter sees an Initialized node
/// with a NoSchedule taint it does not own (`nodegate.dev/degraded`), which
/// is neither a reason to disrupt it (its disruption looks at emptiness,
/// utilisation, drift and expiry, not at taints) nor, with no pod pending, to
/// launch another. Over a window of two of its disruption passes, no
/// NodeClaim is created or deleted and the node is never marked disrupted;
/// once the agent is Ready again, nodegate opens the node.
#[tokio::test(flavor = "multi_thread")]
async fn karpenter_neither_replaces_nor_disrupts_a_regated_node() {
    const DEGRADED: &str = "nodegate.dev/degraded";
    let cluster = TestCluster::start("karpenter-regate").await;
    create_agents(&cluster, &agents()).await;
    let karpenter = Karpenter::start(&cluster, None);
    install_admission(&cluster, &[("karpenter.sh/nodepool", "default")]).await;
    let ng = Nodegate::start(
        &cluster,
        &str_refs(&nodegate_flags(&["--regate-after", "2s"])),
    );
    let _ = ng.http_addr(Duration::from_secs(30));
    create_workload(&cluster, &workload("app", 8, "default")).await;
    wait_running(&cluster, "app", 8, Duration::from_secs(180)).await;
    let claims = wait_initialized(&cluster, "default", Duration::from_secs(60)).await;
    let recorder = Recorder::start(&cluster);

    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let target = karpenter_nodes(&nodes)
        .await
        .into_iter()
        .next()
        .expect("a Karpenter node");
    break_agent_on(&cluster, "agent-a", &target).await;
    wait_for(
        &format!("{target} re-gated"),
        Duration::from_secs(60),
        || async {
            let n = nodes.get(&target).await.map_err(|e| e.to_string())?;
            if has_taint(&n, DEGRADED) {
                Ok(())
            } else {
                Err(format!(
                    "taints {:?}\n{}",
                    support::karpenter::taints(&n),
                    ng.logs()
                ))
            }
        },
    )
    .await;
    // A negative (nothing happens) is seen only over a window: Karpenter's
    // disruption pass runs every 10 s, consolidateAfter is 5 s.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let timeline = recorder.timeline_of("default");
    let touched: Vec<&Seen> = timeline
        .iter()
        .filter(|s| match s {
            Seen::Claim { name, deleting, .. } => *deleting || !claims.contains(name),
            Seen::Node {
                disrupted,
                deleting,
                ..
            } => *disrupted || *deleting,
        })
        .collect();
    assert!(
        touched.is_empty(),
        "Karpenter acted on the re-gated node {target} (NodeClaims before: {claims:?}):\n{touched:#?}\nKarpenter:\n{}",
        karpenter.log_tail(30)
    );
    assert_eq!(recorder.claims("default"), claims.iter().cloned().collect());

    heal_agent_on(&cluster, "agent-a", &target).await;
    wait_for(
        &format!("{target} reopened"),
        Duration::from_secs(60),
        || async {
            let n = nodes.get(&target).await.map_err(|e| e.to_string())?;
            if has_taint(&n, DEGRADED) {
                Err(format!("still re-gated\n{}", ng.logs()))
            } else {
                Ok(())
            }
        },
    )
    .await;
}

/// (c) A NodePool that lists the key in `startupTaints`: Karpenter puts the
/// key on the node itself at registration (its taint sync), so a gate that
/// opened before `karpenter.sh/registered=true` is undone (karpenter#1772).
/// Registration is held back here by a ValidatingAdmissionPolicy that
/// refuses Karpenter's registration patch while the node's agents become
/// Ready; then it is let through. The gate must not open before
/// registration, and the key must never come back after it opened.
///
/// The Karpenter-aware opening: without it (a gate that opens Karpenter's
/// nodes as soon as their agents are Ready) this test fails twice: the gate
/// opens while registration is held, and Karpenter's registration puts the
/// key back (a bounce).
#[tokio::test(flavor = "multi_thread")]
async fn a_startup_taint_nodepool_is_opened_only_after_registration_without_a_bounce() {
    let cluster = TestCluster::start("karpenter-registration").await;
    create_agents(&cluster, &agents()).await;
    let startup = format!("{KEY}:NoSchedule");
    let mut pool = nodepool("startup", &[&startup]);
    pool["spec"]["template"]["metadata"] =
        json!({"labels": {"nodegate.test/hold-registration": "true"}});
    hold_registration(&cluster);
    let karpenter = Karpenter::start(&cluster, Some(&pool));
    install_admission(&cluster, &[("karpenter.sh/nodepool", "startup")]).await;
    let ng = Nodegate::start(&cluster, &str_refs(&nodegate_flags(&[])));
    let _ = ng.http_addr(Duration::from_secs(30));
    let recorder = Recorder::start(&cluster);
    create_workload(&cluster, &workload("app", 4, "startup")).await;

    // The node exists, unregistered, and its agents become Ready.
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let node = wait_for(
        "a node of NodePool startup",
        Duration::from_secs(60),
        || async {
            karpenter_nodes(&nodes)
                .await
                .into_iter()
                .next()
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    wait_agents_ready(&cluster, &node).await;
    // A negative again: the gate must stay shut while registration is held.
    // The agents are Ready, so a gate that does not wait opens within this.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let early = breaches(&recorder.timeline_of("startup"), true);
    assert!(
        early.is_empty(),
        "while registration was held:\n{}\n{}",
        early.join("\n"),
        ng.logs()
    );

    release_registration(&cluster);
    wait_running(&cluster, "app", 4, Duration::from_secs(120)).await;
    wait_initialized(&cluster, "startup", Duration::from_secs(60)).await;
    let found = breaches(&recorder.timeline_of("startup"), true);
    assert!(
        found.is_empty(),
        "{}\ntimeline:\n{}\nKarpenter:\n{}",
        found.join("\n"),
        recorder.dump(),
        karpenter.log_tail(30)
    );
}

/// (e) `--on-timeout replace` with the real Karpenter: the agent
/// `stuck` never turns Ready on the first node, which reaches its deadline
/// closed; nodegate marks it `nodegate.dev/replace-requested` and deletes
/// its NodeClaim (`GateReplaced` names it). Karpenter terminates the node
/// and, the workload pod still pending, launches another NodeClaim; its node
/// comes up gated and opens once its `stuck` pod is let turn Ready (the test
/// releases it, as a healthy instance would). The workload pod runs there.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_that_never_becomes_ready_is_replaced_by_karpenter() {
    let cluster = TestCluster::start("karpenter-replace").await;
    let mut ds = agents();
    ds.push(held_agent("stuck"));
    create_agents(&cluster, &ds).await;
    let karpenter = Karpenter::start(&cluster, None);
    install_admission(&cluster, &[("karpenter.sh/nodepool", "default")]).await;
    let flags = [
        "--timeout",
        "30s",
        "--on-timeout",
        "replace",
        // One stuck node is never a cluster-wide breakage (2 needed);
        // the budget's defaults (2 per 10m, 2 in flight) let this one go.
    ];
    let ng = Nodegate::start(&cluster, &flags);
    let _ = ng.http_addr(Duration::from_secs(30));
    let recorder = Recorder::start(&cluster);
    create_workload(&cluster, &workload("app", 1, "default")).await;

    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let first = wait_for(
        "the first Karpenter node",
        Duration::from_secs(60),
        || async {
            karpenter_nodes(&nodes)
                .await
                .into_iter()
                .next()
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    let first_claim = wait_for(
        &format!("the NodeClaim of {first}"),
        Duration::from_secs(60),
        || async {
            claim_of(&cluster, &first)
                .await
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    // The deadline passes (30 s) and the NodeClaim is deleted.
    wait_for(
        &format!("NodeClaim {first_claim} deleted by nodegate"),
        Duration::from_secs(120),
        || async {
            let claims = support::karpenter::nodeclaims(&cluster);
            match claims.get_opt(&first_claim).await {
                Ok(Some(c)) if c.metadata.deletion_timestamp.is_none() => {
                    Err(format!("still there\n{}", ng.logs()))
                }
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    // The Event is recorded after the delete's answer: waited for.
    let replaced = wait_for(
        &format!("GateReplaced for {first}"),
        Duration::from_secs(15),
        || async {
            let events = events_about(&cluster, &first).await;
            events
                .iter()
                .find(|(reason, _)| reason == "GateReplaced")
                .cloned()
                .ok_or_else(|| format!("none yet: {events:?}"))
        },
    )
    .await;
    assert!(
        replaced.1.contains(&format!("nodeclaim/{first_claim}")),
        "{replaced:?}"
    );
    if let Ok(n) = nodes.get(&first).await {
        assert!(has_taint(&n, KEY), "{first} must stay closed");
        assert!(
            support::gate::annotation(&n, "nodegate.dev/replace-requested").is_some(),
            "{first} must carry the request"
        );
    }

    // A new node comes up gated; its stuck agent is released; it opens.
    let second = wait_for(
        "a second Karpenter node",
        Duration::from_secs(120),
        || async {
            karpenter_nodes(&nodes)
                .await
                .into_iter()
                .find(|n| *n != first)
                .ok_or_else(|| format!("none yet\n{}", karpenter.log_tail(10)))
        },
    )
    .await;
    let n = nodes.get(&second).await.expect("the second node");
    assert!(has_taint(&n, KEY), "{second} must come up gated");
    release_on(&cluster, "stuck", &second).await;
    wait_running(&cluster, "app", 1, Duration::from_secs(120)).await;
    let n = nodes.get(&second).await.expect("the second node");
    assert!(!has_taint(&n, KEY), "{second} must have opened");
    assert_eq!(
        support::gate::annotation(&n, "nodegate.dev/opened-by").as_deref(),
        Some("ready")
    );
    wait_for(
        &format!("{first} gone"),
        Duration::from_secs(120),
        || async {
            match nodes.get_opt(&first).await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    eprintln!("timeline:\n{}", recorder.dump());
}

/// A node agent whose pods (kwok) are Running but never Ready until the
/// test removes the hold label from one (`release_on`).
fn held_agent(name: &str) -> k8s_openapi::api::apps::v1::DaemonSet {
    let mut ds = agent(name, "1s");
    let t = ds.spec.as_mut().expect("spec");
    t.template
        .metadata
        .as_mut()
        .expect("template metadata")
        .labels
        .get_or_insert_default()
        .insert("nodegate.test/hold-not-ready".into(), "true".into());
    ds
}

async fn release_on(cluster: &TestCluster, app: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let pod = wait_for(
        &format!("the {app} pod on {node}"),
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
                .and_then(|p| p.metadata.name)
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
    let patch = json!({"metadata": {"labels": {"nodegate.test/hold-not-ready": null}}});
    pods.patch(
        &pod,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .unwrap_or_else(|e| panic!("release {pod}: {e}"));
}

/// The NodeClaim whose status.nodeName is `node`.
async fn claim_of(cluster: &TestCluster, node: &str) -> Option<String> {
    let list = support::karpenter::nodeclaims(cluster)
        .list(&ListParams::default())
        .await
        .ok()?;
    list.items
        .into_iter()
        .find(|c| c.data["status"]["nodeName"].as_str() == Some(node))
        .and_then(|c| c.metadata.name)
}

/// (reason, note) of the Events about `node`.
async fn events_about(cluster: &TestCluster, node: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
                .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

fn str_refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

async fn karpenter_nodes(nodes: &Api<Node>) -> Vec<String> {
    nodes
        .list(&ListParams::default().labels("karpenter.sh/nodepool"))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect()
        })
        .unwrap_or_default()
}

/// Deletes the agent's broken pod on `node`: its DaemonSet makes a new one,
/// which kwok makes Ready (kwok cannot heal the crashed one in place).
async fn heal_agent_on(cluster: &TestCluster, app: &str, node: &str) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app},nodegate.test/crash=true")))
        .await
        .unwrap_or_else(|e| panic!("list {app} pods: {e}"));
    for p in list.items {
        if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) {
            continue;
        }
        let name = p.metadata.name.unwrap_or_default();
        pods.delete(&name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
}

async fn wait_agents_ready(cluster: &TestCluster, node: &str) {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    wait_for(
        &format!("the agents on {node} Ready"),
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
                .await
                .map_err(|e| e.to_string())?;
            let ready = list
                .items
                .iter()
                .filter(|p| support::gate::is_ready(p))
                .filter(|p| {
                    p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("app"))
                        .is_some_and(|a| a.starts_with("agent-"))
                })
                .count();
            if ready == agents().len() {
                Ok(())
            } else {
                Err(format!("{ready} of {} agents Ready", agents().len()))
            }
        },
    )
    .await
}

const HOLD_POLICY: &str = "nodegate-test-hold-registration";

/// A ValidatingAdmissionPolicy refusing any change that marks a node
/// labelled `nodegate.test/hold-registration` as registered: Karpenter's
/// registration patch (taint sync, `karpenter.sh/unregistered` off, the
/// label) fails and is retried until `release_registration`.
fn hold_registration(cluster: &TestCluster) {
    let policy = json!({"apiVersion": "v1", "kind": "List", "items": [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": HOLD_POLICY},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["nodes"],
                }]},
                "validations": [{
                    "expression": "!has(object.metadata.labels) || !('nodegate.test/hold-registration' in object.metadata.labels) || !('karpenter.sh/registered' in object.metadata.labels)",
                    "message": "registration held by the test",
                }],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": HOLD_POLICY},
            "spec": {"policyName": HOLD_POLICY, "validationActions": ["Deny"]},
        },
    ]});
    let file = cluster
        .state_dir()
        .map(|d| d.join("hold-registration.json"))
        .expect("the test's own cluster");
    std::fs::write(&file, policy.to_string()).expect("write the hold policy");
    support::karpenter::kubectl_ok(cluster, &["apply", "-f", &file.to_string_lossy()]);
}

fn release_registration(cluster: &TestCluster) {
    support::karpenter::kubectl_ok(
        cluster,
        &["delete", "validatingadmissionpolicybinding", HOLD_POLICY],
    );
}
