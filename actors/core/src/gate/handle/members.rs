//! Keeping the members in line with what the gate has seen, re-deriving only
//! those an input can have changed.

use std::borrow::Cow;

use super::Step;
use crate::gate::derive::{derive_all, derive_member, derive_readiness, node_members};
use crate::gate::event::Event;
use crate::vocab::member::{Expectation, Member, MemberId, Readiness};

/// Which members an input can have changed (see `Step::recompute_members`).
pub(super) enum MemberScope<'i> {
    /// The node, a timer, a write or the leadership changed: every member.
    All,
    /// Only the node's resourceVersion or nothing at all changed.
    Nothing,
    /// Only what the node reports of itself changed (its conditions, its
    /// devices, its start): the condition, resource and DRA members, whose
    /// judgement reads them. No DaemonSet, critical or canary member reads
    /// them.
    NodeMembers,
    /// One DaemonSet (`namespace/name`) changed or went away.
    DaemonSet(Cow<'i, str>),
    /// A pod changed or went away: the members of its controller (before and
    /// after the change) and the critical entries of its namespace.
    Pods {
        owners: [Option<Cow<'i, str>>; 2],
        namespace: Cow<'i, str>,
    },
}

impl Step<'_> {
    /// Brings `members` in line with what the gate has seen: every member
    /// for [`MemberScope::All`], else only those the input can have changed, plus
    /// any member whose pod became available by the passing of time. Either
    /// way the result equals
    /// [`derive_members`](crate::gate::derive_members) at `now`; the scope
    /// only saves the work that could not change anything.
    pub(super) fn recompute_members(&mut self, scope: &MemberScope<'_>) {
        let Some(node) = self.s.node.as_ref() else {
            return;
        };
        if let MemberScope::All = scope {
            // Every member derived from scratch; those no longer derived go.
            let desired = derive_all(node, &self.s.daemonsets, &self.s.pods, self.cfg, self.now);
            let gone: Vec<MemberId> = self
                .s
                .members
                .keys()
                .filter(|id| !desired.contains_key(*id))
                .cloned()
                .collect();
            for member in gone {
                self.emit(Event::MemberRemoved { member });
            }
            for (member, m) in desired {
                self.sync_member(member, Some(m));
            }
            return;
        }
        // The members `scope` names, each with whether only its readiness is
        // to be derived. Members whose pods alone changed keep their
        // expectation (the node and the DaemonSet did not change).
        let mut work: Vec<(MemberId, bool)> = Vec::new();
        match scope {
            MemberScope::All | MemberScope::Nothing => {}
            MemberScope::NodeMembers => {
                work.extend(node_members(self.cfg).map(|m| (m.id(), false)));
            }
            MemberScope::DaemonSet(key) => work.push((MemberId::DaemonSet(key.to_string()), false)),
            MemberScope::Pods { owners, namespace } => {
                for (key, ds) in &self.s.daemonsets {
                    if owners.iter().flatten().any(|o| **o == *ds.uid) {
                        work.push((MemberId::DaemonSet(key.clone()), true));
                    }
                }
                for entry in &self.cfg.critical {
                    if entry.namespace == **namespace {
                        work.push((MemberId::Critical(entry.name.clone()), true));
                    }
                }
                if matches!(&self.cfg.canary, Some(c) if c.namespace == **namespace) {
                    work.push((MemberId::Canary, true));
                }
            }
        }
        // Adds to `work` (readiness only) the members time alone may have
        // changed. Time changes a member only through minReadySeconds: one
        // waiting for a pod that is available by now, or one Ready whose
        // DaemonSet counts availability (another pod may have become
        // available, and the member reports the first by name). Most
        // clusters have no such DaemonSet: then no Ready member is looked up.
        let counts_availability = self
            .s
            .daemonsets
            .values()
            .any(|ds| ds.min_ready_seconds > 0);
        for (id, m) in &self.s.members {
            let timely = match (&m.readiness, id) {
                (Some(Readiness::Waiting { available_at, .. }), _) => {
                    available_at.is_some_and(|at| at <= self.now)
                }
                (Some(Readiness::Ready { .. }), MemberId::DaemonSet(key))
                    if counts_availability =>
                {
                    matches!(self.s.daemonsets.get(key), Some(ds) if ds.min_ready_seconds > 0)
                }
                _ => false,
            };
            if timely && !work.iter().any(|(w, _)| w == id) {
                work.push((id.clone(), true));
            }
        }
        for (id, readiness_only) in work {
            let Some(node) = self.s.node.as_ref() else {
                return;
            };
            let desired = match (readiness_only, self.s.members.get(&id)) {
                (true, Some(current)) if !current.is_expected() => continue,
                (true, Some(_)) => {
                    derive_readiness(&id, self.s, self.cfg, self.now).map(Member::expected)
                }
                _ => derive_member(
                    &id,
                    node,
                    &self.s.daemonsets,
                    &self.s.pods,
                    self.cfg,
                    self.now,
                ),
            };
            self.sync_member(id, desired);
        }
    }

    /// Emits what makes `members[id]` equal `desired` (`None`: no member).
    pub(super) fn sync_member(&mut self, member: MemberId, desired: Option<Member>) {
        let Some(Member {
            expectation,
            readiness,
        }) = desired
        else {
            if self.s.members.contains_key(&member) {
                self.emit(Event::MemberRemoved { member });
            }
            return;
        };
        let current = self.s.members.get(&member);
        if current.map(|m| &m.expectation) != Some(&expectation) {
            match expectation {
                Expectation::Expected => self.emit(Event::MemberExpected {
                    member: member.clone(),
                }),
                Expectation::NotExpected { reason, code } => self.emit(Event::MemberNotExpected {
                    member: member.clone(),
                    reason,
                    code,
                }),
            }
        }
        let current = self
            .s
            .members
            .get(&member)
            .and_then(|m| m.readiness.as_ref());
        if let Some(readiness) = readiness
            && current != Some(&readiness)
        {
            match readiness {
                Readiness::Ready { pod } => self.emit(Event::MemberReady { member, pod }),
                Readiness::Waiting { why, available_at } => self.emit(Event::MemberWaiting {
                    member,
                    why,
                    available_at,
                }),
            }
        }
    }
}
