use super::*;

#[test]
fn table_is_aligned_and_fits_a_100_column_terminal() {
    let text = render_table(&sample_report(), 100);
    eprintln!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "Node arm-1, created 1970-01-01T00:00:00Z (11d13h ago): gated by nodegate.dev/initializing:NoSchedule"
    );
    assert_eq!(
        lines[1],
        "8 of 13 DaemonSets and critical pods expected here, 1 of them Ready"
    );
    for l in &lines {
        assert!(l.chars().count() <= 100, "too wide: {l:?}");
    }
    let header = lines
        .iter()
        .find(|l| l.starts_with("DAEMONSET"))
        .expect("table header");
    let why_col = header.find("WHY").unwrap();
    assert_eq!(
        header.find("EXPECTED"),
        Some(header.find("DAEMONSET").unwrap() + "kube-system/everywhere".len() + 2)
    );
    let everywhere = lines
        .iter()
        .find(|l| l.starts_with("kube-system/everywhere "))
        .unwrap();
    assert_eq!(everywhere.find("pod everywhere-x is Ready"), Some(why_col));
    assert!(everywhere.contains(" yes "));
    // A wrapped reason continues under WHY.
    let after = lines
        .iter()
        .position(|l| l.starts_with("infra/after-gate "))
        .unwrap();
    assert!(
        lines[after + 1].starts_with(&" ".repeat(why_col)),
        "{:?}",
        lines[after + 1]
    );
    assert!(
        lines[after + 1]
            .chars()
            .nth(why_col)
            .is_some_and(|c| c != ' ')
    );
    // Affinity terms get a line each.
    assert!(
        text.contains("no term of its required node affinity matches:\n"),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.trim_start().starts_with("term 2: label gpu is missing")),
        "{text}"
    );
    // The critical table shares the name column.
    let crit = lines
        .iter()
        .find(|l| l.starts_with("CRITICAL POD"))
        .unwrap();
    assert_eq!(crit.find("WHY"), Some(why_col));
    assert!(text.contains("\nTAINTS\n  managed    nodegate.dev/initializing:NoSchedule\n  transient  node.kubernetes.io/not-ready:NoSchedule\n  other      dedicated=infra:PreferNoSchedule\n"), "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("GATE  closed: waiting for 7 of 8: infra/going")),
        "{text}"
    );
}

#[test]
fn a_long_name_gets_its_own_line_and_the_columns_stay_put() {
    let node = mk_node("n", &[], vec![]);
    let long = "a-very-long-namespace-name/an-even-longer-daemonset-name";
    let (ns, name) = long.split_once('/').unwrap();
    let r = build_report(
        &view(
            node,
            vec![
                mk_ds(ns, name, PodPlacement::default()),
                mk_ds("a", "b", PodPlacement::default()),
            ],
            vec![],
        ),
        &settings(),
        ts(NOW),
    );
    let text = render_table(&r, 100);
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().find(|l| l.starts_with("DAEMONSET")).unwrap();
    assert_eq!(header.find("EXPECTED"), Some("CRITICAL POD".len() + 2));
    let i = lines
        .iter()
        .position(|l| *l == long)
        .expect("name on its own line");
    assert!(
        lines[i + 1].starts_with(&" ".repeat("CRITICAL POD".len())),
        "{text}"
    );
    assert!(lines[i + 1].contains("no pod yet"), "{text}");
}

#[test]
fn an_empty_cluster_says_so() {
    let r = build_report(
        &view(mk_node("n", &[], vec![]), vec![], vec![]),
        &settings(),
        ts(NOW),
    );
    let text = render_table(&r, 100);
    assert!(text.contains("(no DaemonSets in the cluster)"), "{text}");
    assert!(text.contains("managed    none"), "{text}");
}

#[test]
fn wrap_breaks_between_words_and_keeps_long_words_whole() {
    assert_eq!(wrap("a bb ccc dddd", 6), vec!["a bb", "ccc", "dddd"]);
    assert_eq!(wrap("short", 100), vec!["short"]);
    assert_eq!(wrap("", 10), vec![""]);
    assert_eq!(
        wrap("x averyveryverylongword y", 5),
        vec!["x", "averyveryverylongword", "y"]
    );
}

