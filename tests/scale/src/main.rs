//! `nodegate-scale`: the scale benchmark driver behind `tests/scale/run`.
//!
//! One run: start a fresh deploy/local control plane, optionally fill it with
//! unrelated pods, start the controller under test (any command line; it
//! talks to the API server through the counting proxy), create the
//! DaemonSets, join N tainted nodes at once, and watch — from outside, on the
//! API server — until every node opened or its deadline plus a grace period
//! passed. Then print the table, write the JSON result and tear everything
//! down. It measures; it never judges a controller by its logs or internals.

mod cluster;
mod metrics;
mod observe;
mod procstat;
mod proxy;
mod report;
mod workload;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::workload::ReadyDelay;

/// Scale benchmark: N tainted nodes join a fresh deploy/local cluster at once;
/// measures, by watching the API server, how fast and how correctly the
/// controller under test opens them, what it costs the API server, and its
/// memory and CPU.
#[derive(Debug, Parser)]
#[command(name = "tests/scale/run")]
struct Args {
    /// Tainted nodes that join at once.
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// DaemonSets every node expects (DaemonSet 0 is split in a Ready and a
    /// never-Ready half, see --stuck-percent).
    #[arg(long, default_value_t = 6)]
    daemonsets: usize,
    /// The controller under test, run with `bash -c 'exec CMD'` and
    /// KUBECONFIG set. Placeholders: {kubeconfig}, {timeout} (e.g. 120s),
    /// {taint} (KEY:EFFECT), {nodegate} (the nodegate binary).
    /// Default: '{nodegate} run --timeout {timeout} --taint {taint} --http-addr 127.0.0.1:0'.
    #[arg(long, value_name = "CMD")]
    controller: Option<String>,
    /// The startup taint the nodes join with and the controller removes.
    #[arg(
        long,
        value_name = "KEY:EFFECT",
        default_value = "nodegate.dev/initializing:NoSchedule"
    )]
    taint: String,
    /// The controller's deadline, counted from each node's creation; passed
    /// to the controller as {timeout}.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Where to write the JSON result (the controller's log goes next to it).
    #[arg(long, value_name = "FILE.json")]
    out: Option<PathBuf>,
    /// Share of the nodes on which one DaemonSet never turns Ready.
    #[arg(long, default_value_t = 5.0, value_name = "PERCENT")]
    stuck_percent: f64,
    /// Pods that belong to no DaemonSet, created (and run by kwok) on
    /// untainted filler nodes before the controller starts.
    #[arg(long, default_value_t = 0)]
    unrelated_pods: usize,
    /// DaemonSet pods turn Ready a random time in [--ready-after,
    /// --ready-after-max] after they start.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    ready_after: Duration,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    ready_after_max: Duration,
    /// Pause after creating the DaemonSets, so the controller has synced
    /// before the nodes join.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// How long after the last deadline, and after the last node that
    /// opened, a node may still open before it counts as never opened.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The nodegate binary for {nodegate}.
    #[arg(long, env = "NODEGATE_BIN", value_name = "PATH")]
    nodegate: Option<PathBuf>,
    /// State directory for deploy/local (default: a fresh one under $TMPDIR).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Leave the cluster running afterwards (prints how to stop it).
    #[arg(long)]
    keep_cluster: bool,
    /// Node creates in flight at once.
    #[arg(long, default_value_t = 64)]
    create_concurrency: usize,
    /// Workers kwok (the simulated kubelets) uses for pod stages, node stages
    /// and leases; 0 keeps deploy/local's kwok as it is (4 each). See
    /// cluster::tune_kwok for why.
    #[arg(long, default_value_t = 16)]
    kwok_parallelism: u32,
    /// Seed for choosing the stuck nodes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

pub async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("cannot read kubeconfig {}", kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("bad kubeconfig {}", kubeconfig.display()))?;
    // Measure what was asked, not what a retry layer made of it.
    config.default_retry = false;
    config.read_timeout = None;
    kube::Client::try_from(config).context("cannot build a Kubernetes client")
}

