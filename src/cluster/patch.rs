//! The patch protocol: the exact bytes nodegate sends to change a Node.
//!
//! Opening a gate is one conditional JSON patch (semantics.md §5.4): it tests
//! the node's resourceVersion and each managed taint at its index, removes
//! those taints (highest index first), and records `nodegate.dev/opened-at` and
//! `nodegate.dev/opened-by`. Any change to the node since nodegate last saw it
//! makes a test fail, so the API server refuses the whole patch instead of
//! nodegate clobbering another writer. This module only builds patches.

use jiff::Timestamp;
use nodegate_core::deciders::{TaintChange, TaintWrite};
use nodegate_core::gate::{
    ConditionWrite, OPEN_CONDITION, OpenedBy, TimeoutMark, UntaintPatch, annotation_time,
};
use nodegate_core::vocab::model::{OpenedByMark, Taint};

use nodegate_core::vocab::annotations::{
    OPEN, OPENED_AT, OPENED_BY, REPLACE_REASON, REPLACE_REQUESTED, TIMED_OUT,
};
use serde_json::{Value, json};

/// RFC 3339 at millisecond precision, the form nodegate writes everywhere
/// (the core's `annotation_time`, which the gate compares `opened-at` at).
pub fn rfc3339(t: Timestamp) -> String {
    annotation_time(t).to_string()
}

/// Escapes a key for use as one JSON Pointer segment (RFC 6901).
pub fn pointer_segment(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", pointer_segment(key))
}

/// The op every conditional patch starts with: the node is still at the
/// resourceVersion its writer read.
pub fn version_test(resource_version: &str) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
}

/// The conditional patch of a decider's taint write: it tests the
/// resourceVersion the decider read, and a removal also that the taint at
/// its index is still the one meant. No other taint is ever touched.
pub fn taint_write(w: &TaintWrite) -> json_patch::Patch {
    let mut ops = vec![version_test(&w.resource_version)];
    let annotations = match &w.change {
        TaintChange::Add {
            taint,
            existing,
            annotations,
            annotations_present,
            at,
        } => {
            let present = *annotations_present;
            let version = &w.resource_version;
            return add_taint(version, taint, *existing, annotations, present, *at);
        }
        TaintChange::Remove {
            index,
            taint,
            annotations,
        } => {
            let at = format!("/spec/taints/{index}");
            ops.push(json!({"op": "test", "path": format!("{at}/key"), "value": taint.key}));
            ops.push(json!({"op": "test", "path": format!("{at}/effect"), "value": taint.effect}));
            ops.push(json!({"op": "remove", "path": at}));
            // The node has each annotation the removal changes (its record
            // of the taint).
            annotations
        }
        TaintChange::Annotate { annotations } => annotations,
    };
    // Each annotation set in place (`Some`) or removed (`None`); the node
    // has an annotations map, and each one removed.
    for (k, v) in annotations {
        let path = annotation_path(k);
        ops.push(match v {
            Some(v) => json!({"op": "add", "path": path, "value": v}),
            None => json!({"op": "remove", "path": path}),
        });
    }
    build(ops)
}

/// Putting `taint` on a node read at `resource_version` with `existing`
/// taints, and setting `annotations` (nodegate's own, e.g.
/// `nodegate.dev/gated-since`): the patch of [`taint_write`] for callers
/// that are not deciders (`nodegate backfill`).
pub fn add_taint(
    resource_version: &str,
    taint: &Taint,
    existing: usize,
    annotations: &[(&'static str, String)],
    annotations_present: bool,
    at: Timestamp,
) -> json_patch::Patch {
    // A `NoExecute` taint is stamped `timeAdded` in whole seconds, as the
    // API server's own taint writers do.
    let mut t = json!({"key": taint.key, "effect": taint.effect});
    if !taint.value.is_empty() {
        t["value"] = json!(taint.value);
    }
    if taint.effect == "NoExecute" {
        let whole = Timestamp::from_second(at.as_second()).unwrap_or(at);
        t["timeAdded"] = json!(rfc3339(whole));
    }
    let mut ops = vec![version_test(resource_version)];
    ops.push(if existing == 0 {
        json!({"op": "add", "path": "/spec/taints", "value": [t]})
    } else {
        json!({"op": "add", "path": "/spec/taints/-", "value": t})
    });
    add_annotations(&mut ops, annotations, annotations_present);
    build(ops)
}

/// Adds each of `annotations` to a map the node has (`present`: JSON patch
/// cannot add a key to a map that does not exist, and must not replace one
/// that does), or adds the map with them.
fn add_annotations<V: AsRef<str>>(ops: &mut Vec<Value>, annotations: &[(&str, V)], present: bool) {
    if annotations.is_empty() {
        return;
    }
    if present {
        for (k, v) in annotations {
            ops.push(json!({"op": "add", "path": annotation_path(k), "value": v.as_ref()}));
        }
    } else {
        let map: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.as_ref().to_string())))
            .collect();
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": map}));
    }
}

