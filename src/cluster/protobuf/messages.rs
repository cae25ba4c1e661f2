//! The API server's protobuf messages, each declaring only the fields that
//! `project` and `server_time` read, with the field numbers of k8s.io/api's
//! `generated.proto` (v0.36). prost skips every other field without
//! building it: managed fields, images, container specs, volumes.
//!
//! Decoded messages become the generated `k8s_openapi` types with only
//! those fields set, so one projection serves both encodings. Text is
//! declared as bytes: prost refuses a string that is not UTF-8, which Go
//! never checks (see `lossy`). What Go's
//! JSON leaves out when empty (`omitempty`), its protobuf still writes: an
//! empty string, map or list, and the zero time, become `None` here as they
//! are in JSON.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;

/// `runtime.Unknown`: the envelope after the magic `k8s\0`.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub raw: Option<bytes::Bytes>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
}

/// `metav1.WatchEvent` (a watch stream's frame; not enveloped).
#[derive(Clone, PartialEq, Message)]
pub struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub type_: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub raw: Option<bytes::Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListMeta {
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub continue_: Option<String>,
}

/// `metav1.Status`: an error answer, or a watch's ERROR event.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(bytes = "vec", optional, tag = "1")]
    kind: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "3")]
    name: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "4")]
    uid: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    api_version: Option<Vec<u8>>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    #[prost(bytes = "vec", optional, tag = "1")]
    name: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "3")]
    namespace: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "5")]
    uid: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "6")]
    resource_version: Option<Vec<u8>>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<Time>,
    #[prost(message, repeated, tag = "11")]
    labels: Vec<Entry>,
    #[prost(message, repeated, tag = "12")]
    annotations: Vec<Entry>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
}

#[derive(Clone, PartialEq, Message)]
struct Taint {
    #[prost(bytes = "vec", optional, tag = "1")]
    key: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    value: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "3")]
    effect: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSpec {
    #[prost(bytes = "vec", optional, tag = "3")]
    provider_id: Option<Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    unschedulable: Option<bool>,
    #[prost(message, repeated, tag = "5")]
    taints: Vec<Taint>,
}

/// A node's condition as the node projection reads it: no reason or
/// message (a node's change every heartbeat carries both, and nothing
/// about a node's gate reads them). The field numbers are a pod's too.
#[derive(Clone, PartialEq, Message)]
struct NodeCondition {
    #[prost(bytes = "vec", optional, tag = "1")]
    type_: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    status: Option<Vec<u8>>,
    #[prost(message, optional, tag = "4")]
    last_transition_time: Option<Time>,
}

/// A pod's condition: its reason and message say why a pod is not
/// running (`project`'s status note).
#[derive(Clone, PartialEq, Message)]
struct Condition {
    #[prost(bytes = "vec", optional, tag = "1")]
    type_: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    status: Option<Vec<u8>>,
    #[prost(message, optional, tag = "4")]
    last_transition_time: Option<Time>,
    #[prost(bytes = "vec", optional, tag = "5")]
    reason: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "6")]
    message: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct QuantityMsg {
    #[prost(bytes = "vec", optional, tag = "1")]
    string: Option<Vec<u8>>,
}

/// An entry of a `map<string, string>`.
#[derive(Clone, PartialEq, Message)]
struct Entry {
    #[prost(bytes = "vec", optional, tag = "1")]
    key: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    value: Option<Vec<u8>>,
}

