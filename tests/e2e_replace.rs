//! `--on-timeout replace` end to end (semantics.md §5.8) on kwok nodes
//! with no owner: the leader cordons and marks the node it may replace,
//! holds the next back with `ReplaceBudgetExhausted`, and never opens
//! either. The Karpenter owner is in tests/e2e_karpenter.rs.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::gate::{DsSpec, Env, NS, annotation, gated_node, has_gate_taint};
use support::{Nodegate, wait_for};

fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

async fn reasons(env: &Env, node: &str) -> Vec<String> {
    env.events_for(node)
        .await
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// Whether an Event with this reason was recorded for the node.
async fn has_event(env: &Env, node: &str, reason: &str) -> bool {
    reasons(env, node).await.iter().any(|r| r == reason)
}

/// Two nodes whose agent never turns Ready, a budget of one request: one
/// node is cordoned and marked `nodegate.dev/replace-requested` with a
/// `GateReplaced` Event; the other stays as it was, with a
/// `ReplaceBudgetExhausted` Event naming `--replace-budget`. Both keep
/// the startup taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_no_owner_is_cordoned_and_marked_within_the_budget() {
    let env = Env::new("replace-no-owner").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            "1",
            "--replace-in-flight",
            "5",
            // Two failing nodes of two: not judged a cluster-wide breakage.
            "--replace-breakage",
            "100%",
        ],
    );
    env.create_node("stuck-a", &[]).await;
    env.create_node("stuck-b", &[]).await;

    let (replaced, held) = wait_for(
        "one node replaced and the other refused by the budget",
        Duration::from_secs(60),
        || async {
            let mut replaced = Vec::new();
            let mut held = Vec::new();
            for name in ["stuck-a", "stuck-b"] {
                let r = reasons(&env, name).await;
                if r.iter().any(|r| r == "GateReplaced") {
                    replaced.push(name);
                }
                if r.iter().any(|r| r == "ReplaceBudgetExhausted") {
                    held.push(name);
                }
            }
            if replaced.len() == 1 && held.len() == 1 {
                Ok((replaced[0], held[0]))
            } else {
                Err(format!(
                    "replaced {replaced:?}, held {held:?}\n{}",
                    ng.logs()
                ))
            }
        },
    )
    .await;
    assert_ne!(replaced, held);

    let r = env.node(replaced).await;
    assert!(cordoned(&r), "{replaced} must be cordoned");
    assert!(has_gate_taint(&r), "{replaced} keeps the startup taint");
    let at = annotation(&r, "nodegate.dev/replace-requested").expect("replace-requested");
    assert!(at.parse::<jiff::Timestamp>().is_ok(), "{at}");
    let why = annotation(&r, "nodegate.dev/replace-reason").expect("replace-reason");
    assert!(
        why.contains("infra/agent") && why.contains("no owner known"),
        "{why}"
    );
    assert!(annotation(&r, "nodegate.dev/timed-out").is_some());

    let h = env.node(held).await;
    assert!(!cordoned(&h), "{held} must not be cordoned");
    assert!(has_gate_taint(&h), "{held} keeps the startup taint");
    assert_eq!(annotation(&h, "nodegate.dev/replace-requested"), None);
    let note = env
        .events_for(held)
        .await
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("ReplaceBudgetExhausted"))
        .and_then(|e| e.note)
        .unwrap_or_default();
    assert!(note.contains("--replace-budget 1"), "{note}");

    // A restart (a new leader) asks for nothing more: the mark counts.
    drop(ng);
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            "1",
            "--replace-breakage",
            "100%",
        ],
    );
    wait_for(
        "the restarted nodegate to refuse the held node again",
        Duration::from_secs(30),
        || async {
            let logs = ng.logs();
            if logs.contains("Not replaced yet although its deadline passed") {
                Ok(())
            } else {
                Err(logs)
            }
        },
    )
    .await;
    assert!(
        !cordoned(&env.node(held).await),
        "{held} still not cordoned"
    );
    assert_eq!(
        annotation(&env.node(replaced).await, "nodegate.dev/replace-requested"),
        Some(at),
        "the request is not made again"
    );
}

