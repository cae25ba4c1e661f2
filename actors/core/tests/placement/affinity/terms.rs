//! Terms ORed and requirements ANDed, `matchFields`, how a failed match is
//! explained, `nodeSelector`, and `nodeName`.

use super::*;

#[test]
fn terms_are_ored_and_requirements_anded() {
    run(vec![
        case(
            "the_second_term_matches_when_the_first_fails",
            &[("zone", "b")],
            vec![
                term(vec![req("zone", "In", &["a"])]),
                term(vec![req("zone", "In", &["b"])]),
            ],
            true,
        ),
        case(
            "an_invalid_first_term_does_not_block_a_valid_second_term",
            &[("zone", "b")],
            vec![
                term(vec![req("zone", "Gt", &["x"])]),
                term(vec![req("zone", "In", &["b"])]),
            ],
            true,
        ),
        case(
            "an_invalid_last_term_does_not_undo_an_earlier_match",
            &[("zone", "a")],
            vec![
                term(vec![req("zone", "In", &["a"])]),
                term(vec![req("", "In", &["a"])]),
            ],
            true,
        ),
        case(
            "an_empty_term_matches_nothing",
            &[("zone", "a")],
            vec![NodeSelectorTerm::default()],
            false,
        ),
        case(
            "an_empty_term_is_skipped_for_a_later_match",
            &[("zone", "a")],
            vec![
                NodeSelectorTerm::default(),
                term(vec![req("zone", "In", &["a"])]),
            ],
            true,
        ),
        case("no_terms_match_nothing", &[("zone", "a")], vec![], false),
        case(
            "every_term_failing_matches_nothing",
            &[("zone", "c")],
            vec![
                term(vec![req("zone", "In", &["a"])]),
                term(vec![req("zone", "In", &["b"])]),
            ],
            false,
        ),
        case(
            "all_expressions_of_a_term_must_hold",
            &[("zone", "a"), ("gpu", "true")],
            vec![term(vec![
                req("zone", "In", &["a"]),
                req("gpu", "DoesNotExist", &[]),
            ])],
            false,
        ),
        case(
            "all_expressions_holding_match",
            &[("zone", "a"), ("cpu", "16")],
            vec![term(vec![
                req("zone", "In", &["a"]),
                req("cpu", "Gt", &["8"]),
                req("gpu", "DoesNotExist", &[]),
            ])],
            true,
        ),
        case(
            "expressions_and_fields_must_both_hold",
            &[("zone", "a")],
            vec![NodeSelectorTerm {
                match_expressions: vec![req("zone", "In", &["a"])],
                match_fields: vec![req("metadata.name", "In", &["node-2"])],
            }],
            false,
        ),
        case(
            "expressions_and_fields_both_holding_match",
            &[("zone", "a")],
            vec![NodeSelectorTerm {
                match_expressions: vec![req("zone", "In", &["a"])],
                match_fields: vec![req("metadata.name", "In", &[NODE])],
            }],
            true,
        ),
    ]);
}

