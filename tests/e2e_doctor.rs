//! `nodegate doctor` against the real local control plane (deploy/local):
//! the kustomize base's namespace, RBAC and admission policy applied, a
//! Karpenter NodePool CRD (karpenter.sh/v1, a minimal valid one written
//! here: the doctor reads only `spec.template`), nodegate running with
//! `--leader-elect` so that a replica holds the Lease.
//!
//! In turn: a NodePool that does not recognise nodegate's taint (exit 1,
//! naming the NodePool and the field to set), then fixed (that check
//! passes); a cluster-autoscaler Deployment with replicas 0 and its real
//! flags but no startup taint, and `--max-node-startup-time=5m` against
//! `--timeout 10m` (exit 1, naming `--startup-taint=...` and the deadline),
//! then fixed: a clean cluster (exit 0: the dry-run Node CREATE comes back
//! tainted, the Lease is held, the ServiceAccount has its rights), also
//! with `--from-cluster` reading nodegate's Deployment; last, the admission
//! policy's parameters deleted (exit 1, naming the ConfigMap); nodegate's
//! RoleBinding for Events deleted (exit 1, naming what it may not do, as the
//! API server's SubjectAccessReview says); nodegate stopped and a node gated
//! an hour ago (exit 1, naming the node).

use nodegate_e2e as support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;
use support::{Nodegate, TestCluster, local_bin, repo_root, wait_for};

/// A minimal valid CustomResourceDefinition of Karpenter's NodePool
/// (karpenter.sh/v1, cluster-scoped), with the one part of its schema the
/// doctor reads, `spec.template.spec.startupTaints`, typed as Karpenter
/// types it.
const NODEPOOL_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: nodepools.karpenter.sh
spec:
  group: karpenter.sh
  names: {kind: NodePool, listKind: NodePoolList, plural: nodepools, singular: nodepool}
  scope: Cluster
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties:
                template:
                  type: object
                  x-kubernetes-preserve-unknown-fields: true
                  properties:
                    spec:
                      type: object
                      x-kubernetes-preserve-unknown-fields: true
                      properties:
                        startupTaints:
                          type: array
                          items:
                            type: object
                            required: [key, effect]
                            properties:
                              key: {type: string}
                              value: {type: string}
                              effect: {type: string, enum: [NoSchedule, PreferNoSchedule, NoExecute]}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
"#;

/// A NodePool as Karpenter's docs write one, with `startup` as its
/// startupTaints.
fn nodepool(name: &str, startup: &str) -> String {
    format!(
        r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    metadata:
      labels: {{team: web}}
    spec:
      nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
      requirements:
        - {{key: kubernetes.io/arch, operator: In, values: [amd64]}}
      startupTaints: [{startup}]
  limits: {{cpu: 1000}}
"#
    )
}

/// cluster-autoscaler's Deployment with its real flags (the clusterapi
/// provider's), `extra` appended, scaled to 0: nothing runs, the doctor
/// reads what it would run with.
fn autoscaler(extra: &[&str]) -> String {
    let mut args = vec![
        "--cloud-provider=clusterapi",
        "--node-group-auto-discovery=clusterapi:namespace=default",
        "--v=4",
        "--balance-similar-node-groups",
        "--scale-down-delay-after-add=5m",
    ];
    args.extend_from_slice(extra);
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "cluster-autoscaler"}},
            "template": {
                "metadata": {"labels": {"app": "cluster-autoscaler"}},
                "spec": {"containers": [{
                    "name": "cluster-autoscaler",
                    "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.36.0",
                    "command": ["/cluster-autoscaler"],
                    "args": args,
                }]},
            },
        },
    });
    deployment.to_string()
}

/// nodegate's own Deployment (replicas 0: the test runs nodegate itself),
/// for `--from-cluster`.
fn nodegate_deployment(args: &[&str]) -> String {
    let all: Vec<&str> = ["run"].iter().chain(args).copied().collect();
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nodegate", "namespace": "nodegate-system"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "nodegate"}},
            "template": {
                "metadata": {"labels": {"app": "nodegate"}},
                "spec": {
                    "serviceAccountName": "nodegate",
                    "containers": [{"name": "nodegate", "image": "ghcr.io/nodegate/nodegate", "args": all}],
                },
            },
        },
    })
    .to_string()
}