/// Two nodes whose agent never turns Ready: with `--replace-breakage 1` the
/// agent failing on both is broken cluster-wide, so neither is replaced;
/// `--replace-fallback open` records `nodegate.dev/replace-fallback: open`
/// with a `ReplaceSkipped` Event, and the gate then opens each node as by
/// timeout. Nothing is cordoned or requested.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_broken_cluster_wide_is_not_replaced_and_the_fallback_opens() {
    let env = Env::new("replace-fallback").await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-breakage",
            "1",
            "--replace-fallback",
            "open",
        ],
    );
    env.create_node("bad-a", &[]).await;
    env.create_node("bad-b", &[]).await;
    for name in ["bad-a", "bad-b"] {
        env.wait_open(name, Duration::from_secs(60), &[&ng]).await;
        let n = env.node(name).await;
        assert_eq!(
            annotation(&n, "nodegate.dev/opened-by").as_deref(),
            Some("timeout"),
            "{name}"
        );
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-fallback").as_deref(),
            Some("open"),
            "{name}"
        );
        assert_eq!(annotation(&n, "nodegate.dev/replace-requested"), None);
        assert!(!cordoned(&n), "{name} must not be cordoned");
        let skipped = wait_for(
            &format!("ReplaceSkipped on {name}"),
            Duration::from_secs(15),
            || async {
                env.events_for(name)
                    .await
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("ReplaceSkipped"))
                    .and_then(|e| e.note)
                    .ok_or_else(|| format!("no ReplaceSkipped on {name} yet"))
            },
        )
        .await;
        assert!(
            skipped.contains("infra/agent is broken cluster-wide"),
            "{skipped}"
        );
    }
}

/// Not only DaemonSets: a canary whose image nobody can pull fails on every
/// gated node (no pod gets its sandbox). Five Cluster API nodes, each owned
/// by its Machine (`status.nodeRef` by name and UID), time out under
/// `--on-timeout replace` with the default fallback: each gets
/// `nodegate.dev/replace-fallback: keep` and a `ReplaceSkipped` naming the
/// canary, and no Machine is deleted, no node requested or cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_failing_on_every_node_replaces_none_of_them() {
    let env = Env::new("replace-canary").await;
    let (machines, _) = owner_kinds(&env).await;
    let names: Vec<String> = (0..5).map(|i| format!("canary-{i}")).collect();
    for name in &names {
        let node = env
            .cluster
            .create_node(&capi_node(name, &format!("m-{name}")))
            .await;
        let uid = node.metadata.uid.clone().expect("a node uid");
        create_with_status(
            &machines,
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                "metadata": {"name": format!("m-{name}"), "namespace": "capi"},
                "spec": {"clusterName": "workload"},
            }),
            json!({"nodeRef": {"kind": "Node", "name": name, "uid": uid}}),
        )
        .await;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        format!("canary:\n  namespace: {NS}\n  image: registry.invalid/x\n"),
    )
    .expect("write config");
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            "5",
            "--replace-in-flight",
            "5",
            "--config",
            &file.to_string_lossy(),
        ],
    );
    for name in &names {
        let note = wait_for(
            &format!("ReplaceSkipped on {name}"),
            Duration::from_secs(90),
            || async {
                env.events_for(name)
                    .await
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("ReplaceSkipped"))
                    .and_then(|e| e.note)
                    .ok_or_else(|| format!("no ReplaceSkipped on {name} yet\n{}", ng.logs()))
            },
        )
        .await;
        assert!(note.contains("canary is broken cluster-wide"), "{note}");
    }
    for name in &names {
        let n = env.node(name).await;
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-fallback").as_deref(),
            Some("keep"),
            "{name}"
        );
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-requested"),
            None,
            "{name}"
        );
        assert!(!cordoned(&n), "{name} must not be cordoned");
        assert!(has_gate_taint(&n), "{name} stays closed");
        assert!(!has_event(&env, name, "GateReplaced").await, "{name}");
        let m = machines
            .get_opt(&format!("m-{name}"))
            .await
            .expect("read a Machine");
        assert!(
            m.is_some_and(|m| m.metadata.deletion_timestamp.is_none()),
            "the Machine of {name} must survive"
        );
    }
}

