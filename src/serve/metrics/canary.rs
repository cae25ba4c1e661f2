//! The canary pods' series (`canary`, semantics.md §6.9): canaries created,
//! deleted (by why), seen failed, and the gauges of the canaries in flight
//! and the gated nodes waiting for a slot under `canary.maxInFlight`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Label, count, reg};

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