#[test]
fn match_fields() {
    run(vec![
        case(
            "name_in_matches_this_node",
            &[],
            vec![field_term(vec![req("metadata.name", "In", &[NODE])])],
            true,
        ),
        case(
            "name_in_fails_for_another_node",
            &[],
            vec![field_term(vec![req("metadata.name", "In", &["node-2"])])],
            false,
        ),
        case(
            "name_not_in_matches_another_name",
            &[],
            vec![field_term(vec![req("metadata.name", "NotIn", &["node-2"])])],
            true,
        ),
        case(
            "name_not_in_fails_for_this_node",
            &[],
            vec![field_term(vec![req("metadata.name", "NotIn", &[NODE])])],
            false,
        ),
        case(
            "name_in_with_two_values_is_invalid",
            &[],
            vec![field_term(vec![req(
                "metadata.name",
                "In",
                &[NODE, "node-2"],
            )])],
            false,
        ),
        case(
            "name_in_without_values_is_invalid",
            &[],
            vec![field_term(vec![req("metadata.name", "In", &[])])],
            false,
        ),
        case(
            "name_not_in_with_two_values_is_invalid",
            &[],
            vec![field_term(vec![req("metadata.name", "NotIn", &["x", "y"])])],
            false,
        ),
        case(
            "exists_is_not_supported_in_fields",
            &[],
            vec![field_term(vec![req("metadata.name", "Exists", &[])])],
            false,
        ),
        case(
            "gt_is_not_supported_in_fields",
            &[],
            vec![field_term(vec![req("metadata.name", "Gt", &["1"])])],
            false,
        ),
        case(
            "another_field_compares_as_empty_for_in_empty",
            &[],
            vec![field_term(vec![req("metadata.uid", "In", &[""])])],
            true,
        ),
        case(
            "another_field_fails_in_with_a_value",
            &[],
            vec![field_term(vec![req(
                "spec.providerID",
                "In",
                &["aws:///x"],
            )])],
            false,
        ),
        case(
            "another_field_passes_not_in_with_a_value",
            &[],
            vec![field_term(vec![req(
                "spec.providerID",
                "NotIn",
                &["aws:///x"],
            )])],
            true,
        ),
        case(
            "field_keys_are_not_validated_as_label_keys",
            &[],
            vec![field_term(vec![req("not a key!", "In", &[""])])],
            true,
        ),
        case(
            "fields_ignore_node_labels",
            &[("metadata.name", "node-2")],
            vec![field_term(vec![req("metadata.name", "In", &["node-2"])])],
            false,
        ),
        case(
            "a_label_called_metadata_name_is_read_as_a_label",
            &[],
            vec![term(vec![req("metadata.name", "In", &[NODE])])],
            false,
        ),
        case(
            "all_fields_of_a_term_must_hold",
            &[],
            vec![field_term(vec![
                req("metadata.name", "In", &[NODE]),
                req("metadata.name", "NotIn", &[NODE]),
            ])],
            false,
        ),
    ]);
}

#[test]
fn a_node_without_a_name_skips_field_requirements_as_upstream_does() {
    let terms = vec![field_term(vec![req("metadata.name", "In", &["node-2"])])];
    assert_eq!(node_matches_terms(&terms, "", &labels(&[])), Ok(0));
    // ...but an invalid field requirement still fails the term.
    let invalid = vec![field_term(vec![req("metadata.name", "In", &[])])];
    assert!(node_matches_terms(&invalid, "", &labels(&[])).is_err());
}

#[test]
fn node_matches_terms_reports_the_first_matching_term() {
    let terms = vec![
        term(vec![req("zone", "In", &["x"])]),
        term(vec![req("zone", "In", &["a"])]),
        term(vec![req("zone", "Exists", &[])]),
    ];
    assert_eq!(
        node_matches_terms(&terms, NODE, &labels(&[("zone", "a")])),
        Ok(1)
    );
}