/// A CustomResourceDefinition as small as these tests need: the group,
/// version and kind nodegate asks for, any fields, a status subresource.
fn crd(group: &str, kind: &str, plural: &str, version: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{
                "name": version, "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates `obj` and sets its `status`.
async fn create_with_status(api: &Api<DynamicObject>, obj: Value, status: Value) {
    let obj: DynamicObject = serde_json::from_value(obj).expect("object");
    let name = obj.metadata.name.clone().expect("a name");
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

/// Installs the Machine and NodeClaim kinds (and the namespace `capi`);
/// their APIs once served: Machines in `capi`, NodeClaims.
async fn owner_kinds(env: &Env) -> (Api<DynamicObject>, Api<DynamicObject>) {
    let crds: Api<DynamicObject> = Api::all_with(
        env.cluster.client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    );
    for c in [
        crd("cluster.x-k8s.io", "Machine", "machines", "v1beta1", true),
        crd("karpenter.sh", "NodeClaim", "nodeclaims", "v1", false),
    ] {
        let c: DynamicObject = serde_json::from_value(c).expect("crd");
        crds.create(&PostParams::default(), &c)
            .await
            .expect("create CRD");
    }
    env.cluster.namespace("capi").await;
    let client = env.cluster.client.clone();
    let machine_res = resource("cluster.x-k8s.io", "v1beta1", "Machine", "machines");
    let claim_res = resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims");
    let machines: Api<DynamicObject> = Api::namespaced_with(client.clone(), "capi", &machine_res);
    let claims: Api<DynamicObject> = Api::all_with(client, &claim_res);
    wait_for("the CRDs served", Duration::from_secs(30), || async {
        match (
            machines.list(&Default::default()).await,
            claims.list(&Default::default()).await,
        ) {
            (Ok(_), Ok(_)) => Ok(()),
            (m, c) => Err(format!("{:?} {:?}", m.err(), c.err())),
        }
    })
    .await;
    (machines, claims)
}

/// A gated node whose Cluster API annotations name the Machine
/// `capi/MACHINE`.
fn capi_node(name: &str, machine: &str) -> Node {
    let mut n = gated_node(name, &[]);
    n.metadata.annotations = Some(
        [
            ("cluster.x-k8s.io/machine", machine),
            ("cluster.x-k8s.io/cluster-namespace", "capi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    n
}

/// A Cluster API workload cluster: its Machines live in the management
/// cluster, so every lookup of a node's Machine here is a 404. Two stuck
/// CAPI-annotated nodes whose Machines do not exist get the fallback
/// (`keep`), are not requested and do not fill `--replace-in-flight 2`; a
/// third stuck node, whose Machine names it, is then replaced (its Machine
/// deleted) rather than refused for ever with `ReplaceBudgetExhausted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_that_do_not_exist_fill_no_budget() {
    let env = Env::new("replace-capi-404").await;
    let (machines, _) = owner_kinds(&env).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            "5",
            "--replace-in-flight",
            "2",
            // The agent fails on every node: not judged a breakage here.
            "--replace-breakage",
            "100%",
        ],
    );
    for name in ["elsewhere-a", "elsewhere-b"] {
        env.cluster
            .create_node(&capi_node(name, &format!("m-{name}")))
            .await;
    }
    for name in ["elsewhere-a", "elsewhere-b"] {
        wait_for(
            &format!("the fallback on {name}"),
            Duration::from_secs(60),
            || async {
                env.annotation(name, "nodegate.dev/replace-fallback")
                    .await
                    .ok_or_else(|| format!("no fallback on {name} yet\n{}", ng.logs()))
            },
        )
        .await;
        let n = env.node(name).await;
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-requested"),
            None,
            "{name}"
        );
        assert!(!cordoned(&n), "{name} must not be cordoned");
    }
    let third = env
        .cluster
        .create_node(&capi_node("third", "m-third"))
        .await;
    create_with_status(
        &machines,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "m-third", "namespace": "capi"},
            "spec": {"clusterName": "workload"},
        }),
        json!({"nodeRef": {"kind": "Node", "name": "third",
                           "uid": third.metadata.uid.clone().expect("a node uid")}}),
    )
    .await;
    wait_for(
        "the third node's Machine deleted",
        Duration::from_secs(60),
        || async {
            match machines.get_opt("m-third").await {
                Ok(None) => Ok(()),
                other => Err(format!("m-third: {other:?}\n{}", ng.logs())),
            }
        },
    )
    .await;
    assert!(
        annotation(&env.node("third").await, "nodegate.dev/replace-requested").is_some(),
        "the third node is marked"
    );
    assert!(
        !has_event(&env, "third", "ReplaceBudgetExhausted").await,
        "the third node was never refused"
    );
}

