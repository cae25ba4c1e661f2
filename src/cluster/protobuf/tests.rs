//! The fixtures are one kwok node and one DaemonSet pod as kube-apiserver
//! 1.36 answered a GET for each, once in JSON and once in protobuf (the
//! same resourceVersion): both encodings must project the same.

use k8s_openapi::api::core::v1::{Node, Pod};

use nodegate_core::vocab::model::Interner;
use serde_json::json;

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
    let pb = decoded::<WireNode>(NODE_PB);
    let (from_json, odd_json) = project::node(&json);
    let (from_pb, odd_pb) = project::node_in(&pb.view(), &mut Interner::default());
    let from_pb = from_pb.expect("a projected node");
    assert!(!from_pb.labels.is_empty() && !from_pb.conditions.is_empty());
    assert_eq!(from_pb.taints.len(), 1, "the fixture's startup taint");
    assert!(from_pb.annotations_present);
    assert_eq!(Some(from_pb), from_json);
    assert_eq!(odd_pb, odd_json);
    let created = json.metadata.creation_timestamp.map(|t| t.0);
    assert!(created.is_some());
    assert_eq!(pb.created(), created);
    assert_eq!(
        pb.resource_version(),
        json.metadata.resource_version.as_deref()
    );
}

#[test]
fn a_pod_projects_the_same_from_protobuf_as_from_json() {
    let json: Pod = serde_json::from_str(POD_JSON).expect("the JSON fixture");
    let pb = decoded::<WirePod>(POD_PB);
    let from_pb = projected(&pb).expect("a projected pod");
    assert!(from_pb.ready && from_pb.controller_uid.is_some());
    assert!(!from_pb.labels.is_empty());
    assert_eq!(Some(from_pb), project::pod(&json));
    let created = json.metadata.creation_timestamp.map(|t| t.0);
    assert_eq!(pb.created(), created);
    let bound = json.spec.as_ref().and_then(|s| s.node_name.as_deref());
    assert!(bound.is_some());
    assert_eq!(pb.bound_id().0, bound.unwrap_or_default());
    assert_eq!(
        pb.bound_id().1,
        json.metadata.uid.as_deref().unwrap_or_default()
    );
}

fn projected(pod: &WirePod) -> Option<nodegate_core::vocab::model::PodInfo> {
    project::pod_in(&pod.view(), &mut Interner::default(), project::Keep::ALL)
}

/// A pod that is not running, as the API server writes it in protobuf:
/// its own words, a container waiting, a condition that says why.
fn failing_pod(own: bool, waiting: bool) -> Vec<u8> {
    use prost::encoding::{bytes as b, string as text};
    let field = |tag, value: &str, out: &mut Vec<u8>| text::encode(tag, &value.to_owned(), out);
    let nested = |tag, inner: Vec<u8>, out: &mut Vec<u8>| b::encode(tag, &inner, out);
    let mut meta = Vec::new();
    field(1, "agent-x", &mut meta);
    field(3, "ns", &mut meta);
    field(5, "u1", &mut meta);
    let mut spec = Vec::new();
    field(10, "n1", &mut spec);
    let mut condition = Vec::new();
    field(1, "Ready", &mut condition);
    field(2, "False", &mut condition);
    field(5, "ContainersNotReady", &mut condition);
    field(6, "containers with unready status: [agent]", &mut condition);
    let mut why = Vec::new();
    field(1, "CrashLoopBackOff", &mut why);
    field(2, "back-off 10s restarting failed container", &mut why);
    let mut state = Vec::new();
    if waiting {
        nested(1, why, &mut state);
    }
    let mut container = Vec::new();
    field(1, "agent", &mut container);
    nested(2, state, &mut container);
    let mut status = Vec::new();
    field(1, "Pending", &mut status);
    nested(2, condition, &mut status);
    if own {
        field(3, "The node was low on memory.", &mut status);
        field(4, "Evicted", &mut status);
    }
    nested(8, container, &mut status);
    let mut pod = Vec::new();
    nested(1, meta, &mut pod);
    nested(2, spec, &mut pod);
    nested(3, status, &mut pod);
    pod
}

