//! `evaluate`: exclusions, the steady-state view of taints and nodegate's own
//! taint (semantics.md sections 2 and 3), and how verdicts read.

use nodegate_core::rules::placement::{
    ManagedTaint, NotExpectedReason, PlacementConfig, TransientTaint, Verdict, evaluate,
    exclusion_reason, should_run,
};
use nodegate_core::rules::selector::LabelSelector;
use nodegate_core::testutil::{
    labels, mk_ds, mk_node, req, taint, taint_v, template_with_affinity, template_with_tolerations,
    term, toleration,
};
use nodegate_core::vocab::annotations::DAEMONSET_IGNORE as IGNORE_ANNOTATION;
use nodegate_core::vocab::model::{DaemonSetInfo, NodeInfo, PodPlacement, Taint};

const MANAGED: &str = "nodegate.dev/initializing";

fn plain_ds() -> DaemonSetInfo {
    mk_ds("kube-system", "agent", PodPlacement::default())
}

fn gated_node(extra: Vec<Taint>) -> NodeInfo {
    let mut taints = vec![taint(MANAGED, "NoSchedule")];
    taints.extend(extra);
    mk_node("node-1", &[], taints)
}

fn tolerates_managed() -> PodPlacement {
    template_with_tolerations(vec![toleration(MANAGED, "Exists", "", "NoSchedule")])
}

fn not_expected(v: Verdict) -> NotExpectedReason {
    match v {
        Verdict::NotExpected(r) => r,
        Verdict::Expected => panic!("want NotExpected, got Expected"),
    }
}

#[test]
fn a_daemonset_tolerating_the_gate_is_expected() {
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    assert_eq!(
        evaluate(&gated_node(vec![]), &ds, &PlacementConfig::default()),
        Verdict::Expected
    );
}

#[test]
fn a_daemonset_not_tolerating_the_gate_starts_after_it_opens() {
    let reason = not_expected(evaluate(
        &gated_node(vec![]),
        &plain_ds(),
        &PlacementConfig::default(),
    ));
    assert_eq!(
        reason,
        NotExpectedReason::StartsAfterGate {
            taint: taint(MANAGED, "NoSchedule")
        }
    );
    assert_eq!(
        reason.to_string(),
        "starts after the gate opens: it does not tolerate nodegate's own taint \
         nodegate.dev/initializing:NoSchedule, so its pod cannot start until nodegate removes it"
    );
    assert_eq!(reason.code(), "starts_after_gate");
}

#[test]
fn a_wildcard_toleration_covers_the_gate() {
    let ds = mk_ds(
        "kube-system",
        "cni",
        template_with_tolerations(vec![toleration("", "Exists", "", "")]),
    );
    assert_eq!(
        evaluate(&gated_node(vec![]), &ds, &PlacementConfig::default()),
        Verdict::Expected
    );
}

#[test]
fn the_managed_taints_value_does_not_matter() {
    let node = mk_node(
        "node-1",
        &[],
        vec![taint_v(MANAGED, "booting", "NoSchedule")],
    );
    assert!(matches!(
        evaluate(&node, &plain_ds(), &PlacementConfig::default()),
        Verdict::NotExpected(NotExpectedReason::StartsAfterGate { .. })
    ));
}

#[test]
fn the_managed_key_with_another_effect_is_an_ordinary_taint() {
    let node = mk_node("node-1", &[], vec![taint(MANAGED, "NoExecute")]);
    assert_eq!(
        not_expected(evaluate(&node, &plain_ds(), &PlacementConfig::default())),
        NotExpectedReason::UntoleratedTaint {
            taint: taint(MANAGED, "NoExecute")
        }
    );
}

#[test]
fn a_node_without_the_managed_taint_reports_no_start_after_gate() {
    let node = mk_node("node-1", &[], vec![]);
    assert_eq!(
        evaluate(&node, &plain_ds(), &PlacementConfig::default()),
        Verdict::Expected
    );
}

