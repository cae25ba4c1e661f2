//! The ServiceAccount deploy/ creates runs the gate with deploy/'s RBAC,
//! and nothing more.

use super::*;

use super::manifests::container_args;
use super::policy::{
    a_renamed_serviceaccount_is_still_held, admission_policy_limits_node_changes,
    node_identity_cannot_write_nodegate_annotations,
    webhook_certificate_writes_reach_only_its_own_objects,
    webhook_policy_lets_only_the_ca_bundle_change,
};

// ---------------------------------------------------------------------------
// 3. nodegate with nothing but deploy/'s RBAC
// ---------------------------------------------------------------------------

/// A token for nodegate's ServiceAccount, by TokenRequest (as the kubelet
/// gets a pod's projected token).
pub(super) fn sa_token(admin: &Path) -> String {
    must(
        "kubectl create token",
        kubectl(
            admin,
            &["-n", NS, "create", "token", SA, "--duration=1h"],
            None,
        ),
    )
    .stdout
    .trim()
    .to_string()
}

/// A kubeconfig that carries only `token` and the cluster's CA: no client
/// certificate, no admin token, nothing else to fall back on.
pub(super) fn token_kubeconfig(admin: &Path, token: &str, dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(admin)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", admin.display()));
    let kc: Value = serde_saphyr::from_str(&text).expect("admin kubeconfig parses");
    let cluster = &kc["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().expect("server URL");
    let ca = cluster["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data");
    let sa_kc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "nodegate", "user": {"token": token}}],
        "contexts": [{"name": "nodegate", "context": {"cluster": "local", "user": "nodegate", "namespace": NS}}],
        "current-context": "nodegate",
    });
    let path = dir.join("nodegate-sa.kubeconfig");
    std::fs::write(&path, serde_saphyr::to_string(&sa_kc).expect("yaml"))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// `kubectl auth can-i` as the ServiceAccount itself (a
/// SelfSubjectAccessReview with its token): true for "yes".
fn can_i(sa_kubeconfig: &Path, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let out = kubectl(sa_kubeconfig, &all, None);
    match out.stdout.trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i {args:?}: unexpected answer {other:?}\n{}",
            out.stderr
        ),
    }
}

