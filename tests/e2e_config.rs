//! `nodegate config check --cluster` against the real local control plane
//! (deploy/local), with the kustomize base's ServiceAccount, RBAC and
//! admission policy applied: a good file passes (exit 0) and says how many
//! nodes it manages; a file naming a namespace, a DaemonSet and critical pods
//! the cluster does not have, and a rule whose taint the shipped policy
//! refuses to nodegate's ServiceAccount, exits 2 naming each; the taint
//! checks are server-side dry runs, so no node changes.

use nodegate_e2e as support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::Value;
use support::{TestCluster, fake_node, local_bin, wait_for};

/// The real binary with `args`; KUBECONFIG points at nothing, so only
/// `--kubeconfig` leads it to the cluster. Returns (exit code, stdout, stderr).
fn nodegate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/nodegate-e2e-kubeconfig")
        .output()
        .expect("run nodegate");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// deploy/kustomize/base's identity and admission policy, applied for real
/// (the Deployment is not: the check is run out of cluster).
fn apply_base_identity(kubeconfig: &Path) {
    let kubectl = local_bin("kubectl");
    let rendered = Command::new(&kubectl)
        .args(["kustomize", "deploy/kustomize/base"])
        .current_dir(support::repo_root())
        .output()
        .expect("run kubectl kustomize");
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let text = String::from_utf8_lossy(&rendered.stdout);
    let objects: Vec<Value> = serde_saphyr::from_multiple(&text).expect("the base is YAML");
    let keep = [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let stream = objects
        .iter()
        .filter(|o| keep.contains(&o["kind"].as_str().unwrap_or_default()))
        .map(|o| serde_json::to_string(o).expect("json"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut child = Command::new(&kubectl)
        .args([
            "--kubeconfig",
            kubeconfig.to_str().expect("utf-8"),
            "apply",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubectl apply");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stream.as_bytes())
        .expect("write the objects");
    let out = child.wait_with_output().expect("kubectl apply");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write(dir: &Path, name: &str, yaml: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("write config");
    path.to_str().expect("utf-8 path").to_string()
}

/// The findings of a `-o json` report, as (problem, key, message).
fn findings(out: &str) -> Vec<(bool, String, String)> {
    let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    v["cluster"]
        .as_array()
        .unwrap_or_else(|| panic!("no cluster findings: {out}"))
        .iter()
        .map(|f| {
            (
                f["problem"] == true,
                f["key"].as_str().unwrap_or_default().to_string(),
                f["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_reads_the_cluster_and_never_writes() {
    let cluster = TestCluster::start("config-check").await;
    let kc = cluster.kubeconfig.to_str().expect("utf-8").to_string();
    apply_base_identity(&cluster.kubeconfig);
    cluster
        .create_node(&fake_node("cc-gpu", &[("gpu", "true")], &[]))
        .await;
    cluster.create_node(&fake_node("cc-cpu", &[], &[])).await;
    let dir = tempfile::tempdir().expect("temp dir");

    // A good file: every name exists, the rule's taint is nodegate's own.
    let good = write(
        dir.path(),
        "good.yaml",
        "nodeSelector: {matchLabels: {gpu: \"true\"}}\ndaemonsetNamespaces: [kube-system]\n\
         conditionTaints:\n- name: broken\n  conditions: [{type: Broken, status: \"True\"}]\n  \
         taint: {key: nodegate.dev/broken, effect: NoSchedule}\n",
    );
    let (code, out, err) = nodegate(&[
        "config",
        "check",
        "--cluster",
        "--kubeconfig",
        &kc,
        "-o",
        "json",
        &good,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let f = findings(&out);
    assert!(f.iter().all(|(problem, ..)| !problem), "{f:?}");
    assert!(
        f.iter()
            .any(|(_, k, m)| k == "nodeSelector" && m.contains("1 of the cluster's 2 nodes")),
        "{f:?}"
    );
    assert!(
        f.iter().any(|(_, k, m)| k == "conditionTaints (broken)"
            && m.contains("lets system:serviceaccount:nodegate-system:nodegate add")),
        "{f:?}"
    );

    // A bad file: a misspelt namespace, a missing DaemonSet, critical pods
    // no pod matches, and a rule taint the policy refuses to nodegate (the
    // recipes' key). The policy is loaded by the API server asynchronously:
    // wait until the dry run sees it.
    let bad = write(
        dir.path(),
        "bad.yaml",
        "daemonsetNamespaces: [kube-sytem]\nexclude: [kube-system/no-such-agent]\n\
         criticalPods:\n- {name: proxy, namespace: kube-system, selector: app=no-such-pod}\n\
         conditionTaints:\n- name: net\n  conditions: [{type: NetworkReady, status: \"False\", for: 1m}]\n  \
         taint: {key: example.com/network-not-ready, effect: NoSchedule}\n",
    );
    let f = wait_for(
        "the admission policy to refuse the rule's taint",
        Duration::from_secs(60),
        || {
            let bad = bad.clone();
            let kc = kc.clone();
            async move {
                let (code, out, err) = nodegate(&[
                    "config",
                    "check",
                    "--cluster",
                    "--kubeconfig",
                    &kc,
                    "-o",
                    "json",
                    &bad,
                ]);
                // 3: checked, and found problems (issue 38's one scheme).
                if code != 3 {
                    return Err(format!("exit {code}: {out}{err}"));
                }
                let f = findings(&out);
                if f.iter().any(|(p, k, _)| *p && k == "conditionTaints (net)") {
                    Ok(f)
                } else {
                    Err(format!("{f:?}"))
                }
            }
        },
    )
    .await;
    for (key, says) in [
        ("daemonsetNamespaces", "\"kube-sytem\" does not exist"),
        ("exclude", "kube-system/no-such-agent does not exist"),
        ("criticalPods (proxy)", "0 pod(s)"),
        ("conditionTaints (net)", "example.com/network-not-ready"),
    ] {
        assert!(
            f.iter().any(|(p, k, m)| *p && k == key && m.contains(says)),
            "no problem for {key} saying {says:?}: {f:?}"
        );
    }
    // The dry runs stored nothing: no node carries a taint.
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    for name in ["cc-gpu", "cc-cpu"] {
        let node = nodes.get(name).await.expect("read node");
        let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        assert!(
            taints.iter().all(|t| t.key != "example.com/network-not-ready" && t.key != "nodegate.dev/broken"),
            "{name}: {taints:?}"
        );
    }
    // The readable form says the same.
    let (code, out, _) = nodegate(&["config", "check", "--cluster", "--kubeconfig", &kc, &bad]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("PROBLEM daemonsetNamespaces"), "{out}");
}
