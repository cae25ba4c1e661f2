//! Projections: whole Kubernetes objects in, the compact model of
//! `nodegate_core::vocab::model` out, the same for every reader. Projections
//! never fail: a field the gate cannot use (an unparsable annotation, a
//! missing timestamp) is reported to the caller and treated as absent,
//! because a controller must keep working on the rest of the cluster while
//! one object is odd.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{self as core, Node, Pod};
use k8s_openapi::api::resource::v1::ResourceSlice;
use k8s_openapi::api::storage::v1::CSINode;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodegate_core::closing::regating::reboot::{KURED_NODE_LOCK, KURED_REBOOT_IN_PROGRESS};
use nodegate_core::net::entrance::BoundPod;
use nodegate_core::vocab::model::{
    CAPI_MACHINE_ANNOTATION, CAPI_NAMESPACE_ANNOTATION, DaemonSetInfo, Fallback, Interner,
    KARPENTER_NODEPOOL_LABEL, Labels, NodeCondition, NodeInfo, NodeReady, NodeSelectorRequirement,
    NodeSelectorTerm, OpenedByMark, Owner, PodInfo, PodPlacement, Replacement, Shared, SliceInfo,
    Taint, Toleration,
};

use nodegate_core::vocab::annotations;

pub mod view;

pub use view::{NodeView, PodView};
use view::{Pairs, Reasoned, TaintView};

/// Something a projection had to ignore; the caller logs it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Oddity {
    pub object: String,
    pub what: String,
}

fn oddity(object: impl Into<String>, what: impl Into<String>) -> Oddity {
    let (object, what) = (object.into(), what.into());
    Oddity { object, what }
}

pub fn node(n: &Node) -> (Option<NodeInfo>, Vec<Oddity>) {
    node_in(&NodeView::of(n), &mut Interner::default())
}

/// [`node`] of a node in either encoding, its label keys and values and
/// its conditions' types and statuses shared through `interner` with every
/// other node that has the same (the node watch's projection).
pub fn node_in(n: &NodeView, interner: &mut Interner) -> (Option<NodeInfo>, Vec<Oddity>) {
    let mut odd = Vec::new();
    let Some(name) = n.name.as_deref().map(str::to_owned) else {
        return (None, vec![oddity("node", "has no name")]);
    };
    let created = match n.created {
        Some(t) => t,
        None => {
            // The API server always sets it; an object without one cannot have a
            // meaningful deadline, so the epoch makes it "long past" and the
            // gate decides at once rather than waiting forever.
            odd.push(oddity(format!("node/{name}"), "has no creationTimestamp"));
            Timestamp::UNIX_EPOCH
        }
    };
    let found = n.annotations.as_ref();
    let mut time = |key, otherwise| time_annotation(found, key, otherwise, &name, &mut odd);
    let gated_since = time(annotations::GATED_SINCE, "using creationTimestamp");
    let opened_at = time(annotations::OPENED_AT, "ignored");
    let get = |key: &str| found.and_then(|a| a.get(key));
    let flag = |key: &str| get(key).is_some_and(|v| v == "true");
    let text = |key: &str| get(key).map(|v| Box::<str>::from(v.as_ref()));
    let has = |key: &str| found.is_some_and(|a| a.contains_key(key));
    let (ready, conditions) = node_conditions(n, interner);
    let replace = replacement(n, &name, &mut odd);
    let boot_id = n.boot_id.as_deref().filter(|b| !b.is_empty());
    let info = NodeInfo {
        replace,
        conditions,
        csi_drivers: None,
        extended_allocatable: extended_allocatable(n),
        resource_slices: Vec::new(),
        uid: n.uid.as_deref().unwrap_or_default().to_owned(),
        resource_version: n.resource_version.as_deref().unwrap_or_default().to_owned(),
        labels: labels_of(n.labels.as_ref(), interner),
        taints: n.taints.iter().map(taint).collect(),
        created,
        gated_since,
        ready,
        opened_at,
        name,
        opened_before: has(annotations::OPENED_AT),
        annotations_present: found.is_some(),
        suspended: flag(annotations::SUSPEND),
        open_requested: flag(annotations::OPEN),
        ignored: flag(annotations::NODE_IGNORE),
        opened_by: get(annotations::OPENED_BY).and_then(|v| OpenedByMark::from_word(&v)),
        regated_for: text(annotations::REGATED_FOR),
        rule_taints: text(annotations::CONDITION_TAINTS),
        reboot_pending: text(annotations::REBOOT_PENDING),
        kured_rebooting: has(KURED_REBOOT_IN_PROGRESS),
        awaiting_reboot: text(annotations::AWAITING_REBOOT),
        boot_id: boot_id.map(Into::into),
    };
    (Some(info), odd)
}

