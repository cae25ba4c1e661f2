//! What a config file means: every key of the file with the value `nodegate
//! run` would run with, typed as the file writes it ([`of`]); `null` is off
//! or unset, which docs/configuration.md explains per key. No prose stands
//! in for a value.

use nodegate_core::rules::conditions::taints::ConditionTaintRule;
use serde_json::{Value, json};

use crate::settings::config::{RunSettings, entries, parse_duration};
use crate::settings::table::GateGiven;

/// A duration as a person writes it (`2m`, `0s`); as given if it does not
/// read as one (it was checked before this is called).
fn duration(given: &str) -> Value {
    parse_duration("", given).map_or_else(|_| Value::String(given.to_string()), text)
}

/// In the largest unit that says it exactly (`365d`, `2m`, `90s`), as the
/// flags take it back.
fn text(d: std::time::Duration) -> Value {
    if d.subsec_nanos() != 0 {
        return Value::String(humantime::format_duration(d).to_string().replace(' ', ""));
    }
    let secs = d.as_secs();
    let units = [(86_400, "d"), (3_600, "h"), (60, "m")];
    let largest = units
        .into_iter()
        .find(|(n, _)| secs > 0 && secs.is_multiple_of(*n));
    let (n, unit) = largest.unwrap_or((1, "s"));
    Value::String(format!("{}{unit}", secs / n))
}

/// `None`, or an empty string: `null`.
fn optional(s: Option<&str>) -> Value {
    json!(s.filter(|s| !s.trim().is_empty()))
}

/// A list given as repeated or comma-separated values, one entry each.
fn split(list: &[String]) -> Value {
    json!(entries(list).collect::<Vec<_>>())
}

fn selector(s: Option<&nodegate_core::rules::selector::LabelSelector>) -> Value {
    s.map_or(Value::Null, |s| Value::String(s.to_string()))
}

/// A whole number stays one (`50`, not `50.0`).
fn number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 1e15 {
        json!(f as i64)
    } else {
        json!(f)
    }
}

