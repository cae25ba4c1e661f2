//! The benchmark's MutatingAdmissionPolicy mode: the policy nodegate ships
//! (deploy/kustomize/base/startup-taint.yaml) installed with the cluster's
//! own kubectl, its binding narrowed to the nodes the benchmark sends through
//! it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};
use serde_json::json;

const POLICY_FILE: &str = "deploy/kustomize/base/startup-taint.yaml";
const NAMESPACE_FILE: &str = "deploy/kustomize/base/namespace.yaml";
const BINDING: &str = "nodegate-startup-taint";

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

/// Installs the shipped policy with its binding limited to nodes labelled
/// `label=value`, then waits until the API server applies it: a dry-run
/// create of `probe` comes back with `taint` (a dry run stores nothing).
pub async fn install(
    repo: &Path,
    kubeconfig: &Path,
    nodes: &Api<Node>,
    (label, value): (&str, &str),
    probe: &Node,
    taint: &str,
) -> anyhow::Result<Duration> {
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
    )?;
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
            bail!("the API server did not apply the admission policy within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