/// An entry of `allocatable`, a `map<string, Quantity>`. Its name is
/// kept as a slice of the frame (no copy) until the conversion decides to
/// keep it.
#[derive(Clone, PartialEq, Message)]
struct QuantityEntry {
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<bytes::Bytes>,
    #[prost(message, optional, tag = "2")]
    value: Option<QuantityMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSystemInfo {
    #[prost(bytes = "vec", optional, tag = "3")]
    boot_id: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeStatus {
    #[prost(message, repeated, tag = "2")]
    allocatable: Vec<QuantityEntry>,
    #[prost(message, repeated, tag = "4")]
    conditions: Vec<NodeCondition>,
    #[prost(message, optional, tag = "7")]
    node_info: Option<NodeSystemInfo>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Node {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NodeSpec>,
    #[prost(message, optional, tag = "3")]
    status: Option<NodeStatus>,
}

#[derive(Clone, PartialEq, Message)]
struct Requirement {
    #[prost(bytes = "vec", optional, tag = "1")]
    key: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    operator: Option<Vec<u8>>,
    #[prost(bytes = "vec", repeated, tag = "3")]
    values: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct SelectorTerm {
    #[prost(message, repeated, tag = "1")]
    match_expressions: Vec<Requirement>,
    #[prost(message, repeated, tag = "2")]
    match_fields: Vec<Requirement>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSelector {
    #[prost(message, repeated, tag = "1")]
    terms: Vec<SelectorTerm>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeAffinity {
    #[prost(message, optional, tag = "1")]
    required: Option<NodeSelector>,
}

#[derive(Clone, PartialEq, Message)]
struct Affinity {
    #[prost(message, optional, tag = "1")]
    node_affinity: Option<NodeAffinity>,
}

#[derive(Clone, PartialEq, Message)]
struct Toleration {
    #[prost(bytes = "vec", optional, tag = "1")]
    key: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    operator: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "3")]
    value: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "4")]
    effect: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct PodSpec {
    #[prost(message, repeated, tag = "7")]
    node_selector: Vec<Entry>,
    #[prost(bytes = "vec", optional, tag = "10")]
    node_name: Option<Vec<u8>>,
    #[prost(bool, optional, tag = "11")]
    host_network: Option<bool>,
    #[prost(message, optional, tag = "18")]
    affinity: Option<Affinity>,
    #[prost(message, repeated, tag = "22")]
    tolerations: Vec<Toleration>,
}

#[derive(Clone, PartialEq, Message)]
struct Waiting {
    #[prost(bytes = "vec", optional, tag = "1")]
    reason: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "2")]
    message: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct Terminated {
    #[prost(bytes = "vec", optional, tag = "3")]
    reason: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "4")]
    message: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct ContainerState {
    #[prost(message, optional, tag = "1")]
    waiting: Option<Waiting>,
    #[prost(message, optional, tag = "3")]
    terminated: Option<Terminated>,
}

#[derive(Clone, PartialEq, Message)]
struct ContainerStatus {
    #[prost(bytes = "vec", optional, tag = "1")]
    name: Option<Vec<u8>>,
    #[prost(message, optional, tag = "2")]
    state: Option<ContainerState>,
}

#[derive(Clone, PartialEq, Message)]
struct PodStatus {
    #[prost(bytes = "vec", optional, tag = "1")]
    phase: Option<Vec<u8>>,
    #[prost(message, repeated, tag = "2")]
    conditions: Vec<Condition>,
    #[prost(bytes = "vec", optional, tag = "3")]
    message: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "4")]
    reason: Option<Vec<u8>>,
    #[prost(message, repeated, tag = "8")]
    container_statuses: Vec<ContainerStatus>,
}

