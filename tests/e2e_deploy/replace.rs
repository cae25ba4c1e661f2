//! `--on-timeout replace` and what deploy/ grants it (semantics.md §5.8):
//! the kustomize base's ServiceAccount may not touch NodeClaims or
//! Machines, the `replace` component lets it get, list and delete
//! NodeClaims and get and delete Machines in the one namespace its Role is
//! in, and nothing more; and the admission policy
//! nodegate-node-changes lets it cordon a node only in the write that sets
//! a new `nodegate.dev/replace-requested` — the very patch nodegate sends —
//! on a node that carries a managed taint and `nodegate.dev/timed-out`, and
//! refuses every other cordon (an open node's above all), an uncordon, and
//! anything more in that patch. The component's policy
//! nodegate-owner-deletes lets those deletes take only a NodeClaim that is
//! not Initialized and never a control-plane Machine. All with the
//! ServiceAccount's own token.

use super::policy::{refused_by_policy, sa_patch};
use super::rbac::{sa_token, token_kubeconfig};
use super::*;
use jiff::Timestamp;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use kube::api::{ApiResource, DeleteParams, DynamicObject};
use nodegate::cluster::replace::mark;
use nodegate_core::deciders::{ReplaceAction, ReplaceWrite};
use nodegate_core::vocab::model::Owner;

/// The base's identity and admission policies (no webhook, no Deployment).
fn base_identity() -> Vec<Value> {
    identity(objects(&kustomize("deploy/kustomize/base")))
}

/// The identity and admission policies among `objs`.
fn identity(objs: Vec<Value>) -> Vec<Value> {
    objs.into_iter()
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
                )
            )
        })
        .collect()
}

/// The component's own objects: what an overlay adding it adds.
fn component_rbac() -> Vec<Value> {
    let text =
        std::fs::read_to_string(repo_root().join("deploy/kustomize/components/replace/rbac.yaml"))
            .expect("components/replace/rbac.yaml");
    objects(&text)
}

fn node_json(cluster: &TestCluster, name: &str) -> Value {
    serde_json::from_str(&cluster.kubectl(&["get", "node", name, "-o", "json"]))
        .expect("node as JSON")
}

/// The request nodegate sends for `node` as it is now (no owner known).
fn replace_patch(cluster: &TestCluster, name: &str) -> Value {
    let n = node_json(cluster, name);
    let w = ReplaceWrite {
        node: name.into(),
        uid: n["metadata"]["uid"].as_str().unwrap_or_default().into(),
        resource_version: n["metadata"]["resourceVersion"]
            .as_str()
            .expect("resourceVersion")
            .into(),
        annotations_present: n["metadata"]["annotations"].is_object(),
        action: ReplaceAction::Request {
            owner: Owner::None,
            provider_id: None,
            at: Timestamp::now(),
            reason: "deadline passed waiting for infra/agent; cordoned".into(),
        },
    };
    serde_json::to_value(mark(&w).expect("a request marks the node")).expect("patch as JSON")
}

