//! Critical-pod entries: a Ready pod matching a namespace and a label
//! selector.

use super::*;

fn proxy_entry() -> CriticalPodEntry {
    CriticalPodEntry {
        name: "kube-system/kube-proxy".into(),
        namespace: "kube-system".into(),
        selector: LabelSelector::parse("k8s-app=kube-proxy").unwrap(),
        node_selector: None,
    }
}

fn proxy_pod(name: &str) -> PodInfo {
    let mut p = mk_pod(name, "node-1", "uid-of-the-node");
    p.labels = labels(&[("k8s-app", "kube-proxy")]);
    p
}

#[test]
fn a_critical_entry_applies_to_every_node_without_a_node_selector() {
    assert!(critical_applies(&proxy_entry(), &mk_node("n", &[], vec![])));
}

#[test]
fn a_critical_entry_with_a_node_selector_applies_only_to_matching_nodes() {
    let mut entry = proxy_entry();
    entry.node_selector = Some(LabelSelector::parse("kubernetes.io/os=linux").unwrap());
    assert!(critical_applies(
        &entry,
        &mk_node("n", &[("kubernetes.io/os", "linux")], vec![])
    ));
    assert!(!critical_applies(
        &entry,
        &mk_node("n", &[("kubernetes.io/os", "windows")], vec![])
    ));
    assert!(!critical_applies(&entry, &mk_node("n", &[], vec![])));
    entry.node_selector = Some(LabelSelector::default());
    assert!(critical_applies(&entry, &mk_node("n", &[], vec![])));
}

#[test]
fn a_ready_matching_pod_satisfies_a_critical_entry() {
    let pods = [proxy_pod("kube-proxy-node-1")];
    assert_eq!(
        critical_member(&proxy_entry(), &pods, ts(NOW)),
        ready("kube-proxy-node-1")
    );
}

#[test]
fn critical_pods_need_the_namespace_and_the_selector() {
    let mut elsewhere = proxy_pod("kube-proxy-x");
    elsewhere.namespace = "default".into();
    let mut unlabelled = proxy_pod("kube-proxy-y");
    unlabelled.labels = labels(&[("k8s-app", "other")]);
    assert_eq!(
        critical_member(&proxy_entry(), [&elsewhere, &unlabelled], ts(NOW)),
        MemberState::NotReady(Waiting::NoPod)
    );
}

#[test]
fn critical_pod_states() {
    let mut terminating = proxy_pod("p");
    terminating.terminating = true;
    let mut pending = proxy_pod("p");
    pending.phase = "Pending".into();
    let mut unready = proxy_pod("p");
    unready.ready = false;
    let cases = [
        (terminating, Waiting::Terminating { pod: "p".into() }),
        (
            pending,
            Waiting::NotRunning {
                pod: "p".into(),
                phase: "Pending".into(),
            },
        ),
        (unready, Waiting::NotReady { pod: "p".into() }),
    ];
    for (pod, want) in cases {
        assert_eq!(
            critical_member(&proxy_entry(), [&pod], ts(NOW)),
            MemberState::NotReady(want)
        );
    }
}

#[test]
fn critical_pods_have_no_min_ready_seconds_and_no_owner_rule() {
    let mut pod = proxy_pod("p");
    pod.ready_since = Default::default();
    pod.controller_uid = None;
    assert_eq!(critical_member(&proxy_entry(), [&pod], ts(NOW)), ready("p"));
}

#[test]
fn any_one_matching_critical_pod_suffices() {
    let mut old = proxy_pod("p-old");
    old.terminating = true;
    let new = proxy_pod("p-new");
    assert_eq!(
        critical_member(&proxy_entry(), [&old, &new], ts(NOW)),
        ready("p-new")
    );
}

#[test]
fn an_empty_critical_selector_matches_any_pod_in_the_namespace() {
    let mut entry = proxy_entry();
    entry.selector = LabelSelector::default();
    let mut pod = proxy_pod("anything");
    pod.labels = labels(&[]);
    assert!(critical_member(&entry, [&pod], ts(NOW)).is_ready());
}

#[test]
fn an_invalid_critical_selector_matches_nothing_and_fails_validation() {
    let mut entry = proxy_entry();
    entry.selector.match_expressions.push(
        nodegate_core::rules::selector::LabelSelectorRequirement::new(
            "k8s-app",
            "NotIn",
            Vec::<String>::new(),
        ),
    );
    assert_eq!(
        critical_member(&entry, [&proxy_pod("p")], ts(NOW)),
        MemberState::NotReady(Waiting::NoPod)
    );
    let err = entry.validate().unwrap_err().to_string();
    assert_eq!(
        err,
        r#"critical pod "kube-system/kube-proxy": selector: label selector: matchExpressions[0] (key "k8s-app"): NotIn needs at least one value, got none"#
    );
}

#[test]
fn critical_entry_validation() {
    assert_eq!(proxy_entry().validate(), Ok(()));
    let mut e = proxy_entry();
    e.namespace.clear();
    assert_eq!(
        e.validate().unwrap_err().to_string(),
        r#"critical pod "kube-system/kube-proxy": namespace must not be empty"#
    );
    let mut e = proxy_entry();
    e.node_selector = Some(LabelSelector {
        match_labels: labels(&[("bad key", "x")])
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect(),
        ..LabelSelector::default()
    });
    assert!(e.validate().unwrap_err().to_string().starts_with(r#"critical pod "kube-system/kube-proxy": nodeSelector: label selector: matchLabels["bad key"]"#));
    let mut e = proxy_entry();
    e.selector = LabelSelector::default();
    assert_eq!(
        e.validate().unwrap_err().to_string(),
        r#"critical pod "kube-system/kube-proxy": selector must not be empty (an empty one would match every pod)"#
    );
}

#[test]
fn critical_entries_read_camel_case_config() {
    let json = serde_json::json!({
        "name": "kube-system/kube-proxy",
        "namespace": "kube-system",
        "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
        "nodeSelector": {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
    });
    let entry: CriticalPodEntry = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(
        entry.selector,
        LabelSelector::parse("k8s-app=kube-proxy").unwrap()
    );
    assert_eq!(
        entry.node_selector,
        Some(LabelSelector::parse("kubernetes.io/os in (linux)").unwrap())
    );
    assert_eq!(serde_json::to_value(&entry).unwrap(), json);
    let without: CriticalPodEntry = serde_json::from_value(serde_json::json!({
        "name": "x", "namespace": "kube-system", "selector": {}
    }))
    .unwrap();
    assert_eq!(without.node_selector, None);
    assert!(without.selector.is_empty());
}
