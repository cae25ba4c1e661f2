//! The control plane under the benchmark: one `deploy/local/up` in a fresh
//! state directory, stopped again with `deploy/local/down` when the value is
//! dropped (also on error and Ctrl-C), unless the user asked to keep it.
//!
//! It also names the control plane's processes (from `up`'s pid files) so
//! their memory and CPU can be sampled next to the controller's. Nothing here
//! creates objects in the cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

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

    /// The pid of each component that is running, by name.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        COMPONENTS
            .iter()
            .filter_map(|name| {
                let text = std::fs::read_to_string(self.state_dir.join("pids").join(name)).ok()?;
                Some((*name, text.trim().parse().ok()?))
            })
            .collect()
    }

    /// Restarts kwok with more workers and quieter logs.
    ///
    /// deploy/local starts kwok with its defaults: 4 workers each for pod
    /// stages, node stages and node leases, and one INFO log line per status
    /// patch. Sized for a few test nodes, that makes the one kwok process the
    /// bottleneck at a thousand nodes: DaemonSet pods sit in
    /// ContainerCreating for minutes while kwok works through its queue, and
    /// the benchmark would measure kwok, not the controller. A real cluster has
    /// one kubelet per node working in parallel. So the benchmark stops the
    /// kwok that `up` started (by its pid file) and starts it again with the
    /// same arguments plus a KwokConfiguration raising the parallelism and
    /// `--v=WARN`, recording the new pid where `down` will find it. The stages
    /// (what kwok does to a pod) are untouched.
    pub fn tune_kwok(&self, parallelism: u32) -> anyhow::Result<()> {
        let pid_file = self.state_dir.join("pids/kwok");
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .with_context(|| format!("reading {}", pid_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("{} holds no pid", pid_file.display()))?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .with_context(|| format!("kwok (pid {pid}) is not running"))?;
        let argv: Vec<String> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let Some((program, args)) = argv.split_first() else {
            bail!("kwok (pid {pid}) has an empty command line");
        };
        let config = self.state_dir.join("kwok-bench.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n  podPlayStageParallelism: {parallelism}\n  nodePlayStageParallelism: {parallelism}\n  nodeLeaseParallelism: {parallelism}\n"
            ),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        // `up` made kwok a process group leader; stop the group as `down` would.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{pid}")])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            if Instant::now() > deadline {
                bail!("kwok (pid {pid}) did not stop within 10s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(self.logs_dir().join("kwok.log"))
            .context("opening kwok's log")?;
        let child = Command::new(program)
            .args(args)
            .arg(format!("--config={}", config.display()))
            .arg("--v=WARN")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("restarting kwok ({program})"))?;
        std::fs::write(&pid_file, format!("{}\n", child.id()))
            .with_context(|| format!("writing {}", pid_file.display()))?;
        std::thread::sleep(Duration::from_secs(1));
        if !std::path::Path::new(&format!("/proc/{}", child.id())).exists() {
            bail!(
                "the restarted kwok exited at once; see {}",
                self.logs_dir().join("kwok.log").display()
            );
        }
        Ok(())
    }

    /// Where the components write their logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
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