#[test]
fn human_age_shows_the_two_largest_units() {
    let cases = [
        (0, "0s"),
        (45, "45s"),
        (192, "3m12s"),
        (7500, "2h5m"),
        (273_600, "3d4h"),
    ];
    for (secs, want) in cases {
        assert_eq!(human_age(secs), want);
    }
}

/// An open node under `--regate-after 60s`: one member broken for 30 s (its
/// pod's Ready condition), one with no pod, one healthy.
#[test]
fn an_open_node_shows_each_broken_member_and_when_it_would_be_regated() {
    use nodegate_core::rules::placement::ManagedTaint;
    use nodegate_core::vocab::config::RegateConfig;
    let degraded = ManagedTaint::new("nodegate.dev/degraded", "NoSchedule");
    let mut settings = settings();
    settings.placement.managed_taints.push(degraded.clone());
    settings.regate = Some(RegateConfig {
        after: std::time::Duration::from_secs(60),
        taint: degraded,
        timeout: None,
        on_reboot: false,
        max_unavailable: Default::default(),
    });
    let cni = mk_ds("infra", "cni", tolerate_all());
    let csi = mk_ds("infra", "csi", tolerate_all());
    let logs = mk_ds("infra", "logs", tolerate_all());
    let mut broken = pod_of(&cni, "cni-1", "n1");
    broken.ready = false;
    broken.ready_since = Some(ts(NOW - 30)).into();
    let node = mk_node("n1", &[], vec![]);
    let v = view(
        node,
        vec![cni, csi, logs.clone()],
        vec![broken, pod_of(&logs, "logs-1", "n1")],
    );
    let report = build_report(&v, &settings, ts(NOW));
    let r = report.regate.as_ref().expect("re-gating is on");
    assert!(r.verdict.starts_with("re-gated in 30s"), "{}", r.verdict);
    let got: Vec<(&str, i64, &str)> = r
        .broken
        .iter()
        .map(|b| (b.member.as_str(), b.broken_for_seconds, b.counted_from))
        .collect();
    assert_eq!(
        got,
        vec![
            ("infra/cni", 30, "pod_ready_condition"),
            ("infra/csi", 0, "first_seen")
        ]
    );
    let table = render_table(&report, TABLE_WIDTH);
    assert!(table.contains("REGATE  re-gated in 30s"), "{table}");
    assert!(
        table.contains("infra/cni broken for 30s (since its pod's Ready condition changed): pod cni-1 is not Ready"),
        "{table}"
    );
    // A reboot announced for it (semantics.md §6.10): due before the reboot.
    settings.reboots.sources = vec![nodegate_core::vocab::config::Source::Annotation];
    let mut announced = mk_node("n1", &[], vec![]);
    announced.reboot_pending = Some("kernel".into());
    let a = view(announced, vec![], vec![]);
    let report = build_report(&a, &settings, ts(NOW));
    let r = report.regate.as_ref().expect("re-gating is on");
    assert!(
        r.verdict
            .starts_with("due for re-gating before an announced reboot")
            && r.verdict.contains("kernel"),
        "{}",
        r.verdict
    );
    // Off: no section at all.
    let off = build_report(&v, &super::settings(), ts(NOW));
    assert!(off.regate.is_none());
    assert!(!render_table(&off, TABLE_WIDTH).contains("REGATE"));
}

