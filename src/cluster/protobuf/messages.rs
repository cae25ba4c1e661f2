//! The API server's protobuf messages, each declaring only the fields that
//! `project` and `server_time` read, with the field numbers of k8s.io/api's
//! `generated.proto` (v0.36). prost skips every other field without
//! building it: managed fields, images, container specs, volumes.
//!
//! Text is declared as bytes, each a slice of the frame it came in (no
//! copy): prost refuses a string that is not UTF-8, which Go never checks
//! (see `read`). A node and a pod are read in place as the projection's
//! view ([`Node::view`], [`Pod::view`]), so a watch event copies out only
//! what the projection keeps; a DaemonSet (rare, and its template read
//! whole) becomes the generated `k8s_openapi` type. What Go's JSON leaves
//! out when empty (`omitempty`), its protobuf still writes: an empty
//! string, map or list, and the zero time, read as absent here as they are
//! in JSON.

use std::collections::BTreeMap;

use bytes::Bytes;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;

use crate::cluster::project::view::{
    ConditionView, ContainerView, Entries, NodeView, Pairs, PodView, Reasoned, TaintView, Text,
};

/// `runtime.Unknown`: the envelope after the magic `k8s\0`.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub raw: Option<Bytes>,
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
    pub raw: Option<Bytes>,
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
    #[prost(bytes = "bytes", optional, tag = "1")]
    kind: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "3")]
    name: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "4")]
    uid: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "5")]
    api_version: Option<Bytes>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    #[prost(bytes = "bytes", optional, tag = "1")]
    name: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "3")]
    namespace: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "5")]
    uid: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "6")]
    resource_version: Option<Bytes>,
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
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    value: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "3")]
    effect: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSpec {
    #[prost(bytes = "bytes", optional, tag = "3")]
    provider_id: Option<Bytes>,
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
    #[prost(bytes = "bytes", optional, tag = "1")]
    type_: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    status: Option<Bytes>,
    #[prost(message, optional, tag = "4")]
    last_transition_time: Option<Time>,
}

/// A pod's condition: its reason and message say why a pod is not
/// running (`project`'s status note).
#[derive(Clone, PartialEq, Message)]
struct Condition {
    #[prost(bytes = "bytes", optional, tag = "1")]
    type_: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    status: Option<Bytes>,
    #[prost(message, optional, tag = "4")]
    last_transition_time: Option<Time>,
    #[prost(bytes = "bytes", optional, tag = "5")]
    reason: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "6")]
    message: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct QuantityMsg {
    #[prost(bytes = "bytes", optional, tag = "1")]
    string: Option<Bytes>,
}

/// An entry of a `map<string, string>`.
#[derive(Clone, PartialEq, Message)]
struct Entry {
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    value: Option<Bytes>,
}

/// An entry of `allocatable`, a `map<string, Quantity>`. Its name is
/// kept as a slice of the frame (no copy) until the conversion decides to
/// keep it.
#[derive(Clone, PartialEq, Message)]
struct QuantityEntry {
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<Bytes>,
    #[prost(message, optional, tag = "2")]
    value: Option<QuantityMsg>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSystemInfo {
    #[prost(bytes = "bytes", optional, tag = "3")]
    boot_id: Option<Bytes>,
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
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    operator: Option<Bytes>,
    #[prost(bytes = "bytes", repeated, tag = "3")]
    values: Vec<Bytes>,
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
    #[prost(bytes = "bytes", optional, tag = "1")]
    key: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    operator: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "3")]
    value: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "4")]
    effect: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct PodSpec {
    #[prost(message, repeated, tag = "7")]
    node_selector: Vec<Entry>,
    #[prost(bytes = "bytes", optional, tag = "10")]
    node_name: Option<Bytes>,
    #[prost(bool, optional, tag = "11")]
    host_network: Option<bool>,
    #[prost(message, optional, tag = "18")]
    affinity: Option<Affinity>,
    #[prost(message, repeated, tag = "22")]
    tolerations: Vec<Toleration>,
}

#[derive(Clone, PartialEq, Message)]
struct Waiting {
    #[prost(bytes = "bytes", optional, tag = "1")]
    reason: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    message: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
struct Terminated {
    #[prost(bytes = "bytes", optional, tag = "3")]
    reason: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "4")]
    message: Option<Bytes>,
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
    #[prost(bytes = "bytes", optional, tag = "1")]
    name: Option<Bytes>,
    #[prost(message, optional, tag = "2")]
    state: Option<ContainerState>,
}

#[derive(Clone, PartialEq, Message)]
struct PodStatus {
    #[prost(bytes = "bytes", optional, tag = "1")]
    phase: Option<Bytes>,
    #[prost(message, repeated, tag = "2")]
    conditions: Vec<Condition>,
    #[prost(bytes = "bytes", optional, tag = "3")]
    message: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "4")]
    reason: Option<Bytes>,
    #[prost(message, repeated, tag = "8")]
    container_statuses: Vec<ContainerStatus>,
}

