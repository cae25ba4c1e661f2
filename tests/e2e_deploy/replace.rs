//! `--on-timeout replace` and what deploy/ grants it (semantics.md §5.8):
//! the kustomize base's ServiceAccount may not touch NodeClaims or
//! Machines, the `replace` component lets it list and delete NodeClaims and
//! delete Machines and nothing more; and the admission policy
//! nodegate-node-changes lets it cordon a node only in the write that sets
//! a new `nodegate.dev/replace-requested` — the very patch nodegate sends —
//! on a node that carries a managed taint and `nodegate.dev/timed-out`, and
//! refuses every other cordon (an open node's above all), an uncordon, and
//! anything more in that patch. All with the ServiceAccount's own token.

use super::policy::{refused_by_policy, sa_patch};
use super::rbac::{sa_token, token_kubeconfig};
use super::*;
use jiff::Timestamp;
use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
use nodegate::cluster::replace::mark;
use nodegate_core::deciders::replace::{ReplaceAction, ReplaceWrite};
use nodegate_core::replace::Owner;

/// The base's identity and admission policies (no webhook, no Deployment).
fn base_identity() -> Vec<Value> {
    objects(&kustomize("deploy/kustomize/base"))
        .into_iter()
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
        ("delete", "cluster.x-k8s.io", "machines", "capi"),
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
        ("get", "karpenter.sh", "nodeclaims", ""),
        ("update", "karpenter.sh", "nodeclaims", ""),
        ("create", "karpenter.sh", "nodeclaims", ""),
        ("list", "cluster.x-k8s.io", "machines", ""),
        ("patch", "cluster.x-k8s.io", "machines", "capi"),
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

/// Needs no cluster: the chart grants the owners' deletes only with
/// `onTimeout: replace`, and then exactly list/delete on NodeClaims and
/// delete on Machines; the kustomize component adds the same; the
/// arguments both pass are ones nodegate takes.
#[test]
fn replace_is_granted_only_when_enabled_and_its_arguments_are_taken() {
    let plain = objects(&helm_template(&[]));
    assert!(rules_on(&plain, "karpenter.sh").is_empty());
    assert!(rules_on(&plain, "cluster.x-k8s.io").is_empty());
    let chart = objects(&helm_template(&[
        "--set",
        "config.onTimeout=replace,config.replaceFallback=open,config.replaceBreakage=30%,config.replaceInterval=30m",
    ]));
    assert_eq!(
        rules_on(&chart, "karpenter.sh"),
        [
            json!({"apiGroups": ["karpenter.sh"], "resources": ["nodeclaims"], "verbs": ["list", "delete"]})
        ]
    );
    assert_eq!(
        rules_on(&chart, "cluster.x-k8s.io"),
        [
            json!({"apiGroups": ["cluster.x-k8s.io"], "resources": ["machines"], "verbs": ["delete"]})
        ]
    );
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
    let args = super::manifests::container_args(&built);
    assert!(args.iter().any(|a| a == "--on-timeout=replace"), "{args:?}");
    super::manifests::assert_accepted("kustomize base + components/replace", &args);
}
