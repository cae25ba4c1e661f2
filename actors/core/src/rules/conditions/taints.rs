//! What a `conditionTaints` rule is (semantics.md §6.5), and the checks on the
//! configured ones ([`validate_rules`]). Judging a node against a rule, and
//! writing its taint, is [`crate::closing::condition_taints`]'s.

use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::ABSENT_STATUS;
use crate::rules::placement::EFFECT_NO_EXECUTE;
use crate::rules::selector::{LabelSelector, SelectorError, check_label_key, check_label_value};
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::model::Taint;

/// A regular expression a condition's whole status must match: `Kaput`
/// matches `Kaput`, never `NotKaput`.
#[derive(Debug, Clone)]
pub struct StatusPattern {
    source: String,
    anchored: Regex,
}

impl StatusPattern {
    /// An expression that does not parse is reported as written (the
    /// anchors are added only once it does).
    pub fn new(source: &str) -> Result<Self, regex::Error> {
        Regex::new(source)?;
        Ok(StatusPattern {
            anchored: Regex::new(&format!("^(?:{source})$"))?,
            source: source.to_string(),
        })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn matches(&self, status: &str) -> bool {
        self.anchored.is_match(status)
    }
}

impl PartialEq for StatusPattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for StatusPattern {}

/// One condition of a rule: its type, the status pattern and how long the
/// condition must have held its status (since `lastTransitionTime`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub type_: String,
    pub status: StatusPattern,
    pub for_: Option<Duration>,
    /// `matchAbsent: true`: the person who wrote the rule knows that a
    /// pattern matching `Unknown` also matches a condition the node does not
    /// report, at once. Without it such a pattern needs a `for`
    /// ([`RuleError::UnknownWithoutFor`]).
    pub match_absent: bool,
}

/// `match:` how a rule's conditions combine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MatchMode {
    #[default]
    AllOf,
    AnyOf,
}

/// `remove:` whether the taint comes off when the node stops matching.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RemovePolicy {
    #[default]
    WhenCleared,
    Never,
}

/// One `conditionTaints` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionTaintRule {
    pub name: String,
    pub conditions: Vec<Requirement>,
    pub match_mode: MatchMode,
    pub node_selector: Option<LabelSelector>,
    pub taint: Taint,
    pub remove: RemovePolicy,
    pub max_unavailable: Option<MaxUnavailable>,
}

/// The budget of a `NoExecute` rule written without `maxUnavailable`: one
/// node at a time. A `NoExecute` taint evicts every pod that does not
/// tolerate it, so a rule that matches everywhere by mistake (a typo'd
/// condition type reads `Unknown` on every node) must not empty the fleet.
pub const NO_EXECUTE_DEFAULT_BUDGET: MaxUnavailable = MaxUnavailable::Count(1);

impl ConditionTaintRule {
    /// The budget the rule is held to (`None`: no limit of its own).
    pub fn budget(&self) -> Option<MaxUnavailable> {
        self.max_unavailable.or_else(|| {
            (self.taint.effect == EFFECT_NO_EXECUTE).then_some(NO_EXECUTE_DEFAULT_BUDGET)
        })
    }
}

