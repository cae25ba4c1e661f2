//! The switches on the real control plane (semantics.md §6.4): a node
//! annotated `nodegate.dev/open: "true"` opens at once, whatever its members,
//! and loses the annotation; a node annotated `nodegate.dev/suspend: "true"`
//! is not written while its deadline passes, and opens as soon as the
//! annotation goes.

mod support;

use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::Nodegate;
use support::gate::{DsSpec, Env, annotation, gated_node, has_gate_taint};

const TIMEOUT_S: u64 = 12;

async fn annotate(env: &Env, node: &str, key: &str, value: Option<&str>) {
    env.nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("annotate {node}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_now_and_suspend_switch_what_the_gate_writes() {
    let env = Env::new("switches").await;
    // Never Ready: only a switch or the deadline can open these nodes.
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let timeout = format!("{TIMEOUT_S}s");
    let ng = Nodegate::start(&env.cluster, &["--timeout", &timeout]);

    let mut paused = gated_node("paused", &[]);
    paused
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("nodegate.dev/suspend".into(), "true".into());
    env.cluster.create_node(&paused).await;
    let created = Instant::now();
    env.create_node("open-me", &[]).await;
    env.wait_pod("agent", "open-me", false).await;

    annotate(&env, "open-me", "nodegate.dev/open", Some("true")).await;
    env.wait_open("open-me", Duration::from_secs(10), &[&ng])
        .await;
    let n = env.node("open-me").await;
    assert_eq!(
        annotation(&n, "nodegate.dev/opened-by").as_deref(),
        Some("manual")
    );
    assert_eq!(
        annotation(&n, "nodegate.dev/open"),
        None,
        "the request is used once: the opening patch removes it"
    );
    let notes: Vec<String> = env
        .events_for("open-me")
        .await
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("opened on request")),
        "{notes:?}"
    );

    // The suspended node's deadline passes: nothing is written.
    let past_deadline = Duration::from_secs(TIMEOUT_S + 4);
    tokio::time::sleep(past_deadline.saturating_sub(created.elapsed())).await;
    let n = env.node("paused").await;
    assert!(
        has_gate_taint(&n),
        "suspended, yet opened: {:?}",
        n.metadata.annotations
    );
    assert!(annotation(&n, "nodegate.dev/opened-at").is_none());
    let ours: Vec<_> = env
        .events_for("paused")
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("nodegate.dev/nodegate"))
        .map(|e| (e.reason, e.note))
        .collect();
    assert!(ours.is_empty(), "suspended, yet nodegate recorded {ours:?}");

    // Lifted: the gate acts at once on what it finds — the deadline passed.
    annotate(&env, "paused", "nodegate.dev/suspend", None).await;
    env.wait_open("paused", Duration::from_secs(5), &[&ng])
        .await;
    assert_eq!(
        env.annotation("paused", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("timeout")
    );
}
