//! The chart's own values: those that are no flag of nodegate (the image,
//! the pods' placement and security, the objects the chart renders), or that
//! the chart turns into flags of its own making (http.bindAddress with
//! http.port, admission, webhook.certManager.enabled).

use serde_json::{Value, json};

use super::{closed, label_selector};

fn strings() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

fn objects() -> Value {
    json!({"type": "array", "items": {"type": "object"}})
}

fn port() -> Value {
    json!({"type": "integer", "minimum": 1, "maximum": 65535})
}

/// A Go duration as cert-manager and Prometheus read it, or empty.
fn go_duration() -> Value {
    json!({"type": "string", "pattern": r"^$|^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h|d|w|y))+$"})
}

/// A Kubernetes quantity (`100m`, `64Mi`, `1`), as the API server reads it.
fn quantity() -> Value {
    json!({
        "type": ["string", "number"],
        "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$",
        "description": "a quantity such as 100m, 1, 128Mi or 2Gi",
    })
}

/// A container's `resources`: requests and limits by resource name, each
/// a quantity; any other key (`requets`) refused.
fn resources() -> Value {
    let by_name = json!({"type": ["object", "null"], "additionalProperties": quantity()});
    closed(json!({
        "requests": by_name,
        "limits": by_name,
    }))
}

/// The pods' extra `tolerations`, each a Toleration.
fn tolerations() -> Value {
    json!({"type": "array", "items": closed(json!({
        "key": {"type": "string"},
        "operator": {"enum": ["Exists", "Equal", ""]},
        "value": {"type": "string"},
        "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute", ""]},
        "tolerationSeconds": {"type": ["integer", "null"]},
    }))})
}

/// Where an optional object goes: a namespace, or empty for the release's.
fn target_namespace(what: &str) -> Value {
    json!({"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
           "description": format!("{what}; empty: the release namespace")})
}

/// A map of labels or annotations added to an object's own.
fn described_strings(what: &str) -> Value {
    let mut s = strings();
    s["description"] = json!(what);
    s
}

