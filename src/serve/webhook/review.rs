//! One AdmissionReview in, one out: the webhook's answer as a pure function
//! of the request body and the settings (semantics §6.1).
//!
//! The answer is always `allowed: true`. A Node CREATE that [`admit`] says
//! to taint gets a JSONPatch adding the first managed taint; anything that
//! cannot be read, or is not a Node CREATE, is admitted unchanged with a
//! `warnings` entry saying what was wrong, and is counted as an error. The
//! uid is copied from the request whenever it can be found, even in a body
//! that is otherwise unusable; when it cannot, the answer carries an empty
//! uid (the API server then rejects the answer itself and applies the
//! webhook's failurePolicy — nothing better can be done with such a body).

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint as ApiTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::AdmissionResponse;
use nodegate_core::annotations::PREFIX;
use nodegate_core::entrance::{self, Admission, Scope, admit};
use nodegate_core::model::Taint;
use nodegate_core::placement::ManagedTaint;
use serde_json::{Value, json};

use crate::cluster::project;
use crate::serve::metrics::AdmissionResult;

pub mod parse;
use parse::{NodeObject, Request, Review, clean};

/// What the webhook decided, for the log and the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The AdmissionReview to send back (always HTTP 200).
    pub body: Value,
    pub result: AdmissionResult,
    /// Why the node was left alone, or what was wrong with the request;
    /// control characters escaped ([`clean`]).
    pub note: Option<String>,
    /// The node's name, when it could be read; control characters escaped.
    pub node: Option<String>,
}

/// The JSON patch operation that adds `taint` (key and effect, no value):
/// a one-element list when the node has no `spec.taints`, else an append.
pub fn taint_patch(taint: &Taint, create_list: bool) -> Value {
    let t = json!({"key": taint.key, "effect": taint.effect});
    if create_list {
        json!({"op": "add", "path": "/spec/taints", "value": [t]})
    } else {
        json!({"op": "add", "path": "/spec/taints/-", "value": t})
    }
}

/// The JSON patch operation that removes the annotation `key` (RFC 6901
/// escaping: `~` is `~0`, `/` is `~1`).
pub fn remove_annotation(key: &str) -> Value {
    let escaped = key.replace('~', "~0").replace('/', "~1");
    json!({"op": "remove", "path": format!("/metadata/annotations/{escaped}")})
}

/// The answer to the request `body`. With `dry_run` (`--dry-run`) a node
/// that would be tainted is admitted unchanged, with a warning saying so: a
/// dry run writes nothing anywhere, and a node the webhook tainted would
/// stay closed (a dry-run gate never opens it).
///
/// A Node created by a node's own credentials (group `system:nodes`) has
/// its `nodegate.dev/*` annotations disregarded — a kubelet must not skip,
/// open or date its own gate — and removed by the patch (semantics §6.1).
pub fn answer(body: &[u8], scope: &Scope, managed: &[ManagedTaint], dry_run: bool) -> Answer {
    let hold = if dry_run { Hold::DryRun } else { Hold::No };
    answer_held(body, scope, managed, &hold)
}

/// Why a node the webhook would taint is admitted unchanged instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    /// Taint as decided.
    No,
    /// `--dry-run`: nothing is written anywhere.
    DryRun,
    /// No replica leads (the reason, for the warning): a tainted node would
    /// stay closed, nothing would open it.
    NoLeader(String),
}

/// [`answer`], with the reason to hold the taint back given whole.
pub fn answer_held(body: &[u8], scope: &Scope, managed: &[ManagedTaint], hold: &Hold) -> Answer {
    let request = match read_request(body) {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let Some(object) = request.object.as_ref() else {
        return refuse_to_judge(request.uid, "the request has no object".into());
    };
    let from_node = request.user_info.is_node();
    let untrusted = if from_node {
        nodegate_annotations(object)
    } else {
        Vec::new()
    };
    let node = node_of(object, &untrusted);
    let mut a = judge(&request.uid, &node, scope, managed, hold, &untrusted);
    if from_node {
        a.note = a.note.map(|n| {
            format!(
                "{n} (created by the node identity {})",
                clean(&request.user_info.username)
            )
        });
    }
    a
}

/// The review's request, if the body is a review of a Node CREATE;
/// otherwise the answer that admits it unchanged, saying why.
fn read_request(body: &[u8]) -> Result<Request, Answer> {
    let review: Review = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) if e.is_syntax() || e.is_eof() => {
            let why = format!("the body is not JSON: {e}");
            return Err(refuse_to_judge(String::new(), why));
        }
        Err(e) => {
            let why = format!("the body is not an AdmissionReview: {e}");
            return Err(refuse_to_judge(parse::uid(body), why));
        }
    };
    let Some(request) = review.request else {
        let why = "the AdmissionReview has no request".to_string();
        return Err(refuse_to_judge(String::new(), why));
    };
    if request.kind.kind != "Node" || !request.kind.group.is_empty() {
        let why = format!(
            "expected a Node, got {:?} (group {:?}): check the webhook's rules",
            request.kind.kind, request.kind.group
        );
        return Err(refuse_to_judge(request.uid, why));
    }
    if request.operation != "CREATE" {
        let why = format!(
            "expected a CREATE, got {:?}: check the webhook's rules",
            request.operation
        );
        return Err(refuse_to_judge(request.uid, why));
    }
    Ok(request)
}