/// A pod's spec as the pod projections read it: only where it is bound.
/// Its placement (a DaemonSet pod's tolerations and node affinity, a
/// third of the pod's text) is the DaemonSet template's business, read
/// from the DaemonSet; skipped here, it costs no allocation per version.
#[derive(Clone, PartialEq, Message)]
struct BoundSpec {
    #[prost(bytes = "bytes", optional, tag = "10")]
    node_name: Option<Bytes>,
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
    seconds(t.as_ref()).map(meta::Time)
}

/// A time as the projections read it.
fn seconds(t: Option<&Time>) -> Option<Timestamp> {
    let seconds = t?.seconds.unwrap_or(ZERO_TIME);
    if seconds == ZERO_TIME {
        return None;
    }
    // A time the generated type could not hold is treated as absent, as a
    // projection treats any field it cannot use.
    Timestamp::from_second(seconds).ok()
}

/// Text as Go holds it: any bytes. Invalid UTF-8 is replaced as Go's JSON
/// encoder replaces it, so one odd annotation or termination message reads
/// as it does in JSON instead of failing the whole watch. Valid text (all
/// of it, in practice) is read in place. The strict check first: it reads
/// ASCII a word at a time, where the lossy one goes byte by byte.
fn read(b: &Bytes) -> Text<'_> {
    match std::str::from_utf8(b) {
        Ok(text) => Text::Borrowed(text),
        Err(_) => String::from_utf8_lossy(b),
    }
}

fn lossy(b: Bytes) -> String {
    read(&b).into_owned()
}

fn string(b: Option<Bytes>) -> String {
    b.map(lossy).unwrap_or_default()
}

fn text(b: Option<Bytes>) -> Option<String> {
    b.filter(|b| !b.is_empty()).map(lossy)
}

/// [`text`], in place.
fn some(b: &Option<Bytes>) -> Option<Text<'_>> {
    b.as_ref().filter(|b| !b.is_empty()).map(read)
}

/// [`string`], in place.
fn word(b: &Option<Bytes>) -> Text<'_> {
    b.as_ref().map(read).unwrap_or_default()
}

/// A `map<string, string>`, read as its repeated entries (the same bytes
/// on the wire) so that keys and values may be any bytes too.
fn map(m: Vec<Entry>) -> Option<BTreeMap<String, String>> {
    let pairs = |m: Vec<Entry>| m.into_iter().map(|e| (string(e.key), string(e.value)));
    (!m.is_empty()).then(|| pairs(m).collect())
}

impl Entry {
    /// Whether its key is `key` (bytes that are not UTF-8 are no key
    /// nodegate looks for).
    fn is(&self, key: &str) -> bool {
        self.key.as_deref().unwrap_or_default() == key.as_bytes()
    }
}

impl Entries for Vec<Entry> {
    fn get(&self, key: &str) -> Option<Text<'_>> {
        let found = self.iter().rev().find(|e| e.is(key));
        found.map(|e| word(&e.value))
    }

    fn contains_key(&self, key: &str) -> bool {
        self.iter().any(|e| e.is(key))
    }

    fn for_each(&self, each: &mut dyn FnMut(&str, &str)) {
        for e in self {
            each(&word(&e.key), &word(&e.value));
        }
    }

    fn count(&self) -> usize {
        self.len()
    }
}

/// [`map`], in place (the `Vec` itself: a slice cannot be a trait object).
#[allow(clippy::ptr_arg)]
fn pairs(m: &Vec<Entry>) -> Option<Pairs<'_>> {
    (!m.is_empty()).then_some(Pairs::Entries(m))
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

impl Node {
    /// The node as the projection reads it, its text read in place.
    pub fn view(&self) -> NodeView<'_> {
        let meta = self.metadata.as_ref();
        let spec = self.spec.as_ref();
        let status = self.status.as_ref();
        // Only the extended resources (a domain in the name, such as
        // `nvidia.com/gpu`): the only ones the projection keeps.
        let allocatable = status.into_iter().flat_map(|s| &s.allocatable);
        let extended = allocatable.filter(|e| e.key.as_ref().is_some_and(|k| k.contains(&b'/')));
        let mut view = meta.map(ObjectMeta::node_view).unwrap_or_default();
        view.provider_id = spec.and_then(|s| some(&s.provider_id));
        view.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        view.taints = spec
            .into_iter()
            .flat_map(|s| &s.taints)
            .map(taint_view)
            .collect();
        let conditions = status.into_iter().flat_map(|s| &s.conditions);
        view.conditions = conditions.map(node_condition_view).collect();
        view.boot_id = status
            .and_then(|s| s.node_info.as_ref())
            .and_then(|i| i.boot_id.as_ref())
            .map(read);
        view.allocatable = extended
            .map(|e| {
                (
                    word(&e.key),
                    e.value
                        .as_ref()
                        .map(|q| word(&q.string))
                        .unwrap_or_default(),
                )
            })
            .collect();
        view
    }

    /// Its resourceVersion (a watch goes on from the last one it saw).
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.as_ref()?.version()
    }

    /// Its creationTimestamp.
    pub fn created(&self) -> Option<Timestamp> {
        seconds(self.metadata.as_ref()?.creation_timestamp.as_ref())
    }
}

