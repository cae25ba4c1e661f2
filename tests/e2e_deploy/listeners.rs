//! Issue 37 §3: nothing a client of the HTTP port does can make nodegate's
//! probes fail. The kustomize base runs on the real node (its image, two
//! real pods whose probes are `nodegate probe` inside the container); the
//! test then holds 1,100 idle connections to each pod's :8080 for two
//! minutes, opening a new one for each the server closes, as a pod in the
//! cluster could. Neither container restarts, both stay Ready, and a node
//! created meanwhile is tainted at CREATE and opened by the gate.
//!
//! The real node runs one at a time on a machine, under its lock (see
//! real_node.rs, whose helpers are private to it: the few needed here are
//! written again, smaller).

use super::real_node::agent_daemonset;
use super::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use k8s_openapi::api::core::v1::Pod;
use tokio::net::TcpStream;

const REAL_NODE: &str = "real-node-1";
/// Idle connections held to each replica's HTTP port.
const HELD: usize = 1_100;
/// How long they are held.
const HOLD: Duration = Duration::from_secs(120);

fn state_dir(cluster: &TestCluster) -> PathBuf {
    cluster
        .state_dir()
        .expect("the real-node tests start their own cluster")
        .to_path_buf()
}

/// `$NODEGATE_IMAGE_ARCHIVE`, or what `deploy/image/build` prints.
fn image_archive() -> PathBuf {
    if let Some(p) = std::env::var_os("NODEGATE_IMAGE_ARCHIVE") {
        return PathBuf::from(p);
    }
    let out = must(
        "deploy/image/build",
        run(&repo_root().join("deploy/image/build"), &[], None),
    );
    PathBuf::from(out.stdout.trim())
}

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT))
}

/// nodegate's live pods: (name, IP, Ready, restarts).
async fn replicas(cluster: &TestCluster) -> Vec<(String, String, bool, i32)> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let lp = ListParams::default().labels("app.kubernetes.io/name=nodegate");
    let list = pods.list(&lp).await.map(|l| l.items).unwrap_or_default();
    list.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let status = p.status.unwrap_or_default();
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let restarts = status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            (
                p.metadata.name.unwrap_or_default(),
                status.pod_ip.unwrap_or_default(),
                ready,
                restarts,
            )
        })
        .collect()
}

/// Waits for `node` to carry `opened-at` and no startup taint.
async fn wait_opened(cluster: &TestCluster, node: &str) {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    wait_for(
        &format!("node {node} opened"),
        Duration::from_secs(90),
        || async {
            let n = nodes.get(node).await.map_err(|e| e.to_string())?;
            if annotation(&n, "nodegate.dev/opened-at").is_some() && !tainted(&n) {
                Ok(())
            } else {
                Err(format!(
                    "taints {:?}; logs:\n{}",
                    n.spec.and_then(|s| s.taints),
                    cluster.kubectl(&[
                        "-n",
                        NS,
                        "logs",
                        "-l",
                        "app.kubernetes.io/name=nodegate",
                        "--tail=20"
                    ])
                ))
            }
        },
    )
    .await;
}

fn annotation(n: &Node, key: &str) -> Option<String> {
    n.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key).cloned())
}

/// What the holders of one replica saw: connections opened, how many the
/// server closed, connects that failed, and the most held at once.
#[derive(Default)]
struct Held {
    opened: AtomicUsize,
    closed: AtomicUsize,
    refused: AtomicUsize,
    now: AtomicUsize,
    most: AtomicUsize,
}