/// The `nodegate.dev/*` annotation keys on `object`, sorted.
fn nodegate_annotations(object: &NodeObject) -> Vec<String> {
    object
        .metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with(PREFIX))
        .cloned()
        .collect()
}

/// The Node the entrance decision reads, without the annotations in
/// `drop`.
fn node_of(object: &NodeObject, drop: &[String]) -> Node {
    let annotations = object.metadata.annotations.as_ref().map(|a| {
        a.iter()
            .filter(|(k, _)| !drop.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    let taints = object
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| ApiTaint {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                    time_added: None,
                })
                .collect()
        });
    Node {
        metadata: ObjectMeta {
            name: object.metadata.name.clone(),
            labels: object.metadata.labels.clone(),
            annotations,
            ..Default::default()
        },
        spec: object.spec.as_ref().map(|_| NodeSpec {
            taints,
            ..Default::default()
        }),
        status: None,
    }
}

/// The entrance's decision for `node` ([`admit`]), as an answer; `strip`
/// are the annotations the patch removes (none in a dry run).
fn judge(
    uid: &str,
    node: &Node,
    scope: &Scope,
    managed: &[ManagedTaint],
    hold: &Hold,
    strip: &[String],
) -> Answer {
    let dry_run = *hold == Hold::DryRun;
    // A node being created has no creationTimestamp yet: that oddity of
    // the projection is expected here, and no decision reads the time.
    let Some(info) = project::node(node).0 else {
        return refuse_to_judge(uid.to_string(), "the node has no name".into());
    };
    let name = Some(clean(&info.name));
    // Whether the object has `spec.taints` at all, even empty: the patch
    // appends to a list that is there and creates one that is not.
    let listed = node.spec.as_ref().is_some_and(|s| s.taints.is_some());
    let mut response = allowed(uid);
    let (mut ops, result, note) = match admit(&entrance::view(&info), listed, scope, managed) {
        Admission::AddTaint { taint, .. } if dry_run => {
            response.warnings = Some(vec![format!(
                "nodegate runs in dry run: it would have added the taint {taint}; the node is admitted unchanged"
            )]);
            (
                vec![],
                AdmissionResult::WouldTaint,
                format!("would add {taint}"),
            )
        }
        Admission::AddTaint { taint, .. } if matches!(hold, Hold::NoLeader(_)) => {
            let why = match hold {
                Hold::NoLeader(why) => why.as_str(),
                _ => "",
            };
            response.warnings = Some(vec![format!(
                "nodegate would have added the taint {taint}, but no replica leads ({why}): the node is admitted unchanged, since nothing would open it"
            )]);
            (
                vec![],
                AdmissionResult::NoLeader,
                format!("no leader, would add {taint}"),
            )
        }
        Admission::AddTaint { taint, create_list } => (
            vec![taint_patch(&taint, create_list)],
            AdmissionResult::Tainted,
            format!("adds {taint}"),
        ),
        Admission::Unchanged(skip) => {
            (vec![], AdmissionResult::Unchanged, clean(&skip.to_string()))
        }
    };
    let mut note = note;
    if !strip.is_empty() {
        let keys = clean(&strip.join(", "));
        if dry_run {
            note.push_str(&format!("; would remove {keys}"));
        } else {
            ops.extend(strip.iter().map(|k| remove_annotation(k)));
            note.push_str(&format!("; removes {keys}"));
            response.warnings.get_or_insert_default().push(format!(
                "nodegate removed the annotations {keys}: a node may not set nodegate.dev/ annotations on itself"
            ));
        }
    }
    if !ops.is_empty() {
        let patch: json_patch::Patch = match serde_json::from_value(Value::Array(ops)) {
            Ok(p) => p,
            Err(e) => return refuse_to_judge(uid.to_string(), format!("building the patch: {e}")),
        };
        response = match response.with_patch(patch) {
            Ok(r) => r,
            Err(e) => {
                return refuse_to_judge(uid.to_string(), format!("serializing the patch: {e}"));
            }
        };
    }
    Answer {
        body: review_json(response),
        result,
        note: Some(note),
        node: name,
    }
}

