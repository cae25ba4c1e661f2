//! The condition rules' series (`conditionTaints`, semantics.md §6.5), per
//! rule: how many managed nodes match it now, the taints it added and
//! removed, and the additions its `maxUnavailable` held back. Only the
//! leader writes, so the counters move on the leader only; every replica
//! reports the matching nodes it sees.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Label, count, reg};

pub struct ConditionMetrics {
    matching: Family<Label<String>, Gauge>,
    added: Family<Label<String>, Counter>,
    removed: Family<Label<String>, Counter>,
    blocked: Family<Label<String>, Counter>,
}

fn rule(rule: &str) -> Label<String> {
    [("rule", rule.to_string())]
}

impl ConditionMetrics {
    pub(super) fn register(r: &mut Registry) -> ConditionMetrics {
        ConditionMetrics {
            matching: reg(
                r,
                "condition_rule_matching_nodes",
                "Managed nodes matching each conditionTaints rule now",
            ),
            added: reg(
                r,
                "condition_taints_added",
                "Taints a conditionTaints rule put on nodes",
            ),
            removed: reg(
                r,
                "condition_taints_removed",
                "Taints a conditionTaints rule (remove: whenCleared) took off nodes",
            ),
            blocked: reg(
                r,
                "condition_taint_budget_blocked",
                "Taints a conditionTaints rule did not add because its maxUnavailable was used up",
            ),
        }
    }

    pub fn matching(&self, name: &str, nodes: usize) {
        self.matching.get_or_create(&rule(name)).set(count(nodes));
    }

    pub fn added(&self, name: &str) {
        self.added.get_or_create(&rule(name)).inc();
    }

    pub fn removed(&self, name: &str) {
        self.removed.get_or_create(&rule(name)).inc();
    }

    pub fn budget_blocked(&self, name: &str) {
        self.blocked.get_or_create(&rule(name)).inc();
    }
}