fn build(ops: Vec<Value>) -> json_patch::Patch {
    // Every op is built from the json! macro in a shape json_patch accepts;
    // a failure here is a bug in this module, reported as such.
    serde_json::from_value(Value::Array(ops))
        .unwrap_or_else(|e| panic!("a node patch is malformed: {e}"))
}

/// The conditional untaint patch that opens a gate.
pub fn untaint(p: &UntaintPatch) -> json_patch::Patch {
    let mut ops = vec![version_test(&p.resource_version)];
    // The gate hands the taints sorted by descending index, so removing them in
    // order never shifts an index still to be removed; sort again anyway, since
    // a wrong order here would remove someone else's taint.
    let mut taints: Vec<_> = p.taints.iter().collect();
    taints.sort_by_key(|t| std::cmp::Reverse(t.index));
    for t in taints {
        let path = format!("/spec/taints/{}", t.index);
        // The taint is tested field by field rather than as a whole object: a
        // taint may carry a `timeAdded` the compact model does not keep, and a
        // whole-object test would then fail on every retry. Key, effect and
        // value identify a taint; the resourceVersion test above already
        // guarantees nothing else changed.
        ops.push(json!({"op": "test", "path": format!("{path}/key"), "value": t.taint.key}));
        ops.push(json!({"op": "test", "path": format!("{path}/effect"), "value": t.taint.effect}));
        if !t.taint.value.is_empty() {
            ops.push(
                json!({"op": "test", "path": format!("{path}/value"), "value": t.taint.value}),
            );
        }
        ops.push(json!({"op": "remove", "path": path}));
    }
    let opened = [
        (OPENED_AT, rfc3339(p.opened_at)),
        (OPENED_BY, p.opened_by.as_str().to_string()),
    ];
    add_annotations(&mut ops, &opened, p.annotations_present);
    // A manual opening consumes its request: the same patch removes the
    // annotation (it is there: the resourceVersion test pins the node the
    // gate saw it on).
    if p.opened_by == OpenedBy::Manual {
        ops.push(json!({"op": "remove", "path": annotation_path(OPEN)}));
    }
    // An open node is no longer being replaced: its request's marks go in
    // the same patch. Each is set, then removed, so that the patch applies
    // whether or not the node still carries it (the map exists: the node
    // carried the request). On a cordoned node the reason stays: it says
    // why the node is cordoned, and `uninstall` reports it.
    if p.clear_replace_request && p.annotations_present {
        let marks: &[&str] = match p.cordoned {
            true => &[REPLACE_REQUESTED],
            false => &[REPLACE_REQUESTED, REPLACE_REASON],
        };
        for &k in marks {
            let path = annotation_path(k);
            ops.push(json!({"op": "add", "path": path, "value": ""}));
            ops.push(json!({"op": "remove", "path": path}));
        }
    }
    build(ops)
}

/// The merge patch that marks a node whose deadline passed with
/// `--on-timeout=keep` or `replace`. Additive only: one annotation.
pub fn mark_timed_out(m: &TimeoutMark) -> Value {
    json!({"metadata": {"annotations": {TIMED_OUT: rfc3339(m.deadline)}}})
}

/// The merge patch that records on a node that someone else removed its
/// managed taints: `opened-at` and `opened-by: external`; a replace
/// request's marks, if any, go as in [`untaint`] (the reason stays on a
/// `cordoned` node).
pub fn opened_externally(at: Timestamp, cordoned: bool) -> Value {
    let mut body = json!({"metadata": {"annotations": {
        OPENED_AT: rfc3339(at), OPENED_BY: OpenedByMark::External.as_str(),
        REPLACE_REQUESTED: null, REPLACE_REASON: null,
    }}});
    if cordoned && let Some(a) = body["metadata"]["annotations"].as_object_mut() {
        a.remove(REPLACE_REASON);
    }
    body
}

