//! The writes a rule asks for, and the words for them: the taint change
//! on a node, the log lines, and the count and Event of an applied write;
//! and the small helpers of the tainter's bookkeeping (counts, unseen
//! writes, the window clock).

use crate::annotations;
use crate::conditions::rules::{self, ConditionTaintRule, RuleAction};
use crate::deciders::{Context, Effect, Level, Now, TaintChange, TaintWrite, Tally};
use crate::gate::{EventType, NodeEvent, Reason};
use crate::model::NodeInfo;
use jiff::Timestamp;

use super::{Expect, Unseen};

/// Whether `node` carries `rule`'s taint (key and effect), whoever put it on.
pub(super) fn carries(node: &NodeInfo, rule: &ConditionTaintRule) -> bool {
    node.taints
        .iter()
        .any(|t| rules::same_taint(t, &rule.taint))
}

/// The write `action` needs on `node`: the rule's taint put on after the
/// others, or the node's taint that is the rule's taken off.
pub(super) fn change(
    action: RuleAction,
    rule: &ConditionTaintRule,
    node: &NodeInfo,
    now: Now,
) -> Option<TaintChange> {
    let others = || {
        let list = node.rule_taints.as_deref().unwrap_or_default();
        list.split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty() && *r != rule.name)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    if action == RuleAction::Add {
        // The taint and the record that nodegate put it on, in one patch.
        let mut owners = others();
        owners.push(rule.name.clone());
        owners.sort_unstable();
        return Some(TaintChange::Add {
            taint: rule.taint.clone(),
            existing: node.taints.len(),
            annotations: vec![(annotations::CONDITION_TAINTS, owners.join(","))],
            annotations_present: node.annotations_present,
            at: now.for_window(),
        });
    }
    let index = node
        .taints
        .iter()
        .position(|t| rules::same_taint(t, &rule.taint))?;
    let taint = node.taints.get(index)?.clone();
    let owners = others();
    let record = (!owners.is_empty()).then(|| owners.join(","));
    Some(TaintChange::Remove {
        index,
        taint,
        annotations: vec![(annotations::CONDITION_TAINTS, record)],
    })
}

pub(super) fn info(node: &str, what: &str, rule: &ConditionTaintRule, why: Option<&str>) -> Effect {
    let mut message = format!("{what} (rule {}, taint {})", rule.name, rule.taint);
    if let Some(why) = why {
        message.push_str(": ");
        message.push_str(why);
    }
    Effect::log(Level::Info, node, message)
}

/// The count, the log line and the Event of an applied write.
pub(super) fn applied(write: &TaintWrite, rule: &str, why: &str, cx: &Context<'_>) -> Vec<Effect> {
    let (tally, what, reason, note) = match &write.change {
        // The rules write no annotation on its own.
        TaintChange::Annotate { .. } => return Vec::new(),
        TaintChange::Add { taint, .. } => (
            Tally::RuleAdded(rule.to_string()),
            format!("condition taint put on (rule {rule}, taint {taint})"),
            Reason::ConditionTaintAdded,
            format!("Rule {rule} matches ({why}): nodegate put {taint} on the node"),
        ),
        TaintChange::Remove { taint, .. } => {
            // The rule's taint as configured, as the log and Event name it.
            let rules = &cx.config.condition_taints;
            let taint = rules
                .iter()
                .find(|r| r.name == rule)
                .map_or(taint, |r| &r.taint);
            (
                Tally::RuleRemoved(rule.to_string()),
                format!("condition taint taken off (rule {rule}, taint {taint})"),
                Reason::ConditionTaintRemoved,
                format!(
                    "Rule {rule} no longer matches ({why}): nodegate took {taint} off the node"
                ),
            )
        }
    };
    let event = NodeEvent::new(&write.node, &write.uid, EventType::Normal, reason, note);
    vec![
        Effect::Count(tally),
        Effect::log(Level::Info, &write.node, format!("{what}: {why}")),
        Effect::RecordEvent(event),
    ]
}

/// `count` moved by one node's contribution going from `before` to `now`.
pub(super) fn shift(count: usize, before: bool, now: bool) -> usize {
    match (before, now) {
        (true, false) => count.saturating_sub(1),
        (false, true) => count + 1,
        _ => count,
    }
}

pub(super) fn unseen(version: &str, expect: Expect) -> Unseen {
    Unseen {
        version: version.to_string(),
        expect,
    }
}

/// `at` on the window clock ([`Now::for_window`]), as the local clock will
/// read it then: the shell's timers run on the local clock.
pub(super) fn on_local_clock(now: Now, at: Timestamp) -> Timestamp {
    let ahead = now.for_window().duration_since(now.local);
    at.checked_sub(ahead).unwrap_or(at)
}