/// The node's allocatable extended resources (names with a domain prefix,
/// such as `nvidia.com/gpu`; `cpu`, `memory`, `pods` and the like have
/// none), each quantity as written: what `criticalResources` reads.
fn extended_allocatable(n: &NodeView) -> BTreeMap<String, String> {
    let allocatable = n.allocatable.iter();
    allocatable
        .filter(|(name, _)| name.contains('/'))
        .map(|(name, q)| (name.to_string(), q.to_string()))
        .collect()
}

/// A ResourceSlice local to one node (`spec.nodeName`): the node's name and
/// what pool completeness needs of it. `None` for a slice of no one node
/// (`nodeSelector`, `allNodes`, `perDeviceNodeSelection`: devices reachable
/// from many nodes, which no node's start-up publishes; semantics.md §6.8)
/// and for one without a name.
pub fn resource_slice(s: &ResourceSlice) -> Option<(String, SliceInfo)> {
    let node = s.spec.node_name.clone().filter(|n| !n.is_empty())?;
    let pool = &s.spec.pool;
    let mut owners = s.metadata.owner_references.iter().flatten();
    let owner = owners.find(|r| r.kind == "Node" && r.api_version == "v1" && r.name == node);
    let owner_uid = owner.map(|r| r.uid.clone()).unwrap_or_default();
    let slice = SliceInfo {
        name: s.metadata.name.clone()?,
        driver: s.spec.driver.clone(),
        pool: pool.name.clone(),
        generation: pool.generation,
        slice_count: pool.resource_slice_count,
        owner_uid,
    };
    Some((node, slice))
}

/// The node's owner and nodegate's replace marks (`--on-timeout=replace`).
fn replacement(n: &NodeView, name: &str, odd: &mut Vec<Oddity>) -> Replacement {
    let found = n.annotations.as_ref();
    let get = |key: &str| found.and_then(|a| a.get(key)).filter(|v| !v.is_empty());
    let labels = n.labels.as_ref();
    let karpenter = labels.is_some_and(|l| l.contains_key(KARPENTER_NODEPOOL_LABEL));
    let owner = match (get(CAPI_MACHINE_ANNOTATION), get(CAPI_NAMESPACE_ANNOTATION)) {
        (Some(machine), Some(namespace)) => Owner::Machine {
            namespace: namespace.into_owned(),
            name: machine.into_owned(),
        },
        _ if karpenter => Owner::NodeClaim,
        _ => Owner::None,
    };
    let mut time = |key: &str| time_annotation(found, key, "ignored", name, odd);
    let timed_out = time(annotations::TIMED_OUT);
    let requested = time(annotations::REPLACE_REQUESTED);
    let fallback_at = time(annotations::REPLACE_FALLBACK_AT);
    let fallback = get(annotations::REPLACE_FALLBACK)
        .and_then(|v| v.parse::<Fallback>().ok())
        .zip(fallback_at);
    let provider_id = n.provider_id.as_deref().filter(|p| !p.is_empty());
    Replacement {
        owner,
        provider_id: provider_id.map(Into::into),
        timed_out,
        requested,
        fallback,
        unschedulable: n.unschedulable,
    }
}

/// The time in annotation `key` of a node, if it has one that parses; one
/// that does not is reported in `odd` (`otherwise` says what happens
/// instead) and treated as absent.
fn time_annotation(
    found: Option<&Pairs>,
    key: &str,
    otherwise: &str,
    name: &str,
    odd: &mut Vec<Oddity>,
) -> Option<Timestamp> {
    let v = found?.get(key)?;
    let v = v.as_ref();
    match v.parse::<Timestamp>() {
        Ok(t) => Some(t),
        Err(e) => {
            let what = format!("annotation {key}={v:?} is not an RFC 3339 time ({e}); {otherwise}");
            odd.push(oddity(format!("node/{name}"), what));
            None
        }
    }
}

