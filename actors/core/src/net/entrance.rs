//! The entrances: when nodegate puts its startup taint on a node that does
//! not carry one (semantics.md §6.1–6.3): [`admit`], [`late_taint`] and
//! [`backfill`], each a pure decision over what the caller has read. The
//! net and backfill also need [`workload_pods`] empty, after a LIST of the
//! node's pods.

use jiff::{SignedDuration, Timestamp};

use crate::rules::placement::ManagedTaint;
use crate::rules::startup::StartupTaints;
use crate::vocab::config::Scope;
use crate::vocab::model::{Labels, NodeInfo, Taint};

/// `nodegate.dev/ignore: "true"`: nodegate never puts a taint on this node
/// (a gate already running on it still opens).
pub const IGNORE_ANNOTATION: &str = crate::vocab::annotations::NODE_IGNORE;

/// What an entrance needs of a node: a view of the one model of a node,
/// [`NodeInfo`], made by [`view`] (tests build it directly).
#[derive(Debug, Clone, Copy)]
pub struct NodeView<'a> {
    pub labels: &'a Labels,
    pub taints: &'a [Taint],
    /// `nodegate.dev/ignore` is `"true"`.
    pub ignored: bool,
    /// `nodegate.dev/opened-at` is present: nodegate opened this node before.
    pub opened_before: Option<Timestamp>,
    /// `metadata.creationTimestamp`; absent in an admission request.
    pub created: Option<Timestamp>,
}

/// A node as the index holds it, as the entrances read it. An unreadable
/// `opened-at` counts as an opening at the epoch: nodegate wrote something
/// there, so the node was opened before.
pub fn view(node: &NodeInfo) -> NodeView<'_> {
    NodeView {
        labels: &node.labels,
        taints: &node.taints,
        ignored: node.ignored,
        opened_before: node
            .opened_at
            .or(node.opened_before.then_some(Timestamp::UNIX_EPOCH)),
        created: Some(node.created),
    }
}

/// Why an entrance leaves a node as it is. Each variant is worded by its
/// `Display` for the `backfill` output, the Events and the webhook's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// `--node-selector` does not match the node's labels.
    OutOfScope,
    /// Annotated `nodegate.dev/ignore: "true"`.
    Ignored,
    /// It already carries this managed taint.
    AlreadyGated(Taint),
    /// `nodegate.dev/opened-at` says nodegate opened it before.
    OpenedBefore(Timestamp),
    /// Created longer ago than the net's window.
    TooOld { age: SignedDuration },
    /// Pods other than DaemonSet and mirror pods are bound to it.
    HasWorkload(Vec<String>),
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::OutOfScope => write!(f, "excluded by the node selector"),
            Skip::Ignored => write!(f, "annotated {IGNORE_ANNOTATION}=true"),
            Skip::AlreadyGated(t) => write!(f, "already carries {t}"),
            Skip::OpenedBefore(at) => write!(f, "opened before, at {at:.0}"),
            Skip::TooOld { age } => {
                let age = age.as_secs();
                write!(f, "created {age}s ago, outside the new-node window")
            }
            Skip::HasWorkload(pods) => {
                const SHOWN: usize = 3;
                let shown: Vec<&str> = pods.iter().take(SHOWN).map(String::as_str).collect();
                write!(f, "has workload pods: {}", shown.join(", "))?;
                if pods.len() > SHOWN {
                    write!(f, " and {} more", pods.len() - SHOWN)?;
                }
                Ok(())
            }
        }
    }
}

/// The checks every entrance makes first, in the order an operator asks
/// them: is it ours, may we touch it, is it gated already. Re-gating makes
/// only these.
pub fn open_and_ours(
    node: &NodeView<'_>,
    scope: &Scope,
    managed: &[ManagedTaint],
) -> Result<(), Skip> {
    if !scope.includes(node.labels) {
        return Err(Skip::OutOfScope);
    }
    if node.ignored {
        return Err(Skip::Ignored);
    }
    let gated = node
        .taints
        .iter()
        .find(|t| managed.iter().any(|m| m.matches(t)));
    gated.map_or(Ok(()), |t| Err(Skip::AlreadyGated(t.clone())))
}

/// What the webhook answers for a Node CREATE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Add `taint` (the one [`StartupTaints::for_node`] chooses: key and
    /// effect, no value).
    /// `create_list`: the node has no `spec.taints` yet, so the patch creates
    /// the list rather than appending to it.
    AddTaint {
        taint: Taint,
        create_list: bool,
    },
    Unchanged(Skip),
}

/// §6.1: a node in scope, not ignored and carrying none of the managed taints
/// gets the startup taint chosen for its labels (`startup`). `spec_taints_present` tells apart a node with an empty
/// `spec.taints` list from one without the field (the patch differs).
pub fn admit(
    node: &NodeView<'_>,
    spec_taints_present: bool,
    scope: &Scope,
    managed: &[ManagedTaint],
    startup: &StartupTaints,
) -> Admission {
    if let Err(skip) = open_and_ours(node, scope, managed) {
        return Admission::Unchanged(skip);
    }
    Admission::AddTaint {
        taint: startup.for_node(node.labels).to_taint(),
        create_list: !spec_taints_present,
    }
}

/// §6.2, before the pod LIST: whether a node seen without the taint is a
/// candidate for the late taint at `now`. The caller then lists the node's
/// pods and taints it only if [`workload_pods`] finds none.
pub fn late_taint(
    node: &NodeView<'_>,
    scope: &Scope,
    managed: &[ManagedTaint],
    now: Timestamp,
    window: SignedDuration,
) -> Result<(), Skip> {
    backfill(node, scope, managed)?;
    match node.created.map(|created| now.duration_since(created)) {
        Some(age) if age >= window => Err(Skip::TooOld { age }),
        _ => Ok(()),
    }
}

/// §6.3, before the pod LIST: the same as the net, with no window.
pub fn backfill(node: &NodeView<'_>, scope: &Scope, managed: &[ManagedTaint]) -> Result<(), Skip> {
    open_and_ours(node, scope, managed)?;
    node.opened_before
        .map_or(Ok(()), |at| Err(Skip::OpenedBefore(at)))
}

/// A pod bound to a node, as far as "is there a workload yet" needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundPod {
    pub namespace: String,
    pub name: String,
    /// The kind of its controller owner (`ownerReferences` with
    /// `controller: true`), if any.
    pub controller_kind: Option<String>,
    /// Carries `kubernetes.io/config.mirror`: the API's copy of a static pod.
    pub mirror: bool,
}

/// The pods on a node that are workloads, as `namespace/name`: every pod but
/// DaemonSet pods (they belong on every node, and wait for the taint's
/// toleration anyway) and mirror pods (the kubelet's own static pods).
pub fn workload_pods(pods: &[BoundPod]) -> Vec<String> {
    pods.iter()
        .filter(|p| !p.mirror && p.controller_kind.as_deref() != Some("DaemonSet"))
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .collect()
}

#[cfg(test)]
mod tests;
