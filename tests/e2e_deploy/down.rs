//! nodegate down never keeps new nodes closed (docs/operations.md, "While
//! nodegate is down"), on the real API server: the kustomize base applied
//! with an image no registry serves taints no new node; a leader's
//! parameters make the policy taint; a crash-looping replica deletes what
//! its Pod wrote before it may lead again (and so does a start refused for
//! a bad config); both replicas killed for good, their Pods deleted, leave
//! new nodes untainted within the bound the docs state. nodegate runs as
//! the real binary with the ServiceAccount's own token, as the Deployment's
//! Pods (their names and uids, as the downward API gives them).

use super::*;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::DeleteParams;

use super::rbac::{sa_token, token_kubeconfig};

const PARAMS: &str = "nodegate-admission";
/// docs/operations.md, "While nodegate is down": from the last replica's
/// Pod deleted to new nodes created untainted.
const GONE_BOUND: Duration = Duration::from_secs(30);

fn tainted(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT))
}

/// Creates nodes named `prefix-N` until one comes back from CREATE tainted
/// (`want`) or not, within `within`; the time it took.
async fn until_new_node(nodes: &Api<Node>, prefix: &str, want: bool, within: Duration) -> Duration {
    let started = std::time::Instant::now();
    let mut n = 0;
    wait_for(
        &format!(
            "a new node ({prefix}-N) to come back {}",
            if want { "tainted" } else { "untainted" }
        ),
        within,
        || {
            n += 1;
            let nodes = nodes.clone();
            let name = format!("{prefix}-{n}");
            async move {
                let made = nodes
                    .create(&PostParams::default(), &fake_node(&name, &[], &[]))
                    .await
                    .map_err(|e| e.to_string())?;
                if tainted(&made) == want {
                    Ok(())
                } else {
                    Err(format!(
                        "{name}: taints {:?}",
                        made.spec.and_then(|s| s.taints)
                    ))
                }
            }
        },
    )
    .await;
    started.elapsed()
}

/// A node created now must come back `want` tainted, at the first try.
async fn new_node_is(nodes: &Api<Node>, name: &str, want: bool, why: &str) {
    let made = nodes
        .create(&PostParams::default(), &fake_node(name, &[], &[]))
        .await
        .expect("create node");
    assert_eq!(
        tainted(&made),
        want,
        "{why}: {name} came back with taints {:?}",
        made.spec.and_then(|s| s.taints)
    );
}

/// The uids of the Pods owning the parameters, or `None` when there are
/// none.
async fn params_owners(cms: &Api<ConfigMap>) -> Option<Vec<String>> {
    let cm = cms.get_opt(PARAMS).await.expect("read the parameters")?;
    Some(
        cm.metadata
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .filter(|o| o.kind == "Pod")
            .map(|o| o.uid)
            .collect(),
    )
}

