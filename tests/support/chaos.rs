//! Fault injection for the chaos end-to-end tests, and the checks that judge
//! nodegate by what the API shows.
//!
//! Faults act on the real processes of the test's own cluster, found by the
//! pids `deploy/local/up` recorded in its state directory (`pids/COMPONENT`):
//!
//! - [`Faults::freeze`] / [`Faults::stall`]: SIGSTOP and SIGCONT of one
//!   component (the API server hangs every request meanwhile);
//! - [`Faults::stop`], [`Faults::start`], [`Faults::restart`]: the component
//!   killed and started again from its own command line and environment
//!   (`deploy/local/restart`), its new pid recorded where `down` finds it. A
//!   restarted kube-apiserver has a new watch cache, so every watch resumed
//!   from an older resourceVersion gets 410 Gone and re-lists;
//! - [`Faults::side_door`]: a second kube-apiserver on the same etcd, on a
//!   port no component knows, so that a test can change the cluster while the
//!   one everybody else talks to is down;
//! - [`Faults::kill`]: SIGKILL of a nodegate replica.
//!
//! Every fault is written into a timeline printed with any failure.
//!
//! The checks read the API only: [`opening_revision`] finds, by listing the
//! node at exact resourceVersions, the revision at which the gate's taint
//! went; [`unready_members_at`] lists the node's pods at that revision. A
//! failed check prints the node's journal from each replica's
//! `/debug/nodes/NAME`, the log lines that name the node and the timeline.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Display;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use kube::api::{Api, ListParams, VersionMatch};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::Value;

use super::gate::{NS, TAINT, has_gate_taint};
use super::{Nodegate, TestCluster, http_get, local_script, metric};

mod checks;
// Not every test binary that includes `support` uses every check.
#[allow(unused_imports)]
pub use checks::*;

/// Short lease settings (as in e2e_operations), so a failover fits in a test.
pub const ELECTION: &[&str] = &[
    "--leader-elect",
    "--lease-name",
    "nodegate-chaos",
    "--lease-namespace",
    "default",
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "1s",
];

/// The grace the checks give after a promised instant: a node must be seen
/// open by its deadline (or by the end of the fault, when that is later)
/// plus this.
pub const GRACE: Duration = Duration::from_secs(2);

pub struct Faults {
    state_dir: PathBuf,
    t0: Instant,
    t0_wall: Timestamp,
    timeline: Mutex<Vec<String>>,
}

impl Faults {
    /// The faults of `cluster`'s own processes; panics for a cluster this
    /// test did not start (`NODEGATE_E2E_KUBECONFIG`): faults need the pids.
    pub fn new(cluster: &TestCluster) -> Faults {
        let state_dir = cluster
            .state_dir()
            .unwrap_or_else(|| {
                panic!(
                    "the chaos tests stop and kill the cluster's own processes: they need a \
                     cluster of their own (unset NODEGATE_E2E_KUBECONFIG)"
                )
            })
            .to_path_buf();
        Faults {
            state_dir,
            t0: Instant::now(),
            t0_wall: Timestamp::now(),
            timeline: Mutex::default(),
        }
    }

