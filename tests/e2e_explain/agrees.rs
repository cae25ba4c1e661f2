//! `nodegate explain` and the running controller agree, member for member.
//!
//! On the new user's cluster of tests/explain_support (plus one DaemonSet the
//! configuration excludes), a real `nodegate run --dry-run` keeps every gated
//! node's gate live, and `/debug/nodes/NODE` serves what each gate holds.
//! For every gated node, explain's JSON and the gate's members taken just
//! before and just after it (and equal to each other, so nothing moved in
//! between) must name the same members, each expected or not alike, for the
//! same reason word for word, Ready alike, by the same pod, waiting on the
//! same thing. The cluster has every kind of member, and the test checks
//! that it does, so that agreeing cannot be vacuous; and the comparison is
//! shown to catch a disagreement.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::explain_support::*;
use super::support::{Nodegate, TestCluster, http_get, wait_for};

/// The gated nodes: the controller keeps a live gate for each.
const GATED: [&str; 3] = ["ng-gpu", "ng-arm", "ng-edge"];

/// `/debug/nodes/NODE`, once it answers with a gate that has seen every
/// DaemonSet and critical entry (at least `members` of them).
async fn gate_members(addr: &str, node: &str, members: usize) -> Value {
    let path = format!("/debug/nodes/{node}");
    wait_for(
        &format!("the gate of {node} with {members} members"),
        Duration::from_secs(60),
        || async {
            let (status, body) = http_get(addr, &path).await?;
            let v: Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
            let n = v["expected"].as_array().map_or(0, Vec::len);
            if status == 200 && n >= members {
                Ok(v)
            } else {
                Err(format!("{status}: {n} members: {body}"))
            }
        },
    )
    .await
}

/// One member as the gate serves it and as explain prints it, keyed alike
/// (`namespace/name`, `critical:NAME`).
fn gate_view(debug: &Value) -> BTreeMap<String, Value> {
    debug["expected"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            (
                m["member"].as_str().unwrap_or_default().to_string(),
                m.clone(),
            )
        })
        .collect()
}

fn explain_view(report: &Value) -> BTreeMap<String, Value> {
    let ds = report["daemonsets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let id = format!(
                "{}/{}",
                r["namespace"].as_str().unwrap_or_default(),
                r["name"].as_str().unwrap_or_default()
            );
            (id, r.clone())
        });
    let critical = report["critical_pods"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let id = format!("critical:{}", r["name"].as_str().unwrap_or_default());
            (id, r.clone())
        });
    ds.chain(critical).collect()
}

/// Every way explain's report of `node` differs from its gate; empty when
/// they agree.
fn disagreements(node: &str, report: &Value, debug: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let gate = gate_view(debug);
    let explain = explain_view(report);
    let (g, e): (BTreeSet<&String>, BTreeSet<&String>) =
        (gate.keys().collect(), explain.keys().collect());
    if g != e {
        out.push(format!("{node}: members differ: gate {g:?}, explain {e:?}"));
    }
    for (id, gm) in &gate {
        let Some(em) = explain.get(id) else { continue };
        let mut differ = |what: &str, gate: &Value, explain: &Value| {
            out.push(format!(
                "{node} {id}: {what}: gate {gate}, explain {explain}"
            ));
        };
        if gm["expected"] != em["expected"] {
            differ("expected", &gm["expected"], &em["expected"]);
        }
        let expected = gm["expected"] == json!(true);
        if !expected {
            // Word for word: both are the gate's reason.
            if gm["reason"] != em["reason"] {
                differ("reason", &gm["reason"], &em["reason"]);
            }
            if !em["ready"].is_null() {
                differ("ready of a member not expected", &Value::Null, &em["ready"]);
            }
            continue;
        }
        if gm["ready"] != em["ready"] {
            differ("ready", &gm["ready"], &em["ready"]);
        }
        if gm["ready"] == json!(true) {
            if gm["pod"] != em["pod"] {
                differ("pod", &gm["pod"], &em["pod"]);
            }
            continue;
        }
        // Waiting: explain says what the gate says, and may add what only a
        // full read shows (a container's reason, an unbound pod's scheduling
        // message) or, for minReadySeconds, how long so far.
        let gw = gm["waiting"].as_str().unwrap_or_default();
        let ew = em["waiting"].as_str().unwrap_or_default();
        let agrees = if let Some(at) = gw.find(", available at ") {
            ew.ends_with(&gw[at..]) && ew.starts_with(&gw[..gw.find(" Ready for ").unwrap_or(0)])
        } else if gw == "no pod yet" && em["pod"].is_string() {
            ew.starts_with(&format!(
                "pod {} is Pending, not scheduled",
                em["pod"].as_str().unwrap_or_default()
            ))
        } else {
            ew.starts_with(gw)
        };
        if !agrees {
            differ("waiting", &gm["waiting"], &em["waiting"]);
        }
    }
    for (what, g, e) in [
        (
            "expected count",
            &debug["expected_count"],
            &report["expected_members"],
        ),
        (
            "ready count",
            &debug["ready_count"],
            &report["ready_members"],
        ),
    ] {
        if g != e {
            out.push(format!("{node}: {what}: gate {g}, explain {e}"));
        }
    }
    out
}