#[test]
fn another_untolerated_taint_wins_over_the_managed_one_in_any_order() {
    let user = taint("dedicated", "NoSchedule");
    for taints in [
        vec![taint(MANAGED, "NoSchedule"), user.clone()],
        vec![user.clone(), taint(MANAGED, "NoSchedule")],
    ] {
        let node = mk_node("node-1", &[], taints);
        assert_eq!(
            not_expected(evaluate(&node, &plain_ds(), &PlacementConfig::default())),
            NotExpectedReason::UntoleratedTaint {
                taint: user.clone()
            }
        );
    }
}

#[test]
fn placement_mismatches_are_reported_before_taints() {
    let ds = mk_ds(
        "kube-system",
        "gpu",
        template_with_affinity(vec![term(vec![req("gpu", "Exists", &[])])]),
    );
    assert!(matches!(
        not_expected(evaluate(
            &gated_node(vec![]),
            &ds,
            &PlacementConfig::default()
        )),
        NotExpectedReason::NodeAffinityNoTermMatched { .. }
    ));
    let pinned = mk_ds(
        "kube-system",
        "pinned",
        PodPlacement {
            node_name: "node-9".into(),
            ..PodPlacement::default()
        },
    );
    assert!(matches!(
        not_expected(evaluate(
            &gated_node(vec![]),
            &pinned,
            &PlacementConfig::default()
        )),
        NotExpectedReason::NodeNameMismatch { .. }
    ));
}

#[test]
fn every_default_transient_taint_is_ignored() {
    let keys = [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        "karpenter.sh/unregistered",
        "node.cilium.io/agent-not-ready",
        "ebs.csi.aws.com/agent-not-ready",
        "efs.csi.aws.com/agent-not-ready",
        "cni.istio.io/not-ready",
        "startup-taint.cluster-autoscaler.kubernetes.io/driver",
        "readiness.k8s.io/network",
    ];
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    for key in keys {
        for effect in ["NoSchedule", "NoExecute"] {
            let node = gated_node(vec![taint(key, effect)]);
            // The controller itself would not place the pod now...
            if !key.starts_with("node.kubernetes.io/") || effect == "NoSchedule" {
                assert!(
                    should_run(&node.name, &node.labels, &node.taints, &ds.template).is_err(),
                    "{key}:{effect}"
                );
            }
            // ...but will once the agent lifts its taint.
            assert_eq!(
                evaluate(&node, &ds, &PlacementConfig::default()),
                Verdict::Expected,
                "{key}:{effect}"
            );
        }
    }
}

#[test]
fn a_prefix_pattern_needs_the_whole_prefix() {
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    for key in [
        "readiness.k8s.io",
        "xreadiness.k8s.io/net",
        "startup-taint.cluster-autoscaler.kubernetes.io",
    ] {
        let node = gated_node(vec![taint(key, "NoSchedule")]);
        assert!(
            matches!(
                evaluate(&node, &ds, &PlacementConfig::default()),
                Verdict::NotExpected(NotExpectedReason::UntoleratedTaint { .. })
            ),
            "{key}"
        );
    }
}

#[test]
fn user_added_transient_patterns_are_ignored_too() {
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    let mut cfg = PlacementConfig::default();
    cfg.transient_taints
        .push(TransientTaint::parse("example.com/booting"));
    cfg.transient_taints
        .push(TransientTaint::parse("vendor.io/startup-*"));
    for key in [
        "example.com/booting",
        "vendor.io/startup-gpu",
        "vendor.io/startup-",
    ] {
        assert_eq!(
            evaluate(&gated_node(vec![taint(key, "NoSchedule")]), &ds, &cfg),
            Verdict::Expected,
            "{key}"
        );
    }
    assert!(
        !evaluate(
            &gated_node(vec![taint("vendor.io/startup", "NoSchedule")]),
            &ds,
            &cfg
        )
        .is_expected()
    );
}

#[test]
fn an_empty_transient_list_ignores_nothing() {
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    let cfg = PlacementConfig {
        transient_taints: vec![],
        ..PlacementConfig::default()
    };
    let node = gated_node(vec![taint("node.kubernetes.io/not-ready", "NoSchedule")]);
    assert!(matches!(
        evaluate(&node, &ds, &cfg),
        Verdict::NotExpected(NotExpectedReason::UntoleratedTaint { .. })
    ));
}