#[test]
fn node_matches_terms_explains_every_failed_term_in_order() {
    let terms = vec![
        term(vec![req("zone", "In", &["a", "b"])]),
        term(vec![req("cpu", "Gt", &["x"])]),
        NodeSelectorTerm::default(),
        field_term(vec![req("metadata.name", "In", &["node-9"])]),
    ];
    let mismatches = node_matches_terms(&terms, NODE, &labels(&[("zone", "c")])).unwrap_err();
    let rendered: Vec<String> = mismatches.iter().map(ToString::to_string).collect();
    assert_eq!(rendered.len(), 4);
    assert_eq!(rendered[0], r#"term 1: label zone=c is not In ["a", "b"]"#);
    assert!(
        rendered[1].starts_with(r#"term 2: Gt needs exactly one integer value, got ["x"]"#),
        "{}",
        rendered[1]
    );
    assert!(
        rendered[1].contains(r#"matchExpressions[0], key "cpu""#),
        "{}",
        rendered[1]
    );
    assert_eq!(
        rendered[2],
        "term 3: has neither matchExpressions nor matchFields, which matches no node"
    );
    assert_eq!(
        rendered[3],
        r#"term 4: field metadata.name is "node-1", not In ["node-9"]"#
    );
}

#[test]
fn unmet_requirements_render_what_the_node_has() {
    let cases: Vec<(&str, NodeSelectorTerm, Pairs, &str)> = vec![
        (
            "in_missing",
            term(vec![req("zone", "In", &["a"])]),
            &[],
            r#"label zone is missing (In ["a"])"#,
        ),
        (
            "not_in_hit",
            term(vec![req("zone", "NotIn", &["a"])]),
            &[("zone", "a")],
            r#"label zone=a is excluded by NotIn ["a"]"#,
        ),
        (
            "exists_missing",
            term(vec![req("gpu", "Exists", &[])]),
            &[],
            "label gpu is missing (Exists [])",
        ),
        (
            "dne_present",
            term(vec![req("gpu", "DoesNotExist", &[])]),
            &[("gpu", "1")],
            "label gpu=1 is present (DoesNotExist)",
        ),
        (
            "gt_small",
            term(vec![req("cpu", "Gt", &["4"])]),
            &[("cpu", "2")],
            r#"label cpu=2 is not Gt ["4"]"#,
        ),
        (
            "gt_unparsable",
            term(vec![req("cpu", "Gt", &["4"])]),
            &[("cpu", "two")],
            r#"label cpu="two" is not an integer (Gt ["4"])"#,
        ),
        (
            "field_not_in",
            field_term(vec![req("metadata.name", "NotIn", &[NODE])]),
            &[],
            r#"field metadata.name is "node-1", which NotIn ["node-1"] excludes"#,
        ),
        (
            "other_field",
            field_term(vec![req("spec.x", "In", &["y"])]),
            &[],
            r#"field spec.x is "", not In ["y"]"#,
        ),
    ];
    for (name, t, node_labels, want) in cases {
        let got = match_term(&t, NODE, &labels(node_labels))
            .unwrap_err()
            .to_string();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn invalid_requirement_problems_name_the_rule() {
    let cases: Vec<(NodeSelectorTerm, &str)> = vec![
        (term(vec![req("", "Exists", &[])]), "key must not be empty"),
        (term(vec![req("a/b/c", "Exists", &[])]), "at most one \"/\""),
        (
            term(vec![req("zone", "In", &[])]),
            "In needs at least one value, got none",
        ),
        (
            term(vec![req("zone", "NotIn", &[])]),
            "NotIn needs at least one value, got none",
        ),
        (
            term(vec![req("gpu", "Exists", &["a"])]),
            r#"Exists takes no values, got ["a"]"#,
        ),
        (
            term(vec![req("gpu", "DoesNotExist", &["a"])]),
            r#"DoesNotExist takes no values, got ["a"]"#,
        ),
        (
            term(vec![req("cpu", "Lt", &["1", "2"])]),
            r#"Lt needs exactly one integer value, got ["1", "2"]"#,
        ),
        (
            term(vec![req("cpu", "Gt", &["-1"])]),
            r#"invalid value "-1""#,
        ),
        (
            term(vec![req("zone", "Equals", &["a"])]),
            r#"operator "Equals" is not one of In, NotIn, Exists, DoesNotExist, Gt, Lt"#,
        ),
        (
            field_term(vec![req("metadata.name", "Exists", &[])]),
            r#"matchFields supports only In and NotIn, got "Exists""#,
        ),
        (
            field_term(vec![req("metadata.name", "In", &["a", "b"])]),
            r#"matchFields In needs exactly one value, got ["a", "b"]"#,
        ),
    ];
    for (t, want) in cases {
        match match_term(&t, NODE, &labels(&[])) {
            Err(TermFailure::Invalid { problem, .. }) => {
                assert!(
                    problem.contains(want),
                    "problem {problem:?} should contain {want:?}"
                )
            }
            other => panic!("{t:?}: want Invalid, got {other:?}"),
        }
    }
}

#[test]
fn an_invalid_requirement_is_reported_even_when_an_earlier_one_is_unmet() {
    let t = term(vec![req("zone", "In", &["a"]), req("cpu", "Gt", &["x"])]);
    match match_term(&t, NODE, &labels(&[])) {
        Err(TermFailure::Invalid { requirement, .. }) => {
            assert_eq!(requirement.list, TermList::MatchExpressions);
            assert_eq!(requirement.index, 1);
            assert_eq!(requirement.key, "cpu");
        }
        other => panic!("want Invalid, got {other:?}"),
    }
}

#[test]
fn explain_terms_gives_every_terms_result() {
    let terms = vec![
        term(vec![req("zone", "In", &["x"])]),
        term(vec![req("zone", "In", &["a"])]),
        NodeSelectorTerm::default(),
    ];
    let results = explain_terms(&terms, NODE, &labels(&[("zone", "a")]));
    assert_eq!(results.len(), 3);
    assert!(matches!(results[0], Err(TermFailure::Unmet { .. })));
    assert_eq!(results[1], Ok(()));
    assert_eq!(results[2], Err(TermFailure::Empty));
}

#[test]
fn node_selector_needs_every_key_with_its_exact_value() {
    let sel = labels(&[("disk", "ssd"), ("zone", "a")]);
    assert_eq!(
        check_node_selector(&sel, &labels(&[("disk", "ssd"), ("zone", "a"), ("x", "y")])),
        Ok(())
    );
    assert_eq!(
        check_node_selector(&sel, &labels(&[("zone", "a")])),
        Err(NotExpectedReason::NodeSelectorKeyMissing {
            key: "disk".into(),
            wanted: "ssd".into()
        })
    );
    assert_eq!(
        check_node_selector(&sel, &labels(&[("disk", "hdd"), ("zone", "a")])),
        Err(NotExpectedReason::NodeSelectorValueDiffers {
            key: "disk".into(),
            wanted: "ssd".into(),
            actual: "hdd".into()
        })
    );
}

#[test]
fn an_empty_node_selector_is_no_constraint() {
    assert_eq!(check_node_selector(&labels(&[]), &labels(&[])), Ok(()));
}

#[test]
fn a_node_selector_with_an_empty_value_needs_the_label_present_and_empty() {
    let sel = labels(&[("edge", "")]);
    assert_eq!(check_node_selector(&sel, &labels(&[("edge", "")])), Ok(()));
    assert!(check_node_selector(&sel, &labels(&[])).is_err());
    assert!(check_node_selector(&sel, &labels(&[("edge", "x")])).is_err());
}

#[test]
fn node_selector_and_affinity_must_both_hold() {
    let template = PodPlacement {
        node_selector: labels(&[("disk", "ssd")]),
        required_node_affinity: Some(vec![term(vec![req("zone", "In", &["a"])])]),
        ..PodPlacement::default()
    };
    let l = |pairs: &[(&str, &str)]| labels(pairs);
    assert_eq!(
        should_run(NODE, &l(&[("disk", "ssd"), ("zone", "a")]), &[], &template),
        Ok(())
    );
    assert!(matches!(
        should_run(NODE, &l(&[("zone", "a")]), &[], &template),
        Err(NotExpectedReason::NodeSelectorKeyMissing { .. })
    ));
    assert!(matches!(
        should_run(NODE, &l(&[("disk", "ssd"), ("zone", "b")]), &[], &template),
        Err(NotExpectedReason::NodeAffinityNoTermMatched { .. })
    ));
}

#[test]
fn unset_affinity_is_no_constraint_but_an_empty_term_list_matches_nothing() {
    let unset = PodPlacement::default();
    assert_eq!(should_run(NODE, &labels(&[]), &[], &unset), Ok(()));
    let empty = template_with_affinity(vec![]);
    let got = should_run(NODE, &labels(&[]), &[], &empty).unwrap_err();
    assert_eq!(
        got,
        NotExpectedReason::NodeAffinityNoTermMatched { terms: vec![] }
    );
    assert_eq!(
        got.to_string(),
        "its required node affinity has no nodeSelectorTerms, which matches no node"
    );
}

#[test]
fn node_name_in_the_template_pins_the_pod() {
    let pinned = PodPlacement {
        node_name: "node-2".into(),
        ..PodPlacement::default()
    };
    assert_eq!(
        should_run(NODE, &labels(&[]), &[], &pinned),
        Err(NotExpectedReason::NodeNameMismatch {
            wanted: "node-2".into(),
            node: NODE.into()
        })
    );
    assert_eq!(should_run("node-2", &labels(&[]), &[], &pinned), Ok(()));
    assert_eq!(
        should_run(NODE, &labels(&[]), &[], &PodPlacement::default()),
        Ok(())
    );
}

#[test]
fn node_name_is_checked_before_affinity() {
    let template = PodPlacement {
        node_name: "node-2".into(),
        required_node_affinity: Some(vec![]),
        ..PodPlacement::default()
    };
    assert!(matches!(
        should_run(NODE, &labels(&[]), &[], &template),
        Err(NotExpectedReason::NodeNameMismatch { .. })
    ));
}
