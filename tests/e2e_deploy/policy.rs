//! What the ServiceAccount may write: the webhook's own Secret and
//! configuration only, and on Nodes only what the admission policy lets
//! nodegate change.

use super::*;
use kube::api::{Patch, PatchParams};

/// Real requests with the ServiceAccount's token (not only access reviews):
/// it reads and writes the webhook's Secret and sets the caBundle of its
/// webhook configuration; the same requests on a neighbouring Secret or
/// webhook configuration, and creating a Secret, are Forbidden.
pub(super) fn webhook_certificate_writes_reach_only_its_own_objects(admin: &Path, sa: &Path) {
    // The neighbours, created by the admin; the ServiceAccount's requests on
    // them must fail on RBAC, not on absence.
    must(
        "create the neighbouring Secret and webhook configuration",
        kubectl(
            admin,
            &["apply", "-f", "-"],
            Some(&to_stream(&[
                &json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "other-tls", "namespace": NS},
                    "type": "Opaque", "data": {"key": "c2VjcmV0"},
                }),
                &json!({
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": "MutatingWebhookConfiguration",
                    "metadata": {"name": "other-webhooks"},
                    "webhooks": [],
                }),
            ])),
        ),
    );
    // A real PEM bundle: the cluster's own CA, as nodegate would write its.
    let text = std::fs::read_to_string(admin).expect("admin kubeconfig");
    let kc: Value = serde_saphyr::from_str(&text).expect("admin kubeconfig parses");
    let ca_bundle = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data")
        .to_string();
    let set_ca =
        json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca_bundle}]);
    let mark = json!({"metadata": {"annotations": {"nodegate.test/written-by": "nodegate"}}});

    let ok =
        |what: &str, o: Output| assert!(o.ok, "{what} must be allowed:\n{}{}", o.stdout, o.stderr);
    let forbidden = |what: &str, o: Output| {
        assert!(
            !o.ok && o.stderr.to_lowercase().contains("forbidden"),
            "{what} must be Forbidden:\n{}{}",
            o.stdout,
            o.stderr
        )
    };
    ok(
        "reading the webhook's Secret",
        kubectl(
            sa,
            &["-n", NS, "get", "secret", "nodegate-webhook-tls"],
            None,
        ),
    );
    // An update, the one write nodegate makes to it (no patch is granted).
    let live = kubectl(
        sa,
        &[
            "-n",
            NS,
            "get",
            "secret",
            "nodegate-webhook-tls",
            "-o",
            "json",
        ],
        None,
    );
    let mut own: Value = serde_json::from_str(&live.stdout).expect("the Secret as JSON");
    own["metadata"]["annotations"] = json!({"nodegate.test/written-by": "nodegate"});
    ok(
        "writing (updating) the webhook's Secret",
        kubectl(sa, &["replace", "-f", "-"], Some(&own.to_string())),
    );
    ok(
        "setting the caBundle of the nodegate webhook configuration",
        kubectl(
            sa,
            &[
                "patch",
                "mutatingwebhookconfiguration",
                "nodegate",
                "--type",
                "json",
                "-p",
                &set_ca.to_string(),
            ],
            None,
        ),
    );
    forbidden(
        "reading another Secret",
        kubectl(sa, &["-n", NS, "get", "secret", "other-tls"], None),
    );
    forbidden(
        "writing another Secret",
        kubectl(
            sa,
            &[
                "-n",
                NS,
                "patch",
                "secret",
                "other-tls",
                "--type",
                "merge",
                "-p",
                &mark.to_string(),
            ],
            None,
        ),
    );
    forbidden(
        "creating a Secret",
        kubectl(
            sa,
            &[
                "-n",
                NS,
                "create",
                "secret",
                "generic",
                "nodegate-extra",
                "--from-literal=k=v",
            ],
            None,
        ),
    );
    forbidden(
        "writing another webhook configuration",
        kubectl(
            sa,
            &[
                "patch",
                "mutatingwebhookconfiguration",
                "other-webhooks",
                "--type",
                "merge",
                "-p",
                &mark.to_string(),
            ],
            None,
        ),
    );
}

