//! The conditional patches of a condition rule's taint: each tests the
//! node's resourceVersion, so a node changed since the router's view (a
//! taint someone else added a moment ago, say) is refused whole and decided
//! again on the newer view; no other taint is ever touched.

use jiff::Timestamp;
use json_patch::Patch;
use nodegate_core::model::{NodeInfo, Taint};
use serde_json::{Value, json};

use crate::cluster::patch::rfc3339;

/// Puts `taint` on `node` as it was read. A `NoExecute` taint carries
/// `timeAdded` (`at`), as the API server's own taint writers set it.
pub fn add(node: &NodeInfo, taint: &Taint, at: Timestamp) -> Patch {
    let mut t = json!({"key": taint.key, "effect": taint.effect});
    if !taint.value.is_empty() {
        t["value"] = json!(taint.value);
    }
    if taint.effect == "NoExecute" {
        t["timeAdded"] = json!(rfc3339_seconds(at));
    }
    let mut ops = vec![test_version(node)];
    if node.taints.is_empty() {
        ops.push(json!({"op": "add", "path": "/spec/taints", "value": [t]}));
    } else {
        ops.push(json!({"op": "add", "path": "/spec/taints/-", "value": t}));
    }
    build(ops)
}

/// Takes the taint at `index` of `node.taints` off, testing that it is
/// still there with that key and effect.
pub fn remove(node: &NodeInfo, index: usize) -> Option<Patch> {
    let t = node.taints.get(index)?;
    let at = format!("/spec/taints/{index}");
    Some(build(vec![
        test_version(node),
        json!({"op": "test", "path": format!("{at}/key"), "value": t.key}),
        json!({"op": "test", "path": format!("{at}/effect"), "value": t.effect}),
        json!({"op": "remove", "path": at}),
    ]))
}

fn test_version(node: &NodeInfo) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version})
}

/// `timeAdded` is a `metav1.Time`: whole seconds.
fn rfc3339_seconds(at: Timestamp) -> String {
    let whole = Timestamp::from_second(at.as_second()).unwrap_or(at);
    rfc3339(whole)
}

fn build(ops: Vec<Value>) -> Patch {
    // Every op above comes from the json! macro in a shape json_patch
    // accepts; a failure here is a bug in this module.
    serde_json::from_value(Value::Array(ops))
        .unwrap_or_else(|e| panic!("condition taint patch is malformed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: Vec<Taint>) -> NodeInfo {
        NodeInfo {
            name: "n1".into(),
            resource_version: "42".into(),
            taints,
            ..NodeInfo::default()
        }
    }

    #[test]
    fn adding_tests_the_version_and_stamps_no_execute() {
        let at = Timestamp::from_second(1_700_000_000).unwrap();
        let oos = Taint::new(
            "node.kubernetes.io/out-of-service",
            "nodeshutdown",
            "NoExecute",
        );
        let p = serde_json::to_value(add(&node(vec![]), &oos, at)).unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        assert_eq!(p[1]["path"], "/spec/taints");
        assert_eq!(p[1]["value"][0]["timeAdded"], "2023-11-14T22:13:20Z");
        assert_eq!(p[1]["value"][0]["value"], "nodeshutdown");
        let other = Taint::new("x", "", "NoSchedule");
        let p = serde_json::to_value(add(&node(vec![other.clone()]), &other, at)).unwrap();
        assert_eq!(p[1]["path"], "/spec/taints/-");
        assert!(p[1]["value"].get("timeAdded").is_none(), "{p}");
        assert!(p[1]["value"].get("value").is_none(), "{p}");
    }

    #[test]
    fn removing_tests_the_taint_at_its_index() {
        let n = node(vec![
            Taint::new("a", "", "NoSchedule"),
            Taint::new("b", "", "NoExecute"),
        ]);
        let p = serde_json::to_value(remove(&n, 1).unwrap()).unwrap();
        assert_eq!(
            p[1],
            json!({"op": "test", "path": "/spec/taints/1/key", "value": "b"})
        );
        assert_eq!(p[3], json!({"op": "remove", "path": "/spec/taints/1"}));
        assert!(remove(&n, 2).is_none());
    }
}
