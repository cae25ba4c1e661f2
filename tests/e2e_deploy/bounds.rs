//! The grants deploy/ adds since the first round and the admission policies
//! that bound them, on the real API server with nodegate's ServiceAccount's
//! own token (docs/operations.md, "Every write nodegate can make"): the
//! canary grant creates only the canary and deletes only canaries, and a
//! ResourceQuota caps them (kustomize component and Helm chart); bindings of
//! nodegate's roles name ServiceAccounts only, and the policy-subject label
//! makes nobody else subject to nodegate's limits; `components/dry-run`
//! keeps the base's admission policy from tainting.

use super::rbac::{sa_token, token_kubeconfig};
use super::*;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::DeleteParams;
use nodegate::cluster::canary;
use nodegate::settings::config::CanaryPod;
use nodegate_core::deciders::CanaryCreate;
use nodegate_core::rules::placement::ManagedTaint;

/// The base with `components` (paths under deploy/kustomize/components),
/// rendered through an overlay in a temp dir (kustomize takes only relative
/// paths to them).
pub(super) fn base_with(components: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let up = "../".repeat(dir.path().components().count().saturating_sub(1));
    let root = repo_root();
    let repo = root.to_string_lossy();
    let repo = repo.trim_start_matches('/');
    let mut text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {up}{repo}/deploy/kustomize/base\ncomponents:\n"
    );
    for c in components {
        text.push_str(&format!("  - {up}{repo}/deploy/kustomize/components/{c}\n"));
    }
    std::fs::write(dir.path().join("kustomization.yaml"), text).expect("write overlay");
    objects(&kustomize(&dir.path().to_string_lossy()))
}

/// The objects that make nodegate's identity and bounds (no Deployment, no
/// Service, no ConfigMap of its own).
fn identity_of(objs: &[Value]) -> Vec<&Value> {
    objs.iter()
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
                        | "ResourceQuota"
                )
            )
        })
        .collect()
}

/// The canary pod nodegate builds for `node` (src/cluster/canary.rs), with
/// the default canary settings, as JSON to vary.
fn real_canary(node: &str, uid: &str, namespace: &str) -> Value {
    let q = |s: &str| Quantity(s.to_string());
    let settings = CanaryPod {
        image: "registry.k8s.io/pause:3.10".into(),
        image_pull_policy: "IfNotPresent".into(),
        readiness_probe: None,
        resources: ResourceRequirements {
            requests: Some([("cpu".into(), q("1m")), ("memory".into(), q("8Mi"))].into()),
            limits: Some([("memory".into(), q("16Mi"))].into()),
            ..Default::default()
        },
        priority_class_name: None,
    };
    let create = CanaryCreate {
        node: node.into(),
        node_uid: uid.into(),
        name: nodegate_core::canary::pod_name(node),
        label: nodegate_core::canary::label_value(node),
    };
    let tolerate = [ManagedTaint::new(TAINT, "NoSchedule")];
    serde_json::to_value(canary::build(&create, namespace, &settings, &tolerate)).expect("pod json")
}