#[test]
fn a_failing_pod_s_note_reads_the_same_from_protobuf_as_from_json() {
    let container = |waiting: bool| {
        let state = waiting.then(|| {
            json!({"waiting": {
            "reason": "CrashLoopBackOff",
            "message": "back-off 10s restarting failed container"}})
        });
        json!({"name": "agent", "state": state.unwrap_or(json!({}))})
    };
    let cases = [
        (true, true, "Evicted: The node was low on memory."),
        (
            false,
            true,
            "CrashLoopBackOff: back-off 10s restarting failed container",
        ),
        (
            false,
            false,
            "ContainersNotReady: containers with unready status: [agent]",
        ),
    ];
    for (own, waiting, note) in cases {
        let message = messages::Pod::decode(failing_pod(own, waiting).as_slice()).expect("a pod");
        let pb = Wire::Proto(message);
        let mut status = json!({
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False",
                "reason": "ContainersNotReady",
                "message": "containers with unready status: [agent]"}],
            "containerStatuses": [container(waiting)],
        });
        if own {
            status["reason"] = json!("Evicted");
            status["message"] = json!("The node was low on memory.");
        }
        let json: Pod = serde_json::from_value(json!({
            "metadata": {"name": "agent-x", "namespace": "ns", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": []},
            "status": status,
        }))
        .expect("a pod");
        let from_pb = projected(&pb).expect("a projected pod");
        assert_eq!(from_pb.status_note.as_deref(), Some(note));
        assert!(!from_pb.ready);
        assert_eq!(Some(from_pb), project::pod(&json));
        // What the pod watches leave out outside the canaries' namespace.
        let keep = project::Keep {
            labels: false,
            note: false,
        };
        let lean = project::pod_in(&pb.view(), &mut Interner::default(), keep);
        let lean = lean.expect("a projected pod");
        assert_eq!((lean.status_note, lean.sandbox_ready), (None, false));
    }
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
    // A watch's ERROR event whose Status names it only by reason.
    let reason = |code, reason: &str| {
        Error::Status(Status {
            code,
            reason: Some(reason.into()),
            ..Default::default()
        })
    };
    assert!(reason(None, "Expired").gone());
    assert!(reason(Some(0), "Gone").gone());
    assert!(!reason(None, "InternalError").gone());
    assert!(
        !reason(Some(500), "Expired").gone(),
        "a code says more than a reason"
    );
}

#[test]
fn only_the_api_server_s_not_found_means_no_such_object() {
    let status = |code, reason: &str| {
        Error::Status(Status {
            code: Some(code),
            reason: Some(reason.into()),
            ..Default::default()
        })
    };
    assert!(status(404, "NotFound").not_found());
    assert!(!status(404, "").not_found(), "a proxy's 404");
    assert!(!status(410, "NotFound").not_found());
}

#[test]
fn a_pod_s_annotations_read_in_place_as_a_map_reads_them() {
    // Three entries of `annotations` (12): a key twice (a map keeps the
    // last), and a value that is not UTF-8 (Go's JSON writes U+FFFD).
    let entry = |key: &str, value: &[u8]| {
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, &key.to_owned(), &mut entry);
        prost::encoding::bytes::encode(2, &value.to_vec(), &mut entry);
        entry
    };
    let mut meta = Vec::new();
    for (key, value) in [("k", &b"1"[..]), ("note", &[b'a', 0xff]), ("k", b"2")] {
        prost::encoding::bytes::encode(12, &entry(key, value), &mut meta);
    }
    let mut pod = Vec::new();
    prost::encoding::bytes::encode(1, &meta, &mut pod);
    let pod = messages::Pod::decode(pod.as_slice()).expect("a pod");
    let view = pod.view();
    let found = view.annotations.expect("annotations");
    assert_eq!(found.get("k").as_deref(), Some("2"));
    assert_eq!(found.get("note").as_deref(), Some("a\u{fffd}"));
    assert!(found.contains_key("note") && !found.contains_key("missing"));
    let mut all = Vec::new();
    found.for_each(|k, v| all.push(format!("{k}={v}")));
    assert_eq!(all, ["k=1", "note=a\u{fffd}", "k=2"]);
    assert!(messages::Pod::default().view().annotations.is_none());
}
