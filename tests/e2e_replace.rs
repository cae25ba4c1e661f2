//! `--on-timeout replace` end to end (semantics.md §5.8) on kwok nodes
//! with no owner: the leader cordons and marks the node it may replace,
//! holds the next back with `ReplaceBudgetExhausted`, and never opens
//! either. The Karpenter owner is in tests/e2e_karpenter.rs.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use support::gate::{DsSpec, Env, annotation, has_gate_taint};
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