/// Creates `pod` as the ServiceAccount, dry-run unless `real`: `Ok` or the
/// API server's message.
async fn sa_create(sa: &kube::Client, ns: &str, pod: &Value, real: bool) -> Result<(), String> {
    let pod: Pod = serde_json::from_value(pod.clone()).expect("a pod");
    let params = PostParams {
        dry_run: !real,
        ..Default::default()
    };
    Api::<Pod>::namespaced(sa.clone(), ns)
        .create(&params, &pod)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

async fn sa_delete(sa: &kube::Client, ns: &str, name: &str) -> Result<(), String> {
    let params = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    Api::<Pod>::namespaced(sa.clone(), ns)
        .delete(name, &params)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Refused by `policy` (its name in the API server's message).
fn refused_by_canary_policy(policy: &str, what: &str, r: Result<(), String>) {
    let err = r
        .err()
        .unwrap_or_else(|| panic!("{what}: must be refused, was allowed"));
    assert!(
        err.contains(&format!("ValidatingAdmissionPolicy '{policy}'")),
        "{what}: refused, but not by {policy}: {err}"
    );
}

/// One install's canary bounds, as its ServiceAccount (`sa`): the real
/// canary is admitted; every other shape is refused by `policy`; deleting
/// anything but a canary is refused; the quota counts canaries and stops
/// the one past its hard limit.
async fn canary_bounds_hold(
    cluster: &TestCluster,
    sa: &kube::Client,
    ns: &str,
    policy: &str,
    quota: &str,
) {
    let mut uids = Vec::new();
    for name in [format!("{ns}-a"), format!("{ns}-b")] {
        let made = cluster
            .create_node(&fake_node(&name, &[], &[(TAINT, "", "NoSchedule")]))
            .await;
        uids.push((name, made.metadata.uid.expect("a node uid")));
    }
    let (node, uid) = uids[0].clone();
    let good = real_canary(&node, &uid, ns);

    // Each variant: the real canary changed in one way.
    let variant = |f: &dyn Fn(&mut Value)| {
        let mut p = good.clone();
        f(&mut p);
        p
    };
    let labelled_like_nodegate = variant(&|p| {
        p["metadata"]["labels"]["app.kubernetes.io/name"] = json!("nodegate");
        p["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("nodegate");
    });
    // The policy is enforced a moment after it is created.
    let first = wait_for(
        "the canary policy to refuse a pod labelled like nodegate",
        Duration::from_secs(30),
        || async {
            match sa_create(sa, ns, &labelled_like_nodegate, false).await {
                Ok(()) => Err("admitted: the policy is not enforced yet".to_string()),
                Err(e) if e.contains(&format!("ValidatingAdmissionPolicy '{policy}'")) => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("{ns}: labels like nodegate: {first}");
    refused_by_canary_policy(policy, "a pod labelled like nodegate", Err(first));

    sa_create(sa, ns, &good, false)
        .await
        .unwrap_or_else(|e| panic!("{ns}: the canary nodegate builds must be admitted: {e}"));

    let privileged = variant(&|p| {
        p["spec"]["containers"][0]["securityContext"]["privileged"] = json!(true);
        p["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
        p["spec"]["containers"][0]["securityContext"]["capabilities"] =
            json!({"add": ["SYS_ADMIN"]});
    });
    let secret_volume = variant(&|p| {
        p["spec"]["volumes"] =
            json!([{"name": "token", "secret": {"secretName": "nodegate-webhook-tls"}}]);
        p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "token", "mountPath": "/s"}]);
    });
    let host_root = variant(&|p| {
        p["spec"]["volumes"] = json!([{"name": "root", "hostPath": {"path": "/"}}]);
    });
    let tolerate_all = variant(&|p| {
        p["spec"]["tolerations"] = json!([{"operator": "Exists"}]);
    });
    let other_image = variant(&|p| {
        p["spec"]["containers"][0]["image"] = json!("registry.invalid/miner:1");
    });
    let host_network = variant(&|p| {
        p["spec"]["hostNetwork"] = json!(true);
    });
    let with_token = variant(&|p| {
        p["spec"]["automountServiceAccountToken"] = json!(true);
    });
    let critical = variant(&|p| {
        p["spec"]["priorityClassName"] = json!("system-node-critical");
    });
    let no_owner = variant(&|p| {
        p["metadata"]["ownerReferences"] = json!([]);
    });
    let other_name = variant(&|p| {
        p["metadata"]["name"] = json!("webhook-0");
    });
    let command = variant(&|p| {
        p["spec"]["containers"][0]["command"] = json!(["/bin/sh", "-c", "id"]);
    });
    let sysctl = variant(&|p| {
        p["spec"]["securityContext"]["sysctls"] =
            json!([{"name": "net.ipv4.ip_forward", "value": "1"}]);
    });
    // Pod Security admission runs first: in a "restricted" namespace (the
    // kustomize base's) it refuses what it covers before the policy sees
    // it; in the chart's release namespace, which nothing labels, the
    // policy alone refuses.
    let restricted = cluster
        .kubectl(&["get", "namespace", ns, "-o", "jsonpath={.metadata.labels}"])
        .contains("\"pod-security.kubernetes.io/enforce\":\"restricted\"");
    for (what, pod, pod_security_too) in [
        ("a Secret volume", &secret_volume, false),
        ("a toleration of every taint", &tolerate_all, false),
        ("another image", &other_image, false),
        (
            "a mounted token of another ServiceAccount",
            &with_token,
            false,
        ),
        ("a node-critical priority class", &critical, false),
        ("no Node owner", &no_owner, false),
        ("another name", &other_name, false),
        ("a command", &command, false),
        ("a privileged container", &privileged, true),
        ("a hostPath of /", &host_root, true),
        ("the host network", &host_network, true),
        ("a sysctl", &sysctl, true),
    ] {
        let r = sa_create(sa, ns, pod, false).await;
        if restricted && pod_security_too {
            assert!(r.is_err(), "{ns}: {what} was admitted");
        } else {
            refused_by_canary_policy(policy, what, r);
        }
    }

    // DELETE: a canary, yes; anything else in the namespace, no.
    let other: Pod = serde_json::from_value(json!({
        "metadata": {"name": "nodegate-replica", "namespace": ns,
                     "labels": {"app.kubernetes.io/name": "nodegate", "app.kubernetes.io/instance": "nodegate"}},
        "spec": {
            "nodeName": uids[1].0,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "nodegate", "image": "registry.invalid/nodegate:1",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            "priorityClassName": "system-cluster-critical",
        },
    }))
    .expect("pod");
    Api::<Pod>::namespaced(cluster.client.clone(), ns)
        .create(&PostParams::default(), &other)
        .await
        .unwrap_or_else(|e| panic!("{ns}: the admin creates a non-canary pod: {e}"));
    refused_by_canary_policy(
        policy,
        "deleting a pod that is no canary",
        sa_delete(sa, ns, "nodegate-replica").await,
    );

    // The quota: a real canary counts, nodegate's own (critical) pod does
    // not; with the hard limit at what is used, the next canary is refused.
    sa_create(sa, ns, &good, true)
        .await
        .unwrap_or_else(|e| panic!("{ns}: creating the canary for real: {e}"));
    let used = wait_for(
        "the quota to count the canary",
        Duration::from_secs(30),
        || async {
            let out = kubectl(
                &cluster.kubeconfig,
                &[
                    "-n",
                    ns,
                    "get",
                    "resourcequota",
                    quota,
                    "-o",
                    "jsonpath={.status.used.pods}",
                ],
                None,
            );
            match out.stdout.trim() {
                "1" => Ok(()),
                other => Err(format!("used pods {other:?} {}", out.stderr)),
            }
        },
    );
    used.await;
    sa_delete(sa, ns, good["metadata"]["name"].as_str().expect("name"))
        .await
        .unwrap_or_else(|e| panic!("{ns}: deleting a canary must be allowed: {e}"));
    must(
        "lower the quota to what is used",
        kubectl(
            &cluster.kubeconfig,
            &[
                "-n",
                ns,
                "patch",
                "resourcequota",
                quota,
                "--type=merge",
                "-p",
                r#"{"spec":{"hard":{"pods":"1"}}}"#,
            ],
            None,
        ),
    );
    let second = real_canary(&uids[1].0, &uids[1].1, ns);
    let over = wait_for(
        "the quota to refuse a second canary",
        Duration::from_secs(30),
        || async {
            match sa_create(sa, ns, &second, false).await {
                Ok(()) => Err("admitted: the quota's new limit is not in force yet".to_string()),
                Err(e) if e.contains("exceeded quota") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("{ns}: quota: {over}");
}

/// The canary grant (docs/operations.md, "Every write nodegate can make"),
/// in both install modes: the kustomize canary component in
/// nodegate's restricted namespace, and the chart (`config.canary.enabled`)
/// in an unlabelled release namespace, each with its ServiceAccount's own
/// token. And the bindings: those of nodegate's roles name ServiceAccounts only,
/// and the policy-subject label on another role's binding holds nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_grant_creates_only_the_canary_and_bindings_hold_their_subjects() {
    let cluster = TestCluster::start("deploy-bounds").await;
    let admin = cluster.kubeconfig.clone();

    // --- kustomize: the base and components/canary.
    let kz = base_with(&["canary", "node-condition"]);
    let identity = identity_of(&kz);
    assert!(
        identity
            .iter()
            .any(|o| o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "nodegate-canary-pods"),
        "components/canary ships nodegate-canary-pods"
    );
    must(
        "apply the base's and the canary component's identity and bounds",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&identity))),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &sa_token(&admin), dir.path());
    let client = support::client_for(&sa).await;
    canary_bounds_hold(
        &cluster,
        &client,
        NS,
        "nodegate-canary-pods",
        "nodegate-canary",
    )
    .await;
    records_and_status_are_nodegates_own(&cluster, &client).await;

    // --- Helm: release ng in the unlabelled namespace canary-open. The
    // kustomize policy would hold its ServiceAccount too (it binds
    // ng-nodegate, one of nodegate's roles by its name): it goes first, so
    // that every refusal below is the chart's own policy's.
    must(
        "delete the kustomize canary policy",
        kubectl(
            &admin,
            &[
                "delete",
                "validatingadmissionpolicy,validatingadmissionpolicybinding",
                "nodegate-canary-pods",
            ],
            None,
        ),
    );
    let ns = "canary-open";
    cluster.namespace(ns).await;
    let chart = objects(
        &must(
            "helm template (canary on)",
            run(
                &helm_bin(),
                &[
                    "template",
                    "ng",
                    "deploy/helm/nodegate",
                    "--namespace",
                    ns,
                    "--api-versions",
                    "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
                    "--set",
                    "config.canary.enabled=true",
                ],
                None,
            ),
        )
        .stdout,
    );
    must(
        "apply the chart's identity and bounds",
        kubectl(
            &admin,
            &["apply", "-f", "-"],
            Some(&to_stream(&identity_of(&chart))),
        ),
    );
    let token = must(
        "kubectl create token ng-nodegate",
        kubectl(
            &admin,
            &["-n", ns, "create", "token", "ng-nodegate", "--duration=1h"],
            None,
        ),
    )
    .stdout
    .trim()
    .to_string();
    let helm_dir = tempfile::tempdir().expect("temp dir");
    let helm_sa = support::client_for(&token_kubeconfig(&admin, &token, helm_dir.path())).await;
    canary_bounds_hold(
        &cluster,
        &helm_sa,
        ns,
        "ng-nodegate-canary-pods",
        "ng-nodegate-canary",
    )
    .await;

    bindings_of_nodegates_roles_hold_their_subjects(&cluster, &admin).await;
}

/// Who the policies hold (docs/operations.md, "Every write nodegate can
/// make"). (a) The label is no switch: a labelled binding of another
/// role (here a stand-in for the node controller's) does not make its
/// ServiceAccount subject to nodegate's node policy — it adds a taint of
/// its own. (b) A binding of nodegate's roles to a Group or a User, and an
/// unlabelled ClusterRoleBinding of the role the node policy bounds, are
/// refused: nobody gets nodegate's writes outside the policies' reach.
async fn bindings_of_nodegates_roles_hold_their_subjects(cluster: &TestCluster, admin: &Path) {
    let other_sa = "node-controller-standin";
    let setup = [
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": other_sa, "namespace": NS}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": "example-node-controller"},
               "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "example-node-controller",
                            "labels": {"nodegate.dev/policy-subject": "true"}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "example-node-controller"},
               "subjects": [{"kind": "ServiceAccount", "name": other_sa, "namespace": NS}]}),
    ];
    must(
        "a labelled binding of another controller's role",
        kubectl(
            admin,
            &["apply", "-f", "-"],
            Some(&to_stream(&setup.iter().collect::<Vec<_>>())),
        ),
    );
    cluster
        .create_node(&fake_node(
            "bind-0",
            &[],
            &[("example.com/foreign", "", "NoSchedule")],
        ))
        .await;
    let as_other = |key: &str| {
        let patch = json!([{"op": "add", "path": "/spec/taints/-",
                            "value": {"key": key, "effect": "NoSchedule"}}]);
        kubectl(
            admin,
            &[
                &format!("--as=system:serviceaccount:{NS}:{other_sa}"),
                "patch",
                "node",
                "bind-0",
                "--type",
                "json",
                "-p",
                &patch.to_string(),
            ],
            None,
        )
    };
    // The node policy is enforced (nodegate's own account is held, tested
    // with its token in policy.rs); the other controller is not held by it.
    wait_for("the other controller's RBAC", Duration::from_secs(30), || async {
        let out = as_other("node.kubernetes.io/out-of-service");
        if out.ok {
            Ok(())
        } else if out.stderr.contains("nodegate-node-changes") {
            panic!("the policy-subject label made another controller subject to nodegate's limits: {}", out.stderr)
        } else {
            Err(out.stderr)
        }
    })
    .await;

    let refused = |what: &str, obj: Value, rule: &str| {
        let out = kubectl(admin, &["create", "-f", "-"], Some(&obj.to_string()));
        assert!(
            !out.ok && out.stderr.contains("nodegate-role-bindings") && out.stderr.contains(rule),
            "{what}: must be refused by nodegate-role-bindings ({rule}):\n{}{}",
            out.stdout,
            out.stderr
        );
    };
    let crb = |name: &str, role: &str, labelled: bool, subject: Value| {
        let labels = if labelled {
            json!({"nodegate.dev/policy-subject": "true"})
        } else {
            json!({})
        };
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name, "labels": labels},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
               "subjects": [subject]})
    };
    let group =
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "node-operators"});
    let user = json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"});
    let other = json!({"kind": "ServiceAccount", "name": other_sa, "namespace": NS});
    // Enforced a moment after creation: wait for the first refusal.
    wait_for(
        "the bindings policy to refuse a Group",
        Duration::from_secs(30),
        || async {
            let out = kubectl(
                admin,
                &["create", "--dry-run=server", "-f", "-"],
                Some(&crb("nodegate-ops", "nodegate", true, group.clone()).to_string()),
            );
            if out.ok {
                Err("admitted: not enforced yet".to_string())
            } else if out.stderr.contains("nodegate-role-bindings") {
                Ok(())
            } else {
                Err(out.stderr)
            }
        },
    )
    .await;
    refused(
        "nodegate's ClusterRole bound to a Group",
        crb("nodegate-ops", "nodegate", true, group.clone()),
        "ServiceAccounts only",
    );
    refused(
        "nodegate-node-condition bound to a User",
        crb(
            "nodegate-mallory",
            "nodegate-node-condition",
            true,
            user.clone(),
        ),
        "ServiceAccounts only",
    );
    refused(
        "nodegate's ClusterRole bound without the policy-subject label",
        crb("nodegate-quiet", "nodegate", false, other.clone()),
        "nodegate.dev/policy-subject",
    );
    refused(
        "the canary Role bound to a Group",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "canary-ops", "namespace": NS},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "nodegate-canary"},
               "subjects": [group]}),
        "ServiceAccounts only",
    );
    // Labelled and naming a ServiceAccount: allowed, and then held.
    must(
        "a labelled binding of nodegate's role to another ServiceAccount",
        kubectl(
            admin,
            &["create", "-f", "-"],
            Some(&crb("nodegate-second", "nodegate", true, other).to_string()),
        ),
    );
    let held = wait_for(
        "the node policy to hold the second account",
        Duration::from_secs(30),
        || async {
            let out = as_other("example.com/added");
            if out.ok {
                Err("a foreign taint was added: not held yet".to_string())
            } else if out.stderr.contains("nodegate-node-changes") {
                Ok(out.stderr)
            } else {
                Err(out.stderr)
            }
        },
    );
    let msg = held.await;
    assert!(msg.contains("another taint changed"), "{msg}");
}

