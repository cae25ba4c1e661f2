//! No grant without a bound, by construction (docs/operations.md, "Every
//! write nodegate can make"): every write verb deploy/ grants — the
//! kustomize base with every component, the chart with every feature on —
//! has a row in that table, a bounding admission policy that ships in the
//! same rendering (or a written reason why none can exist), and a named
//! refusal test that runs with the ServiceAccount's own token. Needs no
//! cluster.

use super::*;
use std::collections::BTreeSet;

/// The verbs that change something; get, list and watch only read.
const WRITES: &[&str] = &[
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "escalate",
    "bind",
    "impersonate",
    "approve",
    "sign",
    "*",
];

/// One row of the table.
struct Row {
    resource: String,
    verb: String,
    subresource: String,
    bound: String,
    tests: Vec<String>,
}

/// The rows of the table under "### Every write nodegate can make".
fn table() -> Vec<Row> {
    let text = std::fs::read_to_string(repo_root().join("docs/operations.md"))
        .expect("docs/operations.md");
    let section = text
        .split("\n### Every write nodegate can make\n")
        .nth(1)
        .expect("docs/operations.md has a section \"Every write nodegate can make\"");
    let section = section.split("\n#").next().unwrap_or(section);
    let ticked = |cell: &str| -> Vec<String> {
        cell.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 7, "a row has 7 cells: {l}");
            let one = |c: &str| ticked(c).into_iter().next().unwrap_or_default();
            Row {
                resource: one(cells[0]),
                verb: one(cells[1]),
                // `—`: the resource itself.
                subresource: one(cells[2]).replace('—', ""),
                bound: cells[5].to_string(),
                tests: ticked(cells[6]),
            }
        })
        .collect()
}