/// The node's Ready condition, and every condition by type.
fn node_conditions(
    n: &NodeView,
    interner: &mut Interner,
) -> (NodeReady, BTreeMap<Shared, NodeCondition>) {
    let listed = &n.conditions;
    let ready = listed
        .iter()
        .find(|c| c.type_ == "Ready")
        .map_or(NodeReady::Unknown, |c| NodeReady::from_status(&c.status));
    let conditions = listed.iter().map(|c| {
        let cond = NodeCondition {
            status: interner.get(&c.status),
            since: c.since,
        };
        (interner.get(&c.type_), cond)
    });
    (ready, conditions.collect())
}

fn taint(t: &TaintView) -> Taint {
    Taint {
        key: t.key.to_string(),
        value: t.value.as_deref().unwrap_or_default().to_owned(),
        effect: t.effect.to_string(),
    }
}

pub fn daemonset(ds: &DaemonSet) -> Option<DaemonSetInfo> {
    let namespace = ds.metadata.namespace.clone()?;
    let name = ds.metadata.name.clone()?;
    let spec = ds.spec.as_ref();
    let template = spec.and_then(|s| s.template.spec.as_ref()).map(placement);
    let found = ds.metadata.annotations.iter().flatten();
    // nodegate's own, and kured's reboot lock (semantics.md §6.10): only
    // kured's own DaemonSet carries it.
    let kept = found
        .filter(|(k, _)| k.starts_with(annotations::PREFIX) || *k == KURED_NODE_LOCK)
        .map(|(k, v)| (k.as_str().into(), v.as_str().into()))
        .collect();
    Some(DaemonSetInfo {
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        labels: labels(ds.metadata.labels.as_ref()),
        annotations: kept,
        template: template.unwrap_or_default(),
        min_ready_seconds: spec.and_then(|s| s.min_ready_seconds).unwrap_or(0),
        namespace,
        name,
    })
}

/// The placement-relevant part of a pod spec.
pub fn placement(spec: &core::PodSpec) -> PodPlacement {
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|sel| sel.node_selector_terms.iter().map(term).collect());
    PodPlacement {
        node_selector: labels(spec.node_selector.as_ref()),
        required_node_affinity: required,
        tolerations: spec.tolerations.iter().flatten().map(toleration).collect(),
        node_name: spec.node_name.clone().unwrap_or_default(),
        host_network: spec.host_network.unwrap_or(false),
    }
}

fn term(t: &core::NodeSelectorTerm) -> NodeSelectorTerm {
    let reqs = |rs: &Option<Vec<core::NodeSelectorRequirement>>| {
        let rs = rs.iter().flatten();
        rs.map(|r| NodeSelectorRequirement {
            key: r.key.clone(),
            operator: r.operator.clone(),
            values: r.values.clone().unwrap_or_default(),
        })
        .collect()
    };
    NodeSelectorTerm {
        match_expressions: reqs(&t.match_expressions),
        match_fields: reqs(&t.match_fields),
    }
}

fn toleration(t: &core::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator: t.operator.clone().unwrap_or_default(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone().unwrap_or_default(),
    }
}

pub fn pod(p: &Pod) -> Option<PodInfo> {
    pod_in(&PodView::of(p), &mut Interner::default(), Keep::ALL)
}

/// What of a pod the projection keeps beyond what every gate reads.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    /// Its labels (critical pods and canaries are found by them).
    pub labels: bool,
    /// Its sandbox condition and status note (a canary's proof, and why it
    /// is not running).
    pub note: bool,
}

impl Keep {
    pub const ALL: Keep = Keep {
        labels: true,
        note: true,
    };
}

