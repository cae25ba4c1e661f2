//! Readiness signals beyond a pod's Ready (semantics.md §6.5, 6.7), on the
//! real control plane (deploy/local) with the real binary: one cluster and
//! one nodegate whose config file holds every rule, each scenario on its
//! own nodes (told apart by a `scenario` label), all run side by side.
//!
//! - `gate::network_ready`: a gated node waits for `NetworkReady=True`
//!   (`criticalConditions`) and opens when it is set.
//! - `taints::preempted_spot_node`: `Preempted=True` puts
//!   `node.kubernetes.io/out-of-service:NoExecute` (with `timeAdded`) on the
//!   node, the real taint-eviction controller evicts a pod without a
//!   toleration, a foreign taint added at the same moment survives (and,
//!   forced: nodegate's add and remove patches built from a view older
//!   than another agent's taint are refused by the API server); clearing
//!   the condition takes the taint off (`remove: whenCleared`), while a
//!   `remove: never` rule's taint stays.
//! - `fleet::no_execute_rule_on_an_absent_condition`: the security
//!   review's typo'd `NoExecute` rule is refused at load; with
//!   `matchAbsent: true` it taints one of ten nodes (its default budget),
//!   counted by a watch.
//! - `taints::out_of_service_by_hand`: an operator's out-of-service taint
//!   on a node the `remove: whenCleared` rule does not match stays.
//! - `gate::csi_driver`: a CSI DaemonSet's pod is Ready, but the node opens
//!   only once its CSINode lists the driver.
//! - `gate::ready_annotation`: a pod annotated `nodegate.dev/ready: "true"`
//!   whose probe keeps it not Ready satisfies its member.
//!
//! Node conditions are set with status patches. kwok (deploy/local) leaves
//! a condition type it does not manage alone: after it has initialised a
//! node, its only node stage is the heartbeat, which comes ten minutes or
//! more later, beyond any test here; `kwok_keeps_a_foreign_condition`
//! checks on every run that a status-patched condition stays (and says
//! whether kwok had initialised the node when it was set). deploy/local's
//! kwok stages needed no change.

mod explain_support;
use nodegate_e2e as support;

#[path = "e2e_conditions/fleet.rs"]
mod fleet;
#[path = "e2e_conditions/gate.rs"]
mod gate;
#[path = "e2e_conditions/taints.rs"]
mod taints;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use support::gate::Env;
use support::{Nodegate, http_get, wait_for};

/// Every scenario's rules; each applies only to its scenario's nodes.
const CONFIG: &str = r#"
timeout: 600s
criticalConditions:
- type: NetworkReady
  status: "True"
  nodeSelector: {matchLabels: {scenario: network}}
conditionTaints:
- name: preempted
  nodeSelector: scenario in (spot, spot-by-hand)
  conditions:
  - {type: Preempted, status: "True"}
  taint: {key: node.kubernetes.io/out-of-service, value: nodeshutdown, effect: NoExecute}
  maxUnavailable: 5
- name: kaput
  nodeSelector: scenario=spot
  conditions:
  - {type: Disk, status: Kaput}
  taint: {key: example.com/kaput, effect: NoSchedule}
  remove: never
- name: probe
  nodeSelector: scenario=spot-by-hand
  conditions:
  - {type: Probe, status: "True"}
  taint: {key: example.com/probe, effect: NoSchedule}
- name: gpu-broken
  nodeSelector: scenario=fleet
  conditions: [{type: GPUDriverReadyy, status: "False|Unknown", matchAbsent: true}]
  taint: {key: example.com/gpu, effect: NoExecute}
"#;

pub struct Shared {
    pub env: Env,
    pub ng: Nodegate,
    pub addr: String,
    _dir: tempfile::TempDir,
    file: PathBuf,
}

/// Sets condition `type_` of `node` to `status` with a status patch (merged
/// by type, as node-problem-detector writes it).
pub async fn set_condition(nodes: &Api<Node>, node: &str, type_: &str, status: &str) {
    let now = Timestamp::now().to_string();
    let patch = json!({"status": {"conditions": [{
        "type": type_, "status": status, "reason": "E2E", "message": "set by the test",
        "lastTransitionTime": now, "lastHeartbeatTime": now,
    }]}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap_or_else(|e| panic!("set {type_}={status} on {node}: {e}"));
}

pub fn condition(n: &Node, type_: &str) -> Option<String> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// The metrics text now.
pub async fn metrics(addr: &str) -> String {
    http_get(addr, "/metrics")
        .await
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"))
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_csi_and_the_ready_annotation() {
    let started = Instant::now();
    let env = Env::new("conditions").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, CONFIG).expect("write config");
    let ng = Nodegate::start(
        &env.cluster,
        &["--config", file.to_str().expect("utf-8 path")],
    );
    let addr = ng.http_addr(Duration::from_secs(30));
    wait_for("/readyz 200", Duration::from_secs(30), || async {
        match http_get(&addr, "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let s = Shared {
        env,
        ng,
        addr,
        _dir: dir,
        file,
    };
    tokio::join!(
        kwok_keeps_a_foreign_condition(&s),
        gate::network_ready(&s),
        gate::csi_driver(&s),
        gate::ready_annotation(&s),
        taints::preempted_spot_node(&s),
        fleet::no_execute_rule_on_an_absent_condition(&s),
        taints::out_of_service_by_hand(&s),
    );
    eprintln!(
        "[e2e conditions] all scenarios in {:.1}s",
        started.elapsed().as_secs_f64()
    );
}

/// A condition type kwok does not manage stays on a kwok node: set right
/// after the node is created (before or after kwok initialises it, which
/// the log line says), it is still there once the node is Ready.
async fn kwok_keeps_a_foreign_condition(s: &Shared) {
    let nodes = &s.env.nodes;
    s.env
        .cluster
        .create_node(&support::fake_node("probe", &[("scenario", "probe")], &[]))
        .await;
    set_condition(nodes, "probe", "ProbeCondition", "True").await;
    let at_set = nodes.get("probe").await.expect("probe node");
    eprintln!(
        "[e2e conditions] kwok had {} the probe node when the foreign condition was set",
        if condition(&at_set, "Ready").is_some() {
            "already initialised"
        } else {
            "not yet initialised"
        }
    );
    // kwok marks the node Ready (its initialisation stage) and the
    // condition must still be there after that.
    wait_for(
        "kwok to make probe Ready",
        Duration::from_secs(30),
        || async {
            let n = nodes.get("probe").await.map_err(|e| e.to_string())?;
            match condition(&n, "Ready").as_deref() {
                Some("True") => Ok(()),
                other => Err(format!("Ready={other:?}")),
            }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let n = nodes.get("probe").await.expect("probe node");
    assert_eq!(
        condition(&n, "ProbeCondition").as_deref(),
        Some("True"),
        "kwok dropped a condition it does not manage: {:?}",
        n.status.and_then(|s| s.conditions)
    );
    assert_eq!(condition(&n, "Ready").as_deref(), Some("True"));
}

/// `nodegate explain NODE -o json` with the scenarios' config file, as an
/// operator runs it.
pub async fn explain_json(s: &Shared, node: &str) -> serde_json::Value {
    explain_support::explain_json(&s.env.cluster.kubeconfig, &s.file, node)
}
