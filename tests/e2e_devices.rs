//! Device members (semantics.md §6.8) on the real control plane
//! (deploy/local) with the real binary: one cluster and one nodegate whose
//! config file holds both, each scenario on its own node (told apart by a
//! `scenario` label), run side by side.
//!
//! - `extended_resource`: a gated node waits for `example.com/gpu` to be
//!   allocatable, as a device plugin reports it (here a status patch, as
//!   the kubelet writes it): absent, then `0`, keep it closed; `4` opens it.
//! - `dra_driver`: a gated node waits for the DRA driver `gpu.example.com`
//!   to publish a complete pool of ResourceSlices for it (created by the
//!   test as a driver does, owned by the Node): none, then a slice the node
//!   does not own (ignored), then one slice of a pool of two, keep it
//!   closed, and the controller and `explain` both name the missing slice;
//!   the driver's second slice opens it.
//!
//! "Keeps it closed" is read from the controller's own gate
//! (`/debug/nodes/NAME`): once it says the member waits for the new reason,
//! the gate has judged the change, and the node must still carry its taint.

mod explain_support;
use nodegate_e2e as support;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use support::gate::{Env, has_gate_taint};
use support::{Nodegate, http_get, wait_for};

const RESOURCE: &str = "example.com/gpu";
const DRIVER: &str = "gpu.example.com";

const CONFIG: &str = r#"
timeout: 600s
criticalResources:
- resource: example.com/gpu
  nodeSelector: scenario=gpu
draDrivers:
- driver: gpu.example.com
  nodeSelector: {matchLabels: {scenario: dra}}
"#;

