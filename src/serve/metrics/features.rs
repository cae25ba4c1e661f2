//! The series of the features the configuration turns on beside the gate.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nodegate_core::vocab::model::{Fallback, Owner};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Label, count, lock, reg};

/// The canary pods' series (`canary`, semantics.md §6.9).
pub struct CanaryMetrics {
    created: Counter,
    deleted: Family<Label, Counter>,
    failed: Counter,
    in_flight: Gauge,
    waiting: Gauge,
}

impl CanaryMetrics {
    pub(super) fn register(r: &mut Registry) -> CanaryMetrics {
        CanaryMetrics {
            created: reg(r, "canaries_created", "Canary pods the leader created"),
            deleted: reg(
                r,
                "canaries_deleted",
                "Canary pods the leader deleted, by why (not_gated | node_gone | failed)",
            ),
            failed: reg(
                r,
                "canaries_failed",
                "Canary pods seen ended (Failed or Succeeded) on a gated node; each is replaced after a backoff",
            ),
            in_flight: reg(
                r,
                "canaries_in_flight",
                "Canary pods that exist or are being created, as the leader counts them against canary.maxInFlight",
            ),
            waiting: reg(
                r,
                "canaries_waiting_nodes",
                "Gated nodes waiting for a canary because canary.maxInFlight canaries exist",
            ),
        }
    }

    pub fn created(&self) {
        self.created.inc();
    }

    pub fn deleted(&self, why: &'static str) {
        self.deleted.get_or_create(&[("why", why)]).inc();
    }

    pub fn failed(&self) {
        self.failed.inc();
    }

    pub fn gauges(&self, in_flight: usize, waiting: usize) {
        self.in_flight.set(count(in_flight));
        self.waiting.set(count(waiting));
    }
}

/// The condition rules' series (`conditionTaints`, semantics.md §6.5), per
/// rule. Only the leader writes, so the counters move on the leader only;
/// every replica reports the matching nodes it sees.
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

/// Re-gating's series.
pub struct RegateMetrics {
    regated_age: Family<Label<String>, Gauge<f64, AtomicU64>>,
    /// Nodes that have a `regated_age` series now.
    pub(super) aged: Mutex<HashSet<String>>,
    /// `--drop-node-metrics`: no `regated_age` series (nor `gate_age`:
    /// `Metrics` reads it too).
    pub(super) dropped: AtomicBool,
    regates: Family<Label, Counter>,
    budget_exhausted: Counter,
    regated: Gauge,
    budget_allowed: Gauge,
    broken: Gauge,
    suspended: Gauge,
}

pub use nodegate_core::closing::regating::decider::RegateGauges;

impl RegateMetrics {
    pub(super) fn register(r: &mut Registry) -> RegateMetrics {
        let m = RegateMetrics {
            regates: reg(
                r,
                "regates",
                "Open nodes nodegate re-gated, by trigger (members | reboot | announced: before an announced reboot)",
            ),
            budget_exhausted: reg(
                r,
                "regate_budget_exhausted",
                "Re-gates not made because --regate-max-unavailable nodes already carried the re-gate taint",
            ),
            regated: reg(
                r,
                "regated_nodes",
                "Managed nodes carrying the re-gate taint now (the budget in use)",
            ),
            budget_allowed: reg(
                r,
                "regate_budget_nodes",
                "Managed nodes --regate-max-unavailable allows to carry the re-gate taint at once",
            ),
            broken: reg(
                r,
                "regate_broken_nodes",
                "Open nodes with a member that has no Ready pod and not re-gated (yet): inside --regate-after, or held by the budget, suspension or leadership",
            ),
            suspended: reg(
                r,
                "suspended_nodes",
                "Managed nodes whose writes nodegate holds (gate, re-gating, condition rules, late-taint net; the admission webhook still taints new nodes): annotated nodegate.dev/suspend, or every one with suspend: true",
            ),
            regated_age: reg(
                r,
                "regated_node_age_seconds",
                "Seconds since each node carrying the re-gate taint was re-gated (nodegate.dev/gated-since); one series per re-gated node",
            ),
            aged: Mutex::new(HashSet::new()),
            dropped: AtomicBool::new(false),
        };
        for trigger in ["members", "reboot", "announced"] {
            m.regates.get_or_create_owned(&[("trigger", trigger)]);
        }
        m
    }

    /// A node re-gated: `trigger` is `members`, `reboot` or `announced`.
    pub fn regated(&self, trigger: &'static str) {
        self.regates.get_or_create(&[("trigger", trigger)]).inc();
    }

    pub fn budget_exhausted(&self) {
        self.budget_exhausted.inc();
    }

    /// The re-gated nodes now and how long each has been re-gated; series
    /// of nodes no longer re-gated go.
    pub fn regated_ages(&self, ages: &[(String, f64)]) {
        let dropped = self.dropped.load(Ordering::Relaxed);
        let ages = if dropped { &[] } else { ages };
        let mut aged = lock(&self.aged);
        let now: HashSet<String> = ages.iter().map(|(n, _)| n.clone()).collect();
        for gone in aged.difference(&now) {
            self.regated_age.remove(&[("node", gone.clone())]);
        }
        for (node, secs) in ages {
            self.regated_age
                .get_or_create(&[("node", node.clone())])
                .set(*secs);
        }
        *aged = now;
    }

    pub fn gauges(&self, g: RegateGauges) {
        self.regated.set(count(g.regated));
        self.budget_allowed.set(count(g.budget_allowed));
        self.broken.set(count(g.broken));
        self.suspended.set(count(g.suspended));
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    owner: &'static str,
    outcome: &'static str,
}

/// The outcomes of a request: the owner asked (or the node cordoned), the
/// node marked but its owner's delete failed (tried again), nothing
/// written.
const OUTCOMES: [&str; 3] = ["requested", "owner_failed", "failed"];

/// `--on-timeout=replace`'s series, counted by the leader, which alone
/// decides.
pub struct ReplaceMetrics {
    requests: Family<RequestLabels, Counter>,
    budget_exhausted: Counter,
    skipped: Family<Label, Counter>,
}

impl ReplaceMetrics {
    pub(super) fn register(r: &mut Registry) -> ReplaceMetrics {
        let m = ReplaceMetrics {
            requests: reg(
                r,
                "replace_requests",
                "Nodes nodegate asked to be replaced after their deadline (--on-timeout=replace), by owner (nodeclaim | machine | none) and outcome (requested | owner_failed | failed); leader only",
            ),
            budget_exhausted: reg(
                r,
                "replace_budget_exhausted",
                "Replace requests not made because --replace-budget or --replace-in-flight was used up; leader only",
            ),
            skipped: reg(
                r,
                "replace_skipped",
                "Nodes not replaced because a member they wait for is broken cluster-wide, by --replace-fallback (open | keep); leader only",
            ),
        };
        for owner in Owner::KINDS {
            for outcome in OUTCOMES {
                m.requests
                    .get_or_create_owned(&RequestLabels { owner, outcome });
            }
        }
        for f in Fallback::ALL {
            m.skipped.get_or_create_owned(&[("fallback", f.as_str())]);
        }
        m
    }

    pub fn replaced(&self, owner: &'static str, outcome: &'static str) {
        self.requests
            .get_or_create(&RequestLabels { owner, outcome })
            .inc();
    }

    pub fn budget_exhausted(&self) {
        self.budget_exhausted.inc();
    }

    pub fn skipped(&self, fallback: &'static str) {
        self.skipped.get_or_create(&[("fallback", fallback)]).inc();
    }
}
