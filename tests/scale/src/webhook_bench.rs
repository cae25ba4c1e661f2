//! What putting the startup taint on at Node CREATE costs a node
//! registration, measured on a real control plane (deploy/local) with
//! nodegate's release binary: through nodegate's admission webhook
//! (`--mechanism webhook`, the default, described below) or through the
//! MutatingAdmissionPolicy nodegate ships (`--mechanism policy`: the same
//! two kinds of CREATE, the first tainted by the API server's own CEL
//! evaluation, with no call out; nodegate writes the policy's parameters,
//! `--admission-params`). `--mechanism trivial-policy` does the same with a
//! policy that only appends a fixed taint (no parameters, variables or
//! matchConditions): what any mutating policy costs, so that the shipped
//! policy's CEL is the difference between the two.
//!
//! Two kinds of Node CREATE, interleaved in chunks so that both see the same
//! machine: nodes created without a taint, which the real kube-apiserver
//! sends through nodegate's webhook (TLS, nodegate's own certificate) and
//! which must come back tainted; and nodes created with the taint already in
//! the request, as a provisioner that taints them itself does, which the
//! webhook configuration's objectSelector keeps from calling the webhook.
//! Both kinds are then gated alike (nodegate runs with `--timeout 0`, and the
//! nodes never become Ready, so it writes nothing during the run).
//!
//! Reported: the webhook's own handling time (nodegate's
//! `nodegate_webhook_admission_duration_seconds`), the API server's view of
//! the call (`apiserver_admission_webhook_admission_duration_seconds`), and
//! the CREATE latency and throughput each kind saw from the client.

mod admission_policy;
// Shared with the scale driver; this binary uses only part of each.
#[allow(dead_code)]
mod cluster;
#[allow(dead_code)]
mod metrics;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;
use serde_json::json;

use crate::metrics::BucketQuantiles;

const TAINT: &str = "nodegate.dev/initializing";
const VIA: &str = "bench.nodegate.dev/via";
const WEBHOOK_NAME: &str = "nodes.nodegate.dev";

/// Measures the admission webhook's cost to Node CREATE (see the module doc).
#[derive(Debug, Parser)]
#[command(name = "nodegate-webhook-bench")]
struct Args {
    /// Nodes created through the webhook; as many again are created tainted
    /// by the client, for the comparison.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// Nodes per chunk; the two kinds alternate chunk by chunk.
    #[arg(long, default_value_t = 50)]
    chunk: usize,
    /// CREATE requests in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Where the cluster's state goes (must not hold a running cluster).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Write the result here as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Leave the cluster running.
    #[arg(long)]
    keep: bool,
    /// Run nodegate with a --node-selector that leaves the webhook's nodes
    /// out: the API server still calls the webhook for each, and nodegate
    /// answers "allowed" without a patch. Measures the call alone, without
    /// the patch the API server applies.
    #[arg(long)]
    unchanged: bool,
    /// What puts the taint on at CREATE: nodegate's webhook, the
    /// MutatingAdmissionPolicy nodegate ships (evaluated inside the API
    /// server; nodegate runs without a webhook and writes its parameters),
    /// or a trivial policy that appends a fixed taint and nothing else.
    #[arg(long, value_enum, default_value_t = Mechanism::Webhook)]
    mechanism: Mechanism,
    /// A flag for nodegate, after the benchmark's own (repeatable), e.g.
    /// `--nodegate-flag=--autoscaler=none`: with `--mechanism policy`, the
    /// parameters it writes then hold no startupRules.
    #[arg(
        long = "nodegate-flag",
        value_name = "FLAG",
        allow_hyphen_values = true
    )]
    nodegate_flags: Vec<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Mechanism {
    Webhook,
    Policy,
    TrivialPolicy,
}

