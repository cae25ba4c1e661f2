//! `nodegate_map_entries{map}`: how many entries each map that grows with
//! the nodes holds (the router's, its index's, the metrics' own per-node and
//! per-DaemonSet records), set at each refresh. A map that keeps an entry
//! for a node that is gone shows here as a count that does not come back
//! down after nodes leave: the scale benchmark's churn mode reads it before
//! and after thousands of node create/delete cycles.

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Label, count, reg};

pub(super) struct MapMetrics {
    entries: Family<Label, Gauge>,
}

impl MapMetrics {
    pub(super) fn register(r: &mut Registry) -> MapMetrics {
        MapMetrics {
            entries: reg(
                r,
                "map_entries",
                "Entries in each of nodegate's maps that grow with the nodes, by map (router_gates, router_opened_at_version, index_nodes, index_daemonsets, index_pod_nodes, index_pods, index_csi_drivers, metrics_gates, metrics_gate_age_series, metrics_daemonset_series, metrics_regated_age_series)",
            ),
        }
    }

    /// The sizes now, by map name.
    pub(super) fn set(&self, sizes: impl IntoIterator<Item = (&'static str, usize)>) {
        for (map, entries) in sizes {
            self.entries
                .get_or_create(&[("map", map)])
                .set(count(entries));
        }
    }
}

impl super::Metrics {
    /// The sizes of the maps the metrics keep per node and per DaemonSet.
    pub(super) fn own_map_sizes(&self) -> [(&'static str, usize); 4] {
        [
            ("metrics_gates", self.gates.len()),
            (
                "metrics_gate_age_series",
                super::lock(&self.age_series).len(),
            ),
            (
                "metrics_daemonset_series",
                super::lock(&self.daemonset_series).len(),
            ),
            ("metrics_regated_age_series", self.regate.aged_len()),
        ]
    }
}