/// A node that names an owner which does not own it is not a lever: nodegate
/// deletes only an owner that names the node from its own side. Three stuck
/// nodes under `--on-timeout replace`:
/// - `rogue` carries Cluster API's annotations naming the Machine
///   `capi/victim`, whose `status.nodeRef` names another node;
/// - `by-provider` is a Karpenter node whose providerID matches the
///   NodeClaim `victim-claim`, which names another node in
///   `status.nodeName`, and no ownerReference ties them;
/// - `owned` names the Machine `capi/owned-m`, whose `status.nodeRef`
///   names it by name and UID.
///
/// `owned-m` is deleted; `victim` and `victim-claim` survive, and their
/// nodes get the fallback (`keep`) with a `ReplaceSkipped` Event saying no
/// owner could be proven — nothing requested, nothing cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_deletes_only_an_owner_that_names_the_node_itself() {
    let env = Env::new("replace-proven-owner").await;
    let (machines, claims) = owner_kinds(&env).await;

    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let capi = capi_node;
    let rogue = env.cluster.create_node(&capi("rogue", "victim")).await;
    let owned = env.cluster.create_node(&capi("owned", "owned-m")).await;
    let mut by_provider = gated_node("by-provider", &[("karpenter.sh/nodepool", "default")]);
    by_provider.spec.get_or_insert_default().provider_id = Some("kwok://victim-instance".into());
    env.cluster.create_node(&by_provider).await;
    let uid = |n: &Node| n.metadata.uid.clone().expect("a node uid");

    let machine = |name: &str| {
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "capi"},
            "spec": {"clusterName": "workload"},
        })
    };
    create_with_status(
        &machines,
        machine("victim"),
        json!({"nodeRef": {"kind": "Node", "name": "victim-node", "uid": uid(&rogue)}}),
    )
    .await;
    create_with_status(
        &machines,
        machine("owned-m"),
        json!({"nodeRef": {"kind": "Node", "name": "owned", "uid": uid(&owned)}}),
    )
    .await;
    create_with_status(
        &claims,
        json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "victim-claim"},
            "spec": {},
        }),
        json!({"nodeName": "victim-node", "providerID": "kwok://victim-instance"}),
    )
    .await;

    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "3s",
            "--on-timeout",
            "replace",
            "--replace-budget",
            "5",
            "--replace-in-flight",
            "5",
            "--replace-fallback",
            "keep",
            // Three failing nodes of three: not judged a cluster-wide
            // breakage.
            "--replace-breakage",
            "100%",
        ],
    );

    wait_for(
        "owned-m deleted and a fallback on rogue and by-provider",
        Duration::from_secs(90),
        || async {
            let gone = matches!(machines.get_opt("owned-m").await, Ok(None));
            let rogue = env
                .annotation("rogue", "nodegate.dev/replace-fallback")
                .await;
            let prov = env
                .annotation("by-provider", "nodegate.dev/replace-fallback")
                .await;
            if gone && rogue.is_some() && prov.is_some() {
                Ok(())
            } else {
                Err(format!(
                    "owned-m gone {gone}, fallback on rogue {rogue:?}, on by-provider {prov:?}\n{}",
                    ng.logs()
                ))
            }
        },
    )
    .await;
    assert!(
        machines
            .get_opt("victim")
            .await
            .expect("get victim")
            .is_some(),
        "the Machine a node named in its own annotations survives"
    );
    assert!(
        claims
            .get_opt("victim-claim")
            .await
            .expect("get victim-claim")
            .is_some(),
        "the NodeClaim matched only by providerID survives"
    );
    for name in ["rogue", "by-provider"] {
        let n = env.node(name).await;
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-fallback").as_deref(),
            Some("keep"),
            "{name}"
        );
        assert_eq!(
            annotation(&n, "nodegate.dev/replace-requested"),
            None,
            "{name}"
        );
        assert!(!cordoned(&n), "{name} must not be cordoned");
        assert!(has_gate_taint(&n), "{name} stays closed (keep)");
        let skipped = wait_for(
            &format!("ReplaceSkipped on {name}"),
            Duration::from_secs(15),
            || async {
                env.events_for(name)
                    .await
                    .into_iter()
                    .find(|e| e.reason.as_deref() == Some("ReplaceSkipped"))
                    .and_then(|e| e.note)
                    .ok_or_else(|| format!("no ReplaceSkipped on {name} yet"))
            },
        )
        .await;
        assert!(skipped.contains("no owner could be proven"), "{skipped}");
    }
    let owned = env.node("owned").await;
    assert!(
        annotation(&owned, "nodegate.dev/replace-requested").is_some(),
        "owned: its replacement was requested"
    );
    assert!(
        has_event(&env, "owned", "GateReplaced").await,
        "owned: GateReplaced"
    );
}

