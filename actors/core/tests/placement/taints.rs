//! Tolerations, the DaemonSet controller's default tolerations, and the
//! taint half of `should_run`, against k8s.io/api `ToleratesTaint` and
//! pkg/controller/daemon/util `AddOrUpdateDaemonPodTolerations`.

mod transient;

use nodegate_core::rules::placement::{
    DaemonTolerations, ManagedTaint, NotExpectedReason, PlacementConfig, TransientTaint,
    default_daemon_tolerations, default_transient_taints, first_untolerated_taint, should_run,
    tolerates, with_default_tolerations,
};
use nodegate_core::testutil::{labels, taint, taint_v, template_with_tolerations, toleration};
use nodegate_core::vocab::model::{PodPlacement, Taint, Toleration};

#[test]
fn tolerates_follows_upstream_rules() {
    struct Case {
        name: &'static str,
        tol: Toleration,
        taint: Taint,
        want: bool,
    }
    let c = |name, tol, taint, want| Case {
        name,
        tol,
        taint,
        want,
    };
    let cases = vec![
        c(
            "equal_key_value_effect",
            toleration("k", "Equal", "v", "NoSchedule"),
            taint_v("k", "v", "NoSchedule"),
            true,
        ),
        c(
            "equal_value_differs",
            toleration("k", "Equal", "v", "NoSchedule"),
            taint_v("k", "w", "NoSchedule"),
            false,
        ),
        c(
            "empty_operator_means_equal",
            toleration("k", "", "v", "NoSchedule"),
            taint_v("k", "v", "NoSchedule"),
            true,
        ),
        c(
            "empty_operator_compares_values",
            toleration("k", "", "v", "NoSchedule"),
            taint_v("k", "w", "NoSchedule"),
            false,
        ),
        c(
            "missing_value_equals_a_valueless_taint",
            toleration("k", "Equal", "", "NoSchedule"),
            taint("k", "NoSchedule"),
            true,
        ),
        c(
            "missing_value_does_not_equal_a_valued_taint",
            toleration("k", "Equal", "", "NoSchedule"),
            taint_v("k", "v", "NoSchedule"),
            false,
        ),
        c(
            "empty_operator_and_value_tolerate_a_valueless_taint",
            toleration("k", "", "", "NoSchedule"),
            taint("k", "NoSchedule"),
            true,
        ),
        c(
            "exists_ignores_the_value",
            toleration("k", "Exists", "", "NoSchedule"),
            taint_v("k", "anything", "NoSchedule"),
            true,
        ),
        c(
            "exists_needs_the_same_key",
            toleration("k", "Exists", "", "NoSchedule"),
            taint("other", "NoSchedule"),
            false,
        ),
        c(
            "keys_are_case_sensitive",
            toleration("K", "Exists", "", ""),
            taint("k", "NoSchedule"),
            false,
        ),
        c(
            "empty_key_exists_matches_any_key",
            toleration("", "Exists", "", "NoSchedule"),
            taint_v("any/key", "v", "NoSchedule"),
            true,
        ),
        c(
            "empty_key_exists_still_checks_the_effect",
            toleration("", "Exists", "", "NoSchedule"),
            taint("any", "NoExecute"),
            false,
        ),
        c(
            "empty_key_exists_empty_effect_tolerates_everything",
            toleration("", "Exists", "", ""),
            taint_v("x", "y", "NoExecute"),
            true,
        ),
        c(
            "empty_effect_matches_no_schedule",
            toleration("k", "Exists", "", ""),
            taint("k", "NoSchedule"),
            true,
        ),
        c(
            "empty_effect_matches_no_execute",
            toleration("k", "Exists", "", ""),
            taint("k", "NoExecute"),
            true,
        ),
        c(
            "empty_effect_matches_prefer_no_schedule",
            toleration("k", "Exists", "", ""),
            taint("k", "PreferNoSchedule"),
            true,
        ),
        c(
            "effect_must_be_equal",
            toleration("k", "Exists", "", "NoSchedule"),
            taint("k", "NoExecute"),
            false,
        ),
        c(
            "no_schedule_does_not_cover_prefer_no_schedule",
            toleration("k", "Exists", "", "NoSchedule"),
            taint("k", "PreferNoSchedule"),
            false,
        ),
        // Upstream does not insist on Exists for an empty key: an empty key
        // with Equal matches every key whose value is equal.
        c(
            "empty_key_equal_matches_any_key_with_that_value",
            toleration("", "Equal", "v", ""),
            taint_v("x", "v", "NoSchedule"),
            true,
        ),
        c(
            "empty_key_empty_operator_matches_valueless_taints",
            toleration("", "", "", ""),
            taint("x", "NoSchedule"),
            true,
        ),
        c(
            "empty_key_equal_still_compares_values",
            toleration("", "Equal", "v", ""),
            taint_v("x", "w", "NoSchedule"),
            false,
        ),
        c(
            "unknown_operator_tolerates_nothing",
            toleration("k", "Matches", "v", ""),
            taint_v("k", "v", "NoSchedule"),
            false,
        ),
        c(
            "operators_are_case_sensitive",
            toleration("k", "exists", "", ""),
            taint("k", "NoSchedule"),
            false,
        ),
        c(
            "lt_tolerates_a_smaller_taint_value",
            toleration("k", "Lt", "100", ""),
            taint_v("k", "95", "NoSchedule"),
            true,
        ),
        c(
            "lt_is_strict",
            toleration("k", "Lt", "100", ""),
            taint_v("k", "100", "NoSchedule"),
            false,
        ),
        c(
            "lt_rejects_a_larger_value",
            toleration("k", "Lt", "100", ""),
            taint_v("k", "101", "NoSchedule"),
            false,
        ),
        c(
            "gt_tolerates_a_larger_taint_value",
            toleration("k", "Gt", "5", ""),
            taint_v("k", "6", "NoSchedule"),
            true,
        ),
        c(
            "gt_is_strict",
            toleration("k", "Gt", "5", ""),
            taint_v("k", "5", "NoSchedule"),
            false,
        ),
        c(
            "gt_compares_negative_numbers",
            toleration("k", "Gt", "-5", ""),
            taint_v("k", "-3", "NoSchedule"),
            true,
        ),
        c(
            "lt_rejects_a_non_canonical_toleration_value",
            toleration("k", "Lt", "0100", ""),
            taint_v("k", "5", "NoSchedule"),
            false,
        ),
        c(
            "lt_rejects_a_non_canonical_taint_value",
            toleration("k", "Lt", "100", ""),
            taint_v("k", "05", "NoSchedule"),
            false,
        ),
        c(
            "gt_rejects_a_plus_sign",
            toleration("k", "Gt", "+1", ""),
            taint_v("k", "5", "NoSchedule"),
            false,
        ),
        c(
            "gt_rejects_a_non_integer_taint_value",
            toleration("k", "Gt", "1", ""),
            taint_v("k", "95.5", "NoSchedule"),
            false,
        ),
        c(
            "gt_rejects_an_empty_taint_value",
            toleration("k", "Gt", "1", ""),
            taint("k", "NoSchedule"),
            false,
        ),
        c(
            "lt_still_checks_the_key",
            toleration("k", "Lt", "100", ""),
            taint_v("other", "1", "NoSchedule"),
            false,
        ),
        c(
            "lt_with_empty_key_compares_any_key",
            toleration("", "Lt", "100", ""),
            taint_v("other", "1", "NoSchedule"),
            true,
        ),
    ];
    let failures: Vec<String> = cases
        .iter()
        .filter(|c| tolerates(&c.tol, &c.taint) != c.want)
        .map(|c| format!("{}: want {}", c.name, c.want))
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn exists(key: &str, effect: &str) -> Toleration {
    toleration(key, "Exists", "", effect)
}

#[test]
fn default_tolerations_without_host_network() {
    assert_eq!(
        default_daemon_tolerations(false),
        vec![
            exists("node.kubernetes.io/not-ready", "NoExecute"),
            exists("node.kubernetes.io/unreachable", "NoExecute"),
            exists("node.kubernetes.io/disk-pressure", "NoSchedule"),
            exists("node.kubernetes.io/memory-pressure", "NoSchedule"),
            exists("node.kubernetes.io/pid-pressure", "NoSchedule"),
            exists("node.kubernetes.io/unschedulable", "NoSchedule"),
        ]
    );
}

#[test]
fn host_network_adds_network_unavailable() {
    let with = default_daemon_tolerations(true);
    assert_eq!(with.len(), 7);
    assert_eq!(
        with[6],
        exists("node.kubernetes.io/network-unavailable", "NoSchedule")
    );
}

#[test]
fn defaults_are_appended_after_the_templates_own_tolerations() {
    let own = vec![toleration("dedicated", "Equal", "gpu", "NoSchedule")];
    let all = with_default_tolerations(&own, false);
    assert_eq!(all[0], own[0]);
    assert_eq!(all[1..], default_daemon_tolerations(false)[..]);
}

#[test]
fn an_identical_toleration_is_replaced_in_place_not_duplicated() {
    let own = vec![
        exists("node.kubernetes.io/unschedulable", "NoSchedule"),
        toleration("dedicated", "Equal", "gpu", "NoSchedule"),
    ];
    let all = with_default_tolerations(&own, false);
    assert_eq!(all.len(), 7);
    assert_eq!(
        all[0],
        exists("node.kubernetes.io/unschedulable", "NoSchedule")
    );
    assert_eq!(
        all.iter()
            .filter(|t| t.key == "node.kubernetes.io/unschedulable")
            .count(),
        1
    );
}

#[test]
fn a_toleration_differing_in_operator_effect_or_value_is_kept_and_the_default_appended() {
    for own in [
        toleration("node.kubernetes.io/not-ready", "Equal", "", "NoExecute"),
        toleration("node.kubernetes.io/not-ready", "", "", "NoExecute"),
        exists("node.kubernetes.io/not-ready", "NoSchedule"),
        exists("node.kubernetes.io/not-ready", ""),
        toleration("node.kubernetes.io/not-ready", "Exists", "x", "NoExecute"),
    ] {
        let all = with_default_tolerations(std::slice::from_ref(&own), false);
        assert_eq!(all.len(), 7, "{own:?}");
        assert_eq!(all[0], own);
        assert!(all.contains(&exists("node.kubernetes.io/not-ready", "NoExecute")));
    }
}

#[test]
fn network_unavailable_is_only_tolerated_with_host_network() {
    let t = [taint(
        "node.kubernetes.io/network-unavailable",
        "NoSchedule",
    )];
    let plain = PodPlacement::default();
    let host = PodPlacement {
        host_network: true,
        ..PodPlacement::default()
    };
    assert_eq!(
        should_run("n", &labels(&[]), &t, &plain),
        Err(NotExpectedReason::UntoleratedTaint {
            taint: t[0].clone()
        })
    );
    assert_eq!(should_run("n", &labels(&[]), &t, &host), Ok(()));
}

#[test]
fn default_tolerations_cover_conditions_and_cordons() {
    for t in [
        taint("node.kubernetes.io/not-ready", "NoExecute"),
        taint("node.kubernetes.io/unreachable", "NoExecute"),
        taint("node.kubernetes.io/disk-pressure", "NoSchedule"),
        taint("node.kubernetes.io/memory-pressure", "NoSchedule"),
        taint("node.kubernetes.io/pid-pressure", "NoSchedule"),
        taint("node.kubernetes.io/unschedulable", "NoSchedule"),
    ] {
        assert_eq!(
            should_run(
                "n",
                &labels(&[]),
                std::slice::from_ref(&t),
                &PodPlacement::default()
            ),
            Ok(()),
            "{t}"
        );
    }
}

#[test]
fn not_ready_no_schedule_is_not_covered_by_the_no_execute_default() {
    // The node lifecycle controller puts not-ready:NoSchedule on a new node;
    // the controller's default only tolerates not-ready:NoExecute.
    let t = [taint("node.kubernetes.io/not-ready", "NoSchedule")];
    assert_eq!(
        should_run("n", &labels(&[]), &t, &PodPlacement::default()),
        Err(NotExpectedReason::UntoleratedTaint {
            taint: t[0].clone()
        })
    );
}

#[test]
fn prefer_no_schedule_never_excludes() {
    let t = [taint("dedicated", "PreferNoSchedule")];
    assert_eq!(
        should_run("n", &labels(&[]), &t, &PodPlacement::default()),
        Ok(())
    );
}

#[test]
fn unknown_effects_never_exclude() {
    let t = [taint("weird", "NoScheduleMaybe"), taint("empty", "")];
    assert_eq!(
        should_run("n", &labels(&[]), &t, &PodPlacement::default()),
        Ok(())
    );
}

#[test]
fn untolerated_no_schedule_and_no_execute_exclude() {
    for effect in ["NoSchedule", "NoExecute"] {
        let t = [taint("dedicated", effect)];
        assert_eq!(
            should_run("n", &labels(&[]), &t, &PodPlacement::default()),
            Err(NotExpectedReason::UntoleratedTaint {
                taint: t[0].clone()
            })
        );
    }
}

#[test]
fn a_matching_toleration_admits_the_pod() {
    let t = [taint_v("dedicated", "gpu", "NoSchedule")];
    let tpl =
        template_with_tolerations(vec![toleration("dedicated", "Equal", "gpu", "NoSchedule")]);
    assert_eq!(should_run("n", &labels(&[]), &t, &tpl), Ok(()));
}

#[test]
fn every_taint_must_be_tolerated_and_the_first_untolerated_is_reported() {
    let taints = [
        taint("a", "NoSchedule"),
        taint("b", "PreferNoSchedule"),
        taint("c", "NoExecute"),
        taint("d", "NoSchedule"),
    ];
    let tols = vec![exists("a", "")];
    let judged = DaemonTolerations::new(&tols, false);
    assert_eq!(first_untolerated_taint(&taints, judged), Some(&taints[2]));
    let tpl = template_with_tolerations(tols);
    assert_eq!(
        should_run("n", &labels(&[]), &taints, &tpl),
        Err(NotExpectedReason::UntoleratedTaint {
            taint: taints[2].clone()
        })
    );
}

#[test]
fn a_wildcard_toleration_admits_any_taint() {
    let taints = [taint("a", "NoSchedule"), taint_v("b", "x", "NoExecute")];
    let tpl = template_with_tolerations(vec![toleration("", "Exists", "", "")]);
    assert_eq!(should_run("n", &labels(&[]), &taints, &tpl), Ok(()));
}
