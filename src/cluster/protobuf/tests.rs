//! The fixtures are one kwok node and one DaemonSet pod as kube-apiserver
//! 1.36 answered a GET for each, once in JSON and once in protobuf (the
//! same resourceVersion): both encodings must project the same.

use k8s_openapi::api::core::v1::{Node, Pod};

use super::messages;
use super::*;
use crate::cluster::project;

const NODE_JSON: &str = include_str!("../../../tests/scale/benches/wire/node.json");
const NODE_PB: &[u8] = include_bytes!("../../../tests/scale/benches/wire/node.pb");
const POD_JSON: &str = include_str!("../../../tests/scale/benches/wire/pod.json");
const POD_PB: &[u8] = include_bytes!("../../../tests/scale/benches/wire/pod.pb");

fn decoded<K: Proto>(body: &'static [u8]) -> K {
    decode(body).expect("the fixture decodes")
}

#[test]
fn a_node_projects_the_same_from_protobuf_as_from_json() {
    let json: Node = serde_json::from_str(NODE_JSON).expect("the JSON fixture");
    let Lean(pb) = decoded::<Lean<Node>>(NODE_PB);
    let (from_json, odd_json) = project::node(&json);
    let (from_pb, odd_pb) = project::node(&pb);
    let from_pb = from_pb.expect("a projected node");
    assert!(!from_pb.labels.is_empty() && !from_pb.conditions.is_empty());
    assert_eq!(from_pb.taints.len(), 1, "the fixture's startup taint");
    assert!(from_pb.annotations_present);
    assert_eq!(Some(from_pb), from_json);
    assert_eq!(odd_pb, odd_json);
    assert_eq!(
        pb.metadata.creation_timestamp,
        json.metadata.creation_timestamp
    );
}

#[test]
fn a_pod_projects_the_same_from_protobuf_as_from_json() {
    let json: Pod = serde_json::from_str(POD_JSON).expect("the JSON fixture");
    let Lean(pb) = decoded::<Lean<Pod>>(POD_PB);
    let from_pb = project::pod(&pb).expect("a projected pod");
    assert!(from_pb.ready && from_pb.controller_uid.is_some());
    assert_eq!(Some(from_pb), project::pod(&json));
    assert_eq!(
        pb.metadata.creation_timestamp,
        json.metadata.creation_timestamp
    );
    // The pod's placement is not decoded (the DaemonSet's template is what
    // placement reads); where it is bound is.
    let spec = pb.spec.as_ref().expect("a spec");
    assert!(spec.node_name.is_some() && spec.tolerations.is_none() && spec.affinity.is_none());
}

#[test]
fn a_daemonset_template_reads_placement_as_json_does() {
    // The pod fixture's spec (node affinity by field, tolerations, a node
    // selector) as a DaemonSet's template: a DaemonSet is `spec` (2) →
    // `template` (2) → `spec` (2), and a pod is `spec` (2).
    #[derive(Clone, PartialEq, prost::Message)]
    struct Spec {
        #[prost(bytes = "vec", optional, tag = "2")]
        spec: Option<Vec<u8>>,
    }
    let raw = unwrap(Bytes::from_static(POD_PB)).expect("the envelope");
    let pod_spec = Spec::decode(raw).expect("a pod").spec.expect("a spec");
    let template = Spec {
        spec: Some(pod_spec),
    };
    let ds_spec = Spec {
        spec: Some(template.encode_to_vec()),
    };
    let ds = Spec {
        spec: Some(ds_spec.encode_to_vec()),
    };
    let ds = messages::DaemonSet::decode(ds.encode_to_vec().as_slice()).expect("a DaemonSet");
    let ds = k8s_openapi::api::apps::v1::DaemonSet::from(ds);
    let template = ds
        .spec
        .and_then(|s| s.template.spec)
        .expect("a template spec");
    let json: Pod = serde_json::from_str(POD_JSON).expect("the JSON fixture");
    let from_pb = project::placement(&template);
    let from_json = project::placement(json.spec.as_ref().expect("a spec"));
    assert!(from_pb.required_node_affinity.is_some() && !from_pb.tolerations.is_empty());
    assert_eq!(from_pb, from_json);
}

#[test]
fn go_s_empty_values_read_as_json_s_absent_ones() {
    // Go writes a non-pointer time that was never set as its zero time
    // (0001-01-01), and a string as "" where JSON leaves both out.
    let mut time = Vec::new();
    prost::encoding::int64::encode(1, &-62_135_596_800, &mut time);
    let mut bytes = Vec::new();
    prost::encoding::bytes::encode(8, &time, &mut bytes);
    prost::encoding::string::encode(5, &String::new(), &mut bytes);
    let meta = messages::ObjectMeta::decode(bytes.as_slice()).expect("a message");
    let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::from(meta);
    assert_eq!(meta.creation_timestamp, None);
    assert_eq!(meta.uid, None);
    assert_eq!(meta.labels, None);
}

#[test]
fn text_that_is_not_utf8_reads_as_go_s_json_writes_it() {
    // An annotation whose value is the byte 0xff: Go stores any bytes, and
    // its JSON encoder writes U+FFFD for them.
    let mut entry = Vec::new();
    prost::encoding::string::encode(1, &"note".to_owned(), &mut entry);
    prost::encoding::bytes::encode(2, &vec![b'a', 0xff], &mut entry);
    let mut bytes = Vec::new();
    prost::encoding::bytes::encode(12, &entry, &mut bytes);
    let meta = messages::ObjectMeta::decode(bytes.as_slice()).expect("not refused");
    let meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::from(meta);
    let want = [("note".to_owned(), "a\u{fffd}".to_owned())].into();
    assert_eq!(meta.annotations, Some(want));
}

#[test]
fn frames_are_cut_by_their_length_and_wait_for_the_rest() {
    let mut buffer = BytesMut::new();
    buffer.extend_from_slice(&[0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 2, b'd']);
    let first = next_frame(&mut buffer).expect("a frame");
    assert_eq!(first.as_deref(), Some(&b"abc"[..]));
    assert!(
        next_frame(&mut buffer).expect("no error").is_none(),
        "half a frame waits"
    );
    buffer.extend_from_slice(b"e");
    let second = next_frame(&mut buffer).expect("a frame");
    assert_eq!(second.as_deref(), Some(&b"de"[..]));
    assert!(buffer.is_empty());
}

#[test]
fn an_absurd_frame_length_is_an_error_that_names_it() {
    let mut buffer = BytesMut::from(&[0xff, 0xff, 0xff, 0xff][..]);
    let error = next_frame(&mut buffer).expect_err("refused").to_string();
    assert!(error.contains("4294967295 bytes"), "{error}");
}

#[test]
fn an_answer_without_the_envelope_is_an_error_that_says_so() {
    let json = Bytes::from_static(br#"{"kind":"Node"}"#);
    let error = unwrap(json).expect_err("refused").to_string();
    assert!(error.contains("k8s\\0"), "{error}");
}

#[test]
fn a_410_needs_a_new_list_and_others_do_not() {
    let status = |code| {
        Error::Status(Status {
            code: Some(code),
            ..Default::default()
        })
    };
    assert!(status(410).gone());
    assert!(!status(500).gone());
    assert!(!Error::Decode(String::new()).gone());
}