/// Issue 37 §4: a node asked to be replaced that a person then opens is no
/// longer being replaced. `marked` has no owner at its deadline, so it is
/// cordoned and marked; then it gains one (Cluster API's annotations and a
/// Machine whose `status.nodeRef` names it by name and UID) and a person
/// opens it with `nodegate.dev/open`. The opening removes the request's
/// marks; the leader is killed, the managed taint comes back (as
/// Karpenter's registration puts its startup taints back on a node opened
/// before it registered), and the restarted leader leaves the Machine
/// alone: a serving node is not terminated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opened_marked_node_keeps_its_owner_across_a_leader_restart() {
    let env = Env::new("replace-opened").await;
    let (machines, _) = owner_kinds(&env).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let flags = [
        "--timeout",
        "3s",
        "--on-timeout",
        "replace",
        "--replace-budget",
        "5",
        "--replace-in-flight",
        "5",
        "--replace-breakage",
        "100%",
    ];
    let mut ng = Nodegate::start(&env.cluster, &flags);
    let node = env.create_node("marked", &[]).await;
    let at = wait_for("marked to be marked", Duration::from_secs(60), || async {
        env.annotation("marked", "nodegate.dev/replace-requested")
            .await
            .ok_or_else(|| ng.logs())
    })
    .await;
    assert!(cordoned(&env.node("marked").await), "no owner: cordoned");

    // It gains an owner that proves it owns the node.
    create_with_status(
        &machines,
        json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": "marked-m", "namespace": "capi"},
            "spec": {"clusterName": "workload"},
        }),
        json!({"nodeRef": {"kind": "Node", "name": "marked",
                           "uid": node.metadata.uid.clone().expect("a node uid")}}),
    )
    .await;
    let pp = PatchParams::default();
    env.nodes
        .patch(
            "marked",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {
                "cluster.x-k8s.io/machine": "marked-m",
                "cluster.x-k8s.io/cluster-namespace": "capi",
            }}})),
        )
        .await
        .expect("annotate marked with its Machine");

    // A person opens it.
    env.nodes
        .patch(
            "marked",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {"nodegate.dev/open": "true"}}})),
        )
        .await
        .expect("ask to open marked");
    env.wait_open("marked", Duration::from_secs(30), &[&ng])
        .await;
    let opened = env.node("marked").await;
    assert!(annotation(&opened, "nodegate.dev/opened-at").is_some());
    assert_eq!(
        annotation(&opened, "nodegate.dev/replace-requested"),
        None,
        "the opening removes the request (it was {at})"
    );
    assert_eq!(annotation(&opened, "nodegate.dev/replace-reason"), None);

    // The leader is killed; the managed taint comes back.
    ng.kill();
    let mut n = env.node("marked").await;
    n.spec
        .get_or_insert_default()
        .taints
        .get_or_insert_default()
        .push(
            serde_json::from_value(
                json!({"key": "nodegate.dev/initializing", "effect": "NoSchedule"}),
            )
            .expect("a taint"),
        );
    env.nodes
        .replace("marked", &PostParams::default(), &n)
        .await
        .expect("put the managed taint back on marked");

    // A new leader, seen to look and act: another stuck node with no owner
    // is cordoned and marked after the restart.
    let ng = Nodegate::start(&env.cluster, &flags);
    env.create_node("later", &[]).await;
    wait_for("later to be marked", Duration::from_secs(60), || async {
        env.annotation("later", "nodegate.dev/replace-requested")
            .await
            .ok_or_else(|| ng.logs())
    })
    .await;
    assert!(
        machines
            .get_opt("marked-m")
            .await
            .expect("get marked-m")
            .is_some_and(|m| m.metadata.deletion_timestamp.is_none()),
        "the Machine of a node opened since its request is not deleted:\n{}",
        ng.logs()
    );
    let marked = env.node("marked").await;
    assert_eq!(
        annotation(&marked, "nodegate.dev/replace-requested"),
        None,
        "no request again for a node opened after its deadline"
    );
    let replaced = reasons(&env, "marked")
        .await
        .into_iter()
        .filter(|r| r == "GateReplaced")
        .count();
    assert_eq!(
        replaced, 1,
        "one GateReplaced on marked, from before the opening"
    );
}
