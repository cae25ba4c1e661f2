//! The dashboard and the alerts of deploy/monitoring, checked by a real
//! Prometheus (and promtool), built by `deploy/local/build --prometheus`.
//!
//! - `rules_check_and_unit_tests`: the PrometheusRule's `spec` written as a
//!   plain rules file passes `promtool check rules`, and the unit tests under
//!   deploy/monitoring/tests pass `promtool test rules`; every alert has a
//!   case where it fires and one where it stays silent.
//! - `dashboard_and_alerts_evaluate_on_real_prometheus`: the real nodegate
//!   gates three nodes on the real control plane (two open when Ready, one
//!   times out with `--on-timeout keep` and stays closed) while a real
//!   Prometheus on 127.0.0.1 scrapes its `/metrics` every second and
//!   evaluates the rules. Then every expression of the dashboard and of the
//!   PrometheusRule goes through Prometheus's query API: each must parse
//!   and return data (a number, not only NaN), or be listed in
//!   [`EXPECTED_EMPTY`] with the reason; those listed in [`EXPECTED_POSITIVE`]
//!   must show the scenario's timeout; every `nodegate_…` metric one reads
//!   must have been scraped (a misspelt name fails here even inside an
//!   expression expected to be empty); every rule evaluates without error;
//!   and the one alert this scenario calls for is the one firing. The
//!   example queries of docs/operations.md must parse and read only
//!   scraped metrics too (they need not return data).

use nodegate_e2e as support;

#[path = "e2e_monitoring/expressions.rs"]
mod expressions;
#[path = "e2e_monitoring/prometheus.rs"]
mod prometheus;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use support::gate::{DsSpec, Env, annotation, gated_node};
use support::{Nodegate, wait_for};

use expressions::{Expr, dashboard_exprs, docs_exprs, nodegate_metrics, rule_exprs};
use prometheus::{Prometheus, promtool, values};

/// Expressions that return nothing in this scenario, by origin, and why.
/// Each must really be empty (an alert that fires in a healthy scenario is a
/// bug too), and the metrics each reads must still have been scraped.
const EXPECTED_EMPTY: &[(&str, &str)] = &[
    ("alert NodegateNoLeader", "the one replica leads all along"),
    (
        "alert NodegateSeveralLeaders",
        "one replica runs, so at most one leader",
    ),
    (
        "alert NodegateNodeGatedTooLong",
        "node-c has been gated for well under ten minutes",
    ),
    ("alert NodegatePatchErrors", "no patch fails"),
    ("alert NodegateWatchRestarting", "no watch restarts"),
    (
        "alert NodegateConfigReloadFailing",
        "no config reload is refused",
    ),
    ("alert NodegateAbsent", "nodegate is being scraped"),
    (
        "alert NodegateRegateBudgetExhausted",
        "re-gating is on, but no node breaks",
    ),
    ("alert NodegateNodeRegatedTooLong", "no node is re-gated"),
];

/// Metrics with one series per node of some kind, which this scenario has
/// none of, so Prometheus cannot have scraped them (an empty family is not
/// exposed at all). Their exact names are proven by the exporter's unit tests
/// instead (src/serve/metrics/tests.rs); a rule that misspells one does not
/// match this list and fails as unscraped.
const DECLARED_ONLY: &[(&str, &str)] = &[(
    "nodegate_regated_node_age_seconds",
    "one series per re-gated node, and none is re-gated",
)];

/// Expressions that must count node-c's timeout: a value above zero. The
/// blocker's series is born at 1 when the deadline passes, so a bare
/// `increase()` would show 0 (or nothing) here.
const EXPECTED_POSITIVE: &[&str] = &[
    "dashboard panel \"Gates timed out (24h)\" (timed out)",
    "dashboard panel \"Timeouts by blocking member\" ({{namespace}}/{{name}})",
    "alert NodegateGatesTimingOut",
];

/// The alerts this scenario must set firing (and no others).
const EXPECTED_FIRING: &[&str] = &["NodegateGatesTimingOut"];