#[test]
fn a_managed_key_under_a_transient_pattern_still_gates() {
    let mut cfg = PlacementConfig::default();
    cfg.transient_taints
        .push(TransientTaint::parse("nodegate.dev/*"));
    assert!(matches!(
        evaluate(&gated_node(vec![]), &plain_ds(), &cfg),
        Verdict::NotExpected(NotExpectedReason::StartsAfterGate { .. })
    ));
}

#[test]
fn several_managed_taints_are_each_ours() {
    let cfg = PlacementConfig {
        managed_taints: vec![
            ManagedTaint::new(MANAGED, "NoSchedule"),
            ManagedTaint::new("nodegate.dev/regated", "NoExecute"),
        ],
        ..PlacementConfig::default()
    };
    let node = mk_node(
        "node-1",
        &[],
        vec![taint("nodegate.dev/regated", "NoExecute")],
    );
    assert_eq!(
        not_expected(evaluate(&node, &plain_ds(), &cfg)),
        NotExpectedReason::StartsAfterGate {
            taint: taint("nodegate.dev/regated", "NoExecute")
        }
    );
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    assert!(matches!(
        evaluate(
            &mk_node(
                "node-1",
                &[],
                vec![
                    taint(MANAGED, "NoSchedule"),
                    taint("nodegate.dev/regated", "NoExecute")
                ]
            ),
            &ds,
            &cfg
        ),
        Verdict::NotExpected(NotExpectedReason::StartsAfterGate { .. })
    ));
}

#[test]
fn prefer_no_schedule_taints_do_not_matter() {
    let ds = mk_ds("kube-system", "cni", tolerates_managed());
    let node = gated_node(vec![taint("dedicated", "PreferNoSchedule")]);
    assert_eq!(
        evaluate(&node, &ds, &PlacementConfig::default()),
        Verdict::Expected
    );
}

/// `--daemonset-namespaces`: a DaemonSet outside the
/// allow-list is never a member, whatever its placement; inside it, or with
/// no allow-list, it is judged as before.
#[test]
fn outside_the_daemonset_namespaces_is_never_a_member() {
    let cfg = PlacementConfig {
        daemonset_namespaces: Some(["kube-system".to_string(), "infra".to_string()].into()),
        ..PlacementConfig::default()
    };
    let tenant = mk_ds("tenant", "agent", tolerates_managed());
    assert_eq!(
        exclusion_reason(&tenant, &cfg),
        Some(NotExpectedReason::OutsideDaemonSetNamespaces)
    );
    let verdict = not_expected(evaluate(&gated_node(vec![]), &tenant, &cfg));
    assert_eq!(verdict, NotExpectedReason::OutsideDaemonSetNamespaces);
    assert!(verdict.is_exclusion());
    assert_eq!(verdict.code(), "outside_daemonset_namespaces");
    for ns in ["kube-system", "infra"] {
        let ds = mk_ds(ns, "agent", tolerates_managed());
        assert_eq!(exclusion_reason(&ds, &cfg), None, "{ns}");
        assert!(
            matches!(evaluate(&gated_node(vec![]), &ds, &cfg), Verdict::Expected),
            "{ns}"
        );
    }
    // No allow-list: every namespace, the tenant's too.
    assert_eq!(exclusion_reason(&tenant, &PlacementConfig::default()), None);
}

#[test]
fn excluded_by_namespace_and_name() {
    let cfg = PlacementConfig {
        excluded: [("kube-system".to_string(), "agent".to_string())].into(),
        ..PlacementConfig::default()
    };
    assert_eq!(
        exclusion_reason(&plain_ds(), &cfg),
        Some(NotExpectedReason::ExcludedByName)
    );
    assert_eq!(
        not_expected(evaluate(&gated_node(vec![]), &plain_ds(), &cfg)),
        NotExpectedReason::ExcludedByName
    );
    let same_name_elsewhere = mk_ds("monitoring", "agent", PodPlacement::default());
    assert_eq!(exclusion_reason(&same_name_elsewhere, &cfg), None);
}

