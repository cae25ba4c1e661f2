//! Which startup taint each node gets (`--autoscaler`, `--taint-for`;
//! semantics.md §6.0): the presets and rules as written, read into the
//! core's [`StartupTaints`]. Each error names the flag and the bad value.

use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::rules::startup::{Autoscaler, StartupRule, StartupTaints};
use serde::Deserialize;

use super::{ConfigError, invalid};

/// One `taintFor` entry of the config file: `{nodeSelector, taint}`, or the
/// flag's own `SELECTOR=KEY[:EFFECT]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum TaintFor {
    Rule(TaintForRule),
    Text(String),
}

/// `{nodeSelector: "pool=gpu", taint: "example.com/gpu-init:NoSchedule"}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintForRule {
    /// kubectl syntax; empty or absent: every node.
    #[serde(default)]
    pub node_selector: String,
    pub taint: String,
}

/// The flag's form, `SELECTOR=KEY[:EFFECT]`.
impl From<TaintFor> for String {
    fn from(t: TaintFor) -> String {
        match t {
            TaintFor::Text(s) => s,
            TaintFor::Rule(r) => format!("{}={}", r.node_selector, r.taint),
        }
    }
}

/// `--autoscaler` (each entry may be comma-separated) and `--taint-for`;
/// `first` is the first `--taint`, the taint of a node no rule matches.
pub(super) fn startup_taints(
    autoscalers: &[String],
    taint_for: &[String],
    first: &ManagedTaint,
) -> Result<StartupTaints, ConfigError> {
    let names: Vec<&str> = super::entries(autoscalers).collect();
    let presets = names
        .iter()
        .map(|n| {
            Autoscaler::parse(n).map_err(|e| invalid(format!("--autoscaler {n:?}"), e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if presets.contains(&Autoscaler::None) && presets.len() > 1 {
        return Err(invalid(
            format!("--autoscaler {:?}", names.join(",")),
            "none means no preset and cannot be combined with another; give none alone",
        ));
    }
    let rules = taint_for
        .iter()
        .map(|s| {
            StartupRule::parse(s).map_err(|e| {
                invalid(
                    format!("--taint-for {s:?}"),
                    format!(
                        "{}; write SELECTOR=KEY[:EFFECT], e.g. 'pool=gpu=example.com/gpu-init'",
                        e.problem
                    ),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StartupTaints::new(rules, &presets, first.clone()))
}
