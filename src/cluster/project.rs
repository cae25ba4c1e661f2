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
    NodeSelectorTerm, Owner, PodInfo, PodPlacement, Replacement, Shared, SliceInfo, Taint,
    Toleration,
};

use nodegate_core::vocab::annotations;

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
    node_in(n, &mut Interner::default())
}

/// [`node`], its label keys and values and its conditions' types and
/// statuses shared through `interner` with every other node that has the
/// same (the node watch's projection).
pub fn node_in(n: &Node, interner: &mut Interner) -> (Option<NodeInfo>, Vec<Oddity>) {
    let mut odd = Vec::new();
    let Some(name) = n.metadata.name.clone() else {
        return (None, vec![oddity("node", "has no name")]);
    };
    let created = match &n.metadata.creation_timestamp {
        Some(t) => t.0,
        None => {
            // The API server always sets it; an object without one cannot have a
            // meaningful deadline, so the epoch makes it "long past" and the
            // gate decides at once rather than waiting forever.
            odd.push(oddity(format!("node/{name}"), "has no creationTimestamp"));
            Timestamp::UNIX_EPOCH
        }
    };
    let found = n.metadata.annotations.as_ref();
    let mut time = |key, otherwise| time_annotation(found, key, otherwise, &name, &mut odd);
    let gated_since = time(annotations::GATED_SINCE, "using creationTimestamp");
    let opened_at = time(annotations::OPENED_AT, "ignored");
    let get = |key: &str| found.and_then(|a| a.get(key));
    let flag = |key: &str| get(key).is_some_and(|v| v == "true");
    let text = |key: &str| get(key).map(|v| Box::<str>::from(v.as_str()));
    let taints = n.spec.iter().flat_map(|s| s.taints.iter().flatten());
    let (ready, conditions) = node_conditions(n, interner);
    let replace = replacement(n, &name, &mut odd);
    let node_info = n.status.as_ref().and_then(|s| s.node_info.as_ref());
    let boot_id = node_info.map(|i| &i.boot_id).filter(|b| !b.is_empty());
    let info = NodeInfo {
        replace,
        conditions,
        csi_drivers: None,
        extended_allocatable: extended_allocatable(n),
        resource_slices: Vec::new(),
        uid: n.metadata.uid.clone().unwrap_or_default(),
        resource_version: n.metadata.resource_version.clone().unwrap_or_default(),
        labels: labels_in(n.metadata.labels.as_ref(), interner),
        taints: taints.map(taint).collect(),
        created,
        gated_since,
        ready,
        opened_at,
        name,
        opened_before: found.is_some_and(|a| a.contains_key(annotations::OPENED_AT)),
        annotations_present: found.is_some(),
        suspended: flag(annotations::SUSPEND),
        open_requested: flag(annotations::OPEN),
        ignored: flag(annotations::NODE_IGNORE),
        opened_unready: get(annotations::OPENED_BY)
            .is_some_and(|v| v == "timeout" || v == "manual" || v == "external"),
        regated_for: text(annotations::REGATED_FOR),
        rule_taints: text(annotations::CONDITION_TAINTS),
        reboot_pending: text(annotations::REBOOT_PENDING),
        kured_rebooting: found.is_some_and(|a| a.contains_key(KURED_REBOOT_IN_PROGRESS)),
        awaiting_reboot: text(annotations::AWAITING_REBOOT),
        boot_id: boot_id.map(|b| b.as_str().into()),
    };
    (Some(info), odd)
}