/// The strategic merge patch of `nodes/status` that sets the
/// `nodegate.dev/Open` condition. Node conditions merge by `type`, so this
/// leaves every other condition as it is; `lastTransitionTime` (`at`) is
/// sent only when the status changes, so a new message keeps the old one.
pub fn open_condition(w: &ConditionWrite, at: Timestamp) -> Value {
    let mut condition = json!({
        "type": OPEN_CONDITION,
        "status": w.condition.status(),
        "reason": w.condition.reason.as_str(),
        "message": w.condition.message,
    });
    if w.transition {
        condition["lastTransitionTime"] = json!(rfc3339(at));
    }
    json!({"status": {"conditions": [condition]}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::gate::{IndexedTaint, OpenedBy};
    use nodegate_core::vocab::model::Taint;

    fn patch(indexes: &[usize], annotations_present: bool) -> UntaintPatch {
        UntaintPatch {
            node: "n1".into(),
            resource_version: "77".into(),
            taints: indexes
                .iter()
                .map(|&i| IndexedTaint {
                    index: i,
                    taint: Taint::new(format!("k{i}"), "", "NoSchedule"),
                })
                .collect(),
            opened_by: OpenedBy::Ready,
            opened_at: "2026-11-21T10:00:00.123456Z".parse().unwrap(),
            annotations_present,
            clear_replace_request: false,
            cordoned: false,
        }
    }

    #[test]
    fn untaint_tests_version_then_removes_taints_from_the_highest_index() {
        let ops = serde_json::to_value(untaint(&patch(&[1, 3], true))).unwrap();
        let expected = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "77"},
            {"op": "test", "path": "/spec/taints/3/key", "value": "k3"},
            {"op": "test", "path": "/spec/taints/3/effect", "value": "NoSchedule"},
            {"op": "remove", "path": "/spec/taints/3"},
            {"op": "test", "path": "/spec/taints/1/key", "value": "k1"},
            {"op": "test", "path": "/spec/taints/1/effect", "value": "NoSchedule"},
            {"op": "remove", "path": "/spec/taints/1"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1opened-at", "value": "2026-11-21T10:00:00.123Z"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1opened-by", "value": "ready"},
        ]);
        assert_eq!(ops, expected);
    }

    #[test]
    fn untaint_creates_the_annotation_map_only_when_the_node_has_none() {
        let ops = serde_json::to_value(untaint(&patch(&[0], false))).unwrap();
        let last = &ops[4];
        assert_eq!(last["path"], "/metadata/annotations");
        assert_eq!(last["value"][OPENED_BY], "ready");
    }

    /// An opening removes a replace request's marks in the same patch,
    /// whether the node carries both or only `replace-requested`, and
    /// leaves every other annotation as it was.
    #[test]
    fn an_opening_removes_the_replace_marks_whether_or_not_the_reason_is_there() {
        let mut p = patch(&[0], true);
        p.clear_replace_request = true;
        for reason in [true, false] {
            let mut annotations = json!({
                "nodegate.dev/replace-requested": "2026-11-21T09:00:00Z",
                "example.com/keep": "x",
            });
            if reason {
                annotations["nodegate.dev/replace-reason"] = json!("why");
            }
            let mut node = json!({
                "metadata": {"resourceVersion": "77", "annotations": annotations},
                "spec": {"taints": [{"key": "k0", "effect": "NoSchedule"}]},
            });
            json_patch::patch(&mut node, &untaint(&p)).unwrap();
            assert_eq!(
                node["metadata"]["annotations"],
                json!({
                    "example.com/keep": "x",
                    "nodegate.dev/opened-at": "2026-11-21T10:00:00.123Z",
                    "nodegate.dev/opened-by": "ready",
                }),
                "reason present: {reason}"
            );
        }
        // Without a request on the node, nothing of it is in the patch.
        let ops = serde_json::to_value(untaint(&patch(&[0], true))).unwrap();
        assert!(!ops.to_string().contains("replace-"), "{ops}");
    }

    /// On a cordoned node the opening removes the request but keeps its
    /// reason: it says why the node is cordoned, and `uninstall` reports
    /// the cordon by it.
    #[test]
    fn an_opening_of_a_cordoned_node_keeps_the_reason() {
        let mut p = patch(&[0], true);
        p.clear_replace_request = true;
        p.cordoned = true;
        let mut node = json!({
            "metadata": {"resourceVersion": "77", "annotations": {
                "nodegate.dev/replace-requested": "2026-11-21T09:00:00Z",
                "nodegate.dev/replace-reason": "cordoned: no owner known",
            }},
            "spec": {"taints": [{"key": "k0", "effect": "NoSchedule"}], "unschedulable": true},
        });
        json_patch::patch(&mut node, &untaint(&p)).unwrap();
        assert_eq!(
            node["metadata"]["annotations"],
            json!({
                "nodegate.dev/replace-reason": "cordoned: no owner known",
                "nodegate.dev/opened-at": "2026-11-21T10:00:00.123Z",
                "nodegate.dev/opened-by": "ready",
            })
        );
        let mut node = json!({"metadata": {"annotations": {
            "nodegate.dev/replace-requested": "2026-11-21T09:00:00Z",
            "nodegate.dev/replace-reason": "cordoned: no owner known",
        }}});
        json_patch::merge(&mut node, &opened_externally(p.opened_at, true));
        assert_eq!(
            node["metadata"]["annotations"]["nodegate.dev/replace-reason"],
            "cordoned: no owner known"
        );
        assert_eq!(
            node["metadata"]["annotations"].get("nodegate.dev/replace-requested"),
            None
        );
    }

    #[test]
    fn an_external_opening_removes_the_replace_marks() {
        let at: Timestamp = "2026-11-21T10:00:00Z".parse().unwrap();
        let mut node = json!({"metadata": {"annotations": {
            "nodegate.dev/replace-requested": "2026-11-21T09:00:00Z",
            "nodegate.dev/replace-reason": "why",
        }}});
        json_patch::merge(&mut node, &opened_externally(at, false));
        assert_eq!(
            node["metadata"]["annotations"],
            json!({
                "nodegate.dev/opened-at": "2026-11-21T10:00:00Z",
                "nodegate.dev/opened-by": "external",
            })
        );
    }

    #[test]
    fn taint_values_are_part_of_the_test() {
        let mut p = patch(&[0], true);
        p.taints[0].taint.value = "v".into();
        let ops = serde_json::to_value(untaint(&p)).unwrap();
        assert_eq!(
            ops[3],
            json!({"op": "test", "path": "/spec/taints/0/value", "value": "v"})
        );
        assert_eq!(ops[4], json!({"op": "remove", "path": "/spec/taints/0"}));
    }

    #[test]
    fn timed_out_mark_sets_one_annotation() {
        let m = TimeoutMark {
            node: "n".into(),
            deadline: "2026-11-21T10:02:00Z".parse().unwrap(),
        };
        assert_eq!(
            mark_timed_out(&m),
            json!({"metadata": {"annotations": {"nodegate.dev/timed-out": "2026-11-21T10:02:00Z"}}})
        );
    }

    #[test]
    fn the_condition_patch_touches_one_condition_and_sets_the_transition_time_only_on_a_new_status()
    {
        use nodegate_core::gate::{ConditionReason, OpenCondition};
        let mut w = ConditionWrite {
            node: "n1".into(),
            condition: OpenCondition {
                open: false,
                reason: ConditionReason::Waiting,
                message: "waiting for 1 of 1: ns/csi (pod not Ready)".into(),
            },
            transition: true,
        };
        let at: Timestamp = "2026-01-02T03:04:05.678Z".parse().unwrap();
        assert_eq!(
            open_condition(&w, at),
            json!({"status": {"conditions": [{
                "type": "nodegate.dev/Open",
                "status": "False",
                "reason": "Waiting",
                "message": "waiting for 1 of 1: ns/csi (pod not Ready)",
                "lastTransitionTime": "2026-01-02T03:04:05.678Z",
            }]}})
        );
        w.transition = false;
        let body = open_condition(&w, at);
        assert!(
            body["status"]["conditions"][0]
                .get("lastTransitionTime")
                .is_none()
        );
    }
}

#[cfg(test)]
#[path = "patch/tests/taint.rs"]
mod taint_tests;