async fn lease_holder(leases: &Api<Lease>) -> String {
    leases
        .get_opt("nodegate")
        .await
        .expect("read the Lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

/// nodegate as the container of `pod`, with the ServiceAccount's token.
fn replica(sa: &Path, pod: &(String, String), extra: &[&str]) -> Nodegate {
    let mut args = vec![
        "--leader-elect",
        "--taint-new-nodes",
        "--admission-params=nodegate-admission",
    ];
    args.extend_from_slice(extra);
    Nodegate::start_as(
        sa,
        &[
            ("POD_NAME", pod.0.as_str()),
            ("POD_UID", pod.1.as_str()),
            ("POD_NAMESPACE", NS),
        ],
        &args,
    )
}

/// What nodegate-records lets the ServiceAccount's token write as a
/// ConfigMap: the parameters by their one name, nodegate's own NoSchedule
/// taints, a Pod as owner; nothing else (RBAC alone lets it create any
/// ConfigMap in its namespace).
async fn the_records_policy_holds_the_parameters(sa: &Path) {
    let cms: Api<ConfigMap> = Api::namespaced(support::client_for(sa).await, NS);
    let attempt = |name: &str, data: Value, owner: Option<Value>| {
        let cms = cms.clone();
        let mut cm = json!({"metadata": {"name": name, "namespace": NS}, "data": data});
        if let Some(o) = owner {
            cm["metadata"]["ownerReferences"] = json!([o]);
        }
        async move {
            let cm: ConfigMap = serde_json::from_value(cm).expect("a ConfigMap");
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            cms.create(&dry, &cm)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    let own =
        |taint: &str| json!({"startupTaint": taint, "managedTaints": taint, "startupRules": ""});
    // Held once the API server has loaded the policy.
    wait_for(
        "nodegate-records to hold the token's ConfigMaps",
        Duration::from_secs(30),
        || async {
            match attempt("not-the-parameters", json!({"a": "b"}), None).await {
                Ok(()) => Err("another ConfigMap was admitted: not held yet".to_string()),
                Err(e) if e.contains("nodegate-records") => Ok(()),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    attempt(PARAMS, own(&format!("{TAINT}:NoSchedule")), None)
        .await
        .expect("the parameters nodegate writes are admitted");
    let refused = [
        (
            "a foreign taint",
            attempt(PARAMS, own("example.com/block:NoSchedule"), None).await,
        ),
        (
            "NoExecute",
            attempt(PARAMS, own(&format!("{TAINT}:NoExecute")), None).await,
        ),
        (
            "a foreign rule",
            attempt(
                PARAMS,
                json!({"startupTaint": format!("{TAINT}:NoSchedule"),
                       "managedTaints": format!("{TAINT}:NoSchedule"),
                       "startupRules": "a=b=example.com/block:NoSchedule\n"}),
                None,
            )
            .await,
        ),
        (
            "another key",
            attempt(
                PARAMS,
                json!({"startupTaint": format!("{TAINT}:NoSchedule"), "x": "y"}),
                None,
            )
            .await,
        ),
        (
            "a Deployment as owner",
            attempt(
                PARAMS,
                own(&format!("{TAINT}:NoSchedule")),
                Some(
                    json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "x",
                            "uid": "00000000-0000-0000-0000-000000000000"}),
                ),
            )
            .await,
        ),
    ];
    for (what, r) in refused {
        match r {
            Err(e) if e.contains("nodegate-records") => {}
            other => panic!("parameters with {what}: not refused by nodegate-records: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodegate_down_never_keeps_new_nodes_closed() {
    let cluster = TestCluster::start("deploy-down").await;
    let admin = cluster.kubeconfig.clone();
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), NS);
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NS);

    // 1. The base as the README applies it, with an image no registry
    // serves: nodegate never runs.
    let mut base = objects(&kustomize("deploy/kustomize/base"));
    for o in base.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("nodegate.invalid/nodegate:never-pulled");
    }
    let picked: Vec<&Value> = base.iter().collect();
    must(
        "apply the base",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&picked))),
    );
    assert!(
        params_owners(&cms).await.is_none(),
        "the base ships the admission policy's parameters: new nodes are tainted with no nodegate to open them"
    );
    // The policy is in force (parameters written by hand taint a new node),
    // and without them it taints nothing.
    let by_hand = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": PARAMS, "namespace": NS},
        "data": {"startupRules": "", "startupTaint": format!("{TAINT}:NoSchedule"),
                 "managedTaints": format!("{TAINT}:NoSchedule")}});
    must(
        "write parameters by hand",
        kubectl(&admin, &["apply", "-f", "-"], Some(&by_hand.to_string())),
    );
    until_new_node(&nodes, "by-hand", true, Duration::from_secs(60)).await;
    cms.delete(PARAMS, &DeleteParams::default())
        .await
        .expect("delete the hand-written parameters");
    until_new_node(&nodes, "never-ran", false, Duration::from_secs(30)).await;
    new_node_is(&nodes, "never-ran-last", false, "nodegate never ran").await;

    // 2. Two replicas as the Deployment's two Pods; the leader writes the
    // parameters, owned by its Pod, and the policy taints again.
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let lp = ListParams::default().labels("app.kubernetes.io/name=nodegate");
    let pod_ids: Vec<(String, String)> =
        wait_for("the Deployment's two Pods", Duration::from_secs(60), || {
            let pods = pods.clone();
            let lp = lp.clone();
            async move {
                let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
                let ids: Vec<(String, String)> = list
                    .items
                    .iter()
                    .filter_map(|p| Some((p.metadata.name.clone()?, p.metadata.uid.clone()?)))
                    .collect();
                if ids.len() == 2 {
                    Ok(ids)
                } else {
                    Err(format!("{} pods", ids.len()))
                }
            }
        })
        .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &sa_token(&admin), dir.path());
    the_records_policy_holds_the_parameters(&sa).await;
    let mut a = replica(&sa, &pod_ids[0], &[]);
    let mut b = replica(&sa, &pod_ids[1], &[]);
    let owner = wait_for(
        "the leader to write the parameters",
        Duration::from_secs(60),
        || async {
            match params_owners(&cms).await {
                Some(o) if o.len() == 1 => Ok(o[0].clone()),
                other => Err(format!("owners {other:?}\n{}", a.logs())),
            }
        },
    )
    .await;
    let holder = lease_holder(&leases).await;
    let leader = pod_ids
        .iter()
        .find(|(name, _)| holder.starts_with(&format!("{name}_")))
        .unwrap_or_else(|| panic!("no replica holds the Lease: {holder:?}"))
        .clone();
    assert_eq!(
        owner, leader.1,
        "the parameters are owned by the leader's Pod"
    );
    let data = cms.get(PARAMS).await.expect("parameters").data;
    let data = data.unwrap_or_default();
    assert_eq!(
        data.get("startupTaint").map(String::as_str),
        Some("nodegate.dev/initializing:NoSchedule"),
        "{data:?}"
    );
    until_new_node(&nodes, "leading", true, Duration::from_secs(30)).await;

    // 3. A crash loop: both containers killed, their Pods still there. The
    // leader's container starts again; it cannot lead while the dead
    // holder's Lease looks alive to it (60 s here), and meanwhile it has
    // deleted what its Pod wrote.
    a.kill();
    b.kill();
    let mut again = replica(
        &sa,
        &leader,
        &["--lease-duration", "60s", "--renew-deadline", "10s"],
    );
    wait_for(
        "the restarted container to delete its Pod's parameters",
        Duration::from_secs(30),
        || async {
            match params_owners(&cms).await {
                None => Ok(()),
                Some(o) => Err(format!("still there, owned by {o:?}\n{}", again.logs())),
            }
        },
    )
    .await;
    assert_eq!(
        lease_holder(&leases).await,
        holder,
        "the parameters went before the restarted container led"
    );
    new_node_is(&nodes, "crash-loop", false, "a crash-looping nodegate").await;
    again.kill();
    // A start refused for a bad config file deletes them too (parameters
    // its Pod wrote in an earlier run, put back here as that run left them).
    let mut left = by_hand.clone();
    left["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
        "name": leader.0, "uid": leader.1, "controller": true}]);
    must(
        "put back the parameters an earlier run left",
        kubectl(&admin, &["apply", "-f", "-"], Some(&left.to_string())),
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "timout: 5m\n").expect("write a bad config");
    let mut refused = replica(&sa, &leader, &["--config", &bad.to_string_lossy()]);
    let status = refused.wait_exit(Duration::from_secs(30));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(2),
        "a refused config exits 2:\n{}",
        refused.logs()
    );
    assert!(
        params_owners(&cms).await.is_none(),
        "a start refused for its config left the parameters its Pod wrote:\n{}",
        refused.logs()
    );
    new_node_is(&nodes, "refused", false, "a nodegate refusing its config").await;

    // 4. Both replicas killed for good: back up and leading, then the
    // processes die and the Deployment is scaled to zero (its Pods
    // deleted); the garbage collector deletes the parameters with the
    // leader's Pod.
    let mut a = replica(&sa, &pod_ids[0], &[]);
    let mut b = replica(&sa, &pod_ids[1], &[]);
    wait_for(
        "a leader to write the parameters again",
        Duration::from_secs(90),
        || async {
            match params_owners(&cms).await {
                Some(o) if o.len() == 1 => Ok(()),
                other => Err(format!("owners {other:?}")),
            }
        },
    )
    .await;
    until_new_node(&nodes, "back", true, Duration::from_secs(30)).await;
    a.kill();
    b.kill();
    must(
        "scale nodegate to zero",
        kubectl(
            &admin,
            &["-n", NS, "scale", "deployment/nodegate", "--replicas=0"],
            None,
        ),
    );
    let took = until_new_node(&nodes, "gone", false, GONE_BOUND).await;
    eprintln!(
        "[measure] both replicas gone: new nodes untainted {:.1} s after the scale to zero",
        took.as_secs_f64()
    );
    assert!(
        params_owners(&cms).await.is_none(),
        "the parameters outlived the leader's Pod"
    );
}

