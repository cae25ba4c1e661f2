//! A gate driven by hand, as the node actor drives it, and the objects it is
//! fed: the fixture the metrics' and the trace plan's unit tests share.
//! Compiled for this crate's tests only.

use jiff::Timestamp;
use nodegate_core::gate::{self, GateState, Input};
use nodegate_core::testutil::{
    ds_pod, mk_ds, mk_node, taint, template_with_tolerations, toleration, ts,
};
use nodegate_core::vocab::config::Config;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

/// The one node the gates here are about.
pub(crate) const NODE: &str = "node-a";

/// [`NODE`] with nodegate's startup taint, created `created` seconds after
/// the epoch.
pub(crate) fn gated(created: i64) -> NodeInfo {
    NodeInfo {
        created: ts(created),
        ..mk_node(
            NODE,
            &[],
            vec![taint("nodegate.dev/initializing", "NoSchedule")],
        )
    }
}

/// A DaemonSet in `infra` that tolerates every taint.
pub(crate) fn tolerant(name: &str) -> DaemonSetInfo {
    mk_ds(
        "infra",
        name,
        template_with_tolerations(vec![toleration("", "Exists", "", "")]),
    )
}

/// `ds`'s pod on [`NODE`], Ready since `ready_at` (not Ready: `None`).
pub(crate) fn pod(name: &str, ds: &DaemonSetInfo, ready_at: Option<i64>) -> PodInfo {
    PodInfo {
        ready: ready_at.is_some(),
        ready_since: ready_at.map(ts).into(),
        ..ds_pod(name, NODE, ds)
    }
}

/// One gate's state and configuration, stepped as the node actor steps it.
pub(crate) struct DrivenGate {
    pub(crate) state: GateState,
    pub(crate) cfg: Config,
}

impl DrivenGate {
    pub(crate) fn new(cfg: Config) -> Self {
        DrivenGate {
            state: GateState::default(),
            cfg,
        }
    }

    /// One step at `at`; the events it decided (for the caller to journal or
    /// report, as the node actor does).
    pub(crate) fn step(&mut self, at: Timestamp, input: &Input) -> Vec<gate::Event> {
        gate::step(&mut self.state, input, &self.cfg, at).events
    }
}
