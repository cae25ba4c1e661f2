//! JSON against protobuf on the wire (divan; `cargo bench -p nodegate-scale
//! --bench wire`): how long one node and one DaemonSet pod take to decode,
//! and to decode and project, as the watches handle an event, in each of
//! the API server's encodings. Not run by `tests/run`.
//!
//! The fixtures in `wire/` are one kwok node and one pod of a DaemonSet as
//! kube-apiserver 1.36 answered a GET for each, once with `Accept:
//! application/json` and once with `application/vnd.kubernetes.protobuf`
//! (the same resourceVersion). The JSON side decodes as the JSON fallback
//! does (`Lean<K>`, without `fieldsV1`). The protobuf side is the watches'
//! own decoder (`nodegate::cluster::protobuf::decode`): the `k8s\0`
//! envelope and the messages that declare only the fields the projection
//! reads, whose text the projection then reads in place.

use divan::black_box;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodegate::cluster::lean::Lean;
use nodegate::cluster::protobuf::{Wire, WireNode, WirePod};
use nodegate::cluster::{project, protobuf};
use nodegate_core::vocab::model::{Interner, NodeInfo, PodInfo};

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
fn node_protobuf() -> WireNode {
    protobuf::decode(black_box(NODE_PB)).expect("fixture")
}

#[divan::bench]
fn pod_json_lean() -> Lean<Pod> {
    serde_json::from_str(black_box(POD_JSON)).expect("fixture")
}

#[divan::bench]
fn pod_protobuf() -> WirePod {
    protobuf::decode(black_box(POD_PB)).expect("fixture")
}

/// Decoded and projected, as the node watch handles an event (the
/// interner already holds the node's labels, as it does after the first).
#[divan::bench(args = ["json", "protobuf"])]
fn node_projected(bencher: divan::Bencher, encoding: &str) {
    let mut interner = Interner::default();
    let _ = node_from(encoding, &mut interner);
    bencher.bench_local(|| node_from(encoding, &mut interner));
}

/// Decoded and projected, as the pod watch handles an event.
#[divan::bench(args = ["json", "protobuf"])]
fn pod_projected(bencher: divan::Bencher, encoding: &str) {
    let mut interner = Interner::default();
    let _ = pod_from(encoding, &mut interner);
    bencher.bench_local(|| pod_from(encoding, &mut interner));
}

fn node_from(encoding: &str, interner: &mut Interner) -> Option<NodeInfo> {
    let wire: WireNode = match encoding {
        "json" => serde_json::from_str(black_box(NODE_JSON)).expect("fixture"),
        _ => protobuf::decode(black_box(NODE_PB)).expect("fixture"),
    };
    project::node_in(&wire.view(), interner).0
}

fn pod_from(encoding: &str, interner: &mut Interner) -> Option<PodInfo> {
    let wire: WirePod = match encoding {
        "json" => serde_json::from_str(black_box(POD_JSON)).expect("fixture"),
        _ => protobuf::decode(black_box(POD_PB)).expect("fixture"),
    };
    project::pod_in(&wire.view(), interner, project::Keep::ALL)
}

/// Both decodings project the same (checked once before anything is
/// timed; the unit tests of `protobuf` check it field by field).
fn both_encodings_agree() {
    let Lean(json): Lean<Node> = serde_json::from_str(NODE_JSON).expect("node json");
    let pb: WireNode = protobuf::decode(NODE_PB).expect("node pb");
    assert!(matches!(pb, Wire::Proto(_)));
    let from_pb = project::node_in(&pb.view(), &mut Interner::default());
    assert_eq!(from_pb, project::node(&json));
    let Lean(json): Lean<Pod> = serde_json::from_str(POD_JSON).expect("pod json");
    let pb: WirePod = protobuf::decode(POD_PB).expect("pod pb");
    let from_pb = project::pod_in(&pb.view(), &mut Interner::default(), project::Keep::ALL);
    assert_eq!(from_pb, project::pod(&json));
}
