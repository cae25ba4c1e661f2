//! The default install schedules anywhere: on a cluster with one zone and
//! no zone labels (kind, k3d, minikube, much bare metal) the scheduler binds
//! both replicas, on different nodes.

use k8s_openapi::api::core::v1::Pod;

use super::manifests::helm_refuses;
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_install_schedules_both_replicas_on_an_unlabelled_one_zone_cluster() {
    let cluster = TestCluster::start("deploy-schedule").await;
    // Two kwok nodes with hostnames and no topology.kubernetes.io/zone.
    for name in ["plain-a", "plain-b"] {
        cluster.create_node(&fake_node(name, &[], &[])).await;
    }
    cluster.namespace(NS).await;
    // What `helm install` renders against this API server (it serves
    // MutatingAdmissionPolicy), applied for real: the scheduler must bind
    // both pods (kwok runs no containers, so bound is as far as they get).
    let chart = objects(&helm_template(POLICY_API));
    must(
        "kubectl apply the default chart",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            Some(&to_stream(&chart.iter().collect::<Vec<_>>())),
        ),
    );
    let bound = both_bound(&cluster, NS).await;
    assert_ne!(
        bound[0], bound[1],
        "the hostname anti-affinity must put the replicas on different nodes"
    );
    eprintln!("helm chart: both replicas bound: {bound:?}");

    // The kustomize base's Deployment, in a namespace of its own (a spread
    // and an anti-affinity count only pods of their own namespace).
    let base_ns = "nodegate-base";
    cluster.namespace(base_ns).await;
    let base: Vec<Value> = objects(&kustomize("deploy/kustomize/base"))
        .into_iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "ServiceAccount")
        .map(|mut o| {
            o["metadata"]["namespace"] = json!(base_ns);
            o
        })
        .collect();
    assert_eq!(
        base.len(),
        2,
        "the base has one Deployment and one ServiceAccount"
    );
    must(
        "kubectl apply the base's Deployment",
        kubectl(
            &cluster.kubeconfig,
            &["apply", "-f", "-"],
            Some(&to_stream(&base.iter().collect::<Vec<_>>())),
        ),
    );
    let bound = both_bound(&cluster, base_ns).await;
    assert_ne!(bound[0], bound[1], "the base's replicas on different nodes");
    eprintln!("kustomize base: both replicas bound: {bound:?}");
}

/// Waits until the scheduler has bound both nodegate pods in `ns`; the
/// nodes they are bound to.
async fn both_bound(cluster: &TestCluster, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), ns);
    let lp = ListParams::default().labels("app.kubernetes.io/name=nodegate");
    wait_for(
        &format!("both nodegate replicas in {ns} bound by the scheduler"),
        Duration::from_secs(90),
        || {
            let (pods, lp) = (pods.clone(), lp.clone());
            async move {
                let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
                let nodes: Vec<String> = list
                    .items
                    .iter()
                    .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                    .collect();
                if nodes.len() == 2 {
                    return Ok(nodes);
                }
                let why: Vec<String> = list
                    .items
                    .iter()
                    .filter_map(|p| {
                        let c = p.status.as_ref()?.conditions.as_ref()?;
                        let s = c.iter().find(|c| c.type_ == "PodScheduled")?;
                        Some(format!(
                            "{}: {}",
                            p.metadata.name.as_deref().unwrap_or("?"),
                            s.message.as_deref().unwrap_or(&s.status)
                        ))
                    })
                    .collect();
                Err(format!(
                    "{} pods, bound to {nodes:?}; {why:?}",
                    list.items.len()
                ))
            }
        },
    )
    .await
}

/// The chart leaves out what the API server cannot serve: below Kubernetes
/// 1.30 (no ValidatingAdmissionPolicy in admissionregistration.k8s.io/v1)
/// there are no admission policies, and NOTES.txt says so; from 1.30 on,
/// or where the API server lists the kind, they are rendered.
#[test]
fn the_admission_policies_follow_the_api_server() {
    let vaps = |extra: &[&str]| {
        objects(&helm_template(extra))
            .iter()
            .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
            .count()
    };
    assert_eq!(
        vaps(&["--kube-version", "1.28.0"]),
        0,
        "1.28 serves no VAP v1"
    );
    // node-changes, webhook-changes (helm template assumes no
    // MutatingAdmissionPolicy: the webhook mode), node-identity,
    // role-bindings, records.
    assert_eq!(vaps(&["--kube-version", "1.30.0"]), 5);
    assert_eq!(
        vaps(&[
            "--kube-version",
            "1.29.0",
            "--api-versions",
            "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
        ]),
        5
    );
    // Below 1.25 the chart is refused outright (Chart.yaml kubeVersion).
    let old = helm_refuses(&["--kube-version", "1.24.0"]);
    assert!(old.contains("kubeVersion"), "{old}");
}