/// One of the `HELD` slots to `addr`: a connection held idle until the
/// server closes it, then (a second later) a new one, until `stop`.
async fn hold_one(addr: String, stop: Arc<AtomicBool>, seen: Arc<Held>) {
    let mut buf = [0u8; 64];
    while !stop.load(Ordering::Relaxed) {
        let connect = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&addr));
        let Ok(Ok(s)) = connect.await else {
            seen.refused.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        seen.opened.fetch_add(1, Ordering::Relaxed);
        let now = seen.now.fetch_add(1, Ordering::Relaxed) + 1;
        seen.most.fetch_max(now, Ordering::Relaxed);
        while !stop.load(Ordering::Relaxed) {
            if tokio::time::timeout(Duration::from_secs(1), s.readable())
                .await
                .is_err()
            {
                continue;
            }
            match s.try_read(&mut buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                // EOF, an error, or an answer to nothing: closed.
                _ => {
                    seen.closed.fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
        seen.now.fetch_sub(1, Ordering::Relaxed);
        drop(s);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_to_the_http_port_starve_no_probe() {
    let archive = image_archive();
    let cluster = TestCluster::start_real_node("real-listeners").await;

    let gate_dir = state_dir(&cluster).join("agent-gate");
    std::fs::create_dir_all(&gate_dir).expect("make the agent's gate dir");
    std::fs::write(gate_dir.join("ready"), "").expect("write the agent's ready file");
    must(
        "apply the agent DaemonSet",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            Some(&to_stream(&[&agent_daemonset(&gate_dir)])),
        ),
    );
    must(
        "import nodegate's image into the real node",
        run(
            &repo_root().join("deploy/local/real-node"),
            &[
                "import",
                "--state-dir",
                &state_dir(&cluster).to_string_lossy(),
                &archive.to_string_lossy(),
            ],
            None,
        ),
    );
    let base = repo_root().join("deploy/kustomize/base");
    must(
        "kubectl apply -k deploy/kustomize/base",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-k", &base.to_string_lossy()],
            None,
        ),
    );
    let pods = wait_for(
        "both nodegate pods Ready",
        Duration::from_secs(120),
        || async {
            let r = replicas(&cluster).await;
            if r.len() == 2 && r.iter().all(|(_, ip, ready, _)| *ready && !ip.is_empty()) {
                Ok(r)
            } else {
                Err(format!("{r:?}"))
            }
        },
    )
    .await;
    wait_opened(&cluster, REAL_NODE).await;

    // The connections, to each replica's pod IP, from outside the pod.
    let stop = Arc::new(AtomicBool::new(false));
    let mut holders = Vec::new();
    let mut seen = Vec::new();
    for (name, ip, _, _) in &pods {
        let s = Arc::new(Held::default());
        seen.push((name.clone(), Arc::clone(&s)));
        for _ in 0..HELD {
            holders.push(tokio::spawn(hold_one(
                format!("{ip}:8080"),
                Arc::clone(&stop),
                Arc::clone(&s),
            )));
        }
    }
    let started = std::time::Instant::now();
    let mut worst = Vec::new();
    while started.elapsed() < HOLD {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let now = replicas(&cluster).await;
        worst = now.clone();
        for (name, _, ready, restarts) in &now {
            let was = pods.iter().find(|p| &p.0 == name).map(|p| p.3);
            assert_eq!(
                Some(*restarts),
                was,
                "{name} restarted while {HELD} connections were held to its :8080 ({:.0} s in)",
                started.elapsed().as_secs_f64()
            );
            assert!(
                *ready,
                "{name} went unready while {HELD} connections were held ({:.0} s in)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    // Still held: a new node is tainted at CREATE and the gate opens it.
    let created = cluster.create_node(&fake_node("kw-held", &[], &[])).await;
    assert!(
        tainted(&created),
        "kw-held came back from CREATE untainted while the connections were held"
    );
    wait_opened(&cluster, "kw-held").await;
    stop.store(true, Ordering::Relaxed);
    for h in holders {
        let _ = h.await;
    }
    for (name, s) in &seen {
        eprintln!(
            "[measure] {name}: at most {} held at once; {} connections opened, {} closed by the server, {} connects failed, over {:.0} s",
            s.most.load(Ordering::Relaxed),
            s.opened.load(Ordering::Relaxed),
            s.closed.load(Ordering::Relaxed),
            s.refused.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64()
        );
    }
    for (name, s) in &seen {
        let opened = s.opened.load(Ordering::Relaxed);
        assert!(
            opened >= HELD,
            "the test opened only {opened} connections to {name}, not {HELD}: it proves nothing"
        );
    }
    assert_eq!(worst.len(), 2, "{worst:?}");
}