/// A trial run writes nothing (docs/operations.md, "Every write nodegate
/// can make"): the kustomize base with components/dry-run (the documented
/// way to run a trial) passes --dry-run, and nodegate, leading, writes no
/// admission parameters, so the API server puts no taint on a new node;
/// the same nodegate without --dry-run writes them and the policy taints
/// (so the policy was in force).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_base_in_dry_run_taints_no_new_node() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cluster = TestCluster::start("deploy-dry-run-policy").await;
    let admin = cluster.kubeconfig.clone();
    let trial = base_with(&["dry-run"]);
    let args = super::manifests::container_args(&trial);
    assert!(args.iter().any(|a| a == "--dry-run"), "{args:?}");
    assert!(
        args.iter()
            .any(|a| a == "--admission-params=nodegate-admission"),
        "{args:?}"
    );
    let picked: Vec<&Value> = trial
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("Namespace" | "MutatingAdmissionPolicy" | "MutatingAdmissionPolicyBinding")
            )
        })
        .collect();
    assert_eq!(picked.len(), 3, "namespace, policy, binding");
    must(
        "apply the base's admission",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&picked))),
    );
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), NS);
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), NS);
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == TAINT))
    };
    // The trial: nodegate with the component's flags, leading.
    let flags: Vec<&str> = args.iter().skip(1).map(String::as_str).collect();
    let mut trial_run = Nodegate::start_as(&admin, &[("POD_NAMESPACE", NS)], &flags);
    wait_for("the trial to lead", Duration::from_secs(60), || async {
        let holder = leases
            .get_opt("nodegate")
            .await
            .map_err(|e| e.to_string())?
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .unwrap_or_default();
        if holder.is_empty() {
            Err("no holder".to_string())
        } else {
            Ok(())
        }
    })
    .await;
    wait_for("the trial to sync", Duration::from_secs(30), || async {
        if trial_run.logs().contains("watches synced") {
            Ok(())
        } else {
            Err(trial_run.logs())
        }
    })
    .await;
    for i in 0..3 {
        let made = nodes
            .create(
                &PostParams::default(),
                &fake_node(&format!("trial-{i}"), &[], &[]),
            )
            .await
            .expect("create node");
        assert!(
            !tainted(&made),
            "a node created in dry-run came back tainted: {:?}",
            made.spec
        );
    }
    assert!(
        cms.get_opt("nodegate-admission")
            .await
            .expect("read the parameters")
            .is_none(),
        "a dry run wrote the admission parameters:\n{}",
        trial_run.logs()
    );
    trial_run.terminate(Duration::from_secs(20));
    // Live: the same flags without --dry-run write the parameters, and the
    // policy taints.
    let live: Vec<&str> = flags
        .iter()
        .copied()
        .filter(|a| *a != "--dry-run")
        .collect();
    let live_run = Nodegate::start_as(&admin, &[("POD_NAMESPACE", NS)], &live);
    let mut n = 0;
    wait_for(
        "the live nodegate's parameters to taint a new node",
        Duration::from_secs(90),
        || {
            n += 1;
            let nodes = nodes.clone();
            let name = format!("live-{n}");
            async move {
                let made = nodes
                    .create(&PostParams::default(), &fake_node(&name, &[], &[]))
                    .await
                    .map_err(|e| e.to_string())?;
                if tainted(&made) {
                    Ok(())
                } else {
                    Err(format!("{name} untainted"))
                }
            }
        },
    )
    .await;
    drop(live_run);
}

