//! The config file's node-condition keys (semantics.md §6.5):
//! `criticalConditions` (conditions waited for like members) and
//! `conditionTaints` (rules that put a taint on nodes matching conditions).
//! Every error names the entry and the field to fix.

use nodegate_core::rules::conditions::taints::{
    ConditionTaintRule, MatchMode, RemovePolicy, Requirement, StatusPattern, validate_rules,
};
use nodegate_core::rules::conditions::{
    CriticalCondition, CriticalConditionError, validate_critical,
};
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::vocab::model::Taint;

use super::*;

/// One `conditionTaints` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRule {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub conditions: Vec<RawRequirement>,
    #[serde(default, rename = "match")]
    pub match_mode: MatchMode,
    pub node_selector: Option<FileSelector>,
    pub taint: RawTaint,
    #[serde(default)]
    pub remove: RemovePolicy,
    pub max_unavailable: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawRequirement {
    #[serde(default, rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(rename = "for")]
    pub for_: Option<String>,
    /// `matchAbsent: true`: a status pattern matching `Unknown` may match a
    /// condition the node does not report, with no `for`.
    #[serde(default)]
    pub match_absent: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RawTaint {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub effect: String,
}

pub fn critical_conditions(
    raw: Option<Vec<RawCriticalCondition>>,
) -> Result<Vec<CriticalCondition>, ConfigError> {
    let list = raw
        .unwrap_or_default()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let at = format!("criticalConditions[{i}] ({})", c.type_);
            Ok(CriticalCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                node_selector: FileSelector::entry_nodes(c.node_selector.as_ref(), &at)?,
            })
        })
        .collect::<Result<Vec<_>, ConfigError>>()?;
    validate_critical(&list).map_err(|e| match e {
        CriticalConditionError::NoType { index } => invalid(
            format!("criticalConditions[{index}].type"),
            "must not be empty",
        ),
        CriticalConditionError::NoStatus { type_ } => invalid(
            format!("criticalConditions ({type_}).status"),
            "must not be empty (e.g. True)",
        ),
        CriticalConditionError::Duplicate { type_ } => invalid(
            format!("criticalConditions ({type_}).type"),
            "the condition type is listed twice",
        ),
        CriticalConditionError::NodeSelector { type_, source } => invalid(
            format!("criticalConditions ({type_}).nodeSelector"),
            source.to_string(),
        ),
    })?;
    Ok(list)
}