    /// The pid of `component` (e.g. kube-apiserver), as `deploy/local/proc`
    /// verifies it: the process that cluster started, never a recycled pid.
    pub fn pid(&self, component: &str) -> u32 {
        let out = std::process::Command::new(local_script("proc"))
            .arg("pid")
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg(component)
            .output()
            .unwrap_or_else(|e| panic!("cannot run deploy/local/proc: {e}"));
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| {
                panic!(
                    "{component} is not running in {}: {}",
                    self.state_dir.display(),
                    String::from_utf8_lossy(&out.stderr).trim()
                )
            })
    }

    /// Writes `what` into the timeline, with the seconds since `new`.
    pub fn note(&self, what: impl Display) {
        let line = format!("{:7.2}s  {what}", self.t0.elapsed().as_secs_f64());
        eprintln!("[chaos] {line}");
        if let Ok(mut t) = self.timeline.lock() {
            t.push(line);
        }
    }

    /// `t` in seconds since `new`, as the timeline counts.
    pub fn at(&self, t: Instant) -> f64 {
        if t >= self.t0 {
            t.duration_since(self.t0).as_secs_f64()
        } else {
            -self.t0.duration_since(t).as_secs_f64()
        }
    }

    /// A wall-clock time in seconds since `new`, as the timeline counts.
    pub fn wall(&self, t: Timestamp) -> f64 {
        t.duration_since(self.t0_wall).as_secs_f64()
    }

    pub fn timeline(&self) -> String {
        self.timeline
            .lock()
            .map(|t| t.join("\n"))
            .unwrap_or_default()
    }

    /// Sends `sig` to `component` through `deploy/local/proc`, which signals
    /// only processes it can prove are this cluster's.
    fn signal(&self, component: &str, sig: &str) {
        let out = std::process::Command::new(local_script("proc"))
            .arg("signal")
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args([component, sig])
            .output()
            .unwrap_or_else(|e| panic!("cannot run deploy/local/proc: {e}"));
        assert!(
            out.status.success(),
            "SIG{sig} to {component} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }

    /// SIGSTOP of `component` until the guard is thawed or dropped.
    pub fn freeze(&self, component: &str) -> Frozen<'_> {
        let pid = self.pid(component);
        self.signal(component, "STOP");
        self.note(format!("SIGSTOP {component} (pid {pid})"));
        Frozen {
            faults: self,
            component: component.to_string(),
            pid,
            thawed: false,
        }
    }

    /// `component` stopped (SIGSTOP) for `pause`, then continued; returns
    /// when it was continued.
    pub async fn stall(&self, component: &str, pause: Duration) -> Instant {
        let frozen = self.freeze(component);
        tokio::time::sleep(pause).await;
        frozen.thaw()
    }

    async fn script(&self, args: &[&str]) -> String {
        let out = tokio::process::Command::new(local_script("restart"))
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .unwrap_or_else(|e| panic!("cannot run deploy/local/restart: {e}"));
        assert!(
            out.status.success(),
            "deploy/local/restart {args:?} failed ({}):\n{}\ntimeline:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.timeline()
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// SIGKILL of `component`; what it needs to start again is kept.
    pub async fn stop(&self, component: &str) {
        let pid = self.pid(component);
        self.script(&["--signal", "KILL", "--stop", component])
            .await;
        self.note(format!("SIGKILL {component} (pid {pid}); it is down"));
    }

    /// Starts `component` again as it was before `stop`; for an API server,
    /// returns once it answers /readyz.
    pub async fn start(&self, component: &str) -> Instant {
        let pid = self.script(&["--start", component]).await;
        self.note(format!("{component} started again (pid {pid}) and ready"));
        Instant::now()
    }

    /// SIGKILL of `component` and a start from its own command line;
    /// returns once it is ready again (see `start`).
    pub async fn restart(&self, component: &str) -> Instant {
        self.stop(component).await;
        self.start(component).await
    }

    /// A second kube-apiserver on the same etcd, on a free port no
    /// component knows; it is stopped when the value is dropped.
    pub async fn side_door(&self) -> SideDoor {
        let port = free_port();
        let name = "kube-apiserver-side";
        let pid = self
            .script(&[
                "--copy",
                name,
                "--set",
                &format!("--secure-port={port}"),
                "kube-apiserver",
            ])
            .await;
        self.note(format!(
            "side door: a second kube-apiserver (pid {pid}) on 127.0.0.1:{port}"
        ));
        let kubeconfig = self.state_dir.join("admin.kubeconfig");
        let kc = Kubeconfig::read_from(&kubeconfig).expect("admin kubeconfig");
        let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("admin kubeconfig is valid");
        config.cluster_url = format!("https://127.0.0.1:{port}")
            .parse()
            .expect("side door URL");
        SideDoor {
            client: Client::try_from(config).expect("side door client"),
            state_dir: self.state_dir.clone(),
            name: name.to_string(),
        }
    }

    /// SIGKILL of a nodegate replica.
    pub fn kill(&self, r: &mut Replica) {
        let pid = r.ng.pid();
        r.ng.kill();
        self.note(format!("SIGKILL nodegate {} (pid {pid})", r.name));
    }

    /// The last `n` lines of a component's log (logs/COMPONENT.log).
    pub fn log_tail(&self, component: &str, n: usize) -> String {
        let f = self.state_dir.join("logs").join(format!("{component}.log"));
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// A component stopped by SIGSTOP; continued by `thaw` or on drop.
pub struct Frozen<'a> {
    faults: &'a Faults,
    component: String,
    pid: u32,
    thawed: bool,
}

impl Frozen<'_> {
    pub fn thaw(mut self) -> Instant {
        self.cont();
        Instant::now()
    }

    fn cont(&mut self) {
        if !self.thawed {
            self.thawed = true;
            self.faults.signal(&self.component, "CONT");
            self.faults
                .note(format!("SIGCONT {} (pid {})", self.component, self.pid));
        }
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.cont();
    }
}

/// A second API server (see `Faults::side_door`).
pub struct SideDoor {
    pub client: Client,
    state_dir: PathBuf,
    name: String,
}

impl Drop for SideDoor {
    fn drop(&mut self) {
        let _ = std::process::Command::new(local_script("restart"))
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(["--signal", "KILL", "--stop", &self.name])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// One `nodegate run` with its HTTP address.
pub struct Replica {
    pub name: String,
    pub ng: Nodegate,
    pub addr: String,
}

impl Replica {
    /// Starts a replica named `name` (its POD_NAME, hence its lease
    /// identity) and waits until it answers /readyz.
    pub async fn start(cluster: &TestCluster, name: &str, args: &[&str]) -> Replica {
        let ng = Nodegate::start_as(&cluster.kubeconfig, &[("POD_NAME", name)], args);
        let addr = ng.http_addr(Duration::from_secs(30));
        let r = Replica {
            name: name.to_string(),
            ng,
            addr,
        };
        let start = Instant::now();
        while !matches!(http_get(&r.addr, "/readyz").await, Ok((200, _))) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{name} never became ready:\n{}",
                r.ng.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        r
    }

    pub async fn is_leader(&self) -> Option<bool> {
        let text = http_get(&self.addr, "/metrics").await.ok()?.1;
        metric(&text, "nodegate_leader").map(|v| v == 1.0)
    }

    pub async fn wait_leader(&self, within: Duration) {
        let start = Instant::now();
        while self.is_leader().await != Some(true) {
            assert!(
                start.elapsed() < within,
                "{} did not lead within {within:?}:\n{}",
                self.name,
                self.ng.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The entries of the gate's journal for `node`, as `/debug/nodes/NAME`
    /// serves them, or why there are none.
    pub async fn journal_entries(&self, node: &str) -> Result<Vec<Value>, String> {
        let debug = self.ng.debug_addr(Duration::from_secs(5));
        let (status, body) = http_get(&debug, &format!("/debug/nodes/{node}"))
            .await
            .map_err(|e| format!("{}: no answer: {e}", self.name))?;
        let v: Value =
            serde_json::from_str(&body).map_err(|_| format!("{}: {status}: {body}", self.name))?;
        v["journal"]
            .as_array()
            .cloned()
            .ok_or_else(|| format!("{}: {status}: no journal in {v}", self.name))
    }

    /// The gate's journal for `node`, one line per entry (long entries
    /// cut), or why there is none.
    pub async fn journal(&self, node: &str) -> String {
        // /debug/nodes is served on the debug listener only.
        let debug = self.ng.debug_addr(Duration::from_secs(5));
        let (status, body) = match http_get(&debug, &format!("/debug/nodes/{node}")).await {
            Ok(x) => x,
            Err(e) => return format!("    (no answer: {e})"),
        };
        let v: Value = match serde_json::from_str(&body) {
            Ok(v) => v,
            Err(_) => return format!("    ({status}: {body})"),
        };
        let Some(journal) = v["journal"].as_array() else {
            return format!("    ({status}: {v})");
        };
        let mut out = format!(
            "    phase={} live={} write={} opened={} stopped={} (dropped {})\n",
            v["phase"], v["live"], v["write"], v["opened"], v["stopped"], v["journal_dropped"]
        );
        for e in journal {
            let mut line = format!("    {} {}", e["at"].as_str().unwrap_or("?"), e["event"]);
            if line.len() > 400 {
                let mut cut = 400;
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
                line.push_str(" …");
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// The last `n` lines of this replica's log that name `node`.
    pub fn log_lines(&self, node: &str, n: usize) -> String {
        let logs = self.ng.logs();
        let lines: Vec<&str> = logs.lines().filter(|l| names(l, node)).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The last `n` lines about leadership.
    pub fn leadership_lines(&self, n: usize) -> String {
        let logs = self.ng.logs();
        let lines: Vec<&str> = logs
            .lines()
            .filter(|l| ["lease", "leader", "leading"].iter().any(|w| l.contains(w)))
            .collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The last `n` lines about leadership, watches and failed writes.
    pub fn trouble_lines(&self, n: usize) -> String {
        let logs = self.ng.logs();
        let lines: Vec<&str> = logs
            .lines()
            .filter(|l| {
                ["lease", "leader", "leading", "watch", "WARN", "ERROR"]
                    .iter()
                    .any(|w| l.contains(w))
            })
            .collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// Whether a log line names `node` (not merely a longer name it prefixes).
fn names(line: &str, node: &str) -> bool {
    line.match_indices(node).any(|(i, _)| {
        let after = line[i + node.len()..].chars().next();
        !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// What went wrong, per node; `conclude` panics with all of it.
#[derive(Default)]
pub struct Verdicts {
    failures: Vec<(String, String)>,
}

impl Verdicts {
    pub fn fail(&mut self, node: &str, what: impl Display) {
        eprintln!("[chaos] FAIL {node}: {what}");
        self.failures.push((node.to_string(), what.to_string()));
    }

    pub fn is_empty(&self) -> bool {
        self.failures.is_empty()
    }

    /// Panics when any check failed, with each failure, then for the first
    /// few nodes that failed: each replica's journal, the log lines naming
    /// the node, the replicas' leadership and watch lines, the API server's
    /// last lines and the fault timeline.
    ///
    /// `CHAOS_JOURNALS=NODE,NODE…` prints those nodes' journals in any case.
    pub async fn conclude(self, replicas: &[&Replica], faults: &Faults) {
        if let Ok(nodes) = std::env::var("CHAOS_JOURNALS") {
            for node in nodes.split(',').filter(|n| !n.is_empty()) {
                for r in replicas {
                    eprintln!(
                        "== {node}: journal at {}\n{}",
                        r.name,
                        r.journal(node).await
                    );
                }
            }
        }
        if self.failures.is_empty() {
            return;
        }
        let mut msg = String::from("chaos checks failed:\n");
        for (node, what) in &self.failures {
            msg.push_str(&format!("  {node}: {what}\n"));
        }
        let mut nodes: Vec<&str> = self.failures.iter().map(|(n, _)| n.as_str()).collect();
        nodes.dedup();
        for node in nodes.iter().take(3) {
            for r in replicas {
                msg.push_str(&format!(
                    "\n== {node}: journal at {} (/debug/nodes/{node})\n{}",
                    r.name,
                    r.journal(node).await
                ));
                msg.push_str(&format!(
                    "== {node}: {} log lines naming it\n{}\n",
                    r.name,
                    r.log_lines(node, 30)
                ));
            }
        }
        for r in replicas {
            msg.push_str(&format!(
                "\n== {}: leadership, watch and warning lines\n{}\n",
                r.name,
                r.trouble_lines(40)
            ));
        }
        msg.push_str(&format!(
            "\n== kube-apiserver log, last lines\n{}\n",
            faults.log_tail("kube-apiserver", 15)
        ));
        msg.push_str(&format!("\n== fault timeline\n{}\n", faults.timeline()));
        panic!("{msg}");
    }
}

/// Prints a test's wall time, cluster start and teardown included, when
/// dropped; create it first so that it is dropped last.
pub struct Stopwatch {
    test: &'static str,
    started: Instant,
}

impl Stopwatch {
    pub fn start(test: &'static str) -> Stopwatch {
        Stopwatch {
            test,
            started: Instant::now(),
        }
    }
}

impl Drop for Stopwatch {
    fn drop(&mut self) {
        eprintln!(
            "[chaos] {}: {:.1}s wall, cluster start and teardown included",
            self.test,
            self.started.elapsed().as_secs_f64()
        );
    }
}