impl Mechanism {
    /// The value of the `via` label, and the name prefix, of the nodes this
    /// mechanism taints.
    fn via(self) -> &'static str {
        match self {
            Mechanism::Webhook => "webhook",
            Mechanism::Policy => "policy",
            Mechanism::TrivialPolicy => "trivial-policy",
        }
    }
}

#[derive(Debug, Default, Serialize)]
struct Kind {
    creates: usize,
    /// Client-side CREATE latency, exact quantiles of every request.
    latency_ms: BucketQuantiles,
    /// Time spent creating this kind's chunks, end to end.
    wall_s: f64,
    creates_per_s: f64,
    /// Webhook kind: creates that came back without the taint (with
    /// `--unchanged`: with it).
    untainted: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    nodes: usize,
    chunk: usize,
    concurrency: usize,
    /// `--unchanged`: the webhook answered without a patch.
    unchanged: bool,
    /// webhook, policy or trivial-policy.
    mechanism: Mechanism,
    /// `--nodegate-flag`s given.
    nodegate_flags: Vec<String>,
    /// Nodes created untainted, tainted at CREATE by the mechanism.
    through_admission: Kind,
    tainted_by_client: Kind,
    /// wall time through the mechanism / wall time without it.
    wall_ratio: f64,
    /// nodegate's handling time of /mutate-node, from its histogram.
    webhook_server_ms: Option<BucketQuantiles>,
    /// The API server's whole call to the webhook (TLS and HTTP included).
    apiserver_webhook_call_ms: Option<BucketQuantiles>,
}

fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[webhook-bench {}] {}",
        jiff::Timestamp::now().strftime("%H:%M:%S%.3f"),
        msg.as_ref()
    );
}

fn free_port() -> anyhow::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

fn node(name: &str, via: &str, tainted: bool) -> anyhow::Result<Node> {
    let taints = if tainted {
        json!([{"key": TAINT, "effect": "NoSchedule"}])
    } else {
        json!(null)
    };
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {VIA: via, "kubernetes.io/hostname": name}},
        "spec": {"taints": taints},
    }))?)
}

/// nodegate, killed when dropped.
struct Nodegate(Child);