struct Shared {
    env: Env,
    ng: Nodegate,
    debug: String,
    _dir: tempfile::TempDir,
    file: PathBuf,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_resources_and_dra_drivers_hold_the_gate() {
    let env = Env::new("devices").await;
    // resource.k8s.io/v1 is served by the local API server (v1.36): the
    // watch and the test's ResourceSlices need it.
    let served =
        env.cluster
            .kubectl(&["api-resources", "--api-group=resource.k8s.io", "-o", "name"]);
    assert!(
        served
            .lines()
            .any(|l| l == "resourceslices.resource.k8s.io"),
        "resource.k8s.io serves no resourceslices: {served}"
    );
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
    let debug = ng.debug_addr(Duration::from_secs(30));
    let s = Shared {
        env,
        ng,
        debug,
        _dir: dir,
        file,
    };
    tokio::join!(extended_resource(&s), dra_driver(&s), rbac_component(&s));
    config_check_counts_the_nodes_each_entry_is_satisfied_on(&s);
}

/// `nodegate config check --cluster`: with both nodes open, each entry is
/// satisfied on the one managed node it applies to.
fn config_check_counts_the_nodes_each_entry_is_satisfied_on(s: &Shared) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(["config", "check", "--cluster", "-o", "json", "--kubeconfig"])
        .arg(&s.env.cluster.kubeconfig)
        .arg(&s.file)
        .output()
        .expect("run nodegate config check");
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let said = |key: &str| {
        v["cluster"]
            .as_array()
            .and_then(|fs| fs.iter().find(|f| f["key"] == key))
            .and_then(|f| f["message"].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no {key} finding: {text}"))
    };
    assert!(
        said("criticalResources (example.com/gpu)")
            .starts_with("1 of the 1 managed nodes it applies to report allocatable"),
        "{text}"
    );
    assert!(
        said("draDrivers (gpu.example.com)")
            .starts_with("1 of the 1 managed nodes it applies to have every pool"),
        "{text}"
    );
}

/// What nodegate's ServiceAccount may do with ResourceSlices, asked of the
/// API server as that account (impersonation): "yes" or "no" (kubectl's
/// first line; a warning that the kind is cluster-scoped may follow).
fn sa_can(s: &Shared, verb: &str) -> String {
    let sa = "system:serviceaccount:nodegate-system:nodegate";
    s.env
        .cluster
        .kubectl(&[
            "auth",
            "can-i",
            verb,
            "resourceslices.resource.k8s.io",
            "--as",
            sa,
        ])
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The kustomize component `dra-drivers` grants the watch its list and
/// watch, for real; without it the ServiceAccount has neither.
async fn rbac_component(s: &Shared) {
    let k = &s.env.cluster;
    k.kubectl(&["create", "namespace", "nodegate-system"]);
    k.kubectl(&[
        "-n",
        "nodegate-system",
        "create",
        "serviceaccount",
        "nodegate",
    ]);
    for verb in ["list", "watch"] {
        assert_eq!(sa_can(s, verb), "no", "{verb} before the component");
    }
    let rbac = support::repo_root().join("deploy/kustomize/components/dra-drivers/rbac.yaml");
    let applied = k.kubectl(&["apply", "-f", rbac.to_str().expect("utf-8 path")]);
    assert!(applied.contains("nodegate-dra-drivers"), "{applied}");
    for verb in ["list", "watch"] {
        wait_for(
            &format!("{verb} resourceslices granted"),
            Duration::from_secs(10),
            || async {
                match sa_can(s, verb).as_str() {
                    "yes" => Ok(()),
                    other => Err(other.to_string()),
                }
            },
        )
        .await;
    }
    for verb in ["create", "delete", "get"] {
        assert_eq!(sa_can(s, verb), "no", "{verb} is not nodegate's");
    }
}

/// Waits until the controller's gate of `node` says `member` waits for
/// something containing `why`; then the node must still be closed.
async fn waits_for(s: &Shared, node: &str, member: &str, why: &str) {
    let path = format!("/debug/nodes/{node}");
    wait_for(
        &format!("{node}'s gate: {member} waiting for {why:?}"),
        Duration::from_secs(30),
        || async {
            let (status, body) = http_get(&s.debug, &path).await?;
            let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            let waiting = v["expected"].as_array().and_then(|ms| {
                ms.iter()
                    .find(|m| m["member"] == member)
                    .and_then(|m| m["waiting"].as_str().map(str::to_string))
            });
            match waiting {
                Some(w) if status == 200 && w.contains(why) => Ok(()),
                _ => Err(body),
            }
        },
    )
    .await;
    let n = s.env.node(node).await;
    assert!(
        has_gate_taint(&n),
        "{node} opened while {member} waits for {why:?}: {:?}\n{}",
        n.metadata.annotations,
        s.ng.logs()
    );
}

/// Waits for kwok to report the node Ready (its start-up stage writes the
/// node's status; a status patch made after it stays).
async fn wait_kwok_ready(s: &Shared, node: &str) {
    wait_for(
        &format!("kwok to make {node} Ready"),
        Duration::from_secs(30),
        || async {
            let n = s.env.nodes.get(node).await.map_err(|e| e.to_string())?;
            let ready = n
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            ready.then_some(()).ok_or_else(|| "not Ready".to_string())
        },
    )
    .await;
}

/// Sets `status.allocatable[RESOURCE]` of `node`, as the kubelet does for a
/// device plugin's resource.
async fn set_allocatable(nodes: &Api<Node>, node: &str, amount: &str) {
    let patch =
        json!({"status": {"allocatable": {RESOURCE: amount}, "capacity": {RESOURCE: amount}}});
    nodes
        .patch_status(node, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap_or_else(|e| panic!("set {RESOURCE}={amount} on {node}: {e}"));
}

async fn extended_resource(s: &Shared) {
    let member = format!("resource:{RESOURCE}");
    s.env.create_node("gpu-1", &[("scenario", "gpu")]).await;
    wait_kwok_ready(s, "gpu-1").await;
    waits_for(
        s,
        "gpu-1",
        &member,
        "reports no allocatable example.com/gpu",
    )
    .await;
    set_allocatable(&s.env.nodes, "gpu-1", "0").await;
    waits_for(s, "gpu-1", &member, "allocatable example.com/gpu is 0").await;
    set_allocatable(&s.env.nodes, "gpu-1", "4").await;
    s.env
        .wait_open("gpu-1", Duration::from_secs(20), &[&s.ng])
        .await;
    assert_eq!(
        s.env
            .annotation("gpu-1", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );
}

/// A ResourceSlice of `DRIVER` local to `node`, in pool `node` at
/// `generation` of `count` slices, with one device; owned by the Node
/// (`owner`: its UID) as a driver's kubelet plugin writes it, or by nothing.
fn slice(
    name: &str,
    node: &str,
    owner: Option<&str>,
    generation: i64,
    count: i64,
) -> ResourceSlice {
    let owners = match owner {
        Some(uid) => json!([{"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}]),
        None => json!([]),
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": owners},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": [{"name": format!("{name}-gpu-0")}],
        },
    }))
    .expect("ResourceSlice manifest")
}

async fn dra_driver(s: &Shared) {
    let member = format!("dra:{DRIVER}");
    let slices: Api<ResourceSlice> = Api::all(s.env.cluster.client.clone());
    let node = s.env.create_node("dra-1", &[("scenario", "dra")]).await;
    let uid = node.metadata.uid.clone().expect("the node's uid");
    let own = Some(uid.as_str());
    wait_kwok_ready(s, "dra-1").await;
    waits_for(s, "dra-1", &member, "has published no ResourceSlice").await;
    // Another node's slice and another driver's slice change nothing.
    let mut other = slice("other-driver-dra-1", "dra-1", own, 1, 1);
    other.spec.driver = "net.example.com".into();
    for obj in [slice("other-node", "gpu-9", None, 1, 1), other] {
        slices
            .create(&PostParams::default(), &obj)
            .await
            .expect("create an unrelated ResourceSlice");
    }
    // A slice of the pool from someone who may create ResourceSlices but is
    // not the node's driver (no ownerReference to the Node): ignored, and
    // it does not complete the pool with the driver's own slice below.
    slices
        .create(
            &PostParams::default(),
            &slice("dra-1-b", "dra-1", None, 1, 2),
        )
        .await
        .expect("create a slice the node does not own");
    waits_for(
        s,
        "dra-1",
        &member,
        "1 of its slices for the node ignored: not owned by the node",
    )
    .await;
    slices
        .create(
            &PostParams::default(),
            &slice("dra-1-a", "dra-1", own, 1, 2),
        )
        .await
        .expect("create the first slice of two");
    let missing = "pool dra-1 incomplete: 1 of 2 ResourceSlices at generation 1 (1 missing)";
    waits_for(s, "dra-1", &member, missing).await;
    // explain, as an operator runs it, says the same.
    let r = explain_support::explain_json(&s.env.cluster.kubeconfig, &s.file, "dra-1");
    let row = r["devices"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["name"] == DRIVER))
        .unwrap_or_else(|| panic!("no {DRIVER} row: {r}"));
    assert_eq!(
        (row["expected"].as_bool(), row["ready"].as_bool()),
        (Some(true), Some(false)),
        "{r}"
    );
    assert!(
        row["waiting"].as_str().is_some_and(|w| w.contains(missing)),
        "{r}"
    );
    slices
        .create(
            &PostParams::default(),
            &slice("dra-1-c", "dra-1", own, 1, 2),
        )
        .await
        .expect("create the second slice");
    s.env
        .wait_open("dra-1", Duration::from_secs(20), &[&s.ng])
        .await;
}
