//! What `nodegate uninstall` takes off one node ([`plan`]: nodegate's
//! taints, the annotations it writes, its `nodegate.dev/Open` condition),
//! and the conditional patch that does it. Pure. The annotations a person
//! writes to steer nodegate (`suspend`, `open`, `ignore`, `reboot-pending`)
//! are left for that person.

use nodegate_core::rules::conditions::taints::same_taint;
use nodegate_core::rules::placement::ManagedTaint;
use nodegate_core::rules::startup::{CLUSTER_AUTOSCALER_TAINT_KEY, KARPENTER_TAINT_KEY};
use nodegate_core::vocab::annotations::{
    AWAITING_REBOOT, CONDITION_TAINTS, GATED_SINCE, OPENED_AT, OPENED_BY, PREFIX, REGATED_FOR,
    REPLACE_FALLBACK, REPLACE_FALLBACK_AT, REPLACE_REASON, REPLACE_REQUESTED, TIMED_OUT,
};
use nodegate_core::vocab::model::{NodeInfo, Taint};
use serde_json::{Value, json};

use crate::cluster::patch::pointer_segment;

/// The annotations nodegate writes on a node: uninstall removes them all.
pub const WRITTEN_ANNOTATIONS: [&str; 11] = [
    OPENED_AT,
    OPENED_BY,
    TIMED_OUT,
    GATED_SINCE,
    REGATED_FOR,
    CONDITION_TAINTS,
    AWAITING_REBOOT,
    REPLACE_REQUESTED,
    REPLACE_REASON,
    REPLACE_FALLBACK,
    REPLACE_FALLBACK_AT,
];

/// The managed taints that are not nodegate's own keys: another vendor's
/// (a CNI's `agent-not-ready`, a `kubernetes.io` one) that its owner may
/// have put on a node, where uninstall would take it off too. nodegate's own
/// are those under `nodegate.dev/` and the autoscalers' startup keys named
/// `nodegate` (`--autoscaler`). Uninstall removes the others only when
/// asked to (`--remove-foreign-keys`).
pub fn foreign_keys(managed: &[ManagedTaint]) -> Vec<String> {
    let own = |key: &str| {
        key.starts_with(PREFIX) || key == KARPENTER_TAINT_KEY || key == CLUSTER_AUTOSCALER_TAINT_KEY
    };
    let keys = managed.iter().filter(|m| !own(&m.key));
    let keys: std::collections::BTreeSet<String> = keys.map(ToString::to_string).collect();
    keys.into_iter().collect()
}

/// Which taints are nodegate's, beyond the `nodegate.dev/` prefix.
#[derive(Debug, Clone, Default)]
pub struct Owned {
    /// The startup (and re-gate) taints the settings name.
    pub managed: Vec<ManagedTaint>,
    /// The condition rules' names and taints.
    pub rule_taints: Vec<(String, Taint)>,
}

impl Owned {
    /// Whether `t` on `node` is nodegate's: a rule's taint only where the
    /// node records the rule as having put it on (the same taint put on by
    /// someone else stays, as the rule itself would leave it).
    pub fn owns(&self, node: &NodeInfo, t: &Taint) -> bool {
        t.key.starts_with(PREFIX)
            || self.managed.iter().any(|m| m.matches(t))
            || self
                .rule_taints
                .iter()
                .any(|(rule, r)| same_taint(r, t) && node.rule_added(rule))
    }
}

/// What comes off one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleanup {
    pub node: String,
    pub resource_version: String,
    /// nodegate's taints with their index in the node's list.
    pub taints: Vec<(usize, Taint)>,
    /// nodegate's annotations present on the node.
    pub annotations: Vec<String>,
    /// The node carries the `nodegate.dev/Open` condition (removed through
    /// `nodes/status`).
    pub open_condition: bool,
    /// Cordoned by nodegate's replace request (`spec.unschedulable` with
    /// `nodegate.dev/replace-requested`, or with the `replace-reason` an
    /// opening keeps on a cordoned node): reported, left cordoned, as whether
    /// the node should serve again is a person's call.
    pub cordoned: bool,
}

