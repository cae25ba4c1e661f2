//! `--on-timeout=replace`'s series: replace requests by owner kind and
//! outcome, requests the budget refused, and nodes not replaced for a
//! cluster-wide breakage, by fallback. Counted by the leader, which alone
//! decides.

use nodegate_core::vocab::model::{Fallback, Owner};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Label, reg};

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    owner: &'static str,
    outcome: &'static str,
}

/// The outcomes of a request: the owner asked (or the node cordoned), the
/// node marked but its owner's delete failed (tried again), nothing
/// written.
const OUTCOMES: [&str; 3] = ["requested", "owner_failed", "failed"];

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
