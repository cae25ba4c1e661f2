use super::*;
use jiff::Timestamp;
use nodegate_core::model::Fallback;

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

fn claim(name: &str, node: Option<&str>, provider: Option<&str>) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name},
        "status": {"nodeName": node, "providerID": provider},
    }))
    .unwrap()
}

#[test]
fn the_owning_nodeclaim_is_found_by_node_name_then_by_provider_id() {
    let claims = [
        claim("a", Some("other"), Some("kwok://other")),
        claim("b", None, Some("kwok://n1")),
        claim("c", Some("n1"), None),
    ];
    assert_eq!(
        owning_nodeclaim(&claims, "n1", Some("kwok://n1")),
        Some("c".into())
    );
    assert_eq!(
        owning_nodeclaim(&claims[..2], "n1", Some("kwok://n1")),
        Some("b".into())
    );
    assert_eq!(owning_nodeclaim(&claims[..2], "n1", None), None);
    assert_eq!(
        owning_nodeclaim(&claims[..1], "n1", Some("kwok://n1")),
        None
    );
}
