//! End-to-end test support: a real local control plane per test.
//!
//! `TestCluster::start()` starts etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok with `deploy/local/up` in a fresh state directory
//! and stops them again when the value is dropped. Setting
//! `NODEGATE_E2E_KUBECONFIG` points every test at an existing cluster instead
//! (the tests then share it: run them one at a time with `--test-threads=1`).
//!
//! There is no fallback: when no cluster can be had the test panics with the
//! reason, so an e2e test can never pass without having run.

pub mod chaos;
pub mod gate;
pub mod karpenter;
pub mod owners;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

/// The repository this test runs in. Cargo sets `CARGO_MANIFEST_DIR` when it
/// runs a test, so a test binary built from a clone elsewhere (the build cache
/// is shared between clones) still finds this clone's scripts.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// The `nodegate` binary cargo built with the test binary running this:
/// `target/PROFILE/nodegate`, beside `target/PROFILE/deps` where the test
/// binaries are (cargo builds a package's binaries before its integration
/// tests).
pub fn nodegate_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's own path");
        let bin = exe
            .parent()
            .and_then(Path::parent)
            .map(|dir| dir.join("nodegate"))
            .unwrap_or_else(|| panic!("{} has no grandparent directory", exe.display()));
        assert!(
            bin.is_file(),
            "no nodegate binary at {} (beside the test binary {}): build it with `cargo test` or tests/run",
            bin.display(),
            exe.display()
        );
        bin
    })
    .clone()
}

pub fn local_script(name: &str) -> PathBuf {
    repo_root().join("deploy/local").join(name)
}

/// A binary of the local control plane's build (`deploy/local/build
/// --print-dir`, asked once per test binary), e.g. `kubectl`; the bare name
/// (found on PATH) when the build script cannot say.
pub fn local_bin(name: &str) -> PathBuf {
    static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        match Command::new(local_script("build"))
            .arg("--print-dir")
            .output()
        {
            Ok(o) if o.status.success() => {
                Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            }
            _ => None,
        }
    });
    match dir {
        Some(dir) => dir.join(name),
        None => PathBuf::from(name),
    }
}

pub struct TestCluster {
    pub client: Client,
    pub kubeconfig: PathBuf,
    /// Set when this value started the cluster and must stop it.
    state_dir: Option<PathBuf>,
    /// Held while a real node runs (one per machine): released after the
    /// cluster is stopped, as the field drops after `Drop::drop`.
    _real_node_lock: Option<std::fs::File>,
}

impl TestCluster {
    /// A running cluster for one test; panics (failing the test) when none can
    /// be had.
    pub async fn start(test_name: &str) -> TestCluster {
        Self::start_with(test_name, &[], None).await
    }

    /// A cluster with a real node beside the kwok ones (`deploy/local/up
    /// --real-node`: containerd, runc, a kubelet registering
    /// `real-node-1` with the startup taint, kube-proxy). One real node
    /// runs per machine: the test waits for a lock until no other test's
    /// real node runs.
    pub async fn start_real_node(test_name: &str) -> TestCluster {
        let lock = Self::real_node_lock(test_name);
        Self::start_real_node_locked(test_name, lock).await
    }

