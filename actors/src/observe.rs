//! Observation hooks: how the binary learns what the router and the gates do
//! (for metrics and the debug history) without this crate knowing about
//! Prometheus, HTTP or any exporter. Every call happens on the hot path,
//! inside an actor's turn or a watcher's loop, so an implementation must be
//! quick and must never block or await: count, copy, and leave anything slow
//! to whoever reads the results. Nothing here reads the clock or does I/O —
//! times are the ones the gate itself used — and an observer can only
//! watch: it has no way to change a gate's course.

use jiff::Timestamp;

use nodegate_core::gate::journal::Journal;
use nodegate_core::gate::{Event, GateState};

/// What reached the router's indexes, one per watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouterEvent {
    NodeUpserted,
    NodeDeleted,
    DaemonSetUpserted,
    DaemonSetDeleted,
    PodUpserted,
    PodDeleted,
}

impl RouterEvent {
    pub const ALL: [RouterEvent; 6] = [
        RouterEvent::NodeUpserted,
        RouterEvent::NodeDeleted,
        RouterEvent::DaemonSetUpserted,
        RouterEvent::DaemonSetDeleted,
        RouterEvent::PodUpserted,
        RouterEvent::PodDeleted,
    ];

    /// A short snake_case name, e.g. for a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            RouterEvent::NodeUpserted => "node_upserted",
            RouterEvent::NodeDeleted => "node_deleted",
            RouterEvent::DaemonSetUpserted => "daemonset_upserted",
            RouterEvent::DaemonSetDeleted => "daemonset_deleted",
            RouterEvent::PodUpserted => "pod_upserted",
            RouterEvent::PodDeleted => "pod_deleted",
        }
    }
}

/// Watches the router and the gates. Every method has an empty default, so
/// an observer implements only what it needs.
pub trait GateObserver: Send + Sync + 'static {
    /// A watch event reached the router. `routed` is true when it went on to
    /// at least one live gate as a hint (a DaemonSet change goes to all).
    fn router_event(&self, _event: RouterEvent, _routed: bool) {}

    /// A gate actor for `node` started; `generation` tells this incarnation
    /// apart from earlier ones for the same node (restarts, re-gating).
    fn gate_started(&self, _node: &str, _generation: u64) {}

    /// A gate recorded `events` (non-empty), all at `at`; `state` is the
    /// gate's state after all of them.
    fn gate_step(&self, _node: &str, _at: Timestamp, _events: &[Event], _state: &GateState) {}

    /// A gate actor stopped cleanly: opened, node gone, or shutdown. Not
    /// called for a gate that panicked (the supervisor restarts it, and the
    /// new incarnation calls `gate_started` again).
    fn gate_stopped(&self, _node: &str, _generation: u64, _state: &GateState, _journal: &Journal) {}
}

/// The observer used until one is set: ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl GateObserver for NoObserver {}