/// What a token of deploy/'s ServiceAccount (webhook mode) may and may not
/// do, asked of the API server with the token itself (access reviews and
/// real requests), and what the admission policies let it change on Nodes
/// and on its webhook configuration. Run with a TokenRequest token here and,
/// in real_node.rs, with the token the kubelet projected into a running
/// nodegate pod.
pub(super) async fn the_token_gets_exactly_deploys_rights(
    cluster: &TestCluster,
    admin: &Path,
    sa: &Path,
) {
    let allowed: &[&[&str]] = &[
        &["get", "nodes"],
        &["list", "nodes"],
        &["watch", "nodes"],
        &["patch", "nodes"],
        &["list", "daemonsets.apps", "-A"],
        &["watch", "daemonsets.apps", "-A"],
        &["list", "pods", "-A"],
        &["watch", "pods", "-A"],
        &["list", "csinodes.storage.k8s.io"],
        &["watch", "csinodes.storage.k8s.io"],
        &["create", "events.events.k8s.io", "-n", "default"],
        &["create", "leases.coordination.k8s.io", "-n", NS],
        &["get", "leases.coordination.k8s.io/nodegate", "-n", NS],
        &["update", "leases.coordination.k8s.io/nodegate", "-n", NS],
        // The self-managed webhook certificate: its one Secret, and the
        // caBundle of its one webhook configuration.
        &["get", "secrets/nodegate-webhook-tls", "-n", NS],
        &["update", "secrets/nodegate-webhook-tls", "-n", NS],
        &[
            "get",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "patch",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
    ];
    let forbidden: &[&[&str]] = &[
        &["get", "secrets", "-A"],
        &["list", "secrets", "-n", NS],
        &["watch", "secrets", "-n", NS],
        // No Secret but the webhook's own, and that one only in its place.
        &["get", "secrets/other-tls", "-n", NS],
        &["update", "secrets/other-tls", "-n", NS],
        &["patch", "secrets/other-tls", "-n", NS],
        &["create", "secrets", "-n", NS],
        &["delete", "secrets/nodegate-webhook-tls", "-n", NS],
        // Its own Secret: only the verbs the code uses (get, update).
        &["patch", "secrets/nodegate-webhook-tls", "-n", NS],
        &["list", "secrets/nodegate-webhook-tls", "-n", NS],
        &["watch", "secrets/nodegate-webhook-tls", "-n", NS],
        &["get", "secrets/nodegate-webhook-tls", "-n", "kube-system"],
        &["update", "secrets/nodegate-webhook-tls", "-n", "default"],
        // No webhook configuration but its own, and no other kind of it.
        // Its own only by JSON patch (the caBundle), never a whole update.
        &[
            "update",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "get",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other-webhooks",
        ],
        &[
            "update",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other-webhooks",
        ],
        &[
            "patch",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/other-webhooks",
        ],
        &[
            "list",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        ],
        &[
            "create",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        ],
        &[
            "delete",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "update",
            "validatingwebhookconfigurations.admissionregistration.k8s.io/nodegate",
        ],
        &[
            "update",
            "validatingadmissionpolicies.admissionregistration.k8s.io/nodegate-node-changes",
        ],
        &["get", "configmaps", "-n", "kube-system"],
        &["patch", "pods", "-A"],
        &["delete", "pods", "-A"],
        &["create", "pods", "-n", NS],
        &["get", "pods", "-A"],
        &["create", "csinodes.storage.k8s.io"],
        &["update", "csinodes.storage.k8s.io"],
        &["delete", "nodes"],
        &["update", "nodes"],
        &["create", "nodes"],
        &["patch", "nodes", "--subresource=status"],
        &["patch", "daemonsets.apps", "-A"],
        &["get", "daemonsets.apps", "-A"],
        &["create", "events", "-n", "default"],
        // Events only where nodegate writes them.
        &["create", "events.events.k8s.io", "-n", NS],
        &["create", "events.events.k8s.io", "-n", "kube-system"],
        &["patch", "events.events.k8s.io", "-n", "default"],
        &["delete", "events.events.k8s.io", "-n", "default"],
        &[
            "update",
            "leases.coordination.k8s.io/kube-controller-manager",
            "-n",
            NS,
        ],
        &[
            "update",
            "leases.coordination.k8s.io/nodegate",
            "-n",
            "kube-system",
        ],
        &["create", "leases.coordination.k8s.io", "-n", "kube-system"],
        &["delete", "leases.coordination.k8s.io/nodegate", "-n", NS],
        &["create", "serviceaccounts/token", "-n", NS],
        &["impersonate", "users"],
        &["escalate", "clusterroles.rbac.authorization.k8s.io"],
        &["bind", "clusterroles.rbac.authorization.k8s.io"],
        &["create", "clusterrolebindings.rbac.authorization.k8s.io"],
    ];
    let wrong: Vec<String> = allowed
        .iter()
        .filter(|a| !can_i(sa, a))
        .map(|a| format!("refused but needed: {}", a.join(" ")))
        .chain(
            forbidden
                .iter()
                .filter(|a| can_i(sa, a))
                .map(|a| format!("allowed but must not be: {}", a.join(" "))),
        )
        .collect();
    assert!(
        wrong.is_empty(),
        "RBAC of deploy/kustomize/overlays/webhook:\n{}",
        wrong.join("\n")
    );
    // And one real request, not just a review: the API server says 403.
    let secrets = kubectl(sa, &["get", "secrets", "-A"], None);
    assert!(
        !secrets.ok && secrets.stderr.contains("Forbidden"),
        "reading secrets must be Forbidden: {}{}",
        secrets.stdout,
        secrets.stderr
    );

    webhook_certificate_writes_reach_only_its_own_objects(admin, sa);

    // --- the admission policy: with the token, a Node changes only by its
    // nodegate.dev/ taints and annotations.
    admission_policy_limits_node_changes(cluster, sa).await;
    // ... in its webhook configuration, only the caBundle; and a node
    // identity may not write nodegate.dev/ annotations.
    webhook_policy_lets_only_the_ca_bundle_change(admin, sa).await;
}

fn daemonset(name: &str, hold: bool, ready_after: Option<&str>, pool: Option<&str>) -> DaemonSet {
    let mut labels = BTreeMap::from([("app".to_string(), name.to_string())]);
    if hold {
        labels.insert("nodegate.test/hold-not-ready".into(), "true".into());
    }
    let annotations: BTreeMap<String, String> = ready_after
        .map(|d| ("nodegate.test/ready-after".to_string(), d.to_string()))
        .into_iter()
        .collect();
    let node_selector: BTreeMap<String, String> = pool
        .map(|p| ("example.com/pool".to_string(), p.to_string()))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "infra"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "containers": [{"name": "agent", "image": "registry.invalid/agent:1"}],
                    "tolerations": [{"key": TAINT, "operator": "Exists"}],
                    "nodeSelector": node_selector,
                },
            },
        },
    }))
    .expect("daemonset manifest")
}

