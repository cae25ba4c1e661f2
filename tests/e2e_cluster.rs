//! The local control plane itself: the real DaemonSet controller, scheduler
//! and kwok together place DaemonSet pods exactly where Kubernetes says, and
//! the kwok stages shipped in deploy/local behave as documented.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::{TestCluster, fake_node, wait_for};

const NS: &str = "e2e";

fn daemonset(name: &str, spec_extra: serde_json::Value) -> DaemonSet {
    let mut pod_spec = json!({
        "containers": [{"name": "main", "image": "registry.invalid/agent:1"}],
    });
    if let (Some(base), Some(extra)) = (pod_spec.as_object_mut(), spec_extra.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": pod_spec,
            },
        },
    }))
    .expect("daemonset manifest is valid")
}

/// (daemonset, node) pairs that have a Running, Ready pod.
async fn ready_placement(pods: &Api<Pod>) -> Result<BTreeSet<(String, String)>, String> {
    let list = pods
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let mut out = BTreeSet::new();
    for p in list.items {
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
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if let (Some(app), Some(node), true) = (app, node, ready) {
            out.insert((app, node));
        }
    }
    Ok(out)
}

fn pairs(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemonset_pods_become_ready_exactly_where_the_controller_places_them() {
    let cluster = TestCluster::start("placement").await;
    cluster.namespace(NS).await;
    cluster
        .create_node(&fake_node("worker-a", &[("disk", "ssd")], &[]))
        .await;
    cluster
        .create_node(&fake_node("worker-b", &[("disk", "hdd")], &[]))
        .await;
    cluster
        .create_node(&fake_node(
            "worker-gpu",
            &[("disk", "ssd")],
            &[("gpu", "true", "NoSchedule")],
        ))
        .await;

    let ds_api: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), NS);
    let everywhere = daemonset(
        "everywhere",
        json!({"tolerations": [{"operator": "Exists"}]}),
    );
    let ssd_only = daemonset("ssd-only", json!({"nodeSelector": {"disk": "ssd"}}));
    for ds in [&everywhere, &ssd_only] {
        ds_api
            .create(&PostParams::default(), ds)
            .await
            .expect("create daemonset");
    }

    let want = pairs(&[
        ("everywhere", "worker-a"),
        ("everywhere", "worker-b"),
        ("everywhere", "worker-gpu"),
        // worker-b lacks the label; worker-gpu has a taint ssd-only does not tolerate.
        ("ssd-only", "worker-a"),
    ]);
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let got = wait_for(
        "DaemonSet pods to be Ready",
        Duration::from_secs(90),
        || async {
            let got = ready_placement(&pods).await?;
            if got == want {
                Ok(got)
            } else {
                Err(format!("{got:?}"))
            }
        },
    )
    .await;
    assert_eq!(got, want);

    // The placement must also be stable: no extra pod appears on another node.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = pods.list(&ListParams::default()).await.expect("list pods");
    assert_eq!(
        all.items.len(),
        want.len(),
        "unexpected extra pods:\n{}",
        cluster.kubectl(&["get", "pods", "-A", "-o", "wide"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_stages_hold_delay_and_crash_pods_as_documented() {
    let cluster = TestCluster::start("stages").await;
    cluster.namespace(NS).await;
    cluster.create_node(&fake_node("worker-a", &[], &[])).await;

    let ds_api: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), NS);
    let mut held = daemonset("held", json!({}));
    let mut delayed = daemonset("delayed", json!({}));
    let mut crashing = daemonset("crashing", json!({}));
    let set_template_meta =
        |ds: &mut DaemonSet, labels: &[(&str, &str)], annotations: &[(&str, &str)]| {
            let meta = ds
                .spec
                .as_mut()
                .and_then(|s| s.template.metadata.as_mut())
                .expect("template metadata");
            let l = meta.labels.get_or_insert_with(Default::default);
            for (k, v) in labels {
                l.insert(k.to_string(), v.to_string());
            }
            let a = meta.annotations.get_or_insert_with(Default::default);
            for (k, v) in annotations {
                a.insert(k.to_string(), v.to_string());
            }
        };
    set_template_meta(&mut held, &[("nodegate.test/hold-not-ready", "true")], &[]);
    set_template_meta(&mut delayed, &[], &[("nodegate.test/ready-after", "3s")]);
    set_template_meta(&mut crashing, &[("nodegate.test/crash", "true")], &[]);
    for ds in [&held, &delayed, &crashing] {
        ds_api
            .create(&PostParams::default(), ds)
            .await
            .expect("create daemonset");
    }

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let pod_of = |app: &'static str| {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={app}")))
                .await
                .map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .next()
                .ok_or_else(|| format!("no {app} pod yet"))
        }
    };
    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };

    // The delayed pod runs first, not Ready, then turns Ready about 3 s later.
    let running = wait_for("delayed pod Running", Duration::from_secs(60), || async {
        let p = pod_of("delayed").await?;
        if phase(&p) == "Running" {
            Ok(p)
        } else {
            Err(phase(&p))
        }
    })
    .await;
    assert!(
        !ready(&running),
        "a pod with ready-after must not be Ready as soon as it runs"
    );
    wait_for("delayed pod Ready", Duration::from_secs(30), || async {
        let p = pod_of("delayed").await?;
        if ready(&p) {
            Ok(())
        } else {
            Err("not Ready".into())
        }
    })
    .await;

    // The held pod runs but stays NotReady while labelled.
    let held_pod = wait_for("held pod Running", Duration::from_secs(60), || async {
        let p = pod_of("held").await?;
        if phase(&p) == "Running" {
            Ok(p)
        } else {
            Err(phase(&p))
        }
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let still = pod_of("held").await.expect("held pod");
    assert!(
        !ready(&still),
        "a held pod must stay NotReady while labelled"
    );

    // Removing the label releases it.
    let name = held_pod.metadata.name.clone().expect("pod name");
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"nodegate.test/hold-not-ready": null}}})),
    )
    .await
    .expect("remove hold label");
    wait_for("released pod Ready", Duration::from_secs(30), || async {
        let p = pod_of("held").await?;
        if ready(&p) {
            Ok(())
        } else {
            Err("not Ready".into())
        }
    })
    .await;

    // The crashing pod shows a restarting container and never turns Ready.
    let crashed = wait_for(
        "crashing pod in CrashLoopBackOff",
        Duration::from_secs(60),
        || async {
            let p = pod_of("crashing").await?;
            let waiting = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.clone())
                .unwrap_or_default();
            if waiting == "CrashLoopBackOff" {
                Ok(p)
            } else {
                Err(waiting)
            }
        },
    )
    .await;
    assert!(!ready(&crashed));
    let restarts = crashed
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.first())
        .map(|c| c.restart_count)
        .unwrap_or_default();
    assert!(restarts > 0, "a crashing container must show restarts");
}
