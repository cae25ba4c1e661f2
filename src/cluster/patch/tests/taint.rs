//! The taint writes' patches (the deciders' and backfill's).

use jiff::Timestamp;
use nodegate_core::deciders::{Origin, TaintChange, TaintWrite};
use nodegate_core::vocab::model::Taint;
use serde_json::{Value, json};

use super::{add_taint, taint_write};

fn json(p: json_patch::Patch) -> Value {
    serde_json::to_value(p).expect("a patch serializes")
}

fn startup() -> Taint {
    Taint::new("nodegate.dev/initializing", "", "NoSchedule")
}

fn at() -> Timestamp {
    "2026-01-01T00:00:00.5Z".parse().expect("time")
}

fn write(change: TaintChange) -> TaintWrite {
    TaintWrite {
        origin: Origin::Rules,
        node: "n1".into(),
        uid: "u1".into(),
        resource_version: "42".into(),
        change,
        tag: None,
    }
}

#[test]
fn the_patch_tests_the_version_and_appends_to_an_existing_list() {
    assert_eq!(
        json(add_taint("42", &startup(), 1, &[], true, at())),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "add", "path": "/spec/taints/-", "value": {"key": "nodegate.dev/initializing", "effect": "NoSchedule"}},
        ])
    );
}

#[test]
fn the_patch_creates_the_lists_it_needs() {
    let gated_since = [("nodegate.dev/gated-since", super::rfc3339(at()))];
    assert_eq!(
        json(add_taint("42", &startup(), 0, &gated_since, false, at())),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "add", "path": "/spec/taints", "value": [{"key": "nodegate.dev/initializing", "effect": "NoSchedule"}]},
            {"op": "add", "path": "/metadata/annotations", "value": {"nodegate.dev/gated-since": "2026-01-01T00:00:00.5Z"}},
        ])
    );
    assert_eq!(
        json(add_taint("42", &startup(), 1, &gated_since, true, at()))[2],
        json!({"op": "add", "path": "/metadata/annotations/nodegate.dev~1gated-since", "value": "2026-01-01T00:00:00.5Z"})
    );
}

#[test]
fn adding_tests_the_version_and_stamps_no_execute() {
    let at = Timestamp::from_second(1_700_000_000).expect("time");
    let oos = Taint::new(
        "node.kubernetes.io/out-of-service",
        "nodeshutdown",
        "NoExecute",
    );
    let add = |taint: &Taint, existing| {
        json(taint_write(&write(TaintChange::Add {
            taint: taint.clone(),
            existing,
            annotations: Vec::new(),
            annotations_present: true,
            at,
        })))
    };
    let p = add(&oos, 0);
    assert_eq!(
        p[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
    );
    assert_eq!(p[1]["path"], "/spec/taints");
    assert_eq!(p[1]["value"][0]["timeAdded"], "2023-11-14T22:13:20Z");
    assert_eq!(p[1]["value"][0]["value"], "nodeshutdown");
    let other = Taint::new("x", "", "NoSchedule");
    let p = add(&other, 1);
    assert_eq!(p[1]["path"], "/spec/taints/-");
    assert!(p[1]["value"].get("timeAdded").is_none(), "{p}");
    assert!(p[1]["value"].get("value").is_none(), "{p}");
}

#[test]
fn removing_tests_the_taint_at_its_index() {
    let p = json(taint_write(&write(TaintChange::Remove {
        index: 1,
        taint: Taint::new("b", "", "NoExecute"),
        annotations: Vec::new(),
    })));
    assert_eq!(
        p[1],
        json!({"op": "test", "path": "/spec/taints/1/key", "value": "b"})
    );
    assert_eq!(
        p[2],
        json!({"op": "test", "path": "/spec/taints/1/effect", "value": "NoExecute"})
    );
    assert_eq!(p[3], json!({"op": "remove", "path": "/spec/taints/1"}));
}

/// Hardening: a rule's removal also updates nodegate's record of
/// the taints it put on, in the same conditional patch.
#[test]
fn removing_updates_the_record_of_the_rules_taints() {
    let remove = |record: Option<&str>| {
        json(taint_write(&write(TaintChange::Remove {
            index: 0,
            taint: Taint::new("b", "", "NoExecute"),
            annotations: vec![("nodegate.dev/condition-taints", record.map(str::to_string))],
        })))
    };
    let path = "/metadata/annotations/nodegate.dev~1condition-taints";
    let p = remove(Some("other"));
    assert_eq!(p[4], json!({"op": "add", "path": path, "value": "other"}));
    let p = remove(None);
    assert_eq!(p[4], json!({"op": "remove", "path": path}));
}

/// Re-gating's withdrawal of an announced reboot (semantics.md §6.10): the
/// record removed, the resourceVersion tested, no taint touched.
#[test]
fn annotating_tests_the_version_and_touches_no_taint() {
    let p = json(taint_write(&write(TaintChange::Annotate {
        annotations: vec![("nodegate.dev/awaiting-reboot", None)],
    })));
    assert_eq!(
        p,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "remove", "path": "/metadata/annotations/nodegate.dev~1awaiting-reboot"},
        ])
    );
}