/// The node's allocatable extended resources (names with a domain prefix,
/// such as `nvidia.com/gpu`; `cpu`, `memory`, `pods` and the like have
/// none), each quantity as written: what `criticalResources` reads.
fn extended_allocatable(n: &Node) -> BTreeMap<String, String> {
    let allocatable = n.status.iter().flat_map(|s| s.allocatable.iter().flatten());
    allocatable
        .filter(|(name, _)| name.contains('/'))
        .map(|(name, q)| (name.clone(), q.0.clone()))
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
fn replacement(n: &Node, name: &str, odd: &mut Vec<Oddity>) -> Replacement {
    let found = n.metadata.annotations.as_ref();
    let get = |key: &str| found.and_then(|a| a.get(key)).filter(|v| !v.is_empty());
    let labels = n.metadata.labels.as_ref();
    let karpenter = labels.is_some_and(|l| l.contains_key(KARPENTER_NODEPOOL_LABEL));
    let owner = match (get(CAPI_MACHINE_ANNOTATION), get(CAPI_NAMESPACE_ANNOTATION)) {
        (Some(machine), Some(namespace)) => Owner::Machine {
            namespace: namespace.clone(),
            name: machine.clone(),
        },
        _ if karpenter => Owner::NodeClaim,
        _ => Owner::None,
    };
    let spec = n.spec.as_ref();
    let provider_id = spec.and_then(|s| s.provider_id.as_deref());
    let mut time = |key: &str| time_annotation(found, key, "ignored", name, odd);
    let timed_out = time(annotations::TIMED_OUT);
    let requested = time(annotations::REPLACE_REQUESTED);
    let fallback_at = time(annotations::REPLACE_FALLBACK_AT);
    let fallback = get(annotations::REPLACE_FALLBACK)
        .and_then(|v| v.parse::<Fallback>().ok())
        .zip(fallback_at);
    Replacement {
        owner,
        provider_id: provider_id.filter(|p| !p.is_empty()).map(Into::into),
        timed_out,
        requested,
        fallback,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
    }
}

/// The time in annotation `key` of a node, if it has one that parses; one
/// that does not is reported in `odd` (`otherwise` says what happens
/// instead) and treated as absent.
fn time_annotation(
    found: Option<&BTreeMap<String, String>>,
    key: &str,
    otherwise: &str,
    name: &str,
    odd: &mut Vec<Oddity>,
) -> Option<Timestamp> {
    let v = found?.get(key)?;
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
    n: &Node,
    interner: &mut Interner,
) -> (NodeReady, BTreeMap<Shared, NodeCondition>) {
    let listed = n.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = listed
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map_or(NodeReady::Unknown, |c| NodeReady::from_status(&c.status));
    let conditions = listed.into_iter().flatten().map(|c| {
        let cond = NodeCondition {
            status: interner.get(&c.status),
            since: c.last_transition_time.as_ref().map(|t| t.0),
        };
        (interner.get(&c.type_), cond)
    });
    (ready, conditions.collect())
}

pub fn taint(t: &core::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.clone(),
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
    pod_in(p, &mut Interner::default())
}

/// [`pod`], its namespace, node, owner and phase shared through `interner`
/// with every other pod that has the same (the watches' projection).
pub fn pod_in(p: &Pod, interner: &mut Interner) -> Option<PodInfo> {
    let namespace = interner.get(p.metadata.namespace.as_deref()?);
    let name = p.metadata.name.clone()?;
    let mut owners = p.metadata.owner_references.iter().flatten();
    let controller = owners.find(|r| r.controller == Some(true));
    let controller_uid = controller.map(|r| interner.get(&r.uid));
    let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let found = p.metadata.annotations.as_ref();
    let flag = |key: &str| found.and_then(|a| a.get(key)).is_some_and(|v| v == "true");
    let status = p.status.as_ref();
    let condition = |type_: &str| {
        let conditions = status.and_then(|s| s.conditions.as_ref());
        conditions.and_then(|cs| cs.iter().find(|c| c.type_ == type_))
    };
    let ready_cond = condition("Ready");
    let ready_since = ready_cond.and_then(|c| c.last_transition_time.as_ref());
    Some(PodInfo {
        uid: p.metadata.uid.as_deref().unwrap_or_default().into(),
        node_name: interner.get(node.unwrap_or_default()),
        labels: labels_in(p.metadata.labels.as_ref(), interner),
        controller_uid,
        terminating: p.metadata.deletion_timestamp.is_some(),
        phase: interner.get(status.and_then(|s| s.phase.as_deref()).unwrap_or_default()),
        ready: ready_cond.is_some_and(|c| c.status == "True"),
        ready_since: ready_since.map(|t| t.0).into(),
        ready_annotation: flag(annotations::POD_READY),
        sandbox_ready: condition(SANDBOX_CONDITION).is_some_and(|c| c.status == "True"),
        status_note: status.and_then(pod_status_note).map(Shared::from),
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
fn pod_status_note(s: &core::PodStatus) -> Option<String> {
    let join = |reason: Option<&String>, message: Option<&String>| {
        let reason = reason.filter(|r| !r.is_empty());
        match (reason, message.filter(|m| !m.is_empty())) {
            (Some(r), Some(m)) => Some(format!("{r}: {m}")),
            (r, m) => r.or(m).cloned(),
        }
    };
    let own = join(s.reason.as_ref(), s.message.as_ref());
    let container = || {
        s.container_statuses.iter().flatten().find_map(|c| {
            let state = c.state.as_ref()?;
            if let Some(w) = &state.waiting {
                return join(w.reason.as_ref(), w.message.as_ref());
            }
            let t = state.terminated.as_ref()?;
            join(t.reason.as_ref(), t.message.as_ref())
        })
    };
    let condition = || {
        s.conditions.iter().flatten().find_map(|c| {
            (c.status != "True")
                .then(|| join(c.reason.as_ref(), c.message.as_ref()))
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
    let pairs = l.into_iter().flatten();
    pairs
        .map(|(k, v)| (interner.get(k), interner.get(v)))
        .collect()
}

#[cfg(test)]
mod tests;