/// The taint effects the API accepts.
pub const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// A rule that cannot work, naming the rule and the field to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("rule #{index}: name must not be empty")]
    NoName { index: usize },
    #[error("rule {name:?} is defined twice; give each rule its own name")]
    Duplicate { name: String },
    #[error(
        "rule {name:?}: the name must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit (it is recorded on the nodes the rule taints)"
    )]
    Name { name: String },
    #[error("rule {name:?}: conditions must list at least one condition")]
    NoConditions { name: String },
    #[error("rule {name:?}: conditions[{index}].type must not be empty")]
    NoType { name: String, index: usize },
    #[error("rule {name:?}: taint.key must not be empty")]
    NoTaintKey { name: String },
    #[error(
        "rule {name:?}: taint.key: {problem} (the API server refuses such a taint; write a qualified name such as example.com/broken)"
    )]
    TaintKey { name: String, problem: String },
    #[error(
        "rule {name:?}: taint.value: {problem} (the API server refuses such a taint; write a label value or leave it out)"
    )]
    TaintValue { name: String, problem: String },
    #[error(
        "rule {name:?}: conditions[{index}] ({type_}): status {status:?} matches Unknown, which is also how a condition the node does not report reads, so the rule would match every node without it at once; add a for (e.g. for: 5m) or, if that is meant, matchAbsent: true"
    )]
    UnknownWithoutFor {
        name: String,
        index: usize,
        type_: String,
        status: String,
    },
    #[error(
        "rule {name:?}: taint.effect {effect:?} is not one of NoSchedule, PreferNoSchedule, NoExecute"
    )]
    Effect { name: String, effect: String },
    #[error(
        "rule {name:?}: taint.key {key:?} is one of nodegate's managed taints; a rule's taint must be its own"
    )]
    ManagedTaint { name: String, key: String },
    #[error(
        "rules {first:?} and {second:?} both set taint {taint}; each taint belongs to one rule"
    )]
    SameTaint {
        first: String,
        second: String,
        taint: String,
    },
    #[error("rule {name:?}: nodeSelector: {source}")]
    NodeSelector { name: String, source: SelectorError },
}

/// The rules a list of rules must meet. `managed` says whether a taint key
/// is one of nodegate's managed taints (a rule must never write those).
/// Regular expressions and durations are checked where they are read.
pub fn validate_rules(
    rules: &[ConditionTaintRule],
    managed: impl Fn(&str) -> bool,
) -> Result<(), RuleError> {
    let mut names = std::collections::BTreeSet::new();
    let mut taints: Vec<(&Taint, &str)> = Vec::new();
    for (index, r) in rules.iter().enumerate() {
        let name = || r.name.clone();
        if r.name.is_empty() {
            return Err(RuleError::NoName { index });
        }
        if check_label_value(&r.name).is_err() {
            return Err(RuleError::Name { name: name() });
        }
        if !names.insert(r.name.as_str()) {
            return Err(RuleError::Duplicate { name: name() });
        }
        if r.conditions.is_empty() {
            return Err(RuleError::NoConditions { name: name() });
        }
        if let Some(index) = r.conditions.iter().position(|c| c.type_.is_empty()) {
            return Err(RuleError::NoType {
                name: name(),
                index,
            });
        }
        let at_once = |c: &&Requirement| {
            c.status.matches(ABSENT_STATUS) && c.for_.is_none() && !c.match_absent
        };
        if let Some((index, c)) = r.conditions.iter().enumerate().find(|(_, c)| at_once(c)) {
            return Err(RuleError::UnknownWithoutFor {
                name: name(),
                index,
                type_: c.type_.clone(),
                status: c.status.as_str().to_string(),
            });
        }
        if r.taint.key.is_empty() {
            return Err(RuleError::NoTaintKey { name: name() });
        }
        check_label_key(&r.taint.key).map_err(|problem| RuleError::TaintKey {
            name: name(),
            problem,
        })?;
        check_label_value(&r.taint.value).map_err(|problem| RuleError::TaintValue {
            name: name(),
            problem,
        })?;
        if !EFFECTS.contains(&r.taint.effect.as_str()) {
            return Err(RuleError::Effect {
                name: name(),
                effect: r.taint.effect.clone(),
            });
        }
        if managed(&r.taint.key) {
            return Err(RuleError::ManagedTaint {
                name: name(),
                key: r.taint.key.clone(),
            });
        }
        if let Some((_, first)) = taints.iter().find(|(t, _)| same_taint(t, &r.taint)) {
            return Err(RuleError::SameTaint {
                first: first.to_string(),
                second: name(),
                taint: r.taint.to_string(),
            });
        }
        taints.push((&r.taint, &r.name));
        if let Some(sel) = &r.node_selector {
            sel.validate().map_err(|source| RuleError::NodeSelector {
                name: name(),
                source,
            })?;
        }
    }
    Ok(())
}

/// A taint's identity on a node is its key and effect (as the API's own
/// taint helpers compare them); the value does not make another taint.
pub fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}
