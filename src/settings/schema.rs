//! The Helm chart's values schema (deploy/helm/nodegate/values.schema.json),
//! rendered from the settings table: each setting's Helm value gets the
//! shape its flag's value name says (`DURATION`, `N|P%`, ...) and the enums
//! clap knows, the config file's own keys their YAML shape, the chart's own
//! values theirs (`chart`). Every object refuses unknown keys, so a typo such
//! as `config.timout` fails `helm template`/`helm install` naming it.
//!
//! `cargo test settings::schema` fails when the file in the chart differs
//! from what this renders; `NODEGATE_BLESS=1` rewrites it.
//!
//! Hand-written rather than derived with schemars (not in Cargo.lock): the
//! shapes come from the value names the table already declares, and the
//! patterns mirror the parsers the binary runs (humantime durations,
//! `ManagedTaint`, the kubectl selector syntax); the binary stays the final
//! judge of what the schema cannot express.

use clap::Args as _;
use serde_json::{Value, json};

use super::config::{MAX_WORKER_THREADS, MIN_KUBE_QPS};
use super::define::{Setting, Takes};
use super::table::{GateFlags, RunFlags, definitions};

/// A DNS-1123 label (a namespace).
const LABEL: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
/// A label or annotation key: an optional DNS subdomain prefix and a name.
const KEY: &str = r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?";
/// A DNS subdomain (a DRA driver's name; its length is checked apart).
const SUBDOMAIN: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
/// A qualified name with a domain prefix (an extended resource's name).
const PREFIXED_KEY: &str = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?";
/// A label value (possibly empty).
const VALUE: &str = "([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?";
/// The units humantime (and so every DURATION flag) reads.
const UNITS: &str = "nsec|ns|usec|us|µs|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|w|months|month|M|years|year|y";

/// A budget: a count or a percentage up to 100 %, never 0 (the binary
/// refuses 0 and 0 %: it would mean 1).
const BUDGET: &str = r"^\s*([1-9][0-9]*|([1-9]|[1-9][0-9]|100)\s*%)\s*$";

/// A duration as every DURATION flag reads it: humantime's, or a bare
/// number of seconds.
fn duration_pattern() -> String {
    format!(r"^\s*([0-9]+|([0-9]+(\.[0-9]+)?\s*({UNITS})\s*)+)\s*$")
}

/// A decimal written out, of at least MIN_KUBE_QPS (0.001: a non-zero
/// digit among the first three decimals); tests/e2e_deploy checks it
/// against the binary.
const QPS: &str = r"^\s*([1-9][0-9]*(\.[0-9]*)?|0?\.(00[1-9]|0[1-9]|[1-9])[0-9]*)\s*$";

fn taint_pattern() -> String {
    format!("^{KEY}(:(NoSchedule|NoExecute))?$")
}

/// kubectl's label selector syntax (`a=b,c!=d,e in (f,g),!h,i`), or empty.
fn selector_pattern() -> String {
    let set = format!(r"\(\s*{VALUE}(\s*,\s*{VALUE})*\s*\)");
    let req = format!(
        r"(!\s*{KEY}|{KEY}(\s*(=|==|!=)\s*{VALUE}|\s+(in|notin)\s*{set}|\s*(<|>)\s*[0-9]+)?)"
    );
    format!(r"^\s*({req}(\s*,\s*{req})*)?\s*$")
}

fn string(pattern: String, what: &str) -> Value {
    json!({"type": "string", "pattern": pattern, "description": what})
}

