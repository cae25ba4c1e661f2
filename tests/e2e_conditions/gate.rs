//! The gate's new members: a node condition, a CSI driver's registration,
//! a pod's own ready annotation.

use std::time::Duration;

use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use super::support::gate::{DsSpec, daemonset, has_gate_taint};
use super::{Shared, explain_json, set_condition};

/// How long a node that should stay closed is watched for staying closed.
const STAYS_CLOSED: Duration = Duration::from_secs(3);

async fn still_gated(s: &Shared, node: &str, why: &str) {
    tokio::time::sleep(STAYS_CLOSED).await;
    let n = s.env.node(node).await;
    assert!(
        has_gate_taint(&n),
        "{node} opened {why}: {:?}\n{}",
        n.metadata.annotations,
        s.ng.logs()
    );
}

/// (a) A gated node waits for `NetworkReady=True` and opens when it is set.
pub async fn network_ready(s: &Shared) {
    s.env.create_node("net-1", &[("scenario", "network")]).await;
    // Absent, then False: the gate waits.
    still_gated(s, "net-1", "without NetworkReady").await;
    set_condition(&s.env.nodes, "net-1", "NetworkReady", "False").await;
    still_gated(s, "net-1", "with NetworkReady=False").await;
    // explain names the member and what it waits for, like any member.
    let r = explain_json(s, "net-1").await;
    let row = &r["conditions"][0];
    assert_eq!(row["name"], "NetworkReady", "{r}");
    assert_eq!(
        (row["expected"].as_bool(), row["ready"].as_bool()),
        (Some(true), Some(false)),
        "{r}"
    );
    assert_eq!(
        row["waiting"], "condition NetworkReady is False, waiting for True",
        "{r}"
    );
    set_condition(&s.env.nodes, "net-1", "NetworkReady", "True").await;
    s.env
        .wait_open("net-1", Duration::from_secs(20), &[&s.ng])
        .await;
    assert_eq!(
        s.env
            .annotation("net-1", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );
}

/// (d) A CSI DaemonSet's pod is Ready, but the node opens only once its
/// CSINode lists the driver.
pub async fn csi_driver(s: &Shared) {
    let mut ds = daemonset(&DsSpec {
        node_selector: &[("scenario", "csi")],
        ..DsSpec::new("csi-node")
    });
    ds.metadata.annotations = Some(
        [(
            "nodegate.dev/csi-driver".to_string(),
            "csi.example.com".to_string(),
        )]
        .into(),
    );
    s.env
        .daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .expect("create the CSI DaemonSet");
    s.env.create_node("csi-1", &[("scenario", "csi")]).await;
    s.env.wait_pod("csi-node", "csi-1", true).await;
    still_gated(s, "csi-1", "before its CSINode lists the driver").await;

    // The kubelet registers a driver by writing the node's CSINode; kwok
    // does not, so the test writes it.
    let csinodes: Api<CSINode> = Api::all(s.env.cluster.client.clone());
    let csinode: CSINode = serde_json::from_value(json!({
        "metadata": {"name": "csi-1"},
        "spec": {"drivers": [{"name": "other.example.com", "nodeID": "csi-1"}]},
    }))
    .expect("CSINode manifest");
    csinodes
        .create(&PostParams::default(), &csinode)
        .await
        .expect("create CSINode");
    still_gated(s, "csi-1", "with only another driver registered").await;
    csinodes
        .patch(
            "csi-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"drivers": [
                {"name": "other.example.com", "nodeID": "csi-1"},
                {"name": "csi.example.com", "nodeID": "csi-1"},
            ]}})),
        )
        .await
        .expect("register csi.example.com");
    s.env
        .wait_open("csi-1", Duration::from_secs(20), &[&s.ng])
        .await;
}

/// (e) A pod annotated `nodegate.dev/ready: "true"` whose probe keeps it
/// not Ready (the kwok stages' hold) satisfies its member.
pub async fn ready_annotation(s: &Shared) {
    s.env
        .create_ds(DsSpec {
            hold: true,
            node_selector: &[("scenario", "warmup")],
            ..DsSpec::new("warmup")
        })
        .await;
    s.env.create_node("warm-1", &[("scenario", "warmup")]).await;
    s.env.wait_pod("warmup", "warm-1", false).await;
    still_gated(s, "warm-1", "while its warm-up pod is not Ready").await;
    let pod = s.env.pod_on("warmup", "warm-1").await.expect("warm-up pod");
    let name = pod.metadata.name.expect("pod name");
    s.env
        .pods
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"nodegate.dev/ready": "true"}}})),
        )
        .await
        .expect("annotate the warm-up pod");
    s.env
        .wait_open("warm-1", Duration::from_secs(20), &[&s.ng])
        .await;
    let p = s.env.pods.get(&name).await.expect("warm-up pod");
    assert!(
        !super::support::gate::is_ready(&p),
        "the pod must still be held not Ready, or the annotation proved nothing"
    );
}
