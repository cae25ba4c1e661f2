//! The PromQL that deploy/monitoring ships, read from the files themselves:
//! every alert of the PrometheusRule (and the plain rules file promtool and
//! Prometheus load, written from its `spec`), and every query of the Grafana
//! dashboard with the dashboard's variables substituted.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use support::repo_root;

use super::support;

pub const RULE_FILE: &str = "deploy/monitoring/prometheusrule.yaml";
pub const DASHBOARD_FILE: &str = "deploy/monitoring/grafana-dashboard.json";
pub const UNIT_TEST_DIR: &str = "deploy/monitoring/tests";
pub const OPERATIONS_DOC: &str = "docs/operations.md";
/// The name the promtool unit tests give their `rule_files`.
pub const RULES_FILE_NAME: &str = "nodegate.rules.yaml";

/// One PromQL expression and where it comes from, for messages.
#[derive(Debug, Clone)]
pub struct Expr {
    /// `alert NAME` or `dashboard panel "TITLE" (legend)`.
    pub origin: String,
    /// The alert's name, for alerts.
    pub alert: Option<String>,
    /// As written in the file.
    pub written: String,
    /// Ready for Prometheus's query API (dashboard variables substituted).
    pub query: String,
}

fn read(path: &str) -> String {
    let full = repo_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

/// The PrometheusRule custom resource, parsed.
fn rule_resource() -> Value {
    serde_saphyr::from_str(&read(RULE_FILE)).unwrap_or_else(|e| panic!("{RULE_FILE}: {e}"))
}

/// Writes the PrometheusRule's `spec` (its `groups`) as a plain Prometheus
/// rules file into `dir`, named [`RULES_FILE_NAME`], and returns its path.
pub fn write_rules_file(dir: &Path) -> std::path::PathBuf {
    let cr = rule_resource();
    assert_eq!(
        cr["kind"].as_str(),
        Some("PrometheusRule"),
        "{RULE_FILE} is not a PrometheusRule"
    );
    let spec = &cr["spec"];
    assert!(
        spec["groups"].as_array().is_some_and(|g| !g.is_empty()),
        "{RULE_FILE} has no spec.groups"
    );
    let text = serde_saphyr::to_string(spec).expect("a parsed YAML value serialises");
    let path = dir.join(RULES_FILE_NAME);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Every alerting (and recording) rule's expression, in file order.
pub fn rule_exprs() -> Vec<Expr> {
    let cr = rule_resource();
    let mut out = Vec::new();
    for group in cr["spec"]["groups"].as_array().into_iter().flatten() {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let name = rule["alert"]
                .as_str()
                .or_else(|| rule["record"].as_str())
                .unwrap_or_else(|| panic!("{RULE_FILE}: a rule with neither alert nor record"));
            let expr = rule["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{RULE_FILE}: rule {name} has no expr"))
                .trim()
                .to_string();
            out.push(Expr {
                origin: format!("alert {name}"),
                alert: rule["alert"].as_str().map(str::to_string),
                written: expr.clone(),
                query: expr,
            });
        }
    }
    assert!(!out.is_empty(), "{RULE_FILE} has no rules");
    out
}

/// What a dashboard variable stands for when the test queries Prometheus
/// itself, as Grafana would substitute it. `$__rate_interval` (and its
/// kin) becomes a window longer than the whole scenario, as on a dashboard
/// showing its last minutes: every event of the scenario is inside it.
const VARIABLES: &[(&str, &str)] = &[
    ("__rate_interval", "5m"),
    ("__interval", "5m"),
    ("__range", "5m"),
];

/// Replaces `$name` and `${name}` by the values of [`VARIABLES`]; a variable
/// it does not know fails the test, naming it (a new dashboard variable
/// needs a value here).
pub fn substitute(expr: &str, origin: &str) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = match after.strip_prefix('{') {
            Some(braced) => {
                let end = braced
                    .find('}')
                    .unwrap_or_else(|| panic!("{origin}: unclosed ${{ in {expr:?}"));
                (&braced[..end], end + 2)
            }
            None => {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], end)
            }
        };
        let value = VARIABLES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| {
                panic!(
                    "{origin}: dashboard variable ${name} in {expr:?} has no value in the test's \
                     VARIABLES (tests/e2e_monitoring/expressions.rs)"
                )
            });
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// Every target expression of every panel (rows' panels included), with the
/// dashboard's variables substituted.
pub fn dashboard_exprs() -> Vec<Expr> {
    let dashboard: Value = serde_json::from_str(&read(DASHBOARD_FILE))
        .unwrap_or_else(|e| panic!("{DASHBOARD_FILE}: {e}"));
    // Template variables other than the data source would need a value.
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = var["name"].as_str().unwrap_or("?");
        assert!(
            var["type"] == "datasource" || VARIABLES.iter().any(|(n, _)| *n == name),
            "{DASHBOARD_FILE}: template variable {name} has no value in the test's VARIABLES"
        );
    }
    let mut out = Vec::new();
    collect_panels(&dashboard["panels"], &mut out);
    assert!(!out.is_empty(), "{DASHBOARD_FILE} has no queries");
    out
}

