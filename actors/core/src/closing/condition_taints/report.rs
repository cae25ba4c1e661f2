//! The `conditionTaints` part of an explain report (semantics.md §6.5):
//! each rule's verdict for the node, and what the leader would write now.

use jiff::Timestamp;
use serde::Serialize;

use super::{RuleAction, carries, decide, evaluate};
use crate::vocab::config::Config;
use crate::vocab::model::NodeInfo;

/// One `conditionTaints` rule on the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleRow {
    pub rule: String,
    /// `key[=value]:Effect`.
    pub taint: String,
    pub matches: bool,
    /// The node carries the rule's taint now.
    pub tainted: bool,
    /// What the leader would write now, ignoring the budget: "add",
    /// "remove", or null for nothing.
    pub action: Option<&'static str>,
    /// The rule's conditions against the node's, in words.
    pub why: String,
}

pub(crate) fn rule_rows(node: &NodeInfo, cfg: &Config, now: Timestamp) -> Vec<RuleRow> {
    cfg.condition_taints
        .iter()
        .map(|rule| {
            let verdict = evaluate(rule, node, now);
            // Budgets are the leader's business: counted over every managed
            // node, which one node's report does not see.
            let action = decide(rule, node, &verdict, 0, usize::MAX).map(|a| match a {
                RuleAction::Add | RuleAction::BudgetBlocked => "add",
                RuleAction::Remove => "remove",
            });
            RuleRow {
                rule: rule.name.clone(),
                taint: rule.taint.to_string(),
                matches: verdict.matches,
                tainted: carries(node, rule),
                action,
                why: verdict.why,
            }
        })
        .collect()
}
