//! JSON against protobuf on the wire (divan; `cargo bench -p nodegate-scale
//! --bench wire`): how long one node and one DaemonSet pod take to decode
//! as the watches decode them, in each of the API server's encodings. Not
//! run by `tests/run`.
//!
//! The fixtures in `wire/` are one kwok node and one pod of a DaemonSet as
//! kube-apiserver 1.36 answered a GET for each, once with `Accept:
//! application/json` and once with `application/vnd.kubernetes.protobuf`
//! (the same resourceVersion). The JSON side decodes as the JSON fallback
//! does (`Lean<K>`, without `fieldsV1`). The protobuf side is the watches'
//! own decoder (`nodegate::cluster::protobuf::decode`): the `k8s\0`
//! envelope, the messages that declare only the fields the projections
//! read, and their conversion into the generated types.

use divan::black_box;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodegate::cluster::lean::Lean;
use nodegate::cluster::{project, protobuf};

const NODE_JSON: &str = include_str!("wire/node.json");
const POD_JSON: &str = include_str!("wire/pod.json");
const NODE_PB: &[u8] = include_bytes!("wire/node.pb");
const POD_PB: &[u8] = include_bytes!("wire/pod.pb");

fn main() {
    both_encodings_agree();
    divan::main();
}

#[divan::bench]
fn node_json_lean() -> Lean<Node> {
    serde_json::from_str(black_box(NODE_JSON)).expect("fixture")
}

#[divan::bench]
fn node_protobuf() -> Lean<Node> {
    protobuf::decode(black_box(NODE_PB)).expect("fixture")
}

#[divan::bench]
fn pod_json_lean() -> Lean<Pod> {
    serde_json::from_str(black_box(POD_JSON)).expect("fixture")
}

#[divan::bench]
fn pod_protobuf() -> Lean<Pod> {
    protobuf::decode(black_box(POD_PB)).expect("fixture")
}

/// Both decodings project the same (checked once before anything is
/// timed; the unit tests of `protobuf` check it field by field).
fn both_encodings_agree() {
    let Lean(json): Lean<Node> = serde_json::from_str(NODE_JSON).expect("node json");
    let Lean(pb): Lean<Node> = protobuf::decode(NODE_PB).expect("node pb");
    assert_eq!(project::node(&pb), project::node(&json));
    let Lean(json): Lean<Pod> = serde_json::from_str(POD_JSON).expect("pod json");
    let Lean(pb): Lean<Pod> = protobuf::decode(POD_PB).expect("pod pb");
    assert_eq!(project::pod(&pb), project::pod(&json));
}
