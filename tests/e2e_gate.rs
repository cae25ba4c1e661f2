//! The gate end to end: the real `nodegate run` binary against the real local
//! control plane (deploy/local), one cluster per scenario.

use nodegate_e2e as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use support::gate::{DsSpec, Env, NS, TAINT, annotation, has_gate_taint, taint_keys};
use support::{Nodegate, wait_for};

/// (a) The gate waits for every expected DaemonSet, including one held
/// NotReady, and opens once the held pod is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_daemonset_keeps_the_node_closed_until_released() {
    let env = Env::new("gate-held").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(DsSpec {
        ready_after: Some("1s"),
        ..DsSpec::new("logs")
    })
    .await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("csi")
    })
    .await;
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "5m",
            "--log-level",
            "info,nodegate_actors=debug",
        ],
    );
    env.create_node("node-a", &[]).await;

    env.wait_pod("cni", "node-a", true).await;
    env.wait_pod("logs", "node-a", true).await;
    // Two of three Ready, the third held: the node must stay closed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        has_gate_taint(&env.node("node-a").await),
        "opened while csi was held:\n{}",
        ng.logs()
    );

    env.release("csi", "node-a").await;
    // How fast it opens is the benchmark's to measure; here only that it does.
    env.wait_open("node-a", Duration::from_secs(30), &[&ng])
        .await;

    let node = env.node("node-a").await;
    assert_eq!(
        annotation(&node, "nodegate.dev/opened-by").as_deref(),
        Some("ready")
    );
    let opened_at: Timestamp = annotation(&node, "nodegate.dev/opened-at")
        .expect("opened-at annotation")
        .parse()
        .expect("opened-at is RFC 3339");
    let csi = env.pod_on("csi", "node-a").await.expect("csi pod");
    let csi_ready_at = csi
        .status
        .and_then(|s| s.conditions)
        .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
        .and_then(|c| c.last_transition_time)
        .expect("csi Ready transition time")
        .0;
    // Ready transition times have second precision; opened-at must not be
    // before the second the last member became Ready.
    assert!(
        opened_at.as_second() >= csi_ready_at.as_second(),
        "opened at {opened_at} before csi Ready at {csi_ready_at}"
    );
    // Events are recorded in the background: wait for it, do not read once.
    wait_for(
        "a Normal GateOpened Event",
        Duration::from_secs(20),
        || async {
            let events = env.events_for("node-a").await;
            if events.iter().any(|e| {
                e.reason.as_deref() == Some("GateOpened") && e.type_.as_deref() == Some("Normal")
            }) {
                Ok(())
            } else {
                Err(format!("{events:?}"))
            }
        },
    )
    .await;
}

/// (b) A DaemonSet that does not tolerate the startup taint cannot start until
/// the gate opens, so it is not waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_not_tolerating_the_gate_is_not_waited_for() {
    let env = Env::new("gate-intolerant").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(DsSpec {
        tolerate_gate: false,
        ..DsSpec::new("late-agent")
    })
    .await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    env.create_node("node-b", &[]).await;

    env.wait_open("node-b", Duration::from_secs(30), &[&ng])
        .await;
    assert_eq!(
        annotation(&env.node("node-b").await, "nodegate.dev/opened-by").as_deref(),
        Some("ready")
    );
    // Once open, the intolerant DaemonSet's pod arrives as usual.
    env.wait_pod("late-agent", "node-b", true).await;
}

