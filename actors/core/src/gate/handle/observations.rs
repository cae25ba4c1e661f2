//! Observations: the snapshot that starts (or restarts) a gate, the node,
//! DaemonSet and pod inputs that follow it, and the periodic re-examination.

use crate::vocab::vec_map::VecMap;
use std::borrow::Cow;
use std::sync::Arc;

use super::members::MemberScope;
use super::{ReconcileCause, Step};
use crate::gate::apply::apply_sharing;
use crate::gate::event::Event;
use crate::gate::state::StopReason;
use crate::vocab::model::{DaemonSetInfo, NodeInfo, PodInfo};

impl Step<'_> {
    /// The snapshot that starts (or restarts) a gate, or (`cause`
    /// `Reexamine`) the periodic re-examination: the whole view again, as a
    /// snapshot would bring it, for a gate already started. Anything a lost
    /// hint would have told shows up here; with nothing new it emits nothing.
    /// The view is recorded (one `Snapshot` event) unless it is what the
    /// gate already holds.
    pub(super) fn snapshot(
        &mut self,
        node: &Arc<NodeInfo>,
        daemonsets: &[Arc<DaemonSetInfo>],
        pods: &[Arc<PodInfo>],
        cause: ReconcileCause,
    ) {
        if cause == ReconcileCause::Reexamine && !self.is_this_node(&node.name) {
            return;
        }
        let first = self.s.node.is_none();
        // Keyed as the state keys them (a list may repeat an object; the
        // last copy wins), so an unchanged cluster compares equal.
        let daemonsets: VecMap<String, Arc<DaemonSetInfo>> =
            daemonsets.iter().map(|ds| (ds.key(), ds.clone())).collect();
        let pods: VecMap<String, Arc<PodInfo>> = pods
            .iter()
            .filter(|p| p.node_name == node.name)
            .map(|p| (p.uid.to_string(), p.clone()))
            .collect();
        let unchanged = self.s.node.as_ref() == Some(node)
            && self.s.daemonsets == daemonsets
            && self.s.pods == pods;
        if !unchanged {
            self.emit(Event::Snapshot {
                node: Arc::clone(node),
                daemonsets: daemonsets.into_values().collect(),
                pods: pods.into_values().collect(),
            });
        }
        if first && !self.has_managed_taint() {
            return self.stop(StopReason::NotGated);
        }
        self.reconcile(cause);
    }

    pub(super) fn node_changed(&mut self, node: &Arc<NodeInfo>) {
        if self.is_this_node(&node.name) {
            let scope = self.observe_node(node);
            self.reconcile_scoped(ReconcileCause::Observation, &scope);
        }
    }

    /// Records a sighting of the node and says which members the change can
    /// have changed: every one when its name, uid, labels, taints or CSI
    /// drivers changed (where DaemonSets and critical pods are placed, and
    /// what a CSI DaemonSet waits for); only the condition, resource and
    /// DRA members when only what those read changed (its conditions,
    /// devices) or its start (which only the deadline reads). A change of
    /// its Ready condition, its `opened-at` or `opened-by`, its `timed-out` mark or its
    /// switches (`suspend`, `open`) alone is recorded whole too — the gate opens by readiness
    /// only on a Ready node, recognises its own lost patch by the annotation
    /// (semantics.md §5.5) and obeys the switches (§6.6) — but decides no
    /// member.
    pub(super) fn observe_node(&mut self, node: &Arc<NodeInfo>) -> MemberScope<'static> {
        let Some(old) = &self.s.node else {
            return MemberScope::Nothing;
        };
        if old == node {
            return MemberScope::Nothing;
        }
        let (scope, same_switches) = compare_node(old, node);
        if matches!(scope, MemberScope::Nothing) && same_switches {
            self.emit(Event::NodeVersionChanged {
                resource_version: node.resource_version.clone(),
            });
        } else {
            self.emit(Event::NodeUpdated {
                node: Arc::clone(node),
            });
        }
        scope
    }

    pub(super) fn daemonset_upserted(&mut self, ds: &Arc<DaemonSetInfo>) {
        let key = ds.key();
        if self.s.daemonsets.get(&key) != Some(ds) {
            self.emit(Event::DaemonSetUpdated {
                daemonset: ds.clone(),
            });
        }
        self.reconcile_scoped(
            ReconcileCause::Observation,
            &MemberScope::DaemonSet(Cow::Owned(key)),
        );
    }

    pub(super) fn daemonset_deleted(&mut self, uid: &str) {
        let key = self.s.daemonsets.iter().find(|(_, ds)| ds.uid == uid);
        let scope = match key.map(|(k, _)| k.clone()) {
            Some(key) => {
                self.emit(Event::DaemonSetRemoved {
                    daemonset: key.clone(),
                    uid: uid.to_string(),
                });
                MemberScope::DaemonSet(Cow::Owned(key))
            }
            None => MemberScope::Nothing,
        };
        self.reconcile_scoped(ReconcileCause::Observation, &scope);
    }

    pub(super) fn pod_upserted(&mut self, pod: &Arc<PodInfo>) {
        // One lookup of the version the gate knows: every pod event
        // passes here.
        let old = self.s.pods.get(&*pod.uid.text()).map(Arc::clone);
        // The owner before the change, when it differs (a pod's
        // namespace never changes).
        let old_owner = old
            .as_ref()
            .and_then(|old| old.controller_uid.as_ref())
            .filter(|old| Some(*old) != pod.controller_uid.as_ref())
            .map(|old| Cow::Owned(old.to_string()));
        if self.is_this_node(&pod.node_name) {
            if old.as_deref() != Some(&**pod) {
                self.pod_changed(pod, old.as_deref());
            }
        } else if old.is_some() {
            self.emit(Event::PodRemoved {
                pod: pod.key(),
                uid: pod.uid.to_string(),
            });
        }
        let scope = MemberScope::Pods {
            owners: [pod.controller_uid.as_deref().map(Cow::Borrowed), old_owner],
            namespace: Cow::Borrowed(&pod.namespace),
        };
        self.reconcile_scoped(ReconcileCause::Observation, &scope);
    }

    /// Records a new version of a pod bound to the node: only its status
    /// when nothing else changed, then `emit` for an event that `pod`, the
    /// version the router's index holds, already embodies: the state keeps
    /// `pod` rather than a copy (see `apply_sharing`).
    fn pod_changed(&mut self, pod: &Arc<PodInfo>, old: Option<&PodInfo>) {
        let status_only = old.is_some_and(|old| {
            old.namespace == pod.namespace
                && old.name == pod.name
                && old.node_name == pod.node_name
                && old.controller_uid == pod.controller_uid
                && old.labels == pod.labels
                && old.ready_annotation == pod.ready_annotation
                && old.sandbox_ready == pod.sandbox_ready
                && old.status_note == pod.status_note
        });
        if !status_only {
            return self.emit(Event::PodUpdated {
                pod: Arc::clone(pod),
            });
        }
        let ev = Event::PodStatusChanged {
            pod: (*pod.name).into(),
            uid: pod.uid.to_string().into(),
            phase: pod.phase.as_str().into(),
            ready: pod.ready,
            ready_since: pod.ready_since.get(),
            terminating: pod.terminating,
        };
        apply_sharing(self.s, &ev, pod);
        self.events.push(ev);
    }

    pub(super) fn pod_deleted(&mut self, uid: &str) {
        let scope = match self.s.pods.get(uid) {
            Some(pod) => {
                let owner = pod.controller_uid.as_ref();
                let scope = MemberScope::Pods {
                    owners: [owner.map(|o| Cow::Owned(o.to_string())), None],
                    namespace: Cow::Owned(pod.namespace.to_string()),
                };
                self.emit(Event::PodRemoved {
                    pod: pod.key(),
                    uid: uid.to_string(),
                });
                scope
            }
            None => MemberScope::Nothing,
        };
        self.reconcile_scoped(ReconcileCause::Observation, &scope);
    }
}

