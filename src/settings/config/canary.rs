//! The config file's `canary` key (semantics.md §6.9): the canary pod
//! nodegate runs on each gated node, as written and checked. What the gates
//! and the canary decider need goes to the core's [`CanaryConfig`]; the pod
//! itself ([`CanaryPod`]) to the shell that creates it.

use k8s_openapi::api::core::v1::{Probe, ResourceRequirements};
use nodegate_core::vocab::config::{CanaryConfig, DEFAULT_MAX_IN_FLIGHT};

use super::*;

/// The image a canary runs when none is named: the pause image every
/// kubelet already has for its sandboxes (it runs as user 65535 and does
/// nothing).
pub const DEFAULT_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The namespace canaries go to when neither the key nor `$POD_NAMESPACE`
/// (nodegate's own pod, by the downward API) names one.
pub const DEFAULT_NAMESPACE: &str = "nodegate";

/// `canary` as written, the readiness probe and the resources as `P` and
/// `R`: first untyped (`serde_json::Value`), then each read by [`strict`].
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GivenCanary<P, R> {
    /// `false` turns canaries off with the key still written (as the Helm
    /// chart writes it); absent or `true`: on.
    pub enabled: Option<bool>,
    pub image: Option<String>,
    pub image_pull_policy: Option<String>,
    pub namespace: Option<String>,
    pub readiness_probe: Option<P>,
    pub resources: Option<R>,
    pub max_in_flight: Option<usize>,
    pub priority_class_name: Option<String>,
}

/// `canary` as written, its probe and resources read strictly.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "GivenCanary<serde_json::Value, serde_json::Value>")]
pub struct RawCanary(pub GivenCanary<Probe, ResourceRequirements>);

impl TryFrom<GivenCanary<serde_json::Value, serde_json::Value>> for RawCanary {
    type Error = String;

    fn try_from(g: GivenCanary<serde_json::Value, serde_json::Value>) -> Result<Self, String> {
        let probe = strict::<Probe>(g.readiness_probe, "readinessProbe");
        let resources = strict::<ResourceRequirements>(g.resources, "resources");
        match (probe, resources) {
            (Ok(readiness_probe), Ok(resources)) => Ok(RawCanary(GivenCanary {
                enabled: g.enabled,
                image: g.image,
                image_pull_policy: g.image_pull_policy,
                namespace: g.namespace,
                readiness_probe,
                resources,
                max_in_flight: g.max_in_flight,
                priority_class_name: g.priority_class_name,
            })),
            (probe, resources) => {
                let problems = [probe.err(), resources.err()].into_iter().flatten();
                Err(problems.collect::<Vec<_>>().join(PROBLEMS_APART))
            }
        }
    }
}

/// The keys a Probe (and the handlers in it) and a ResourceRequirements
/// take, by the name of the map they are in, for a typo's suggestion.
fn known_keys(map: &str) -> &'static [&'static str] {
    match map {
        "readinessProbe" => &[
            "exec",
            "failureThreshold",
            "grpc",
            "httpGet",
            "initialDelaySeconds",
            "periodSeconds",
            "successThreshold",
            "tcpSocket",
            "terminationGracePeriodSeconds",
            "timeoutSeconds",
        ],
        "exec" => &["command"],
        "grpc" => &["port", "service"],
        "httpGet" => &["host", "httpHeaders", "path", "port", "scheme"],
        "tcpSocket" => &["host", "port"],
        "resources" => &["claims", "limits", "requests"],
        _ => &[],
    }
}

/// Between two problems of one strictly read value (the parser's message
/// is one line): `config check` names each apart (check::locate).
pub const PROBLEMS_APART: &str = " | ";

