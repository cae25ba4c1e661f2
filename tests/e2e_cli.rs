//! The command line as a kubectl user meets it, against the real local
//! control plane (deploy/local): `--kubeconfig` and `--context` pick the
//! cluster for every command that reads it (the kubeconfig's own current
//! context points nowhere, so a command that ignored them would fail),
//! `-o yaml` says what `-o json` says, `version` finds the running
//! controller through its Lease, and `uninstall` takes nodegate's taints and
//! annotations off the nodes, keeps foreign taints, and refuses while a
//! replica holds the Lease.

use nodegate_e2e as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::{Nodegate, TestCluster, fake_node, wait_for};

/// The context that reaches the test cluster.
const GOOD: &str = "nodegate-good";

/// The real binary with `args`; KUBECONFIG points at nothing, so only the
/// flags can lead it to the cluster. Returns (exit code, stdout, stderr).
fn nodegate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .env("NO_COLOR", "1")
        .output()
        .expect("run nodegate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A copy of the test cluster's kubeconfig with a second context, GOOD,
/// for the cluster, and its current context pointed at a server that does
/// not answer.
fn two_context_kubeconfig(real: &Path, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(real).expect("read the test kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&text).expect("the kubeconfig is YAML");
    let current = kc["current-context"]
        .as_str()
        .expect("a current-context")
        .to_string();
    let ctx = kc["contexts"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == current.as_str()))
        .map(|c| c["context"].clone())
        .expect("the current context is listed");
    let user = ctx["user"].clone();
    kc["contexts"].as_array_mut().expect("contexts").extend([
        json!({"name": GOOD, "context": ctx}),
        json!({"name": "nowhere", "context": {"cluster": "nowhere", "user": user}}),
    ]);
    kc["clusters"]
        .as_array_mut()
        .expect("clusters")
        .push(json!({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}}));
    kc["current-context"] = json!("nowhere");
    let path = dir.join("kubeconfig.json");
    std::fs::write(&path, serde_json::to_string(&kc).expect("encode")).expect("write kubeconfig");
    path
}

/// A child process stopped when the test ends, passing or not.
struct Killed(std::process::Child);

