//! JSON against protobuf on the wire (divan; `cargo bench -p nodegate-scale
//! --bench wire`): how long one node and one DaemonSet pod take to decode
//! in each of the API server's encodings, for issue 40's choice of a
//! protobuf watch. Not run by `tests/run`.
//!
//! The fixtures in `wire/` are one kwok node and one pod of a DaemonSet as
//! kube-apiserver 1.36 answered a GET for each, once with `Accept:
//! application/json` and once with `application/vnd.kubernetes.protobuf`
//! (the same resourceVersion). The JSON side decodes as the watches do
//! today (`Lean<K>`, without `fieldsV1`). The protobuf side decodes the
//! `k8s\0` envelope, then messages that declare only the fields nodegate's
//! projections read (`src/cluster/project.rs`), with the field numbers of
//! k8s.io/api's `generated.proto`: prost skips every other field without
//! building it.
//!
//! Six runs on the two-core machine (noisy: medians moved 40 % run to run):
//! the node 8.7–14.6 µs as JSON, 2.5–4.9 µs as protobuf (3.0–3.4× in each
//! run); the pod 13.1–20.6 µs and 2.0–3.3 µs (5.2–8.6×). The JSON node is
//! 6,354 bytes and the protobuf one 2,548; the pod 8,196 and 2,841.

use std::collections::BTreeMap;

use divan::black_box;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodegate::cluster::lean::Lean;
use prost::Message;

const NODE_JSON: &str = include_str!("wire/node.json");
const POD_JSON: &str = include_str!("wire/pod.json");
const NODE_PB: &[u8] = include_bytes!("wire/node.pb");
const POD_PB: &[u8] = include_bytes!("wire/pod.pb");

fn main() {
    both_encodings_agree();
    divan::main();
}

/// `runtime.Unknown`: what follows the magic `k8s\0`.
#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(bytes = "vec", optional, tag = "2")]
    raw: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, optional, tag = "1")]
    seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct ManagedFieldsEntry {
    #[prost(string, optional, tag = "1")]
    manager: Option<String>,
    #[prost(string, optional, tag = "2")]
    operation: Option<String>,
    #[prost(message, optional, tag = "4")]
    time: Option<Time>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    kind: Option<String>,
    #[prost(string, optional, tag = "4")]
    uid: Option<String>,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "3")]
    namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    resource_version: Option<String>,
    #[prost(message, optional, tag = "8")]
    creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<Time>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(message, repeated, tag = "17")]
    managed_fields: Vec<ManagedFieldsEntry>,
}

