//! nodegate in another namespace (deploy/kustomize/overlays/namespace), on
//! the real API server: the leader, in platform-system with that
//! namespace's ServiceAccount token, writes the admission parameters where
//! the moved binding looks for them (a new node is tainted at CREATE), and
//! records its Events in `default` (the Events grant stayed there).

use super::*;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};

const MOVED: &str = "platform-system";

#[test]
fn the_namespace_overlay_moves_everything_but_the_events_grant() {
    let objs = objects(&kustomize("deploy/kustomize/overlays/namespace"));
    for o in &objs {
        let (kind, name) = (
            o["kind"].as_str().unwrap_or_default(),
            &o["metadata"]["name"],
        );
        let ns = o["metadata"]["namespace"].as_str();
        match kind {
            "Role" | "RoleBinding" if name == "nodegate-events" => {
                assert_eq!(ns, Some("default"), "{kind} {name}")
            }
            "ServiceAccount"
            | "Role"
            | "RoleBinding"
            | "Service"
            | "Deployment"
            | "PodDisruptionBudget" => assert_eq!(ns, Some(MOVED), "{kind} {name}"),
            _ => {}
        }
        for s in o["subjects"].as_array().into_iter().flatten() {
            if s["kind"] == "ServiceAccount" {
                assert_eq!(s["namespace"], MOVED, "{kind} {name} subject");
            }
        }
    }
    let binding = objs
        .iter()
        .find(|o| o["kind"] == "MutatingAdmissionPolicyBinding")
        .expect("the policy's binding");
    assert_eq!(binding["spec"]["paramRef"]["namespace"], MOVED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodegate_in_another_namespace_taints_at_create_and_records_events() {
    let cluster = TestCluster::start("deploy-namespace").await;
    let admin = cluster.kubeconfig.clone();
    let mut objs = objects(&kustomize("deploy/kustomize/overlays/namespace"));
    for o in objs.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("nodegate.invalid/nodegate:never-pulled");
    }
    let picked: Vec<&Value> = objs.iter().collect();
    must(
        "apply overlays/namespace",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&picked))),
    );
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), MOVED);
    let lp = ListParams::default().labels("app.kubernetes.io/name=nodegate");
    let pod = wait_for("a Pod of the Deployment", Duration::from_secs(60), || {
        let pods = pods.clone();
        let lp = lp.clone();
        async move {
            let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
            list.items
                .into_iter()
                .find_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
                .ok_or_else(|| "no pod yet".to_string())
        }
    })
    .await;
    let token = must(
        "kubectl create token",
        kubectl(
            &admin,
            &["-n", MOVED, "create", "token", SA, "--duration=1h"],
            None,
        ),
    )
    .stdout
    .trim()
    .to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = super::rbac::token_kubeconfig(&admin, &token, dir.path());
    let ng = Nodegate::start_as(
        &sa,
        &[
            ("POD_NAME", pod.0.as_str()),
            ("POD_UID", pod.1.as_str()),
            ("POD_NAMESPACE", MOVED),
        ],
        &[
            "--leader-elect",
            "--taint-new-nodes",
            "--admission-params=nodegate-admission",
        ],
    );
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), MOVED);
    wait_for(
        "the leader's parameters in platform-system",
        Duration::from_secs(60),
        || async {
            match cms.get_opt("nodegate-admission").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}\n{}", ng.logs())),
            }
        },
    )
    .await;
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let mut n = 0;
    let name = wait_for(
        "a new node tainted at CREATE by the moved binding",
        Duration::from_secs(30),
        || {
            n += 1;
            let nodes = nodes.clone();
            let name = format!("moved-{n}");
            async move {
                let made = nodes
                    .create(&PostParams::default(), &fake_node(&name, &[], &[]))
                    .await
                    .map_err(|e| e.to_string())?;
                let tainted = made
                    .spec
                    .and_then(|s| s.taints)
                    .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT));
                if tainted {
                    Ok(name)
                } else {
                    Err(format!("{name} untainted"))
                }
            }
        },
    )
    .await;
    let events: Api<KubeEvent> = Api::namespaced(cluster.client.clone(), "default");
    wait_for(
        "nodegate's GateOpened Event in default",
        Duration::from_secs(60),
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let found = list.items.iter().any(|e| {
                e.reason.as_deref() == Some("GateOpened")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
            });
            if found {
                Ok(())
            } else {
                Err(format!("no GateOpened for {name}\n{}", ng.logs()))
            }
        },
    )
    .await;
}
