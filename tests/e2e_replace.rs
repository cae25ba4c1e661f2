//! `--on-timeout replace` end to end (semantics.md §5.8) on kwok nodes
//! with no owner: the leader cordons and marks the node it may replace,
//! holds the next back with `ReplaceBudgetExhausted`, and never opens
//! either. The Karpenter owner is in tests/e2e_karpenter.rs.

use nodegate_e2e as support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use support::gate::{DsSpec, Env, NS, annotation, gated_node, has_gate_taint};
use support::owners::{
    capi_node, cordoned, create_machine, create_with_status, has_event, owner_kinds, reasons,
};
use support::{Nodegate, wait_for};

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
        create_machine(&machines, &format!("m-{name}"), name, &uid).await;
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

    create_machine(&machines, "victim", "victim-node", &uid(&rogue)).await;
    create_machine(&machines, "owned-m", "owned", &uid(&owned)).await;
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