/// Every (resource, verb, subresource) deploy/ grants a write on, in `objs`,
/// with where it comes from.
fn granted_writes(objs: &[Value], what: &str) -> BTreeSet<(String, String, String, String)> {
    let mut out = BTreeSet::new();
    for o in objs
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        let strs = |v: &Value| -> Vec<String> {
            v.as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        for rule in o["rules"].as_array().into_iter().flatten() {
            for group in strs(&rule["apiGroups"]) {
                for resource in strs(&rule["resources"]) {
                    for verb in strs(&rule["verbs"]) {
                        if !WRITES.contains(&verb.as_str()) {
                            continue;
                        }
                        let (name, sub) = resource.split_once('/').unwrap_or((&resource, ""));
                        let shown = if group.is_empty() {
                            name.to_string()
                        } else {
                            format!("{name}.{group}")
                        };
                        out.insert((
                            shown,
                            verb,
                            sub.to_string(),
                            format!("{what}: {} {}", o["kind"], o["metadata"]["name"]),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// The body of the test function `path` (binary::module::name) names, and
/// the file it is in.
fn test_file(path: &str) -> Option<(PathBuf, String)> {
    let parts: Vec<&str> = path.split("::").collect();
    let (binary, name) = (parts.first()?, parts.last()?);
    let tests = repo_root().join("tests");
    let mut files = vec![tests.join(format!("{binary}.rs"))];
    if let Ok(dir) = std::fs::read_dir(tests.join(binary)) {
        files.extend(
            dir.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "rs")),
        );
    }
    files.into_iter().find_map(|f| {
        let text = std::fs::read_to_string(&f).ok()?;
        text.contains(&format!("fn {name}(")).then_some((f, text))
    })
}

#[test]
fn every_granted_write_has_a_row_a_bound_and_a_refusal_test() {
    let kz = super::bounds::base_with(&[
        "webhook",
        "canary",
        "node-condition",
        "replace",
        "dra-drivers",
        "dry-run",
        "networkpolicy",
        "servicemonitor",
    ]);
    let chart = objects(&helm_template(&[
        "--set",
        "admission=webhook,config.canary.enabled=true,config.nodeCondition=true,config.onTimeout=replace",
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
        "--set-json",
        r#"config.draDrivers=[{"driver":"gpu.example.com"}]"#,
    ]));
    let policies: BTreeSet<String> = kz
        .iter()
        .chain(&chart)
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicy")
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let rows = table();
    assert!(!rows.is_empty(), "the table has no rows");

    let mut problems = Vec::new();
    // The admission policy mode (the base as shipped, the chart's default
    // where the API server serves the policy) grants what the webhook mode
    // above takes away: the policy's parameters.
    let kz_policy = super::bounds::base_with(&[]);
    let chart_policy = objects(&helm_template(&[
        "--set",
        "admission=policy",
        "--api-versions",
        "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
        "--api-versions",
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    ]));
    let mut grants = granted_writes(&kz, "kustomize base + every component");
    grants.extend(granted_writes(&chart, "helm chart, every feature on"));
    grants.extend(granted_writes(&kz_policy, "kustomize base"));
    grants.extend(granted_writes(
        &chart_policy,
        "helm chart, admission=policy",
    ));
    for (resource, verb, sub, from) in &grants {
        if verb == "*" {
            problems.push(format!("{from} grants every verb on {resource}"));
            continue;
        }
        let Some(row) = rows
            .iter()
            .find(|r| &r.resource == resource && &r.verb == verb && &r.subresource == sub)
        else {
            problems.push(format!(
                "{from} grants {verb} {resource}{}: no row in the table",
                if sub.is_empty() {
                    String::new()
                } else {
                    format!("/{sub}")
                }
            ));
            continue;
        };
        let bound_policies: Vec<&str> = row
            .bound
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|p| p.starts_with("nodegate-"))
            .collect();
        let reasoned = row.bound.starts_with("none: ") && row.bound.len() > 40;
        if bound_policies.is_empty() && !reasoned {
            problems.push(format!(
                "{verb} {resource}: neither a bounding policy nor a reason why none can exist ({:?})",
                row.bound
            ));
        }
        for p in &bound_policies {
            if !policies.contains(*p) {
                problems.push(format!("{verb} {resource}: the policy {p} is not shipped"));
            }
        }
        if row.tests.is_empty() {
            problems.push(format!("{verb} {resource}: no refusal test named"));
        }
        for t in &row.tests {
            match test_file(t) {
                None => problems.push(format!("{verb} {resource}: no test function {t}")),
                Some((file, text)) => {
                    if !(text.contains("sa_token(") || text.contains("token_kubeconfig(")) {
                        problems.push(format!(
                            "{verb} {resource}: {t} ({}) does not use the ServiceAccount's own token",
                            file.display()
                        ));
                    }
                }
            }
        }
    }
    // And no row for a write nothing grants any more.
    for r in &rows {
        if !grants
            .iter()
            .any(|(res, v, s, _)| res == &r.resource && v == &r.verb && s == &r.subresource)
        {
            problems.push(format!(
                "row {} {} {:?}: nothing grants it",
                r.verb, r.resource, r.subresource
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/operations.md, \"Every write nodegate can make\":\n{}",
        problems.join("\n")
    );
}

/// The canary's bounds are the same both ways, and agree with the config
/// they bound: the kustomize component's policy and quota equal the chart's
/// (`config.canary.enabled`), and the component's policy names the image
/// its config.yaml configures and its quota the maxInFlight.
#[test]
fn the_canary_bounds_agree_with_the_config_and_the_chart() {
    let kz = super::bounds::base_with(&["canary"]);
    let chart = objects(&helm_template(&[
        "--api-versions",
        "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
        "--set",
        "config.canary.enabled=true",
    ]));
    for (kind, name) in [
        ("ValidatingAdmissionPolicy", "nodegate-canary-pods"),
        ("ValidatingAdmissionPolicyBinding", "nodegate-canary-pods"),
        ("ResourceQuota", "nodegate-canary"),
    ] {
        let pick = |objs: &[Value]| {
            objs.iter()
                .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
                .map(|o| (o["spec"].clone(), o["metadata"]["namespace"].clone()))
                .unwrap_or_else(|| panic!("no {kind} {name}"))
        };
        assert_eq!(
            pick(&kz),
            pick(&chart),
            "{kind} {name}: kustomize and Helm differ"
        );
    }
    let config = kz
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "nodegate-config")
        .and_then(|o| o["data"]["config.yaml"].as_str())
        .expect("the canary component's config.yaml");
    let config: Value = serde_saphyr::from_str(config).expect("config.yaml parses");
    let policy = kz
        .iter()
        .find(|o| {
            o["metadata"]["name"] == "nodegate-canary-pods"
                && o["kind"] == "ValidatingAdmissionPolicy"
        })
        .expect("the canary policy");
    let var = |name: &str| {
        policy["spec"]["variables"]
            .as_array()
            .and_then(|vs| vs.iter().find(|v| v["name"] == name))
            .and_then(|v| v["expression"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(
        var("image"),
        format!(
            "'{}'",
            config["canary"]["image"].as_str().expect("canary.image")
        ),
        "the policy's image is config.yaml's canary.image"
    );
    let quota = kz
        .iter()
        .find(|o| o["kind"] == "ResourceQuota")
        .expect("the canary quota");
    assert_eq!(
        quota["spec"]["hard"]["pods"].as_str(),
        Some(config["canary"]["maxInFlight"].to_string().as_str()),
        "the quota is config.yaml's canary.maxInFlight"
    );
    // The chart refuses canaries outside the release namespace.
    let refused = super::manifests::helm_refuses(&[
        "--set",
        "config.canary.enabled=true,config.canary.namespace=kube-system",
    ]);
    assert!(refused.contains("release namespace"), "{refused}");
}
