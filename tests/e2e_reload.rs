//! Config reload on the real control plane, with the real binary started
//! with `--config FILE`: the file is rewritten while nodegate runs.
//!
//! - `suspend: true` written while a gate waits holds its writes past the
//!   deadline; `suspend: false` lets it open at once (by timeout).
//! - An invalid file is refused: gates keep working under the settings in
//!   force, the failure is counted and `/readyz?verbose` names the error;
//!   a later valid file that excludes the held DaemonSet opens the node
//!   waiting only for it; SIGHUP re-reads the file at once.
//!
//! - A managed taint dropped by a reload stays managed (removed, never
//!   added): a node a lagging replica still taints with it opens.
//!
//! And the node switches of the same family (`switches`, below):
//! `nodegate.dev/open` and `nodegate.dev/suspend` on a node.

use nodegate_e2e as support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::gate::{DsSpec, Env, NS, annotation, has_gate_taint};
use support::{Nodegate, http_get, metric, wait_for};

/// Replaces the file at once (write a sibling, rename over it), as an editor
/// or a ConfigMap update does: the poller never reads half a file.
fn write_config(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap_or_else(|e| panic!("write {}: {e}", tmp.display()));
    std::fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename to {}: {e}", path.display()));
}

async fn get(addr: &str, path: &str) -> (u16, String) {
    http_get(addr, path)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// Waits until the metric `series` reads `want`.
async fn wait_metric(ng: &Nodegate, addr: &str, series: &str, want: f64) {
    let what = format!("{series} = {want}");
    let found = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            let (_, text) = get(addr, "/metrics").await;
            if metric(&text, series) == Some(want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if found.is_err() {
        let (_, text) = get(addr, "/metrics").await;
        panic!(
            "{what} not reached within 15s (now {:?})\nnodegate logs:\n{}",
            metric(&text, series),
            ng.logs()
        );
    }
}

async fn wait_ready(addr: &str) {
    wait_for("/readyz 200", Duration::from_secs(30), || async {
        match http_get(addr, "/readyz").await {
            Ok((200, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// A cluster whose one DaemonSet, `agent`, is held (never Ready), and a
/// nodegate started with `--config` on a file holding `config`: the file,
/// its directory (kept alive), nodegate and its HTTP address.
struct Setup {
    env: Env,
    _dir: tempfile::TempDir,
    file: std::path::PathBuf,
    ng: Nodegate,
    addr: String,
}

async fn held_agent_with_config(test: &str, config: &str) -> Setup {
    let env = Env::new(test).await;
    env.create_ds(DsSpec {
        hold: true,
        ..DsSpec::new("agent")
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.yaml");
    write_config(&file, config);
    let ng = Nodegate::start(
        &env.cluster,
        &["--config", file.to_str().expect("utf-8 path")],
    );
    let addr = ng.http_addr(Duration::from_secs(30));
    Setup {
        env,
        _dir: dir,
        file,
        ng,
        addr,
    }
}

const RELOADS: &str = "nodegate_config_reloads_total";
const FAILURES: &str = "nodegate_config_reload_failures_total";
const LAST_OK: &str = "nodegate_config_last_reload_successful";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_written_live_holds_the_deadline_and_lifted_opens_at_once() {
    const TIMEOUT_S: u64 = 12;
    // The agent is never Ready: only the deadline can open the node.
    let Setup {
        env,
        file,
        ng,
        addr,
        _dir,
    } = held_agent_with_config("reload-suspend", &format!("timeout: {TIMEOUT_S}s\n")).await;
    wait_ready(&addr).await;

    env.create_node("held", &[]).await;
    let created = Instant::now();
    write_config(&file, &format!("timeout: {TIMEOUT_S}s\nsuspend: true\n"));
    wait_metric(&ng, &addr, RELOADS, 1.0).await;
    env.wait_pod("agent", "held", false).await;

    // The deadline passes under `suspend: true`: nothing is written.
    let past_deadline = Duration::from_secs(TIMEOUT_S + 4);
    tokio::time::sleep(past_deadline.saturating_sub(created.elapsed())).await;
    let n = env.node("held").await;
    assert!(
        has_gate_taint(&n),
        "suspended by the reloaded file, yet opened: {:?}\n{}",
        n.metadata.annotations,
        ng.logs()
    );
    assert!(annotation(&n, "nodegate.dev/opened-at").is_none());
    let ours: Vec<_> = env
        .events_for("held")
        .await
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("nodegate.dev/nodegate"))
        .map(|e| (e.reason, e.note))
        .collect();
    assert!(ours.is_empty(), "suspended, yet nodegate recorded {ours:?}");

    // Lifted by the file: the gate acts at once on the deadline it passed.
    write_config(&file, &format!("timeout: {TIMEOUT_S}s\nsuspend: false\n"));
    env.wait_open("held", Duration::from_secs(8), &[&ng]).await;
    assert_eq!(
        env.annotation("held", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("timeout")
    );
    wait_metric(&ng, &addr, RELOADS, 2.0).await;
    let (_, text) = get(&addr, "/metrics").await;
    assert_eq!(metric(&text, FAILURES), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_file_is_refused_and_a_valid_one_changes_the_expected_set() {
    let Setup {
        env,
        file,
        ng,
        addr,
        _dir,
    } = held_agent_with_config("reload-invalid", "timeout: 120s\n").await;
    wait_ready(&addr).await;
    env.create_node("waits", &[]).await;
    env.wait_pod("agent", "waits", false).await;

    // An invalid file: refused, counted, named on /readyz?verbose.
    write_config(&file, "timeout: soon\n");
    wait_metric(&ng, &addr, FAILURES, 1.0).await;
    let (_, text) = get(&addr, "/metrics").await;
    assert_eq!(metric(&text, LAST_OK), Some(0.0));
    assert_eq!(metric(&text, RELOADS), Some(0.0));
    let (status, body) = get(&addr, "/readyz?verbose").await;
    assert_eq!(
        status, 200,
        "a refused reload leaves the replica ready: {body}"
    );
    assert!(
        body.lines()
            .any(|l| l.starts_with("[!]config-reload ") && l.contains("\"soon\"")),
        "/readyz?verbose does not name the error:\n{body}"
    );
    assert!(ng.logs().contains("config reload refused"), "{}", ng.logs());

    // The settings in force keep working: a new node opens by ready.
    env.create_node("new", &[]).await;
    env.wait_pod("agent", "new", false).await;
    env.release("agent", "new").await;
    env.wait_open("new", Duration::from_secs(20), &[&ng]).await;
    assert_eq!(
        env.annotation("new", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );
    assert!(has_gate_taint(&env.node("waits").await));

    // A valid file that excludes the held agent: the node waiting only for
    // it opens by ready, without a restart.
    write_config(&file, &format!("timeout: 120s\nexclude: [{NS}/agent]\n"));
    env.wait_open("waits", Duration::from_secs(10), &[&ng])
        .await;
    assert_eq!(
        env.annotation("waits", "nodegate.dev/opened-by")
            .await
            .as_deref(),
        Some("ready")
    );
    // Scrapes within a second share one page (metrics::SCRAPE_REUSE): the
    // counter shows on the next page, not necessarily on this instant's.
    wait_metric(&ng, &addr, RELOADS, 1.0).await;
    let (_, text) = get(&addr, "/metrics").await;
    assert_eq!(metric(&text, LAST_OK), Some(1.0));
    let (_, body) = get(&addr, "/readyz?verbose").await;
    assert!(
        !body.contains("config-reload"),
        "an applied reload clears the error:\n{body}"
    );

    // SIGHUP re-reads the file at once, changed or not.
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &ng.pid().to_string()])
        .status()
        .expect("run kill");
    assert!(hup.success());
    wait_metric(&ng, &addr, RELOADS, 2.0).await;
    assert!(ng.logs().contains("SIGHUP: reading the config file again"));
}

/// Hardening: `taints: [a]` reloaded as `[b]`. A replica still
/// on the old file (ConfigMap updates reach pods up to about a minute
/// apart) keeps putting `a` on new nodes; the reloaded replica still
/// manages `a`, so such a node is gated and opened, not stranded; a node
/// with `b` opens as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_dropped_by_a_reload_is_still_removed() {
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::wait::await_condition;
    use support::fake_node;

    const OLD: &str = "nodegate.dev/a";
    const NEW: &str = "nodegate.dev/b";
    let env = Env::new("reload-retired-taint").await;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("config.yaml");
    write_config(&file, &format!("taints: [{OLD}:NoSchedule]\n"));
    let ng = Nodegate::start(
        &env.cluster,
        &["--config", file.to_str().expect("utf-8 path")],
    );
    let addr = ng.http_addr(Duration::from_secs(30));
    wait_ready(&addr).await;
    write_config(&file, &format!("taints: [{NEW}:NoSchedule]\n"));
    wait_metric(&ng, &addr, RELOADS, 1.0).await;

    for (name, key) in [("lagging", OLD), ("current", NEW)] {
        env.cluster
            .create_node(&fake_node(name, &[], &[(key, "", "NoSchedule")]))
            .await;
    }
    for (name, key) in [("lagging", OLD), ("current", NEW)] {
        let gone = |n: Option<&Node>| {
            n.is_some_and(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .is_some_and(|ts| ts.iter().any(|t| t.key == key))
            })
        };
        let opened = tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(env.nodes.clone(), name, gone),
        )
        .await;
        assert!(
            matches!(opened, Ok(Ok(_))),
            "node {name} still carries {key} ({opened:?}):\n{}",
            ng.logs()
        );
        assert_eq!(
            env.annotation(name, "nodegate.dev/opened-by")
                .await
                .as_deref(),
            Some("ready"),
            "{name}"
        );
    }
    assert!(
        ng.logs().contains("no longer configured"),
        "the reload names the retired taint:\n{}",
        ng.logs()
    );
}

/// The switches on the real control plane (semantics.md §6.6): a node
/// annotated `nodegate.dev/open: "true"` opens at once, whatever its members,
/// and loses the annotation; a node annotated `nodegate.dev/suspend: "true"`
/// is not written while its deadline passes, and opens as soon as the
/// annotation goes.
mod switches {
    use std::time::{Duration, Instant};

    use kube::api::{Patch, PatchParams};
    use serde_json::json;

    use super::support::gate::{DsSpec, Env, annotation, gated_node, has_gate_taint};
    use super::support::{Nodegate, wait_for};

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
        // The Event follows the patch's answer: wait for it.
        wait_for(
            "the manual opening's GateOpened Event",
            Duration::from_secs(10),
            || async {
                let notes: Vec<String> = env
                    .events_for("open-me")
                    .await
                    .into_iter()
                    .filter_map(|e| e.note)
                    .collect();
                notes
                    .iter()
                    .any(|n| n.starts_with("opened on request"))
                    .then_some(())
                    .ok_or(format!("{notes:?}"))
            },
        )
        .await;

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
}