impl Killed {
    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `-o yaml` and `-o json` of the same command say the same thing.
fn yaml_is_json(args: &[&str]) -> Value {
    let with = |fmt: &str| {
        let mut a = args.to_vec();
        a.extend(["-o", fmt]);
        let (code, out, err) = nodegate(&a);
        assert_eq!(code, 0, "{a:?} failed: {err}\n{out}");
        out
    };
    let yaml: Value = serde_saphyr::from_str(&with("yaml"))
        .unwrap_or_else(|e| panic!("{args:?} -o yaml is not YAML: {e}"));
    let json: Value = serde_json::from_str(&with("json")).expect("-o json is JSON");
    // Ages may tick between the two runs; the shapes and names may not.
    assert_eq!(strip_ages(yaml.clone()), strip_ages(json), "{args:?}");
    yaml
}

fn strip_ages(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            for k in ["age", "deadline", "renewed", "since", "evaluated_at"] {
                m.remove(k);
            }
            for x in m.values_mut() {
                *x = strip_ages(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = strip_ages(x.take());
            }
        }
        _ => {}
    }
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn every_reading_command_takes_kubeconfig_context_and_yaml() {
    let cluster = TestCluster::start("cli-kubectl").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let kc = two_context_kubeconfig(&cluster.kubeconfig, dir.path());
    let kc = kc.to_str().expect("utf-8 path");
    cluster
        .create_node(&fake_node(
            "cli-n1",
            &[],
            &[("nodegate.dev/initializing", "", "NoSchedule")],
        ))
        .await;

    // Settled first (kwok marks it Ready, the node lifecycle controller
    // lifts its not-ready taint), so that two runs a moment apart see the
    // same node.
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    wait_for(
        "cli-n1 to be Ready and untainted by the control plane",
        Duration::from_secs(60),
        || async {
            let n = nodes.get("cli-n1").await.map_err(|e| e.to_string())?;
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let system = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
            match ready && !system {
                true => Ok(()),
                false => Err(format!("ready {ready}, system taints {system}")),
            }
        },
    )
    .await;

    let reach = ["--kubeconfig", kc, "--context", GOOD];
    // Without --context the kubeconfig's current context (nowhere) is used:
    // the flags are what reaches the cluster.
    let (code, _, err) = nodegate(&["status", "--kubeconfig", kc, "--request-timeout", "3s"]);
    assert_eq!(code, 1, "the current context points nowhere: {err}");

    let report = yaml_is_json(&[&["explain", "cli-n1"][..], &reach].concat());
    assert_eq!(report["node"], "cli-n1", "{report:#}");
    let rows = yaml_is_json(&[&["status"][..], &reach].concat());
    assert!(
        rows.as_array()
            .is_some_and(|r| r.iter().any(|r| r["node"] == "cli-n1")),
        "{rows:#}"
    );
    let lines = yaml_is_json(&[&["backfill", "--dry-run"][..], &reach].concat());
    assert!(lines.as_array().is_some_and(|l| !l.is_empty()), "{lines:#}");
    let versions = yaml_is_json(&[&["version", "-n", "default"][..], &reach].concat());
    assert_eq!(versions["client"], env!("CARGO_PKG_VERSION"));

    // Given before the subcommand, as `run` takes them.
    let (code, out, err) = nodegate(&[
        "--kubeconfig",
        kc,
        "--context",
        GOOD,
        "status",
        "-o",
        "wide",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cli-n1"), "{out}");
    // `run` takes them before the subcommand: the controller reaches the
    // cluster through them and takes its Lease there.
    let run = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args([
            "--kubeconfig",
            kc,
            "--context",
            GOOD,
            "run",
            "--leader-elect",
        ])
        .args([
            "--lease-namespace",
            "default",
            "--lease-name",
            "via-context",
        ])
        .args(["--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"])
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start nodegate run");
    let mut run = Killed(run);
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    wait_for(
        "run to take its lease through --context",
        Duration::from_secs(30),
        || async {
            match leases
                .get_opt("via-context")
                .await
                .map_err(|e| e.to_string())?
            {
                Some(_) => Ok(()),
                None => Err("no lease default/via-context".to_string()),
            }
        },
    )
    .await;
    run.stop();
    // A context the file does not have is named.
    let (code, _, err) = nodegate(&["status", "--kubeconfig", kc, "--context", "prod"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("\"prod\""), "{err}");
    let (code, _, err) = nodegate(&[
        "uninstall",
        "--dry-run",
        "-n",
        "default",
        "--kubeconfig",
        kc,
        "--context",
        GOOD,
    ]);
    assert_eq!(code, 0, "{err}");
}

/// What a shell (or kubectl) is offered for `words`, the binary run as
/// `program` with `env`, against the cluster `kubeconfig` names.
fn completions(program: &Path, kubeconfig: &Path, env: &[(&str, &str)], words: &[&str]) -> String {
    let out = Command::new(program)
        .args(words)
        .env("KUBECONFIG", kubeconfig)
        .envs(env.iter().copied())
        .output()
        .expect("run the completion");
    assert!(
        out.status.success(),
        "{words:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_completes_the_clusters_node_names() {
    let cluster = TestCluster::start("cli-complete").await;
    for name in ["tab-a", "tab-b"] {
        cluster.create_node(&fake_node(name, &[], &[])).await;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_nodegate"));
    // `source <(COMPLETE=fish nodegate)`'s question for `nodegate explain tab<TAB>`.
    let fish = completions(
        bin,
        &cluster.kubeconfig,
        &[("COMPLETE", "fish")],
        &["--", "nodegate", "explain", "tab"],
    );
    let offered: Vec<&str> = fish
        .lines()
        .map(|l| l.split('\t').next().unwrap_or(""))
        .collect();
    assert_eq!(offered, ["tab-a", "tab-b"], "{fish}");
    // kubectl's for `kubectl nodegate explain tab<TAB>`.
    let dir = tempfile::tempdir().expect("temp dir");
    let helper = dir.path().join("kubectl_complete-nodegate");
    std::os::unix::fs::symlink(bin, &helper).expect("link kubectl_complete-nodegate");
    let cobra = completions(
        &helper,
        &cluster.kubeconfig,
        &[],
        &["__complete", "explain", "tab"],
    );
    assert_eq!(cobra, "tab-a\ntab-b\n:4\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn version_names_the_running_controller_from_its_lease() {
    let cluster = TestCluster::start("cli-version").await;
    let ns = "nodegate-system";
    cluster.namespace(ns).await;
    // The controller's pod, as the API server has it (it never runs: no
    // node matches it); the controller itself runs here under that name.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "nodegate-abc12"},
        "spec": {
            "nodeSelector": {"nodegate.test/nowhere": "true"},
            "containers": [{"name": "nodegate", "image": "ghcr.io/nodegate/nodegate:7.7.7"}],
        },
    }))
    .expect("pod manifest");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
    let _controller = Nodegate::start_as(
        &cluster.kubeconfig,
        &[("POD_NAME", "nodegate-abc12"), ("POD_NAMESPACE", ns)],
        &[
            "--leader-elect",
            "--lease-duration",
            "4s",
            "--renew-deadline",
            "3s",
            "--retry-period",
            "1s",
        ],
    );
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), ns);
    wait_for(
        "the controller to hold its lease",
        Duration::from_secs(30),
        || async {
            let l = leases
                .get_opt("nodegate")
                .await
                .map_err(|e| e.to_string())?;
            let holder = l.and_then(|l| l.spec).and_then(|s| s.holder_identity);
            match holder {
                Some(h) if h.starts_with("nodegate-abc12_") => Ok(()),
                other => Err(format!("holder {other:?}")),
            }
        },
    )
    .await;

    let kc = cluster.kubeconfig.to_str().expect("utf-8 path");
    let (code, out, err) = nodegate(&["version", "--kubeconfig", kc, "-o", "yaml"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_saphyr::from_str(&out).expect("yaml");
    assert_eq!(v["client"], env!("CARGO_PKG_VERSION"), "{out}");
    assert_eq!(v["controller"]["pod"], "nodegate-abc12", "{out}");
    assert_eq!(v["controller"]["version"], "7.7.7", "{out}");
    let (code, out, err) = nodegate(&["version", "--kubeconfig", kc]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Controller: 7.7.7"), "{out}");
    // In another namespace there is no Lease: said, not failed.
    let (code, out, err) = nodegate(&["version", "--kubeconfig", kc, "-n", "default"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Controller: unknown") && out.contains("no lease default/nodegate"),
        "{out}"
    );
}

/// The taints of a node, as `key:effect`, without the node lifecycle
/// controller's own (`node.kubernetes.io/not-ready` while kwok starts it).
async fn taints(nodes: &Api<Node>, name: &str) -> Vec<String> {
    let n = nodes.get(name).await.expect("get node");
    n.spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .filter(|t| !t.key.starts_with("node.kubernetes.io/"))
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

async fn nodegate_annotations(nodes: &Api<Node>, name: &str) -> Vec<String> {
    let n = nodes.get(name).await.expect("get node");
    n.metadata
        .annotations
        .unwrap_or_default()
        .into_keys()
        .filter(|k| k.starts_with("nodegate.dev/"))
        .collect()
}

async fn annotate(nodes: &Api<Node>, name: &str, annotations: Value) {
    let patch = json!({"metadata": {"annotations": annotations}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("annotate node");
}

async fn set_lease(cluster: &TestCluster, renewed: Timestamp) {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "default");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "nodegate"},
        "spec": {
            "holderIdentity": "nodegate-7d9f_00c0ffee",
            "leaseDurationSeconds": 15,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        },
    });
    let params = PatchParams::apply("nodegate-e2e").force();
    leases
        .patch("nodegate", &params, &Patch::Apply(&lease))
        .await
        .expect("write the lease");
}

#[tokio::test(flavor = "multi_thread")]
async fn uninstall_cleans_nodegates_taints_keeps_foreign_ones_and_waits_for_the_leader() {
    let cluster = TestCluster::start("cli-uninstall").await;
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let foreign = ("example.com/foreign", "", "NoSchedule");
    let specs: [(&str, (&str, &str, &str)); 3] = [
        ("u-start", ("nodegate.dev/initializing", "", "NoSchedule")),
        ("u-regate", ("nodegate.dev/degraded", "", "NoSchedule")),
        ("u-rule", ("example.com/gpu-broken", "true", "NoExecute")),
    ];
    for (name, taint) in specs {
        cluster
            .create_node(&fake_node(name, &[], &[foreign, taint]))
            .await;
    }
    // An operator's taint under the rule's key and effect, which the rule
    // never put on (no record on the node): it stays.
    let by_hand = ("example.com/gpu-broken", "true", "NoExecute");
    cluster
        .create_node(&fake_node("u-foreign", &[], &[foreign, by_hand]))
        .await;
    annotate(
        &nodes,
        "u-rule",
        json!({"nodegate.dev/condition-taints": "gpu"}),
    )
    .await;
    // u-start: a replace request cordoned it, and it carries every mark.
    annotate(
        &nodes,
        "u-start",
        json!({
            "nodegate.dev/gated-since": "2026-01-01T00:00:00.000Z",
            "nodegate.dev/timed-out": "2026-01-01T00:02:00.000Z",
            "nodegate.dev/replace-requested": "2026-01-01T00:02:01.000Z",
            "nodegate.dev/replace-reason": "deadline passed",
            "nodegate.dev/reboot-pending": "a person's",
        }),
    )
    .await;
    nodes
        .patch(
            "u-start",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon u-start");
    // u-opened: cordoned by a replace request and opened since: the opening
    // removed the request and kept its reason.
    cluster
        .create_node(&fake_node("u-opened", &[], &[foreign]))
        .await;
    annotate(
        &nodes,
        "u-opened",
        json!({
            "nodegate.dev/replace-reason": "deadline passed; cordoned",
            "nodegate.dev/opened-at": "2026-01-01T00:03:00.000Z",
            "nodegate.dev/opened-by": "manual",
        }),
    )
    .await;
    nodes
        .patch(
            "u-opened",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon u-opened");
    // u-regate: the nodegate.dev/Open condition (--node-condition), beside
    // the kubelet's own.
    let open = json!({"status": {"conditions": [{
        "type": "nodegate.dev/Open", "status": "True", "reason": "Opened",
        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    nodes
        .patch_status(
            "u-regate",
            &PatchParams::default(),
            &Patch::Strategic(&open),
        )
        .await
        .expect("the Open condition");
    annotate(
        &nodes,
        "u-regate",
        json!({
            "nodegate.dev/regated-for": "reboot",
            "nodegate.dev/opened-at": "2026-01-01T00:00:00.000Z",
            "nodegate.dev/opened-by": "ready",
        }),
    )
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("nodegate.yaml");
    std::fs::write(
        &config,
        "conditionTaints:\n  - name: gpu\n    conditions:\n      - type: GPUBroken\n        status: \"True\"\n    taint:\n      key: example.com/gpu-broken\n      value: \"true\"\n      effect: NoExecute\n",
    )
    .expect("write config");
    let kc = cluster.kubeconfig.to_str().expect("utf-8 path");
    let cfg = config.to_str().expect("utf-8 path");
    let uninstall = |mode: &'static str| {
        nodegate(&[
            "uninstall",
            mode,
            "-n",
            "default",
            "--kubeconfig",
            kc,
            "--config",
            cfg,
        ])
    };

    // A replica renewed the Lease a moment ago: refused, nothing changed.
    set_lease(&cluster, Timestamp::now()).await;
    // A managed taint under another vendor's domain: refused without the
    // opt-in, nothing changed; taken with it (a dry run here).
    let foreign_taint = [
        "uninstall",
        "--dry-run",
        "--kubeconfig",
        kc,
        "--config",
        cfg,
        "--taint",
        "node.cilium.io/agent-not-ready:NoSchedule",
    ];
    let (code, out, err) = nodegate(&foreign_taint);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("node.cilium.io/agent-not-ready") && err.contains("--remove-foreign-keys"),
        "{err}"
    );
    assert!(out.is_empty(), "{out}");
    let (code, out, err) = nodegate(&[&foreign_taint[..], &["--remove-foreign-keys"]].concat());
    assert_eq!(code, 0, "{out}{err}");

    let (code, out, err) = uninstall("--yes");
    assert_eq!(code, 1, "must refuse while the lease is fresh: {out}{err}");
    assert!(err.contains("nodegate-7d9f_00c0ffee"), "{err}");
    assert_eq!(
        taints(&nodes, "u-start").await,
        [
            "example.com/foreign:NoSchedule",
            "nodegate.dev/initializing:NoSchedule"
        ]
    );

    // The dry run lists, changes nothing.
    let (code, out, err) = uninstall("--dry-run");
    assert_eq!(code, 0, "{err}");
    for n in ["u-start", "u-regate", "u-rule"] {
        assert!(out.contains(&format!("{n}  would-remove")), "{out}");
    }
    assert!(!out.contains("u-foreign"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("u-regate") && l.contains("condition nodegate.dev/Open")),
        "{out}"
    );
    assert_eq!(taints(&nodes, "u-regate").await.len(), 2);

    // The replica is gone (its lease ten minutes old): cleaned.
    set_lease(
        &cluster,
        Timestamp::now() - jiff::SignedDuration::from_secs(600),
    )
    .await;
    let (code, out, err) = uninstall("--yes");
    assert_eq!(code, 0, "{out}{err}");
    for n in ["u-start", "u-regate", "u-rule"] {
        assert!(out.contains(&format!("{n}  removed")), "{out}");
        assert_eq!(
            taints(&nodes, n).await,
            ["example.com/foreign:NoSchedule"],
            "{n}: {out}"
        );
        let left: Vec<String> = nodegate_annotations(&nodes, n)
            .await
            .into_iter()
            .filter(|k| k != "nodegate.dev/reboot-pending")
            .collect();
        assert!(left.is_empty(), "{n}: {left:?} {out}");
    }
    assert_eq!(
        taints(&nodes, "u-foreign").await,
        [
            "example.com/foreign:NoSchedule",
            "example.com/gpu-broken:NoExecute"
        ],
        "a rule's key put on by hand is not nodegate's to take off"
    );
    // The person's reboot-pending stays; the replace cordon is reported and
    // left; the Open condition is gone, the kubelet's conditions kept.
    let start = nodes.get("u-start").await.expect("get u-start");
    assert_eq!(
        start
            .metadata
            .annotations
            .unwrap_or_default()
            .get("nodegate.dev/reboot-pending")
            .map(String::as_str),
        Some("a person's")
    );
    assert_eq!(
        start.spec.and_then(|s| s.unschedulable),
        Some(true),
        "uninstall reports the cordon, a person lifts it"
    );
    assert!(out.contains("kubectl uncordon u-start"), "{out}");
    assert!(out.contains("kubectl uncordon u-opened"), "{out}");
    assert!(
        nodegate_annotations(&nodes, "u-opened").await.is_empty(),
        "{out}"
    );
    let conditions: Vec<String> = nodes
        .get("u-regate")
        .await
        .expect("get u-regate")
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert!(
        !conditions.iter().any(|c| c == "nodegate.dev/Open"),
        "{conditions:?}"
    );
    assert!(conditions.iter().any(|c| c == "Ready"), "{conditions:?}");
    // Nothing left: a second run changes nothing.
    let (code, out, err) = uninstall("--yes");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 changed"), "{out}");
}
