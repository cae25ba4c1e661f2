//! The watch decoding bench (divan; `cargo bench -p nodegate-scale --bench
//! decode`): one node and one DaemonSet pod as a watch delivers them (the
//! fixtures of `src/cluster/lean`), decoded as the generated types and as
//! the lean types the watches use. Not run by `tests/run`.

use divan::black_box;
use k8s_openapi::api::core::v1::{Node, Pod};
use nodegate::cluster::lean::Lean;

const NODE: &str = include_str!("../../../src/cluster/lean/node.json");
const POD: &str = include_str!("../../../src/cluster/lean/pod.json");

fn main() {
    divan::main();
}

#[divan::bench]
fn node_full() -> Node {
    serde_json::from_str(black_box(NODE)).expect("fixture")
}

#[divan::bench]
fn node_lean() -> Lean<Node> {
    serde_json::from_str(black_box(NODE)).expect("fixture")
}

#[divan::bench]
fn pod_full() -> Pod {
    serde_json::from_str(black_box(POD)).expect("fixture")
}

#[divan::bench]
fn pod_lean() -> Lean<Pod> {
    serde_json::from_str(black_box(POD)).expect("fixture")
}
