//! The condition rules' series (`conditionTaints`, semantics.md §6.5), per
//! rule: how many managed nodes match it now, the taints it added and
//! removed, and the additions its `maxUnavailable` held back. Only the
//! leader writes, so the counters move on the leader only; every replica
//! reports the matching nodes it sees.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
}

pub struct ConditionMetrics {
    matching: Family<RuleLabels, Gauge>,
    added: Family<RuleLabels, Counter>,
    removed: Family<RuleLabels, Counter>,
    blocked: Family<RuleLabels, Counter>,
}

impl ConditionMetrics {
    pub(super) fn register(registry: &mut Registry) -> ConditionMetrics {
        let m = ConditionMetrics {
            matching: Family::default(),
            added: Family::default(),
            removed: Family::default(),
            blocked: Family::default(),
        };
        registry.register(
            "condition_rule_matching_nodes",
            "Managed nodes matching each conditionTaints rule now",
            m.matching.clone(),
        );
        registry.register(
            "condition_taints_added",
            "Taints a conditionTaints rule put on nodes",
            m.added.clone(),
        );
        registry.register(
            "condition_taints_removed",
            "Taints a conditionTaints rule (remove: whenCleared) took off nodes",
            m.removed.clone(),
        );
        registry.register(
            "condition_taint_budget_blocked",
            "Taints a conditionTaints rule did not add because its maxUnavailable was used up",
            m.blocked.clone(),
        );
        m
    }

    fn labels(rule: &str) -> RuleLabels {
        RuleLabels {
            rule: rule.to_string(),
        }
    }

    pub fn matching(&self, rule: &str, nodes: usize) {
        self.matching
            .get_or_create(&Self::labels(rule))
            .set(i64::try_from(nodes).unwrap_or(i64::MAX));
    }

    pub fn added(&self, rule: &str) {
        self.added.get_or_create(&Self::labels(rule)).inc();
    }

    pub fn removed(&self, rule: &str) {
        self.removed.get_or_create(&Self::labels(rule)).inc();
    }

    pub fn budget_blocked(&self, rule: &str) {
        self.blocked.get_or_create(&Self::labels(rule)).inc();
    }
}