    /// The machine's one real node, held until the file is dropped (or
    /// handed to [`TestCluster::start_real_node_locked`]): for a test that
    /// must prepare the host before its real node starts.
    pub fn real_node_lock(test_name: &str) -> std::fs::File {
        let path = std::env::temp_dir().join("nodegate-e2e-real-node.lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        let waited = Instant::now();
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
        if waited.elapsed() > Duration::from_secs(1) {
            eprintln!(
                "[e2e {test_name}] waited {:.0}s for another test's real node",
                waited.elapsed().as_secs_f64()
            );
        }
        lock
    }

    /// A cluster with a real node, under a lock from
    /// [`TestCluster::real_node_lock`].
    pub async fn start_real_node_locked(test_name: &str, lock: std::fs::File) -> TestCluster {
        Self::start_with(test_name, &["--real-node"], Some(lock)).await
    }

    /// A cluster with the lab's registry (`up --registry`) and no real node.
    pub async fn start_with_registry(test_name: &str) -> TestCluster {
        Self::start_with(test_name, &["--registry"], None).await
    }

    /// A cluster with a real node and the lab's registry (`up --registry`:
    /// TLS with the cluster's own CA, which the real node's containerd
    /// trusts through certs.d), under a lock from
    /// [`TestCluster::real_node_lock`].
    pub async fn start_real_node_with_registry(
        test_name: &str,
        lock: std::fs::File,
    ) -> TestCluster {
        Self::start_with(test_name, &["--real-node", "--registry"], Some(lock)).await
    }

    async fn start_with(
        test_name: &str,
        extra: &[&str],
        lock: Option<std::fs::File>,
    ) -> TestCluster {
        if let Ok(path) = std::env::var("NODEGATE_E2E_KUBECONFIG") {
            let kubeconfig = PathBuf::from(path);
            let client = client_for(&kubeconfig).await;
            return TestCluster {
                client,
                kubeconfig,
                state_dir: None,
                _real_node_lock: lock,
            };
        }
        let base = std::env::var_os("NODEGATE_E2E_STATE_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("nodegate-e2e"));
        std::fs::create_dir_all(&base)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", base.display()));
        // A directory no other run has: a name made of the pid alone could
        // be a directory a killed run left, whose processes may still run.
        let state_dir = tempfile::Builder::new()
            .prefix(&format!("{test_name}-"))
            .tempdir_in(&base)
            .unwrap_or_else(|e| panic!("cannot make a state directory in {}: {e}", base.display()))
            .keep();
        let started = Instant::now();
        // Two tries: a start-up can lose a race for the machine with the
        // clusters of tests running beside it; a second failure is real.
        let mut tries = 0;
        let out = loop {
            tries += 1;
            let out = Command::new(local_script("up"))
                .arg("--state-dir")
                .arg(&state_dir)
                .arg("--quiet")
                .args(extra)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run deploy/local/up: {e}"));
            if out.status.success() {
                break out;
            }
            // Leave nothing running behind a failed start.
            let _ = Command::new(local_script("down"))
                .arg("--state-dir")
                .arg(&state_dir)
                .output();
            let stderr = String::from_utf8_lossy(&out.stderr);
            if tries == 2 {
                panic!(
                    "deploy/local/up failed twice ({}): no cluster for e2e test {test_name}\n{stderr}",
                    out.status
                );
            }
            eprintln!("[e2e {test_name}] cluster start-up failed, trying once more:\n{stderr}");
            // Everything of the failed start is stopped (`down` above); its
            // state goes, the directory stays for the second try.
            let _ = std::fs::remove_dir_all(&state_dir);
            let _ = std::fs::create_dir_all(&state_dir);
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let kubeconfig = stdout
            .lines()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("deploy/local/up printed no KUBECONFIG line: {stdout}"));
        eprintln!(
            "[e2e {test_name}] cluster up in {:.1}s at {}",
            started.elapsed().as_secs_f64(),
            state_dir.display()
        );
        let client = client_for(&kubeconfig).await;
        TestCluster {
            client,
            kubeconfig,
            state_dir: Some(state_dir),
            _real_node_lock: lock,
        }
    }

    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// Creates a namespace for the test's objects.
    pub async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))
            .expect("static namespace manifest");
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("cannot create namespace {name}: {e}"),
        }
    }

    pub async fn create_node(&self, node: &Node) -> Node {
        let api: Api<Node> = Api::all(self.client.clone());
        api.create(&PostParams::default(), node)
            .await
            .unwrap_or_else(|e| panic!("cannot create node {:?}: {e}", node.metadata.name))
    }

    /// Runs the cluster's own kubectl against it (for failure output).
    pub fn kubectl(&self, args: &[&str]) -> String {
        match Command::new(local_bin("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
        {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("(kubectl failed to run: {e})"),
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let Some(dir) = &self.state_dir else { return };
        if std::env::var_os("NODEGATE_E2E_KEEP").is_some() {
            eprintln!(
                "NODEGATE_E2E_KEEP set: cluster left running; stop it with deploy/local/down --state-dir {}",
                dir.display()
            );
            return;
        }
        let _ = Command::new(local_script("down"))
            .arg("--state-dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

pub async fn client_for(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig {}: {e}", kubeconfig.display()));
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("bad kubeconfig {}: {e}", kubeconfig.display()));
    Client::try_from(config).unwrap_or_else(|e| panic!("cannot build a client: {e}"))
}

/// A kwok-managed fake node with the given labels and taints
/// (`(key, value, effect)`, empty value for none).
pub fn fake_node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str, &str)]) -> Node {
    let mut all_labels = serde_json::Map::new();
    all_labels.insert("kubernetes.io/hostname".into(), json!(name));
    all_labels.insert("type".into(), json!("kwok"));
    for (k, v) in labels {
        all_labels.insert((*k).into(), json!(v));
    }
    let taints: Vec<_> = taints
        .iter()
        .map(|(k, v, e)| {
            if v.is_empty() {
                json!({"key": k, "effect": e})
            } else {
                json!({"key": k, "value": v, "effect": e})
            }
        })
        .collect();
    let resources = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": {"taints": taints},
        "status": {"allocatable": resources, "capacity": resources},
    }))
    .expect("fake node manifest is a valid Node")
}