/// Each chart value that is no flag, by its dotted path.
pub fn chart_values() -> Vec<(&'static str, Value)> {
    vec![
        // What the chart installs: the image, the admission mode and the
        // webhook.
        // Helm's own, passed to every chart.
        ("global", json!({"type": "object"})),
        // With onTimeout: replace, the one namespace whose Cluster API
        // Machines nodegate may read and delete (a Role there); empty: none.
        (
            "config.replaceMachineNamespace",
            json!({"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$",
                   "description": "a namespace name, or empty for no Machine grant"}),
        ),
        (
            "image",
            closed(json!({
                "repository": {"type": "string", "minLength": 1},
                // `--set image.tag=1` is a number to Helm: taken, and
                // written as the tag. A YAML float (1.0 unquoted) is not:
                // it would read as 1.
                "tag": {"type": ["string", "integer"],
                        "description": "the image tag, e.g. \"1.0\" (quote a tag that looks like a decimal)"},
                "digest": {"type": "string", "pattern": "^$|^sha256:[a-f0-9]{64}$"},
                "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
            })),
        ),
        ("imagePullSecrets", objects()),
        ("replicaCount", json!({"type": "integer", "minimum": 1})),
        (
            "admission",
            json!({"enum": ["", "policy", "webhook", "none"],
                   "description": "policy, webhook or none; empty: policy where the API server serves MutatingAdmissionPolicy"}),
        ),
        ("admissionObjectSelector", label_selector()),
        (
            "http.bindAddress",
            json!({"type": "string", "minLength": 1}),
        ),
        ("http.port", port()),
        ("webhook.port", port()),
        ("webhook.failurePolicy", json!({"enum": ["Ignore", "Fail"]})),
        (
            "webhook.timeoutSeconds",
            json!({"type": "integer", "minimum": 1, "maximum": 30}),
        ),
        (
            "webhook.certManager",
            closed(json!({
                "enabled": {"type": "boolean"},
                "issuerRef": closed(json!({
                    "name": {"type": "string"},
                    "kind": {"type": "string"},
                    "group": {"type": "string"},
                })),
                "duration": go_duration(),
                "renewBefore": go_duration(),
            })),
        ),
        (
            "webhook.networkPolicy",
            closed(json!({
                "enabled": {"type": "boolean"},
                "from": objects(),
                "httpFrom": {"description": "retired: use networkPolicy.httpFrom"},
            })),
        ),
        // Retired: accepted here so that templates/validate.yaml can name
        // what replaces them.
        (
            "webhook.enabled",
            json!({"description": "retired: use admission"}),
        ),
        (
            "webhook.objectSelector",
            json!({"description": "retired: use admissionObjectSelector"}),
        ),
        // The nodegate container and its pods.
        (
            "extraArgs",
            json!({"type": "array", "items": {"type": ["string", "number", "boolean"]}}),
        ),
        ("extraEnv", objects()),
        (
            "serviceAccount",
            closed(json!({
                "create": {"type": "boolean"},
                "name": {"type": "string"},
                "annotations": strings(),
            })),
        ),
        ("rbac", closed(json!({"create": {"type": "boolean"}}))),
        (
            "admissionPolicy",
            closed(json!({
                "enabled": {"type": "boolean"},
                "taintEffects": {"type": "array", "minItems": 1,
                                 "items": {"enum": ["NoSchedule", "NoExecute"]}},
            })),
        ),
        ("priorityClassName", json!({"type": "string"})),
        ("resources", resources()),
        ("tolerations", tolerations()),
        ("nodeSelector", strings()),
        ("affinity", json!({"type": "object"})),
        (
            "zoneSpread",
            closed(json!({
                "enabled": {"type": "boolean"},
                "whenUnsatisfiable": {"enum": ["ScheduleAnyway", "DoNotSchedule"]},
            })),
        ),
        ("topologySpreadConstraints", objects()),
        ("podAnnotations", strings()),
        ("podLabels", strings()),
        ("podSecurityContext", json!({"type": "object"})),
        ("securityContext", json!({"type": "object"})),
        ("livenessProbe", json!({"type": ["object", "null"]})),
        ("readinessProbe", json!({"type": ["object", "null"]})),
        (
            "podDisruptionBudget",
            closed(json!({
                "enabled": {"type": "boolean"},
                "minAvailable": {"type": ["integer", "string"], "pattern": "^[0-9]+%?$", "minimum": 0},
            })),
        ),
        (
            "service",
            closed(json!({
                "enabled": {"type": "boolean"},
                "type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                "annotations": strings(),
            })),
        ),
        (
            "serviceMonitor",
            closed(json!({
                "enabled": {"type": "boolean"},
                "interval": go_duration(),
                "scrapeTimeout": go_duration(),
                "labels": strings(),
            })),
        ),
        (
            "networkPolicy",
            closed(json!({
                "enabled": {"type": "boolean"},
                "httpFrom": objects(),
            })),
        ),
        // The optional objects beside nodegate: the alerts, the dashboard
        // and the namespace.
        (
            "prometheusRule",
            closed(json!({
                "enabled": {"type": "boolean",
                            "description": "render the alerts of deploy/monitoring/prometheusrule.yaml as a PrometheusRule (needs the prometheus-operator CRDs)"},
                "namespace": target_namespace("the PrometheusRule's namespace"),
                "labels": described_strings("added to the PrometheusRule's labels, e.g. what your Prometheus's ruleSelector picks"),
                "annotations": described_strings("added to the PrometheusRule's annotations"),
            })),
        ),
        (
            "dashboard",
            closed(json!({
                "enabled": {"type": "boolean",
                            "description": "render deploy/monitoring/grafana-dashboard.json as a ConfigMap for Grafana's dashboard sidecar"},
                "namespace": target_namespace("the dashboard ConfigMap's namespace"),
                "labels": described_strings("the ConfigMap's labels besides the chart's: the label Grafana's sidecar looks for (grafana_dashboard: \"1\" by default)"),
                "annotations": described_strings("added to the ConfigMap's annotations, e.g. grafana_folder"),
            })),
        ),
        (
            "namespace",
            closed(json!({
                "create": {"type": "boolean",
                           "description": "render the release namespace with Pod Security labels: only on a first helm install --create-namespace (a namespace that exists is refused), and helm uninstall deletes it"},
                "labels": described_strings("the Namespace's labels besides the chart's: the Pod Security levels (restricted by default)"),
                "annotations": described_strings("added to the Namespace's annotations, e.g. helm.sh/resource-policy: keep"),
            })),
        ),
    ]
}
