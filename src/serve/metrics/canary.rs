//! The canary pods' series (`canary`, semantics.md §6.9): canaries created,
//! deleted (by why), seen failed, and the gauges of the canaries in flight
//! and the gated nodes waiting for a slot under `canary.maxInFlight`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct WhyLabels {
    why: &'static str,
}

pub struct CanaryMetrics {
    created: Counter,
    deleted: Family<WhyLabels, Counter>,
    failed: Counter,
    in_flight: Gauge,
    waiting: Gauge,
}

impl CanaryMetrics {
    pub(super) fn register(registry: &mut Registry) -> CanaryMetrics {
        let m = CanaryMetrics {
            created: Counter::default(),
            deleted: Family::default(),
            failed: Counter::default(),
            in_flight: Gauge::default(),
            waiting: Gauge::default(),
        };
        registry.register(
            "canaries_created",
            "Canary pods the leader created",
            m.created.clone(),
        );
        registry.register(
            "canaries_deleted",
            "Canary pods the leader deleted, by why (not_gated | node_gone | failed)",
            m.deleted.clone(),
        );
        registry.register(
            "canaries_failed",
            "Canary pods seen ended (Failed or Succeeded) on a gated node; each is replaced after a backoff",
            m.failed.clone(),
        );
        registry.register(
            "canaries_in_flight",
            "Canary pods that exist or are being created, as the leader counts them against canary.maxInFlight",
            m.in_flight.clone(),
        );
        registry.register(
            "canaries_waiting_nodes",
            "Gated nodes waiting for a canary because canary.maxInFlight canaries exist",
            m.waiting.clone(),
        );
        m
    }

    pub fn created(&self) {
        self.created.inc();
    }

    pub fn deleted(&self, why: &'static str) {
        self.deleted.get_or_create(&WhyLabels { why }).inc();
    }

    pub fn failed(&self) {
        self.failed.inc();
    }

    pub fn gauges(&self, in_flight: usize, waiting: usize) {
        self.in_flight
            .set(i64::try_from(in_flight).unwrap_or(i64::MAX));
        self.waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }
}