fn gated(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT))
}

async fn wait_opened(
    nodes: &Api<Node>,
    name: &str,
    within: Duration,
    logs: &dyn Fn() -> String,
) -> String {
    let what = format!("{name} to open");
    let seen = wait_for(&what, within, || async {
        match nodes.get(name).await {
            Ok(n) if !gated(&n) => Ok(annotation(&n, "nodegate.dev/opened-by")),
            Ok(n) => Err(format!(
                "still tainted: {:?}",
                n.spec.and_then(|s| s.taints)
            )),
            Err(e) => Err(e.to_string()),
        }
    });
    // A panic inside wait_for would lose nodegate's side of the story.
    match tokio::time::timeout(within + Duration::from_secs(5), seen).await {
        Ok(by) => {
            by.unwrap_or_else(|| panic!("{name} opened without nodegate.dev/opened-by\n{}", logs()))
        }
        Err(_) => panic!("{name} did not open within {within:?}\n{}", logs()),
    }
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("nodegate")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serviceaccount_with_deploy_rbac_runs_the_gate_and_nothing_more() {
    let cluster = TestCluster::start("deploy-rbac").await;
    let admin = cluster.kubeconfig.clone();

    // --- deploy/'s identity and permissions, for real, in the webhook mode
    // (the base's and the webhook's grants; the base alone grants a subset,
    // with no Secret or webhook configuration at all: see manifests.rs); the
    // Deployment is not created (kwok runs no real containers): nodegate
    // runs out of cluster below, as that ServiceAccount.
    let base = objects(&kustomize("deploy/kustomize/overlays/webhook"));
    let identity: Vec<&Value> = base
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "Namespace"
                        | "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Role"
                        | "RoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                        | "Secret"
                        | "MutatingWebhookConfiguration"
                )
            )
        })
        .collect();
    assert_eq!(
        identity.len(),
        24,
        "namespace, account, five roles, five bindings, five admission policies and their \
         bindings, the webhook's empty Secret and its configuration"
    );
    // The webhook configuration is applied for real, and no nodegate-webhook
    // Service exists: every node below is created while the API server
    // cannot reach the webhook, and failurePolicy Ignore lets it register.
    must(
        "apply deploy/'s ServiceAccount and RBAC",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&identity))),
    );
    // TokenRequest, as the kubelet does for a pod's projected token.
    let token = sa_token(&admin);
    assert!(!token.is_empty(), "TokenRequest returned no token");
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &token, dir.path());

    let whoami = must(
        "kubectl auth whoami",
        kubectl(
            &sa,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            None,
        ),
    );
    assert_eq!(
        whoami.stdout.trim(),
        format!("system:serviceaccount:{NS}:{SA}")
    );

    // --- what the token may and may not do, and what the admission
    // policies let it change.
    the_token_gets_exactly_deploys_rights(&cluster, &admin, &sa).await;
    node_identity_cannot_write_nodegate_annotations(&admin).await;
    a_renamed_serviceaccount_is_still_held(&cluster, &admin).await;

    // --- a gate scenario, run by two replicas holding only that token.
    cluster.namespace("infra").await;
    let ds: Api<DaemonSet> = Api::namespaced(cluster.client.clone(), "infra");
    for d in [
        daemonset("cni", false, None, None),
        daemonset("logs", false, Some("1s"), None),
        // Broken on the "gpu" pool only: its pods there never turn Ready.
        daemonset("gpu-agent", true, None, Some("gpu")),
    ] {
        ds.create(&PostParams::default(), &d)
            .await
            .expect("create daemonset");
    }
    // The replicas run with the base's own arguments (the webhook with its
    // self-managed certificate, the late-taint net), the webhook on a free
    // loopback port instead of 0.0.0.0:9443, plus short lease timings: any
    // write the webhook's certificate or the net needs and deploy/'s RBAC
    // lacks shows up as a refusal in their logs (checked at the end).
    let deployed: Vec<String> = container_args(&base)
        .into_iter()
        .filter(|a| a != "run" && a != "--leader-elect")
        .map(|a| {
            if a.starts_with("--webhook-addr=") {
                "--webhook-addr=127.0.0.1:0".to_string()
            } else {
                a
            }
        })
        .collect();
    assert!(
        deployed
            .iter()
            .any(|a| a.starts_with("--webhook-cert-secret=")),
        "the webhook overlay runs the self-managed webhook certificate: {deployed:?}"
    );
    let election = [
        "--leader-elect",
        "--lease-namespace",
        NS,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "1s",
        "--timeout",
        "8s",
        "--http-addr",
        "127.0.0.1:0",
    ];
    let mut replicas: Vec<(String, Nodegate)> = ["nodegate-a", "nodegate-b"]
        .into_iter()
        .map(|name| {
            let args: Vec<&str> = deployed
                .iter()
                .map(String::as_str)
                .chain(election)
                .collect();
            let ng = Nodegate::start_as(&sa, &[("POD_NAME", name), ("POD_NAMESPACE", NS)], &args);
            (name.to_string(), ng)
        })
        .collect();
    let logs = |rs: &[(String, Nodegate)]| -> String {
        rs.iter()
            .map(|(n, ng)| format!("---- {n} ----\n{}", ng.logs()))
            .collect::<Vec<_>>()
            .join("\n")
    };

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NS);
    let first_leader = wait_for("a leader", Duration::from_secs(30), || async {
        lease_holder(&leases)
            .await
            .ok_or_else(|| "no holder yet".to_string())
    })
    .await;
    eprintln!("leader: {first_leader}");

    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let taint = [(TAINT, "", "NoSchedule")];
    cluster.create_node(&fake_node("web-0", &[], &taint)).await;
    cluster
        .create_node(&fake_node("gpu-0", &[("example.com/pool", "gpu")], &taint))
        .await;

    let l = || logs(&replicas);
    assert_eq!(
        wait_opened(&nodes, "web-0", Duration::from_secs(30), &l).await,
        "ready"
    );
    assert_eq!(
        wait_opened(&nodes, "gpu-0", Duration::from_secs(30), &l).await,
        "timeout"
    );

    // The Events were recorded, with the ServiceAccount's own permission.
    let events: Api<KubeEvent> = Api::namespaced(cluster.client.clone(), "default");
    wait_for(
        "GateOpened and GateTimedOut events",
        Duration::from_secs(15),
        || async {
            let evs = events
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            let reasons: Vec<(String, String)> = evs
                .items
                .iter()
                .map(|e| {
                    (
                        e.regarding
                            .as_ref()
                            .and_then(|r| r.name.clone())
                            .unwrap_or_default(),
                        e.reason.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let has = |n: &str, r: &str| reasons.iter().any(|(a, b)| a == n && b == r);
            if has("web-0", "GateOpened") && has("gpu-0", "GateTimedOut") {
                Ok(())
            } else {
                Err(format!("{reasons:?}"))
            }
        },
    )
    .await;

    // --- failover: the leader dies without releasing the lease; the
    // follower takes over after the lease duration and gates the next node.
    let leader_at = replicas
        .iter()
        .position(|(name, _)| first_leader.starts_with(name.as_str()))
        .unwrap_or_else(|| panic!("lease holder {first_leader} is neither replica"));
    let (dead_name, mut dead) = replicas.remove(leader_at);
    dead.kill();
    eprintln!("killed the leader {dead_name}");
    cluster.create_node(&fake_node("web-1", &[], &taint)).await;
    let l = || logs(&replicas);
    assert_eq!(
        wait_opened(&nodes, "web-1", Duration::from_secs(30), &l).await,
        "ready"
    );
    let second_leader = lease_holder(&leases).await.unwrap_or_default();
    assert!(
        second_leader.starts_with(replicas[0].0.as_str()),
        "the surviving replica {} must hold the lease, holder is {second_leader:?}",
        replicas[0].0
    );

    // No request of either replica was refused: deploy/'s RBAC is enough.
    let all = format!(
        "---- {dead_name} ----\n{}\n{}",
        dead.logs(),
        logs(&replicas)
    );
    for refusal in ["forbidden", "Forbidden", "cannot watch the lease"] {
        assert!(
            !all.contains(refusal),
            "nodegate hit a permission it lacks ({refusal:?}):\n{all}"
        );
    }
}