/// (c) The deadline opens a node whose DaemonSet never becomes Ready, on time,
/// with a Warning naming the blocker; `--on-timeout keep` keeps it closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deadline_opens_on_time_and_names_the_blocker() {
    let env = Env::new("gate-deadline").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("broken-agent")
    })
    .await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5s"]);
    let created = env.create_node("node-c", &[]).await;
    let created_at = created
        .metadata
        .creation_timestamp
        .expect("creationTimestamp")
        .0;

    env.wait_open("node-c", Duration::from_secs(15), &[&ng])
        .await;
    let node = env.node("node-c").await;
    assert_eq!(
        annotation(&node, "nodegate.dev/opened-by").as_deref(),
        Some("timeout")
    );
    let opened_at: Timestamp = annotation(&node, "nodegate.dev/opened-at")
        .expect("opened-at")
        .parse()
        .expect("RFC 3339");
    let late = opened_at.duration_since(created_at).as_secs_f64() - 5.0;
    eprintln!("deadline fired {late:+.3}s from creationTimestamp + 5s");
    // creationTimestamp is truncated to the second, so the true deadline lies
    // in [created+5s, created+6s).
    assert!(
        (-1.0..=1.0).contains(&(late - 0.5)),
        "deadline error {late:+.3}s exceeds 1 s"
    );

    let events = wait_for("GateTimedOut event", Duration::from_secs(10), || async {
        let evs = env.events_for("node-c").await;
        if evs
            .iter()
            .any(|e| e.reason.as_deref() == Some("GateTimedOut"))
        {
            Ok(evs)
        } else {
            Err(format!("{evs:?}"))
        }
    })
    .await;
    let warning = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("GateTimedOut"))
        .expect("warning");
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    let note = warning.note.clone().unwrap_or_default();
    assert!(
        note.contains("infra/broken-agent"),
        "the warning must name the blocking DaemonSet: {note}"
    );
    assert!(
        !note.contains("infra/cni"),
        "a Ready member is not a blocker: {note}"
    );
    drop(ng);

    // keep: same situation, the taint stays and the node is marked.
    let ng = Nodegate::start(&env.cluster, &["--timeout", "3s", "--on-timeout", "keep"]);
    env.create_node("node-c2", &[]).await;
    let marked = wait_for(
        "timed-out mark on node-c2",
        Duration::from_secs(15),
        || async {
            let n = env.node("node-c2").await;
            if annotation(&n, "nodegate.dev/timed-out").is_some() {
                Ok(n)
            } else {
                Err(format!("{:?}", taint_keys(&n)))
            }
        },
    )
    .await;
    assert!(
        has_gate_taint(&marked),
        "--on-timeout keep must keep the taint\n{}",
        ng.logs()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        has_gate_taint(&env.node("node-c2").await),
        "the taint must stay after the deadline"
    );
}

/// (d) Another writer's taint, added while the gate waits and again at the
/// moment it opens, survives: the conditional patch never clobbers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_taints_added_concurrently_survive() {
    let env = Env::new("gate-foreign").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("cni")
    })
    .await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    env.create_node("node-d", &[]).await;
    wait_for("cni pod on node-d", Duration::from_secs(60), || {
        env.pod_on("cni", "node-d")
    })
    .await;

    let add_taint = |key: &'static str| {
        let nodes = env.nodes.clone();
        async move {
            // Read-modify-write with the resourceVersion, like any careful writer.
            for _ in 0..20 {
                let mut n = nodes.get("node-d").await.expect("get node");
                let spec = n.spec.get_or_insert_with(Default::default);
                spec.taints.get_or_insert_with(Vec::new).push(
                    serde_json::from_value(json!({"key": key, "effect": "NoSchedule"}))
                        .expect("taint"),
                );
                match nodes.replace("node-d", &PostParams::default(), &n).await {
                    Ok(_) => return,
                    Err(kube::Error::Api(e)) if e.code == 409 => continue,
                    Err(e) => panic!("add taint {key}: {e}"),
                }
            }
            panic!("could not add taint {key} after 20 conflicts");
        }
    };
    add_taint("example.com/early").await;
    // Release and write at the same moment, to race the gate's patch.
    let (_, _) = tokio::join!(
        env.release("cni", "node-d"),
        add_taint("example.com/racing")
    );

    env.wait_open("node-d", Duration::from_secs(15), &[&ng])
        .await;
    let keys = taint_keys(&env.node("node-d").await);
    assert!(
        keys.contains(&"example.com/early".to_string()),
        "early foreign taint lost: {keys:?}"
    );
    assert!(
        keys.contains(&"example.com/racing".to_string()),
        "racing foreign taint lost: {keys:?}"
    );
    assert!(!keys.contains(&TAINT.to_string()));
}

/// (e) Killed and restarted mid-wait, nodegate still fires the deadline
/// counted from the node's creation, not from its own start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_mid_wait_keeps_the_original_deadline() {
    let env = Env::new("gate-restart").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("broken-agent")
    })
    .await;
    let mut ng = Nodegate::start(&env.cluster, &["--timeout", "8s"]);
    let created = env.create_node("node-e", &[]).await;
    let created_at = created
        .metadata
        .creation_timestamp
        .expect("creationTimestamp")
        .0;
    tokio::time::sleep(Duration::from_secs(3)).await;
    ng.kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(has_gate_taint(&env.node("node-e").await));
    let ng = Nodegate::start(&env.cluster, &["--timeout", "8s"]);

    env.wait_open("node-e", Duration::from_secs(15), &[&ng])
        .await;
    let opened_at: Timestamp = annotation(&env.node("node-e").await, "nodegate.dev/opened-at")
        .expect("opened-at")
        .parse()
        .expect("RFC 3339");
    let after = opened_at.duration_since(created_at).as_secs_f64();
    eprintln!("restarted gate opened {after:.3}s after creation (deadline 8s)");
    assert!(
        (7.0..=9.5).contains(&after),
        "deadline must count from creation: opened {after:.3}s after"
    );
}