/// A `kubectl patch node` as the ServiceAccount: `Ok` or the API server's
/// refusal.
pub(super) fn sa_patch(sa: &Path, node: &str, kind: &str, patch: &Value) -> Result<(), String> {
    let out = kubectl(
        sa,
        &[
            "patch",
            "node",
            node,
            "--type",
            kind,
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    if out.ok { Ok(()) } else { Err(out.stderr) }
}

/// Refused by the admission policy, by the rule whose message contains
/// `rule`.
pub(super) fn refused_by_policy(what: &str, rule: &str, r: Result<(), String>) {
    let err = r
        .err()
        .unwrap_or_else(|| panic!("{what}: must be refused, was allowed"));
    assert!(
        err.contains("ValidatingAdmissionPolicy")
            && err.contains("nodegate-node-changes")
            && err.contains(rule),
        "{what}: refused, but not by the policy's rule {rule:?}: {err}"
    );
}

/// deploy/'s ValidatingAdmissionPolicy, on the real API server, with the
/// ServiceAccount's token: foreign taints, labels, other annotations and the
/// rest of the spec are refused; removing the managed taint and writing
/// nodegate.dev/ annotations (what the untaint patch does) is allowed.
pub(super) async fn admission_policy_limits_node_changes(cluster: &TestCluster, sa: &Path) {
    let node = "vap-0";
    // Not a nodegate taint at index 0, the managed one at index 1.
    cluster
        .create_node(&fake_node(
            node,
            &[("example.com/pool", "vap")],
            &[
                ("example.com/foreign", "", "NoSchedule"),
                (TAINT, "", "NoSchedule"),
            ],
        ))
        .await;
    // The policy takes effect once the API server has loaded it: wait for
    // the first refusal.
    let remove_foreign = json!([
        {"op": "test", "path": "/spec/taints/0/key", "value": "example.com/foreign"},
        {"op": "remove", "path": "/spec/taints/0"},
    ]);
    let first = wait_for(
        "the admission policy to refuse removing a foreign taint",
        Duration::from_secs(30),
        || async {
            match sa_patch(sa, node, "json", &remove_foreign) {
                Ok(()) => panic!("removing a foreign taint was allowed"),
                Err(e) if e.contains("ValidatingAdmissionPolicy") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("foreign taint: {}", first.trim());
    assert!(first.contains("another taint changed"), "{first}");
    refused_by_policy(
        "add a foreign taint",
        "another taint changed",
        sa_patch(
            sa,
            node,
            "json",
            &json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "example.com/other", "effect": "NoSchedule"}}]),
        ),
    );
    refused_by_policy(
        "change a label",
        "labels",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"labels": {"example.com/pool": "other"}}}),
        ),
    );
    refused_by_policy(
        "add a label",
        "labels",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"labels": {"nodegate.dev/x": "y"}}}),
        ),
    );
    refused_by_policy(
        "write another annotation",
        "only nodegate.dev/ annotations",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"annotations": {"example.com/note": "x"}}}),
        ),
    );
    refused_by_policy(
        "add an ownerReference (the garbage collector deletes a node whose owner is missing)",
        "ownerReferences or finalizers",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": "ghost",
                "uid": "00000000-0000-0000-0000-000000000001",
            }]}}),
        ),
    );
    refused_by_policy(
        "add a finalizer",
        "ownerReferences or finalizers",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"metadata": {"finalizers": ["example.com/hold"]}}),
        ),
    );
    refused_by_policy(
        "add nodegate.dev/x:NoExecute",
        "refused: nodegate.dev/x:NoExecute",
        sa_patch(
            sa,
            node,
            "json",
            &json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "nodegate.dev/x", "effect": "NoExecute"}}]),
        ),
    );
    refused_by_policy(
        "turn the managed taint into NoExecute",
        "refused: nodegate.dev/initializing:NoExecute",
        sa_patch(
            sa,
            node,
            "json",
            &json!([
                {"op": "test", "path": "/spec/taints/1/key", "value": TAINT},
                {"op": "replace", "path": "/spec/taints/1/effect", "value": "NoExecute"},
            ]),
        ),
    );
    refused_by_policy(
        "cordon",
        "no node spec field",
        sa_patch(sa, node, "merge", &json!({"spec": {"unschedulable": true}})),
    );
    refused_by_policy(
        "set providerID",
        "no node spec field",
        sa_patch(
            sa,
            node,
            "merge",
            &json!({"spec": {"providerID": "kwok://x"}}),
        ),
    );
    // What the untaint patch does: remove the managed taint, record opened-at.
    sa_patch(
        sa,
        node,
        "json",
        &json!([
            {"op": "test", "path": "/spec/taints/1/key", "value": TAINT},
            {"op": "remove", "path": "/spec/taints/1"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1opened-at", "value": "2026-01-01T00:00:00.000Z"},
        ]),
    )
    .unwrap_or_else(|e| panic!("removing the managed taint with opened-at must be allowed: {e}"));
    // And the timed-out mark; and putting a managed taint back.
    sa_patch(
        sa,
        node,
        "merge",
        &json!({"metadata": {"annotations": {"nodegate.dev/timed-out": "2026-01-01T00:00:00.000Z"}}}),
    )
    .unwrap_or_else(|e| panic!("writing nodegate.dev/timed-out must be allowed: {e}"));
    sa_patch(
        sa,
        node,
        "json",
        &json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": TAINT, "effect": "NoSchedule"}}]),
    )
    .unwrap_or_else(|e| panic!("adding a managed taint must be allowed: {e}"));
    let n: Node = Api::all(cluster.client.clone())
        .get(node)
        .await
        .expect("get vap-0");
    let keys: Vec<String> = n
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.key)
        .collect();
    assert_eq!(
        keys,
        ["example.com/foreign", TAINT],
        "the foreign taint stayed"
    );
    assert_eq!(
        n.metadata
            .labels
            .unwrap_or_default()
            .get("example.com/pool")
            .map(String::as_str),
        Some("vap")
    );
    // Out of the way of the gate scenario: an admin deletes it.
    Api::<Node>::all(cluster.client.clone())
        .delete(node, &Default::default())
        .await
        .expect("delete vap-0");

    the_policy_lets_nodegate_put_its_taint_on(cluster, sa).await;
}

