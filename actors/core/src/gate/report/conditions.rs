//! The node-condition parts of an explain report (semantics.md §6.5): the
//! `criticalConditions` members, read from the gate's state like every
//! member, and each `conditionTaints` rule's verdict for the node.

use jiff::Timestamp;
use serde::Serialize;

use super::{EXPECTED, MemberRow, NOT_EVALUATED, empty_row, member_of, selector_match};
use crate::gate::GateState;
use crate::rules::conditions::CriticalCondition;
use crate::rules::conditions::taints::{self, RuleAction};
use crate::vocab::config::Config;
use crate::vocab::member::{Expectation, MemberId, Readiness};
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

pub(super) fn condition_row(state: &GateState, cond: &CriticalCondition) -> MemberRow {
    let id = MemberId::Condition(cond.type_.clone());
    let mut row = empty_row(&id, "", &cond.type_);
    row.selector = Some(format!("{}={}", cond.type_, cond.status));
    let member = member_of(state, &id);
    match &member.expectation {
        Expectation::NotExpected { reason, code } => {
            row.reason = reason.clone();
            row.reason_code = code.to_string();
        }
        Expectation::Expected => {
            row.expected = true;
            row.reason_code = EXPECTED.into();
            row.reason = selector_match("condition", cond.node_selector.as_ref());
            row.ready = Some(false);
            match &member.readiness {
                Some(Readiness::Ready { .. }) => row.ready = Some(true),
                Some(Readiness::Waiting { why, .. }) => row.waiting = Some(why.clone()),
                None => row.waiting = Some(NOT_EVALUATED.into()),
            }
        }
    }
    row
}

pub(super) fn rule_rows(node: &NodeInfo, cfg: &Config, now: Timestamp) -> Vec<RuleRow> {
    cfg.condition_taints
        .iter()
        .map(|rule| {
            let verdict = taints::evaluate(rule, node, now);
            // Budgets are the leader's business: counted over every managed
            // node, which one node's report does not see.
            let action = match taints::decide(rule, node, &verdict, 0, usize::MAX) {
                Some(RuleAction::Add | RuleAction::BudgetBlocked) => Some("add"),
                Some(RuleAction::Remove) => Some("remove"),
                None => None,
            };
            RuleRow {
                rule: rule.name.clone(),
                taint: rule.taint.to_string(),
                matches: verdict.matches,
                tainted: node
                    .taints
                    .iter()
                    .any(|t| taints::same_taint(t, &rule.taint)),
                action,
                why: verdict.why,
            }
        })
        .collect()
}