/// The controller process; killed when dropped.
struct Controller {
    child: Child,
}

impl Controller {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGTERM, then SIGKILL after `grace`.
    fn stop(&mut self, grace: Duration) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if self.running() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn expand(template: &str, vars: &[(&str, String)]) -> String {
    vars.iter().fold(template.to_string(), |s, (k, v)| {
        s.replace(&format!("{{{k}}}"), v)
    })
}

fn machine_facts() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    if let Some(model) = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
    {
        m.insert("cpu".into(), model.1.trim().to_string());
    }
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    m.insert("cores".into(), cores.to_string());
    if let Some(mem) = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
    {
        let kib: f64 = mem
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .unwrap_or(0.0);
        m.insert("memory_gib".into(), format!("{:.1}", kib / 1_048_576.0));
    }
    m.insert(
        "kernel".into(),
        read("/proc/sys/kernel/osrelease").trim().to_string(),
    );
    m.insert(
        "loadavg_at_start".into(),
        read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    );
    m
}

fn repo_root() -> PathBuf {
    // tests/scale/ → the repository.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn parse_taint(s: &str) -> anyhow::Result<(String, String)> {
    match s.rsplit_once(':') {
        Some((k, e)) if !k.is_empty() && matches!(e, "NoSchedule" | "NoExecute") => {
            Ok((k.to_string(), e.to_string()))
        }
        _ => bail!(
            "--taint wants KEY:EFFECT with EFFECT NoSchedule or NoExecute (a PreferNoSchedule taint holds nothing back), got {s:?}"
        ),
    }
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
    let result = rt.block_on(async {
        tokio::select! {
            r = run(args) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    // Dropping the runtime here (after `run`'s guards ran) stops the proxy
    // and the sampler.
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn log(msg: impl AsRef<str>) {
    let now = jiff::Timestamp::now();
    eprintln!("[scale {}] {}", now.strftime("%H:%M:%S%.3f"), msg.as_ref());
}

async fn run(args: Args) -> anyhow::Result<()> {
    let taint = parse_taint(&args.taint)?;
    if args.nodes == 0 || args.daemonsets == 0 {
        bail!("--nodes and --daemonsets must be at least 1");
    }
    if args.ready_after_max < args.ready_after {
        bail!("--ready-after-max must not be below --ready-after");
    }
    let repo = repo_root();
    let out = args.out.clone();
    let log_path = match &out {
        Some(p) => p.with_extension("controller.log"),
        None => std::env::temp_dir().join(format!(
            "nodegate-scale-{}.controller.log",
            std::process::id()
        )),
    };
    let nodegate = match &args.nodegate {
        Some(p) => p.clone(),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo.join("target"))
            .join("release/nodegate"),
    };
    let template = args.controller.clone().unwrap_or_else(|| {
        "{nodegate} run --timeout {timeout} --taint {taint} --http-addr 127.0.0.1:0".to_string()
    });
    if template.contains("{nodegate}") && !nodegate.is_file() {
        bail!(
            "no nodegate binary at {} (build it with `cargo build --release -p nodegate`, or pass --nodegate PATH)",
            nodegate.display()
        );
    }
    let state_dir = args.state_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir()
            .join("nodegate-scale")
            .join(format!("run-{}", std::process::id()))
    });
    let stuck = workload::stuck_nodes(args.nodes, args.stuck_percent, args.seed);
    let machine = machine_facts();

    log(format!(
        "starting the control plane in {}",
        state_dir.display()
    ));
    let cluster = cluster::Cluster::up(&repo, &state_dir, args.keep_cluster)?;
    if args.kwok_parallelism > 0 {
        cluster.tune_kwok(args.kwok_parallelism)?;
    }
    let admin = client_for(&cluster.kubeconfig).await?;
    let version = admin.apiserver_version().await.context("asking /version")?;
    let mut machine = machine;
    machine.insert("kubernetes".into(), version.git_version);

    workload::create_namespace(&admin, workload::NAMESPACE).await?;
    if args.unrelated_pods > 0 {
        let t = Instant::now();
        let fillers = workload::create_unrelated_pods(
            &admin,
            args.unrelated_pods,
            800,
            args.create_concurrency,
        )
        .await?;
        log(format!(
            "created {} unrelated pods on {fillers} filler nodes in {:.1}s; waiting for kwok to run them",
            args.unrelated_pods,
            t.elapsed().as_secs_f64()
        ));
        // Their status writes should be over before the measurement; if kwok
        // cannot finish in a reasonable time, measure anyway and say so.
        match workload::wait_unrelated_running(&admin, Duration::from_secs(900)).await {
            Ok(()) => log(format!(
                "unrelated pods running after {:.1}s",
                t.elapsed().as_secs_f64()
            )),
            Err(e) => log(format!("{e:#}; measuring anyway")),
        }
    }

    // The controller talks to the API server through the counting proxy.
    let proxy = proxy::Proxy::start(client_for(&cluster.kubeconfig).await?).await?;
    let controller_kubeconfig = state_dir.join("controller.kubeconfig");
    std::fs::write(&controller_kubeconfig, proxy.kubeconfig())
        .with_context(|| format!("writing {}", controller_kubeconfig.display()))?;

    let sampler = Arc::new(Mutex::new(procstat::Sampler::new()));
    {
        let mut s = lock(&sampler);
        for (name, pid) in cluster.pids() {
            s.track(name, pid, true);
        }
        s.track("benchmark driver", std::process::id(), false);
    }
    let mut observer = observe::start(cluster.kubeconfig.clone(), taint.clone())?;
    let record = Arc::clone(&observer.record);

    let timeout_arg = format!("{}s", args.timeout.as_secs_f64());
    let command = expand(
        &template,
        &[
            ("kubeconfig", controller_kubeconfig.display().to_string()),
            ("timeout", timeout_arg),
            ("taint", args.taint.clone()),
            ("nodegate", nodegate.display().to_string()),
        ],
    );
    log(format!(
        "controller: {command}  (log: {})",
        log_path.display()
    ));
    let log_file = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let child = Command::new("bash")
        .arg("-c")
        .arg(format!("exec {command}"))
        .env("KUBECONFIG", &controller_kubeconfig)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .context("cannot start the controller")?;
    let mut controller = Controller { child };
    lock(&sampler).track("controller", controller.pid(), true);
    let sampling = {
        let sampler = Arc::clone(&sampler);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(procstat::INTERVAL);
            loop {
                tick.tick().await;
                lock(&sampler).sample();
            }
        })
    };

    let delay = ReadyDelay {
        after: args.ready_after,
        max: args.ready_after_max,
    };
    workload::create_daemonsets(&admin, args.daemonsets, &taint.0, &delay, !stuck.is_empty())
        .await?;
    tokio::time::sleep(args.settle).await;
    if !controller.running() {
        bail!(
            "the controller exited before the nodes joined; its log is {}",
            log_path.display()
        );
    }

    // The measurement window starts here for the control plane's CPU.
    lock(&sampler).reset(&["controller"]);
    let before = metrics::scrape(&admin).await?;
    log(format!(
        "creating {} tainted nodes ({} stuck)",
        args.nodes,
        stuck.len()
    ));
    let create_started = Instant::now();
    workload::create_nodes(
        &admin,
        args.nodes,
        &stuck,
        (&taint.0, &taint.1),
        args.create_concurrency,
    )
    .await?;
    let create_s = create_started.elapsed().as_secs_f64();
    log(format!("nodes created in {create_s:.1}s"));

    // Every node's deadline has passed by creation end + timeout; give a
    // grace period for the last writes before calling a node never opened.
    let give_up = Instant::now() + args.timeout + args.grace;
    let mut last_progress = Instant::now();
    let (mut last_opened, mut last_open_at) = (0usize, Instant::now());
    loop {
        let (opened, seen) = {
            let r = lock_record(&record);
            (
                r.opened(),
                r.nodes.values().filter(|n| n.added.is_some()).count(),
            )
        };
        if opened >= args.nodes {
            break;
        }
        if opened != last_opened {
            last_opened = opened;
            last_open_at = Instant::now();
        }
        // Past every deadline, wait on while nodes keep opening: a controller
        // working through a burst of deadline openings at its QPS limit is
        // late, not stuck, and its lateness belongs in deadline_error_ms.
        if Instant::now() > give_up && last_open_at.elapsed() > args.grace {
            log(format!(
                "giving up: {opened} of {} nodes opened",
                args.nodes
            ));
            break;
        }
        if !controller.running() {
            log("the controller exited during the run");
            break;
        }
        if last_progress.elapsed() > Duration::from_secs(10) {
            last_progress = Instant::now();
            log(format!("{opened}/{} opened ({seen} seen)", args.nodes));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    log("all nodes settled; lingering 3s to catch late writes");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = metrics::scrape(&admin).await?;
    sampling.abort();
    let usage: BTreeMap<String, procstat::Usage> = {
        let mut s = lock(&sampler);
        s.sample();
        s.usage().into_iter().collect()
    };
    controller.stop(Duration::from_secs(5));
    observer.stop();

    let mut control_plane = usage.clone();
    let controller_usage = control_plane
        .remove("controller")
        .context("the controller was never sampled")?;
    let driver = control_plane.remove("benchmark driver");
    let result = {
        let r = lock_record(&record);
        report::compute(report::Inputs {
            config: report::RunConfig {
                nodes: args.nodes,
                daemonsets: args.daemonsets,
                stuck_nodes: stuck.len(),
                unrelated_pods: args.unrelated_pods,
                controller: command.clone(),
                taint: args.taint.clone(),
                timeout_s: args.timeout.as_secs_f64(),
                ready_after: humantime::format_duration(args.ready_after).to_string(),
                ready_after_max: humantime::format_duration(args.ready_after_max).to_string(),
                kwok_parallelism: args.kwok_parallelism,
            },
            machine,
            record: &r,
            timeout: args.timeout,
            proxy: proxy.snapshot(),
            controller: controller_usage,
            control_plane,
            driver,
            apiserver: metrics::delta(&before, &after),
            apiserver_labels: after.label_names.iter().cloned().collect(),
            apiserver_node_patch: metrics::node_patch_latency(&before, &after),
            create_started,
            create_s,
        })
    };
    println!("{}", report::table(&result));
    let json = serde_json::to_string_pretty(&result)?;
    if let Some(path) = &out {
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        log(format!("result written to {}", path.display()));
    }
    if result.premature_opens > 0 || result.never_opened > 0 {
        log(format!(
            "correctness check failed: {} premature opens, {} never opened (controller log: {}; cluster logs: {})",
            result.premature_opens,
            result.never_opened,
            log_path.display(),
            cluster.logs_dir().display()
        ));
    }
    drop(observer);
    drop(cluster);
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn lock_record(r: &Mutex<observe::Record>) -> std::sync::MutexGuard<'_, observe::Record> {
    lock(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_substituted() {
        let s = expand(
            "{nodegate} run --timeout {timeout} --kubeconfig {kubeconfig} --taint {taint}",
            &[
                ("kubeconfig", "/k".into()),
                ("timeout", "120s".into()),
                ("taint", "a:NoSchedule".into()),
                ("nodegate", "/bin/ng".into()),
            ],
        );
        assert_eq!(
            s,
            "/bin/ng run --timeout 120s --kubeconfig /k --taint a:NoSchedule"
        );
    }

    #[test]
    fn taints_need_a_key_and_a_holding_effect() {
        assert_eq!(
            parse_taint("nodegate.dev/initializing:NoSchedule").unwrap(),
            (
                "nodegate.dev/initializing".to_string(),
                "NoSchedule".to_string()
            )
        );
        assert!(parse_taint("x:PreferNoSchedule").is_err());
        assert!(parse_taint("nokey").is_err());
    }
}