/// A SelfSubjectAccessReview with the ServiceAccount's own token, by API
/// group (kubectl's `auth can-i` cannot name the group of a kind whose CRD
/// is not installed: it asks about the core group instead).
async fn sa_may(sa: &Path, verb: &str, group: &str, resource: &str, namespace: &str) -> bool {
    let client = support::client_for(sa).await;
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "namespace": namespace,
        }},
    }))
    .expect("review");
    Api::<SelfSubjectAccessReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_grants_and_the_policy_allow_exactly_the_cordon_with_its_mark() {
    let cluster = TestCluster::start("deploy-replace").await;
    let admin = cluster.kubeconfig.clone();
    let identity = base_identity();
    let refs: Vec<&Value> = identity.iter().collect();
    must(
        "apply the base's identity and policies",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&refs))),
    );
    let token = sa_token(&admin);
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &token, dir.path());

    // --- RBAC: nothing on NodeClaims or Machines without the component.
    let owner_verbs: &[(&str, &str, &str, &str)] = &[
        ("list", "karpenter.sh", "nodeclaims", ""),
        ("delete", "karpenter.sh", "nodeclaims", ""),
        ("get", "karpenter.sh", "nodeclaims", ""),
        ("get", "cluster.x-k8s.io", "machines", "default"),
        ("delete", "cluster.x-k8s.io", "machines", "default"),
    ];
    for (verb, group, resource, ns) in owner_verbs {
        assert!(
            !sa_may(&sa, verb, group, resource, ns).await,
            "the base must not grant {verb} {resource}.{group}"
        );
    }
    let extra = component_rbac();
    let refs: Vec<&Value> = extra.iter().collect();
    must(
        "apply the replace component's RBAC",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&refs))),
    );
    wait_for("the replace grants", Duration::from_secs(30), || async {
        for (verb, group, resource, ns) in owner_verbs {
            if !sa_may(&sa, verb, group, resource, ns).await {
                return Err(format!("not yet: {verb} {resource}.{group}"));
            }
        }
        Ok(())
    })
    .await;
    for (verb, group, resource, ns) in [
        ("update", "karpenter.sh", "nodeclaims", ""),
        // Machines only in the Role's one namespace: another namespace of a
        // management cluster holds other clusters' Machines.
        ("delete", "cluster.x-k8s.io", "machines", "capi"),
        ("get", "cluster.x-k8s.io", "machines", "capi"),
        ("create", "karpenter.sh", "nodeclaims", ""),
        ("list", "cluster.x-k8s.io", "machines", ""),
        ("patch", "cluster.x-k8s.io", "machines", "default"),
        ("delete", "", "nodes", ""),
        ("delete", "karpenter.sh", "nodepools", ""),
    ] {
        assert!(
            !sa_may(&sa, verb, group, resource, ns).await,
            "the component must not grant {verb} {resource}.{group}"
        );
    }

    // --- the policy: a cordon alone is refused. The API server enforces a
    // new policy a moment after it is created (sooner or later under load):
    // wait for that on a probe node, undoing each cordon let through before.
    for name in ["rp-a", "rp-b", "rp-probe"] {
        cluster
            .create_node(&fake_node(name, &[], &[(TAINT, "", "NoSchedule")]))
            .await;
    }
    let cordon = json!({"spec": {"unschedulable": true}});
    wait_for(
        "the admission policy to refuse a bare cordon",
        Duration::from_secs(30),
        || async {
            match sa_patch(&sa, "rp-probe", "merge", &cordon) {
                Ok(()) => {
                    must(
                        "uncordon the probe node",
                        kubectl(&admin, &["uncordon", "rp-probe"], None),
                    );
                    Err("the policy is not enforced yet".to_string())
                }
                Err(e) if e.contains("ValidatingAdmissionPolicy") => Ok(()),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    refused_by_policy(
        "a bare cordon",
        "no node spec field",
        sa_patch(&sa, "rp-a", "merge", &cordon),
    );
    refused_by_policy(
        "cordon with some other nodegate.dev/ annotation",
        "no node spec field",
        sa_patch(
            &sa,
            "rp-a",
            "merge",
            &json!({"spec": {"unschedulable": true}, "metadata": {"annotations": {"nodegate.dev/timed-out": "2026-01-01T00:00:00.000Z"}}}),
        ),
    );
    // Only a gated node that timed out may be cordoned. rp-a
    // is gated and has no nodegate.dev/timed-out yet; rp-open timed out
    // once but carries no managed taint (it was opened since): nodegate's
    // very request is refused on both.
    cluster.create_node(&fake_node("rp-open", &[], &[])).await;
    let timed_out = |node: &str| {
        must(
            "the gate's timed-out mark (as the gate writes it before a replace request)",
            kubectl(
                &admin,
                &[
                    "annotate",
                    "node",
                    node,
                    "--overwrite",
                    "nodegate.dev/timed-out=2026-01-01T00:00:00.000Z",
                ],
                None,
            ),
        );
    };
    timed_out("rp-open");
    refused_by_policy(
        "nodegate's request on a gated node that has not timed out",
        "no node spec field",
        sa_patch(&sa, "rp-a", "json", &replace_patch(&cluster, "rp-a")),
    );
    refused_by_policy(
        "nodegate's request on an open node (timed out once, opened since)",
        "no node spec field",
        sa_patch(&sa, "rp-open", "json", &replace_patch(&cluster, "rp-open")),
    );
    timed_out("rp-a");
    timed_out("rp-b");
    // The request nodegate sends, with a label too: refused whole.
    let mut with_label = replace_patch(&cluster, "rp-a");
    with_label
        .as_array_mut()
        .expect("a JSON patch")
        .push(json!({"op": "add", "path": "/metadata/labels/example.com~1x", "value": "y"}));
    refused_by_policy(
        "the replace request plus a label",
        "labels",
        sa_patch(&sa, "rp-a", "json", &with_label),
    );
    // The request itself: allowed.
    sa_patch(&sa, "rp-a", "json", &replace_patch(&cluster, "rp-a"))
        .unwrap_or_else(|e| panic!("nodegate's replace request must be allowed: {e}"));
    let n = node_json(&cluster, "rp-a");
    assert_eq!(n["spec"]["unschedulable"], json!(true));
    assert!(n["metadata"]["annotations"]["nodegate.dev/replace-requested"].is_string());
    // Once cordoned: no uncordon, even with a new request time.
    let uncordon = json!({
        "spec": {"unschedulable": false},
        "metadata": {"annotations": {"nodegate.dev/replace-requested": "2030-01-01T00:00:00.000Z"}},
    });
    refused_by_policy(
        "uncordon",
        "no node spec field",
        sa_patch(&sa, "rp-a", "merge", &uncordon),
    );
    // A node whose request is already there (uncordoned by a person):
    // cordoning it again needs a new request time.
    must(
        "an admin marks rp-b as requested",
        kubectl(
            &admin,
            &[
                "annotate",
                "node",
                "rp-b",
                "nodegate.dev/replace-requested=2026-01-01T00:00:00.000Z",
            ],
            None,
        ),
    );
    refused_by_policy(
        "cordon under an old request",
        "no node spec field",
        sa_patch(&sa, "rp-b", "merge", &cordon),
    );
}

/// A Machine CRD as small as the policy needs: Cluster API's group, version
/// and kind, any fields, a status subresource.
fn machine_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "machines.cluster.x-k8s.io"},
        "spec": {
            "group": "cluster.x-k8s.io",
            "scope": "Namespaced",
            "names": {"plural": "machines", "singular": "machine", "kind": "Machine", "listKind": "MachineList"},
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

fn nodeclaim_resource() -> ApiResource {
    ApiResource {
        group: "karpenter.sh".into(),
        version: "v1".into(),
        api_version: "karpenter.sh/v1".into(),
        kind: "NodeClaim".into(),
        plural: "nodeclaims".into(),
    }
}

fn machine_resource() -> ApiResource {
    ApiResource {
        group: "cluster.x-k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "cluster.x-k8s.io/v1beta1".into(),
        kind: "Machine".into(),
        plural: "machines".into(),
    }
}

/// Deletes `name` through `api` (and so as its client's user), server-side
/// dry-run: `Ok` or the API server's message.
async fn dry_delete(api: &Api<DynamicObject>, name: &str) -> Result<(), String> {
    let params = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete(name, &params)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Refused by nodegate-owner-deletes, with `rule` in its message.
fn refused_by_owner_policy(what: &str, rule: &str, r: Result<(), String>) {
    let err = r
        .err()
        .unwrap_or_else(|| panic!("{what}: must be refused, was allowed"));
    assert!(
        err.contains("ValidatingAdmissionPolicy 'nodegate-owner-deletes'") && err.contains(rule),
        "{what}: refused, but not by nodegate-owner-deletes ({rule:?}): {err}"
    );
}

/// The replace grant's deletes (docs/operations.md, "Every write nodegate
/// can make"), on the real API server with Karpenter's own NodeClaim CRD
/// and a Machine CRD, as the ServiceAccount with its own token: the
/// component's policy nodegate-owner-deletes refuses deleting an
/// Initialized NodeClaim and a Machine labelled
/// `cluster.x-k8s.io/control-plane`, and lets through a NodeClaim still
/// launching and a worker Machine. An administrator is not held by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_deletes_spare_initialized_nodeclaims_and_control_plane_machines() {
    let cluster = TestCluster::start("deploy-owner-deletes").await;
    let admin = cluster.kubeconfig.clone();

    // The CRDs first: Karpenter's NodeClaim (from the cached build) and the
    // Machine stand-in.
    let crd = build_dir("--karpenter").join("crds/karpenter.sh_nodeclaims.yaml");
    must(
        "apply Karpenter's NodeClaim CRD",
        kubectl(
            &admin,
            &[
                "apply",
                "--server-side",
                "-f",
                crd.to_str().expect("utf-8 path"),
            ],
            None,
        ),
    );
    must(
        "apply the Machine CRD",
        kubectl(
            &admin,
            &["apply", "-f", "-"],
            Some(&machine_crd().to_string()),
        ),
    );
    must(
        "the CRDs established",
        kubectl(
            &admin,
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "crd/nodeclaims.karpenter.sh",
                "crd/machines.cluster.x-k8s.io",
            ],
            None,
        ),
    );

    // The base's identity and policies with components/replace.
    let objs = identity(super::bounds::base_with(&["replace"]));
    assert!(
        objs.iter().any(|o| o["kind"] == "ValidatingAdmissionPolicy"
            && o["metadata"]["name"] == "nodegate-owner-deletes"),
        "components/replace ships nodegate-owner-deletes"
    );
    let refs: Vec<&Value> = objs.iter().collect();
    must(
        "apply the base's and the replace component's identity and policies",
        kubectl(&admin, &["apply", "-f", "-"], Some(&to_stream(&refs))),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let sa = token_kubeconfig(&admin, &sa_token(&admin), dir.path());

    // Two NodeClaims, one Initialized, one still launching; two Machines,
    // a control plane's and a worker's.
    let claim = |name: &str| {
        json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
            },
        })
    };
    let machine = |name: &str, labels: Value| {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"clusterName": "workload", "bootstrap": {"dataSecretName": "none"}},
        })
    };
    let made: Vec<Value> = vec![
        claim("nc-initialized"),
        claim("nc-launching"),
        machine(
            "cp-0",
            json!({"cluster.x-k8s.io/cluster-name": "workload", "cluster.x-k8s.io/control-plane": ""}),
        ),
        machine(
            "worker-0",
            json!({"cluster.x-k8s.io/cluster-name": "workload"}),
        ),
    ];
    must(
        "create the NodeClaims and Machines",
        kubectl(
            &admin,
            &["create", "-f", "-"],
            Some(&to_stream(&made.iter().collect::<Vec<_>>())),
        ),
    );
    let condition = |ty: &str, status: &str| {
        json!({"type": ty, "status": status, "reason": "Test", "message": "",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    };
    for (name, conditions) in [
        (
            "nc-initialized",
            json!([
                condition("Launched", "True"),
                condition("Registered", "True"),
                condition("Initialized", "True")
            ]),
        ),
        (
            "nc-launching",
            json!([
                condition("Launched", "True"),
                condition("Registered", "Unknown"),
                condition("Initialized", "Unknown")
            ]),
        ),
    ] {
        must(
            &format!("{name}: its status"),
            kubectl(
                &admin,
                &[
                    "patch",
                    "nodeclaim",
                    name,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &json!({"status": {"conditions": conditions}}).to_string(),
                ],
                None,
            ),
        );
    }

    let client = support::client_for(&sa).await;
    let claims: Api<DynamicObject> = Api::all_with(client.clone(), &nodeclaim_resource());
    let machine_resource = machine_resource();
    let machines: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "default", &machine_resource);

    // The policy is enforced a moment after it is created (and the grant
    // a moment after its binding): wait for the first refusal.
    let first = wait_for(
        "the owner policy to refuse deleting an Initialized NodeClaim",
        Duration::from_secs(30),
        || async {
            match dry_delete(&claims, "nc-initialized").await {
                Ok(()) => Err("allowed: the policy is not enforced yet".to_string()),
                Err(e) if e.contains("nodegate-owner-deletes") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("an Initialized NodeClaim: {first}");
    refused_by_owner_policy(
        "deleting an Initialized NodeClaim",
        "not Initialized",
        Err(first),
    );
    refused_by_owner_policy(
        "deleting a control-plane Machine",
        "control-plane",
        dry_delete(&machines, "cp-0").await,
    );
    dry_delete(&claims, "nc-launching")
        .await
        .unwrap_or_else(|e| panic!("deleting a NodeClaim still launching must be allowed: {e}"));
    dry_delete(&machines, "worker-0")
        .await
        .unwrap_or_else(|e| panic!("deleting a worker Machine must be allowed: {e}"));

    // The policy holds nodegate's ServiceAccount, not whoever deletes.
    let admin_client = cluster.client.clone();
    let admin_claims: Api<DynamicObject> =
        Api::all_with(admin_client.clone(), &nodeclaim_resource());
    dry_delete(&admin_claims, "nc-initialized")
        .await
        .unwrap_or_else(|e| panic!("an administrator deletes an Initialized NodeClaim: {e}"));
    let admin_machines: Api<DynamicObject> =
        Api::namespaced_with(admin_client, "default", &machine_resource);
    dry_delete(&admin_machines, "cp-0")
        .await
        .unwrap_or_else(|e| panic!("an administrator deletes a control-plane Machine: {e}"));
}

/// The ClusterRole rules on `group` in `objs`.
fn rules_on(objs: &[Value], group: &str) -> Vec<Value> {
    objs.iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| {
            r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g == group))
        })
        .collect()
}

