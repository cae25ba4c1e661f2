//! Re-gating's series: nodes re-gated (by trigger), re-gates the budget
//! refused, and the gauges of what the open nodes look like now.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Label, count, lock, reg};

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

/// What the open nodes look like at one look (the gauges), as the
/// re-gating decider counts them.
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

    /// A node re-gated: `trigger` is `members` or `reboot`.
    pub fn regated(&self, trigger: &'static str) {
        self.regates.get_or_create(&[("trigger", trigger)]).inc();
    }

    pub fn budget_exhausted(&self) {
        self.budget_exhausted.inc();
    }

    /// The re-gated nodes now and how long each has been re-gated; series
    /// of nodes no longer re-gated go.
    pub fn regated_ages(&self, ages: &[(String, f64)]) {
        let ages = if self.dropped.load(Ordering::Relaxed) {
            &[]
        } else {
            ages
        };
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