#[test]
fn condition_members_and_rule_verdicts_have_their_own_sections() {
    use nodegate_core::rules::conditions::CriticalCondition;
    use nodegate_core::rules::conditions::taints::{
        ConditionTaintRule, MatchMode, RemovePolicy, Requirement, StatusPattern,
    };
    use nodegate_core::vocab::model::{NodeCondition, Taint};
    let mut s = settings();
    s.conditions = vec![CriticalCondition {
        type_: "NetworkReady".into(),
        status: "True".into(),
        node_selector: None,
    }];
    s.condition_taints = vec![ConditionTaintRule {
        name: "preempted".into(),
        conditions: vec![Requirement {
            type_: "Preempted".into(),
            status: StatusPattern::new("True").unwrap(),
            for_: None,
            match_absent: false,
        }],
        match_mode: MatchMode::AllOf,
        node_selector: None,
        taint: Taint::new("node.kubernetes.io/out-of-service", "", "NoExecute"),
        remove: RemovePolicy::WhenCleared,
        max_unavailable: None,
    }];
    let mut node = mk_node("n", &[], vec![taint(GATE, "NoSchedule")]);
    node.conditions.insert(
        "Preempted".into(),
        NodeCondition {
            status: "True".into(),
            since: None,
        },
    );
    let r = build_report(&view(node, vec![], vec![]), &s, ts(NOW));
    assert_eq!(r.conditions.len(), 1);
    assert_eq!(r.condition_taints[0].action, Some("add"));
    let text = render_table(&r, 100);
    let line = text
        .lines()
        .find(|l| l.starts_with("condition:NetworkReady"))
        .unwrap_or_else(|| panic!("no condition row:\n{text}"));
    assert!(
        line.contains("does not report condition NetworkReady"),
        "{text}"
    );
    assert!(text.contains("CONDITION TAINT RULES"), "{text}");
    assert!(
        text.contains("preempted (node.kubernetes.io/out-of-service:NoExecute): matches=true, would add the taint"),
        "{text}"
    );
    assert!(text.contains("Preempted=True matches \"True\""), "{text}");
}

#[test]
fn device_members_have_their_own_section_with_what_each_waits_for() {
    use nodegate_core::rules::devices::{CriticalResource, DraDriver};
    use nodegate_core::rules::selector::LabelSelector;
    let mut s = settings();
    s.resources = vec![CriticalResource {
        resource: "nvidia.com/gpu".into(),
        node_selector: None,
    }];
    s.dra_drivers = vec![DraDriver {
        driver: "gpu.nvidia.com".into(),
        node_selector: Some(LabelSelector::parse("gpu=true").unwrap()),
    }];
    let node = mk_node("n", &[], vec![taint(GATE, "NoSchedule")]);
    let r = build_report(&view(node, vec![], vec![]), &s, ts(NOW));
    assert_eq!(r.devices.len(), 2);
    assert_eq!(r.expected_members, 1, "the DRA driver is for gpu=true only");
    let text = render_table(&r, 100);
    assert!(text.contains("\nDEVICE "), "{text}");
    let row = |label: &str| {
        text.lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} row:\n{text}"))
            .to_string()
    };
    let gpu = row("resource:nvidia.com/gpu");
    assert!(
        gpu.contains("yes") && gpu.contains("no allocatable nvidia.com/gpu"),
        "{text}"
    );
    let dra = row("dra:gpu.nvidia.com");
    assert!(dra.contains("node selector"), "{text}");
    assert_eq!(r.devices[1].reason_code, "node_selector");
    assert!(
        r.verdict.contains("resource:nvidia.com/gpu"),
        "{}",
        r.verdict
    );
}

#[test]
fn the_header_names_each_kind_of_member_it_counts() {
    let mut report = sample_report();
    let some_row = report
        .daemonsets
        .first()
        .cloned()
        .expect("the sample has DaemonSets");
    let header = |r: &Report| render_table(r, 200).lines().nth(1).map(str::to_string);
    report.conditions.push(some_row.clone());
    report.canary.push(some_row);
    assert_eq!(
        header(&report).as_deref(),
        Some(
            "8 of 15 DaemonSets, critical pods, node conditions and the canary expected here, 1 of them Ready"
        )
    );
    report.critical_pods.clear();
    report.conditions.clear();
    report.canary.clear();
    let total = report.daemonsets.len();
    assert_eq!(
        header(&report),
        Some(format!(
            "8 of {total} DaemonSets expected here, 1 of them Ready"
        ))
    );
}
