//! Condition-rule taints (`conditionTaints`, semantics.md §6.5): how a node
//! is judged against a rule ([`evaluate`]) and what is written then
//! ([`decide`]). What a rule is lives in `rules::conditions::taints`: the
//! configuration holds the rules, and that floor imports nothing above it.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::rules::conditions::taints::{
    ConditionTaintRule, MatchMode, RemovePolicy, Requirement, same_taint,
};
use crate::rules::conditions::{ABSENT_STATUS, status_of};
use crate::vocab::model::NodeInfo;

pub mod decider;
pub mod report;

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
    let pattern = r.status.as_str();
    if !r.status.matches(status) {
        return (false, format!("{shown} does not match {pattern:?}"), None);
    }
    let Some(need) = r.for_ else {
        return (true, format!("{shown} matches {pattern:?}"), None);
    };
    let secs = need.as_secs();
    let Some(since) = cond.and_then(|c| c.since) else {
        let why = format!(
            "{shown} matches {pattern:?} but has no lastTransitionTime, so for {secs}s cannot be counted"
        );
        return (false, why, None);
    };
    let at = since
        .checked_add(SignedDuration::try_from(need).unwrap_or(SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX);
    if at <= now {
        let why = format!("{shown} matches {pattern:?} and has held for {secs}s (since {since})");
        (true, why, None)
    } else {
        let why =
            format!("{shown} matches {pattern:?} since {since}, not yet for {secs}s (at {at})");
        (false, why, Some(at))
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
    let (mode, matches) = match rule.match_mode {
        MatchMode::AllOf => ("allOf", parts.iter().all(|p| p.0)),
        MatchMode::AnyOf => ("anyOf", parts.iter().any(|p| p.0)),
    };
    let why: Vec<&str> = parts.iter().map(|p| p.1.as_str()).collect();
    RuleVerdict {
        matches,
        why: format!("{mode}: {}", why.join("; ")),
        recheck_at: parts.iter().filter_map(|p| p.2).min().filter(|_| !matches),
    }
}

/// Whether `node` carries `rule`'s taint (key and effect), whoever put it on.
pub fn carries(node: &NodeInfo, rule: &ConditionTaintRule) -> bool {
    node.taints.iter().any(|t| same_taint(t, &rule.taint))
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
/// manages (`managed`); `None` when the node is as it should be.
pub fn decide(
    rule: &ConditionTaintRule,
    node: &NodeInfo,
    verdict: &RuleVerdict,
    tainted: usize,
    managed: usize,
) -> Option<RuleAction> {
    match (verdict.matches, carries(node, rule)) {
        (true, false) => Some(match rule.budget() {
            Some(budget) if budget.room(managed, tainted) == 0 => RuleAction::BudgetBlocked,
            _ => RuleAction::Add,
        }),
        // Only a taint nodegate recorded putting on: one an operator or
        // another agent put on under the same key and effect stays.
        (false, true)
            if rule.remove == RemovePolicy::WhenCleared && node.rule_added(&rule.name) =>
        {
            Some(RuleAction::Remove)
        }
        _ => None,
    }
}