#[derive(Clone, PartialEq, Message)]
struct Taint {
    #[prost(string, optional, tag = "1")]
    key: Option<String>,
    #[prost(string, optional, tag = "2")]
    value: Option<String>,
    #[prost(string, optional, tag = "3")]
    effect: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSpec {
    #[prost(bool, optional, tag = "4")]
    unschedulable: Option<bool>,
    #[prost(message, repeated, tag = "5")]
    taints: Vec<Taint>,
}

#[derive(Clone, PartialEq, Message)]
struct Condition {
    #[prost(string, optional, tag = "1")]
    type_: Option<String>,
    #[prost(string, optional, tag = "2")]
    status: Option<String>,
    #[prost(message, optional, tag = "4")]
    last_transition_time: Option<Time>,
}

#[derive(Clone, PartialEq, Message)]
struct Quantity {
    #[prost(string, optional, tag = "1")]
    string: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeSystemInfo {
    #[prost(string, optional, tag = "3")]
    boot_id: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NodeStatus {
    #[prost(btree_map = "string, message", tag = "2")]
    allocatable: BTreeMap<String, Quantity>,
    #[prost(message, repeated, tag = "4")]
    conditions: Vec<Condition>,
    #[prost(message, optional, tag = "7")]
    node_info: Option<NodeSystemInfo>,
}

#[derive(Clone, PartialEq, Message)]
struct PbNode {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NodeSpec>,
    #[prost(message, optional, tag = "3")]
    status: Option<NodeStatus>,
}

#[derive(Clone, PartialEq, Message)]
struct PodSpec {
    #[prost(string, optional, tag = "10")]
    node_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PodStatus {
    #[prost(string, optional, tag = "1")]
    phase: Option<String>,
    #[prost(message, repeated, tag = "2")]
    conditions: Vec<Condition>,
}

#[derive(Clone, PartialEq, Message)]
struct PbPod {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<PodSpec>,
    #[prost(message, optional, tag = "3")]
    status: Option<PodStatus>,
}

/// The message inside the API server's protobuf envelope.
fn unwrap(body: &[u8]) -> Vec<u8> {
    let inner = body.strip_prefix(b"k8s\0").expect("the k8s\\0 magic");
    Unknown::decode(inner)
        .expect("envelope")
        .raw
        .expect("raw object")
}

#[divan::bench]
fn node_json_lean() -> Lean<Node> {
    serde_json::from_str(black_box(NODE_JSON)).expect("fixture")
}

#[divan::bench]
fn node_protobuf_read_fields() -> PbNode {
    PbNode::decode(unwrap(black_box(NODE_PB)).as_slice()).expect("fixture")
}

#[divan::bench]
fn pod_json_lean() -> Lean<Pod> {
    serde_json::from_str(black_box(POD_JSON)).expect("fixture")
}

#[divan::bench]
fn pod_protobuf_read_fields() -> PbPod {
    PbPod::decode(unwrap(black_box(POD_PB)).as_slice()).expect("fixture")
}

/// The protobuf messages hold what the JSON says (so their field numbers
/// are right): checked once before anything is timed.
fn both_encodings_agree() {
    let json: Node = serde_json::from_str(NODE_JSON).expect("node json");
    let pb = PbNode::decode(unwrap(NODE_PB).as_slice()).expect("node pb");
    let meta = pb.metadata.expect("metadata");
    assert_eq!(meta.name, json.metadata.name);
    assert_eq!(meta.uid, json.metadata.uid);
    assert_eq!(meta.resource_version, json.metadata.resource_version);
    assert_eq!(Some(meta.labels), json.metadata.labels);
    let taints = pb.spec.expect("spec").taints;
    let json_taints = json.spec.and_then(|s| s.taints).unwrap_or_default();
    assert_eq!(taints.len(), json_taints.len());
    for (a, b) in taints.iter().zip(&json_taints) {
        assert_eq!(a.key.as_deref(), Some(b.key.as_str()));
        assert_eq!(a.effect.as_deref(), Some(b.effect.as_str()));
    }
    let status = pb.status.expect("status");
    let json_status = json.status.expect("status");
    let types: Vec<_> = status.conditions.iter().map(|c| c.type_.clone()).collect();
    let json_types: Vec<_> = json_status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .map(|c| Some(c.type_))
        .collect();
    assert_eq!(types, json_types);
    assert_eq!(
        status.node_info.and_then(|i| i.boot_id),
        json_status.node_info.map(|i| i.boot_id)
    );

    let json: Pod = serde_json::from_str(POD_JSON).expect("pod json");
    let pb = PbPod::decode(unwrap(POD_PB).as_slice()).expect("pod pb");
    let meta = pb.metadata.expect("metadata");
    assert_eq!(meta.namespace, json.metadata.namespace);
    assert_eq!(meta.uid, json.metadata.uid);
    let owners = json.metadata.owner_references.unwrap_or_default();
    assert_eq!(meta.owner_references.len(), owners.len());
    assert_eq!(
        meta.owner_references[0].uid.as_deref(),
        Some(owners[0].uid.as_str())
    );
    assert_eq!(
        pb.spec.and_then(|s| s.node_name),
        json.spec.and_then(|s| s.node_name)
    );
    let status = pb.status.expect("status");
    assert_eq!(status.phase, json.status.and_then(|s| s.phase));
}