impl Drop for Nodegate {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The address nodegate's HTTP server logged (`listening on ADDR`).
async fn http_addr(log_file: &Path) -> anyhow::Result<String> {
    for _ in 0..200 {
        let text = std::fs::read_to_string(log_file).unwrap_or_default();
        if let Some(addr) = text
            .lines()
            .find_map(|l| l.split("listening on ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
        {
            return Ok(addr.to_string());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = std::fs::read_to_string(log_file).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(10).collect();
    bail!(
        "nodegate logged no HTTP address within 10 s; its log ends:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    )
}

async fn nodegate_metrics(addr: &str) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to nodegate at {addr}"))?;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut body = String::new();
    stream.read_to_string(&mut body).await?;
    Ok(body)
}

async fn apiserver_metrics(client: &kube::Client) -> anyhow::Result<String> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(req).await?)
}

fn exact(mut samples: Vec<f64>) -> BucketQuantiles {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((samples.len() as f64) * q).ceil() as usize;
        samples
            .get(i.saturating_sub(1).min(samples.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    BucketQuantiles {
        count: samples.len() as f64,
        p50: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
    }
}

/// Creates `names` with `concurrency` requests in flight; returns each
/// request's latency in ms and how many webhook nodes came back untainted.
async fn create_chunk(
    nodes: &Api<Node>,
    names: Vec<String>,
    via: &'static str,
    concurrency: usize,
    want_taint: bool,
) -> anyhow::Result<(Vec<f64>, usize)> {
    let queue = Arc::new(std::sync::Mutex::new(names));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (queue, nodes) = (Arc::clone(&queue), nodes.clone());
        workers.spawn(async move {
            let mut out = (Vec::new(), 0usize);
            loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                let Some(name) = next else { break };
                let body = node(&name, via, via == "client")?;
                let started = Instant::now();
                let created = nodes
                    .create(&PostParams::default(), &body)
                    .await
                    .with_context(|| format!("creating node {name}"))?;
                out.0.push(started.elapsed().as_secs_f64() * 1000.0);
                let tainted = created
                    .spec
                    .and_then(|s| s.taints)
                    .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT));
                if tainted != want_taint {
                    out.1 += 1;
                }
            }
            anyhow::Ok(out)
        });
    }
    let (mut all, mut untainted) = (Vec::new(), 0);
    while let Some(done) = workers.join_next().await {
        let (lat, u) = done.context("a create worker panicked")??;
        all.extend(lat);
        untainted += u;
    }
    Ok((all, untainted))
}

/// Starts nodegate (`extra`, then `--nodegate-flag`s, after its common
/// flags), its output in `state_dir/nodegate.log`; returns it with its HTTP
/// address.
async fn start_nodegate(
    args: &Args,
    cluster: &cluster::Cluster,
    state_dir: &Path,
    extra: &[&str],
) -> anyhow::Result<(Nodegate, String)> {
    let bin = std::env::var_os("NODEGATE_BIN")
        .map(PathBuf::from)
        .context("NODEGATE_BIN is not set (tests/scale/webhook sets it)")?;
    let log_file = state_dir.join("nodegate.log");
    let out = std::fs::File::create(&log_file)?;
    let child = Command::new(&bin)
        .args([
            "run",
            "--timeout",
            "0",
            "--http-addr",
            "127.0.0.1:0",
            "--debug-addr",
            "",
        ])
        .args(extra)
        .args(&args.nodegate_flags)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let nodegate = Nodegate(child);
    let addr = http_addr(&log_file).await?;
    Ok((nodegate, addr))
}

/// Registers nodegate's webhook for the nodes labelled `via=webhook`, starts
/// nodegate serving it, and waits until a probe node comes back as the run
/// expects.
async fn start_webhook(
    args: &Args,
    cluster: &cluster::Cluster,
    client: &kube::Client,
    state_dir: &Path,
) -> anyhow::Result<(Nodegate, String)> {
    let port = free_port()?;
    let configuration: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "nodegate-bench"},
        "webhooks": [{
            "name": WEBHOOK_NAME,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/mutate-node")},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"]}],
            "objectSelector": {"matchLabels": {VIA: "webhook"}},
            // Fail: a create the webhook did not answer errors here instead
            // of slipping through untainted.
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }],
    }))?;
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .context("creating the webhook configuration")?;
    let webhook_addr = format!("127.0.0.1:{port}");
    let mut flags = vec![
        "--webhook-addr",
        &webhook_addr,
        "--webhook-cert-secret",
        "default/nodegate-bench-tls",
        "--webhook-configuration",
        "nodegate-bench",
        "--webhook-host",
        "127.0.0.1",
    ];
    if args.unchanged {
        flags.extend(["--node-selector", "bench.nodegate.dev/via!=webhook"]);
    }
    let (nodegate, addr) = start_nodegate(args, cluster, state_dir, &flags).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    // Until nodegate has written its CA into the configuration, the API
    // server cannot call it: wait for a probe to come back tainted.
    let started = Instant::now();
    loop {
        let probe = node("probe", "webhook", false)?;
        match nodes.create(&PostParams::default(), &probe).await {
            Ok(n) => {
                let _ = nodes.delete("probe", &DeleteParams::default()).await;
                let tainted = n
                    .spec
                    .and_then(|s| s.taints)
                    .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT));
                if tainted != args.unchanged {
                    break;
                }
                bail!(
                    "the probe node came back {}tainted: the webhook does not answer as configured",
                    if tainted { "" } else { "un" }
                );
            }
            Err(e) if started.elapsed() > Duration::from_secs(60) => {
                bail!(
                    "the webhook did not answer within 60 s: {e}; see {}",
                    state_dir.join("nodegate.log").display()
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    log(format!(
        "webhook answering after {:.1}s",
        started.elapsed().as_secs_f64()
    ));
    // The probe's deletion must not collide with a later name.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok((nodegate, addr))
}

/// Installs an admission policy for the nodes labelled `via=` the
/// mechanism's, starts nodegate without a webhook (it gates both kinds
/// alike, as in the webhook mode), and waits until the API server taints a
/// probe. The shipped policy taints nothing until nodegate, its leader,
/// writes the parameters (`--admission-params`).
async fn start_policy(
    args: &Args,
    cluster: &cluster::Cluster,
    client: &kube::Client,
    state_dir: &Path,
) -> anyhow::Result<(Nodegate, String)> {
    if args.unchanged {
        bail!(
            "--unchanged measures the webhook's call without a patch; it has no meaning with --mechanism {}",
            args.mechanism.via()
        );
    }
    let via = args.mechanism.via();
    let (started, what) = if let Mechanism::TrivialPolicy = args.mechanism {
        admission_policy::create_trivial(client, (VIA, via), TAINT).await?;
        (
            start_nodegate(args, cluster, state_dir, &[]).await?,
            "the trivial admission policy",
        )
    } else {
        admission_policy::apply_shipped(&cluster::repo_root(), &cluster.kubeconfig, (VIA, via))?;
        let params = format!("--admission-params={}", admission_policy::PARAMS);
        (
            start_nodegate(args, cluster, state_dir, &[&params]).await?,
            "the shipped admission policy (with the parameters nodegate writes once it leads)",
        )
    };
    let nodes: Api<Node> = Api::all(client.clone());
    let took =
        admission_policy::wait_applied(&nodes, &node("probe", via, false)?, TAINT, what).await?;
    log(format!("{what} applied after {:.1}s", took.as_secs_f64()));
    Ok(started)
}

/// Latencies (ms), wall time (s) and wrongly tainted count of one kind.
#[derive(Default)]
struct Samples(Vec<f64>, f64, usize);

/// Creates `nodes` nodes of each kind, interleaved chunk by chunk.
async fn create_both(
    args: &Args,
    api: &Api<Node>,
    admitted_via: &'static str,
) -> anyhow::Result<(Samples, Samples)> {
    let (mut admitted, mut client) = (Samples::default(), Samples::default());
    let chunks = args.nodes.div_ceil(args.chunk);
    for c in 0..chunks {
        let from = c * args.chunk;
        let to = (from + args.chunk).min(args.nodes);
        // Alternate which kind goes first, so neither always follows the other.
        let order = if c % 2 == 0 {
            [admitted_via, "client"]
        } else {
            ["client", admitted_via]
        };
        for via in order {
            let names: Vec<String> = (from..to).rev().map(|i| format!("{via}-{i:05}")).collect();
            let t = Instant::now();
            let want_taint = via == "client" || !args.unchanged;
            let (lat, wrong) = create_chunk(api, names, via, args.concurrency, want_taint).await?;
            let into = if via == "client" {
                &mut client
            } else {
                &mut admitted
            };
            into.0.extend(lat);
            into.1 += t.elapsed().as_secs_f64();
            into.2 += wrong;
        }
        if (c + 1) % 5 == 0 || c + 1 == chunks {
            log(format!(
                "{} of {} nodes of each kind created",
                to, args.nodes
            ));
        }
    }
    Ok((admitted, client))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.chunk == 0 || args.concurrency == 0 || args.nodes == 0 {
        bail!("--nodes, --chunk and --concurrency must be at least 1");
    }
    let repo = cluster::repo_root();
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("nodegate-webhook-bench"));
    let _ = std::fs::remove_dir_all(&state_dir);
    log(format!(
        "starting a control plane in {}",
        state_dir.display()
    ));
    let cluster = cluster::Cluster::up(&repo, &state_dir, args.keep)?;
    let kc = Kubeconfig::read_from(&cluster.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let (_nodegate, addr) = match args.mechanism {
        Mechanism::Webhook => start_webhook(&args, &cluster, &client, &state_dir).await?,
        Mechanism::Policy | Mechanism::TrivialPolicy => {
            start_policy(&args, &cluster, &client, &state_dir).await?
        }
    };
    let admitted_via = args.mechanism.via();
    let nodes: Api<Node> = Api::all(client.clone());

    let family = "nodegate_webhook_admission_duration_seconds";
    let api_family = "apiserver_admission_webhook_admission_duration_seconds";
    let api_labels = [("name", WEBHOOK_NAME)];
    let ng_before = metrics::buckets(&nodegate_metrics(&addr).await?, family, &[]);
    let api_before = metrics::buckets(&apiserver_metrics(&client).await?, api_family, &api_labels);
    let (admitted, by_client) = create_both(&args, &nodes, admitted_via).await?;
    let ng_after = metrics::buckets(&nodegate_metrics(&addr).await?, family, &[]);
    let api_after = metrics::buckets(&apiserver_metrics(&client).await?, api_family, &api_labels);

    let kind = |s: Samples| Kind {
        creates: s.0.len(),
        creates_per_s: s.0.len() as f64 / s.1.max(1e-9),
        latency_ms: exact(s.0),
        wall_s: s.1,
        untainted: s.2,
    };
    let report = Report {
        mechanism: args.mechanism,
        nodegate_flags: args.nodegate_flags.clone(),
        nodes: args.nodes,
        chunk: args.chunk,
        concurrency: args.concurrency,
        unchanged: args.unchanged,
        wall_ratio: admitted.1 / by_client.1.max(1e-9),
        through_admission: kind(admitted),
        tainted_by_client: kind(by_client),
        webhook_server_ms: metrics::quantiles_between(&ng_before, &ng_after),
        apiserver_webhook_call_ms: metrics::quantiles_between(&api_before, &api_after),
    };
    print(&report);
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        log(format!("wrote {}", path.display()));
    }
    if report.through_admission.untainted > 0 {
        bail!(
            "{} nodes created through the {} came back {} the taint",
            report.through_admission.untainted,
            args.mechanism.via(),
            if args.unchanged { "with" } else { "without" }
        );
    }
    drop(cluster);
    Ok(())
}

