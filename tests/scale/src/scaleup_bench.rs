//! `nodegate-scaleup-bench`: the scale-up benchmark under the real Karpenter
//! (its kwok cloud provider, `deploy/local/karpenter`). One run: a fresh
//! deploy/local cluster, `--daemonsets` node agents (tolerating every taint,
//! Ready `--ready-after` after they start), Karpenter with its default
//! NodePool (one 4-CPU instance type), then `--pods` pending pods of 850m CPU
//! (four a node) created at once; it watches until every pod runs. With
//! nodegate, the shipped admission policy puts `--key` on at Node CREATE and
//! nodegate's release binary opens each node when its agents are Ready.
//! Runs alternate without and with nodegate, each on a fresh cluster.
//!
//! Reported per run: pods pending → Running p50/p99/max, NodeClaims
//! launched, a node's agents' start time (node seen → all agents Ready), how
//! long nodes were gated, the gate's opening after the agents were Ready,
//! and the gate's share of the pods' pending time. docs/benchmarks.md
//! records results.

#[allow(dead_code)]
mod cluster;
mod scaleup_observe;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

use crate::scaleup_observe::{LOAD, Observer, RunResult};

const NS: &str = "scaleup";

#[derive(Debug, Parser)]
#[command(name = "nodegate-scaleup-bench")]
struct Args {
    /// Pending pods (850m CPU each; four fit a node).
    #[arg(long, default_value_t = 100)]
    pods: usize,
    /// Node agent DaemonSets (100m CPU each).
    #[arg(long, default_value_t = 2)]
    daemonsets: usize,
    /// How long an agent's pod takes from Running to Ready.
    #[arg(long, default_value = "3s")]
    ready_after: String,
    /// Pairs of runs (without nodegate, then with it).
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// The startup taint's key (nodegate's --taint and the admission policy's).
    #[arg(long, default_value = "readiness.k8s.io/nodegate")]
    key: String,
    /// nodegate's binary (default: $NODEGATE_BIN).
    #[arg(long, env = "NODEGATE_BIN")]
    nodegate: PathBuf,
    /// Where the clusters' state goes.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Write the results here as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Give up on a run after this long.
    #[arg(long, default_value = "600s")]
    run_timeout: humantime::Duration,
}

fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[scaleup {}] {}",
        jiff::Timestamp::now().strftime("%H:%M:%S%.3f"),
        msg.as_ref()
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.nodegate.is_file() {
        bail!(
            "no nodegate binary at {} (build it with `cargo build --release -p nodegate`, or pass --nodegate PATH)",
            args.nodegate.display()
        );
    }
    let base = args.state_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("nodegate-scaleup")
            .join(format!("run-{}", std::process::id()))
    });
    let mut results = Vec::new();
    for round in 1..=args.repeat {
        for gated in [false, true] {
            let tag = format!("{}{round}", if gated { "with" } else { "without" });
            log(format!("run {tag}: {} pods", args.pods));
            let r = one_run(&args, &base.join(&tag), gated).await?;
            print_run(&tag, &r);
            results.push((tag, r));
        }
    }
    if let Some(out) = &args.out {
        let doc = json!({
            "pods": args.pods, "daemonsets": args.daemonsets,
            "ready_after": args.ready_after, "key": args.key,
            "runs": results.iter().map(|(t, r)| json!({"run": t, "result": r})).collect::<Vec<_>>(),
        });
        std::fs::write(out, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", out.display()))?;
    }
    Ok(())
}

fn print_run(tag: &str, r: &RunResult) {
    let p = r.pending_to_running_ms;
    println!(
        "{tag}: {}/{} pods running, {} NodeClaims; pending→Running p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms; agents Ready after node seen p50 {:.0} ms, p99 {:.0} ms ({} nodes)",
        r.pods_running,
        r.pods,
        r.nodeclaims,
        p.p50,
        p.p99,
        p.max,
        r.daemonsets_ready_ms.p50,
        r.daemonsets_ready_ms.p99,
        r.daemonsets_ready_ms.n
    );
    if r.gated {
        println!(
            "{tag}: gated p50 {:.0} ms, p99 {:.0} ms; opened after the agents were Ready p50 {:.0} ms, p99 {:.0} ms; gate's share of pending time {:.1} %; nodes never gated {}",
            r.gated_ms.p50,
            r.gated_ms.p99,
            r.gate_after_daemonsets_ms.p50,
            r.gate_after_daemonsets_ms.p99,
            r.gate_share * 100.0,
            r.nodes_never_gated
        );
    }
}

async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read kubeconfig {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("bad kubeconfig {}", kubeconfig.display()))?;
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

