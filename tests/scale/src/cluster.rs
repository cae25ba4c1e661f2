//! The control plane under the benchmark: one `deploy/local/up` in a fresh
//! state directory, stopped again with `deploy/local/down` when the value is
//! dropped (also on error and Ctrl-C), unless the user asked to keep it.
//!
//! It also names the control plane's processes (verified by `deploy/local/proc`) so
//! their memory and CPU can be sampled next to the controller's. Nothing here
//! creates objects in the cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::time::Duration;

use anyhow::{Context as _, bail};

/// The repository the benchmark runs in.
pub fn repo_root() -> PathBuf {
    // The repository as the script that runs the binary names it (it runs
    // from there): the build cache is shared between checkouts, and a
    // binary built in one may be run from another, where the compile-time
    // path names the first one's files.
    if let Some(repo) = std::env::var_os("NODEGATE_SCALE_REPO") {
        return PathBuf::from(repo);
    }
    // tests/scale/ → the repository.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The components `deploy/local/up` starts, in its pid file names.
pub const COMPONENTS: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

pub struct Cluster {
    pub state_dir: PathBuf,
    pub kubeconfig: PathBuf,
    local_dir: PathBuf,
    keep: bool,
}

impl Cluster {
    /// Starts a control plane in `state_dir`, which must not hold a running one.
    pub fn up(repo: &Path, state_dir: &Path, keep: bool) -> anyhow::Result<Cluster> {
        let local_dir = repo.join("deploy/local");
        if state_dir.join("pids").is_dir() {
            bail!(
                "{} already holds a cluster; stop it with deploy/local/down --state-dir {} or pick another --state-dir",
                state_dir.display(),
                state_dir.display()
            );
        }
        let out = Command::new(local_dir.join("up"))
            .arg("--state-dir")
            .arg(state_dir)
            .arg("--quiet")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("cannot run {}", local_dir.join("up").display()))?;
        // From here on the state directory may hold processes: stop them on
        // every way out.
        let mut cluster = Cluster {
            state_dir: state_dir.to_path_buf(),
            kubeconfig: PathBuf::new(),
            local_dir,
            keep,
        };
        if !out.status.success() {
            bail!(
                "deploy/local/up failed ({}); its logs are in {}/logs",
                out.status,
                state_dir.display()
            );
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        cluster.kubeconfig = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .map(PathBuf::from)
            .with_context(|| format!("deploy/local/up printed no KUBECONFIG line: {stdout:?}"))?;
        Ok(cluster)
    }

    /// The pid of each component that is running, by name, as
    /// `deploy/local/proc` verifies it (never a recycled pid).
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        COMPONENTS
            .iter()
            .filter_map(|name| Some((*name, self.pid(name).ok()?)))
            .collect()
    }

    fn proc(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Command::new(self.local_dir.join("proc"))
            .arg(args[0])
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(&args[1..])
            .stdin(Stdio::null())
            .output()
            .context("running deploy/local/proc")
    }

    fn pid(&self, name: &str) -> anyhow::Result<u32> {
        let out = self.proc(&["pid", name])?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| {
                format!(
                    "{name} is not running: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    }

    /// Tunes the control plane for the benchmark: restarts kwok (and, with
    /// the benchmark's own stages, kube-controller-manager) with the
    /// settings below. Nothing of this touches deploy/local's files, so the
    /// end-to-end tests keep their cluster as it is.
    ///
    /// deploy/local starts kwok with its defaults: 4 workers each for pod
    /// stages, node stages and node leases, one INFO log line per status
    /// patch, three status patches per pod and a node status heartbeat every
    /// 20-45 s. Sized for a few test nodes, that makes the control plane the
    /// bottleneck at a thousand nodes, and the benchmark would measure it,
    /// not the controller. So kwok is restarted with the same arguments but
    /// its stages file, plus a KwokConfiguration raising the parallelism,
    /// `--v=WARN`, and (unless `deploy_local_stages`) the benchmark's stages
    /// (`tests/scale/kwok-stages.yaml`: one status patch per pod, a node
    /// heartbeat every `heartbeat`). kube-controller-manager is then restarted
    /// with `--node-monitor-grace-period` well above the heartbeat, so its
    /// node lifecycle controller never takes a quiet node for an unreachable
    /// one (which would mark all the node's pods not Ready).
    pub fn tune(&self, t: &Tuning) -> anyhow::Result<()> {
        let config = self.state_dir.join("kwok-bench.yaml");
        let mut text = format!(
            "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n  podPlayStageParallelism: {p}\n  nodePlayStageParallelism: {p}\n  nodeLeaseParallelism: {p}\n",
            p = t.parallelism
        );
        if !t.deploy_local_stages {
            text += "---\n";
            text += &bench_stages(t.heartbeat);
        }
        std::fs::write(&config, text).with_context(|| format!("writing {}", config.display()))?;
        let keep_stages = t.deploy_local_stages;
        self.restart("kwok", |args| {
            let mut out: Vec<String> = args
                .iter()
                .filter(|a| keep_stages || !a.starts_with("--config="))
                .cloned()
                .collect();
            out.push(format!("--config={}", config.display()));
            out.push("--v=WARN".into());
            out
        })?;
        if !t.deploy_local_stages {
            let grace = node_monitor_grace(t.heartbeat);
            self.restart("kube-controller-manager", |args| {
                let mut out: Vec<String> = args
                    .iter()
                    .filter(|a| !a.starts_with("--node-monitor-grace-period"))
                    .cloned()
                    .collect();
                out.push(format!("--node-monitor-grace-period={}s", grace.as_secs()));
                out
            })?;
        }
        Ok(())
    }

    /// Stops a component `up` started (through `deploy/local/proc`, which
    /// signals only that cluster's processes) and starts it again the same
    /// way with the arguments `edit` makes of its old ones, so that `down`
    /// stops it too.
    fn restart(
        &self,
        name: &str,
        edit: impl FnOnce(&[String]) -> Vec<String>,
    ) -> anyhow::Result<()> {
        let pid = self.pid(name)?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .with_context(|| format!("{name} (pid {pid}) is not running"))?;
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let Some((program, args)) = argv.split_first() else {
            bail!("{name} (pid {pid}) has an empty command line");
        };
        let args = edit(args);
        let stop = self.proc(&["stop", name, "--signal", "TERM", "--grace", "10"])?;
        if !stop.status.success() {
            bail!(
                "stopping {name} failed: {}",
                String::from_utf8_lossy(&stop.stderr).trim()
            );
        }
        let mut launch = vec!["launch", name, "--append", "--", program.as_str()];
        launch.extend(args.iter().map(String::as_str));
        let started = self.proc(&launch)?;
        if !started.status.success() {
            bail!(
                "restarting {name} ({program}) failed: {}",
                String::from_utf8_lossy(&started.stderr).trim()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
        if self.pid(name).is_err() {
            bail!(
                "the restarted {name} exited at once; see {}",
                self.logs_dir().join(format!("{name}.log")).display()
            );
        }
        Ok(())
    }

    /// Where the components write their logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
}

/// How the benchmark tunes kwok and kube-controller-manager (see
/// [`Cluster::tune`]).
#[derive(Debug, Clone)]
pub struct Tuning {
    pub parallelism: u32,
    pub heartbeat: Duration,
    pub deploy_local_stages: bool,
}

/// The benchmark's kwok stages, with the node heartbeat filled in: every
/// `heartbeat`, up to a quarter more at random so the nodes do not beat in
/// step.
pub fn bench_stages(heartbeat: Duration) -> String {
    let ms = heartbeat.as_millis();
    include_str!("../kwok-stages.yaml")
        .replace("__HEARTBEAT_MS__", &ms.to_string())
        .replace("__HEARTBEAT_JITTER_MS__", &(ms + ms / 4).to_string())
        .replace(
            "__HEARTBEAT__",
            &humantime::format_duration(heartbeat).to_string(),
        )
}

/// kube-controller-manager's node grace period for a heartbeat: twice the
/// longest gap between two heartbeats, and never below its own default
/// (50 s).
pub fn node_monitor_grace(heartbeat: Duration) -> Duration {
    let longest = heartbeat + heartbeat / 4;
    (longest * 2).max(Duration::from_secs(50))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.keep {
            eprintln!(
                "[scale] cluster kept: export KUBECONFIG={}; stop it with deploy/local/down --state-dir {}",
                self.kubeconfig.display(),
                self.state_dir.display()
            );
            return;
        }
        let status = Command::new(self.local_dir.join("down"))
            .arg("--state-dir")
            .arg(&self.state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!(
                "[scale] deploy/local/down --state-dir {} failed ({status:?}); stop it by hand",
                self.state_dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_get_the_heartbeat_and_no_placeholder_is_left() {
        let s = bench_stages(Duration::from_secs(120));
        assert!(s.contains("durationMilliseconds: 120000"));
        assert!(s.contains("jitterDurationMilliseconds: 150000"));
        assert!(!s.contains("__"), "a placeholder was left in the stages");
    }

    #[test]
    fn the_grace_period_outlasts_two_heartbeats() {
        assert_eq!(
            node_monitor_grace(Duration::from_secs(120)),
            Duration::from_secs(300)
        );
        assert_eq!(
            node_monitor_grace(Duration::from_secs(10)),
            Duration::from_secs(50)
        );
    }
}