/// Issue 37 §7: the kustomize base run as a trial (`--dry-run` added, as an
/// overlay would) taints no new node at CREATE. A dry-run leader writes no
/// admission parameters, and a replica deletes those an earlier run of its
/// Pod left, so the policy, which is in force (parameters written by hand
/// taint a new node), adds nothing while the trial leads and decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_of_the_base_taints_no_new_node() {
    let cluster = TestCluster::start("deploy-dry-run").await;
    let admin = cluster.kubeconfig.clone();
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), NS);
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NS);

    // The base with an image no registry serves: its Pods exist, and
    // nodegate runs here as their containers.
    let mut base = objects(&kustomize("deploy/kustomize/base"));
    for o in base.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["template"]["spec"]["containers"][0]["image"] =
            json!("nodegate.invalid/nodegate:never-pulled");
    }
    let picked: Vec<&Value> = base.iter().collect();
    must(
        "apply the base",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&picked))),
    );
    // The policy is in force: parameters written by hand taint a new node.
    let by_hand = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": PARAMS, "namespace": NS},
        "data": {"startupRules": "", "startupTaint": format!("{TAINT}:NoSchedule"),
                 "managedTaints": format!("{TAINT}:NoSchedule")}});
    must(
        "write parameters by hand",
        kubectl(&admin, &["apply", "-f", "-"], Some(&by_hand.to_string())),
    );
    until_new_node(&nodes, "by-hand", true, Duration::from_secs(60)).await;

    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), NS);
    let lp = ListParams::default().labels("app.kubernetes.io/name=nodegate");
    let pod_ids: Vec<(String, String)> =
        wait_for("the Deployment's two Pods", Duration::from_secs(60), || {
            let pods = pods.clone();
            let lp = lp.clone();
            async move {
                let list = pods.list(&lp).await.map_err(|e| e.to_string())?;
                let ids: Vec<(String, String)> = list
                    .items
                    .iter()
                    .filter_map(|p| Some((p.metadata.name.clone()?, p.metadata.uid.clone()?)))
                    .collect();
                if ids.len() == 2 {
                    Ok(ids)
                } else {
                    Err(format!("{} pods", ids.len()))
                }
            }
        })
        .await;
    // What an earlier (live) run of the first Pod left: the trial's start
    // deletes it.
    let mut left = by_hand.clone();
    left["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
        "name": pod_ids[0].0, "uid": pod_ids[0].1, "controller": true}]);
    must(
        "put back the parameters an earlier run left",
        kubectl(&admin, &["apply", "-f", "-"], Some(&left.to_string())),
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &sa_token(&admin), dir.path());
    let a = replica(&sa, &pod_ids[0], &["--dry-run"]);
    let b = replica(&sa, &pod_ids[1], &["--dry-run"]);
    wait_for(
        "the trial to delete what its Pod's earlier run left",
        Duration::from_secs(30),
        || async {
            match params_owners(&cms).await {
                None => Ok(()),
                Some(o) => Err(format!("still there, owned by {o:?}\n{}", a.logs())),
            }
        },
    )
    .await;
    // A trial leader that decides: a node carrying the taint, with nothing
    // to wait for, would open (a Normal GateWouldOpen Event, recorded only
    // by the leader once its watches are synced, when it would also have
    // written the parameters).
    must(
        "create a gated node",
        kubectl(
            &admin,
            &["apply", "-f", "-"],
            Some(
                &serde_json::to_string(&fake_node(
                    "trial-gated",
                    &[],
                    &[(TAINT, "", "NoSchedule")],
                ))
                .expect("a node as JSON"),
            ),
        ),
    );
    let events: Api<KubeEvent> = Api::namespaced(cluster.client.clone(), "default");
    wait_for(
        "the trial leader's GateWouldOpen for trial-gated",
        Duration::from_secs(90),
        || async {
            let list = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let found = list.items.iter().any(|e| {
                e.reason.as_deref() == Some("GateWouldOpen")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("trial-gated")
            });
            if found {
                Ok(())
            } else {
                Err(format!(
                    "none yet\n--- a ---\n{}\n--- b ---\n{}",
                    a.logs(),
                    b.logs()
                ))
            }
        },
    )
    .await;
    let holder = lease_holder(&leases).await;
    assert!(
        pod_ids
            .iter()
            .any(|(name, _)| holder.starts_with(&format!("{name}_"))),
        "a trial replica leads: {holder:?}"
    );
    // A leader that writes them does so within half a second of leading
    // synced; the margin here is four times that.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        params_owners(&cms).await,
        None,
        "a dry-run leader wrote the admission parameters:\n{}\n{}",
        a.logs(),
        b.logs()
    );
    new_node_is(&nodes, "trial-new", false, "a dry-run nodegate leading").await;
    let node = nodes.get("trial-gated").await.expect("read trial-gated");
    assert!(
        tainted(&node),
        "the trial opened trial-gated: {:?}",
        node.spec.and_then(|s| s.taints)
    );
}
