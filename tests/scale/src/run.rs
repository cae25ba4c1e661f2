//! One benchmark run: a fresh control plane, the controller under test
//! started against the counting proxy, the DaemonSets, N nodes joining at
//! once, the watch until every node opened or gave up, and the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::args::{Args, expand, parse_taint};
use crate::workload::ReadyDelay;
use crate::{
    client_for, cluster, floor, lock, log, machine_facts, metrics, observe, procstat, proxy,
    report, workload,
};

/// What one run needs besides the flags.
pub struct RunSpec<'a> {
    /// The command line with {nodegate} and {nodegate_b} filled in.
    pub template: &'a str,
    /// The state directory for deploy/local.
    pub state_dir: PathBuf,
    /// Where the controller's log goes.
    pub log_path: PathBuf,
    /// Where the repository is (deploy/local).
    pub repo: &'a Path,
}

/// The controller process, in a process group of its own, so that what it
/// starts (a profiler's wrapper runs nodegate as its child) is stopped with
/// it; killed when dropped. The group is signalled only while its leader is
/// not reaped: until then no other process can have its id.
pub struct Controller {
    child: Child,
    reaped: bool,
}

impl Controller {
    /// Starts `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> std::io::Result<Controller> {
        use std::os::unix::process::CommandExt as _;
        let child = command.process_group(0).spawn()?;
        Ok(Controller {
            child,
            reaped: false,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the leader still runs (reaping it if it exited).
    pub fn running(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(None) => true,
            _ => {
                self.reaped = true;
                false
            }
        }
    }

    /// Sends `signal` to every process of the group, if its leader is not
    /// reaped yet.
    fn signal_group(&self, signal: &str) {
        if self.reaped {
            return;
        }
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), "--", &format!("-{}", self.pid())])
            .stderr(Stdio::null())
            .status();
    }

    /// SIGTERM to the group, then SIGKILL to what is left after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if self.reaped {
            return;
        }
        self.signal_group("TERM");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && procstat::group_alive(self.pid()) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.signal_group("KILL");
        let _ = self.child.wait();
        self.reaped = true;
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal_group("KILL");
            let _ = self.child.wait();
        }
    }
}

/// Runs the benchmark once and returns its result (also printed as a table).
pub async fn run_once(args: &Args, spec: RunSpec<'_>) -> anyhow::Result<report::Result> {
    let taint = parse_taint(&args.taint)?;
    let repo = spec.repo;
    let log_path = spec.log_path;
    let template = spec.template.to_string();
    let state_dir = spec.state_dir;
    let stuck = workload::stuck_nodes(args.nodes, args.stuck_percent, args.seed);
    let machine = machine_facts();

    log(format!(
        "starting the control plane in {}",
        state_dir.display()
    ));
    let cluster = cluster::Cluster::up(repo, &state_dir, args.keep_cluster)?;
    let tuned = args.kwok_parallelism > 0 && !args.deploy_local_stages;
    if args.kwok_parallelism > 0 {
        cluster.tune(&cluster::Tuning {
            parallelism: args.kwok_parallelism,
            heartbeat: args.kwok_heartbeat,
            deploy_local_stages: args.deploy_local_stages,
        })?;
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
    let ca = proxy::cluster_ca(&cluster.kubeconfig)?;
    let proxy = proxy::Proxy::start(client_for(&cluster.kubeconfig).await?).await?;
    let controller_kubeconfig = state_dir.join("controller.kubeconfig");
    std::fs::write(&controller_kubeconfig, proxy.kubeconfig(ca.as_deref()))
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
    let http_addr = floor::free_addr()?;
    let command = expand(
        &template,
        &[
            ("kubeconfig", controller_kubeconfig.display().to_string()),
            ("timeout", timeout_arg),
            ("taint", args.taint.clone()),
            ("http_addr", http_addr.clone()),
        ],
    );
    log(format!(
        "controller: {command}  (log: {})",
        log_path.display()
    ));
    let log_file = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut controller = Controller::spawn(
        Command::new("bash")
            .arg("-c")
            .arg(format!("exec {command}"))
            .env("KUBECONFIG", &controller_kubeconfig)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file),
    )
    .context("cannot start the controller")?;
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

    // The floor probes go through a proxy of their own (same code, same
    // hop), so that the controller's counts stay its own.
    let samples = Arc::new(Mutex::new(floor::Samples::default()));
    let prober = if args.no_floor {
        None
    } else {
        let probe_proxy = proxy::Proxy::start(client_for(&cluster.kubeconfig).await?).await?;
        let probe_kubeconfig = state_dir.join("probe.kubeconfig");
        std::fs::write(&probe_kubeconfig, probe_proxy.kubeconfig(ca.as_deref()))
            .with_context(|| format!("writing {}", probe_kubeconfig.display()))?;
        Some(floor::start(
            client_for(&probe_kubeconfig).await?,
            Arc::clone(&record),
            args.daemonsets,
            Arc::clone(&samples),
        ))
    };

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
            let r = lock(&record);
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
    if let Some(p) = &prober {
        p.abort();
    }
    let controller_own = floor::scrape(&http_addr)
        .await
        .map(|page| floor::own_share(&page));
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
        let r = lock(&record);
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
                kwok_stages: if args.deploy_local_stages || args.kwok_parallelism == 0 {
                    "deploy/local".into()
                } else {
                    "bench".into()
                },
                kwok_heartbeat_s: tuned.then_some(args.kwok_heartbeat.as_secs_f64()),
                node_monitor_grace_s: tuned
                    .then(|| cluster::node_monitor_grace(args.kwok_heartbeat).as_secs_f64()),
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
            floor: prober.is_some().then_some(&*lock(&samples)),
            controller_own,
        })
    };
    println!("{}", crate::table::table(&result));
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
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stopping_the_controller_stops_what_its_wrapper_started() {
        let pid_file = std::env::temp_dir().join(format!(
            "nodegate-scale-wrapper-{}-{}.pid",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        // Like a profiler's wrapper: the program runs as the wrapper's child,
        // and a SIGTERM to the wrapper alone would leave it running.
        // The child sleeps 30 s at most, so that a failure leaves nothing
        // for long; neither holds the test's output open.
        let mut controller = Controller::spawn(
            Command::new("bash")
                .arg("-c")
                .arg(format!("sleep 30 & echo $! > {}; wait", pid_file.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
        .expect("start the wrapper");
        let deadline = Instant::now() + Duration::from_secs(10);
        let pid: u32 = loop {
            let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if let Some(pid) = pid.strip_suffix('\n') {
                break pid.parse().expect("the pid the wrapper wrote");
            }
            assert!(
                Instant::now() < deadline,
                "the wrapper never started its child"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let (_, started) = procstat::state_and_start(pid).expect("the wrapper's child runs");
        controller.stop(Duration::from_secs(5));
        let _ = std::fs::remove_file(&pid_file);
        // Ended: gone, a zombie until init reaps it, or its pid reused.
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some((state, start)) = procstat::state_and_start(pid) {
            if start != started || state == "Z" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the wrapper's child {pid} still runs after stop (state {state})"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!controller.running());
    }
}