/// The entrances (the late-taint net, backfill) put the startup taint on a
/// node that has none, with `nodegate.dev/gated-since`: the very patch
/// nodegate sends (`cluster::patch::add_taint`) is allowed by the policy;
/// the same patch carrying anything more is not.
async fn the_policy_lets_nodegate_put_its_taint_on(cluster: &TestCluster, sa: &Path) {
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    // No taints at all (the patch creates spec.taints), and a node that
    // already carries a foreign one (the patch appends).
    cluster
        .create_node(&fake_node("vap-bare", &[("example.com/pool", "vap")], &[]))
        .await;
    cluster
        .create_node(&fake_node(
            "vap-foreign",
            // In the pool the real-node test's nodegate leaves alone.
            &[("example.com/pool", "vap")],
            &[("example.com/foreign", "", "NoSchedule")],
        ))
        .await;
    // The key --autoscaler karpenter chooses is nodegate's own too (issue
    // 27): a Karpenter node gets it.
    cluster
        .create_node(&fake_node(
            "vap-karpenter",
            &[("example.com/pool", "vap"), ("karpenter.sh/nodepool", "a")],
            &[],
        ))
        .await;
    let startup_of = |name: &str| {
        let key = if name == "vap-karpenter" {
            "readiness.k8s.io/nodegate"
        } else {
            TAINT
        };
        Taint::new(key, "", "NoSchedule")
    };
    let since: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a time");
    // nodegate's patch for the node as it is now, plus `extra` built from
    // that read; sent again while the node changed in between (the node
    // controller and kwok still write to a new node: the patch's
    // resourceVersion test then fails, which is not the answer sought).
    let send = |name: &'static str, extra: fn(&Node) -> Option<Value>| {
        let nodes = nodes.clone();
        let startup = startup_of(name);
        async move {
            for _ in 0..50 {
                let node = nodes.get(name).await.expect("read the node");
                let facts = project::node(&node).0.expect("a node with a name");
                let mut patch = serde_json::to_value(add_taint(
                    &facts.resource_version,
                    &startup,
                    facts.taints.len(),
                    &[gated_since(since)],
                    facts.annotations_present,
                    since,
                ))
                .expect("the patch serializes");
                if let Some(op) = extra(&node) {
                    patch.as_array_mut().expect("a JSON patch").push(op);
                }
                match sa_patch(sa, name, "json", &patch) {
                    Err(e) if e.contains("the server rejected our request") => {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    other => return other,
                }
            }
            Err(format!("{name}: the node kept changing under the patch"))
        }
    };

    // More than nodegate's patch: refused, by the rule for what was added.
    refused_by_policy(
        "the startup taint and a label",
        "labels",
        send("vap-bare", |_| {
            Some(
                json!({"op": "add", "path": "/metadata/labels/example.com~1gated", "value": "yes"}),
            )
        })
        .await,
    );
    refused_by_policy(
        "the startup taint and a foreign taint",
        "another taint changed",
        send("vap-bare", |_| {
            Some(json!({"op": "add", "path": "/spec/taints/-", "value": {"key": "example.com/other", "effect": "NoSchedule"}}))
        })
        .await,
    );
    refused_by_policy(
        "the startup taint and another annotation",
        "only nodegate.dev/ annotations",
        send("vap-bare", |_| {
            Some(json!({"op": "add", "path": "/metadata/annotations/example.com~1gated", "value": "yes"}))
        })
        .await,
    );
    refused_by_policy(
        "the startup taint and a foreign taint's effect",
        "another taint changed",
        send("vap-foreign", |n| {
            let at = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .and_then(|ts| ts.iter().position(|t| t.key == "example.com/foreign"))
                .expect("the foreign taint is there");
            Some(json!({"op": "replace", "path": format!("/spec/taints/{at}/effect"), "value": "NoExecute"}))
        })
        .await,
    );

    // Exactly nodegate's patch: allowed, on both shapes of node.
    for name in ["vap-bare", "vap-foreign", "vap-karpenter"] {
        send(name, |_| None).await.unwrap_or_else(|e| {
            panic!("{name}: nodegate's add-taint patch with gated-since must be allowed: {e}")
        });
        let after = nodes.get(name).await.expect("read the node");
        let keys: Vec<String> = after
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.key)
            // The node controller's own taint comes and goes on a new node.
            .filter(|k| !k.starts_with("node.kubernetes.io/"))
            .collect();
        let startup = startup_of(name).key;
        let expected: Vec<&str> = if name == "vap-foreign" {
            vec!["example.com/foreign", &startup]
        } else {
            vec![&startup]
        };
        assert_eq!(
            keys, expected,
            "{name}: the startup taint added, nothing else"
        );
        assert_eq!(
            annotation(&after, "nodegate.dev/gated-since").as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "{name}: gated-since"
        );
        assert!(
            after
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| !l.keys().any(|k| k.starts_with("example.com/gated"))),
            "{name}: no label added"
        );
        nodes
            .delete(name, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
    }
}

