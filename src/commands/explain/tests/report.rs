use super::*;
use nodegate_core::gate::report::split_taints;

#[test]
fn daemonsets_are_sorted_by_namespace_then_name() {
    let r = sample_report();
    let names: Vec<String> = r.daemonsets.iter().map(|m| m.label.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(names[0], "infra/after-gate");
}

/// (name, expected, ready, reason_code, waiting contains, pod)
type Case = (
    &'static str,
    bool,
    Option<bool>,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
);

#[test]
fn each_member_reports_its_placement_and_readiness() {
    let r = sample_report();
    let cases: &[Case] = &[
        (
            "everywhere",
            true,
            Some(true),
            "expected",
            None,
            Some("everywhere-x"),
        ),
        ("amd-only", false, None, "node_selector", None, None),
        ("zone-a", false, None, "node_affinity", None, None),
        ("after-gate", false, None, "starts_after_gate", None, None),
        ("ignored", false, None, "ignore_annotation", None, None),
        (
            "slow",
            true,
            Some(false),
            "expected",
            Some("pod slow-x Ready for 3s of minReadySeconds 10s"),
            Some("slow-x"),
        ),
        (
            "held",
            true,
            Some(false),
            "expected",
            Some("pod held-x is not Ready, container agent: CrashLoopBackOff"),
            Some("held-x"),
        ),
        (
            "pending",
            true,
            Some(false),
            "expected",
            Some("pod pending-x is Pending, container agent: ContainerCreating"),
            Some("pending-x"),
        ),
        (
            "missing",
            true,
            Some(false),
            "expected",
            Some("no pod yet"),
            None,
        ),
        (
            "unbound",
            true,
            Some(false),
            "expected",
            Some("pod unbound-x is Pending, not scheduled: 0/3 nodes are available"),
            Some("unbound-x"),
        ),
        (
            "going",
            true,
            Some(false),
            "expected",
            Some("pod going-x is terminating"),
            Some("going-x"),
        ),
        (
            "proxy",
            true,
            Some(false),
            "expected",
            Some("no pod matching k8s-app=kube-proxy in namespace kube-system"),
            None,
        ),
        ("gpu-driver", false, None, "node_selector", None, None),
    ];
    for (name, expected, ready, code, waiting, pod) in cases {
        let m = row(&r, name);
        assert_eq!(m.expected, *expected, "{name}: {m:#?}");
        assert_eq!(m.ready, *ready, "{name}: {m:#?}");
        assert_eq!(m.reason_code, *code, "{name}: {m:#?}");
        assert_eq!(m.pod.as_deref(), *pod, "{name}: {m:#?}");
        match waiting {
            Some(w) => assert!(
                m.waiting.as_deref().is_some_and(|got| got.contains(w)),
                "{name}: want waiting containing {w:?}, got {:?}",
                m.waiting
            ),
            None => assert_eq!(m.waiting, None, "{name}"),
        }
        assert!(!m.reason.is_empty(), "{name} has no reason");
    }
}

#[test]
fn reasons_name_the_label_the_term_and_the_taint() {
    let r = sample_report();
    assert!(
        row(&r, "amd-only")
            .reason
            .contains("kubernetes.io/arch=arm64")
    );
    assert!(
        row(&r, "after-gate")
            .reason
            .starts_with("starts after the gate opens")
    );
    let zone = row(&r, "zone-a");
    let terms = zone.node_affinity.as_ref().expect("per-term results");
    assert_eq!(terms.len(), 2);
    assert!(!terms[0].matches && !terms[1].matches);
    assert!(
        terms[0]
            .why
            .as_deref()
            .is_some_and(|w| w.contains("topology.kubernetes.io/zone=b")),
        "{terms:?}"
    );
    assert!(
        terms[1]
            .why
            .as_deref()
            .is_some_and(|w| w.contains("label gpu is missing")),
        "{terms:?}"
    );
    assert_eq!(zone.detail.len(), 3, "{:?}", zone.detail);
    assert!(zone.detail[1].contains("term 1:"));
}

#[test]
fn expected_reason_names_tolerated_and_set_aside_taints() {
    let r = sample_report();
    let reason = &row(&r, "everywhere").reason;
    assert_eq!(reason, "it tolerates nodegate.dev/initializing:NoSchedule");
    let held = &row(&r, "held").reason;
    assert!(
        held.contains("the transient taint node.kubernetes.io/not-ready:NoSchedule is lifted"),
        "{held}"
    );
    // PreferNoSchedule never keeps a pod off, so it is not worth naming.
    assert!(!held.contains("dedicated"), "{held}");
}

#[test]
fn matching_affinity_term_is_named_for_an_expected_daemonset() {
    let node = mk_node("n", &[("zone", "a")], vec![]);
    let ds = mk_ds(
        "ns",
        "d",
        template_with_affinity(vec![
            term(vec![req("zone", "In", &["b"])]),
            term(vec![req("zone", "In", &["a"])]),
        ]),
    );
    let r = build_report(&view(node, vec![ds], vec![]), &settings(), ts(NOW));
    let m = &r.daemonsets[0];
    assert!(m.expected);
    assert!(
        m.reason.contains("its node affinity term 2 matches"),
        "{}",
        m.reason
    );
    let terms = m.node_affinity.as_ref().unwrap();
    assert_eq!(
        terms.iter().map(|t| t.matches).collect::<Vec<_>>(),
        vec![false, true]
    );
    assert_eq!(terms[1].why, None);
}

#[test]
fn verdict_says_closed_with_every_blocker() {
    let r = sample_report();
    assert!(r.gated);
    assert!(!r.would_open);
    // everywhere, slow, held, pending, missing, unbound, going + proxy.
    assert_eq!(r.expected_members, 8);
    assert_eq!(r.ready_members, 1);
    assert!(
        r.verdict
            .starts_with("closed: waiting for 7 of 8: infra/going (pod going-x is terminating), "),
        "{}",
        r.verdict
    );
    assert!(
        r.verdict.contains("critical:proxy (no pod matching"),
        "{}",
        r.verdict
    );
}

#[test]
fn verdict_would_open_when_every_expected_member_is_ready() {
    let node = mk_node("n", &[], vec![taint(GATE, "NoSchedule")]);
    let ds = mk_ds("kube-system", "cni", tolerate_all());
    let pod = pod_of(&ds, "cni-x", "n");
    let r = build_report(
        &view(node.clone(), vec![ds], vec![pod]),
        &settings(),
        ts(NOW),
    );
    assert!(r.gated && r.would_open);
    assert_eq!(
        r.verdict,
        "would open now: its one expected member is Ready"
    );

    let empty = build_report(&view(node, vec![], vec![]), &settings(), ts(NOW));
    assert!(empty.would_open);
    assert_eq!(empty.verdict, "would open now: nothing here to wait for");
}

#[test]
fn verdict_says_closed_when_the_node_itself_is_not_ready() {
    let mut node = mk_node("n", &[], vec![taint(GATE, "NoSchedule")]);
    node.ready = nodegate_core::vocab::model::NodeReady::Unknown;
    let ds = mk_ds("kube-system", "cni", tolerate_all());
    let pod = pod_of(&ds, "cni-x", "n");
    let r = build_report(
        &view(node.clone(), vec![ds.clone()], vec![pod]),
        &settings(),
        ts(NOW),
    );
    assert!(r.gated && !r.would_open);
    assert_eq!(r.ready_members, 1);
    assert_eq!(
        r.node_not_ready.as_deref(),
        Some("the node is not Ready (its Ready condition is Unknown)")
    );
    assert_eq!(
        r.verdict,
        "closed: the node is not Ready (its Ready condition is Unknown); its one expected member is Ready"
    );
    // With a member not Ready either, the node comes after the members.
    let r = build_report(&view(node, vec![ds], vec![]), &settings(), ts(NOW));
    assert!(
        r.verdict.starts_with(
            "closed: waiting for 1 of 1: kube-system/cni (no pod yet); the node is not Ready"
        ),
        "{}",
        r.verdict
    );
    let json = serde_json::to_value(&r).unwrap();
    assert!(
        json["node_not_ready"]
            .as_str()
            .unwrap()
            .starts_with("the node is not Ready")
    );
}

#[test]
fn verdict_for_a_node_without_managed_taint_says_not_gated() {
    let node = mk_node(
        "n",
        &[],
        vec![taint("node.kubernetes.io/unschedulable", "NoSchedule")],
    );
    let ds = mk_ds("kube-system", "cni", PodPlacement::default());
    let r = build_report(&view(node, vec![ds], vec![]), &settings(), ts(NOW));
    assert!(!r.gated);
    assert!(!r.would_open);
    assert!(
        r.verdict
            .starts_with("not gated: the node carries no managed taint"),
        "{}",
        r.verdict
    );
    assert!(
        r.verdict
            .contains("waiting for 1 of 1: kube-system/cni (no pod yet)"),
        "{}",
        r.verdict
    );
    // A cordon is tolerated by every DaemonSet pod.
    assert!(r.daemonsets[0].expected);
    assert_eq!(
        r.taints.other,
        vec!["node.kubernetes.io/unschedulable:NoSchedule"]
    );
}

#[test]
fn taints_split_into_managed_transient_and_other() {
    let split = split_taints(&gated_arm_node().taints, &PlacementConfig::default());
    assert_eq!(split.managed, vec!["nodegate.dev/initializing:NoSchedule"]);
    assert_eq!(
        split.transient,
        vec!["node.kubernetes.io/not-ready:NoSchedule"]
    );
    assert_eq!(split.other, vec!["dedicated=infra:PreferNoSchedule"]);
}

#[test]
fn json_has_the_documented_fields_and_nulls_for_members_not_expected() {
    let v = serde_json::to_value(sample_report()).unwrap();
    assert_eq!(v["node"], "arm-1");
    assert_eq!(v["gated"], true);
    assert_eq!(v["would_open"], false);
    assert_eq!(v["expected_members"], 8);
    assert_eq!(v["ready_members"], 1);
    assert!(v["verdict"].as_str().unwrap().starts_with("closed: "));
    let ds = v["daemonsets"].as_array().unwrap();
    let amd = ds.iter().find(|d| d["name"] == "amd-only").unwrap();
    assert_eq!(amd["namespace"], "kube-system");
    assert_eq!(amd["expected"], false);
    assert_eq!(amd["ready"], json!(null));
    assert_eq!(amd["pod"], json!(null));
    assert_eq!(amd["waiting"], json!(null));
    assert!(amd["reason"].as_str().unwrap().contains("nodeSelector"));
    assert!(amd.get("label").is_none() && amd.get("detail").is_none());
    let every = ds.iter().find(|d| d["name"] == "everywhere").unwrap();
    assert_eq!(every["ready"], true);
    assert_eq!(every["pod"], "everywhere-x");
    let zone = ds.iter().find(|d| d["name"] == "zone-a").unwrap();
    assert_eq!(zone["node_affinity"][0]["term"], 1);
    assert_eq!(zone["node_affinity"][0]["matches"], false);
    let crit = v["critical_pods"].as_array().unwrap();
    assert_eq!(crit[0]["name"], "proxy");
    assert_eq!(crit[0]["selector"], "k8s-app=kube-proxy");
    assert_eq!(crit[1]["ready"], json!(null));
    assert_eq!(
        v["taints"]["managed"][0],
        "nodegate.dev/initializing:NoSchedule"
    );
    assert!(v["taints"]["transient"].is_array() && v["taints"]["other"].is_array());
}