fn print(r: &Report) {
    let q = |b: &BucketQuantiles| format!("{:.2} / {:.2} / {:.2} ms", b.p50, b.p90, b.p99);
    let opt = |b: &Option<BucketQuantiles>| {
        b.as_ref().map_or("(none)".to_string(), |b| {
            format!("{} (n={})", q(b), b.count)
        })
    };
    let (through, mechanism) = match r.mechanism {
        Mechanism::Webhook => ("CREATE through the webhook", "webhook"),
        Mechanism::Policy => ("CREATE through the policy", "policy"),
        Mechanism::TrivialPolicy => ("CREATE through trivial policy", "trivial policy"),
    };
    println!(
        "nodes of each kind: {}, chunks of {}, {} in flight",
        r.nodes, r.chunk, r.concurrency
    );
    println!("                              p50 / p90 / p99             creates/s   wall");
    for (name, k) in [
        (through, &r.through_admission),
        ("CREATE tainted by the client", &r.tainted_by_client),
    ] {
        println!(
            "{name:<29} {:<27} {:>9.1} {:>6.1} s",
            q(&k.latency_ms),
            k.creates_per_s,
            k.wall_s
        );
    }
    println!(
        "wall time with / without the {mechanism}: {:.3}",
        r.wall_ratio
    );
    println!(
        "nodegate's handling (server side):  {}",
        opt(&r.webhook_server_ms)
    );
    println!(
        "the API server's call to it:        {}",
        opt(&r.apiserver_webhook_call_ms)
    );
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