/// The other writes RBAC cannot narrow, with the ServiceAccount's token:
/// through `nodes/status` (components/node-condition) only the
/// nodegate.dev/Open condition; an Event only about a Node, as nodegate;
/// a Lease only by its own name.
async fn records_and_status_are_nodegates_own(cluster: &TestCluster, sa: &kube::Client) {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Patch, PatchParams};
    cluster
        .create_node(&fake_node("status-0", &[], &[(TAINT, "", "NoSchedule")]))
        .await;
    let nodes: Api<Node> = Api::all(sa.clone());
    let mut attempt = 0;
    let refused = wait_for(
        "the node policy to refuse another condition through nodes/status",
        Duration::from_secs(30),
        || {
            attempt += 1;
            let nodes = nodes.clone();
            let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
                "reason": "Forged", "message": format!("attempt {attempt}")}]}});
            async move {
                match nodes
                    .patch_status(
                        "status-0",
                        &PatchParams::default(),
                        &Patch::Strategic(patch),
                    )
                    .await
                {
                    Ok(_) => Err("another condition was written: not enforced yet".to_string()),
                    Err(e) if e.to_string().contains("nodegate-node-changes") => Ok(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await;
    assert!(refused.contains("nodegate.dev/Open condition"), "{refused}");
    let open = json!({"status": {"conditions": [{"type": "nodegate.dev/Open", "status": "False",
        "reason": "Waiting", "message": "waiting", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    nodes
        .patch_status("status-0", &PatchParams::default(), &Patch::Strategic(open))
        .await
        .unwrap_or_else(|e| panic!("its own condition through nodes/status must be allowed: {e}"));

    let events: Api<KubeEvent> = Api::namespaced(sa.clone(), "default");
    let event = |kind: &str, controller: &str, n: u32| -> KubeEvent {
        serde_json::from_value(json!({
            "metadata": {"name": format!("status-0.{n}"), "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "type": "Normal", "reason": "GateOpened", "action": "Open",
            "reportingController": controller, "reportingInstance": "nodegate-a",
            "regarding": {"apiVersion": "v1", "kind": kind, "name": "status-0"},
        }))
        .expect("an event")
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let err = wait_for(
        "the records policy to refuse an Event about a Pod",
        Duration::from_secs(30),
        || async {
            match events
                .create(&dry, &event("Pod", "nodegate.dev/nodegate", 1))
                .await
            {
                Ok(_) => Err("admitted: not enforced yet".to_string()),
                Err(e) if e.to_string().contains("nodegate-records") => Ok(e.to_string()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    assert!(err.contains("only about a Node"), "{err}");
    let forged = events.create(&dry, &event("Node", "kubelet", 2)).await;
    let forged = forged.map(|_| ()).map_err(|e| e.to_string());
    assert!(
        forged
            .as_ref()
            .is_err_and(|e| e.contains("nodegate-records")),
        "an Event reported as another controller must be refused: {forged:?}"
    );
    events
        .create(&dry, &event("Node", "nodegate.dev/nodegate", 3))
        .await
        .unwrap_or_else(|e| panic!("nodegate's own Event must be allowed: {e}"));

    let leases: Api<Lease> = Api::namespaced(sa.clone(), NS);
    let lease = |name: &str| -> Lease {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": NS}}))
            .expect("a lease")
    };
    let other = leases
        .create(&dry, &lease("kube-scheduler"))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    assert!(
        other
            .as_ref()
            .is_err_and(|e| e.contains("nodegate-records")),
        "creating another Lease must be refused by nodegate-records: {other:?}"
    );
    leases
        .create(&dry, &lease("nodegate"))
        .await
        .unwrap_or_else(|e| panic!("creating its own Lease must be allowed: {e}"));
}