/// [`pod`] of a pod in either encoding, its namespace, node, owner and
/// phase shared through `interner` with every other pod that has the same
/// (the watches' projection). What `keep` leaves out is left empty.
pub fn pod_in(p: &PodView, interner: &mut Interner, keep: Keep) -> Option<PodInfo> {
    let namespace = interner.get(p.namespace.as_deref()?);
    let name = p.name.as_deref()?;
    let controller_uid = p.controller_uid.as_deref().map(|uid| interner.get(uid));
    let flag = |key: &str| {
        let value = p.annotations.as_ref().and_then(|a| a.get(key));
        value.is_some_and(|v| v == "true")
    };
    let condition = |type_: &str| p.conditions.iter().find(|c| c.type_ == type_);
    let ready_cond = condition("Ready");
    let labels = match &p.labels {
        Some(l) if keep.labels => labels_of(Some(l), interner),
        _ => Labels::default(),
    };
    let sandbox = keep.note && condition(SANDBOX_CONDITION).is_some_and(|c| c.status == "True");
    let note = keep.note.then(|| pod_status_note(p)).flatten();
    Some(PodInfo {
        uid: p.uid.as_deref().unwrap_or_default().into(),
        node_name: interner.get(p.node_name.as_deref().unwrap_or_default()),
        labels,
        controller_uid,
        terminating: p.deleting,
        phase: interner.get(p.phase.as_deref().unwrap_or_default()),
        ready: ready_cond.is_some_and(|c| c.status == "True"),
        ready_since: ready_cond.and_then(|c| c.since).into(),
        ready_annotation: flag(annotations::POD_READY),
        sandbox_ready: sandbox,
        status_note: note.map(Shared::from),
        namespace,
        name: name.into(),
    })
}

/// The mirror-pod annotation the kubelet sets on the API copy of a static pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A pod's metadata as the "is there a workload" rule reads it.
pub fn bound_pod(meta: &ObjectMeta) -> BoundPod {
    let mut owners = meta.owner_references.iter().flatten();
    let controller = owners.find(|o| o.controller == Some(true));
    let found = meta.annotations.as_ref();
    BoundPod {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        controller_kind: controller.map(|o| o.kind.clone()),
        mirror: found.is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
    }
}

/// The pod condition the kubelet sets once the pod's sandbox and network
/// are up (Kubernetes 1.29+; the canary member's proof).
pub const SANDBOX_CONDITION: &str = "PodReadyToStartContainers";

/// Why a pod is not running, in the kubelet's words: the pod's own reason
/// and message (a rejected or evicted pod), else the first container
/// waiting or terminated with a reason, else a condition that is not True
/// and says why. At most [`NOTE_MAX`] bytes.
fn pod_status_note(p: &PodView) -> Option<String> {
    let join = |reason: Option<&str>, message: Option<&str>| {
        let reason = reason.filter(|r| !r.is_empty());
        match (reason, message.filter(|m| !m.is_empty())) {
            (Some(r), Some(m)) => Some(format!("{r}: {m}")),
            (r, m) => r.or(m).map(str::to_owned),
        }
    };
    let words = |r: &Reasoned| join(r.reason.as_deref(), r.message.as_deref());
    let own = words(&p.reason);
    let container = || {
        p.containers
            .iter()
            .find_map(|c| match (&c.waiting, &c.terminated) {
                (Some(waiting), _) => words(waiting),
                (None, terminated) => words(terminated.as_ref()?),
            })
    };
    let condition = || {
        p.conditions.iter().find_map(|c| {
            (c.status != "True")
                .then(|| join(c.reason.as_deref(), c.message.as_deref()))
                .flatten()
        })
    };
    let mut note = own.or_else(container).or_else(condition)?;
    // The last character boundary at or below NOTE_MAX (the length itself
    // when it is shorter).
    let cut = (0..=NOTE_MAX).rfind(|&i| note.is_char_boundary(i));
    note.truncate(cut.unwrap_or(0));
    Some(note)
}

/// The longest note kept of a pod's status.
pub const NOTE_MAX: usize = 256;

/// A CSINode: its node's name (a CSINode is named after its node) and the
/// names of the CSI drivers it lists.
pub fn csinode(c: &CSINode) -> Option<(String, Vec<String>)> {
    let name = c.metadata.name.clone()?;
    let drivers = c.spec.drivers.iter().map(|d| d.name.clone()).collect();
    Some((name, drivers))
}

pub fn labels(l: Option<&BTreeMap<String, String>>) -> Labels {
    labels_in(l, &mut Interner::default())
}

/// [`labels`], keys and values shared through `interner`.
pub fn labels_in(l: Option<&BTreeMap<String, String>>, interner: &mut Interner) -> Labels {
    labels_of(l.map(Pairs::Map).as_ref(), interner)
}

fn labels_of(pairs: Option<&Pairs>, interner: &mut Interner) -> Labels {
    let Some(pairs) = pairs else {
        return Labels::default();
    };
    let mut labels = Vec::with_capacity(pairs.len());
    pairs.for_each(|k, v| labels.push((interner.get(k), interner.get(v))));
    labels.into_iter().collect()
}

#[cfg(test)]
mod tests;