/// Kills nodegate when the run ends, however it ends.
struct Controller(Child);

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn one_run(args: &Args, state_dir: &Path, gated: bool) -> anyhow::Result<RunResult> {
    let repo = cluster::repo_root();
    if let Some(parent) = state_dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let cluster = cluster::Cluster::up(&repo, state_dir, false)?;
    let client = client_for(&cluster.kubeconfig).await?;
    setup_agents(&client, args).await?;
    script(
        &repo,
        "karpenter",
        &["start", "--state-dir", &state_dir.to_string_lossy()],
    )?;
    let _controller = if gated {
        install_admission(&repo, &cluster.kubeconfig, &client, &args.key).await?;
        Some(start_nodegate(args, &cluster.kubeconfig, state_dir)?)
    } else {
        None
    };
    let observer = Observer::start(&client, NS, &args.key);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments
        .create(&PostParams::default(), &load(args.pods))
        .await
        .context("creating the workload")?;
    let started = Instant::now();
    while observer.running() < args.pods {
        if started.elapsed() > *args.run_timeout {
            bail!(
                "{} of {} pods running after {}; logs in {}/logs",
                observer.running(),
                args.pods,
                args.run_timeout,
                state_dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    log(format!(
        "all {} pods running after {:.1}s",
        args.pods,
        started.elapsed().as_secs_f64()
    ));
    Ok(observer.result(gated))
}

fn script(repo: &Path, name: &str, args: &[&str]) -> anyhow::Result<()> {
    let path = repo.join("deploy/local").join(name);
    let out = Command::new(&path)
        .args(args)
        .current_dir(repo)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", path.display()))?;
    if !out.status.success() {
        bail!(
            "{} {} failed: {}",
            path.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

async fn setup_agents(client: &kube::Client, args: &Args) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .context("creating the namespace")?;
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    for i in 0..args.daemonsets {
        let name = format!("agent-{i}");
        let ds: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": NS},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {
                        "labels": {"app": name},
                        "annotations": {"nodegate.test/ready-after": args.ready_after},
                    },
                    "spec": {
                        "containers": [{"name": "agent", "image": "registry.invalid/agent:1",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
                        "tolerations": [{"operator": "Exists"}],
                    },
                },
            },
        }))?;
        api.create(&PostParams::default(), &ds)
            .await
            .with_context(|| format!("creating DaemonSet {name}"))?;
    }
    Ok(())
}

fn load(pods: usize) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": LOAD, "namespace": NS},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": {"app": LOAD}},
            "template": {
                "metadata": {"labels": {"app": LOAD}},
                "spec": {
                    "nodeSelector": {"karpenter.sh/nodepool": "default"},
                    "containers": [{"name": "app", "image": "registry.invalid/app:1",
                        "resources": {"requests": {"cpu": "850m", "memory": "256Mi"}}}],
                },
            },
        },
    }))
    .expect("static workload manifest")
}

fn kubectl(repo: &Path, kubeconfig: &Path, args: &[&str]) -> anyhow::Result<()> {
    let dir = Command::new(repo.join("deploy/local/build"))
        .arg("--print-dir")
        .output()
        .context("running deploy/local/build --print-dir")?;
    let bin = Path::new(String::from_utf8_lossy(&dir.stdout).trim()).join("kubectl");
    let out = Command::new(&bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .current_dir(repo)
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

/// The shipped admission policy, its parameters set to `key`, bound to
/// Karpenter's nodes; waits until a dry-run node comes back tainted.
async fn install_admission(
    repo: &Path,
    kubeconfig: &Path,
    client: &kube::Client,
    key: &str,
) -> anyhow::Result<()> {
    kubectl(
        repo,
        kubeconfig,
        &[
            "apply",
            "-f",
            "deploy/kustomize/base/namespace.yaml",
            "-f",
            "deploy/kustomize/base/startup-taint.yaml",
        ],
    )?;
    let taint = format!("{key}:NoSchedule");
    kubectl(
        repo,
        kubeconfig,
        &[
            "-n",
            "nodegate-system",
            "create",
            "configmap",
            "nodegate-admission",
            &format!("--from-literal=startupTaint={taint}"),
            &format!("--from-literal=managedTaints={taint}"),
        ],
    )?;
    let probe: Node = serde_json::from_value(json!({
        "metadata": {"name": "admission-probe", "labels": {"karpenter.sh/nodepool": "default"}},
    }))?;
    let nodes: Api<Node> = Api::all(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    loop {
        let made = nodes.create(&dry, &probe).await.context("dry-run probe")?;
        let tainted = made
            .spec
            .and_then(|s| s.taints)
            .is_some_and(|ts| ts.iter().any(|t| t.key == key));
        if tainted {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the API server did not apply the admission policy within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn start_nodegate(args: &Args, kubeconfig: &Path, state_dir: &Path) -> anyhow::Result<Controller> {
    let log_path = state_dir.join("logs/nodegate.log");
    let out = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(&args.nodegate)
        .args(["run", "--taint", &format!("{}:NoSchedule", args.key)])
        .args([
            "--timeout",
            "600s",
            "--http-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "127.0.0.1:0",
        ])
        .env("KUBECONFIG", kubeconfig)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", args.nodegate.display()))?;
    Ok(Controller(child))
}
