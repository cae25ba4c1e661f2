//! Small builders for tests: nodes, DaemonSets, pods, taints, tolerations
//! and node selector terms with the boring fields filled in.
//!
//! Compiled for this crate's unit tests and under the cargo feature
//! `testing`, which only dev-dependencies turn on (this crate's own for its
//! integration tests in `tests/`, nodegate-actors' and the binary's), so that
//! they can share them while production code cannot call them. Everything
//! here is plain data construction — no I/O, no clock.

use jiff::Timestamp;

use crate::vocab::model::{
    DaemonSetInfo, Labels, NodeInfo, NodeReady, NodeSelectorRequirement, NodeSelectorTerm, PodInfo,
    PodPlacement, Taint, Toleration,
};

/// Labels from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|&(k, v)| (k.into(), v.into())).collect()
}

/// `secs` seconds after the Unix epoch.
pub fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// A taint with no value.
pub fn taint(key: &str, effect: &str) -> Taint {
    Taint::new(key, "", effect)
}

/// A taint with a value.
pub fn taint_v(key: &str, value: &str, effect: &str) -> Taint {
    Taint::new(key, value, effect)
}

pub fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: key.to_string(),
        operator: operator.to_string(),
        value: value.to_string(),
        effect: effect.to_string(),
    }
}

/// A node selector requirement.
pub fn req(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// A term with only `matchExpressions`.
pub fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: expressions,
        match_fields: Vec::new(),
    }
}

/// A term with only `matchFields`.
pub fn field_term(fields: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Vec::new(),
        match_fields: fields,
    }
}

/// A node created at the epoch, never re-gated, Ready.
pub fn mk_node(name: &str, node_labels: &[(&str, &str)], taints: Vec<Taint>) -> NodeInfo {
    NodeInfo {
        name: name.to_string(),
        uid: format!("uid-{name}"),
        resource_version: "1".to_string(),
        labels: labels(node_labels),
        taints,
        created: Timestamp::UNIX_EPOCH,
        gated_since: None,
        ready: NodeReady::True,
        opened_at: None,
        suspended: false,
        open_requested: false,
        ..NodeInfo::default()
    }
}

/// A DaemonSet with UID `uid-<namespace>-<name>`, no labels or annotations
/// and `minReadySeconds` 0.
pub fn mk_ds(namespace: &str, name: &str, template: PodPlacement) -> DaemonSetInfo {
    DaemonSetInfo {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: format!("uid-{namespace}-{name}"),
        labels: Labels::new(),
        annotations: Labels::new(),
        template,
        min_ready_seconds: 0,
    }
}

/// A template that only tolerates what it is given.
pub fn template_with_tolerations(tolerations: Vec<Toleration>) -> PodPlacement {
    PodPlacement {
        tolerations,
        ..PodPlacement::default()
    }
}

/// A template with only required node affinity.
pub fn template_with_affinity(terms: Vec<NodeSelectorTerm>) -> PodPlacement {
    PodPlacement {
        required_node_affinity: Some(terms),
        ..PodPlacement::default()
    }
}

/// A pod of DaemonSet `ds` on `node`: [`mk_pod`] in the DaemonSet's
/// namespace, with the DaemonSet as its controller owner.
pub fn ds_pod(name: &str, node: &str, ds: &DaemonSetInfo) -> PodInfo {
    PodInfo {
        namespace: ds.namespace.as_str().into(),
        ..mk_pod(name, node, &ds.uid)
    }
}

/// A pod on `node` owned (as controller) by the object with `owner_uid`:
/// Running, Ready since the epoch, not terminating.
pub fn mk_pod(name: &str, node: &str, owner_uid: &str) -> PodInfo {
    PodInfo {
        namespace: "kube-system".into(),
        name: name.into(),
        uid: format!("uid-{name}").into(),
        node_name: node.into(),
        labels: Labels::new(),
        controller_uid: Some(owner_uid.into()),
        terminating: false,
        phase: "Running".into(),
        ready: true,
        ready_since: Some(Timestamp::UNIX_EPOCH).into(),
        ready_annotation: false,
        sandbox_ready: true,
        status_note: None,
    }
}

/// A configuration with re-gating on: the default re-gate taint, managed,
/// put on after `grace_secs` of a broken member, with `on_reboot` and a
/// budget of its own.
pub fn regate_config(
    grace_secs: u64,
    on_reboot: bool,
    max_unavailable: crate::vocab::budget::MaxUnavailable,
) -> crate::vocab::config::Config {
    use crate::rules::placement::{EFFECT_NO_SCHEDULE, ManagedTaint};
    let regate = ManagedTaint::new(
        crate::closing::regating::DEFAULT_REGATE_TAINT_KEY,
        EFFECT_NO_SCHEDULE,
    );
    let mut cfg = crate::vocab::config::Config::default();
    cfg.placement.managed_taints.push(regate.clone());
    cfg.regate = Some(crate::vocab::config::RegateConfig {
        after: std::time::Duration::from_secs(grace_secs),
        taint: regate,
        timeout: None,
        on_reboot,
        max_unavailable,
    });
    cfg
}

/// A `conditionTaints` rule `name`: `taint_key:NoSchedule` while the node's
/// `condition` is True, never removed, with its own budget or none.
pub fn condition_rule(
    name: &str,
    condition: &str,
    taint_key: &str,
    max_unavailable: Option<crate::vocab::budget::MaxUnavailable>,
) -> crate::rules::conditions::taints::ConditionTaintRule {
    use crate::rules::conditions::taints::{
        ConditionTaintRule, MatchMode, RemovePolicy, Requirement, StatusPattern,
    };
    ConditionTaintRule {
        name: name.into(),
        conditions: vec![Requirement {
            type_: condition.into(),
            status: StatusPattern::new("True").expect("True is a valid status pattern"),
            for_: None,
            match_absent: false,
        }],
        match_mode: MatchMode::AllOf,
        node_selector: None,
        taint: taint(taint_key, "NoSchedule"),
        remove: RemovePolicy::Never,
        max_unavailable,
    }
}