/// A pod's spec as the pod projections read it: only where it is bound.
/// Its placement (a DaemonSet pod's tolerations and node affinity, a
/// third of the pod's text) is the DaemonSet template's business, read
/// from the DaemonSet; skipped here, it costs no allocation per version.
#[derive(Clone, PartialEq, Message)]
struct BoundSpec {
    #[prost(bytes = "vec", optional, tag = "10")]
    node_name: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Pod {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<BoundSpec>,
    #[prost(message, optional, tag = "3")]
    status: Option<PodStatus>,
}

#[derive(Clone, PartialEq, Message)]
struct PodTemplateSpec {
    #[prost(message, optional, tag = "2")]
    spec: Option<PodSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct DaemonSetSpec {
    #[prost(message, optional, tag = "2")]
    template: Option<PodTemplateSpec>,
    #[prost(int32, optional, tag = "4")]
    min_ready_seconds: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct DaemonSet {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<DaemonSetSpec>,
}

/// A list's page: `NodeList`, `PodList` and `DaemonSetList` share these
/// field numbers.
#[derive(Clone, PartialEq, Message)]
pub struct List<M: Message + Default + std::fmt::Debug> {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub items: Vec<M>,
}

/// The zero `time.Time` of a non-pointer field: Go writes it as an empty
/// message (or as these seconds, 0001-01-01); its JSON writes `null`.
const ZERO_TIME: i64 = -62_135_596_800;

fn time(t: Option<Time>) -> Option<meta::Time> {
    let seconds = t?.seconds.unwrap_or(ZERO_TIME);
    if seconds == ZERO_TIME {
        return None;
    }
    // A time the generated type could not hold is treated as absent, as a
    // projection treats any field it cannot use.
    Timestamp::from_second(seconds).ok().map(meta::Time)
}

/// Text as Go holds it: any bytes. Invalid UTF-8 is replaced as Go's JSON
/// encoder replaces it, so one odd annotation or termination message reads
/// as it does in JSON instead of failing the whole watch.
fn lossy(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn string(b: Option<Vec<u8>>) -> String {
    b.map(lossy).unwrap_or_default()
}

fn text(b: Option<Vec<u8>>) -> Option<String> {
    b.filter(|b| !b.is_empty()).map(lossy)
}

/// A `map<string, string>`, read as its repeated entries (the same bytes
/// on the wire) so that keys and values may be any bytes too.
fn map(m: Vec<Entry>) -> Option<BTreeMap<String, String>> {
    let pairs = |m: Vec<Entry>| m.into_iter().map(|e| (string(e.key), string(e.value)));
    (!m.is_empty()).then(|| pairs(m).collect())
}

fn list<T, U>(v: Vec<T>, each: impl FnMut(T) -> U) -> Option<Vec<U>> {
    (!v.is_empty()).then(|| v.into_iter().map(each).collect())
}

impl From<ObjectMeta> for meta::ObjectMeta {
    fn from(m: ObjectMeta) -> Self {
        let owner = |o: OwnerReference| meta::OwnerReference {
            api_version: string(o.api_version),
            kind: string(o.kind),
            name: string(o.name),
            uid: string(o.uid),
            controller: o.controller,
            block_owner_deletion: None,
        };
        meta::ObjectMeta {
            name: text(m.name),
            namespace: text(m.namespace),
            uid: text(m.uid),
            resource_version: text(m.resource_version),
            creation_timestamp: time(m.creation_timestamp),
            deletion_timestamp: time(m.deletion_timestamp),
            labels: map(m.labels),
            annotations: map(m.annotations),
            owner_references: list(m.owner_references, owner),
            ..Default::default()
        }
    }
}

fn node_condition(c: NodeCondition) -> core::NodeCondition {
    core::NodeCondition {
        type_: string(c.type_),
        status: string(c.status),
        last_transition_time: time(c.last_transition_time),
        ..Default::default()
    }
}

fn pod_condition(c: Condition) -> core::PodCondition {
    core::PodCondition {
        type_: string(c.type_),
        status: string(c.status),
        last_transition_time: time(c.last_transition_time),
        reason: text(c.reason),
        message: text(c.message),
        ..Default::default()
    }
}

impl From<Node> for core::Node {
    fn from(n: Node) -> Self {
        let taint = |t: Taint| core::Taint {
            key: string(t.key),
            value: text(t.value),
            effect: string(t.effect),
            time_added: None,
        };
        let spec = n.spec.map(|s| core::NodeSpec {
            provider_id: text(s.provider_id),
            unschedulable: s.unschedulable.filter(|u| *u),
            taints: list(s.taints, taint),
            ..Default::default()
        });
        let status = n.status.map(|s| {
            // Only the extended resources (a domain in the name, such as
            // `nvidia.com/gpu`): the only ones `project` reads; `cpu`,
            // `memory` and `pods` are not copied out of the frame.
            let allocatable = s.allocatable.into_iter();
            let extended =
                allocatable.filter(|e| e.key.as_ref().is_some_and(|k| k.contains(&b'/')));
            let allocatable: BTreeMap<_, _> = extended
                .map(|e| {
                    let name = e.key.map(|k| k.to_vec());
                    (
                        string(name),
                        Quantity(string(e.value.and_then(|q| q.string))),
                    )
                })
                .collect();
            let boot_id = s.node_info.and_then(|i| i.boot_id).map(lossy);
            core::NodeStatus {
                allocatable: (!allocatable.is_empty()).then_some(allocatable),
                conditions: list(s.conditions, node_condition),
                node_info: boot_id.map(|boot_id| core::NodeSystemInfo {
                    boot_id,
                    ..Default::default()
                }),
                ..Default::default()
            }
        });
        core::Node {
            metadata: n.metadata.map(Into::into).unwrap_or_default(),
            spec,
            status,
        }
    }
}

fn requirement(r: Requirement) -> core::NodeSelectorRequirement {
    core::NodeSelectorRequirement {
        key: string(r.key),
        operator: string(r.operator),
        values: list(r.values, lossy),
    }
}

fn pod_spec(s: PodSpec) -> core::PodSpec {
    let term = |t: SelectorTerm| core::NodeSelectorTerm {
        match_expressions: list(t.match_expressions, requirement),
        match_fields: list(t.match_fields, requirement),
    };
    let required = s.affinity.and_then(|a| a.node_affinity).map(|na| {
        let terms = na
            .required
            .map(|sel| sel.terms.into_iter().map(term).collect());
        core::NodeAffinity {
            required_during_scheduling_ignored_during_execution: terms.map(|node_selector_terms| {
                core::NodeSelector {
                    node_selector_terms,
                }
            }),
            ..Default::default()
        }
    });
    let toleration = |t: Toleration| core::Toleration {
        key: text(t.key),
        operator: text(t.operator),
        value: text(t.value),
        effect: text(t.effect),
        toleration_seconds: None,
    };
    core::PodSpec {
        node_selector: map(s.node_selector),
        node_name: text(s.node_name),
        host_network: s.host_network.filter(|h| *h),
        affinity: required.map(|node_affinity| core::Affinity {
            node_affinity: Some(node_affinity),
            ..Default::default()
        }),
        tolerations: list(s.tolerations, toleration),
        ..Default::default()
    }
}

impl From<Pod> for core::Pod {
    fn from(p: Pod) -> Self {
        let container = |c: ContainerStatus| {
            let state = c.state.map(|s| core::ContainerState {
                waiting: s.waiting.map(|w| core::ContainerStateWaiting {
                    reason: text(w.reason),
                    message: text(w.message),
                }),
                terminated: s.terminated.map(|t| core::ContainerStateTerminated {
                    reason: text(t.reason),
                    message: text(t.message),
                    ..Default::default()
                }),
                running: None,
            });
            core::ContainerStatus {
                name: string(c.name),
                state,
                ..Default::default()
            }
        };
        let status = p.status.map(|s| core::PodStatus {
            phase: text(s.phase),
            conditions: list(s.conditions, pod_condition),
            message: text(s.message),
            reason: text(s.reason),
            container_statuses: list(s.container_statuses, container),
            ..Default::default()
        });
        let spec = p.spec.map(|s| core::PodSpec {
            node_name: text(s.node_name),
            ..Default::default()
        });
        core::Pod {
            metadata: p.metadata.map(Into::into).unwrap_or_default(),
            spec,
            status,
        }
    }
}

impl From<DaemonSet> for apps::DaemonSet {
    fn from(d: DaemonSet) -> Self {
        let spec = d.spec.map(|s| apps::DaemonSetSpec {
            template: core::PodTemplateSpec {
                metadata: None,
                spec: s.template.and_then(|t| t.spec).map(pod_spec),
            },
            min_ready_seconds: s.min_ready_seconds.filter(|m| *m != 0),
            ..Default::default()
        });
        apps::DaemonSet {
            metadata: d.metadata.map(Into::into).unwrap_or_default(),
            spec,
            status: None,
        }
    }
}