/// Every key of `given` that the typed value read from it does not keep
/// (`back`, the value written out again): the keys the Kubernetes type
/// ignored, each with the path of maps to it, in the order written.
fn dropped_keys(
    given: &serde_json::Value,
    back: &serde_json::Value,
    path: &str,
    out: &mut Vec<(String, String)>,
) {
    use serde_json::Value;
    match (given, back) {
        (Value::Object(g), Value::Object(b)) => {
            for (k, v) in g {
                match b.get(k) {
                    None if !v.is_null() => out.push((path.to_string(), k.clone())),
                    None => {}
                    Some(bv) => dropped_keys(v, bv, &format!("{path}.{k}"), out),
                }
            }
        }
        (Value::Array(g), Value::Array(b)) => {
            for (i, (v, bv)) in g.iter().zip(b).enumerate() {
                dropped_keys(v, bv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// A Kubernetes type read from the file with every key it does not know
/// refused, at every level (the type alone would drop a misspelt key such as
/// `periodSecond` without a word): each as `canary.readinessProbe.periodSecond:
/// unknown key; did you mean ...`, [`PROBLEMS_APART`], so that `config check`
/// can name each at its own line (check::locate).
fn strict<T>(given: Option<serde_json::Value>, name: &str) -> Result<Option<T>, String>
where
    T: serde::de::DeserializeOwned + serde::Serialize,
{
    let Some(given) = given.filter(|g| !g.is_null()) else {
        return Ok(None);
    };
    let typed: T =
        serde_json::from_value(given.clone()).map_err(|e| format!("canary.{name}: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("canary.{name}: {e}"))?;
    let mut dropped = Vec::new();
    dropped_keys(&given, &back, &format!("canary.{name}"), &mut dropped);
    if dropped.is_empty() {
        return Ok(Some(typed));
    }
    let lines: Vec<String> = dropped
        .iter()
        .map(|(path, key)| {
            let map = path.rsplit('.').next().unwrap_or(name);
            let map = map.split('[').next().unwrap_or(map);
            let hint = load::nearest(key, known_keys(map))
                .map(|best| format!("; did you mean `{best}`?"))
                .unwrap_or_default();
            format!("{path}.{key}: unknown key{hint}")
        })
        .collect();
    Err(lines.join(PROBLEMS_APART))
}

/// The canary pod as the shell makes it, besides what identifies it.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryPod {
    pub image: String,
    pub image_pull_policy: String,
    pub readiness_probe: Option<Probe>,
    pub resources: ResourceRequirements,
    pub priority_class_name: Option<String>,
}

/// `canary`, checked: the gates' part and the pod.
#[derive(Debug, Clone, PartialEq)]
pub struct CanarySettings {
    pub core: CanaryConfig,
    pub pod: CanaryPod,
}

/// The requests of a canary when `resources` is not given: as small as the
/// scheduler's accounting goes, so a canary never holds a real pod off.
fn default_resources() -> ResourceRequirements {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let q = |s: &str| Quantity(s.to_string());
    ResourceRequirements {
        requests: Some([("cpu".into(), q("1m")), ("memory".into(), q("8Mi"))].into()),
        limits: Some([("memory".into(), q("16Mi"))].into()),
        ..Default::default()
    }
}

fn or_default(given: Option<String>, default: &str) -> String {
    given
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// `canary`, checked; `None` when the key is absent or says `enabled: false`.
pub fn canary_settings(
    raw: Option<RawCanary>,
    pod_namespace: Option<&str>,
) -> Result<Option<CanarySettings>, ConfigError> {
    let Some(RawCanary(raw)) = raw.filter(|r| r.0.enabled != Some(false)) else {
        return Ok(None);
    };
    let pod_namespace = pod_namespace.map(str::to_string);
    let namespace = raw.namespace.filter(|n| !n.is_empty()).or(pod_namespace);
    let namespace = or_default(namespace, DEFAULT_NAMESPACE);
    check_dns_label(&namespace)
        .map_err(|e| invalid(format!("canary.namespace {namespace:?}"), e))?;
    let max_in_flight = raw.max_in_flight.unwrap_or(DEFAULT_MAX_IN_FLIGHT);
    if max_in_flight == 0 {
        return Err(invalid(
            "canary.maxInFlight 0",
            "must be at least 1 (remove the canary key to turn canaries off)",
        ));
    }
    let image = or_default(raw.image, DEFAULT_IMAGE);
    if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
        return Err(invalid(
            format!("canary.image {image:?}"),
            "must name an image, e.g. registry.k8s.io/pause:3.10",
        ));
    }
    let image_pull_policy = or_default(raw.image_pull_policy, "IfNotPresent");
    if !["Always", "IfNotPresent", "Never"].contains(&image_pull_policy.as_str()) {
        return Err(invalid(
            format!("canary.imagePullPolicy {image_pull_policy:?}"),
            "must be Always, IfNotPresent or Never",
        ));
    }
    let priority_class_name = raw.priority_class_name.filter(|p| !p.is_empty());
    if let Some(pc) = &priority_class_name {
        check_dns_subdomain(pc)
            .map_err(|e| invalid(format!("canary.priorityClassName {pc:?}"), e))?;
    }
    Ok(Some(CanarySettings {
        core: CanaryConfig {
            namespace,
            probe: raw.readiness_probe.is_some(),
            max_in_flight,
        },
        pod: CanaryPod {
            image,
            image_pull_policy,
            readiness_probe: raw.readiness_probe,
            resources: raw.resources.unwrap_or_else(default_resources),
            priority_class_name,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Option<RawCanary> {
        FileConfig::parse(yaml, "test").expect("parses").canary
    }

    #[test]
    fn an_empty_key_turns_canaries_on_with_the_defaults() {
        let s = canary_settings(parse("canary: {}\n"), Some("infra"))
            .expect("valid")
            .expect("on");
        assert_eq!(s.core.namespace, "infra");
        assert_eq!(s.core.max_in_flight, DEFAULT_MAX_IN_FLIGHT);
        assert!(!s.core.probe);
        assert_eq!(s.pod.image, DEFAULT_IMAGE);
        assert_eq!(s.pod.image_pull_policy, "IfNotPresent");
        assert_eq!(s.pod.resources, default_resources());
        let none = canary_settings(parse("canary: {}\n"), None).expect("valid");
        assert_eq!(
            none.map(|s| s.core.namespace).as_deref(),
            Some(DEFAULT_NAMESPACE)
        );
    }

    #[test]
    fn the_chart_s_shape_with_empty_values_and_a_probe_reads() {
        let yaml = "canary:\n  namespace: nodegate\n  image: \"\"\n  imagePullPolicy: \"\"\n  readinessProbe:\n    exec: {command: [\"true\"]}\n    periodSeconds: 2\n  resources: null\n  maxInFlight: 5\n  priorityClassName: \"\"\n";
        let s = canary_settings(parse(yaml), Some("other"))
            .expect("valid")
            .expect("on");
        assert_eq!(s.core.namespace, "nodegate");
        assert!(s.core.probe);
        assert_eq!(s.core.max_in_flight, 5);
        assert_eq!(s.pod.image, DEFAULT_IMAGE);
        assert_eq!(s.pod.priority_class_name, None);
        let probe = s.pod.readiness_probe.expect("probe");
        assert_eq!(probe.period_seconds, Some(2));
    }

    #[test]
    fn off_when_absent_or_disabled() {
        assert!(canary_settings(None, None).expect("valid").is_none());
        let off = parse("canary: {enabled: false, maxInFlight: 0}\n");
        assert!(canary_settings(off, None).expect("valid").is_none());
    }

    #[test]
    fn bad_values_are_named() {
        let cases = [
            ("canary: {maxInFlight: 0}\n", "canary.maxInFlight 0"),
            ("canary: {namespace: Not_A_Namespace}\n", "canary.namespace"),
            (
                "canary: {imagePullPolicy: Sometimes}\n",
                "canary.imagePullPolicy",
            ),
            ("canary: {image: \"a b\"}\n", "canary.image"),
        ];
        for (yaml, named) in cases {
            let e = canary_settings(parse(yaml), None)
                .expect_err(yaml)
                .to_string();
            assert!(e.contains(named), "{yaml}: {e}");
        }
        let typo = FileConfig::parse("canary: {imag: pause}\n", "test").expect_err("typo");
        assert!(typo.to_string().contains("imag"), "{typo}");
    }

    #[test]
    fn typos_inside_the_probe_and_the_resources_are_refused() {
        let cases = [
            (
                "canary:\n  readinessProbe:\n    exec: {command: [\"true\"]}\n    periodSecond: 2\n",
                "canary.readinessProbe.periodSecond: unknown key; did you mean `periodSeconds`?",
            ),
            (
                "canary:\n  readinessProbe:\n    httpGet: {pth: /, port: 80}\n",
                "canary.readinessProbe.httpGet.pth: unknown key; did you mean `path`?",
            ),
            (
                "canary:\n  resources: {requets: {cpu: 1m}}\n",
                "canary.resources.requets: unknown key; did you mean `requests`?",
            ),
        ];
        for (yaml, want) in cases {
            let e = FileConfig::parse(yaml, "test").expect_err(yaml).to_string();
            assert!(e.contains(want), "{yaml}: {e}");
        }
        let good = "canary:\n  readinessProbe:\n    httpGet: {path: /, port: 80}\n    periodSeconds: 2\n  resources: {requests: {cpu: 1m}}\n";
        assert!(FileConfig::parse(good, "test").is_ok());
    }
}