impl Cleanup {
    pub fn is_empty(&self) -> bool {
        self.taints.is_empty() && self.annotations.is_empty() && !self.open_condition
    }

    /// `taints a:NoSchedule, b:NoExecute; annotations nodegate.dev/x`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.taints.is_empty() {
            let t = crate::commands::output::joined(self.taints.iter().map(|(_, t)| t), ", ");
            parts.push(format!("taints {t}"));
        }
        if !self.annotations.is_empty() {
            parts.push(format!("annotations {}", self.annotations.join(", ")));
        }
        if self.open_condition {
            parts.push("condition nodegate.dev/Open".into());
        }
        if self.cordoned {
            parts.push(format!(
                "left cordoned by nodegate's replace request: `kubectl uncordon {}` if it should serve",
                self.node
            ));
        }
        parts.join("; ")
    }
}

/// What comes off `node` (its projection, the keys of its annotations, and
/// whether it carries the `nodegate.dev/Open` condition).
pub fn plan<'a>(
    node: &NodeInfo,
    annotation_keys: impl IntoIterator<Item = &'a String>,
    open_condition: bool,
    owned: &Owned,
) -> Cleanup {
    let taints = node.taints.iter().enumerate();
    let taints = taints.filter(|(_, t)| owned.owns(node, t));
    let taints = taints.map(|(i, t)| (i, t.clone())).collect();
    let mut annotations: Vec<String> = annotation_keys
        .into_iter()
        .filter(|k| WRITTEN_ANNOTATIONS.contains(&k.as_str()))
        .cloned()
        .collect();
    annotations.sort();
    let cordoned = node.replace.unschedulable
        && annotations
            .iter()
            .any(|k| k == REPLACE_REQUESTED || k == REPLACE_REASON);
    Cleanup {
        node: node.name.clone(),
        resource_version: node.resource_version.clone(),
        taints,
        annotations,
        open_condition,
        cordoned,
    }
}