/// `conditionTaints`, read and checked against the managed taints.
pub fn condition_taints(
    raw: Option<Vec<RawRule>>,
    managed: &[ManagedTaint],
) -> Result<Vec<ConditionTaintRule>, ConfigError> {
    let mut rules = Vec::new();
    for (i, r) in raw.unwrap_or_default().into_iter().enumerate() {
        let at = |field: &str| {
            if r.name.is_empty() {
                format!("conditionTaints[{i}].{field}")
            } else {
                format!("conditionTaints rule {:?}: {field}", r.name)
            }
        };
        let mut conditions = Vec::new();
        for (j, c) in r.conditions.iter().enumerate() {
            let status = StatusPattern::new(&c.status).map_err(|e| {
                invalid(
                    at(&format!("conditions[{j}].status")),
                    format!("{:?} is not a regular expression: {e}", c.status),
                )
            })?;
            let for_at = at(&format!("conditions[{j}].for"));
            let for_ = c.for_.as_ref().map(|d| parse_duration(&for_at, d));
            conditions.push(Requirement {
                type_: c.type_.clone(),
                status,
                for_: for_.transpose()?,
                match_absent: c.match_absent,
            });
        }
        let node_selector = FileSelector::nodes(r.node_selector.as_ref(), &at("nodeSelector"))?;
        let max_unavailable = r.max_unavailable.as_ref().map(|v| match v {
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::String(s) => s.clone(),
            other => format!("{other:?}"),
        });
        let why = "remove the rule to stop it tainting";
        let max_unavailable = max_unavailable.map(|t| budget(&at("maxUnavailable"), &t, why));
        rules.push(ConditionTaintRule {
            name: r.name.clone(),
            conditions,
            match_mode: r.match_mode,
            node_selector,
            taint: Taint::new(&r.taint.key, &r.taint.value, &r.taint.effect),
            remove: r.remove,
            max_unavailable: max_unavailable.transpose()?,
        });
    }
    let is_managed = |key: &str| managed.iter().any(|m| m.key == key);
    // The core's errors name the rule and the field themselves.
    validate_rules(&rules, is_managed).map_err(|e| invalid("conditionTaints", e.to_string()))?;
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::vocab::budget::MaxUnavailable;

    fn settings(yaml: &str) -> Result<GateSettings, String> {
        let mut file = FileConfig::parse(yaml, "c.yaml").map_err(|e| e.to_string())?;
        let args = GateArgs::default();
        gate_settings(&args, &mut file).map_err(|e| e.to_string())
    }

    const OOS: &str = "conditionTaints:
- name: preempted
  conditions:
  - type: Preempted
    status: \"True\"
    for: 10s
  taint: {key: node.kubernetes.io/out-of-service, value: nodeshutdown, effect: NoExecute}
  remove: never
  maxUnavailable: 10%
- name: kaput
  match: anyOf
  nodeSelector: pool=spot
  conditions:
  - {type: KernelDeadlock, status: \"True\"}
  - {type: Disk, status: Kaput}
  taint: {key: example.com/broken, effect: NoSchedule}
  maxUnavailable: 2
criticalConditions:
- {type: NetworkReady, status: \"True\"}
- type: GPUDriverReady
  status: \"True\"
  nodeSelector: {matchLabels: {gpu: \"true\"}}
";

    #[test]
    fn the_documented_example_reads() {
        let s = settings(OOS).unwrap();
        let [oos, kaput] = &s.condition_taints[..] else {
            panic!("{:?}", s.condition_taints);
        };
        assert_eq!(oos.remove, RemovePolicy::Never);
        assert_eq!(oos.conditions[0].for_, Some(Duration::from_secs(10)));
        assert_eq!(oos.max_unavailable, Some(MaxUnavailable::Percent(10)));
        assert_eq!(kaput.match_mode, MatchMode::AnyOf);
        assert_eq!(kaput.max_unavailable, Some(MaxUnavailable::Count(2)));
        assert!(kaput.conditions[1].status.matches("Kaput"));
        assert!(!kaput.conditions[1].status.matches("NotKaput"));
        assert_eq!(s.conditions.len(), 2);
        let cfg = s.gate_config(super::Timeouts::default(), OnTimeout::Open, false);
        assert_eq!(cfg.condition_taints.len(), 2);
        assert_eq!(cfg.conditions.len(), 2);
    }

    #[test]
    fn match_absent_is_read_and_lets_an_unknown_pattern_through() {
        let yaml = "conditionTaints:\n- name: absent\n  conditions:\n  - {type: A, status: Unknown, matchAbsent: true}\n  taint: {key: example.com/a, effect: NoExecute}\n";
        let s = settings(yaml).unwrap();
        let [r] = &s.condition_taints[..] else {
            panic!("{:?}", s.condition_taints);
        };
        assert!(r.conditions[0].match_absent);
        assert_eq!(r.max_unavailable, None);
        assert_eq!(r.budget(), Some(MaxUnavailable::Count(1)));
    }

    #[test]
    fn each_invalid_rule_is_named_with_its_field() {
        let rule = |extra: &str, cond: &str, taint: &str| {
            format!(
                "conditionTaints:\n- name: r1\n{extra}  conditions:\n  - {cond}\n  taint: {taint}\n"
            )
        };
        let good_cond = "{type: A, status: \"True\"}";
        let good_taint = "{key: example.com/a, effect: NoSchedule}";
        for (yaml, wants) in [
            (
                rule("", "{type: A, status: \"(\"}", good_taint),
                &["\"r1\"", "conditions[0].status", "regular expression"][..],
            ),
            (
                rule("", good_cond, "{key: example.com/a, effect: NoEntry}"),
                &["\"r1\"", "taint.effect", "NoEntry"],
            ),
            (
                rule("", good_cond, "{key: nodegate.dev/initializing, effect: NoSchedule}"),
                &["\"r1\"", "taint.key", "managed"],
            ),
            (
                rule("", "{type: A, status: \"True\", for: soon}", good_taint),
                &["\"r1\"", "conditions[0].for"],
            ),
            (
                rule("  maxUnavailable: lots\n", good_cond, good_taint),
                &["\"r1\"", "maxUnavailable", "lots"],
            ),
            (
                format!(
                    "{}{}",
                    rule("", good_cond, good_taint),
                    rule("", good_cond, "{key: example.com/b, effect: NoSchedule}")
                        .trim_start_matches("conditionTaints:\n")
                ),
                &["\"r1\"", "twice"],
            ),
            // Hardening: a typo'd rule (it matched every node).
            (
                rule("", "{type: GPUDriverReadyy, status: \"False|Unknown\"}", good_taint),
                &["\"r1\"", "conditions[0]", "for", "matchAbsent: true"],
            ),
            // Hardening: the API server refuses these taints.
            (
                rule("", good_cond, "{key: example.com/a, value: not valid, effect: NoSchedule}"),
                &["\"r1\"", "taint.value", "not valid"],
            ),
            (
                rule("", good_cond, "{key: Example.com/a, effect: NoSchedule}"),
                &["\"r1\"", "taint.key", "Example.com/a"],
            ),
            (
                "criticalConditions:\n- {type: A, status: \"True\"}\n- {type: A, status: \"False\"}\n".to_string(),
                &["criticalConditions (A)", "twice"],
            ),
        ] {
            let e = settings(&yaml).expect_err(&yaml);
            for w in wants {
                assert!(e.contains(w), "{e:?} lacks {w:?} for\n{yaml}");
            }
        }
    }
}