/// The schema of one value a flag takes, by its value name.
fn by_value_name(s: &Setting, name: &str, enums: &[String]) -> Value {
    let optional = s.takes == Takes::One && s.default.is_none();
    let empty_or = |p: String| {
        if optional { format!("^$|{p}") } else { p }
    };
    match name {
        "DURATION" => json!({
            "type": ["string", "integer"],
            "pattern": duration_pattern(),
            "minimum": 0,
            "description": "a duration such as 90s, 2m or 1h30m; a bare number is seconds",
        }),
        "N|P%" => json!({
            "type": ["string", "integer"],
            "pattern": BUDGET,
            "minimum": 1,
            "description": "a count or a percentage up to 100%, not 0 (0 would mean 1)",
        }),
        "KEY[:EFFECT]" => string(
            taint_pattern(),
            "a taint KEY[:EFFECT], KEY a qualified name, EFFECT NoSchedule or NoExecute",
        ),
        "KEY|PREFIX*" => string(
            r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9_./])?\*?$".into(),
            "a taint key, or a key prefix ending in *",
        ),
        "SELECTOR" => string(
            empty_or(selector_pattern()),
            "a label selector in kubectl syntax, e.g. 'pool in (a,b),!spot'",
        ),
        "NAME[,NAME]" => {
            let one = nodegate_core::rules::startup::Autoscaler::ALL
                .map(|a| a.as_str())
                .join("|");
            string(
                format!(r"^\s*({one})(\s*,\s*({one}))*\s*$"),
                "autoscaler presets, comma-separated: auto, karpenter, cluster-autoscaler, gke, aks, eks or none",
            )
        }
        "SELECTOR=KEY[:EFFECT]" => {
            let bare = |p: String| p.trim_start_matches('^').trim_end_matches('$').to_string();
            let (selector, taint) = (bare(selector_pattern()), bare(taint_pattern()));
            string(
                format!(r"^{selector}=\s*{taint}\s*$"),
                "SELECTOR=KEY[:EFFECT]: a label selector in kubectl syntax (empty: every node), then the taint",
            )
        }
        "NAMESPACE/NAME" => string(
            format!(r"^{LABEL}/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
            "NAMESPACE/NAME",
        ),
        "NAMESPACE" | "NAMESPACE[,NAMESPACE]" => {
            string(empty_or(format!("^{LABEL}$")), "a namespace")
        }
        "N" => count(s.key),
        // `helm --set` leaves a decimal a string: both, at least MIN_KUBE_QPS.
        "QPS" => json!({
            "type": ["number", "string"],
            "minimum": MIN_KUBE_QPS,
            "pattern": QPS,
            "description": format!("requests per second, at least {MIN_KUBE_QPS}"),
        }),
        "LEVEL" => {
            let level = "(off|error|warn|warning|info|debug|trace)";
            let one = format!(r"({level}|[A-Za-z0-9_:.-]+\s*=\s*{level})");
            string(
                format!(r"^\s*{one}(\s*,\s*{one})*\s*$"),
                "a log level: off, error, warn (or warning), info, debug or trace; or TARGET=LEVEL directives, comma-separated",
            )
        }
        "ACTION" | "FORMAT" if !enums.is_empty() => json!({"enum": enums}),
        _ => json!({"type": "string"}),
    }
}

/// A count's bounds, as the binary checks them.
fn count(key: &str) -> Value {
    let mut schema = json!({"type": "integer", "minimum": minimum(key)});
    if key == "workerThreads" {
        schema["maximum"] = json!(MAX_WORKER_THREADS);
    }
    schema
}

/// The least count a setting accepts (the binary refuses 0 for these).
fn minimum(key: &str) -> u32 {
    match key {
        "maxConcurrentPatches" | "kubeBurst" | "kuredMaxHolders" => 1,
        _ => 0,
    }
}

/// The values clap accepts for a flag, where it knows them.
fn possible_values(flag: &str) -> Vec<String> {
    let cmd = RunFlags::augment_args(GateFlags::augment_args(clap::Command::new("nodegate")));
    cmd.get_arguments()
        .filter(|a| a.get_long() == Some(flag))
        .flat_map(|a| a.get_possible_values())
        .map(|v| v.get_name().to_string())
        .collect()
}

fn setting_schema(s: &Setting) -> Value {
    match (s.takes, s.value) {
        (Takes::Switch, _) => json!({"type": "boolean"}),
        (Takes::Many, Some(name)) => json!({"type": "array", "items": by_value_name(s, name, &[])}),
        (_, Some(name)) => by_value_name(s, name, &possible_values(s.flag.unwrap_or(""))),
        (_, None) => file_only(s.key),
    }
}

fn label_selector() -> Value {
    let mut selector = closed(json!({
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array", "items": object(&["key", "operator"], json!({
            "key": {"type": "string", "pattern": format!("^{KEY}$")},
            "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
            "values": {"type": "array", "items": {"type": "string"}},
        }))},
    }));
    selector["description"] = json!("a LabelSelector: matchLabels and matchExpressions");
    selector
}

/// A node selector as the config file takes it: a LabelSelector or a
/// string in kubectl syntax (the binary says which a key accepts).
fn node_selector() -> Value {
    json!({"oneOf": [label_selector(), {"type": "string", "pattern": selector_pattern()}]})
}

fn object(required: &[&str], properties: Value) -> Value {
    let mut object = closed(properties);
    object["required"] = json!(required);
    object
}

/// `canary`: one object; every value but `enabled` may be left empty (the
/// binary's default).
fn canary() -> Value {
    let or_null = |t: &str| json!({"type": [t, "null"]});
    object(
        &[],
        json!({
            "enabled": {"type": "boolean"},
            "image": or_null("string"),
            "imagePullPolicy": {"enum": ["Always", "IfNotPresent", "Never", "", null]},
            "namespace": {"type": ["string", "null"], "pattern": format!("^({LABEL})?$")},
            "readinessProbe": or_null("object"),
            "resources": or_null("object"),
            "maxInFlight": {"type": ["integer", "null"], "minimum": 1},
            "priorityClassName": or_null("string"),
        }),
    )
}

