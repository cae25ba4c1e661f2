use super::*;
use jiff::Timestamp;
use nodegate_core::vocab::model::Fallback;

fn write(action: ReplaceAction, annotations_present: bool) -> ReplaceWrite {
    ReplaceWrite {
        node: "n1".into(),
        uid: "u".into(),
        resource_version: "42".into(),
        annotations_present,
        action,
    }
}

fn at() -> Timestamp {
    "2026-11-27T11:00:00.123Z".parse().unwrap()
}

fn ops(p: Option<json_patch::Patch>) -> Value {
    serde_json::to_value(p.expect("a patch")).unwrap()
}

#[test]
fn a_request_with_no_owner_cordons_and_marks_the_node_at_its_version() {
    let w = write(
        ReplaceAction::Request {
            owner: Owner::None,
            provider_id: None,
            at: at(),
            reason: "why".into(),
        },
        false,
    );
    assert_eq!(
        ops(mark(&w)),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "add", "path": "/metadata/annotations", "value": {}},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1replace-requested", "value": "2026-11-27T11:00:00.123Z"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1replace-reason", "value": "why"},
            {"op": "add", "path": "/spec/unschedulable", "value": true},
        ])
    );
}

#[test]
fn a_request_with_an_owner_only_marks_and_a_fallback_only_records() {
    let w = write(
        ReplaceAction::Request {
            owner: Owner::NodeClaim,
            provider_id: Some("kwok://n1".into()),
            at: at(),
            reason: "why".into(),
        },
        true,
    );
    let v = ops(mark(&w));
    assert_eq!(v.as_array().unwrap().len(), 3, "{v}");
    assert!(!v.to_string().contains("unschedulable"), "{v}");
    let w = write(
        ReplaceAction::Fallback {
            fallback: Fallback::Open,
            at: at(),
            note: String::new(),
        },
        true,
    );
    assert_eq!(
        ops(mark(&w)),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1replace-fallback", "value": "open"},
            {"op": "add", "path": "/metadata/annotations/nodegate.dev~1replace-fallback-at", "value": "2026-11-27T11:00:00.123Z"},
        ])
    );
    let again = write(
        ReplaceAction::DeleteOwner {
            owner: Owner::NodeClaim,
            provider_id: None,
        },
        true,
    );
    assert!(mark(&again).is_none());
}

fn object(kind: &str, name: &str, uid: &str, deleting: bool, status: Value) -> DynamicObject {
    let mut metadata = json!({"name": name, "uid": uid});
    if deleting {
        metadata["deletionTimestamp"] = json!("2026-11-27T11:00:00Z");
    }
    serde_json::from_value(json!({
        "apiVersion": "example/v1", "kind": kind, "metadata": metadata, "status": status,
    }))
    .unwrap()
}

fn claim(name: &str, node: Option<&str>, provider: Option<&str>) -> DynamicObject {
    object(
        "NodeClaim",
        name,
        &format!("uid-{name}"),
        false,
        json!({"nodeName": node, "providerID": provider}),
    )
}

fn name(o: Option<&DynamicObject>) -> Option<&str> {
    o.and_then(|o| o.metadata.name.as_deref())
}

#[test]
fn a_nodeclaim_without_a_reference_owns_the_node_only_by_name_and_provider_id() {
    let claims = [
        claim("by-provider-only", Some("other"), Some("kwok://n1")),
        claim("by-name-only", Some("n1"), Some("kwok://other")),
        claim("no-node-yet", None, Some("kwok://n1")),
    ];
    assert_eq!(
        name(owning_nodeclaim(&claims, "n1", Some("kwok://n1"))),
        None
    );
    assert_eq!(name(owning_nodeclaim(&claims, "n1", None)), None);
    let with_both = [
        claims[0].clone(),
        claim("both", Some("n1"), Some("kwok://n1")),
    ];
    assert_eq!(
        name(owning_nodeclaim(&with_both, "n1", Some("kwok://n1"))),
        Some("both")
    );
    let deleting = object(
        "NodeClaim",
        "both",
        "uid-both",
        true,
        json!({"nodeName": "n1", "providerID": "kwok://n1"}),
    );
    assert_eq!(
        name(owning_nodeclaim(&[deleting], "n1", Some("kwok://n1"))),
        None,
        "never one already being deleted"
    );
}

#[test]
fn a_referenced_nodeclaim_must_be_that_uid_and_name_the_node_itself() {
    let c = claim("c", Some("n1"), Some("kwok://n1"));
    assert_eq!(claim_owns_by_reference(&c, "uid-c", "n1"), Ok(()));
    let err = claim_owns_by_reference(&c, "uid-old", "n1").unwrap_err();
    assert!(err.contains("uid-old"), "{err}");
    let elsewhere = claim("c", Some("n2"), Some("kwok://n1"));
    let err = claim_owns_by_reference(&elsewhere, "uid-c", "n1").unwrap_err();
    assert!(err.contains("n2"), "{err}");
    let deleting = object("NodeClaim", "c", "uid-c", true, json!({"nodeName": "n1"}));
    assert!(claim_owns_by_reference(&deleting, "uid-c", "n1").is_err());
}

#[test]
fn a_machine_owns_the_node_only_when_its_node_ref_names_it_by_name_and_uid() {
    let machine = |node_ref: Value, deleting: bool| {
        object(
            "Machine",
            "m",
            "uid-m",
            deleting,
            json!({"nodeRef": node_ref}),
        )
    };
    let good = machine(json!({"kind": "Node", "name": "n1", "uid": "u1"}), false);
    assert_eq!(machine_owns(&good, "n1", "u1"), Ok("uid-m".to_string()));
    for (node_ref, why) in [
        (
            json!({"kind": "Node", "name": "n1", "uid": "u-old"}),
            "a node of that name before",
        ),
        (
            json!({"kind": "Node", "name": "other", "uid": "u1"}),
            "another node",
        ),
        (json!(null), "no node yet"),
    ] {
        let err = machine_owns(&machine(node_ref, false), "n1", "u1").unwrap_err();
        assert!(err.contains("status.nodeRef"), "{why}: {err}");
    }
    let deleting = machine(json!({"kind": "Node", "name": "n1", "uid": "u1"}), true);
    assert!(machine_owns(&deleting, "n1", "u1").is_err());
}
