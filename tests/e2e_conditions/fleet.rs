//! The typo'd condition rule on the real API server: ten managed
//! nodes, a `NoExecute` rule with no `maxUnavailable` whose condition type
//! is a typo, so the condition is absent (read as `Unknown`) on every node.
//!
//! - As the review wrote it (`status: "False|Unknown"`, no `for`), the rule
//!   is refused at load: `nodegate run` exits 2 naming the rule and the fix.
//! - With `matchAbsent: true` (the explicit "yes, absent counts") it is
//!   accepted, and its default budget lets one node carry the taint: a watch
//!   on the scenario's nodes sees at most one tainted at any revision, until
//!   nodegate reports the other nine held back by the budget.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher;

use super::support::{fake_node, metric};
use super::{Shared, metrics};

/// The rule in the shared config (with `matchAbsent: true`), on `scenario=fleet`.
pub const RULE: &str = "gpu-broken";
pub const KEY: &str = "example.com/gpu";
const NODES: usize = 10;

/// The review's rule as written: refused.
const REFUSED: &str = r#"
conditionTaints:
- name: gpu-broken
  nodeSelector: scenario=fleet
  conditions: [{type: GPUDriverReadyy, status: "False|Unknown"}]
  taint: {key: example.com/gpu, effect: NoExecute}
"#;

/// How many of the watched nodes carry `KEY` at each revision the watch
/// delivers, and the most at once.
#[derive(Default)]
struct Count {
    tainted: BTreeMap<String, bool>,
    most: usize,
}

fn carries(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == KEY))
}

/// Starts a watch on the scenario's nodes that keeps `Count` (one event is
/// one revision of one node, delivered in order: the count after each is
/// how many carried the taint at that revision).
fn watch(nodes: Api<Node>) -> Arc<Mutex<Count>> {
    let count = Arc::new(Mutex::new(Count::default()));
    let out = Arc::clone(&count);
    tokio::spawn(async move {
        let cfg = watcher::Config::default().labels("scenario=fleet");
        let mut events = watcher::watcher(nodes, cfg).boxed();
        while let Ok(Some(ev)) = events.try_next().await {
            let (watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev else {
                continue;
            };
            let Some(name) = n.metadata.name.clone() else {
                continue;
            };
            if let Ok(mut c) = count.lock() {
                c.tainted.insert(name, carries(&n));
                let now = c.tainted.values().filter(|t| **t).count();
                c.most = c.most.max(now);
            }
        }
    });
    out
}

pub async fn no_execute_rule_on_an_absent_condition(s: &Shared) {
    let count = watch(s.env.nodes.clone());
    let kubeconfig = s.env.cluster.kubeconfig.clone();
    let (code, text) = tokio::task::spawn_blocking(move || run_refused(&kubeconfig))
        .await
        .expect("run the refused config");
    assert_eq!(code, Some(2), "the review's rule was not refused:\n{text}");
    for w in [RULE, "GPUDriverReadyy", "matchAbsent: true", "for"] {
        assert!(text.contains(w), "the refusal does not say {w:?}:\n{text}");
    }

    for i in 0..NODES {
        let name = format!("fleet-{i}");
        s.env
            .cluster
            .create_node(&fake_node(&name, &[("scenario", "fleet")], &[]))
            .await;
    }
    // Every node matches: one gets the taint, the other nine are held back
    // by the default budget (each counted once).
    let series = format!("nodegate_condition_taint_budget_blocked_total{{rule=\"{RULE}\"}}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let blocked = metric(&metrics(&s.addr).await, &series).unwrap_or(0.0);
        let most = count.lock().map(|c| c.most).unwrap_or(0);
        assert!(
            most <= 1,
            "{most} of {NODES} nodes carried the NoExecute taint at once\n{}",
            s.ng.logs()
        );
        if blocked >= (NODES - 1) as f64 && most >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every node was decided within 60s: {blocked} held back, {most} tainted at most\n{}",
            s.ng.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The budget's decisions are made; a taint sent before them would be
    // seen by now (the held-back count comes after the write it yields to).
    let tainted_now = s
        .env
        .nodes
        .list(&kube::api::ListParams::default().labels("scenario=fleet"))
        .await
        .expect("list fleet nodes")
        .items
        .iter()
        .filter(|n| carries(n))
        .count();
    let most = count.lock().map(|c| c.most).unwrap_or(usize::MAX);
    assert_eq!(
        (most, tainted_now),
        (1, 1),
        "a NoExecute rule with no maxUnavailable must taint one node at a time"
    );
}

/// Runs `nodegate run --config FILE` with the review's rule and returns its
/// exit status and output; it must stop on its own (a config error comes
/// before anything is watched or written).
fn run_refused(kubeconfig: &std::path::Path) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("refused.yaml");
    std::fs::write(&file, REFUSED).expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_nodegate"))
        .args(["run", "--http-addr", "127.0.0.1:0"])
        .arg("--config")
        .arg(&file)
        .env("KUBECONFIG", kubeconfig)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start nodegate");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if matches!(child.try_wait(), Ok(None)) {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("nodegate output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}