/// `kubectl apply -f -` of `yaml`; panics with kubectl's output on failure.
fn apply(cluster: &TestCluster, yaml: &str) {
    let mut child = Command::new(local_bin("kubectl"))
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl apply");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(yaml.as_bytes())
        .expect("write the objects");
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "kubectl apply failed:\n{}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn kubectl_ok(cluster: &TestCluster, args: &[&str]) {
    let out = Command::new(local_bin("kubectl"))
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `nodegate doctor ARGS` against the cluster: (exit code, stdout, stderr).
fn doctor(cluster: &TestCluster, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg("doctor")
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .output()
        .expect("run nodegate doctor");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The checks of a `-o json` report whose `check` is `which`.
fn checks(out: &str, which: &str) -> Vec<Value> {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks: {out}"))
        .iter()
        .filter(|c| c["check"] == which)
        .cloned()
        .collect()
}

fn statuses(out: &str, which: &str) -> Vec<String> {
    checks(out, which)
        .iter()
        .map(|c| c["status"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The flags nodegate runs with here, given to the doctor.
/// nodegate as a user runs it who turned the autoscaler presets off
/// (`--autoscaler none`): every node gets `nodegate.dev/initializing`, so a
/// NodePool or a cluster-autoscaler must be told about it. (Under the
/// default presets a NodePool needs nothing: the table tests check that.)
const FLAGS: [&str; 7] = [
    "--leader-elect",
    "--lease-namespace",
    "nodegate-system",
    "--timeout",
    "10m",
    "--autoscaler",
    "none",
];

/// Waits until the API server applies the admission policy just applied: a
/// server-side dry-run create of a node comes back with the taint.
async fn policy_in_effect(cluster: &TestCluster) {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    wait_for(
        "the admission policy in effect",
        Duration::from_secs(30),
        || {
            let nodes = nodes.clone();
            async move {
                let probe: Node = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "doctor-e2e-probe"},
                }))
                .map_err(|e| e.to_string())?;
                let dry = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                let made = nodes
                    .create(&dry, &probe)
                    .await
                    .map_err(|e| e.to_string())?;
                let taints = made.spec.and_then(|s| s.taints).unwrap_or_default();
                match taints.iter().any(|t| t.key == "nodegate.dev/initializing") {
                    true => Ok(()),
                    false => Err(format!("taints {taints:?}")),
                }
            }
        },
    )
    .await;
}

async fn setup(cluster: &TestCluster) -> Nodegate {
    for file in ["namespace.yaml", "rbac.yaml", "startup-taint.yaml"] {
        let path = repo_root().join("deploy/kustomize/base").join(file);
        kubectl_ok(cluster, &["apply", "-f", &path.to_string_lossy()]);
    }
    // The policy's parameters as a leading nodegate with `--autoscaler
    // none` writes them: no rule, one taint.
    kubectl_ok(
        cluster,
        &[
            "-n",
            "nodegate-system",
            "create",
            "configmap",
            "nodegate-admission",
            "--from-literal=startupRules=",
            "--from-literal=startupTaint=nodegate.dev/initializing:NoSchedule",
            "--from-literal=managedTaints=nodegate.dev/initializing:NoSchedule",
        ],
    );
    policy_in_effect(cluster).await;
    apply(cluster, NODEPOOL_CRD);
    kubectl_ok(
        cluster,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/nodepools.karpenter.sh",
        ],
    );
    let ng = Nodegate::start(cluster, &FLAGS);
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), "nodegate-system");
    wait_for(
        "nodegate to hold its Lease",
        Duration::from_secs(60),
        || {
            let leases = leases.clone();
            async move {
                let l = leases
                    .get_opt("nodegate")
                    .await
                    .map_err(|e| e.to_string())?;
                match l.and_then(|l| l.spec).and_then(|s| s.holder_identity) {
                    Some(h) if !h.is_empty() => Ok(()),
                    other => Err(format!("holder {other:?}")),
                }
            }
        },
    )
    .await;
    ng
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_each_autoscaler_problem_and_its_fix_and_passes_a_clean_cluster() {
    let cluster = TestCluster::start("doctor").await;
    let mut ng = setup(&cluster).await;
    let json: Vec<&str> = FLAGS.iter().copied().chain(["-o", "json"]).collect();

    // A NodePool that does not know nodegate's taint.
    apply(&cluster, &nodepool("general", ""));
    let (code, out, err) = doctor(&cluster, &FLAGS);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains("✗ karpenter") && out.contains("NodePool general"),
        "{out}"
    );
    assert!(
        out.contains("extra NodeClaims")
            && out.contains("fix: add {key: nodegate.dev/initializing, effect: NoSchedule} to NodePool general's spec.template.spec.startupTaints"),
        "{out}"
    );
    let (code, out, _) = doctor(&cluster, &json);
    assert_eq!(code, 3, "{out}");
    let karpenter = checks(&out, "karpenter");
    assert_eq!(karpenter.len(), 1, "{out}");
    assert_eq!(karpenter[0]["status"], "problem");
    assert_eq!(karpenter[0]["subject"], "NodePool general");
    // Everything else is clean: the NodePool was the one problem.
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["problems"], 1, "{out}");
    assert_eq!(v["source"], "flags");

    // Fixed: the key listed in its startupTaints.
    apply(
        &cluster,
        &nodepool(
            "general",
            "{key: nodegate.dev/initializing, effect: NoSchedule}",
        ),
    );
    let (code, out, err) = doctor(&cluster, &json);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(statuses(&out, "karpenter"), ["ok"], "{out}");
    let note = checks(&out, "karpenter")[0]["note"].to_string();
    assert!(note.contains("karpenter.sh/registered=true"), "{out}");

    // cluster-autoscaler without the startup taint, and a startup time
    // shorter than nodegate's deadline.
    apply(&cluster, &autoscaler(&["--max-node-startup-time=5m"]));
    let (code, out, err) = doctor(&cluster, &FLAGS);
    assert_eq!(code, 3, "{out}{err}");
    assert!(
        out.contains(
            "✗ cluster-autoscaler Deployment kube-system/cluster-autoscaler: does not treat"
        ) && out.contains("note: replicas 0")
            && out.contains(
                "fix: add --startup-taint=nodegate.dev/initializing to its container args"
            ),
        "{out}"
    );
    assert!(
        out.contains("--timeout 10m is not below it") && out.contains("5m"),
        "{out}"
    );
    let (_, out, _) = doctor(&cluster, &json);
    assert_eq!(
        statuses(&out, "cluster-autoscaler"),
        ["problem", "problem"],
        "{out}"
    );

    // Fixed: a clean cluster.
    apply(
        &cluster,
        &autoscaler(&[
            "--startup-taint=nodegate.dev/initializing",
            "--max-node-startup-time=15m",
        ]),
    );
    let (code, out, err) = doctor(&cluster, &FLAGS);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no problems found"), "{out}");
    let (_, out, _) = doctor(&cluster, &json);
    for (check, want) in [
        ("karpenter", "ok"),
        ("cluster-autoscaler", "ok"),
        ("admission", "ok"),
        ("leader", "ok"),
        ("rbac", "ok"),
        ("nodes", "ok"),
    ] {
        let got = statuses(&out, check);
        assert!(
            !got.is_empty() && got.iter().all(|s| s == want),
            "{check}: {got:?}\n{out}"
        );
    }

    // A trial run (--dry-run) while the policy's parameters are live: the
    // API server would taint every new node and the trial never open it.
    let trial: Vec<&str> = json.iter().copied().chain(["--dry-run"]).collect();
    let (code, out, _) = doctor(&cluster, &trial);
    assert_eq!(code, 3, "{out}");
    assert!(
        checks(&out, "admission")
            .iter()
            .any(|c| c["status"] == "problem"
                && c["subject"] == "MutatingAdmissionPolicyBinding nodegate-startup-taint"
                && c["message"].to_string().contains("--dry-run")
                && c["message"].to_string().contains("dryRun")),
        "{out}"
    );

    // The same settings read from nodegate's Deployment.
    apply(&cluster, &nodegate_deployment(&FLAGS));
    let (code, out, err) = doctor(&cluster, &["--from-cluster", "-o", "json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["source"], "deployment nodegate-system/nodegate", "{out}");
    // ... and a Deployment whose deadline the autoscaler would outlast.
    apply(
        &cluster,
        &nodegate_deployment(&["--leader-elect", "--timeout=20m"]),
    );
    let (code, out, _) = doctor(&cluster, &["--from-cluster", "-o", "json"]);
    assert_eq!(code, 3, "{out}");
    let ca = checks(&out, "cluster-autoscaler");
    assert!(
        ca.iter()
            .any(|c| c["status"] == "problem" && c["message"].to_string().contains("--timeout 20m")),
        "{out}"
    );

    // The admission policy's parameters gone: the policy adds nothing.
    kubectl_ok(
        &cluster,
        &[
            "-n",
            "nodegate-system",
            "delete",
            "configmap",
            "nodegate-admission",
        ],
    );
    let (code, out, _) = doctor(&cluster, &json);
    assert_eq!(code, 3, "{out}");
    let missing = checks(&out, "admission");
    assert!(
        missing.iter().any(|c| c["status"] == "problem"
            && c["subject"] == "MutatingAdmissionPolicyBinding nodegate-startup-taint"
            && c["message"]
                .to_string()
                .contains("nodegate-system/nodegate-admission")),
        "{out}"
    );

    // nodegate's ServiceAccount loses its grant to record Events: the API
    // server's own answer to a SubjectAccessReview names it.
    kubectl_ok(
        &cluster,
        &["-n", "default", "delete", "rolebinding", "nodegate-events"],
    );
    let (code, out, _) = doctor(&cluster, &json);
    assert_eq!(code, 3, "{out}");
    let rbac = checks(&out, "rbac");
    assert!(
        rbac.len() == 1
            && rbac[0]["status"] == "problem"
            && rbac[0]["subject"] == "ServiceAccount nodegate-system/nodegate"
            && rbac[0]["message"] == "may not create events.events.k8s.io in default",
        "{out}"
    );

    // nodegate stopped, and a node gated an hour ago: no gate will open it.
    ng.kill();
    let hour_ago = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_secs(3600))
        .expect("an hour ago");
    let mut stuck = support::fake_node(
        "stuck-1",
        &[],
        &[("nodegate.dev/initializing", "", "NoSchedule")],
    );
    stuck
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("nodegate.dev/gated-since".into(), hour_ago.to_string());
    cluster.create_node(&stuck).await;
    let (code, out, _) = doctor(&cluster, &json);
    assert_eq!(code, 3, "{out}");
    let nodes = checks(&out, "nodes");
    assert!(
        nodes
            .iter()
            .any(|c| c["status"] == "problem" && c["subject"] == "node stuck-1"),
        "{out}"
    );
}