/// A `kubectl patch mutatingwebhookconfiguration nodegate` (JSON patch) as
/// the ServiceAccount: `Ok` or the API server's refusal.
fn sa_patch_webhooks(sa: &Path, patch: &Value) -> Result<(), String> {
    let out = kubectl(
        sa,
        &[
            "patch",
            "mutatingwebhookconfiguration",
            "nodegate",
            "--type",
            "json",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    if out.ok { Ok(()) } else { Err(out.stderr) }
}

/// Refused by the admission policy `policy`, by the rule whose message
/// contains `rule`.
fn refused_by(policy: &str, what: &str, rule: &str, r: Result<(), String>) {
    let err = r
        .err()
        .unwrap_or_else(|| panic!("{what}: must be refused, was allowed"));
    assert!(
        err.contains("ValidatingAdmissionPolicy") && err.contains(policy) && err.contains(rule),
        "{what}: refused, but not by {policy}'s rule {rule:?}: {err}"
    );
}

/// deploy/'s nodegate-webhook-changes policy, with the ServiceAccount's
/// token: in its own webhook configuration (which RBAC lets it patch) only
/// the caBundle may change; the rules, the clientConfig's service or URL,
/// failurePolicy, a selector, the number of webhooks and the metadata are
/// refused — each of them would let a stolen token send Secrets or Pods to
/// itself or switch the gate off.
pub(super) async fn webhook_policy_lets_only_the_ca_bundle_change(admin: &Path, sa: &Path) {
    const POLICY: &str = "nodegate-webhook-changes";
    let rules = json!([{"op": "replace", "path": "/webhooks/0/rules", "value": [{
        "apiGroups": [""], "apiVersions": ["v1"],
        "operations": ["CREATE", "UPDATE"], "resources": ["pods", "secrets"],
    }]}]);
    // The policy takes effect once the API server has loaded it.
    let first = wait_for(
        "the webhook policy to refuse widening the rules",
        Duration::from_secs(30),
        || async {
            match sa_patch_webhooks(sa, &rules) {
                Ok(()) => panic!("widening the webhook's rules to pods and secrets was allowed"),
                Err(e) if e.contains("ValidatingAdmissionPolicy") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("webhook rules: {}", first.trim());
    refused_by(
        POLICY,
        "replace /webhooks/0/rules",
        "rules changed",
        Err(first),
    );
    refused_by(
        POLICY,
        "replace /webhooks/0/clientConfig with a URL",
        "clientConfig changed",
        sa_patch_webhooks(
            sa,
            &json!([{"op": "replace", "path": "/webhooks/0/clientConfig",
                     "value": {"url": "https://attacker.example/admit"}}]),
        ),
    );
    refused_by(
        POLICY,
        "point /webhooks/0/clientConfig/service elsewhere",
        "clientConfig changed",
        sa_patch_webhooks(
            sa,
            &json!([{"op": "replace", "path": "/webhooks/0/clientConfig/service/namespace",
                     "value": "default"}]),
        ),
    );
    let current = must(
        "read the webhook configuration",
        kubectl(
            admin,
            &[
                "get",
                "mutatingwebhookconfiguration",
                "nodegate",
                "-o",
                "jsonpath={.webhooks[0].failurePolicy}",
            ],
            None,
        ),
    );
    let other = if current.stdout.trim() == "Fail" {
        "Ignore"
    } else {
        "Fail"
    };
    refused_by(
        POLICY,
        "replace /webhooks/0/failurePolicy",
        "failurePolicy",
        sa_patch_webhooks(
            sa,
            &json!([{"op": "replace", "path": "/webhooks/0/failurePolicy", "value": other}]),
        ),
    );
    refused_by(
        POLICY,
        "replace /webhooks/0/objectSelector",
        "objectSelector",
        sa_patch_webhooks(
            sa,
            &json!([{"op": "replace", "path": "/webhooks/0/objectSelector",
                     "value": {"matchLabels": {"never": "matches"}}}]),
        ),
    );
    refused_by(
        POLICY,
        "remove the webhook",
        "webhooks added, removed or renamed",
        sa_patch_webhooks(sa, &json!([{"op": "remove", "path": "/webhooks/0"}])),
    );
    refused_by(
        POLICY,
        "label the configuration",
        "metadata changed",
        sa_patch_webhooks(
            sa,
            &json!([{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}]),
        ),
    );
    the_ca_bundle_may_still_change(admin, sa);
}

/// The one write nodegate needs: a new caBundle, allowed with the webhook
/// policy in force.
fn the_ca_bundle_may_still_change(admin: &Path, sa: &Path) {
    let bundle =
        |b: &str| json!([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": b}]);
    let text = std::fs::read_to_string(admin).expect("admin kubeconfig");
    let kc: Value = serde_saphyr::from_str(&text).expect("admin kubeconfig parses");
    let ca = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data");
    sa_patch_webhooks(sa, &bundle("Zm9v"))
        .unwrap_or_else(|e| panic!("changing the caBundle must be allowed: {e}"));
    sa_patch_webhooks(sa, &bundle(ca))
        .unwrap_or_else(|e| panic!("changing the caBundle back must be allowed: {e}"));
}

/// deploy/'s nodegate-node-identity policy, as a kubelet would call
/// (`system:node:n1`, group `system:nodes`, through impersonation): it
/// registers its Node, but not with a nodegate.dev/ annotation (ignore would
/// skip its gate), and cannot annotate itself nodegate.dev/open afterwards;
/// another annotation is still its own business.
pub(super) async fn node_identity_cannot_write_nodegate_annotations(admin: &Path) {
    a_node_cannot_register_with_nodegate_annotations(admin).await;
    a_node_cannot_annotate_itself(admin).await;
    a_node_cannot_annotate_itself_through_its_status(admin).await;
    // An admin (not a node) still may: the operator's opening switch.
    must(
        "the admin annotates nodegate.dev/open",
        kubectl(
            admin,
            &["annotate", "node", "n1", "nodegate.dev/open=true"],
            None,
        ),
    );
    must(
        "delete n1",
        kubectl(admin, &["delete", "node", "n1", "--wait=false"], None),
    );
}

const NODE_POLICY: &str = "nodegate-node-identity";

/// `kubectl` as `system:node:n1` in group `system:nodes`.
fn as_node(admin: &Path, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let mut all = vec!["--as=system:node:n1", "--as-group=system:nodes"];
    all.extend_from_slice(args);
    let out = kubectl(admin, &all, stdin);
    if out.ok { Ok(()) } else { Err(out.stderr) }
}

/// CREATE with `nodegate.dev/ignore` or a back-dated `gated-since` is
/// refused (once the policy is loaded); without them the node registers.
async fn a_node_cannot_register_with_nodegate_annotations(admin: &Path) {
    const POLICY: &str = NODE_POLICY;
    let as_node = |args: &[&str], stdin: Option<&str>| as_node(admin, args, stdin);
    let node = |annotations: Value| {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "annotations": annotations},
        })
        .to_string()
    };
    let ignored = node(json!({"nodegate.dev/ignore": "true"}));
    let first = wait_for(
        "the node-identity policy to refuse a Node created with nodegate.dev/ignore",
        Duration::from_secs(30),
        || async {
            match as_node(&["create", "-f", "-"], Some(&ignored)) {
                Ok(()) => panic!("a node registered itself with nodegate.dev/ignore"),
                Err(e) if e.contains("ValidatingAdmissionPolicy") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    eprintln!("node identity: {}", first.trim());
    refused_by(
        POLICY,
        "CREATE with nodegate.dev/ignore",
        "nodegate.dev/ignore",
        Err(first),
    );
    refused_by(
        POLICY,
        "CREATE with nodegate.dev/gated-since",
        "nodegate.dev/gated-since",
        as_node(
            &["create", "-f", "-"],
            Some(&node(
                json!({"nodegate.dev/gated-since": "2000-01-01T00:00:00Z"}),
            )),
        ),
    );
    as_node(
        &["create", "-f", "-"],
        Some(&node(json!({"example.com/rack": "r1"}))),
    )
    .unwrap_or_else(|e| {
        panic!("a node must still register without nodegate.dev/ annotations: {e}")
    });
}

/// PATCH of `nodegate.dev/open` on its own Node is refused; another
/// annotation is the node's own business.
async fn a_node_cannot_annotate_itself(admin: &Path) {
    const POLICY: &str = NODE_POLICY;
    let as_node = |args: &[&str], stdin: Option<&str>| as_node(admin, args, stdin);
    refused_by(
        POLICY,
        "PATCH nodegate.dev/open",
        "nodegate.dev/open",
        as_node(
            &[
                "patch",
                "node",
                "n1",
                "--type",
                "merge",
                "-p",
                r#"{"metadata":{"annotations":{"nodegate.dev/open":"true"}}}"#,
            ],
            None,
        ),
    );
    as_node(
        &[
            "patch",
            "node",
            "n1",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"annotations":{"example.com/rack":"r2"}}}"#,
        ],
        None,
    )
    .unwrap_or_else(|e| panic!("a node may still change its other annotations: {e}"));
}

/// The status subresource, where a kubelet writes: the API server keeps
/// annotations sent there, so the policy covers it; a status update that
/// leaves them alone goes through.
async fn a_node_cannot_annotate_itself_through_its_status(admin: &Path) {
    // kube's impersonation: kubectl would first GET nodes/status, which a
    // node may not.
    let node_api = as_node_api(admin).await;
    let status = |annotations: Value| {
        let node_api = node_api.clone();
        async move {
            node_api
                .patch_status(
                    "n1",
                    &PatchParams::default(),
                    &Patch::Merge(json!({
                        "metadata": {"annotations": annotations},
                        "status": {"capacity": {"example.com/widgets": "1"}},
                    })),
                )
                .await
        }
    };
    let through_status = status(json!({"nodegate.dev/open": "true"})).await;
    let stored = must(
        "read n1's annotations",
        kubectl(
            admin,
            &[
                "get",
                "node",
                "n1",
                "-o",
                "jsonpath={.metadata.annotations}",
            ],
            None,
        ),
    );
    assert!(
        !stored.stdout.contains("nodegate.dev/open"),
        "a node set nodegate.dev/open through nodes/status ({:?}): {}",
        through_status.map(|_| ()),
        stored.stdout
    );
    // A status update that leaves nodegate.dev/ annotations alone goes through.
    status(json!({}))
        .await
        .unwrap_or_else(|e| panic!("a node must still update its status: {e}"));
}

/// The node policy lists NodeSpec's and NodeStatus's fields (CEL cannot
/// compare a typed object minus one field). This stops compiling when
/// k8s-openapi's NodeSpec or NodeStatus gains a field, and fails when the
/// policy does not name one of them.
#[test]
fn node_policy_names_every_node_spec_field() {
    use k8s_openapi::api::core::v1::NodeSpec;
    let NodeSpec {
        config_source: _,
        external_id: _,
        pod_cidr: _,
        pod_cidrs: _,
        provider_id: _,
        taints: _,
        unschedulable: _,
    } = NodeSpec::default();
    let base = objects(&kustomize("deploy/kustomize/base"));
    let policy = base
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"] == "nodegate-node-changes"
        })
        .expect("the node policy");
    let spec_rule = policy["spec"]["validations"]
        .as_array()
        .and_then(|vs| {
            vs.iter().find(|v| {
                v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec field"))
            })
        })
        .and_then(|v| v["expression"].as_str())
        .expect("the spec rule");
    for field in [
        "configSource",
        "externalID",
        "podCIDR",
        "podCIDRs",
        "providerID",
        "unschedulable",
    ] {
        assert!(
            spec_rule.contains(&format!("object.spec.{field})"))
                && spec_rule.contains(&format!("oldObject.spec.{field}")),
            "the node policy's spec rule does not compare {field}: {spec_rule}"
        );
    }

    // NodeStatus: every field but the conditions (compared apart from
    // nodegate.dev/Open), and capacity and allocatable, which the API
    // server's CEL type of a Node lacks (docs/operations.md, "Refused, with
    // the reason").
    use k8s_openapi::api::core::v1::NodeStatus;
    let NodeStatus {
        addresses: _,
        allocatable: _,
        capacity: _,
        conditions: _,
        config: _,
        daemon_endpoints: _,
        declared_features: _,
        features: _,
        images: _,
        node_info: _,
        phase: _,
        runtime_handlers: _,
        volumes_attached: _,
        volumes_in_use: _,
    } = NodeStatus::default();
    let status_rule = policy["spec"]["validations"]
        .as_array()
        .and_then(|vs| {
            vs.iter().find(|v| {
                v["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("status field"))
            })
        })
        .and_then(|v| v["expression"].as_str())
        .expect("the status rule");
    let chart = objects(&helm_template(&[
        "--kube-version",
        "1.36.0",
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    ]));
    let chart_rule = chart
        .iter()
        .find(|o| {
            o["kind"] == "ValidatingAdmissionPolicy"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("node-changes"))
        })
        .and_then(|p| p["spec"]["validations"].as_array().cloned())
        .and_then(|vs| {
            vs.iter()
                .find(|v| {
                    v["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("status field"))
                })
                .and_then(|v| v["expression"].as_str().map(str::to_string))
        })
        .expect("the chart's status rule");
    for field in [
        "addresses",
        "config",
        "daemonEndpoints",
        "declaredFeatures",
        "features",
        "images",
        "nodeInfo",
        "phase",
        "runtimeHandlers",
        "volumesAttached",
        "volumesInUse",
    ] {
        for (what, rule) in [("kustomize", status_rule), ("chart", chart_rule.as_str())] {
            assert!(
                rule.contains(&format!("object.status.{field} =="))
                    && rule.contains(&format!("oldObject.status.{field})")),
                "{what}: the node policy's status rule does not compare {field}: {rule}"
            );
        }
    }
}

/// Nodes as `system:node:n1` (group `system:nodes`) sees them: the admin
/// kubeconfig with kube's impersonation headers.
async fn as_node_api(admin: &Path) -> Api<Node> {
    let kubeconfig = kube::config::Kubeconfig::read_from(admin).expect("admin kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("client config");
    config.auth_info.impersonate = Some("system:node:n1".to_string());
    config.auth_info.impersonate_groups = Some(vec!["system:nodes".to_string()]);
    Api::all(kube::Client::try_from(config).expect("client"))
}

/// Hardening: an overlay that renames the ServiceAccount and
/// moves it to another namespace (kustomize `namePrefix` and `namespace`)
/// is still held by the policy, which follows the labelled bindings'
/// subjects instead of naming the account. As the renamed account
/// (impersonated), a `nodegate.dev/x:NoExecute` taint is refused while a
/// `NoSchedule` one is allowed (its RBAC works; the refusal is the policy's).
pub(super) async fn a_renamed_serviceaccount_is_still_held(cluster: &TestCluster, admin: &Path) {
    let dir = tempfile::tempdir().expect("temp dir");
    // kustomize takes only relative paths to the base.
    let up = "../".repeat(dir.path().components().count() - 1);
    let root = repo_root();
    let base = format!(
        "{up}{}/deploy/kustomize/base",
        root.to_str().expect("utf-8 path").trim_start_matches('/')
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!("resources:\n  - {base}\nnamespace: team-system\nnamePrefix: team-\n"),
    )
    .expect("write the overlay");
    let renamed = objects(&kustomize(dir.path().to_str().expect("utf-8 path")));
    let identity: Vec<&Value> = renamed
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some(
                    "Namespace"
                        | "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                )
            )
        })
        .collect();
    let stream = to_stream(&identity);
    must(
        "apply the renamed identity",
        kubectl(admin, &["apply", "-f", "-"], Some(&stream)),
    );
    let node = "vap-renamed";
    // A foreign taint, so that spec.taints exists to append to.
    cluster
        .create_node(&fake_node(
            node,
            &[],
            &[("example.com/foreign", "", "NoSchedule")],
        ))
        .await;
    let as_renamed = |effect: &str| -> Result<(), String> {
        let patch = json!([{"op": "add", "path": "/spec/taints/-",
                            "value": {"key": "nodegate.dev/x", "effect": effect}}]);
        let out = kubectl(
            admin,
            &[
                "--as=system:serviceaccount:team-system:team-nodegate",
                "patch",
                "node",
                node,
                "--type",
                "json",
                "-p",
                &patch.to_string(),
            ],
            None,
        );
        if out.ok { Ok(()) } else { Err(out.stderr) }
    };
    let refusal = wait_for(
        "the policy to hold the renamed ServiceAccount",
        Duration::from_secs(30),
        || async {
            match as_renamed("NoExecute") {
                Ok(()) => panic!("the renamed ServiceAccount added a NoExecute taint"),
                Err(e) if e.contains("ValidatingAdmissionPolicy") => Ok(e),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    assert!(
        refusal.contains("refused: nodegate.dev/x:NoExecute"),
        "{refusal}"
    );
    as_renamed("NoSchedule").unwrap_or_else(|e| {
        panic!("the renamed ServiceAccount may still add its NoSchedule taint: {e}")
    });
    must(
        "delete the renamed identity",
        kubectl(admin, &["delete", "-f", "-", "--wait=false"], Some(&stream)),
    );
    must(
        "delete vap-renamed",
        kubectl(admin, &["delete", "node", node, "--wait=false"], None),
    );
}