/// Polls `check` until it returns `Ok`, or panics with `what` and the last
/// state it reported after `timeout`. For the state of API objects, prefer
/// [`watch_until`]: it sees each change as it happens instead of every 200 ms.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    wait_for_or(what, timeout, check, String::new).await
}

/// [`wait_for`], with `detail` (logs, say) added to the panic: asked once,
/// when the wait has failed, not on every poll (a `kubectl logs` a poll
/// costs more than the wait it explains).
pub async fn wait_for_or<T, F, Fut, D>(what: &str, timeout: Duration, mut check: F, detail: D) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
    D: FnOnce() -> String,
{
    let started = Instant::now();
    let deadline = started + timeout;
    loop {
        let last = match check().await {
            Ok(v) => {
                note_long_wait(what, started);
                return v;
            }
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}; last seen: {last}\n{}",
                detail()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prints a wait that took seconds (shown with a failure or `--nocapture`):
/// where a slow test spends its time.
fn note_long_wait(what: &str, started: Instant) {
    let took = started.elapsed();
    if took >= Duration::from_secs(3) {
        eprintln!("[wait] {what}: {:.1}s", took.as_secs_f64());
    }
}

/// Watches the objects of `api` that `config` selects (e.g. one by
/// `fields("metadata.name=NAME")`) until `check`, given all of them after
/// each change the watch delivers, returns `Ok`; panics with `what` and the
/// last state `check` reported after `timeout`. No polling: a change is seen
/// when it happens, and nothing is asked of the API server in between.
pub async fn watch_until<K, T, F>(
    api: &Api<K>,
    config: kube::runtime::watcher::Config,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(&[&K]) -> Result<T, String>,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let key = |o: &K| {
        let m = o.meta();
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or(""),
            m.name.as_deref().unwrap_or("")
        )
    };
    let started = Instant::now();
    let mut last = "the watch delivered nothing".to_string();
    let mut stream = watcher(api.clone(), config).default_backoff().boxed();
    let mut seen: std::collections::BTreeMap<String, K> = Default::default();
    let mut listing: std::collections::BTreeMap<String, K> = Default::default();
    let found = tokio::time::timeout(timeout, async {
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init) => {
                    listing.clear();
                    continue;
                }
                Ok(watcher::Event::InitApply(o)) => {
                    listing.insert(key(&o), o);
                    continue;
                }
                Ok(watcher::Event::InitDone) => seen = std::mem::take(&mut listing),
                Ok(watcher::Event::Apply(o)) => {
                    seen.insert(key(&o), o);
                }
                Ok(watcher::Event::Delete(o)) => {
                    seen.remove(&key(&o));
                }
                Err(e) => {
                    last = format!("watch error: {e}");
                    continue;
                }
            }
            let all: Vec<&K> = seen.values().collect();
            match check(&all) {
                Ok(v) => return Some(v),
                Err(state) => last = state,
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(v)) => {
            note_long_wait(what, started);
            v
        }
        Ok(None) => panic!("the watch for {what} ended; last seen: {last}"),
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}"),
    }
}