#[test]
fn rules_check_and_unit_tests() {
    let bin = prometheus::bin_dir();
    let dir = tempfile::tempdir().expect("temp dir");
    expressions::write_rules_file(dir.path());
    let checked = promtool(
        &bin,
        dir.path(),
        &["check", "rules", expressions::RULES_FILE_NAME],
    );
    let alerts: Vec<String> = rule_exprs().into_iter().filter_map(|e| e.alert).collect();
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(
        said.contains(&format!("{} rules found", alerts.len())),
        "promtool check rules should find {} rules: {said}",
        alerts.len()
    );

    let files = expressions::unit_test_files();
    let src = support::repo_root().join(expressions::UNIT_TEST_DIR);
    for f in &files {
        std::fs::copy(src.join(f), dir.path().join(f)).unwrap_or_else(|e| panic!("copy {f}: {e}"));
    }
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let tested = promtool(&bin, dir.path(), &args);
    eprintln!("{}", String::from_utf8_lossy(&tested.stdout).trim());

    let coverage = expressions::unit_test_coverage();
    let mut missing = Vec::new();
    for alert in &alerts {
        match coverage.get(alert) {
            Some((fires, silent)) if *fires > 0 && *silent > 0 => {}
            other => missing.push(format!(
                "{alert}: {} firing case(s), {} silent case(s)",
                other.map_or(0, |c| c.0),
                other.map_or(0, |c| c.1)
            )),
        }
    }
    for tested in coverage.keys() {
        if !alerts.contains(tested) {
            missing.push(format!(
                "{tested}: tested under {} but not an alert of {}",
                expressions::UNIT_TEST_DIR,
                expressions::RULE_FILE
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "every alert needs a promtool unit test where it fires and one where it stays silent:\n  {}",
        missing.join("\n  ")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_evaluate_on_real_prometheus() {
    let started = Instant::now();
    // Built (or found in the cache) while the cluster starts.
    let bin = tokio::task::spawn_blocking(prometheus::bin_dir);
    let env = Env::new("monitoring").await;
    let bin = bin.await.expect("the Prometheus build task");
    env.create_ds(DsSpec::new("cni")).await;
    env.create_ds(DsSpec {
        hold: true,
        node_selector: &[("pool", "slow")],
        ..DsSpec::new("csi")
    })
    .await;
    // A generous deadline for the nodes that open when Ready; node-c's gate
    // is dated back (gated-since) so that it times out a few seconds in.
    // Re-gating on (its gauges and counters exported), with a grace no
    // member of this scenario reaches.
    let ng = Nodegate::start(
        &env.cluster,
        &[
            "--timeout",
            "60s",
            "--on-timeout",
            "keep",
            "--regate-after",
            "1h",
        ],
    );
    let target = ng.http_addr(Duration::from_secs(60));
    let rules_dir = tempfile::tempdir().expect("temp dir");
    let rules = expressions::write_rules_file(rules_dir.path());
    let prom = Prometheus::start(&bin, &target, &rules).await;
    let within = Duration::from_secs(60);
    prom.wait_for_data("nodegate scraped", "nodegate_build_info", within)
        .await;

    // node-a (opens when cni is Ready) and node-c (waits for the held csi
    // until its deadline, then stays closed).
    env.create_node("node-a", &[]).await;
    let mut c = gated_node("node-c", &[("pool", "slow")]);
    let since = Timestamp::now() - jiff::SignedDuration::from_secs(52);
    c.metadata.annotations = Some(
        [("nodegate.dev/gated-since".to_string(), since.to_string())]
            .into_iter()
            .collect(),
    );
    env.cluster.create_node(&c).await;
    env.wait_open("node-a", within, &[&ng]).await;
    // Scraped after it opened, so node-b's opening (and its cni pod's time
    // to Ready) is an increase Prometheus sees, not a series born at 1.
    prom.wait_for_data(
        "node-a's opening scraped",
        "nodegate_gate_duration_seconds_count{outcome=\"ready\"} >= 1",
        within,
    )
    .await;
    env.create_node("node-b", &[]).await;
    env.wait_open("node-b", within, &[&ng]).await;
    for node in ["node-a", "node-b"] {
        assert_eq!(
            env.annotation(node, "nodegate.dev/opened-by")
                .await
                .as_deref(),
            Some("ready"),
            "{node} should open because cni is Ready:\n{}",
            ng.logs()
        );
    }
    wait_for("node-c timed out and kept", within, || async {
        let n = env.node("node-c").await;
        match annotation(&n, "nodegate.dev/timed-out") {
            Some(_) => Ok(()),
            None => Err(format!("annotations {:?}", n.metadata.annotations)),
        }
    })
    .await;
    for (what, promql) in [
        (
            "both openings scraped",
            "nodegate_gate_duration_seconds_count{outcome=\"ready\"} >= 2",
        ),
        (
            "cni's time to Ready on node-b scraped",
            "increase(nodegate_daemonset_ready_seconds_count{name=\"cni\"}[5m]) > 0",
        ),
        (
            "node-c's timeout scraped",
            "nodegate_timeout_blockers_total{name=\"csi\"} >= 1",
        ),
        (
            "node-c's gate age scraped",
            "nodegate_gate_age_seconds{node=\"node-c\"}",
        ),
    ] {
        prom.wait_for_data(what, promql, within).await;
    }
    eprintln!(
        "[e2e monitoring] scenario scraped after {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let exprs: Vec<Expr> = dashboard_exprs().into_iter().chain(rule_exprs()).collect();
    check_expected_lists(&exprs);
    let examples = docs_exprs();
    let mut failures = Vec::new();
    let mut scraped = BTreeSet::new();
    for e in &exprs {
        let empty_reason = EXPECTED_EMPTY
            .iter()
            .find(|(o, _)| *o == e.origin)
            .map(|(_, why)| *why);
        let verdict = match prom.query(&e.query).await {
            Err(error) => Some(format!("refused by Prometheus: {error}")),
            Ok(r) => {
                let v = values(&r);
                eprintln!(
                    "[e2e monitoring] {} series {:?} <- {}",
                    r.len(),
                    v,
                    e.origin
                );
                let positive = EXPECTED_POSITIVE.contains(&e.origin.as_str());
                match empty_reason {
                    Some(why) if !r.is_empty() => Some(format!(
                        "expected empty ({why}) but returned {} series: {r:?}",
                        r.len()
                    )),
                    Some(_) => None,
                    None if r.is_empty() => Some("returned no data".to_string()),
                    None if v.iter().all(|x| x.is_nan()) => {
                        Some(format!("returned only NaN: {r:?}"))
                    }
                    None if positive && !v.iter().any(|x| *x > 0.0) => Some(format!(
                        "should count node-c's timeout (a value above 0), returned {r:?}"
                    )),
                    None => None,
                }
            }
        };
        if let Some(v) = verdict {
            failures.push(format!("{}: {v}\n    {}", e.origin, e.query));
        }
        for name in nodegate_metrics(&e.query) {
            if scraped.contains(&name) {
                continue;
            }
            if DECLARED_ONLY.iter().any(|(m, _)| *m == name) {
                continue;
            }
            if has_series(&prom, &name).await {
                scraped.insert(name);
            } else {
                failures.push(format!(
                    "{}: reads {name}, which nodegate does not export (never scraped)\n    {}",
                    e.origin, e.written
                ));
            }
        }
    }
    for e in &examples {
        if let Err(error) = prom.query(&e.query).await {
            failures.push(format!(
                "{}: refused by Prometheus: {error}\n    {}",
                e.origin, e.query
            ));
        }
        for name in nodegate_metrics(&e.query) {
            if !scraped.contains(&name) && !has_series(&prom, &name).await {
                failures.push(format!(
                    "{}: reads {name}, which nodegate does not export\n    {}",
                    e.origin, e.written
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} expressions of deploy/monitoring and docs failed on the real Prometheus:\n  {}",
        failures.len(),
        exprs.len() + examples.len(),
        failures.join("\n  ")
    );

    check_rules_and_alerts(&prom).await;
    drop(prom);
    drop(ng);
    eprintln!(
        "[e2e monitoring] {} expressions and {} docs examples checked in {:.1}s",
        exprs.len(),
        examples.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Every entry of [`EXPECTED_EMPTY`] and [`EXPECTED_POSITIVE`] names an
/// expression that exists, so the lists cannot hide a renamed alert or
/// panel.
fn check_expected_lists(exprs: &[Expr]) {
    let listed = EXPECTED_EMPTY.iter().map(|(o, _)| *o);
    for origin in listed.chain(EXPECTED_POSITIVE.iter().copied()) {
        assert!(
            exprs.iter().any(|e| e.origin == origin),
            "the test lists {origin}, which is no expression of deploy/monitoring"
        );
    }
}

/// Prometheus has scraped at least one series of the metric `name`.
async fn has_series(prom: &Prometheus, name: &str) -> bool {
    prom.query(&format!("count({{__name__=\"{name}\"}})"))
        .await
        .is_ok_and(|r| !r.is_empty())
}

/// Prometheus evaluated every rule without error, and the alerts firing are
/// exactly [`EXPECTED_FIRING`].
async fn check_rules_and_alerts(prom: &Prometheus) {
    wait_for(
        "every rule evaluated, healthy, and only the expected alerts firing",
        Duration::from_secs(60),
        || async {
            let rules = prom.api("/api/v1/rules").await?;
            let mut problems = Vec::new();
            let mut firing = BTreeSet::new();
            for group in rules["data"]["groups"].as_array().into_iter().flatten() {
                for rule in group["rules"].as_array().into_iter().flatten() {
                    let name = rule["name"].as_str().unwrap_or("?");
                    if rule["health"] != "ok" {
                        problems.push(format!(
                            "{name}: health {} ({})",
                            rule["health"], rule["lastError"]
                        ));
                    }
                    if rule["state"] == "firing" {
                        firing.insert(name.to_string());
                    }
                }
            }
            let want: BTreeSet<String> = EXPECTED_FIRING.iter().map(|s| s.to_string()).collect();
            if firing != want {
                problems.push(format!("firing {firing:?}, expected {want:?}"));
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(problems.join("; "))
            }
        },
    )
    .await
}