/// The config file's own keys, as structured YAML.
fn file_only(key: &str) -> Value {
    let duration = json!({"type": "string", "pattern": duration_pattern()});
    let item = match key {
        "suspend" => return json!({"type": "boolean"}),
        "canary" => return canary(),
        "criticalPods" => object(
            &["name", "namespace", "selector"],
            json!({
                "name": {"type": "string", "minLength": 1},
                "namespace": {"type": "string", "pattern": format!("^{LABEL}$")},
                "selector": label_selector(),
                "nodeSelector": node_selector(),
            }),
        ),
        "criticalConditions" => object(
            &["type", "status"],
            json!({
                "type": {"type": "string", "minLength": 1},
                "status": {"type": "string", "minLength": 1},
                "nodeSelector": node_selector(),
            }),
        ),
        "criticalResources" => object(
            &["resource"],
            json!({
                "resource": {"type": "string", "pattern": format!("^{PREFIXED_KEY}$")},
                "nodeSelector": node_selector(),
            }),
        ),
        "draDrivers" => object(
            &["driver"],
            json!({
                "driver": {"type": "string", "maxLength": 63, "pattern": format!("^{SUBDOMAIN}$")},
                "nodeSelector": node_selector(),
            }),
        ),
        "conditionTaints" => object(
            &["name", "conditions", "taint"],
            json!({
                "name": {"type": "string", "minLength": 1},
                "conditions": {"type": "array", "minItems": 1, "items": object(
                    &["type", "status"],
                    json!({
                        "type": {"type": "string", "minLength": 1},
                        "status": {"type": "string", "minLength": 1},
                        "for": duration,
                        "matchAbsent": {"type": "boolean"},
                    }),
                )},
                "match": {"enum": ["allOf", "anyOf"]},
                "nodeSelector": node_selector(),
                "taint": object(&["key", "effect"], json!({
                    "key": {"type": "string", "pattern": format!("^{KEY}$")},
                    "value": {"type": "string", "pattern": format!("^{VALUE}$")},
                    "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                })),
                "remove": {"enum": ["whenCleared", "never"]},
                "maxUnavailable": {
                    "type": ["string", "integer"],
                    "pattern": BUDGET,
                    "minimum": 1,
                },
            }),
        ),
        _ => return json!({}),
    };
    json!({"type": "array", "items": item})
}

/// Puts `schema` at the dotted `path`, making each object on the way one
/// that refuses unknown keys.
fn insert(root: &mut Value, path: &str, schema: Value) {
    let mut at = root;
    for part in path.split('.') {
        let props = at
            .as_object_mut()
            .map(|o| {
                o.entry("type").or_insert(json!("object"));
                o.entry("additionalProperties").or_insert(json!(false));
                o.entry("properties").or_insert(json!({}))
            })
            .and_then(Value::as_object_mut);
        let Some(props) = props else { return };
        at = props.entry(part).or_insert(json!({}));
    }
    match (at.as_object_mut(), schema) {
        // An object already holding values keeps them under the new schema.
        (Some(o), Value::Object(new)) if o.contains_key("properties") => o.extend(new),
        (_, schema) => *at = schema,
    }
}

/// The whole values schema.
pub fn values_schema() -> Value {
    let mut root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "nodegate chart values (generated by src/settings/schema.rs; do not edit)",
    });
    for s in definitions() {
        if let Some(helm) = s.helm {
            insert(&mut root, helm, setting_schema(&s));
        }
    }
    for (path, schema) in chart::chart_values() {
        insert(&mut root, path, schema);
    }
    explain_patterns(&mut root);
    root
}

/// Every pattern with a description becomes `anyOf: [{const: DESCRIPTION,
/// maxLength: 0}, {not: {not: {pattern}}}]`. The first branch can never
/// match (a non-empty constant of length 0), so nothing more is accepted,
/// but Helm then prints the description ("value must be 'a duration such
/// as …'"), first; the pattern sits under a double `not`, which accepts
/// exactly what it does but whose failure Helm reports as "'not' failed"
/// instead of printing the raw regex.
fn explain_patterns(v: &mut Value) {
    match v {
        Value::Object(o) => {
            if let Some(what) = o.get("description").filter(|d| d.is_string()).cloned()
                && let Some(pattern) = o.remove("pattern")
            {
                o.insert(
                    "anyOf".into(),
                    json!([
                        {"const": what, "maxLength": 0},
                        {"not": {"not": {"pattern": pattern}}},
                    ]),
                );
            }
            o.values_mut().for_each(explain_patterns);
        }
        Value::Array(a) => a.iter_mut().for_each(explain_patterns),
        _ => {}
    }
}

/// The pattern of a value's schema, where [`explain_patterns`] put it.
pub fn pattern_of(schema: &Value) -> Option<&str> {
    schema["anyOf"][1]["not"]["not"]["pattern"]
        .as_str()
        .or_else(|| schema["pattern"].as_str())
}

/// The schema as the chart ships it.
pub fn render() -> String {
    let mut text = serde_json::to_string_pretty(&values_schema()).unwrap_or_default();
    text.push('\n');
    text
}

/// A map with the given keys and schemas, unknown keys refused.
fn closed(properties: Value) -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": properties})
}

mod chart;
#[cfg(test)]
mod tests;