/// The settings, as a JSON object of every key (rendered as YAML for
/// people): each flag's setting as given, unless what it was read into
/// says it better (a duration in its largest unit, a selector as kubectl
/// writes it, `null` for off).
pub fn of(s: &RunSettings, gate: &GateGiven) -> Value {
    let g = &s.gate;
    let p = &g.placement;
    let r = &s.given;
    let mut m = gate.shown();
    m.extend(r.shown());
    let mut put = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    // The gate's keys (every command that reasons about placement).
    put("autoscalers", split(&gate.autoscalers));
    put(
        "transientTaints",
        p.transient_taints.iter().map(ToString::to_string).collect(),
    );
    put(
        "exclude",
        p.excluded
            .iter()
            .map(|(ns, n)| format!("{ns}/{n}"))
            .collect(),
    );
    put("excludeSelector", selector(p.exclude_selector.as_ref()));
    put("daemonsetNamespaces", json!(p.daemonset_namespaces));
    put("nodeSelector", selector(g.scope.node_selector.as_ref()));
    put("regateAfter", duration(&gate.regate_after));
    put("regateTimeout", duration(&gate.regate_timeout));
    put("rebootAnnouncements", split(&gate.reboot_announcements));
    put("rebootTimeout", duration(&gate.reboot_timeout));
    // `run`'s keys.
    put("timeout", s.timeout.map_or(json!("0s"), text));
    put(
        "scheduleTimeout",
        s.schedule_timeout.map_or(json!("0s"), text),
    );
    put("replaceInterval", duration(&r.replace_interval));
    put("kubeQps", number(s.given.kube_qps));
    put("kubeRequestTimeout", text(s.kube_request_timeout));
    put("logLevel", json!(s.log_level));
    put("leaseDuration", text(s.leader_election.lease_duration));
    put("renewDeadline", text(s.leader_election.renew_deadline));
    put("retryPeriod", text(s.leader_election.retry_period));
    put("httpAddr", json!(s.http_addr.to_string()));
    put("debugAddr", json!(s.debug_addr.map(|a| a.to_string())));
    for (key, given) in [
        ("leaseNamespace", &s.leader_election.lease_namespace),
        ("otlpEndpoint", &s.otlp_endpoint),
        ("admissionParams", &r.admission_params),
        ("webhookAddr", &r.webhook_addr),
        ("webhookCertDir", &r.webhook_cert_dir),
        ("webhookCertSecret", &r.webhook_cert_secret),
        ("webhookConfiguration", &r.webhook_configuration),
    ] {
        put(key, optional(given.as_deref()));
    }
    put("webhookCertValidity", duration(&r.webhook_cert_validity));
    put("newNodeWindow", text(s.net.window));
    // The file's own keys.
    put("suspend", json!(g.suspend));
    put(
        "criticalPods",
        g.critical
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "namespace": c.namespace,
                    "selector": c.selector.to_string(),
                    "nodeSelector": selector(c.node_selector.as_ref()),
                })
            })
            .collect(),
    );
    put(
        "criticalConditions",
        g.conditions
            .iter()
            .map(|c| {
                json!({
                    "type": c.type_,
                    "status": c.status,
                    "nodeSelector": selector(c.node_selector.as_ref()),
                })
            })
            .collect(),
    );
    put(
        "conditionTaints",
        g.condition_taints.iter().map(rule).collect(),
    );
    put(
        "criticalResources",
        g.resources
            .iter()
            .map(|r| {
                json!({
                    "resource": r.resource,
                    "nodeSelector": selector(r.node_selector.as_ref()),
                })
            })
            .collect(),
    );
    put(
        "draDrivers",
        g.dra_drivers
            .iter()
            .map(|d| {
                json!({
                    "driver": d.driver,
                    "nodeSelector": selector(d.node_selector.as_ref()),
                })
            })
            .collect(),
    );
    put(
        "canary",
        g.canary.as_ref().map_or(Value::Null, |c| {
            json!({
                "namespace": c.core.namespace,
                "maxInFlight": c.core.max_in_flight,
                "image": c.pod.image,
                "imagePullPolicy": c.pod.image_pull_policy,
                "priorityClassName": optional(c.pod.priority_class_name.as_deref()),
                "readinessProbe": serde_json::to_value(&c.pod.readiness_probe).unwrap_or(Value::Null),
                "resources": serde_json::to_value(&c.pod.resources).unwrap_or(Value::Null),
            })
        }),
    );
    Value::Object(m)
}

fn rule(r: &ConditionTaintRule) -> Value {
    json!({
        "name": r.name,
        "match": r.match_mode,
        "conditions": r.conditions.iter().map(|c| json!({
            "type": c.type_,
            "status": c.status.as_str(),
            "for": c.for_.map_or(Value::Null, text),
            "matchAbsent": c.match_absent,
        })).collect::<Vec<_>>(),
        "nodeSelector": selector(r.node_selector.as_ref()),
        "taint": r.taint.to_string(),
        "remove": r.remove,
        "maxUnavailable": r.budget().map_or(Value::Null, |m| json!(m.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::cli::RunArgs;
    use crate::settings::config::{FileConfig, run_settings_from};

    /// Every key the settings table defines is in the output, and nothing
    /// else: a key added to the table and not here fails.
    #[test]
    fn every_key_of_the_table_is_shown() {
        let settings = run_settings_from(&RunArgs::default(), FileConfig::default());
        let Ok(settings) = settings else {
            panic!("defaults: {settings:?}");
        };
        let gate = GateGiven::defaults();
        let shown = of(&settings, &gate);
        let shown: std::collections::BTreeSet<&str> = shown
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let defined: std::collections::BTreeSet<&str> = crate::settings::table::definitions()
            .iter()
            .map(|d| d.key)
            .collect();
        assert_eq!(shown, defined);
        let text = serde_json::to_string(&of(&settings, &gate)).unwrap_or_default();
        assert!(
            !text.contains("(every") && !text.contains("(off)"),
            "{text}"
        );
    }
}
