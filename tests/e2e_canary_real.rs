//! The canary member (`canary`, semantics.md §6.9) on a real kubelet:
//! deploy/local's real node (containerd, runc, the bridge CNI with
//! host-local IPAM) gives the canary a real sandbox with an IP. Its own test
//! binary: the real node's start and teardown are machine-wide, and a kwok
//! cluster of a test running beside it in the same process was seen to
//! stall (tests/e2e_canary.rs).

use nodegate_e2e as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use support::gate::has_gate_taint;
use support::{Nodegate, wait_for, wait_for_or};

const LABEL: &str = "nodegate.dev/canary";

async fn wait_gone(pods: &Api<Pod>, name: &str, ng: &Nodegate) {
    wait_for(
        &format!("canary {name} deleted"),
        Duration::from_secs(60),
        || async {
            match pods.get_opt(name).await {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err(format!("still there\n{}", ng.logs())),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await
}

/// On a real kubelet (deploy/local's real node: containerd, runc, the
/// bridge CNI with host-local IPAM, registered with the startup taint): the
/// canary gets a real sandbox with an IP, the kubelet sets
/// `PodReadyToStartContainers`, the gate opens and the canary goes. The
/// pause image the node has imported (pulled from nowhere: `Never`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_node_the_canary_gets_a_sandbox_and_an_ip_and_the_node_opens() {
    const REAL_NODE: &str = "real-node-1";
    const CANARY_NS: &str = "nodegate-canary";
    let cluster = support::TestCluster::start_real_node("canary-real").await;
    cluster.namespace(CANARY_NS).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), CANARY_NS);
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client.clone());
    // Every version of the canary the watch shows, kept for the verdict.
    let seen: Arc<Mutex<Vec<Pod>>> = Arc::default();
    let record = Arc::clone(&seen);
    let watched = pods.clone();
    tokio::spawn(async move {
        let mut stream = watcher(watched, watcher::Config::default().labels(LABEL))
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event {
                record.lock().unwrap_or_else(|e| e.into_inner()).push(p);
            }
        }
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        format!(
            "canary:\n  namespace: {CANARY_NS}\n  image: registry.k8s.io/pause:3.10.2\n  imagePullPolicy: Never\n"
        ),
    )
    .expect("write config");
    let file = file.to_string_lossy().into_owned();
    let ng = Nodegate::start(&cluster, &["--timeout", "10m", "--config", &file]);

    wait_for_or(
        "the real node to open",
        Duration::from_secs(120),
        || async {
            match nodes.get_opt(REAL_NODE).await {
                Ok(Some(n)) if !has_gate_taint(&n) => Ok(()),
                other => Err(format!(
                    "{:?}",
                    other.map(|n| n.and_then(|n| n.spec).and_then(|s| s.taints))
                )),
            }
        },
        || {
            format!(
                "{}\n{}",
                cluster.kubectl(&["get", "pods", "-A", "-o", "wide"]),
                ng.logs()
            )
        },
    )
    .await;
    wait_gone(&pods, &format!("nodegate-canary-{REAL_NODE}"), &ng).await;

    let seen = seen.lock().map(|s| s.clone()).unwrap_or_default();
    let up = seen.iter().find(|p| {
        let status = p.status.as_ref();
        let sandbox = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "PodReadyToStartContainers" && c.status == "True")
            });
        sandbox && status.and_then(|s| s.pod_ip.as_ref()).is_some()
    });
    assert!(
        up.is_some(),
        "the canary was never seen with its sandbox and an IP: {:?}\n{}",
        seen.iter().map(|p| &p.status).collect::<Vec<_>>(),
        ng.logs()
    );
}
