//! `kubectl apply -k deploy/kustomize/base` on a cluster with a real node:
//! the admission policy mode, exactly as shipped — and, on the same install,
//! nothing a client of the HTTP port does can make nodegate's probes fail
//! (issue 37 §3). The two share one real node: its start, the image import
//! and the install are most of either test's time, and one real node runs
//! on a machine at a time.
//!
//! The hold: 1,100 idle connections to each replica's :8080 for a minute
//! (twice the 30 s the liveness probe takes to restart a container), from
//! outside the pods as a pod in the cluster could, a new one opened for
//! each the server closes. The probes are `nodegate probe`
//! inside the container. Neither container restarts, both stay Ready, and a
//! node created meanwhile is tainted at CREATE by the shipped policy and
//! opened by the gate.

use super::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Idle connections held to each replica's HTTP port.
const HELD: usize = 1_100;
/// How long they are held: two of the liveness probe's windows (3 failures
/// 10 s apart restart a container), six of the readiness probe's. Each
/// second of it costs about half a core (the refused ones reconnect).
const HOLD: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_base_on_a_real_node_gates_taints_by_policy_and_no_idle_client_starves_it() {
    let archive = image_archive();
    let cluster = TestCluster::start_real_node("real-kustomize").await;

    // The agent is Ready as soon as its container starts.
    let gate_dir = state_dir(&cluster).join("agent-gate");
    std::fs::create_dir_all(&gate_dir).expect("make the agent's gate dir");
    std::fs::write(gate_dir.join("ready"), "").expect("write the agent's ready file");
    apply(&cluster, "the agent DaemonSet", &agent_daemonset(&gate_dir));

    import_image(&cluster, &archive);
    // As shipped. The only schedulable node is the real one (no kwok node
    // exists yet), so both replicas land there: the base prefers, and does
    // not require, replicas on different nodes and zones.
    let base = repo_root().join("deploy/kustomize/base");
    must(
        "kubectl apply -k deploy/kustomize/base",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-k", &base.to_string_lossy()],
            None,
        ),
    );
    let leader = both_ready_one_leader(&cluster, NS).await;
    eprintln!("leader: {leader}");
    let (by, _) = wait_opened(&cluster, REAL_NODE, NS).await;
    assert_eq!(by, "ready");

    let hooks = kubectl(
        &cluster.kubeconfig,
        &["get", "mutatingwebhookconfigurations", "-o", "name"],
        None,
    );
    assert!(
        !hooks.stdout.contains("nodegate"),
        "the base installs no webhook: {}",
        hooks.stdout
    );

    // The connections, to each replica's pod IP, from outside the pod.
    let pods = replicas(&cluster).await;
    assert_eq!(pods.len(), 2, "{pods:?}");
    let stop = Arc::new(AtomicBool::new(false));
    let mut holders = Vec::new();
    let mut seen = Vec::new();
    for (name, ip, _, _) in &pods {
        assert!(!ip.is_empty(), "{name} has no pod IP: {pods:?}");
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
    while started.elapsed() < HOLD {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let now = replicas(&cluster).await;
        assert_eq!(now.len(), 2, "{now:?}");
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

    // Still held: the shipped admission policy (no webhook in this mode)
    // taints a new node at CREATE, and the gate opens it.
    let created = cluster.create_node(&fake_node("kw-policy", &[], &[])).await;
    let taints = created.spec.as_ref().and_then(|s| s.taints.clone());
    assert!(
        has_taint(&created, TAINT),
        "kw-policy came back from CREATE without {TAINT} while the connections were held: {taints:?}"
    );
    let (by, _) = wait_opened(&cluster, "kw-policy", NS).await;
    assert_eq!(by, "ready");

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

    // /metrics through the Service; both pods answer there (the Service
    // picks one), and each knows the leader.
    let metrics = metrics_through_service(&cluster, NS);
    assert!(
        metrics.contains("nodegate_leader_known 1"),
        "/metrics through the Service:\n{metrics}"
    );
    report_resources(&cluster).await;
}

/// nodegate's live pods: (name, IP, Ready, restarts).
async fn replicas(cluster: &TestCluster) -> Vec<(String, String, bool, i32)> {
    nodegate_pods(cluster, NS)
        .await
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let is_ready = ready(&p);
            let status = p.status.unwrap_or_default();
            let restarts = status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            (
                p.metadata.name.unwrap_or_default(),
                status.pod_ip.unwrap_or_default(),
                is_ready,
                restarts,
            )
        })
        .collect()
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
        let connect = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(&addr),
        );
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

/// What the real pods used, for docs/operations.md: each container's
/// memory (cgroup v1 memory.usage_in_bytes is per container here, as the
/// kubelet runs them under the runtime's own cgroups) and the process RSS.
async fn report_resources(cluster: &TestCluster) {
    for p in nodegate_pods(cluster, NS).await {
        let name = pod_name(&p);
        let out = cluster.kubectl(&[
            "-n",
            NS,
            "get",
            "pod",
            &name,
            "-o",
            "jsonpath={.status.containerStatuses[0].containerID}",
        ]);
        let id = out.trim().trim_start_matches("containerd://").to_string();
        let usage = std::fs::read_to_string(format!(
            "/sys/fs/cgroup/memory/k8s.io/{id}/memory.usage_in_bytes"
        ))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
        eprintln!(
            "[resources] {name}: container memory {} MiB",
            usage.map_or("unknown".to_string(), |b| format!(
                "{:.1}",
                b as f64 / 1048576.0
            ))
        );
    }
}