/// The Role rules on `group` in `objs`, with the Role's namespace.
fn role_rules_on(objs: &[Value], group: &str) -> Vec<(String, Value)> {
    objs.iter()
        .filter(|o| o["kind"] == "Role")
        .flat_map(|o| {
            let ns = o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            o["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |r| (ns.clone(), r))
        })
        .filter(|(_, r)| {
            r["apiGroups"]
                .as_array()
                .is_some_and(|g| g.iter().any(|g| g == group))
        })
        .collect()
}

/// Needs no cluster: the chart grants the owners' deletes only with
/// `onTimeout: replace`, and then exactly get/list/delete on NodeClaims
/// and get/delete on Machines in one namespace (a Role, in
/// `replaceMachineNamespace`; none when it is empty); the kustomize
/// component adds the same; the
/// arguments both pass are ones nodegate takes; and both ship the same
/// policy nodegate-owner-deletes on those deletes.
#[test]
fn replace_is_granted_only_when_enabled_and_its_arguments_are_taken() {
    let plain = objects(&helm_template(&[]));
    assert!(rules_on(&plain, "karpenter.sh").is_empty());
    assert!(rules_on(&plain, "cluster.x-k8s.io").is_empty());
    let chart = objects(&helm_template(&[
        "--set",
        "config.onTimeout=replace,config.replaceFallback=open,config.replaceBreakage=30%,config.replaceInterval=30m",
    ]));
    assert!(role_rules_on(&plain, "cluster.x-k8s.io").is_empty());
    assert_eq!(
        rules_on(&chart, "karpenter.sh"),
        [
            json!({"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["get", "list", "delete"]})
        ]
    );
    assert!(
        rules_on(&chart, "cluster.x-k8s.io").is_empty(),
        "no cluster-wide grant on Machines"
    );
    let machines = json!({"apiGroups": ["cluster.x-k8s.io"], "resources": ["machines"], "verbs": ["get", "delete"]});
    assert_eq!(
        role_rules_on(&chart, "cluster.x-k8s.io"),
        [("default".to_string(), machines.clone())]
    );
    let elsewhere = objects(&helm_template(&[
        "--set",
        "config.onTimeout=replace,config.replaceMachineNamespace=capi-workers",
    ]));
    assert_eq!(
        role_rules_on(&elsewhere, "cluster.x-k8s.io"),
        [("capi-workers".to_string(), machines)]
    );
    let karpenter_only = objects(&helm_template(&[
        "--set",
        "config.onTimeout=replace,config.replaceMachineNamespace=",
    ]));
    assert!(role_rules_on(&karpenter_only, "cluster.x-k8s.io").is_empty());
    let args = super::manifests::container_args(&chart);
    for want in [
        "--on-timeout=replace",
        "--replace-fallback=open",
        "--replace-breakage=30%",
        "--replace-interval=30m",
    ] {
        assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
    }
    super::manifests::assert_accepted("helm chart (onTimeout: replace)", &args);
    let refused = super::manifests::helm_refuses(&["--set", "config.replaceFallback=later"]);
    assert!(refused.contains("replaceFallback"), "{refused}");

    // The kustomize component, from an overlay of the base.
    let dir = tempfile::tempdir().expect("temp dir");
    // kustomize takes only relative paths: up from the temp dir to /, then
    // down to the repository.
    let up = "../".repeat(dir.path().components().count().saturating_sub(1));
    let root = repo_root();
    let repo = root.to_string_lossy();
    let repo = repo.trim_start_matches('/');
    let overlay = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {up}{repo}/deploy/kustomize/base\ncomponents:\n  - {up}{repo}/deploy/kustomize/components/replace\n",
    );
    std::fs::write(dir.path().join("kustomization.yaml"), overlay).expect("write overlay");
    let built = objects(&kustomize(&dir.path().to_string_lossy()));
    assert_eq!(
        rules_on(&built, "karpenter.sh"),
        rules_on(&chart, "karpenter.sh")
    );
    assert_eq!(
        rules_on(&built, "cluster.x-k8s.io"),
        rules_on(&chart, "cluster.x-k8s.io")
    );
    assert_eq!(
        role_rules_on(&built, "cluster.x-k8s.io"),
        role_rules_on(&chart, "cluster.x-k8s.io")
    );
    let args = super::manifests::container_args(&built);
    assert!(args.iter().any(|a| a == "--on-timeout=replace"), "{args:?}");
    super::manifests::assert_accepted("kustomize base + components/replace", &args);

    // The bound on those deletes: nodegate-owner-deletes, the same both
    // ways, and in the chart only with onTimeout: replace.
    const VAP_API: [&str; 2] = [
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    ];
    let owner_policy = |objs: &[Value], kind: &str| {
        objs.iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == "nodegate-owner-deletes")
            .map(|o| o["spec"].clone())
    };
    let plain = objects(&helm_template(&VAP_API));
    let chart = objects(&helm_template(&[
        VAP_API[0],
        VAP_API[1],
        "--set",
        "config.onTimeout=replace",
    ]));
    for kind in [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ] {
        assert_eq!(owner_policy(&plain, kind), None, "{kind} without replace");
        let kz = owner_policy(&built, kind)
            .unwrap_or_else(|| panic!("components/replace ships the {kind}"));
        assert_eq!(
            Some(kz),
            owner_policy(&chart, kind),
            "{kind} nodegate-owner-deletes: kustomize and Helm differ"
        );
    }
}
