//! The outcome records of a gate step, kept by the leader only: a
//! DaemonSet's time-to-Ready, a timeout and what blocked it, and how long a
//! gate took to open and to react to its last member turning Ready.

use jiff::Timestamp;
use nodegate_core::gate::{GateState, OpenedBy};
use nodegate_core::vocab::config::OnTimeout;
use nodegate_core::vocab::member::{Blocker, MemberId};

use super::{BlockerLabels, GateTrack, Metrics, seconds_between};

impl Metrics {
    /// A DaemonSet's time-to-Ready on this node, once per gate, from the gate
    /// start to its pod's Ready transition.
    pub(super) fn record_member_ready(
        &self,
        track: &mut GateTrack,
        key: &str,
        pod: &str,
        state: &GateState,
        at: Timestamp,
    ) {
        if let Some(start) = track.start
            && track.ready_recorded.insert(key.to_string())
        {
            // The pod's own Ready transition is the truth (and
            // survives a restart of nodegate); when the snapshot
            // lacks it, when the gate saw it will do.
            let ready_at = state
                .pods
                .values()
                .find(|p| *p.name == *pod && p.ready)
                .and_then(|p| p.ready_since.get())
                .unwrap_or(at);
            if let Some(labels) = self.daemonset_labels(key, state) {
                self.daemonset_ready
                    .get_or_create(&labels)
                    .observe(seconds_between(start, ready_at));
            }
        }
    }

    /// A gate that timed out, by the action taken, and each member that was
    /// not Ready then.
    pub(super) fn record_timeout(
        &self,
        action: OnTimeout,
        not_ready: &[Blocker],
        state: &GateState,
    ) {
        self.gates_timed_out
            .get_or_create(&[("action", action.as_str())])
            .inc();
        for blocker in not_ready {
            if let Some(labels) = self.blocker_labels(&blocker.member, state) {
                self.timeout_blockers.get_or_create(&labels).inc();
            }
        }
    }

    /// The labels of a member that blocked a gate until its timeout; `None`
    /// for a DaemonSet key that is not `namespace/name`.
    fn blocker_labels(&self, member: &MemberId, state: &GateState) -> Option<BlockerLabels> {
        let (kind, namespace, name) = match member {
            MemberId::DaemonSet(key) => {
                let l = self.daemonset_labels(key, state)?;
                ("daemonset", l.namespace, l.name)
            }
            MemberId::Critical(name) => ("critical", String::new(), name.clone()),
            MemberId::Condition(type_) => ("condition", String::new(), type_.clone()),
            MemberId::Resource(name) => ("resource", String::new(), name.clone()),
            MemberId::Dra(driver) => ("dra_driver", String::new(), driver.clone()),
            MemberId::Canary => ("canary", String::new(), String::new()),
        };
        Some(BlockerLabels {
            kind,
            namespace,
            name,
        })
    }

    /// A gate that opened: its duration by who opened it, and, opened by
    /// readiness, the reaction since every member was Ready.
    pub(super) fn record_opened(&self, track: &GateTrack, opened_by: OpenedBy, at: Timestamp) {
        if let Some(start) = track.start {
            self.gate_duration
                .get_or_create(&[("outcome", opened_by.as_str())])
                .observe(seconds_between(start, at));
        }
        if opened_by == OpenedBy::Ready
            && let Some(since) = track.all_ready_since
        {
            self.reaction.observe(seconds_between(since, at));
        }
    }
}
