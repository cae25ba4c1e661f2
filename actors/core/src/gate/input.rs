//! Everything that can happen to a gate: observations of the cluster, timers
//! firing, and the results of the writes it asked for.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimerKind {
    Deadline,
    /// The schedule deadline (`--schedule-timeout`).
    ScheduleDeadline,
    /// A member becomes available (minReadySeconds) at a known time.
    Recheck,
    /// The backoff before write attempt `generation`.
    Retry,
}

pub use crate::vocab::write::PatchOutcome;

/// Everything that can happen to a gate.
///
/// Inputs are short-lived (a mailbox holds them boxed), so a rare large
/// variant (a re-read node) costs nothing kept.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// The cluster as it is now (start, or restart after a failure). Pods not
    /// bound to the node are ignored.
    Snapshot {
        node: Arc<NodeInfo>,
        daemonsets: Vec<Arc<DaemonSetInfo>>,
        pods: Vec<Arc<PodInfo>>,
    },
    NodeChanged(Arc<NodeInfo>),
    NodeDeleted,
    DaemonSetUpserted(Arc<DaemonSetInfo>),
    DaemonSetDeleted {
        uid: String,
    },
    PodUpserted(Arc<PodInfo>),
    PodDeleted {
        uid: String,
    },
    TimerFired {
        kind: TimerKind,
        generation: u64,
    },
    /// Result of [`Effect::RemoveTaints`](super::Effect::RemoveTaints).
    PatchResult(PatchOutcome),
    /// Result of [`Effect::MarkTimedOut`](super::Effect::MarkTimedOut).
    MarkResult(PatchOutcome),
    /// Result of [`Effect::RefreshNode`](super::Effect::RefreshNode): `Ok(None)` is a 404.
    NodeRefreshed(Result<Option<NodeInfo>, String>),
    LeadershipGained,
    /// Evidence of the API server's clock (semantics.md §5.3): its time was
    /// at least this, by stamps the server itself made, carried forward on
    /// the shell's monotonic clock (which stamps: src/cluster/server_time.rs).
    /// An opening by deadline needs the deadline passed by this too, not by
    /// the local clock alone.
    ServerTime(jiff::Timestamp),
    /// The periodic re-examination (semantics.md §5.1): the cluster as the
    /// indexes show it now, fed to a live gate on a jittered period whether
    /// or not anything changed, so that no lost message can hold a node
    /// closed. Handled like a snapshot, but it never starts a gate.
    Reexamine {
        node: Arc<NodeInfo>,
        daemonsets: Vec<Arc<DaemonSetInfo>>,
        pods: Vec<Arc<PodInfo>>,
    },
}

impl Input {
    /// A snapshot from owned objects (tests, one-off evaluations); the
    /// router shares its own copies instead.
    pub fn snapshot(node: NodeInfo, daemonsets: Vec<DaemonSetInfo>, pods: Vec<PodInfo>) -> Self {
        Input::Snapshot {
            node: Arc::new(node),
            daemonsets: daemonsets.into_iter().map(Arc::new).collect(),
            pods: pods.into_iter().map(Arc::new).collect(),
        }
    }

    /// A re-examination from owned objects (tests); the node actor shares
    /// the router's copies instead.
    pub fn reexamine(node: NodeInfo, daemonsets: Vec<DaemonSetInfo>, pods: Vec<PodInfo>) -> Self {
        Input::Reexamine {
            node: Arc::new(node),
            daemonsets: daemonsets.into_iter().map(Arc::new).collect(),
            pods: pods.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn pod_upserted(pod: PodInfo) -> Self {
        Input::PodUpserted(Arc::new(pod))
    }

    pub fn daemonset_upserted(ds: DaemonSetInfo) -> Self {
        Input::DaemonSetUpserted(Arc::new(ds))
    }
}
