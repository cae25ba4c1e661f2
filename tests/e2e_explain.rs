//! `nodegate explain` end to end: the real binary against the real local
//! control plane (deploy/local), on a cluster set up the way a new user's
//! would look — a cordoned node, a GPU node, zone labels, an arm64 node, and
//! the usual mix of DaemonSets (tests/explain_support) — checking the answer
//! and the reason for every DaemonSet on every node; that the same binary
//! works as `kubectl nodegate`; and (`agrees`, below) that explain and the
//! running controller agree, member for member.

mod explain_support;
use nodegate_e2e as support;

use std::path::Path;

use explain_support::*;
use serde_json::{Value, json};
use support::TestCluster;

/// What one DaemonSet (or critical entry) must look like in a node's report.
struct Want {
    name: &'static str,
    expected: bool,
    /// `None`: not expected (JSON null).
    ready: Option<bool>,
    code: &'static str,
    /// Substrings of `reason` (not expected) or `waiting` (not Ready).
    says: &'static [&'static str],
}

const fn want(
    name: &'static str,
    expected: bool,
    ready: Option<bool>,
    code: &'static str,
    says: &'static [&'static str],
) -> Want {
    Want {
        name,
        expected,
        ready,
        code,
        says,
    }
}

fn check_members(node: &str, report: &Value, list: &str, wants: &[Want]) {
    let rows = report[list]
        .as_array()
        .unwrap_or_else(|| panic!("{node}: no {list} array in {report:#}"));
    for w in wants {
        let row = rows
            .iter()
            .find(|r| r["name"] == w.name)
            .unwrap_or_else(|| panic!("{node}: no {list} row {} in {report:#}", w.name));
        let ctx = format!("{node} {}: {row:#}", w.name);
        assert_eq!(row["namespace"], NS, "{ctx}");
        assert_eq!(row["expected"], w.expected, "{ctx}");
        assert_eq!(row["ready"], json!(w.ready), "{ctx}");
        assert_eq!(row["reason_code"], w.code, "{ctx}");
        let reason = row["reason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "{ctx}");
        let text = match w.ready {
            Some(false) => row["waiting"].as_str().unwrap_or_default(),
            _ => reason,
        };
        for s in w.says {
            assert!(text.contains(s), "{ctx}\nwant {s:?} in {text:?}");
        }
        match w.ready {
            Some(true) => {
                assert!(row["pod"].is_string(), "{ctx}");
                assert!(row["waiting"].is_null(), "{ctx}");
            }
            Some(false) => assert!(row["waiting"].is_string(), "{ctx}"),
            None => {
                assert!(row["pod"].is_null(), "{ctx}");
                assert!(row["waiting"].is_null(), "{ctx}");
            }
        }
    }
    let mut names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    if list == "daemonsets" {
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted, "{node}: daemonsets not sorted");
    }
    names.retain(|n| !wants.iter().any(|w| w.name == *n));
    assert!(names.is_empty(), "{node}: unchecked {list} rows {names:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_gives_the_right_answer_and_reason_for_every_daemonset_on_a_new_users_cluster() {
    let cluster = TestCluster::start("explain").await;
    new_users_cluster(&cluster, &[], &[]).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("nodegate.yaml");
    std::fs::write(&config, CONFIG).expect("write config");
    let kc = cluster.kubeconfig.as_path();

    for node in ["ng-cordoned", "ng-gpu", "ng-arm", "ng-edge"] {
        show_table(kc, &config, node);
    }

    // The cordoned node: not gated, and every DaemonSet pod tolerates the
    // cordon, so even the one that does not tolerate nodegate's taint runs.
    let r = explain_json(kc, &config, "ng-cordoned");
    assert_eq!(r["node"], "ng-cordoned");
    assert_eq!(r["gated"], false);
    assert_eq!(r["would_open"], false);
    assert!(
        r["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("not gated: the node carries no managed taint")),
        "{r:#}"
    );
    check_members(
        "ng-cordoned",
        &r,
        "daemonsets",
        &[
            want("after-gate", true, Some(true), "expected", &[]),
            want(
                "arm-only",
                false,
                None,
                "node_selector",
                &[
                    "kubernetes.io/arch=arm64",
                    "the node has kubernetes.io/arch=amd64",
                ],
            ),
            want("everywhere", true, Some(true), "expected", &[]),
            want("held", true, Some(false), "expected", &["is not Ready"]),
            want(
                "hungry",
                false,
                None,
                "node_selector",
                &["kubernetes.io/arch=arm64"],
            ),
            want(
                "ignored",
                false,
                None,
                "ignore_annotation",
                &["nodegate.dev/ignore"],
            ),
            want("no-gpu", true, Some(true), "expected", &[]),
            want(
                "patient",
                true,
                Some(false),
                "expected",
                &["Ready for", "of minReadySeconds 3600s"],
            ),
            want("zone-a", true, Some(true), "expected", &[]),
        ],
    );
    check_members(
        "ng-cordoned",
        &r,
        "critical_pods",
        &[
            want("agent-everywhere", true, Some(true), "expected", &[]),
            want(
                "arm-firmware",
                false,
                None,
                "node_selector",
                &["kubernetes.io/arch=arm64"],
            ),
        ],
    );
    assert!(strings(&r["taints"]["managed"]).is_empty(), "{r:#}");
    assert!(
        strings(&r["taints"]["other"]).contains(&format!("{UNSCHEDULABLE}:NoSchedule")),
        "{r:#}"
    );

    // The GPU node in zone b: gated; the GPU taint and the zone keep most
    // DaemonSets away, each for its own reason.
    let r = explain_json(kc, &config, "ng-gpu");
    assert_eq!(r["gated"], true);
    assert_eq!(r["would_open"], false);
    check_members(
        "ng-gpu",
        &r,
        "daemonsets",
        &[
            want(
                "after-gate",
                false,
                None,
                "untolerated_taint",
                &["nvidia.com/gpu=present:NoSchedule"],
            ),
            want(
                "arm-only",
                false,
                None,
                "node_selector",
                &["kubernetes.io/arch=arm64"],
            ),
            want("everywhere", true, Some(true), "expected", &[]),
            want("held", true, Some(false), "expected", &["is not Ready"]),
            want(
                "hungry",
                false,
                None,
                "node_selector",
                &["kubernetes.io/arch=arm64"],
            ),
            want("ignored", false, None, "ignore_annotation", &[]),
            want(
                "no-gpu",
                false,
                None,
                "untolerated_taint",
                &["nvidia.com/gpu=present:NoSchedule"],
            ),
            want(
                "patient",
                true,
                Some(false),
                "expected",
                &["of minReadySeconds 3600s"],
            ),
            want(
                "zone-a",
                false,
                None,
                "node_affinity",
                &["term 1", "topology.kubernetes.io/zone=b", "[\"a\"]"],
            ),
        ],
    );
    let zone_a = r["daemonsets"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["name"] == "zone-a"))
        .expect("zone-a row");
    assert_eq!(zone_a["node_affinity"][0]["term"], 1, "{zone_a:#}");
    assert_eq!(zone_a["node_affinity"][0]["matches"], false, "{zone_a:#}");
    assert_eq!(
        strings(&r["taints"]["managed"]),
        vec![format!("{GATE}:NoSchedule")]
    );
    assert!(
        strings(&r["taints"]["other"]).contains(&format!("{GPU}=present:NoSchedule")),
        "{r:#}"
    );
    let verdict = r["verdict"].as_str().unwrap_or_default();
    assert!(
        verdict.starts_with("closed: waiting for 2 of 4: infra/held (pod held-"),
        "{verdict}"
    );

    // The arm64 node in zone a: gated; the DaemonSet that does not tolerate
    // nodegate's taint would deadlock, so it is not waited for.
    let r = explain_json(kc, &config, "ng-arm");
    assert_eq!(r["gated"], true);
    assert_eq!(r["would_open"], false);
    check_members(
        "ng-arm",
        &r,
        "daemonsets",
        &[
            want(
                "after-gate",
                false,
                None,
                "starts_after_gate",
                &[
                    "starts after the gate opens",
                    "nodegate.dev/initializing:NoSchedule",
                ],
            ),
            want("arm-only", true, Some(true), "expected", &[]),
            want("everywhere", true, Some(true), "expected", &[]),
            want("held", true, Some(false), "expected", &["is not Ready"]),
            want(
                "hungry",
                true,
                Some(false),
                "expected",
                &["is Pending, not scheduled", "Insufficient cpu"],
            ),
            want("ignored", false, None, "ignore_annotation", &[]),
            want("no-gpu", true, Some(true), "expected", &[]),
            want(
                "patient",
                true,
                Some(false),
                "expected",
                &["of minReadySeconds 3600s"],
            ),
            want("zone-a", true, Some(true), "expected", &[]),
        ],
    );
    check_members(
        "ng-arm",
        &r,
        "critical_pods",
        &[
            want("agent-everywhere", true, Some(true), "expected", &[]),
            want(
                "arm-firmware",
                true,
                Some(false),
                "expected",
                &["no pod matching app=firmware in namespace infra"],
            ),
        ],
    );
    let hungry = r["daemonsets"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["name"] == "hungry"))
        .expect("hungry row");
    assert!(
        hungry["pod"]
            .as_str()
            .is_some_and(|p| p.starts_with("hungry-")),
        "{hungry:#}"
    );
    assert!(
        r["verdict"]
            .as_str()
            .is_some_and(|v| v.starts_with("closed: waiting for 4 of 9: ")),
        "{r:#}"
    );

    // The edge node: only the agent that tolerates everything belongs, and
    // it is Ready, so the gate would open now. The cloud provider's taint is
    // transient and does not count.
    let r = explain_json(kc, &config, "ng-edge");
    assert_eq!(r["gated"], true);
    assert_eq!(r["would_open"], true);
    assert_eq!(
        r["verdict"],
        "would open now: all 2 expected members are Ready"
    );
    check_members(
        "ng-edge",
        &r,
        "daemonsets",
        &[
            want(
                "after-gate",
                false,
                None,
                "untolerated_taint",
                &["dedicated=edge:NoExecute"],
            ),
            want("arm-only", false, None, "node_selector", &[]),
            want("everywhere", true, Some(true), "expected", &[]),
            want(
                "held",
                false,
                None,
                "untolerated_taint",
                &["dedicated=edge:NoExecute"],
            ),
            want("hungry", false, None, "node_selector", &[]),
            want("ignored", false, None, "ignore_annotation", &[]),
            want(
                "no-gpu",
                false,
                None,
                "untolerated_taint",
                &["dedicated=edge:NoExecute"],
            ),
            want(
                "patient",
                false,
                None,
                "untolerated_taint",
                &["dedicated=edge:NoExecute"],
            ),
            want(
                "zone-a",
                false,
                None,
                "node_affinity",
                &["topology.kubernetes.io/zone=c"],
            ),
        ],
    );
    // The node lifecycle controller may briefly add its own not-ready taints
    // (transient too) while kwok's heartbeat catches up.
    let transient = strings(&r["taints"]["transient"]);
    assert!(
        transient.contains(
            &"node.cloudprovider.kubernetes.io/uninitialized=true:NoSchedule".to_string()
        ),
        "{transient:?}"
    );
    assert_eq!(
        strings(&r["taints"]["other"]),
        vec!["dedicated=edge:NoExecute".to_string()]
    );

    // A node that does not exist: exit 1 and a message that says so.
    let out = explain(kc, &["ng-missing"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("node \"ng-missing\" not found"), "{stderr}");
    assert!(out.stdout.is_empty());

    // The same binary is a kubectl plugin: installed on PATH as
    // `kubectl-nodegate`, `kubectl nodegate explain NODE` answers exactly as
    // `nodegate explain NODE`.
    let plugins = tempfile::tempdir().expect("plugin dir");
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_nodegate"),
        plugins.path().join("kubectl-nodegate"),
    )
    .expect("install kubectl-nodegate");
    let bin = std::process::Command::new(support::local_script("build"))
        .arg("--print-dir")
        .output()
        .expect("deploy/local/build --print-dir");
    let kubectl =
        std::path::PathBuf::from(String::from_utf8_lossy(&bin.stdout).trim()).join("kubectl");
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let config_arg = config.display().to_string();
    let args = ["ng-edge", "-o", "json", "--config", config_arg.as_str()];
    let via_kubectl = std::process::Command::new(&kubectl)
        .args(["nodegate", "explain"])
        .args(args)
        .env("PATH", &path)
        .env("KUBECONFIG", kc)
        .output()
        .expect("run kubectl nodegate explain");
    assert!(
        via_kubectl.status.success(),
        "kubectl nodegate explain: {}",
        String::from_utf8_lossy(&via_kubectl.stderr)
    );
    let plugin: Value = serde_json::from_slice(&via_kubectl.stdout).expect("plugin JSON");
    let direct = explain_json(kc, &config, "ng-edge");
    // Each member's verdict (times in the texts may differ by a second).
    let members = |r: &Value| -> Vec<(Value, Value, Value)> {
        r["daemonsets"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|d| {
                        (
                            d["name"].clone(),
                            d["expected"].clone(),
                            d["reason_code"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(plugin["node"], "ng-edge");
    assert!(!members(&plugin).is_empty(), "{plugin:#}");
    assert_eq!(members(&plugin), members(&direct));
    assert_eq!(plugin["gated"], direct["gated"]);
}

#[test]
fn a_bad_flag_value_exits_2_and_names_the_value_before_touching_the_cluster() {
    // No cluster at all: the settings must be refused before any request.
    let nowhere = Path::new("/nonexistent/kubeconfig");
    let cases: &[(&[&str], &str)] = &[
        (&["n1", "--taint", "x:Bogus"], "x:Bogus"),
        (&["n1", "--exclude", "no-slash"], "no-slash"),
        (&["n1", "--exclude-selector", "a in (b"], "a in (b"),
        (
            &["n1", "--config", "/nonexistent/nodegate.yaml"],
            "/nonexistent/nodegate.yaml",
        ),
        // clap's own refusals share the status.
        (&["n1", "-o", "xml"], "xml"),
        (&[], "NODE"),
    ];
    for (args, needle) in cases {
        let out = explain(nowhere, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?} should name {needle:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

// Explain and the running controller agree, member for member (its own
// file: this one is long enough).
#[path = "e2e_explain/agrees.rs"]
mod agrees;
