//! Condition rules that put a taint on a node (`conditionTaints`,
//! semantics.md §6.5): while a node matches a rule's conditions the rule's
//! taint is on; with `remove: whenCleared` it comes off when the node stops
//! matching, with `remove: never` it stays. A rule's taint is not a gate.
//!
//! [`evaluate`] says whether a node matches and why; [`decide`] what the
//! shell should write, given the rule's budget.

use std::fmt;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use regex::Regex;
use serde::{Deserialize, Serialize};

use super::{ABSENT_STATUS, status_of};
use crate::rules::selector::{LabelSelector, SelectorError, check_label_key, check_label_value};
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::model::{NodeInfo, Taint};

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
    /// The budget the rule is held to: its `maxUnavailable`, or for a
    /// `NoExecute` rule without one [`NO_EXECUTE_DEFAULT_BUDGET`]; `None`
    /// (no limit of its own) for the other effects.
    pub fn budget(&self) -> Option<MaxUnavailable> {
        self.max_unavailable.or_else(|| {
            (self.taint.effect == EFFECT_NO_EXECUTE).then_some(NO_EXECUTE_DEFAULT_BUDGET)
        })
    }
}

const EFFECT_NO_EXECUTE: &str = "NoExecute";

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

/// Whether a node matches a rule, and why, at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleVerdict {
    pub matches: bool,
    /// In words, for `explain` and the Events.
    pub why: String,
    /// When a condition that holds its status but not yet for `for` will
    /// have held it long enough: the moment to look again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck_at: Option<Timestamp>,
}

/// Where one requirement stands: held, or why not (and when it might be).
fn requirement(
    node: &NodeInfo,
    r: &Requirement,
    now: Timestamp,
) -> (bool, String, Option<Timestamp>) {
    let cond = node.conditions.get(r.type_.as_str());
    let status = status_of(node, &r.type_);
    let shown = if cond.is_some() {
        format!("{}={status}", r.type_)
    } else {
        format!("{}={ABSENT_STATUS} (not reported)", r.type_)
    };
    if !r.status.matches(status) {
        return (
            false,
            format!("{shown} does not match {:?}", r.status.as_str()),
            None,
        );
    }
    let Some(need) = r.for_ else {
        return (
            true,
            format!("{shown} matches {:?}", r.status.as_str()),
            None,
        );
    };
    let Some(since) = cond.and_then(|c| c.since) else {
        return (
            false,
            format!(
                "{shown} matches {:?} but has no lastTransitionTime, so for {} cannot be counted",
                r.status.as_str(),
                Secs(need)
            ),
            None,
        );
    };
    let at = since
        .checked_add(SignedDuration::try_from(need).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    if at <= now {
        (
            true,
            format!(
                "{shown} matches {:?} and has held for {} (since {since})",
                r.status.as_str(),
                Secs(need)
            ),
            None,
        )
    } else {
        (
            false,
            format!(
                "{shown} matches {:?} since {since}, not yet for {} (at {at})",
                r.status.as_str(),
                Secs(need)
            ),
            Some(at),
        )
    }
}

struct Secs(Duration);

impl fmt::Display for Secs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}s", self.0.as_secs())
    }
}

/// Whether `node` matches `rule` at `now`: inside its node selector, and all
/// (`allOf`) or any (`anyOf`) of its conditions hold — the status matching
/// the whole pattern, for at least `for` since `lastTransitionTime`.
pub fn evaluate(rule: &ConditionTaintRule, node: &NodeInfo, now: Timestamp) -> RuleVerdict {
    if let Some(sel) = &rule.node_selector
        && !sel.matches(&node.labels)
    {
        return RuleVerdict {
            matches: false,
            why: format!("the node does not match the rule's node selector {sel}"),
            recheck_at: None,
        };
    }
    let parts: Vec<_> = rule
        .conditions
        .iter()
        .map(|r| requirement(node, r, now))
        .collect();
    let matches = match rule.match_mode {
        MatchMode::AllOf => parts.iter().all(|p| p.0),
        MatchMode::AnyOf => parts.iter().any(|p| p.0),
    };
    let recheck_at = if matches {
        None
    } else {
        parts.iter().filter_map(|p| p.2).min()
    };
    let mode = match rule.match_mode {
        MatchMode::AllOf => "allOf",
        MatchMode::AnyOf => "anyOf",
    };
    let why = parts
        .iter()
        .map(|p| p.1.as_str())
        .collect::<Vec<_>>()
        .join("; ");
    RuleVerdict {
        matches,
        why: format!("{mode}: {why}"),
        recheck_at,
    }
}

/// What the shell should write for one rule on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RuleAction {
    /// Put the rule's taint on.
    Add,
    /// Take it off (`remove: whenCleared`, the node no longer matches).
    Remove,
    /// The node matches but the rule's `maxUnavailable` is used up.
    BudgetBlocked,
}

/// The action for `rule` on `node`, given its verdict, how many managed
/// nodes carry the rule's taint (`tainted`) and how many nodes nodegate
/// manages (`managed`); `None` when the node is as it should be. The
/// rule's [`budget`](ConditionTaintRule::budget) holds an add back; a
/// removal is only of a taint the node's `nodegate.dev/condition-taints`
/// says nodegate put on.
pub fn decide(
    rule: &ConditionTaintRule,
    node: &NodeInfo,
    verdict: &RuleVerdict,
    tainted: usize,
    managed: usize,
) -> Option<RuleAction> {
    let has = node.taints.iter().any(|t| same_taint(t, &rule.taint));
    match (verdict.matches, has) {
        (true, false) => Some(match rule.budget() {
            Some(budget) if budget.room(managed, tainted) == 0 => RuleAction::BudgetBlocked,
            _ => RuleAction::Add,
        }),
        // Only a taint nodegate recorded putting on:
        // one an operator or another agent put on under the same key and
        // effect stays.
        (false, true)
            if rule.remove == RemovePolicy::WhenCleared && node.rule_added(&rule.name) =>
        {
            Some(RuleAction::Remove)
        }
        _ => None,
    }
}