/// An empty "allowed" response to the review `uid`, in
/// `admission.k8s.io/v1`.
fn allowed(uid: &str) -> AdmissionResponse {
    let mut response = AdmissionResponse::invalid("");
    response.uid = uid.to_string();
    response.allowed = true;
    response.result = Default::default();
    response
}

/// The answer to a request whose body could not even be read (`why`):
/// allowed, with an empty uid and a warning.
pub fn unreadable(why: String) -> Answer {
    refuse_to_judge(String::new(), format!("the body cannot be read: {why}"))
}

/// Allowed unchanged, with a warning: nodegate never blocks a node it cannot
/// judge.
pub fn refuse_to_judge(uid: String, why: String) -> Answer {
    let why = clean(&why);
    let mut response = allowed(&uid);
    response.warnings = Some(vec![format!(
        "nodegate admitted this object unchanged: {why}"
    )]);
    Answer {
        body: review_json(response),
        result: AdmissionResult::Error,
        note: Some(why),
        node: None,
    }
}

fn review_json(response: AdmissionResponse) -> Value {
    // An AdmissionReview of plain strings, numbers and bytes always
    // serializes; `Null` would be answered (and count as an error upstream)
    // if it ever did not.
    serde_json::to_value(response.into_review()).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed() -> Vec<ManagedTaint> {
        vec![ManagedTaint::new("nodegate.dev/initializing", "NoSchedule")]
    }

    fn review(kind: &str, operation: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": kind},
                "resource": {"group": "", "version": "v1", "resource": "nodes"},
                "name": "n1",
                "operation": operation,
                "userInfo": {"username": "system:node:n1"},
                "object": object,
                "dryRun": false,
            }
        }))
        .expect("static review")
    }

    fn node(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"pool": "a"}}, "spec": spec})
    }

    fn patch_of(a: &Answer) -> Value {
        // kube serializes the patch's bytes as a list of numbers, which the
        // API server reads as well as base64.
        let bytes: Vec<u8> =
            serde_json::from_value(a.body["response"]["patch"].clone()).expect("a patch");
        serde_json::from_slice(&bytes).expect("JSON patch")
    }

    fn assert_allowed(a: &Answer) {
        assert_eq!(a.body["apiVersion"], "admission.k8s.io/v1", "{}", a.body);
        assert_eq!(a.body["kind"], "AdmissionReview", "{}", a.body);
        assert_eq!(a.body["response"]["allowed"], true, "{}", a.body);
    }

    #[test]
    fn a_dry_run_admits_a_node_it_would_taint_unchanged_and_says_so() {
        let a = answer(
            &review("Node", "CREATE", node(json!({}))),
            &Scope::default(),
            &managed(),
            true,
        );
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::WouldTaint);
        assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
        assert!(a.body["response"].get("patchType").is_none(), "{}", a.body);
        let warning = a.body["response"]["warnings"][0].as_str().unwrap_or("");
        assert!(
            warning.contains("dry run") && warning.contains("nodegate.dev/initializing"),
            "{}",
            a.body
        );
        // A node it would leave alone anyway is plainly unchanged.
        let gated =
            node(json!({"taints": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]}));
        let a = answer(
            &review("Node", "CREATE", gated),
            &Scope::default(),
            &managed(),
            true,
        );
        assert_eq!(a.result, AdmissionResult::Unchanged);
    }

    #[test]
    fn a_node_without_taints_gets_a_new_list() {
        let a = answer(
            &review("Node", "CREATE", node(json!({}))),
            &Scope::default(),
            &managed(),
            false,
        );
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::Tainted);
        assert_eq!(a.node.as_deref(), Some("n1"));
        assert_eq!(
            a.body["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
        assert_eq!(a.body["response"]["patchType"], "JSONPatch");
        assert_eq!(
            patch_of(&a),
            json!([{"op": "add", "path": "/spec/taints", "value": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]}])
        );
    }

    #[test]
    fn a_node_with_other_taints_gets_one_appended() {
        for taints in [json!([]), json!([{"key": "other", "effect": "NoExecute"}])] {
            let a = answer(
                &review("Node", "CREATE", node(json!({"taints": taints}))),
                &Scope::default(),
                &managed(),
                false,
            );
            assert_allowed(&a);
            assert_eq!(a.result, AdmissionResult::Tainted);
            assert_eq!(
                patch_of(&a),
                json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "nodegate.dev/initializing", "effect": "NoSchedule"}}])
            );
        }
    }

    #[test]
    fn a_gated_ignored_or_foreign_node_is_admitted_unchanged() {
        let gated =
            node(json!({"taints": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]}));
        let mut ignored = node(json!({}));
        ignored["metadata"]["annotations"] = json!({"nodegate.dev/ignore": "true"});
        let foreign = Scope {
            node_selector: Some("pool=b".parse().expect("selector")),
        };
        for (body, scope, why) in [
            (gated, Scope::default(), "already carries"),
            (ignored, Scope::default(), "nodegate.dev/ignore"),
            (node(json!({})), foreign, "node selector"),
        ] {
            let a = answer(&review("Node", "CREATE", body), &scope, &managed(), false);
            assert_allowed(&a);
            assert_eq!(a.result, AdmissionResult::Unchanged);
            assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
            assert!(a.note.as_deref().is_some_and(|n| n.contains(why)), "{a:?}");
        }
    }

    #[test]
    fn garbage_is_admitted_with_a_warning_and_counted_as_an_error() {
        let cases: Vec<(Vec<u8>, &str, &str)> = vec![
            (b"not json at all".to_vec(), "", "not JSON"),
            (b"{\"kind\": 7}".to_vec(), "", "no request"),
            (b"[1, 2]".to_vec(), "", "not an AdmissionReview"),
            (
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
                "",
                "no request",
            ),
            (
                review("Pod", "CREATE", json!({"metadata": {"name": "p"}})),
                "705ab4f5-6393-11e8-b7cc-42010a800002",
                "expected a Node",
            ),
            (
                review("Node", "UPDATE", node(json!({}))),
                "705ab4f5-6393-11e8-b7cc-42010a800002",
                "expected a CREATE",
            ),
            (
                review("Node", "CREATE", json!({"metadata": {"name": 5}})),
                "705ab4f5-6393-11e8-b7cc-42010a800002",
                "",
            ),
            (
                br#"{"request": {"uid": "u-1", "operation": 3}}"#.to_vec(),
                "u-1",
                "not an AdmissionReview",
            ),
        ];
        for (body, uid, why) in cases {
            let a = answer(&body, &Scope::default(), &managed(), false);
            assert_allowed(&a);
            assert_eq!(a.result, AdmissionResult::Error, "{}", a.body);
            assert_eq!(a.body["response"]["uid"], uid, "{}", a.body);
            assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
            let warning = a.body["response"]["warnings"][0]
                .as_str()
                .unwrap_or_default();
            assert!(
                warning.starts_with("nodegate admitted this object unchanged: ")
                    && warning.contains(why),
                "{warning:?} for {}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    fn review_as(user: Value, object: Value) -> Vec<u8> {
        let mut v: Value = serde_json::from_slice(&review("Node", "CREATE", object)).expect("JSON");
        v["request"]["userInfo"] = user;
        serde_json::to_vec(&v).expect("JSON")
    }

    #[test]
    fn unknown_fields_of_any_size_are_skipped() {
        let mut object = node(json!({"pad": vec![0u8; 200_000], "podCIDR": "10.0.0.0/24"}));
        object["metadata"]["managedFields"] = json!([{"manager": "x", "fieldsV1": {"f:a": {}}}]);
        object["status"] = json!({"images": [{"names": ["a"], "sizeBytes": 1}]});
        let mut body: Value =
            serde_json::from_slice(&review("Node", "CREATE", object)).expect("JSON");
        body["request"]["unknown"] = json!({"deep": [[[[1]]]]});
        let a = answer(
            &serde_json::to_vec(&body).expect("JSON"),
            &Scope::default(),
            &managed(),
            false,
        );
        assert_eq!(a.result, AdmissionResult::Tainted, "{a:?}");
        assert_eq!(a.node.as_deref(), Some("n1"));
    }

    #[test]
    fn a_node_identity_cannot_skip_or_date_its_own_gate() {
        let mut object = node(json!({}));
        object["metadata"]["annotations"] = json!({
            "nodegate.dev/ignore": "true",
            "nodegate.dev/gated-since": "2000-01-01T00:00:00Z",
            "nodegate.dev/opened-by": "manual",
            "example.com/kept": "yes",
        });
        let kubelet = json!({"username": "system:node:n1", "groups": ["system:nodes", "system:authenticated"]});
        let a = answer(
            &review_as(kubelet, object.clone()),
            &Scope::default(),
            &managed(),
            false,
        );
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::Tainted, "{a:?}");
        let patch = patch_of(&a);
        assert_eq!(
            patch,
            json!([
                {"op": "add", "path": "/spec/taints", "value": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]},
                {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1gated-since"},
                {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1ignore"},
                {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1opened-by"},
            ])
        );
        let applied = json_patch::patch(
            &mut object.clone(),
            &serde_json::from_value::<json_patch::Patch>(patch).expect("a patch"),
        );
        assert!(
            applied.is_ok(),
            "the patch applies to the object: {applied:?}"
        );
        // Anyone else may still exempt a node at creation.
        let admin = json!({"username": "admin", "groups": ["system:masters"]});
        let a = answer(
            &review_as(admin, object.clone()),
            &Scope::default(),
            &managed(),
            false,
        );
        assert_eq!(a.result, AdmissionResult::Unchanged, "{a:?}");
        // A dry run still decides without them, and removes nothing.
        let kubelet = json!({"username": "system:node:n1", "groups": ["system:nodes"]});
        let a = answer(
            &review_as(kubelet, object),
            &Scope::default(),
            &managed(),
            true,
        );
        assert_eq!(a.result, AdmissionResult::WouldTaint, "{a:?}");
        assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
    }

    #[test]
    fn text_from_the_review_cannot_start_a_line() {
        let mut body: Value =
            serde_json::from_slice(&review("Node", "CREATE", node(json!({})))).expect("JSON");
        body["request"]["operation"] = json!("X\nINFO forged");
        let a = answer(
            &serde_json::to_vec(&body).expect("JSON"),
            &Scope::default(),
            &managed(),
            false,
        );
        assert_eq!(a.result, AdmissionResult::Error);
        let note = a.note.unwrap_or_default();
        assert!(
            note.contains("X\\nINFO forged") && !note.contains('\n'),
            "{note:?}"
        );
        let warning = a.body["response"]["warnings"][0]
            .as_str()
            .unwrap_or_default();
        assert!(!warning.contains('\n'), "{warning:?}");
        // A name with a newline is escaped too.
        let mut named = node(json!({}));
        named["metadata"]["name"] = json!("n1\nINFO forged");
        let a = answer(
            &review("Node", "CREATE", named),
            &Scope::default(),
            &managed(),
            false,
        );
        assert!(
            a.node.as_deref().is_some_and(|n| !n.contains('\n')),
            "{a:?}"
        );
    }

    #[test]
    fn the_uid_is_sniffed_from_the_first_bytes_only_when_plain() {
        // As the API server writes it: the request's uid first.
        let body = br#"{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","kind":{"group":"","version":"v1","kind":"Node"},"object":{"#;
        assert_eq!(
            parse::sniff_uid(body),
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
        assert_eq!(
            parse::sniff_uid(br#"{"request": {"uid" : "a-1", "x": 1"#),
            "a-1"
        );
        assert_eq!(parse::sniff_uid(br#"{"uid": "a-1"}"#), "");
        assert_eq!(parse::sniff_uid(br#"{"request": {"uid": "a\n1"}}"#), "");
        assert_eq!(parse::sniff_uid(br#"{"request": {"uid": 5}}"#), "");
    }

    #[test]
    fn with_no_leader_a_node_is_admitted_unchanged_and_says_why() {
        let hold = Hold::NoLeader("no replica has renewed lease ns/x for 31s".into());
        let a = answer_held(
            &review("Node", "CREATE", node(json!({}))),
            &Scope::default(),
            &managed(),
            &hold,
        );
        assert_allowed(&a);
        assert_eq!(a.result, AdmissionResult::NoLeader);
        assert!(a.body["response"].get("patch").is_none(), "{}", a.body);
        let warning = a.body["response"]["warnings"][0].as_str().unwrap_or("");
        assert!(warning.contains("lease ns/x"), "{}", a.body);
    }
}