/// `nodegate explain|status ARGS` against `cluster` (no other kubeconfig to
/// fall back on): exit code, stdout, stderr.
fn nodegate(cluster: &TestCluster, command: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .arg(command)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .output()
        .unwrap_or_else(|e| panic!("run nodegate {command}: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `explain --from-cluster` and `status --from-cluster` judge by the
/// installed Deployment's settings, not by the binary's defaults: with the
/// Deployment's `--daemonset-namespaces=kube-system`, a DaemonSet in
/// `logging` is no member there, while the defaults wait for it; the
/// Deployment's `--timeout` is the deadline status shows. A gate flag
/// given beside `--from-cluster` is refused (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_and_status_from_cluster_judge_by_the_installed_gate() {
    use support::gate::{DsSpec, daemonset};
    let cluster = TestCluster::start("from-cluster").await;
    kubectl_ok(&cluster, &["create", "namespace", "nodegate-system"]);
    kubectl_ok(&cluster, &["create", "namespace", "logging"]);
    let mut ds = daemonset(&DsSpec::new("fluent"));
    ds.metadata.namespace = Some("logging".to_string());
    apply(&cluster, &serde_json::to_string(&ds).expect("json"));
    let node = support::fake_node(
        "gated-1",
        &[],
        &[("nodegate.dev/initializing", "", "NoSchedule")],
    );
    cluster.create_node(&node).await;
    apply(
        &cluster,
        &nodegate_deployment(&["--daemonset-namespaces=kube-system", "--timeout=7m"]),
    );

    let (code, defaults, err) = nodegate(&cluster, "explain", &["gated-1", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let (code, installed, err) = nodegate(
        &cluster,
        "explain",
        &["gated-1", "--from-cluster", "-o", "json"],
    );
    assert_eq!(code, 0, "{err}");
    let waits_for_fluent =
        |out: &str| -> bool {
            let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
            v["daemonsets"].as_array().into_iter().flatten().any(|d| {
                d["namespace"] == "logging" && d["name"] == "fluent" && d["expected"] == true
            })
        };
    assert!(
        waits_for_fluent(&defaults),
        "with the defaults, logging/fluent is a member: {defaults}"
    );
    assert!(
        !waits_for_fluent(&installed),
        "the installed gate (--daemonset-namespaces=kube-system) does not wait for logging/fluent: {installed}"
    );

    // status: the same members, and the deadline left of the Deployment's
    // 7m (more than the default 2m could leave).
    let row = |args: &[&str]| -> (u64, std::time::Duration) {
        let (code, out, err) = nodegate(&cluster, "status", args);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let r = v
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["node"] == "gated-1")
            .unwrap_or_else(|| panic!("no row for gated-1: {out}"))
            .clone();
        let left = humantime::parse_duration(r["deadline"].as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("deadline {}: {e}", r["deadline"]));
        (r["members_expected"].as_u64().unwrap_or(99), left)
    };
    let (expected, left) = row(&["-o", "json"]);
    assert_eq!(expected, 1, "the defaults wait for logging/fluent");
    assert!(
        left <= Duration::from_secs(120),
        "the default deadline: {left:?} left"
    );
    let (expected, left) = row(&["--from-cluster", "-o", "json"]);
    assert_eq!(
        expected, 0,
        "the installed gate does not wait for logging/fluent"
    );
    assert!(
        left > Duration::from_secs(180),
        "status --from-cluster shows the Deployment's 7m deadline: {left:?} left"
    );
    let (code, _, err) = nodegate(
        &cluster,
        "explain",
        &[
            "gated-1",
            "--from-cluster",
            "--daemonset-namespaces=logging",
        ],
    );
    assert_eq!(code, 2, "a gate flag beside --from-cluster: {err}");
    assert!(err.contains("--from-cluster"), "{err}");
    let (code, _, err) = nodegate(&cluster, "status", &["--from-cluster", "--timeout", "5m"]);
    assert_eq!(code, 2, "--timeout beside --from-cluster: {err}");
}