#[test]
fn excluded_by_selector_on_the_daemonsets_labels() {
    let cfg = PlacementConfig {
        exclude_selector: Some(LabelSelector::parse("tier=optional").unwrap()),
        ..PlacementConfig::default()
    };
    let mut ds = plain_ds();
    assert_eq!(exclusion_reason(&ds, &cfg), None);
    ds.labels = labels(&[("tier", "optional")]);
    let reason = exclusion_reason(&ds, &cfg).unwrap();
    assert_eq!(
        reason,
        NotExpectedReason::ExcludedBySelector {
            selector: "tier=optional".into()
        }
    );
    assert_eq!(
        reason.to_string(),
        r#"excluded because its labels match nodegate's exclude selector "tier=optional""#
    );
    ds.labels = labels(&[("tier", "core")]);
    assert_eq!(exclusion_reason(&ds, &cfg), None);
}

#[test]
fn an_empty_exclude_selector_excludes_nothing() {
    let cfg = PlacementConfig {
        exclude_selector: Some(LabelSelector::default()),
        ..PlacementConfig::default()
    };
    assert_eq!(exclusion_reason(&plain_ds(), &cfg), None);
}

#[test]
fn the_ignore_annotation_counts_only_when_exactly_true() {
    for (value, excluded) in [
        ("true", true),
        ("True", false),
        ("TRUE", false),
        ("false", false),
        ("yes", false),
        ("1", false),
        ("", false),
    ] {
        let mut ds = plain_ds();
        ds.annotations = labels(&[(IGNORE_ANNOTATION, value)]);
        let got = exclusion_reason(&ds, &PlacementConfig::default());
        assert_eq!(got.is_some(), excluded, "{value:?}");
        if excluded {
            assert_eq!(got, Some(NotExpectedReason::IgnoreAnnotation));
        }
    }
}

#[test]
fn exclusions_come_first_and_in_a_fixed_order() {
    let mut ds = mk_ds("kube-system", "agent", template_with_affinity(vec![]));
    ds.labels = labels(&[("tier", "optional")]);
    ds.annotations = labels(&[(IGNORE_ANNOTATION, "true")]);
    let mut cfg = PlacementConfig {
        exclude_selector: Some(LabelSelector::parse("tier").unwrap()),
        ..PlacementConfig::default()
    };
    assert!(matches!(
        not_expected(evaluate(&gated_node(vec![]), &ds, &cfg)),
        NotExpectedReason::ExcludedBySelector { .. }
    ));
    cfg.excluded.insert(("kube-system".into(), "agent".into()));
    assert_eq!(
        not_expected(evaluate(&gated_node(vec![]), &ds, &cfg)),
        NotExpectedReason::ExcludedByName
    );
    let no_selector = PlacementConfig::default();
    assert_eq!(
        not_expected(evaluate(&gated_node(vec![]), &ds, &no_selector)),
        NotExpectedReason::IgnoreAnnotation
    );
}

#[test]
fn reasons_read_as_sentences() {
    let cases: Vec<(NotExpectedReason, &str)> = vec![
        (
            NotExpectedReason::ExcludedByName,
            "excluded by name in nodegate's configuration",
        ),
        (
            NotExpectedReason::IgnoreAnnotation,
            r#"excluded by its annotation nodegate.dev/ignore: "true""#,
        ),
        (
            NotExpectedReason::NodeNameMismatch {
                wanted: "node-2".into(),
                node: "node-1".into(),
            },
            r#"its pod template sets spec.nodeName "node-2", so it never runs on node "node-1""#,
        ),
        (
            NotExpectedReason::NodeSelectorKeyMissing {
                key: "disk".into(),
                wanted: "ssd".into(),
            },
            "its nodeSelector needs label disk=ssd, and the node has no label disk",
        ),
        (
            NotExpectedReason::NodeSelectorValueDiffers {
                key: "disk".into(),
                wanted: "ssd".into(),
                actual: "hdd".into(),
            },
            "its nodeSelector needs label disk=ssd, and the node has disk=hdd",
        ),
        (
            NotExpectedReason::UntoleratedTaint {
                taint: taint_v("dedicated", "gpu", "NoSchedule"),
            },
            "it does not tolerate the node's taint dedicated=gpu:NoSchedule",
        ),
    ];
    for (reason, want) in cases {
        assert_eq!(reason.to_string(), want);
    }
}

