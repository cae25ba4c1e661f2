//! The local control plane itself: the real DaemonSet controller, scheduler
//! and kwok together place DaemonSet pods exactly where Kubernetes says, and
//! the kwok stages shipped in deploy/local behave as documented; and what it
//! sends in protobuf reads as its JSON does, the gates' re-read of their
//! node included.

use nodegate_e2e as support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use nodegate::cluster::lean::Lean;
use nodegate::cluster::protobuf::{Wire, WireNode, WirePod};
use nodegate::cluster::writer::Writer;
use nodegate::cluster::{project, protobuf};
use nodegate_actors::ports::EffectExecutor;
use nodegate_core::vocab::model::Interner;
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

/// Reads `name` at `path` in JSON (`json`) and in protobuf, as the gates
/// re-read their node, until both show the same resourceVersion (kwok's
/// heartbeats and the controllers' status writes move it), and returns
/// both.
async fn both_encodings<K, J>(client: &kube::Client, (path, name): (&str, &str), json: J) -> (K, K)
where
    K: protobuf::Proto,
    J: AsyncFn() -> K,
{
    for _ in 0..20 {
        let from_json = json().await;
        let from_pb: K = protobuf::get(client, path, name)
            .await
            .unwrap_or_else(|e| panic!("{path}/{name} in protobuf: {e}"))
            .unwrap_or_else(|| panic!("{path}/{name} not found in protobuf"));
        if from_json.resource_version() == from_pb.resource_version() {
            return (from_json, from_pb);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{path}/{name} kept changing between the two reads");
}

/// The hot watches read protobuf: what a real API server sends in that
/// encoding projects exactly as its JSON does, for a DaemonSet with every
/// placement field nodegate reads, its pod and its node. A kind the API
/// server cannot send in protobuf (a custom resource) ends the protobuf
/// watch as refused, which sends a watch back to JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_projects_as_json_does_and_a_custom_resource_is_refused() {
    let cluster = TestCluster::start("protobuf").await;
    cluster.namespace(NS).await;
    let gpu = [("gpu", "true", "NoSchedule")];
    cluster
        .create_node(&fake_node("worker-a", &[("disk", "ssd")], &gpu))
        .await;
    let mut ds = daemonset(
        "agent",
        json!({
            "nodeSelector": {"disk": "ssd"},
            "hostNetwork": true,
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                {"operator": "Exists", "effect": "NoExecute"},
            ],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["worker-a"]}]},
                ],
            }}},
        }),
    );
    ds.metadata.annotations = Some([("nodegate.dev/csi-driver".into(), "x.csi".into())].into());
    if let Some(spec) = ds.spec.as_mut() {
        spec.min_ready_seconds = Some(5);
    }
    let client = cluster.client.clone();
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .expect("create daemonset");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let want = pairs(&[("agent", "worker-a")]);
    wait_for("the agent's pod Ready", Duration::from_secs(90), || async {
        let got = ready_placement(&pods).await?;
        if got == want {
            Ok(())
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;

    let path = daemonsets.resource_url();
    let get_ds = async || daemonsets.get("agent").await.expect("GET the DaemonSet");
    let (json, pb) = both_encodings::<DaemonSet, _>(&client, (path, "agent"), get_ds).await;
    let from_pb = project::daemonset(&pb).expect("a projected DaemonSet");
    assert_eq!(from_pb.template.tolerations.len(), 2, "{from_pb:?}");
    assert_eq!(
        from_pb
            .template
            .required_node_affinity
            .as_ref()
            .map(Vec::len),
        Some(2)
    );
    assert!(
        from_pb.template.host_network && from_pb.min_ready_seconds == 5,
        "{from_pb:?}"
    );
    assert_eq!(from_pb.annotations.len(), 1, "{from_pb:?}");
    assert_eq!(Some(from_pb), project::daemonset(&json));

    let listed = pods.list(&ListParams::default()).await.expect("list pods");
    let name = listed.items[0].metadata.name.clone().expect("a pod name");
    let path = pods.resource_url();
    let get_pod = async || Wire::Json(Lean(pods.get(&name).await.expect("GET the pod")));
    let (json, pb) = both_encodings::<WirePod, _>(&client, (path, &name), get_pod).await;
    let Wire::Json(Lean(json)) = json else {
        unreachable!("read as JSON")
    };
    assert!(matches!(pb, Wire::Proto(_)), "{pb:?}");
    let pb_view = pb.view();
    let from_pb = project::pod_in(&pb_view, &mut Interner::default(), project::Keep::ALL)
        .expect("a projected pod");
    assert!(
        from_pb.ready && from_pb.controller_uid.is_some(),
        "{from_pb:?}"
    );
    assert_eq!(Some(from_pb), project::pod(&json));
    // A pod is read for where it is bound, not for its placement (the
    // DaemonSet's template above is what placement reads).
    let bound = json.spec.as_ref().and_then(|s| s.node_name.as_deref());
    assert_eq!(pb_view.node_name.as_deref(), bound);
    assert!(bound.is_some(), "{json:?}");

    let nodes: Api<Node> = Api::all(client.clone());
    let get_node = async || Wire::Json(Lean(nodes.get("worker-a").await.expect("GET the node")));
    let path = nodes.resource_url();
    let (json, pb) = both_encodings::<WireNode, _>(&client, (path, "worker-a"), get_node).await;
    let Wire::Json(Lean(json)) = json else {
        unreachable!("read as JSON")
    };
    assert!(matches!(pb, Wire::Proto(_)), "{pb:?}");
    let (from_pb, odd) = project::node_in(&pb.view(), &mut Interner::default());
    let from_pb = from_pb.expect("a projected node");
    assert!(
        !from_pb.taints.is_empty() && !from_pb.conditions.is_empty(),
        "{from_pb:?}"
    );
    assert_eq!((Some(from_pb), odd), project::node(&json));

    // The gates' re-read of their node (after a rejected untaint) goes
    // through the same protobuf read, and projects as the JSON does.
    let writer = Writer::new(
        client.clone(),
        1,
        100.0,
        10,
        Duration::from_secs(10),
        "e2e".into(),
    );
    let reread = wait_for(
        "the re-read at the JSON's version",
        Duration::from_secs(30),
        || async {
            let json = nodes.get("worker-a").await.map_err(|e| e.to_string())?;
            let reread = writer.get_node("worker-a").await?;
            let want = project::node(&json).0;
            if reread.as_ref().map(|n| &n.resource_version)
                == want.as_ref().map(|n| &n.resource_version)
            {
                Ok((reread, want))
            } else {
                Err(format!("{reread:?} against {want:?}"))
            }
        },
    )
    .await;
    assert!(reread.0.is_some(), "{reread:?}");
    assert_eq!(reread.0, reread.1);
    let missing = writer.get_node("no-such-node").await;
    assert!(matches!(missing, Ok(None)), "{missing:?}");
    let missing = protobuf::get::<WireNode>(&client, nodes.resource_url(), "no-such-node").await;
    assert!(matches!(missing, Ok(None)), "{missing:?}");

    // A custom resource: the protobuf watch gives up, naming the answer.
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.nodegate.dev"},
        "spec": {
            "group": "example.nodegate.dev",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Cluster",
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }}],
        },
    }))
    .expect("a CRD");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create the CRD");
    let mut failures = Vec::new();
    let config = kube::runtime::watcher::Config::default();
    let path = "/apis/example.nodegate.dev/v1/widgets";
    let mut on = |e: Result<_, protobuf::Error>| failures.extend(e.err().map(|e| e.to_string()));
    let run = protobuf::run::<DaemonSet>(&client, path, &config, &mut on);
    let why = tokio::time::timeout(Duration::from_secs(60), run).await;
    let why = why.unwrap_or_else(|_| panic!("not refused within 60 s: {failures:?}"));
    assert!(why.contains("406") || why.contains("answer in"), "{why}");
    // And a read of one such object is refused, not misread.
    let widget = ApiResource {
        group: "example.nodegate.dev".into(),
        version: "v1".into(),
        api_version: "example.nodegate.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::all_with(client.clone(), &widget);
    let one: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.nodegate.dev/v1", "kind": "Widget", "metadata": {"name": "w1"},
    }))
    .expect("a widget");
    wait_for("a widget created", Duration::from_secs(30), || async {
        match widgets.create(&PostParams::default(), &one).await {
            Ok(_) => Ok(()),
            // Created by an earlier try whose answer was lost.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    let read = protobuf::get::<DaemonSet>(&client, widgets.resource_url(), "w1").await;
    assert!(
        matches!(read, Err(protobuf::Failed::Refused(_))),
        "{read:?}"
    );
}
