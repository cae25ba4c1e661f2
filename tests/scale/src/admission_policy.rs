//! The benchmark's MutatingAdmissionPolicy modes: the policy nodegate ships
//! (deploy/kustomize/base/startup-taint.yaml) installed with the cluster's
//! own kubectl, its binding narrowed to the nodes the benchmark sends through
//! it; or a trivial policy that appends a fixed taint and does nothing else
//! (no parameters, variables or matchConditions), bound the same way, which
//! shows what any mutating policy costs a Node CREATE before its CEL does
//! anything.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;

const POLICY_FILE: &str = "deploy/kustomize/base/startup-taint.yaml";
const NAMESPACE_FILE: &str = "deploy/kustomize/base/namespace.yaml";
const BINDING: &str = "nodegate-startup-taint";
/// The trivial policy's and its binding's name.
const TRIVIAL: &str = "nodegate-bench-trivial";
/// Where nodegate writes the shipped policy's parameters (its binding's
/// paramRef).
pub const PARAMS: &str = "nodegate-system/nodegate-admission";

fn kubectl(repo: &Path, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<()> {
    let dir = Command::new(repo.join("deploy/local/build"))
        .arg("--print-dir")
        .stdin(Stdio::null())
        .output()
        .context("running deploy/local/build --print-dir")?;
    if !dir.status.success() {
        bail!(
            "deploy/local/build --print-dir failed: {}",
            String::from_utf8_lossy(&dir.stderr)
        );
    }
    let bin = Path::new(String::from_utf8_lossy(&dir.stdout).trim()).join("kubectl");
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(repo)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Applies the shipped policy with its binding limited to nodes labelled
/// `label=value`. It taints nothing until nodegate writes its parameters
/// ([`PARAMS`], `--admission-params`).
pub fn apply_shipped(
    repo: &Path,
    kubeconfig: &Path,
    (label, value): (&str, &str),
) -> anyhow::Result<()> {
    kubectl(
        repo,
        kubeconfig,
        &["apply", "-f", NAMESPACE_FILE, "-f", POLICY_FILE],
    )?;
    let selector =
        json!({"spec": {"matchResources": {"objectSelector": {"matchLabels": {label: value}}}}});
    kubectl(
        repo,
        kubeconfig,
        &[
            "patch",
            "mutatingadmissionpolicybinding",
            BINDING,
            "--type=merge",
            "-p",
            &selector.to_string(),
        ],
    )
}

/// Creates the trivial policy, which appends `taint` (effect NoSchedule) to
/// every node it is bound to that does not carry it yet (the reinvocation
/// pass would otherwise append it twice), and its binding, limited to nodes labelled
/// `label=value` as the shipped one is. Its failure and reinvocation
/// policies are the shipped policy's, so that only the CEL differs.
pub async fn create_trivial(
    client: &kube::Client,
    (label, value): (&str, &str),
    taint: &str,
) -> anyhow::Result<()> {
    let one = format!("Object.spec.taints{{key: {taint:?}, effect: \"NoSchedule\"}}");
    let expression = format!(
        "has(object.spec.taints) && object.spec.taints.exists(t, t.key == {taint:?}) ? [] : \
         has(object.spec.taints) ? \
         [JSONPatch{{op: \"add\", path: \"/spec/taints/-\", value: {one}}}] : \
         [JSONPatch{{op: \"add\", path: \"/spec/taints\", value: [{one}]}}]"
    );
    let policy: MutatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": TRIVIAL},
        "spec": {
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["nodes"],
            }]},
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}],
        },
    }))?;
    let binding: MutatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": TRIVIAL},
        "spec": {
            "policyName": TRIVIAL,
            "matchResources": {"objectSelector": {"matchLabels": {label: value}}},
        },
    }))?;
    Api::<MutatingAdmissionPolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .context("creating the trivial MutatingAdmissionPolicy (the API server must serve admissionregistration.k8s.io/v1)")?;
    Api::<MutatingAdmissionPolicyBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .context("creating the trivial policy's binding")?;
    Ok(())
}

/// Waits until the API server applies a policy: a dry-run create of `probe`
/// comes back with `taint` (a dry run stores nothing); `what` names the
/// policy in the error.
pub async fn wait_applied(
    nodes: &Api<Node>,
    probe: &Node,
    taint: &str,
    what: &str,
) -> anyhow::Result<Duration> {
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    loop {
        let made = nodes
            .create(&dry, probe)
            .await
            .context("dry-run create of the probe node")?;
        let tainted = made
            .spec
            .and_then(|s| s.taints)
            .is_some_and(|ts| ts.iter().any(|t| t.key == taint));
        if tainted {
            return Ok(started.elapsed());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the API server did not apply {what} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