#[test]
fn an_affinity_reason_lists_every_term() {
    let ds = mk_ds(
        "kube-system",
        "gpu",
        template_with_affinity(vec![
            term(vec![req("gpu", "Exists", &[])]),
            term(vec![req("cpu", "Gt", &["x"])]),
        ]),
    );
    let reason = not_expected(evaluate(
        &gated_node(vec![]),
        &ds,
        &PlacementConfig::default(),
    ));
    let text = reason.to_string();
    assert!(
        text.starts_with(
            "no term of its required node affinity matches the node: term 1: label gpu is missing"
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"; term 2: Gt needs exactly one integer value, got ["x"]"#),
        "{text}"
    );
    assert_eq!(reason.code(), "node_affinity");
}

#[test]
fn reason_codes_are_stable() {
    assert_eq!(NotExpectedReason::ExcludedByName.code(), "excluded_by_name");
    assert_eq!(
        NotExpectedReason::ExcludedBySelector {
            selector: String::new()
        }
        .code(),
        "excluded_by_selector"
    );
    assert_eq!(
        NotExpectedReason::IgnoreAnnotation.code(),
        "ignore_annotation"
    );
    assert_eq!(
        NotExpectedReason::NodeNameMismatch {
            wanted: String::new(),
            node: String::new()
        }
        .code(),
        "node_name"
    );
    assert_eq!(
        NotExpectedReason::NodeSelectorKeyMissing {
            key: String::new(),
            wanted: String::new()
        }
        .code(),
        "node_selector"
    );
    assert_eq!(
        NotExpectedReason::UntoleratedTaint {
            taint: taint("a", "NoSchedule")
        }
        .code(),
        "untolerated_taint"
    );
    assert!(NotExpectedReason::IgnoreAnnotation.is_exclusion());
    assert!(
        !NotExpectedReason::StartsAfterGate {
            taint: taint("a", "NoSchedule")
        }
        .is_exclusion()
    );
}

#[test]
fn verdicts_serialize_to_json_and_back() {
    let v = Verdict::NotExpected(NotExpectedReason::NodeSelectorValueDiffers {
        key: "disk".into(),
        wanted: "ssd".into(),
        actual: "hdd".into(),
    });
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"NotExpected": {"reason": "nodeSelectorValueDiffers", "key": "disk", "wanted": "ssd", "actual": "hdd"}})
    );
    assert_eq!(serde_json::from_value::<Verdict>(json).unwrap(), v);
    assert_eq!(
        serde_json::to_value(Verdict::Expected).unwrap(),
        serde_json::json!("Expected")
    );

    let ds = mk_ds(
        "kube-system",
        "gpu",
        template_with_affinity(vec![term(vec![req("cpu", "Gt", &["x"])])]),
    );
    let v = evaluate(&gated_node(vec![]), &ds, &PlacementConfig::default());
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["NotExpected"]["reason"], "nodeAffinityNoTermMatched");
    assert_eq!(json["NotExpected"]["terms"][0]["term"], 1);
    assert_eq!(
        json["NotExpected"]["terms"][0]["failure"]["kind"],
        "invalid"
    );
    assert_eq!(
        json["NotExpected"]["terms"][0]["failure"]["requirement"]["list"],
        "matchExpressions"
    );
    assert_eq!(serde_json::from_value::<Verdict>(json).unwrap(), v);
}

#[test]
fn verdict_helpers() {
    assert!(Verdict::Expected.is_expected());
    assert_eq!(Verdict::Expected.reason(), None);
    let v = Verdict::NotExpected(NotExpectedReason::IgnoreAnnotation);
    assert!(!v.is_expected());
    assert_eq!(v.reason(), Some(&NotExpectedReason::IgnoreAnnotation));
    assert_eq!(
        v.to_string(),
        r#"not expected: excluded by its annotation nodegate.dev/ignore: "true""#
    );
}