/// Which members a change between two versions of the node can have
/// changed (see [`Step::observe_node`]), and whether they agree on what else
/// the gate decides by (its Ready condition, `opened-at`, `opened-by`, the `timed-out`
/// mark, the switches).
/// Every field is named, so a new one is a compile error here until someone
/// says which side it is on.
fn compare_node(old: &NodeInfo, new: &NodeInfo) -> (MemberScope<'static>, bool) {
    let NodeInfo {
        name,
        uid,
        labels,
        taints,
        created,
        gated_since,
        conditions,
        csi_drivers,
        extended_allocatable,
        resource_slices,
        ready,
        opened_at,
        opened_by,
        suspended,
        open_requested,
        // An announced reboot's hold (semantics.md §6.10).
        boot_id,
        awaiting_reboot,
        replace,
        // Recorded with the resourceVersion alone: no decision of the gate
        // reads them (re-gating reads the announcements).
        reboot_pending: _,
        kured_rebooting: _,
        resource_version: _,
        ignored: _,
        regated_for: _,
        rule_taints: _,
        opened_before: _,
        annotations_present: _,
    } = old;
    // Read by every member's placement (DaemonSets, critical entries and
    // the node members' selectors) or a CSI DaemonSet's readiness.
    let same_placement = *name == new.name
        && *uid == new.uid
        && *labels == new.labels
        && *taints == new.taints
        && *csi_drivers == new.csi_drivers;
    // Read only by the condition, resource and DRA members; the start only
    // by the deadline, which every reconcile recomputes.
    let same_node_members = *conditions == new.conditions
        && *extended_allocatable == new.extended_allocatable
        && *resource_slices == new.resource_slices
        && *created == new.created
        && *gated_since == new.gated_since;
    let scope = match (same_placement, same_node_members) {
        (false, _) => MemberScope::All,
        (true, false) => MemberScope::NodeMembers,
        (true, true) => MemberScope::Nothing,
    };
    let same_switches = *ready == new.ready
        && *opened_at == new.opened_at
        && *opened_by == new.opened_by
        && *suspended == new.suspended
        && *open_requested == new.open_requested
        && *boot_id == new.boot_id
        && *awaiting_reboot == new.awaiting_reboot
        // The fallback is read by the gate (`--replace-fallback=open`), the
        // timeout mark too (a mark another replica wrote is not written
        // again); the request is not, but is journaled with the node
        // (semantics.md §5.8).
        && replace.fallback == new.replace.fallback
        && replace.timed_out == new.replace.timed_out
        && replace.requested == new.replace.requested;
    (scope, same_switches)
}