/// (f) A node deleted mid-wait ends its gate quietly; nodegate keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deleted_mid_wait_ends_its_gate() {
    let env = Env::new("gate-deleted").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("cni")
    })
    .await;
    let mut ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "5m",
            "--log-level",
            "info,nodegate_actors=debug",
        ],
    );
    env.create_node("node-f", &[]).await;
    wait_for("cni pod on node-f", Duration::from_secs(60), || {
        env.pod_on("cni", "node-f")
    })
    .await;
    env.nodes
        .delete("node-f", &DeleteParams::default())
        .await
        .expect("delete node");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        ng.is_running(),
        "nodegate died after a node deletion:\n{}",
        ng.logs()
    );

    // Still gating: a fresh node with the same DaemonSet released opens.
    env.create_node("node-f2", &[]).await;
    wait_for("cni pod on node-f2", Duration::from_secs(60), || {
        env.pod_on("cni", "node-f2")
    })
    .await;
    env.release("cni", "node-f2").await;
    env.wait_open("node-f2", Duration::from_secs(15), &[&ng])
        .await;
    assert!(
        !ng.logs().contains("panicked"),
        "a gate panicked:\n{}",
        ng.logs()
    );
}

/// (g) Fifty nodes joining at once all open, each only after its own pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_nodes_at_once_all_open_correctly() {
    let env = Env::new("gate-fifty").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(DsSpec {
        ready_after: Some("2s"),
        ..DsSpec::new("logs")
    })
    .await;
    // The oracle: when each pod first became Ready, as the watch stream
    // showed it. kwok may rewrite a pod's conditions (and their transition
    // times) after the fact, so the pods' final state is no witness.
    let first_ready = first_ready_times(env.pods.clone());
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    let names: Vec<String> = (0..50).map(|i| format!("pool-{i}")).collect();
    for n in &names {
        env.create_node(n, &[]).await;
    }
    for n in &names {
        env.wait_open(n, Duration::from_secs(120), &[&ng]).await;
    }
    let first_ready = first_ready.lock().map(|m| m.clone()).unwrap_or_default();
    for n in &names {
        let node = env.node(n).await;
        assert_eq!(
            annotation(&node, "nodegate.dev/opened-by").as_deref(),
            Some("ready"),
            "{n}"
        );
        let opened_at: Timestamp = annotation(&node, "nodegate.dev/opened-at")
            .expect("opened-at")
            .parse()
            .expect("RFC 3339");
        for app in ["cni", "logs"] {
            let ready_at = first_ready
                .get(&(app.to_string(), n.clone()))
                .unwrap_or_else(|| {
                    panic!("{app} on {n} was never seen Ready although the node opened")
                });
            assert!(
                opened_at.as_second() >= ready_at.as_second(),
                "{n} opened at {opened_at} before {app} first became Ready at {ready_at}"
            );
        }
    }
}

/// Watches the pods and records, per (app, node), the Ready transition time
/// of the first update that showed the pod Ready.
fn first_ready_times(pods: Api<Pod>) -> Arc<Mutex<HashMap<(String, String), Timestamp>>> {
    let seen: Arc<Mutex<HashMap<(String, String), Timestamp>>> = Arc::default();
    let out = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut stream = watcher::watcher(pods, watcher::Config::default())
            .applied_objects()
            .boxed();
        while let Some(Ok(p)) = stream.next().await {
            let app = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app"))
                .cloned();
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0);
            if let (Some(app), Some(node), Some(at)) = (app, node, ready)
                && let Ok(mut m) = seen.lock()
            {
                m.entry((app, node)).or_insert(at);
            }
        }
    });
    out
}

