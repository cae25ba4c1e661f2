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

use k8s_openapi::api::core::v1::Node;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use nodegate_core::entrance::{self, Admission, Scope, admit};
use nodegate_core::model::Taint;
use nodegate_core::placement::ManagedTaint;
use serde_json::{Value, json};

use crate::cluster::project;
use crate::serve::metrics::AdmissionResult;

/// What the webhook decided, for the log and the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The AdmissionReview to send back (always HTTP 200).
    pub body: Value,
    pub result: AdmissionResult,
    /// Why the node was left alone, or what was wrong with the request.
    pub note: Option<String>,
    /// The node's name, when it could be read.
    pub node: Option<String>,
}

/// The JSON patch that adds `taint` (key and effect, no value): a one-element
/// list when the node has no `spec.taints`, else an append.
pub fn taint_patch(taint: &Taint, create_list: bool) -> Value {
    let t = json!({"key": taint.key, "effect": taint.effect});
    if create_list {
        json!([{"op": "add", "path": "/spec/taints", "value": [t]}])
    } else {
        json!([{"op": "add", "path": "/spec/taints/-", "value": t}])
    }
}

/// The answer to the request `body`. With `dry_run` (`--dry-run`) a node
/// that would be tainted is admitted unchanged, with a warning saying so: a
/// dry run writes nothing anywhere, and a node the webhook tainted would
/// stay closed (a dry-run gate never opens it).
pub fn answer(body: &[u8], scope: &Scope, managed: &[ManagedTaint], dry_run: bool) -> Answer {
    let (uid, request) = match read_request(body) {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let node = match read_node(&request) {
        Ok(n) => n,
        Err(why) => return refuse_to_judge(uid, format!("cannot read the node: {why}")),
    };
    judge(uid, &request, &node, scope, managed, dry_run)
}

/// The review's uid and request, if the body is a review of a Node CREATE;
/// otherwise the answer that admits it unchanged, saying why.
fn read_request(body: &[u8]) -> Result<(String, AdmissionRequest<DynamicObject>), Answer> {
    let raw: Value = serde_json::from_slice(body)
        .map_err(|e| refuse_to_judge(String::new(), format!("the body is not JSON: {e}")))?;
    let uid = raw
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let review: AdmissionReview<DynamicObject> = serde_json::from_value(raw).map_err(|e| {
        refuse_to_judge(
            uid.clone(),
            format!("the body is not an AdmissionReview: {e}"),
        )
    })?;
    let request: AdmissionRequest<DynamicObject> = review
        .try_into()
        .map_err(|_| refuse_to_judge(uid.clone(), "the AdmissionReview has no request".into()))?;
    if request.kind.kind != "Node" || !request.kind.group.is_empty() {
        let why = format!(
            "expected a Node, got {:?} (group {:?}): check the webhook's rules",
            request.kind.kind, request.kind.group
        );
        return Err(refuse_to_judge(uid, why));
    }
    if request.operation != Operation::Create {
        let why = format!(
            "expected a CREATE, got {:?}: check the webhook's rules",
            request.operation
        );
        return Err(refuse_to_judge(uid, why));
    }
    Ok((uid, request))
}

/// The Node the request creates.
fn read_node(request: &AdmissionRequest<DynamicObject>) -> Result<Node, String> {
    request
        .object
        .as_ref()
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| e.to_string())
        .and_then(|v| v.ok_or_else(|| "the request has no object".to_string()))
        .and_then(|v| serde_json::from_value(v).map_err(|e| format!("not a Node: {e}")))
}

/// The entrance's decision for `node` ([`admit`]), as an answer.
fn judge(
    uid: String,
    request: &AdmissionRequest<DynamicObject>,
    node: &Node,
    scope: &Scope,
    managed: &[ManagedTaint],
    dry_run: bool,
) -> Answer {
    // A node being created has no creationTimestamp yet: that oddity of
    // the projection is expected here, and no decision reads the time.
    let Some(info) = project::node(node).0 else {
        return refuse_to_judge(uid, "the node has no name".into());
    };
    let name = Some(info.name.clone());
    let response = AdmissionResponse::from(request);
    // Whether the object has `spec.taints` at all, even empty: the patch
    // appends to a list that is there and creates one that is not.
    let listed = node.spec.as_ref().is_some_and(|s| s.taints.is_some());
    match admit(&entrance::view(&info), listed, scope, managed) {
        Admission::AddTaint { taint, .. } if dry_run => {
            let mut response = response;
            response.warnings = Some(vec![format!(
                "nodegate runs in dry run: it would have added the taint {taint}; the node is admitted unchanged"
            )]);
            Answer {
                body: review_json(response),
                result: AdmissionResult::WouldTaint,
                note: Some(format!("would add {taint}")),
                node: name,
            }
        }
        Admission::AddTaint { taint, create_list } => {
            let patch: json_patch::Patch =
                match serde_json::from_value(taint_patch(&taint, create_list)) {
                    Ok(p) => p,
                    Err(e) => return refuse_to_judge(uid, format!("building the patch: {e}")),
                };
            match response.with_patch(patch) {
                Ok(r) => Answer {
                    body: review_json(r),
                    result: AdmissionResult::Tainted,
                    note: Some(format!("adds {taint}")),
                    node: name,
                },
                Err(e) => refuse_to_judge(uid, format!("serializing the patch: {e}")),
            }
        }
        Admission::Unchanged(skip) => Answer {
            body: review_json(response),
            result: AdmissionResult::Unchanged,
            note: Some(skip.to_string()),
            node: name,
        },
    }
}

/// The answer to a request whose body could not even be read (`why`):
/// allowed, with an empty uid and a warning.
pub fn unreadable(why: String) -> Answer {
    refuse_to_judge(String::new(), format!("the body cannot be read: {why}"))
}

/// Allowed unchanged, with a warning: nodegate never blocks a node it cannot
/// judge.
fn refuse_to_judge(uid: String, why: String) -> Answer {
    let mut response = AdmissionResponse::invalid(&why);
    response.uid = uid;
    response.allowed = true;
    response.result = Default::default();
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
            (b"{\"kind\": 7}".to_vec(), "", "not an AdmissionReview"),
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
}