/// [`watch_until`] for the one object `name`: `check` is given it, or
/// `None` while there is none.
pub async fn watch_one<K, T, F>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    mut check: F,
) -> T
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: FnMut(Option<&K>) -> Result<T, String>,
{
    let config = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    watch_until(api, config, what, timeout, |all| {
        check(all.first().copied())
    })
    .await
}

/// A `nodegate run` process against a test cluster, its output in a log file.
pub struct Nodegate {
    child: std::process::Child,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Nodegate {
    /// Starts the real binary with `args` after `run`.
    pub fn start(cluster: &TestCluster, args: &[&str]) -> Nodegate {
        Self::start_as(&cluster.kubeconfig, &[], args)
    }

    /// Starts the real binary with `args` after `run`, with its credentials
    /// from `kubeconfig` (e.g. one carrying only a ServiceAccount token) and
    /// extra environment variables (e.g. POD_NAME, POD_NAMESPACE).
    pub fn start_as(kubeconfig: &Path, env: &[(&str, &str)], args: &[&str]) -> Nodegate {
        remember_panics();
        let dir = tempfile::tempdir().expect("temp dir for nodegate log");
        let log = dir.path().join("nodegate.log");
        let out = std::fs::File::create(&log).expect("create nodegate log");
        let err = out.try_clone().expect("clone log handle");
        // Every journal event of every gate goes to the log, so a failing
        // test prints the trace of why each gate did what it did.
        let mut args: Vec<&str> = args.to_vec();
        if !args.contains(&"--log-level") {
            args.extend(["--log-level", "info,nodegate_actors=debug"]);
        }
        // Tests run side by side, several nodegates each: every one serves
        // HTTP on a free loopback port (see `Nodegate::http_addr`), never on
        // the default 0.0.0.0:8080.
        if !args.contains(&"--http-addr") {
            args.extend(["--http-addr", "127.0.0.1:0"]);
        }
        // The debug listener likewise (see `Nodegate::debug_addr`).
        if !args.contains(&"--debug-addr") {
            args.extend(["--debug-addr", "127.0.0.1:0"]);
        }
        let child = Command::new(nodegate_bin())
            .arg("run")
            .args(&args)
            .env("KUBECONFIG", kubeconfig)
            .env("NO_COLOR", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nodegate: {e}"));
        Nodegate {
            child,
            log,
            _dir: dir,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"))
    }

    /// SIGKILL: the process dies with no chance to clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `timeout` for a clean exit; returns the exit
    /// status, or `None` if it had to be killed.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.signal_term();
        self.wait_exit(timeout)
    }

    /// SIGTERM, without waiting (the child is not reaped yet, so its pid
    /// is still its own).
    pub fn signal_term(&self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
    }

    /// Waits up to `timeout` for the process to exit by itself; its exit
    /// status, or `None` if it was still running (it is then killed).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        None
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Lines of a nodegate log printed when a test fails; the whole log is kept
/// on disk and its path printed.
const LOG_TAIL_LINES: usize = 80;

thread_local! {
    /// The message of the panic this thread is unwinding from, if any, so the
    /// log dumps printed while it unwinds can end with it again: a CI that
    /// shows only a failure's last lines then still shows why it failed.
    static PANIC_MESSAGE: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Installs (once) a panic hook that remembers the panic's message for
/// [`PANIC_MESSAGE`] before the default hook prints it.
fn remember_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(a panic without a message)".into());
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            PANIC_MESSAGE.with(|m| *m.borrow_mut() = Some(format!("{text}{at}")));
            previous(info);
        }));
    });
}