fn collect_panels(panels: &Value, out: &mut Vec<Expr>) {
    for panel in panels.as_array().into_iter().flatten() {
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let Some(expr) = target["expr"].as_str() else {
                continue;
            };
            let legend = target["legendFormat"].as_str().unwrap_or("");
            let origin = format!("dashboard panel {title:?} ({legend})");
            out.push(Expr {
                query: substitute(expr, &origin),
                written: expr.to_string(),
                alert: None,
                origin,
            });
        }
        collect_panels(&panel["panels"], out);
    }
}

/// The example queries of the operations guide: every `promql` block, one
/// expression per line that starts at the margin (indented lines continue
/// it), each named by the comment above it.
pub fn docs_exprs() -> Vec<Expr> {
    let text = read(OPERATIONS_DOC);
    let mut out: Vec<Expr> = Vec::new();
    let mut in_block = false;
    let mut comment = String::new();
    let mut after_comment = false;
    for line in text.lines() {
        let continues_comment = std::mem::take(&mut after_comment);
        if !in_block {
            in_block = line.trim_end() == "```promql";
            continue;
        }
        if line.starts_with("```") {
            in_block = false;
        } else if let Some(c) = line.strip_prefix('#') {
            if !continues_comment {
                comment.clear();
            } else {
                comment.push(' ');
            }
            comment.push_str(c.trim());
            after_comment = true;
        } else if line.trim().is_empty() {
            continue;
        } else if line.starts_with(char::is_whitespace) && !out.is_empty() {
            let last = out.last_mut().expect("checked non-empty");
            last.written.push('\n');
            last.written.push_str(line);
            last.query = last.written.clone();
        } else {
            out.push(Expr {
                origin: format!("{OPERATIONS_DOC} example {comment:?}"),
                alert: None,
                written: line.to_string(),
                query: line.to_string(),
            });
        }
    }
    assert!(!out.is_empty(), "{OPERATIONS_DOC} has no promql examples");
    out
}

/// The metric names an expression reads that nodegate must export: every
/// identifier starting `nodegate_` outside quoted label values.
pub fn nodegate_metrics(expr: &str) -> Vec<String> {
    let mut unquoted = String::new();
    let mut quote = None;
    for c in expr.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' || c == '`' => quote = Some(c),
            None => unquoted.push(c),
        }
    }
    let mut out: Vec<String> = unquoted
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|word| word.starts_with("nodegate_"))
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// For each alert named in the promtool unit tests under [`UNIT_TEST_DIR`]:
/// (cases where it is expected to fire, cases where it must stay silent).
pub fn unit_test_coverage() -> BTreeMap<String, (usize, usize)> {
    let dir = repo_root().join(UNIT_TEST_DIR);
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for file in unit_test_files() {
        let path = dir.join(&file);
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let doc: Value =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for test in doc["tests"].as_array().into_iter().flatten() {
            for case in test["alert_rule_test"].as_array().into_iter().flatten() {
                let Some(name) = case["alertname"].as_str() else {
                    continue;
                };
                let fires = case["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
                let entry = out.entry(name.to_string()).or_default();
                if fires {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
        }
    }
    out
}

/// The promtool unit-test files (`*.yaml`) under [`UNIT_TEST_DIR`], by name.
pub fn unit_test_files() -> Vec<String> {
    let dir = repo_root().join(UNIT_TEST_DIR);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no promtool unit tests in {UNIT_TEST_DIR}"
    );
    files
}

#[test]
fn substitution_and_metric_names() {
    assert_eq!(
        substitute("rate(x[$__rate_interval]) + rate(y[${__interval}])", "t"),
        "rate(x[5m]) + rate(y[5m])"
    );
    assert_eq!(
        nodegate_metrics(
            "sum(rate(nodegate_a_total{x=\"nodegate_b\"}[1m])) / my_nodegate_c + nodegate_d"
        ),
        vec!["nodegate_a_total".to_string(), "nodegate_d".to_string()]
    );
}