/// The JSON patch: the node must still be at the resourceVersion read, and
/// each taint removed must still be the one meant at its index (removed
/// from the highest index down, so no index shifts under a later removal);
/// then the annotations go. Any change since the read makes the API server
/// refuse the whole patch, as the controller's own patches do.
pub fn patch(c: &Cleanup) -> Result<json_patch::Patch, serde_json::Error> {
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": c.resource_version}),
    ];
    let mut taints: Vec<&(usize, Taint)> = c.taints.iter().collect();
    taints.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    for (index, t) in taints {
        let at = format!("/spec/taints/{index}");
        ops.push(json!({"op": "test", "path": format!("{at}/key"), "value": t.key}));
        ops.push(json!({"op": "test", "path": format!("{at}/effect"), "value": t.effect}));
        ops.push(json!({"op": "remove", "path": at}));
    }
    for key in &c.annotations {
        ops.push(json!({"op": "remove", "path": format!("/metadata/annotations/{}", pointer_segment(key))}));
    }
    serde_json::from_value(Value::Array(ops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodegate_core::testutil::mk_node;

    fn t(key: &str, effect: &str) -> Taint {
        Taint::new(key, "", effect)
    }

    #[test]
    fn only_nodegates_taints_and_written_annotations_are_planned() {
        let mut n = mk_node(
            "n1",
            &[],
            vec![
                t("example.com/foreign", "NoSchedule"),
                t("nodegate.dev/initializing", "NoSchedule"),
                t("gpu.example.com/unhealthy", "NoSchedule"),
                t("custom/start", "NoExecute"),
                t("example.com/out-of-service", "NoExecute"),
            ],
        );
        n.rule_taints = Some("gpu".into());
        let owned = Owned {
            managed: vec![ManagedTaint::new("custom/start", "NoExecute")],
            rule_taints: vec![
                ("gpu".into(), t("gpu.example.com/unhealthy", "NoSchedule")),
                // The node does not record this rule: the taint is someone
                // else's (an operator's), and stays.
                ("spot".into(), t("example.com/out-of-service", "NoExecute")),
            ],
        };
        let keys: Vec<String> = [GATED_SINCE, "nodegate.dev/suspend", "other/x", OPENED_AT]
            .map(String::from)
            .to_vec();
        let c = plan(&n, &keys, false, &owned);
        let idx: Vec<usize> = c.taints.iter().map(|(i, _)| *i).collect();
        assert_eq!(idx, vec![1, 2, 3]);
        assert_eq!(
            c.annotations,
            vec![GATED_SINCE.to_string(), OPENED_AT.to_string()]
        );
    }

    #[test]
    fn the_patch_tests_then_removes_from_the_highest_index() {
        let c = Cleanup {
            node: "n1".into(),
            resource_version: "42".into(),
            taints: vec![
                (0, t("nodegate.dev/a", "NoSchedule")),
                (2, t("nodegate.dev/b", "NoExecute")),
            ],
            annotations: vec![OPENED_BY.into()],
            open_condition: false,
            cordoned: false,
        };
        let v = serde_json::to_value(patch(&c).ok()).unwrap_or_default();
        let paths: Vec<(String, String)> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|op| {
                (
                    op["op"].as_str().unwrap_or("").into(),
                    op["path"].as_str().unwrap_or("").into(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = [
            ("test", "/metadata/resourceVersion"),
            ("test", "/spec/taints/2/key"),
            ("test", "/spec/taints/2/effect"),
            ("remove", "/spec/taints/2"),
            ("test", "/spec/taints/0/key"),
            ("test", "/spec/taints/0/effect"),
            ("remove", "/spec/taints/0"),
            ("remove", "/metadata/annotations/nodegate.dev~1opened-by"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .to_vec();
        assert_eq!(paths, want);
    }

    #[test]
    fn every_mark_and_the_open_condition_go_and_a_replace_cordon_is_reported() {
        let mut n = mk_node("n1", &[], vec![]);
        n.replace.unschedulable = true;
        let keys: Vec<String> = [
            REPLACE_REQUESTED,
            REPLACE_REASON,
            REPLACE_FALLBACK,
            REPLACE_FALLBACK_AT,
            AWAITING_REBOOT,
            "nodegate.dev/reboot-pending",
        ]
        .map(String::from)
        .to_vec();
        let c = plan(&n, &keys, true, &Owned::default());
        assert_eq!(c.annotations.len(), 5, "{:?}", c.annotations);
        assert!(
            !c.annotations
                .iter()
                .any(|k| k == "nodegate.dev/reboot-pending")
        );
        assert!(c.open_condition && c.cordoned);
        let said = c.describe();
        assert!(
            said.contains("condition nodegate.dev/Open") && said.contains("kubectl uncordon n1"),
            "{said}"
        );
        // The condition alone is still something to remove.
        let only = plan(&mk_node("n2", &[], vec![]), &[], true, &Owned::default());
        assert!(!only.is_empty());
        // A cordon without nodegate's request is someone else's: not said.
        let mut other = mk_node("n3", &[], vec![]);
        other.replace.unschedulable = true;
        assert!(!plan(&other, &[], false, &Owned::default()).cordoned);
        // Opened since (the request gone, its reason kept): still reported.
        let opened = plan(
            &other,
            &[REPLACE_REASON.to_string()],
            false,
            &Owned::default(),
        );
        assert!(opened.cordoned && opened.describe().contains("kubectl uncordon n3"));
    }

    #[test]
    fn managed_keys_outside_nodegates_domain_are_foreign() {
        let managed = [
            ManagedTaint::new("nodegate.dev/initializing", "NoSchedule"),
            ManagedTaint::new(KARPENTER_TAINT_KEY, "NoSchedule"),
            ManagedTaint::new(CLUSTER_AUTOSCALER_TAINT_KEY, "NoSchedule"),
            ManagedTaint::new("node.cilium.io/agent-not-ready", "NoSchedule"),
            ManagedTaint::new("node.kubernetes.io/not-ready", "NoSchedule"),
        ];
        assert_eq!(
            foreign_keys(&managed),
            [
                "node.cilium.io/agent-not-ready:NoSchedule",
                "node.kubernetes.io/not-ready:NoSchedule"
            ]
        );
        assert!(foreign_keys(&managed[..3]).is_empty());
    }
}