impl Drop for Nodegate {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            return;
        }
        // Keep the whole log: the temp dir would be removed with `self`.
        let kept = std::env::temp_dir().join(format!(
            "nodegate-failed-{}-{}.log",
            std::process::id(),
            self.child.id()
        ));
        let whole = match std::fs::copy(&self.log, &kept) {
            Ok(_) => kept.display().to_string(),
            Err(e) => format!("(not kept: {e})"),
        };
        let logs = self.logs();
        let lines: Vec<&str> = logs.lines().collect();
        let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
        eprintln!(
            "---- nodegate log, last {} of {} lines (whole log: {whole}) ----\n{tail}\n---- end of nodegate log ----",
            lines.len().min(LOG_TAIL_LINES),
            lines.len(),
        );
        PANIC_MESSAGE.with(|m| {
            if let Some(msg) = m.borrow().as_deref() {
                let head: Vec<&str> = msg.lines().take(40).collect();
                eprintln!("---- the failure, again ----\n{}", head.join("\n"));
            }
        });
    }
}

impl Nodegate {
    /// The address the HTTP server bound (`--http-addr`, port 0 in tests),
    /// read from its `listening on ADDR` log line; waits up to `timeout`.
    pub fn http_addr(&self, timeout: Duration) -> String {
        self.logged_addr("listening on ", timeout)
    }

    /// The address the debug listener bound (`--debug-addr`, port 0 in
    /// tests), read from its `debug listener on ADDR` log line.
    pub fn debug_addr(&self, timeout: Duration) -> String {
        self.logged_addr("debug listener on ", timeout)
    }

    fn logged_addr(&self, marker: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let logs = self.logs();
            if let Some(addr) = logs.lines().find_map(|l| {
                let rest = &l[l.find(marker)? + marker.len()..];
                rest.split(|c: char| c.is_whitespace() || c == '"')
                    .next()
                    .map(str::to_string)
            }) {
                return addr;
            }
            if Instant::now() >= deadline {
                panic!("nodegate logged no `{marker}` line within {timeout:?}:\n{logs}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One plain HTTP/1.1 GET (no client library needed for nodegate's own
/// endpoints): the status code and the body.
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("send GET {path}: {e}"))?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .map_err(|_| format!("GET {path}: no complete answer within 10s"))?
        .map_err(|e| format!("read GET {path}: {e}"))?;
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: malformed answer {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("GET {path}: no status in {head:?}"))?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// The value of the Prometheus sample `series` (the name with its labels
/// exactly as exported, e.g. `nodegate_leader` or
/// `nodegate_patch_attempts_total{kind="untaint",result="ok"}`).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
}

/// The admission policy's parameters as a leading nodegate with the default
/// taint flags writes them (`--admission-params`, nodegate's own
/// `params_data`), written here for tests that run the shipped policy with no
/// nodegate leading: without them the policy taints nothing.
pub async fn write_default_admission_params(client: &Client) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use nodegate_core::vocab::config::Config as GateConfig;
    let first = nodegate_core::rules::placement::ManagedTaint::new(
        "nodegate.dev/initializing",
        "NoSchedule",
    );
    let mut config = GateConfig {
        startup: nodegate_core::rules::startup::StartupTaints::new(
            Vec::new(),
            nodegate_core::rules::startup::DEFAULT_AUTOSCALERS,
            first.clone(),
        ),
        ..GateConfig::default()
    };
    config.placement.managed_taints = config.startup.managed(&[first]);
    let params = ConfigMap {
        metadata: ObjectMeta {
            name: Some("nodegate-admission".to_string()),
            namespace: Some("nodegate-system".to_string()),
            ..ObjectMeta::default()
        },
        data: Some(nodegate::cluster::admission_params::params_data(&config)),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), "nodegate-system")
        .create(&PostParams::default(), &params)
        .await
        .unwrap_or_else(|e| panic!("cannot write the admission policy's parameters: {e}"));
}