/// The kinds of member a node's report shows, as "code" or
/// "expected/ready" words, for the coverage check.
fn kinds(report: &Value) -> BTreeSet<String> {
    explain_view(report)
        .iter()
        .map(|(id, r)| {
            let kind = if r["expected"] == json!(true) {
                match (&r["ready"], r["waiting"].as_str()) {
                    (Value::Bool(true), _) => "ready".to_string(),
                    (_, Some(w)) if w.contains("not scheduled") => "no pod yet".to_string(),
                    _ => "not ready".to_string(),
                }
            } else {
                r["reason_code"].as_str().unwrap_or_default().to_string()
            };
            if id.starts_with("critical:") {
                format!("critical {kind}")
            } else {
                kind
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_and_the_running_controller_agree_on_every_member() {
    let cluster = TestCluster::start("explain-agrees").await;
    // Tolerates everything, so it has a Ready pod on every node; the
    // configuration excludes it.
    let excluded = daemonset(
        "excluded",
        json!({"tolerations": [{"operator": "Exists"}]}),
        json!({}),
        false,
    );
    let excluded_pods: Vec<(&str, &str, bool)> = ["ng-cordoned", "ng-gpu", "ng-arm", "ng-edge"]
        .iter()
        .map(|n| ("excluded", *n, true))
        .collect();
    new_users_cluster(&cluster, &[excluded], &excluded_pods).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("nodegate.yaml");
    std::fs::write(&config, format!("{CONFIG}exclude:\n- {NS}/excluded\n")).expect("write config");
    let config_arg = config.to_str().expect("utf-8 path");
    let kc = cluster.kubeconfig.as_path();

    // Dry-run keeps every taint (and so every member) where it is; no
    // deadline keeps every gate live.
    let ng = Nodegate::start(
        &cluster,
        &["--config", config_arg, "--dry-run", "--timeout", "0"],
    );
    // The debug endpoints are on their own listener (--debug-addr).
    let addr = ng.debug_addr(Duration::from_secs(30));
    let members = daemonsets().len() + 1 + 2;

    let mut seen: BTreeSet<String> = BTreeSet::new();
    for node in GATED {
        let (report, debug) = same_moment(&addr, kc, &config, node, members).await;
        let problems = disagreements(node, &report, &debug);
        assert!(
            problems.is_empty(),
            "explain and the controller disagree on {node}:\n{}\nexplain: {report:#}\ngate: {:#}",
            problems.join("\n"),
            debug["expected"]
        );
        seen.extend(kinds(&report));

        // The comparison bites: one flipped answer is a disagreement.
        let mut tampered = report.clone();
        if let Some(row) = tampered["daemonsets"]
            .as_array_mut()
            .and_then(|rows| rows.iter_mut().find(|r| r["expected"] == json!(true)))
        {
            let ready = row["ready"] == json!(true);
            row["ready"] = json!(!ready);
        }
        assert!(
            !disagreements(node, &tampered, &debug).is_empty(),
            "{node}: a flipped ready went unnoticed"
        );
    }

    let want = [
        "ready",
        "not ready",
        "no pod yet",
        "node_selector",
        "node_affinity",
        "untolerated_taint",
        "starts_after_gate",
        "excluded_by_name",
        "ignore_annotation",
        "critical ready",
        "critical not ready",
        "critical node_selector",
    ];
    let missing: Vec<&str> = want
        .iter()
        .copied()
        .filter(|k| !seen.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "no member of kind {missing:?}; saw {seen:?}"
    );

    // The node that is not gated has no gate; explain still answers for it.
    let (status, _) = http_get(&addr, "/debug/nodes/ng-cordoned")
        .await
        .expect("GET /debug/nodes/ng-cordoned");
    assert_eq!(status, 404);
    assert_eq!(explain_json(kc, &config, "ng-cordoned")["gated"], false);
}

/// Explain's report of `node` and the gate's view of it at about the same
/// moment: the gate read just before and just after explain must be equal.
async fn same_moment(
    addr: &str,
    kc: &Path,
    config: &Path,
    node: &str,
    members: usize,
) -> (Value, Value) {
    let mut last = String::new();
    for _ in 0..10 {
        let before = gate_members(addr, node, members).await;
        let report = explain_json(kc, config, node);
        let after = gate_members(addr, node, members).await;
        if before["expected"] == after["expected"] {
            return (report, after);
        }
        last = format!("{:#}\n{:#}", before["expected"], after["expected"]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("the gate of {node} never held still around an explain:\n{last}");
}