/// (h) A workload's pods land on a gated node only after it opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_schedule_only_after_the_gate_opens() {
    let env = Env::new("gate-workload").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("cni")
    })
    .await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m"]);
    env.create_node("node-h", &[("pool", "apps")]).await;
    let deploy: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"nodeSelector": {"pool": "apps"}, "containers": [{"name": "web", "image": "registry.invalid/web:1"}]},
            },
        },
    }))
    .expect("deployment manifest");
    Api::<Deployment>::namespaced(env.cluster.client.clone(), NS)
        .create(&PostParams::default(), &deploy)
        .await
        .expect("create deployment");
    wait_for("cni pod on node-h", Duration::from_secs(60), || {
        env.pod_on("cni", "node-h")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let web = env
        .pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list web pods");
    assert_eq!(web.items.len(), 2, "the Deployment's pods exist");
    for p in &web.items {
        assert!(
            p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none(),
            "web pod scheduled onto a gated node: {:?}",
            p.metadata.name
        );
    }

    env.release("cni", "node-h").await;
    env.wait_open("node-h", Duration::from_secs(15), &[&ng])
        .await;
    let opened_at: Timestamp = annotation(&env.node("node-h").await, "nodegate.dev/opened-at")
        .expect("opened-at")
        .parse()
        .expect("RFC 3339");
    wait_for(
        "web pods scheduled on node-h",
        Duration::from_secs(60),
        || async {
            let web = env
                .pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .map_err(|e| e.to_string())?;
            let bound = web
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("node-h"))
                .count();
            if bound == 2 {
                Ok(())
            } else {
                Err(format!("{bound}/2 bound"))
            }
        },
    )
    .await;
    let web = env
        .pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list web pods");
    for p in web.items {
        let scheduled = p
            .status
            .and_then(|s| s.conditions)
            .and_then(|cs| {
                cs.into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            })
            .and_then(|c| c.last_transition_time)
            .expect("PodScheduled time")
            .0;
        assert!(
            scheduled.as_second() >= opened_at.as_second(),
            "web pod scheduled at {scheduled}, before the gate opened at {opened_at}"
        );
    }
}

/// `--dry-run` decides and records, but never writes to the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_but_never_writes() {
    let env = Env::new("gate-dry-run").await;
    env.create_ds(DsSpec::new("cni")).await;
    let ng = Nodegate::start(&env.cluster, &["--timeout", "5m", "--dry-run"]);
    env.create_node("node-dry", &[]).await;
    env.wait_pod("cni", "node-dry", true).await;
    let events = wait_for("GateWouldOpen event", Duration::from_secs(20), || async {
        let evs = env.events_for("node-dry").await;
        if evs
            .iter()
            .any(|e| e.reason.as_deref() == Some("GateWouldOpen"))
        {
            Ok(evs)
        } else {
            Err(format!("{evs:?}"))
        }
    })
    .await;
    assert!(
        !events
            .iter()
            .any(|e| e.reason.as_deref() == Some("GateOpened")),
        "{events:?}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let node = env.node("node-dry").await;
    assert!(
        has_gate_taint(&node),
        "dry-run removed the taint:\n{}",
        ng.logs()
    );
    assert_eq!(
        annotation(&node, "nodegate.dev/opened-at"),
        None,
        "dry-run annotated the node"
    );
}

/// The schedule deadline (`--schedule-timeout`): a DaemonSet that belongs on
/// the node but whose pods its namespace's ResourceQuota (pods: 0) refuses
/// never gets a pod there; the node opens at the schedule deadline, long
/// before `--timeout`, and the Warning names that deadline and the member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_deadline_opens_a_node_whose_member_never_got_a_pod() {
    let env = Env::new("gate-schedule").await;
    env.create_ds(DsSpec::new("cni")).await;
    env.cluster.namespace("quota").await;
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(env.cluster.client.clone(), "quota");
    let quota = serde_json::from_value(json!({
        "metadata": {"name": "no-pods"},
        "spec": {"hard": {"pods": "0"}}
    }))
    .expect("static quota manifest");
    quotas
        .create(&PostParams::default(), &quota)
        .await
        .expect("create quota");
    let mut ds = support::gate::daemonset(&DsSpec::new("unscheduled"));
    ds.metadata.namespace = Some("quota".to_string());
    Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(env.cluster.client.clone(), "quota")
        .create(&PostParams::default(), &ds)
        .await
        .expect("create daemonset");
    let ng = Nodegate::start(
        &env.cluster,
        &["--timeout", "5m", "--schedule-timeout", "5s"],
    );
    env.create_node("node-s", &[]).await;

    env.wait_open("node-s", Duration::from_secs(30), &[&ng])
        .await;
    let node = env.node("node-s").await;
    assert_eq!(
        annotation(&node, "nodegate.dev/opened-by").as_deref(),
        Some("timeout")
    );
    let note = wait_for("GateTimedOut event", Duration::from_secs(10), || async {
        let evs = env.events_for("node-s").await;
        evs.iter()
            .find(|e| e.reason.as_deref() == Some("GateTimedOut"))
            .and_then(|e| e.note.clone())
            .ok_or_else(|| format!("{evs:?}"))
    })
    .await;
    assert!(
        note.contains("schedule deadline (--schedule-timeout)")
            && note.contains("quota/unscheduled (never scheduled"),
        "the warning must name the schedule deadline and the member: {note}"
    );
    assert!(!note.contains("infra/cni"), "cni was Ready: {note}");
}
