//! Operating nodegate end to end, against the real local control plane:
//! two replicas under leader election (only the leader writes; a killed
//! leader fails over within a lease; SIGTERM hands over at once; a renewal
//! reads the Lease only after another client wrote it), the probes, the
//! metrics, the per-node debug trace and `nodegate status`.

use nodegate_e2e as support;

use std::process::Command;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::Value;
use support::gate::{DsSpec, Env};
use support::{Nodegate, http_get, metric, wait_for};

/// Short lease settings, so failover fits in a test.
const LEASE_DURATION: Duration = Duration::from_secs(4);
const ELECTION: &[&str] = &[
    "--leader-elect",
    "--lease-name",
    "nodegate-e2e",
    "--lease-namespace",
    "default",
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "1s",
    "--timeout",
    "5m",
];

/// Labels of a node the held DaemonSets run on.
const HOLD: &[(&str, &str)] = &[("hold", "yes")];

/// A DaemonSet that runs only on nodes labelled hold=yes, Running but not
/// Ready until released.
fn held(name: &str) -> DsSpec<'_> {
    DsSpec {
        hold: true,
        node_selector: HOLD,
        ..DsSpec::new(name)
    }
}

async fn get(addr: &str, path: &str) -> (u16, String) {
    http_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

async fn metrics(addr: &str) -> String {
    let (status, body) = get(addr, "/metrics").await;
    assert_eq!(status, 200, "/metrics answered {status}: {body}");
    body
}

async fn json_at(addr: &str, path: &str) -> (u16, Value) {
    let (status, body) = get(addr, path).await;
    let v = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"));
    (status, v)
}

async fn is_leader(addr: &str) -> Option<bool> {
    let text = http_get(addr, "/metrics").await.ok()?.1;
    metric(&text, "nodegate_leader").map(|v| v == 1.0)
}

async fn wait_leader(addr: &str, want: bool, within: Duration, who: &Nodegate) {
    let start = Instant::now();
    loop {
        if is_leader(addr).await == Some(want) {
            return;
        }
        if start.elapsed() > within {
            panic!(
                "nodegate at {addr} did not report nodegate_leader {} within {within:?}\n{}",
                u8::from(want),
                who.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_ready(addr: &str, who: &Nodegate) {
    let start = Instant::now();
    loop {
        if let Ok((200, _)) = http_get(addr, "/readyz").await {
            return;
        }
        if start.elapsed() > Duration::from_secs(30) {
            panic!("{addr}/readyz never answered 200\n{}", who.logs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn writes_sent(text: &str) -> f64 {
    ["untaint", "mark_timed_out"]
        .iter()
        .flat_map(|kind| {
            ["ok", "conflict", "not_found", "error"].map(|result| {
                metric(
                    text,
                    &format!(
                        "nodegate_patch_attempts_total{{kind=\"{kind}\",result=\"{result}\"}}"
                    ),
                )
                .unwrap_or_else(|| panic!("no patch counter for {kind}/{result}:\n{text}"))
            })
        })
        .sum()
}

fn untaint_ok(text: &str) -> f64 {
    metric(
        text,
        "nodegate_patch_attempts_total{kind=\"untaint\",result=\"ok\"}",
    )
    .unwrap_or(0.0)
}

/// Two replicas under leader election: `a` started first and leading, `b`
/// started second and ready (synced) as a follower. Returns each with its
/// HTTP address.
async fn leader_and_follower(env: &Env) -> (Nodegate, String, Nodegate, String) {
    let a = Nodegate::start_as(
        &env.cluster.kubeconfig,
        &[("POD_NAME", "nodegate-a")],
        ELECTION,
    );
    let a_addr = a.http_addr(Duration::from_secs(30));
    wait_leader(&a_addr, true, Duration::from_secs(30), &a).await;
    let b = Nodegate::start_as(
        &env.cluster.kubeconfig,
        &[("POD_NAME", "nodegate-b")],
        ELECTION,
    );
    let b_addr = b.http_addr(Duration::from_secs(30));
    wait_ready(&b_addr, &b).await;
    (a, a_addr, b, b_addr)
}

/// Two replicas: only the leader patches; SIGKILL of the leader while a
/// node waits for a held DaemonSet, then release: the follower opens the
/// node within one lease duration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_a_killed_leader_fails_over_within_a_lease() {
    let env = Env::new("ops-failover").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(held("csi")).await;

    let (mut a, a_addr, b, b_addr) = leader_and_follower(&env).await;
    assert_eq!(
        is_leader(&b_addr).await,
        Some(false),
        "two leaders:\n{}",
        b.logs()
    );

    // A node with nothing held opens, written by the leader alone.
    env.create_node("node-free", &[]).await;
    env.wait_open("node-free", Duration::from_secs(30), &[&a, &b])
        .await;
    // The watch may show the node open before the leader has read the
    // patch's answer (and counted it).
    wait_for(
        "the leader's patch counter",
        Duration::from_secs(5),
        || async {
            let ma = metrics(&a_addr).await;
            if untaint_ok(&ma) == 1.0 {
                Ok(())
            } else {
                Err(ma)
            }
        },
    )
    .await;
    let mb = metrics(&b_addr).await;
    assert_eq!(
        writes_sent(&mb),
        0.0,
        "the follower must send no write:\n{mb}"
    );
    assert_eq!(metric(&mb, "nodegate_leader"), Some(0.0));

    // A node waiting for a held DaemonSet; the follower's gate is warm.
    env.create_node("node-held", HOLD).await;
    env.wait_pod("cni", "node-held", true).await;
    env.wait_pod("csi", "node-held", false).await;
    let b_debug = b.debug_addr(Duration::from_secs(30));
    let warm = wait_for(
        "the follower's gate for node-held",
        Duration::from_secs(20),
        || async {
            let (status, v) = json_at(&b_debug, "/debug/nodes/node-held").await;
            let csi_waiting = v["expected"].as_array().is_some_and(|ms| {
                ms.iter()
                    .any(|m| m["member"] == "infra/csi" && m["ready"] == false)
            });
            if status == 200 && v["live"] == true && csi_waiting {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_eq!(warm["phase"], "waiting", "{warm}");

    let killed = Instant::now();
    a.kill();
    env.release("csi", "node-held").await;
    let released = Instant::now();
    let opened = env
        .wait_open("node-held", Duration::from_secs(20), &[&a, &b])
        .await;
    let from_kill = opened.duration_since(killed);
    let from_release = opened.duration_since(released);
    eprintln!(
        "FAILOVER: leader SIGKILLed -> node opened by the follower in {:.2}s \
         (held pod released -> opened {:.2}s; --lease-duration 4s --renew-deadline 3s --retry-period 1s)",
        from_kill.as_secs_f64(),
        from_release.as_secs_f64()
    );
    assert!(
        from_release <= LEASE_DURATION + Duration::from_millis(500),
        "the follower must open the node within one lease duration of the last member turning Ready; \
         took {from_release:?}\n{}",
        b.logs()
    );
    assert_eq!(
        env.annotation("node-held", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );
    let mb = wait_for(
        "the new leader's patch counter",
        Duration::from_secs(5),
        || async {
            let mb = metrics(&b_addr).await;
            if untaint_ok(&mb) == 1.0 {
                Ok(mb)
            } else {
                Err(mb)
            }
        },
    )
    .await;
    assert_eq!(metric(&mb, "nodegate_leader"), Some(1.0), "{mb}");
}

/// SIGTERM of the leader releases the lease: the follower leads within
/// moments, long before the lease would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_the_lease_and_a_follower_takes_over_at_once() {
    let env = Env::new("ops-handover").await;
    let (mut a, _a_addr, b, b_addr) = leader_and_follower(&env).await;
    // Let the follower see a few renewals first, as in a steady state.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(is_leader(&b_addr).await, Some(false));

    let term = Instant::now();
    let sent = Command::new("kill")
        .arg("-TERM")
        .arg(a.pid().to_string())
        .status()
        .expect("run kill");
    assert!(sent.success());
    wait_leader(&b_addr, true, LEASE_DURATION, &b).await;
    let handover = term.elapsed();
    eprintln!(
        "HANDOVER: leader SIGTERMed -> follower leads in {:.3}s (lease duration {:?})",
        handover.as_secs_f64(),
        LEASE_DURATION
    );
    assert!(
        handover < LEASE_DURATION / 2,
        "a released lease must be taken over at once, took {handover:?}\n{}",
        b.logs()
    );
    let status = a.terminate(Duration::from_secs(10));
    assert!(
        status.is_some_and(|s| s.success()),
        "the leader must exit cleanly on SIGTERM ({status:?}):\n{}",
        a.logs()
    );
    assert!(a.logs().contains("released the lease"), "{}", a.logs());

    let leases: Api<Lease> = Api::namespaced(env.cluster.client.clone(), "default");
    let lease = leases.get("nodegate-e2e").await.expect("lease exists");
    let spec = lease.spec.expect("lease spec");
    let holder = spec.holder_identity.unwrap_or_default();
    assert!(holder.starts_with("nodegate-b_"), "holder {holder:?}");
    assert_eq!(spec.lease_duration_seconds, Some(4));
    assert!(spec.lease_transitions.unwrap_or(0) >= 1);
}

/// The API server's count of requests on Leases with `verb` (GET, PUT),
/// every client's together. The lab's controller manager and scheduler
/// elect no leader and the cluster has no node whose Lease a kubelet
/// renews: the API server's own identity Lease (a write every 10 s) is
/// the only other.
fn lease_requests(kubeconfig: &std::path::Path, verb: &str) -> f64 {
    let out = Command::new(support::local_bin("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["get", "--raw", "/metrics"])
        .output()
        .expect("run kubectl get --raw /metrics");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("apiserver_request_total{"),
        "the API server's /metrics: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let verb = format!("verb=\"{verb}\"");
    text.lines()
        .filter(|l| {
            l.starts_with("apiserver_request_total{")
                && l.contains("resource=\"leases\"")
                && l.contains(&verb)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The Lease and its renewTime, read by a LIST (the test's own reads must
/// not count among the GETs [`lease_requests`] counts).
async fn renewed_at(leases: &Api<Lease>) -> Result<(Timestamp, Lease), String> {
    let one = ListParams::default().fields("metadata.name=nodegate-e2e");
    let list = leases
        .list(&one)
        .await
        .map_err(|e| format!("listing the Lease: {e}"))?;
    let lease = list
        .items
        .into_iter()
        .next()
        .ok_or("no Lease nodegate-e2e")?;
    let at = lease.spec.as_ref().and_then(|s| s.renew_time.as_ref());
    let at = at.ok_or("the Lease has no renewTime")?.0;
    Ok((at, lease))
}

/// The Lease once a renewal after `after` has landed.
async fn renewal_after(leases: &Api<Lease>, after: Timestamp) -> (Timestamp, Lease) {
    wait_for("a renewal", Duration::from_secs(30), || async {
        let (at, lease) = renewed_at(leases).await?;
        (at > after).then_some((at, lease)).ok_or(format!(
            "last renewed at {at}, waiting for one after {after}"
        ))
    })
    .await
}

/// Another client's merge patch of the Lease; the Lease it leaves.
async fn patch_lease(leases: &Api<Lease>, patch: &Value, what: &str) -> Lease {
    leases
        .patch(
            "nodegate-e2e",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn holder(lease: &Lease) -> String {
    let spec = lease.spec.as_ref();
    spec.and_then(|s| s.holder_identity.clone())
        .unwrap_or_default()
}

/// A leader renews with one conditional write on the Lease as it last
/// wrote it, and reads the Lease only when the API server refuses that
/// write: after another client's change (an annotation) it reads, keeps
/// the change and keeps leading; after another holder's write it stops
/// leading and leaves the Lease to that holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_renews_without_reading_until_another_client_writes_the_lease() {
    let env = Env::new("ops-renewal").await;
    let kubeconfig = &env.cluster.kubeconfig;
    // On a cluster of NODEGATE_E2E_KUBECONFIG, other clients may read
    // Leases: the requests are counted only on the test's own cluster.
    let counted = env.cluster.state_dir().is_some();
    let ng = Nodegate::start_as(kubeconfig, &[("POD_NAME", "nodegate-a")], ELECTION);
    let addr = ng.http_addr(Duration::from_secs(30));
    wait_leader(&addr, true, Duration::from_secs(30), &ng).await;
    let leases: Api<Lease> = Api::namespaced(env.cluster.client.clone(), "default");

    // Renewals, with nobody else writing: no reads. Six renewals are
    // counted as the Lease's renewTime changes (a LIST every 200 ms; they
    // come a retry period, 1 s, apart); a renewal that reads would make six
    // reads or more. Up to two others are allowed: the API server's own
    // identity Lease, should its controller read it again, and the read
    // after a renewal that timed out once its write had landed.
    let gets = counted.then(|| lease_requests(kubeconfig, "GET"));
    let (mut last, _) = wait_for("the Lease", Duration::from_secs(10), || async {
        renewed_at(&leases).await
    })
    .await;
    let mut renewals = 0;
    while renewals < 6 {
        (last, _) = renewal_after(&leases, last).await;
        renewals += 1;
    }
    if let Some(gets) = gets {
        let read = lease_requests(kubeconfig, "GET") - gets;
        assert!(
            read <= 2.0,
            "{read} reads of Leases over {renewals} renewals (a renewal reads only after a refused write)\n{}",
            ng.logs()
        );
    }

    // Another client's write: the next renewal is refused, reads, and
    // writes on what it read.
    let gets = counted.then(|| lease_requests(kubeconfig, "GET"));
    let note = serde_json::json!({"metadata": {"annotations": {"example.com/note": "kept"}}});
    let patched = patch_lease(&leases, &note, "annotate the Lease").await;
    let patched_at = patched.spec.as_ref().and_then(|s| s.renew_time.as_ref());
    let patched_at = patched_at.expect("the Lease's renewTime").0;
    let (_, after) = renewal_after(&leases, patched_at).await;
    assert_eq!(holder(&after), holder(&patched), "the holder changed");
    let note = after
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("example.com/note"));
    assert_eq!(
        note.map(String::as_str),
        Some("kept"),
        "the renewal dropped another client's change"
    );
    if let Some(gets) = gets {
        assert!(
            lease_requests(kubeconfig, "GET") - gets >= 1.0,
            "a renewal after another client's write must read the Lease\n{}",
            ng.logs()
        );
    }
    assert_eq!(is_leader(&addr).await, Some(true), "{}", ng.logs());

    // Another holder's write: the leader stops leading, and the Lease stays
    // the other holder's (30 s, longer than this test waits).
    let other = serde_json::json!({"spec": {
        "holderIdentity": "someone-else",
        "leaseDurationSeconds": 30,
        "renewTime": MicroTime(Timestamp::now()),
    }});
    patch_lease(&leases, &other, "write another holder into the Lease").await;
    wait_leader(&addr, false, Duration::from_secs(30), &ng).await;
    let (_, lease) = renewed_at(&leases).await.expect("the Lease");
    assert_eq!(holder(&lease), "someone-else", "{}", ng.logs());
    assert!(
        ng.logs()
            .contains("lost leadership: the lease has another holder"),
        "{}",
        ng.logs()
    );
}

/// /healthz, /readyz, /metrics and the debug endpoints answer as
/// docs/operations.md says, through a gate's whole life; `nodegate status`
/// shows the same gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_metrics_and_debug_endpoints_answer_as_documented() {
    let env = Env::new("ops-endpoints").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(held("csi")).await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m", "--debug-history", "10"]);
    let addr = ng.http_addr(Duration::from_secs(30));
    let debug = ng.debug_addr(Duration::from_secs(30));
    assert_ne!(addr, debug, "the debug endpoints have their own listener");

    let (status, body) = get(&addr, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    // The metrics and probes address does not serve the debug endpoints.
    let (status, _) = get(&addr, "/debug/nodes").await;
    assert_eq!(status, 404, "/debug/nodes must not be on --http-addr");
    wait_ready(&addr, &ng).await;
    // The hot watches speak protobuf to a real API server; none fell back.
    let logs = ng.logs();
    for kind in ["nodes", "daemonsets", "daemonset pods"] {
        let line = logs.lines().find(|l| {
            l.contains("initial list complete") && l.contains(&format!("kind=\"{kind}\""))
        });
        let line = line.unwrap_or_else(|| panic!("no initial list of {kind}\n{logs}"));
        assert!(line.contains("encoding=\"protobuf\""), "{line}");
    }
    assert!(!logs.contains("refused protobuf"), "{logs}");

    // Idle: zeros, not "no data"; every series named nodegate_*.
    let idle = metrics(&addr).await;
    for (series, want) in [
        ("nodegate_gated_nodes", 0.0),
        ("nodegate_live_actors", 0.0),
        ("nodegate_leader", 1.0),
        ("nodegate_watch_restarts_total", 0.0),
        ("nodegate_reaction_seconds_count", 0.0),
        (
            "nodegate_gate_duration_seconds_count{outcome=\"ready\"}",
            0.0,
        ),
        (
            "nodegate_gate_duration_seconds_count{outcome=\"timeout\"}",
            0.0,
        ),
        ("nodegate_gates_timed_out_total{action=\"open\"}", 0.0),
        (
            "nodegate_patch_attempts_total{kind=\"untaint\",result=\"ok\"}",
            0.0,
        ),
    ] {
        assert_eq!(metric(&idle, series), Some(want), "{series}:\n{idle}");
    }
    assert!(
        metric(
            &idle,
            "nodegate_router_events_total{kind=\"daemonset_upserted\",routed=\"false\"}"
        )
        .is_some_and(|v| v >= 2.0),
        "{idle}"
    );
    for line in idle
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        assert!(line.starts_with("nodegate_"), "unprefixed series {line:?}");
    }

    // A gate in progress.
    env.create_node("node-held", HOLD).await;
    env.wait_pod("cni", "node-held", true).await;
    env.wait_pod("csi", "node-held", false).await;
    let detail = wait_for(
        "node-held's gate with cni Ready and csi Running but not Ready",
        Duration::from_secs(20),
        || async {
            let (status, v) = json_at(&debug, "/debug/nodes/node-held").await;
            // Both pods are Running in the API by now; the gate may see the
            // second one's update a moment later.
            let seen = v["expected"].as_array().is_some_and(|ms| {
                ms.iter()
                    .any(|m| m["member"] == "infra/cni" && m["ready"] == true)
                    && ms.iter().any(|m| {
                        m["member"] == "infra/csi"
                            && m["waiting"]
                                .as_str()
                                .is_some_and(|w| w.contains("not Ready"))
                    })
            });
            if status == 200 && seen {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_eq!(detail["node"], "node-held");
    assert_eq!(detail["live"], true);
    assert_eq!(detail["phase"], "waiting");
    assert_eq!(
        (
            detail["expected_count"].as_u64(),
            detail["ready_count"].as_u64()
        ),
        (Some(2), Some(1))
    );
    let csi = detail["expected"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["member"] == "infra/csi"))
        .unwrap_or_else(|| panic!("no csi member: {detail}"));
    assert_eq!(csi["ready"], false);
    assert!(
        csi["waiting"]
            .as_str()
            .is_some_and(|w| w.contains("not Ready")),
        "{csi}"
    );
    let journal = detail["journal"]
        .as_array()
        .unwrap_or_else(|| panic!("no journal: {detail}"));
    // The evidence of the API server's clock the gate started with may come
    // first (semantics.md §5.3); then the snapshot.
    let first = journal
        .iter()
        .find(|e| e["event"].get("server_time_seen").is_none())
        .unwrap_or_else(|| panic!("no event but server times: {detail}"));
    assert!(
        first["event"].get("snapshot").is_some(),
        "first event: {first}"
    );
    let mut last = Timestamp::UNIX_EPOCH;
    for entry in journal {
        let at: Timestamp = entry["at"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("`at` is not RFC 3339: {entry}"));
        assert!(at >= last, "journal out of order at {entry}");
        last = at;
    }
    assert!(
        journal
            .iter()
            .any(|e| e["event"]["member_ready"]["member"] == "infra/cni"),
        "{}",
        detail["journal"]
    );

    let (_, list) = json_at(&debug, "/debug/nodes").await;
    let row = list["gated"]
        .as_array()
        .and_then(|g| g.iter().find(|n| n["node"] == "node-held"))
        .unwrap_or_else(|| panic!("node-held not listed: {list}"));
    assert_eq!(
        (row["expected"].as_u64(), row["ready"].as_u64()),
        (Some(2), Some(1))
    );
    assert!(
        row["deadline"].is_string() && row["age_seconds"].is_number(),
        "{row}"
    );

    // Scrapes within a second share one page (operations.md, "Metrics"):
    // the first one after the gate started may predate it.
    let busy = wait_for("metrics with the gate", Duration::from_secs(10), || async {
        let t = metrics(&addr).await;
        if metric(&t, "nodegate_gated_nodes") == Some(1.0) {
            Ok(t)
        } else {
            Err(t)
        }
    })
    .await;
    assert_eq!(metric(&busy, "nodegate_live_actors"), Some(1.0), "{busy}");
    assert!(
        metric(&busy, "nodegate_gate_age_seconds{node=\"node-held\"}").is_some(),
        "{busy}"
    );

    // `nodegate status` sees the same gate, from the cluster alone.
    let out = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(["status", "--timeout", "5m"])
        .env("KUBECONFIG", &env.cluster.kubeconfig)
        .output()
        .expect("run nodegate status");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "status failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("nodegate status:\n{table}");
    let line = table
        .lines()
        .find(|l| l.starts_with("node-held"))
        .unwrap_or_else(|| panic!("node-held missing:\n{table}"));
    assert!(
        line.contains("1/2 ready") && line.contains("infra/csi"),
        "{line}"
    );
    assert!(table.starts_with("NODE"), "{table}");

    // Open it: the trace stays readable after the actor is gone.
    env.release("csi", "node-held").await;
    env.wait_open("node-held", Duration::from_secs(15), &[&ng])
        .await;
    let done = wait_for(
        "node-held in the history",
        Duration::from_secs(10),
        || async {
            let (status, v) = json_at(&debug, "/debug/nodes/node-held").await;
            if status == 200 && v["live"] == false {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_eq!(done["phase"], "opened");
    assert!(
        done["journal"]
            .as_array()
            .and_then(|j| j.last())
            .is_some_and(|e| e["event"].get("opened").is_some()),
        "{}",
        done["journal"]
    );
    // The history keeps a copy of the journal at first and freezes it about
    // `FROZEN_WITHIN` later. Frozen, it reads back the same, down to the
    // snapshot's node (kept as JSON) and DaemonSets (kept shared). That it
    // was frozen by then is the history's unit tests' to show; this reads
    // what a user would.
    tokio::time::sleep(nodegate::serve::history::FROZEN_WITHIN + Duration::from_secs(1)).await;
    let (status, frozen) = json_at(&debug, "/debug/nodes/node-held").await;
    assert_eq!(status, 200, "{frozen}");
    assert_eq!(frozen["journal"], done["journal"]);
    assert_eq!(frozen["phase"], done["phase"]);
    let snapshot = (frozen["journal"].as_array().into_iter().flatten())
        .find_map(|e| e["event"].get("snapshot"))
        .unwrap_or(&Value::Null);
    assert_eq!(
        snapshot["node"]["name"], "node-held",
        "{}",
        frozen["journal"]
    );
    assert!(
        snapshot["daemonsets"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["name"] == "csi")),
        "{snapshot}"
    );
    let (status, _) = json_at(&debug, "/debug/nodes/no-such-node").await;
    assert_eq!(status, 404);

    let after = wait_for(
        "metrics after the opening",
        Duration::from_secs(10),
        || async {
            let t = metrics(&addr).await;
            if metric(&t, "nodegate_gated_nodes") == Some(0.0) {
                Ok(t)
            } else {
                Err(t)
            }
        },
    )
    .await;
    for (series, want) in [
        (
            "nodegate_gate_duration_seconds_count{outcome=\"ready\"}",
            1.0,
        ),
        ("nodegate_reaction_seconds_count", 1.0),
        (
            "nodegate_daemonset_ready_seconds_count{namespace=\"infra\",name=\"csi\"}",
            1.0,
        ),
        (
            "nodegate_daemonset_ready_seconds_count{namespace=\"infra\",name=\"cni\"}",
            1.0,
        ),
        (
            "nodegate_patch_attempts_total{kind=\"untaint\",result=\"ok\"}",
            1.0,
        ),
    ] {
        assert_eq!(metric(&after, series), Some(want), "{series}:\n{after}");
    }
    assert!(
        !after.contains("node=\"node-held\""),
        "series of a node no longer gated:\n{after}"
    );

    // A DaemonSet that is gone takes its series with it.
    env.daemonsets
        .delete("csi", &DeleteParams::default())
        .await
        .expect("delete csi");
    wait_for("csi's series to go", Duration::from_secs(15), || async {
        let t = metrics(&addr).await;
        if t.contains("name=\"csi\"") {
            Err(t)
        } else {
            Ok(())
        }
    })
    .await;
}
