//! One AdmissionReview in, one out: the webhook's answer as a pure function
//! of the request body and the settings (semantics §6.1), always `allowed:
//! true`. An answer without the request's uid is rejected by the API server,
//! which then applies the webhook's failurePolicy: the best that can be done
//! with a body whose uid cannot be found.

use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint as ApiTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::admission::AdmissionResponse;
use nodegate_core::net::entrance::{self, Admission, admit};
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::rules::startup::StartupTaints;
use nodegate_core::vocab::annotations::PREFIX;
use nodegate_core::vocab::config::Scope;
use serde_json::{Value, json};

use crate::cluster::patch::pointer_segment;
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

/// The answer to the request `body`. With `dry_run` (`--dry-run`) a node
/// that would be tainted is admitted unchanged, with a warning saying so: a
/// dry run writes nothing anywhere, and a node the webhook tainted would
/// stay closed (a dry-run gate never opens it).
///
/// A Node created by a node's own credentials (group `system:nodes`) has
/// its `nodegate.dev/*` annotations disregarded — a kubelet must not skip,
/// open or date its own gate — and removed by the patch (semantics §6.1).
///
/// Every node gets the first of `managed` (no `--taint-for` rule or preset;
/// [`answer_held`] takes them).
pub fn answer(body: &[u8], scope: &Scope, managed: &[ManagedTaint], dry_run: bool) -> Answer {
    let hold = if dry_run { Hold::DryRun } else { Hold::No };
    let startup = match managed.first() {
        Some(first) => StartupTaints::new(Vec::new(), &[], first.clone()),
        None => StartupTaints::default(),
    };
    answer_held(body, scope, managed, &startup, &hold)
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

/// [`answer`], with the rules choosing each node's taint (`startup`) and
/// the reason to hold the taint back given whole.
pub fn answer_held(
    body: &[u8],
    scope: &Scope,
    managed: &[ManagedTaint],
    startup: &StartupTaints,
    hold: &Hold,
) -> Answer {
    let request = match read_request(body) {
        Ok(r) => r,
        Err(refused) => return refused,
    };
    let Some(object) = request.object.as_ref() else {
        return refuse_to_judge(request.uid, "the request has no object".into());
    };
    let from_node = request.user_info.groups.iter().any(|g| g == "system:nodes");
    let untrusted = if from_node {
        nodegate_annotations(object)
    } else {
        Vec::new()
    };
    let node = node_of(object, &untrusted);
    let taints = (managed, startup);
    let mut a = judge(&request.uid, &node, scope, taints, hold, &untrusted);
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
    let review: Review =
        serde_json::from_slice(body).map_err(|e| match e.is_syntax() || e.is_eof() {
            true => refuse_to_judge(String::new(), format!("the body is not JSON: {e}")),
            false => {
                let why = format!("the body is not an AdmissionReview: {e}");
                refuse_to_judge(parse::uid(body), why)
            }
        })?;
    let why = "the AdmissionReview has no request";
    let request = review
        .request
        .ok_or_else(|| refuse_to_judge(String::new(), why.into()))?;
    let why = if request.kind.kind != "Node" || !request.kind.group.is_empty() {
        format!(
            "expected a Node, got {:?} (group {:?}): check the webhook's rules",
            request.kind.kind, request.kind.group
        )
    } else if request.operation != "CREATE" {
        format!(
            "expected a CREATE, got {:?}: check the webhook's rules",
            request.operation
        )
    } else {
        return Ok(request);
    };
    Err(refuse_to_judge(request.uid, why))
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
    let taint = |t: &parse::TaintIn| ApiTaint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
        time_added: None,
    };
    Node {
        metadata: ObjectMeta {
            name: object.metadata.name.clone(),
            labels: object.metadata.labels.clone(),
            annotations,
            ..Default::default()
        },
        spec: object.spec.as_ref().map(|s| NodeSpec {
            taints: s.taints.as_ref().map(|ts| ts.iter().map(taint).collect()),
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
    (managed, startup): (&[ManagedTaint], &StartupTaints),
    hold: &Hold,
    strip: &[String],
) -> Answer {
    // A node being created has no creationTimestamp yet: that oddity of
    // the projection is expected here, and no decision reads the time.
    let Some(info) = project::node(node).0 else {
        return refuse_to_judge(uid.to_string(), "the node has no name".into());
    };
    // Whether the object has `spec.taints` at all, even empty: the patch
    // appends to a list that is there and creates one that is not.
    let listed = node.spec.as_ref().is_some_and(|s| s.taints.is_some());
    let admission = admit(&entrance::view(&info), listed, scope, managed, startup);
    let mut d = decide(admission, hold);
    if !strip.is_empty() {
        let keys = clean(&strip.join(", "));
        if *hold == Hold::DryRun {
            d.note.push_str(&format!("; would remove {keys}"));
        } else {
            let remove = |key: &String| {
                let path = format!("/metadata/annotations/{}", pointer_segment(key));
                json!({"op": "remove", "path": path})
            };
            d.ops.extend(strip.iter().map(remove));
            d.note.push_str(&format!("; removes {keys}"));
            d.warnings.push(format!(
                "nodegate removed the annotations {keys}: a node may not set nodegate.dev/ annotations on itself"
            ));
        }
    }
    let mut response = allowed(uid);
    response.warnings = (!d.warnings.is_empty()).then_some(d.warnings);
    if !d.ops.is_empty() {
        let patched = serde_json::from_value::<json_patch::Patch>(Value::Array(d.ops))
            .map_err(|e| format!("building the patch: {e}"))
            .and_then(|p| {
                response
                    .with_patch(p)
                    .map_err(|e| format!("serializing the patch: {e}"))
            });
        response = match patched {
            Ok(r) => r,
            Err(why) => return refuse_to_judge(uid.to_string(), why),
        };
    }
    Answer {
        body: review_json(response),
        result: d.result,
        note: Some(d.note),
        node: Some(clean(&info.name)),
    }
}

/// What an answer says before it is built.
struct Decision {
    ops: Vec<Value>,
    result: AdmissionResult,
    note: String,
    warnings: Vec<String>,
}

/// The entrance's decision under `hold`.
fn decide(admission: Admission, hold: &Hold) -> Decision {
    let held = |result, note: String, warning: String| Decision {
        ops: vec![],
        result,
        note,
        warnings: vec![warning],
    };
    match (admission, hold) {
        (Admission::AddTaint { taint, .. }, Hold::DryRun) => held(
            AdmissionResult::WouldTaint,
            format!("would add {taint}"),
            format!(
                "nodegate runs in dry run: it would have added the taint {taint}; the node is admitted unchanged"
            ),
        ),
        (Admission::AddTaint { taint, .. }, Hold::NoLeader(why)) => held(
            AdmissionResult::NoLeader,
            format!("no leader, would add {taint}"),
            format!(
                "nodegate would have added the taint {taint}, but no replica leads ({why}): the node is admitted unchanged, since nothing would open it"
            ),
        ),
        (Admission::AddTaint { taint, create_list }, Hold::No) => {
            // Key and effect, no value.
            let t = json!({"key": taint.key, "effect": taint.effect});
            let op = match create_list {
                true => json!({"op": "add", "path": "/spec/taints", "value": [t]}),
                false => json!({"op": "add", "path": "/spec/taints/-", "value": t}),
            };
            Decision {
                ops: vec![op],
                result: AdmissionResult::Tainted,
                note: format!("adds {taint}"),
                warnings: vec![],
            }
        }
        (Admission::Unchanged(skip), _) => Decision {
            ops: vec![],
            result: AdmissionResult::Unchanged,
            note: clean(&skip.to_string()),
            warnings: vec![],
        },
    }
}

/// An empty "allowed" response to the review `uid`.
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
mod tests;
