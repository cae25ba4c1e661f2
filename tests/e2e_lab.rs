//! The lab itself (deploy/local): it stops only what it started and removes
//! only the host state it created, whatever the files in a state directory
//! say, and clusters side by side never touch each other.
//!
//! A bad setting is refused before anything starts. The next two tests use
//! clusters of etcd alone (`up --etcd-only`): how a cluster's processes are
//! started, recorded, verified and stopped is the same for every component,
//! and etcd starts in about a second. The last needs a real node (root).

use nodegate_e2e as support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{TestCluster, local_script};

/// A fresh state directory under the e2e root (never one another run used).
fn state_dir(name: &str) -> PathBuf {
    let base = std::env::temp_dir().join("nodegate-e2e");
    std::fs::create_dir_all(&base).expect("create the e2e state root");
    tempfile::Builder::new()
        .prefix(&format!("{name}-"))
        .tempdir_in(&base)
        .expect("a fresh state directory")
        .keep()
}

fn run(script: &str, args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(local_script(script))
        .args(args)
        .arg("--state-dir")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run deploy/local/{script}: {e}"))
}

fn up_etcd(dir: &Path) {
    let out = run("up", &["--etcd-only", "--quiet"], dir);
    assert!(
        out.status.success(),
        "deploy/local/up --etcd-only failed in {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn down(dir: &Path) -> String {
    let out = run("down", &[], dir);
    assert!(
        out.status.success(),
        "deploy/local/down failed in {}:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A bad `NODEGATE_LOCAL_APF` or `NODEGATE_LOCAL_CONTROLLERS` is refused by
/// name before anything starts: the state directory stays empty.
#[test]
fn a_bad_cluster_setting_is_refused_before_anything_starts() {
    let settings = [
        ("NODEGATE_LOCAL_APF", "maybe", "on"),
        ("NODEGATE_LOCAL_CONTROLLERS", "some", "all"),
    ];
    for (var, bad, _) in settings {
        let dir = state_dir(&format!("bad-{}", var.to_lowercase().replace('_', "-")));
        let out = Command::new(local_script("up"))
            .args(["--quiet", "--state-dir"])
            .arg(&dir)
            // The others valid, so that only `var` can be refused.
            .envs(settings.iter().map(|(v, _, good)| (*v, *good)))
            .env(var, bad)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run deploy/local/up: {e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        let left: Vec<_> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name())).collect())
            .unwrap_or_default();
        if left.is_empty() {
            let _ = std::fs::remove_dir(&dir);
        } else {
            down(&dir); // what it started, before the test fails
        }
        assert!(!out.status.success(), "up accepted {var}={bad}");
        assert!(err.contains(&format!("{var}={bad}")), "{err}");
        assert!(left.is_empty(), "up started something: {left:?}\n{err}");
    }
}

/// The verified pid of `name` in the cluster of `dir`, if it runs.
fn verified_pid(dir: &Path, name: &str) -> Option<u32> {
    let out = Command::new(local_script("proc"))
        .args(["pid", "--state-dir"])
        .arg(dir)
        .arg(name)
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Fields 3 on of /proc/PID/stat (after the command name, which may hold
/// spaces).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Field 22 of /proc/PID/stat: when the process started, in ticks since boot.
fn start_time(pid: u32) -> Option<String> {
    stat_fields(pid)?.get(19).cloned()
}

/// Whether `pid` runs (a zombie that nobody reaped does not).
fn running(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .expect("boot id")
        .trim()
        .to_string()
}

/// A process that must outlive every `down` of this test; killed on drop.
struct Decoy(Child);

impl Decoy {
    /// `sleep` whose command line carries `tag` (a cluster's path, say), in
    /// a session of its own like a cluster's component.
    fn start(tag: &str) -> Decoy {
        Decoy::start_with(tag, &[])
    }

    /// [`Decoy::start`] with `env` added to its environment.
    fn start_with(tag: &str, env: &[(&str, &str)]) -> Decoy {
        let child = Command::new("setsid")
            .args(["bash", "-c", r#"exec -a "sleep $0" sleep 600"#, tag])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a decoy process");
        // Until setsid has made the session, the pid is not a group leader.
        std::thread::sleep(Duration::from_millis(200));
        Decoy(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// A pid record for it as `up` writes one: its pid, its true start time
    /// and the boot id.
    fn record(&self) -> String {
        let start = start_time(self.pid()).expect("decoy's start time");
        format!("{} {start} {}\n", self.pid(), boot_id())
    }

    fn alive(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn down_signals_no_process_it_cannot_prove_is_its_own() {
    let dir = state_dir("lab-decoy");
    up_etcd(&dir);
    let etcd = verified_pid(&dir, "etcd").expect("etcd runs after up");
    let etcd_started = start_time(etcd).expect("etcd's start time");
    let tag = dir.join("node").display().to_string();
    let mut bare = Decoy::start(&tag);
    let mut forged = Decoy::start(&tag);
    let mut named = Decoy::start(&tag);
    // The cluster's token on a line of its own inside another variable's
    // value: only a whole `NODEGATE_LOCAL_ID=…` entry is the token.
    let token = std::fs::read_to_string(dir.join("id")).expect("the cluster's token");
    let smuggled_value = format!("x\nNODEGATE_LOCAL_ID={}\n", token.trim());
    let mut smuggled = Decoy::start_with(&tag, &[("NODEGATE_E2E_NOTE", &smuggled_value)]);
    let pids = dir.join("pids");
    // A record as an old lab wrote it: the pid alone.
    std::fs::write(pids.join("kube-apiserver"), format!("{}\n", bare.pid())).unwrap();
    // A record forged with the decoy's true start time and boot id: only the
    // cluster's token in the environment is missing.
    std::fs::write(pids.join("karpenter"), forged.record()).unwrap();
    std::fs::write(pids.join("kube-scheduler"), smuggled.record()).unwrap();
    // The decoy `named` carries the cluster's path in its command line only.
    assert!(verified_pid(&dir, "kube-apiserver").is_none());
    assert!(verified_pid(&dir, "karpenter").is_none());
    assert!(verified_pid(&dir, "kube-scheduler").is_none());

    down(&dir);

    assert!(
        bare.alive(),
        "down killed a process named by a bare pid file"
    );
    assert!(
        forged.alive(),
        "down killed a process named by a forged record"
    );
    assert!(
        smuggled.alive(),
        "down killed a process whose environment holds the token inside another value"
    );
    assert!(
        named.alive(),
        "down killed a process whose command line names the cluster's path"
    );
    assert!(
        !(running(etcd) && start_time(etcd) == Some(etcd_started)),
        "etcd (pid {etcd}) still runs after down"
    );
    assert!(!dir.exists(), "down left {}", dir.display());
}

#[test]
fn two_clusters_side_by_side_never_stop_each_other() {
    // A third cluster runs throughout: nothing the pair does may touch it.
    let witness = state_dir("lab-witness");
    up_etcd(&witness);
    let witness_pid = verified_pid(&witness, "etcd").expect("etcd runs after up");
    let pair = [state_dir("lab-pair-a"), state_dir("lab-pair-b")];
    for round in 0..20 {
        // Even rounds start both at the same moment, odd rounds stop both
        // at the same moment, alternating which one is asked first.
        let order: Vec<&PathBuf> = if round % 4 < 2 {
            pair.iter().collect()
        } else {
            pair.iter().rev().collect()
        };
        std::thread::scope(|s| {
            for d in order {
                if round % 2 == 0 {
                    s.spawn(move || up_etcd(d));
                } else {
                    s.spawn(move || down(d));
                }
            }
        });
        for d in &pair {
            if round % 2 == 0 {
                assert!(
                    verified_pid(d, "etcd").is_some(),
                    "round {round}: {} lost etcd while the other started",
                    d.display()
                );
            } else {
                assert!(!d.exists(), "round {round}: down left {}", d.display());
                std::fs::create_dir_all(d).expect("state directory for the next round");
            }
        }
        assert_eq!(
            verified_pid(&witness, "etcd"),
            Some(witness_pid),
            "round {round}: the witness cluster lost etcd"
        );
        assert!(
            witness.join("pids").is_dir(),
            "round {round}: witness state lost"
        );
    }
    for d in &pair {
        let _ = std::fs::remove_dir(d);
    }
    down(&witness);
    assert!(
        !running(witness_pid),
        "the witness's etcd (pid {witness_pid}) still runs after down"
    );
}

/// Stand-in host state of another Kubernetes on the same machine.
struct StandIn {
    chain: &'static str,
    jump: Vec<String>,
    cgroups: Vec<PathBuf>,
}

impl StandIn {
    const CHAIN: &'static str = "KUBE-NODEGATE-STANDIN";

    fn create() -> StandIn {
        let ipt = |args: &[&str]| {
            let ok = Command::new("iptables")
                .args(args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "iptables {args:?} failed");
        };
        let _ = Command::new("iptables")
            .args(["-D", "INPUT", "-s", "203.0.113.7/32", "-j", Self::CHAIN])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("iptables")
            .args(["-F", Self::CHAIN])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("iptables")
            .args(["-X", Self::CHAIN])
            .stderr(Stdio::null())
            .status();
        ipt(&["-N", Self::CHAIN]);
        ipt(&["-A", Self::CHAIN, "-s", "203.0.113.7/32", "-j", "RETURN"]);
        let jump: Vec<String> = ["INPUT", "-s", "203.0.113.7/32", "-j", Self::CHAIN]
            .map(String::from)
            .to_vec();
        ipt(&["-A", "INPUT", "-s", "203.0.113.7/32", "-j", Self::CHAIN]);
        // Another runtime's cgroups: a child of its own under `k8s.io` in
        // three hierarchies, and `k8s.io` itself where none is there yet.
        let mut made = Vec::new();
        let mut cgroups = Vec::new();
        for h in ["pids", "memory", "cpu"] {
            let runtime = Path::new("/sys/fs/cgroup").join(h).join("k8s.io");
            if !runtime.exists() {
                std::fs::create_dir(&runtime)
                    .unwrap_or_else(|e| panic!("cannot make {}: {e}", runtime.display()));
                made.push(runtime.clone());
            }
            let child = runtime.join(format!("nodegate-standin-{}", std::process::id()));
            std::fs::create_dir(&child)
                .unwrap_or_else(|e| panic!("cannot make {}: {e}", child.display()));
            cgroups.push(child);
        }
        cgroups.extend(made.iter().cloned());
        StandIn {
            chain: Self::CHAIN,
            jump,
            cgroups,
        }
    }

    fn rules(&self) -> String {
        let out = Command::new("iptables")
            .args(["-S", self.chain])
            .output()
            .expect("run iptables");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn jump_present(&self) -> bool {
        Command::new("iptables")
            .arg("-C")
            .args(&self.jump)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = Command::new("iptables").arg("-D").args(&self.jump).status();
        let _ = Command::new("iptables").args(["-F", self.chain]).status();
        let _ = Command::new("iptables").args(["-X", self.chain]).status();
        // Children first (they come first), then any `k8s.io` made here.
        for d in &self.cgroups {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// Every KUBE-* chain on the host, as "COMMAND TABLE CHAIN".
fn kube_chains() -> Vec<String> {
    let mut found = Vec::new();
    for cmd in ["iptables", "ip6tables"] {
        for table in ["filter", "nat", "mangle"] {
            let Ok(out) = Command::new(cmd).args(["-t", table, "-S"]).output() else {
                continue;
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(chain) = line.strip_prefix("-N ")
                    && chain.starts_with("KUBE-")
                {
                    found.push(format!("{cmd} {table} {chain}"));
                }
            }
        }
    }
    found
}

#[tokio::test]
async fn a_real_node_removes_only_the_host_state_it_created() {
    // The machine's one real node is this test's before the stand-in is made,
    // so that no other test's node starts or stops beside it.
    let lock = TestCluster::real_node_lock("lab-host");
    // A second descriptor of the same lock keeps it held after the cluster
    // (and its copy) is gone, until the checks below are done.
    let _held = lock.try_clone().expect("a second descriptor of the lock");
    let stand_in = StandIn::create();
    let before = stand_in.rules();
    assert!(before.contains("203.0.113.7"), "stand-in chain: {before}");
    let chains_before = kube_chains();
    let started = Instant::now();
    let cluster = TestCluster::start_real_node_locked("lab-host", lock).await;
    let dir = cluster
        .state_dir()
        .expect("the test started its own cluster")
        .to_path_buf();
    let mut named = Decoy::start(&dir.join("node").display().to_string());
    assert!(
        stand_in.jump_present() && stand_in.rules() == before,
        "up --real-node changed another Kubernetes' iptables chain:\n{}",
        stand_in.rules()
    );
    drop(cluster); // deploy/local/down
    eprintln!(
        "[e2e lab] real node up and down in {:.0}s",
        started.elapsed().as_secs_f64()
    );

    assert!(
        named.alive(),
        "down killed a process naming the cluster's path"
    );
    assert_eq!(
        stand_in.rules(),
        before,
        "down changed another Kubernetes' iptables chain"
    );
    assert!(stand_in.jump_present(), "down removed the jump into it");
    for d in &stand_in.cgroups {
        assert!(d.is_dir(), "down removed the cgroup {}", d.display());
    }
    // What the node made is gone: every KUBE-* chain it made, and the bridge.
    let left: Vec<String> = kube_chains()
        .into_iter()
        .filter(|c| !chains_before.contains(c))
        .collect();
    assert!(left.is_empty(), "down left the node's chains: {left:?}");
    assert!(
        !Path::new("/sys/class/net/nodegate0").exists(),
        "down left the bridge"
    );
}