impl ObjectMeta {
    fn node_view(&self) -> NodeView<'_> {
        NodeView {
            name: some(&self.name),
            uid: some(&self.uid),
            resource_version: some(&self.resource_version),
            created: seconds(self.creation_timestamp.as_ref()),
            labels: pairs(&self.labels),
            annotations: pairs(&self.annotations),
            ..Default::default()
        }
    }

    fn version(&self) -> Option<&str> {
        let version = self.resource_version.as_deref()?;
        std::str::from_utf8(version).ok().filter(|v| !v.is_empty())
    }
}

impl Pod {
    /// The pod as the projection reads it, its text read in place.
    pub fn view(&self) -> PodView<'_> {
        let meta = self.metadata.as_ref();
        let status = self.status.as_ref();
        let owners = meta.into_iter().flat_map(|m| &m.owner_references);
        let mut owners = owners;
        let controller = owners.find(|o| o.controller == Some(true));
        PodView {
            namespace: meta.and_then(|m| some(&m.namespace)),
            name: meta.and_then(|m| some(&m.name)),
            uid: meta.and_then(|m| some(&m.uid)),
            controller_uid: controller.map(|o| word(&o.uid)),
            node_name: self.spec.as_ref().and_then(|s| some(&s.node_name)),
            labels: meta.and_then(|m| pairs(&m.labels)),
            annotations: meta.and_then(|m| pairs(&m.annotations)),
            deleting: meta
                .and_then(|m| seconds(m.deletion_timestamp.as_ref()))
                .is_some(),
            phase: status.and_then(|s| some(&s.phase)),
            reason: status.map_or_else(Reasoned::default, |s| reasoned(&s.reason, &s.message)),
            conditions: status
                .into_iter()
                .flat_map(|s| &s.conditions)
                .map(pod_condition_view)
                .collect(),
            containers: status
                .into_iter()
                .flat_map(|s| &s.container_statuses)
                .map(container_view)
                .collect(),
        }
    }

    /// Its resourceVersion (a watch goes on from the last one it saw).
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.as_ref()?.version()
    }

    /// Its creationTimestamp.
    pub fn created(&self) -> Option<Timestamp> {
        seconds(self.metadata.as_ref()?.creation_timestamp.as_ref())
    }

    /// Where it is bound and its uid: its identity in the pod watch's
    /// table, which a deleted pod still carries.
    pub fn bound_id(&self) -> (Text<'_>, Text<'_>) {
        let node = self.spec.as_ref().map(|s| word(&s.node_name));
        let uid = self.metadata.as_ref().map(|m| word(&m.uid));
        (node.unwrap_or_default(), uid.unwrap_or_default())
    }
}

fn taint_view(t: &Taint) -> TaintView<'_> {
    TaintView {
        key: word(&t.key),
        value: some(&t.value),
        effect: word(&t.effect),
    }
}

fn node_condition_view(c: &NodeCondition) -> ConditionView<'_> {
    ConditionView {
        type_: word(&c.type_),
        status: word(&c.status),
        since: seconds(c.last_transition_time.as_ref()),
        ..Default::default()
    }
}

fn pod_condition_view(c: &Condition) -> ConditionView<'_> {
    ConditionView {
        type_: word(&c.type_),
        status: word(&c.status),
        since: seconds(c.last_transition_time.as_ref()),
        reason: some(&c.reason),
        message: some(&c.message),
    }
}

fn reasoned<'a>(reason: &'a Option<Bytes>, message: &'a Option<Bytes>) -> Reasoned<'a> {
    Reasoned {
        reason: some(reason),
        message: some(message),
    }
}

fn container_view(c: &ContainerStatus) -> ContainerView<'_> {
    let state = c.state.as_ref();
    ContainerView {
        waiting: state
            .and_then(|s| s.waiting.as_ref())
            .map(|w| reasoned(&w.reason, &w.message)),
        terminated: state
            .and_then(|s| s.terminated.as_ref())
            .map(|t| reasoned(&t.reason, &t.message)),
    }
}
