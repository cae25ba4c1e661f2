//! The chart ships what the table renders; every value in values.yaml is
//! described and every described value is in values.yaml.

use std::path::PathBuf;

use serde_json::Value;

use super::*;

fn chart_file(name: &str) -> PathBuf {
    // Read when the test runs: the build cache is shared between clones,
    // so the compile-time path may name another clone.
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("deploy/helm/nodegate")
        .join(name)
}

/// Fails when deploy/helm/nodegate/values.schema.json is not what the
/// settings table renders; `NODEGATE_BLESS=1 cargo test settings::schema`
/// rewrites it.
#[test]
fn the_chart_ships_the_rendered_values_schema() {
    let path = chart_file("values.schema.json");
    let want = render();
    if std::env::var_os("NODEGATE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} differs from what src/settings/schema.rs renders from the settings table; \
         run NODEGATE_BLESS=1 cargo test settings::schema and commit the file",
        path.display()
    );
}

/// Walks values.yaml beside the schema: each key of a closed object must be
/// described, and each described key of a closed object must be in
/// values.yaml (no schema for a value the chart does not have).
fn walk(at: &str, values: &Value, schema: &Value, problems: &mut Vec<String>) {
    let (Some(vals), Some(props)) = (values.as_object(), schema["properties"].as_object()) else {
        return;
    };
    let closed = schema["additionalProperties"] == Value::Bool(false);
    for (k, v) in vals {
        match props.get(k) {
            Some(s) => walk(&format!("{at}{k}."), v, s, problems),
            None if closed => problems.push(format!("{at}{k}: in values.yaml, not in the schema")),
            None => {}
        }
    }
    for (k, s) in props {
        let retired = s["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("retired"));
        // An empty map in values.yaml ({}) is a structure left to fill.
        if closed && !vals.is_empty() && !vals.contains_key(k) && !retired && k != "global" {
            problems.push(format!("{at}{k}: in the schema, not in values.yaml"));
        }
    }
}

#[test]
fn every_value_is_described_and_every_description_is_a_value() {
    let text = std::fs::read_to_string(chart_file("values.yaml")).unwrap_or_default();
    let values: Value = serde_saphyr::from_str(&text).expect("values.yaml parses");
    let mut problems = Vec::new();
    walk("", &values, &values_schema(), &mut problems);
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The enums come from clap: the schema accepts exactly what the flag does.
#[test]
fn enums_are_the_flags_possible_values() {
    let schema = values_schema();
    let on_timeout = &schema["properties"]["config"]["properties"]["onTimeout"]["enum"];
    assert_eq!(on_timeout, &serde_json::json!(["open", "keep", "replace"]));
    let log_format = &schema["properties"]["config"]["properties"]["logFormat"]["enum"];
    assert_eq!(log_format, &serde_json::json!(["text", "json"]));
}

/// Issue 38: `resources` and `tolerations` are typed (a typo such as
/// `resources.requets` or a quantity `lots` is refused by `helm install`),
/// `--set image.tag=1` is taken, and `logLevel` takes levels only.
#[test]
fn resources_tolerations_tag_and_log_level_are_typed() {
    let schema = values_schema();
    let p = &schema["properties"];
    assert_eq!(p["resources"]["additionalProperties"], Value::Bool(false));
    let quantity = &p["resources"]["properties"]["requests"]["additionalProperties"];
    assert!(super::pattern_of(quantity).is_some(), "{quantity}");
    assert!(quantity["description"].is_string(), "{quantity}");
    let toleration = &p["tolerations"]["items"];
    assert_eq!(toleration["additionalProperties"], Value::Bool(false));
    assert!(toleration["properties"]["effect"]["enum"].is_array());
    assert_eq!(
        p["image"]["properties"]["tag"]["type"],
        serde_json::json!(["string", "integer"])
    );
    let level = super::pattern_of(&p["config"]["properties"]["logLevel"]).unwrap_or_default();
    assert!(
        level.contains("warning") && level.starts_with('^'),
        "{level}"
    );
    // A duration may be a bare number of seconds, as on the command line.
    let timeout = &p["config"]["properties"]["timeout"];
    assert!(timeout.get("maximum").is_none(), "{timeout}");
}

/// Issue 38: a value refused by a pattern is explained in words: every
/// described pattern sits after a branch that names the description (and
/// can never match), under a double `not`, so Helm prints the description
/// and not the regex;
/// every flag's value with a pattern (durations, taints, selectors,
/// budgets) is described.
#[test]
fn every_described_pattern_is_shown_with_its_description() {
    fn walk(v: &Value, at: &str, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if o.contains_key("pattern") && o.contains_key("description") {
                    out.push(format!("{at}: the pattern's description is not shown"));
                }
                let explained = o.get("anyOf").and_then(Value::as_array).filter(|any| {
                    any.len() == 2
                        && any[0].get("const").is_some()
                        && any[1]["not"]["not"].get("pattern").is_some()
                });
                if let Some(any) = explained {
                    if any[0]["const"].as_str() != o.get("description").and_then(Value::as_str) {
                        out.push(format!("{at}: the branch does not say the description"));
                    }
                    if any[0]["maxLength"] != serde_json::json!(0) {
                        out.push(format!("{at}: the description branch could match"));
                    }
                    // Only the pattern under the double `not`: anything
                    // else there would be negated too.
                    if any[1]["not"]["not"].as_object().map(|n| n.len()) != Some(1)
                        || any[1].as_object().map(|n| n.len()) != Some(1)
                        || any[1]["not"].as_object().map(|n| n.len()) != Some(1)
                    {
                        out.push(format!("{at}: more than the pattern under the double not"));
                    }
                }
                for (k, v) in o {
                    if k == "anyOf" && explained.is_some() {
                        continue;
                    }
                    walk(v, &format!("{at}/{k}"), out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, at, out)),
            _ => {}
        }
    }
    let schema = values_schema();
    let mut problems = Vec::new();
    walk(&schema, "", &mut problems);
    for s in definitions() {
        let Some(helm) = s.helm else { continue };
        let at = helm.split('.').fold(&schema, |v, k| &v["properties"][k]);
        let value = if at["type"] == "array" {
            &at["items"]
        } else {
            at
        };
        let patterned = value.get("pattern").is_some() || value.get("anyOf").is_some();
        if patterned && value.get("description").and_then(Value::as_str).is_none() {
            problems.push(format!("{helm}: a pattern with no description"));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
