//! What a config file means: the settings `nodegate run` would run with,
//! as readable values (durations as `2m`, selectors and taints as kubectl
//! writes them), keyed by the config file's own keys.

use nodegate_core::conditions::rules::ConditionTaintRule;
use serde_json::{Value, json};

use crate::settings::config::{RunSettings, WebhookCerts};

fn duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn every(what: &str) -> Value {
    Value::String(format!("(every {what})"))
}

/// The settings, as a JSON value (rendered as YAML for people).
pub fn of(s: &RunSettings) -> Value {
    let g = &s.gate;
    let p = &g.placement;
    let regate = match &g.regate {
        None => Value::String("(off)".to_string()),
        Some(r) => json!({
            "regateAfter": duration(r.after),
            "regateTaint": r.taint.to_taint().to_string(),
            "regateTimeout": r.timeout.map_or("(none)".to_string(), duration),
            "regateOnReboot": r.on_reboot,
            "regateMaxUnavailable": r.max_unavailable.to_string(),
        }),
    };
    let webhook = match &s.webhook {
        None => Value::String("(off)".to_string()),
        Some(w) => json!({
            "webhookAddr": w.addr.to_string(),
            "certificates": match &w.certs {
                WebhookCerts::Dir(d) => format!("from {}", d.display()),
                WebhookCerts::Managed { secret_namespace, secret_name, .. } =>
                    format!("managed by nodegate in Secret {secret_namespace}/{secret_name}"),
            },
        }),
    };
    json!({
        "taints": p.managed_taints.iter().map(|t| t.to_taint().to_string()).collect::<Vec<_>>(),
        "transientTaints": p.transient_taints.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "exclude": p.excluded.iter().map(|(ns, n)| format!("{ns}/{n}")).collect::<Vec<_>>(),
        "excludeSelector": p.exclude_selector.as_ref().map_or(Value::Null, |s| s.to_string().into()),
        "daemonsetNamespaces": p.daemonset_namespaces.as_ref()
            .map_or(every("namespace"), |n| json!(n)),
        "nodeSelector": g.scope.node_selector.as_ref().map_or(every("node"), |s| s.to_string().into()),
        "suspend": g.suspend,
        "timeout": s.timeout.map_or("(none)".to_string(), duration),
        "onTimeout": s.on_timeout.to_string(),
        "dryRun": s.dry_run,
        "maxUnavailable": g.max_unavailable.map_or("100%".to_string(), |m| m.to_string()),
        "regate": regate,
        "criticalPods": g.critical.iter().map(|c| json!({
            "name": c.name,
            "namespace": c.namespace,
            "selector": c.selector.to_string(),
            "nodeSelector": c.node_selector.as_ref().map_or(every("gated node"), |s| s.to_string().into()),
        })).collect::<Vec<_>>(),
        "criticalConditions": g.conditions.iter().map(|c| json!({
            "type": c.type_,
            "status": c.status,
            "nodeSelector": c.node_selector.as_ref().map_or(every("gated node"), |s| s.to_string().into()),
        })).collect::<Vec<_>>(),
        "conditionTaints": g.condition_taints.iter().map(rule).collect::<Vec<_>>(),
        "criticalResources": g.resources.iter().map(|r| json!({
            "member": format!("resource:{}", r.resource),
            "resource": r.resource,
            "nodeSelector": r.node_selector.as_ref().map_or(every("gated node"), |s| s.to_string().into()),
        })).collect::<Vec<_>>(),
        "draDrivers": g.dra_drivers.iter().map(|d| json!({
            "member": format!("dra:{}", d.driver),
            "driver": d.driver,
            "nodeSelector": d.node_selector.as_ref().map_or(every("gated node"), |s| s.to_string().into()),
        })).collect::<Vec<_>>(),
        "leaderElect": s.leader_election.enabled,
        "httpAddr": s.http_addr.to_string(),
        "debugAddr": s.debug_addr.map_or("(off)".to_string(), |a| a.to_string()),
        "webhook": webhook,
        "taintNewNodes": s.net.enabled,
        "newNodeWindow": duration(s.net.window),
        "kubeQps": s.kube_qps,
        "kubeBurst": s.kube_burst,
        "logLevel": s.log_level,
    })
}

fn rule(r: &ConditionTaintRule) -> Value {
    json!({
        "name": r.name,
        "match": r.match_mode,
        "conditions": r.conditions.iter().map(|c| json!({
            "type": c.type_,
            "status": c.status.as_str(),
            "for": c.for_.map_or("(at once)".to_string(), duration),
            "matchAbsent": c.match_absent,
        })).collect::<Vec<_>>(),
        "nodeSelector": r.node_selector.as_ref().map_or(every("managed node"), |s| s.to_string().into()),
        "taint": r.taint.to_string(),
        "remove": r.remove,
        "maxUnavailable": r.budget().map_or("(none)".to_string(), |m| m.to_string()),
    })
}
