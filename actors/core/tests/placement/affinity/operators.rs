//! Node affinity, one operator at a time (`In`, `NotIn`, `Exists`,
//! `DoesNotExist`, `Gt`, `Lt`), invalid requirements and the edge cases of
//! valid keys and values.

use super::*;

#[test]
fn in_and_not_in_operators() {
    run(vec![
        case(
            "in_matches_a_listed_value",
            &[("zone", "a")],
            vec![term(vec![req("zone", "In", &["a", "b"])])],
            true,
        ),
        case(
            "in_fails_for_an_unlisted_value",
            &[("zone", "c")],
            vec![term(vec![req("zone", "In", &["a", "b"])])],
            false,
        ),
        case(
            "in_fails_when_the_label_is_missing",
            &[],
            vec![term(vec![req("zone", "In", &["a"])])],
            false,
        ),
        case(
            "in_with_the_empty_value_matches_an_empty_label",
            &[("zone", "")],
            vec![term(vec![req("zone", "In", &[""])])],
            true,
        ),
        case(
            "in_with_the_empty_value_does_not_match_a_missing_label",
            &[],
            vec![term(vec![req("zone", "In", &[""])])],
            false,
        ),
        case(
            "in_is_case_sensitive",
            &[("zone", "A")],
            vec![term(vec![req("zone", "In", &["a"])])],
            false,
        ),
        case(
            "not_in_matches_when_the_label_is_missing",
            &[],
            vec![term(vec![req("zone", "NotIn", &["a"])])],
            true,
        ),
        case(
            "not_in_matches_an_unlisted_value",
            &[("zone", "c")],
            vec![term(vec![req("zone", "NotIn", &["a", "b"])])],
            true,
        ),
        case(
            "not_in_fails_for_a_listed_value",
            &[("zone", "b")],
            vec![term(vec![req("zone", "NotIn", &["a", "b"])])],
            false,
        ),
    ]);
}

#[test]
fn exists_and_does_not_exist_operators() {
    run(vec![
        case(
            "exists_matches_a_present_label",
            &[("gpu", "true")],
            vec![term(vec![req("gpu", "Exists", &[])])],
            true,
        ),
        case(
            "exists_matches_a_present_empty_label",
            &[("gpu", "")],
            vec![term(vec![req("gpu", "Exists", &[])])],
            true,
        ),
        case(
            "exists_fails_for_a_missing_label",
            &[],
            vec![term(vec![req("gpu", "Exists", &[])])],
            false,
        ),
        case(
            "does_not_exist_matches_a_missing_label",
            &[("other", "x")],
            vec![term(vec![req("gpu", "DoesNotExist", &[])])],
            true,
        ),
        case(
            "does_not_exist_fails_for_a_present_label",
            &[("gpu", "")],
            vec![term(vec![req("gpu", "DoesNotExist", &[])])],
            false,
        ),
    ]);
}

#[test]
fn gt_and_lt_operators() {
    run(vec![
        case(
            "gt_matches_a_strictly_greater_value",
            &[("cpu", "8")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            true,
        ),
        case(
            "gt_fails_for_an_equal_value",
            &[("cpu", "4")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            false,
        ),
        case(
            "gt_fails_for_a_smaller_value",
            &[("cpu", "3")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            false,
        ),
        case(
            "lt_matches_a_strictly_smaller_value",
            &[("cpu", "2")],
            vec![term(vec![req("cpu", "Lt", &["4"])])],
            true,
        ),
        case(
            "lt_fails_for_an_equal_value",
            &[("cpu", "4")],
            vec![term(vec![req("cpu", "Lt", &["4"])])],
            false,
        ),
        case(
            "gt_fails_when_the_label_is_missing",
            &[],
            vec![term(vec![req("cpu", "Gt", &["0"])])],
            false,
        ),
        case(
            "lt_fails_when_the_label_is_missing",
            &[],
            vec![term(vec![req("cpu", "Lt", &["100"])])],
            false,
        ),
        case(
            "gt_is_false_for_an_unparsable_node_value",
            &[("cpu", "eight")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            false,
        ),
        case(
            "lt_is_false_for_an_empty_node_value",
            &[("cpu", "")],
            vec![term(vec![req("cpu", "Lt", &["4"])])],
            false,
        ),
        case(
            "gt_reads_node_values_with_leading_zeros",
            &[("cpu", "08")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            true,
        ),
        case(
            "gt_accepts_a_requirement_value_with_leading_zeros",
            &[("cpu", "5")],
            vec![term(vec![req("cpu", "Gt", &["04"])])],
            true,
        ),
        case(
            "lt_reads_a_signed_node_value",
            &[("cpu", "-3")],
            vec![term(vec![req("cpu", "Lt", &["0"])])],
            true,
        ),
        case(
            "gt_is_false_for_a_node_value_beyond_int64",
            &[("cpu", "99999999999999999999")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            false,
        ),
        case(
            "lt_compares_at_the_int64_limit",
            &[("cpu", "9223372036854775806")],
            vec![term(vec![req("cpu", "Lt", &["9223372036854775807"])])],
            true,
        ),
        case(
            "gt_compares_numbers_not_strings",
            &[("cpu", "10")],
            vec![term(vec![req("cpu", "Gt", &["9"])])],
            true,
        ),
        case(
            "gt_is_false_for_a_decimal_node_value",
            &[("cpu", "4.5")],
            vec![term(vec![req("cpu", "Gt", &["4"])])],
            false,
        ),
    ]);
}

#[test]
fn invalid_requirements_make_their_term_match_nothing() {
    run(vec![
        case(
            "empty_key",
            &[("a", "x")],
            vec![term(vec![req("", "Exists", &[])])],
            false,
        ),
        case(
            "key_with_a_space",
            &[("a b", "x")],
            vec![term(vec![req("a b", "Exists", &[])])],
            false,
        ),
        case(
            "key_with_two_slashes",
            &[("a/b/c", "x")],
            vec![term(vec![req("a/b/c", "Exists", &[])])],
            false,
        ),
        case(
            "key_with_an_empty_prefix",
            &[("/a", "x")],
            vec![term(vec![req("/a", "Exists", &[])])],
            false,
        ),
        case(
            "key_with_an_empty_name",
            &[("example.com/", "x")],
            vec![term(vec![req("example.com/", "Exists", &[])])],
            false,
        ),
        case(
            "key_with_an_uppercase_prefix",
            &[("Example.com/a", "x")],
            vec![term(vec![req("Example.com/a", "Exists", &[])])],
            false,
        ),
        case(
            "key_name_of_64_characters",
            &[(LONG_64, "x")],
            vec![term(vec![req(LONG_64, "Exists", &[])])],
            false,
        ),
        case(
            "key_name_ending_in_a_dash",
            &[("a-", "x")],
            vec![term(vec![req("a-", "Exists", &[])])],
            false,
        ),
        case(
            "in_without_values",
            &[("zone", "a")],
            vec![term(vec![req("zone", "In", &[])])],
            false,
        ),
        case(
            "not_in_without_values_does_not_match_everything",
            &[("zone", "a")],
            vec![term(vec![req("zone", "NotIn", &[])])],
            false,
        ),
        case(
            "exists_with_values",
            &[("gpu", "a")],
            vec![term(vec![req("gpu", "Exists", &["a"])])],
            false,
        ),
        case(
            "does_not_exist_with_values",
            &[],
            vec![term(vec![req("gpu", "DoesNotExist", &["a"])])],
            false,
        ),
        case(
            "gt_without_values",
            &[("cpu", "8")],
            vec![term(vec![req("cpu", "Gt", &[])])],
            false,
        ),
        case(
            "gt_with_two_values",
            &[("cpu", "8")],
            vec![term(vec![req("cpu", "Gt", &["1", "2"])])],
            false,
        ),
        case(
            "gt_with_a_non_integer_value",
            &[("cpu", "8")],
            vec![term(vec![req("cpu", "Gt", &["x"])])],
            false,
        ),
        case(
            "lt_with_a_decimal_value",
            &[("cpu", "1")],
            vec![term(vec![req("cpu", "Lt", &["4.5"])])],
            false,
        ),
        case(
            "gt_with_a_negative_value_is_not_a_label_value",
            &[("cpu", "8")],
            vec![term(vec![req("cpu", "Gt", &["-1"])])],
            false,
        ),
        case(
            "gt_with_a_plus_sign_is_not_a_label_value",
            &[("cpu", "8")],
            vec![term(vec![req("cpu", "Gt", &["+1"])])],
            false,
        ),
        case(
            "in_with_an_invalid_label_value",
            &[("zone", "a b")],
            vec![term(vec![req("zone", "In", &["a b"])])],
            false,
        ),
        case(
            "in_with_a_value_of_64_characters",
            &[("zone", LONG_64)],
            vec![term(vec![req("zone", "In", &[LONG_64])])],
            false,
        ),
        case(
            "not_in_with_an_invalid_value",
            &[("zone", "a")],
            vec![term(vec![req("zone", "NotIn", &["b$"])])],
            false,
        ),
        case(
            "unknown_operator",
            &[("zone", "a")],
            vec![term(vec![req("zone", "Equals", &["a"])])],
            false,
        ),
        case(
            "operators_are_case_sensitive",
            &[("zone", "a")],
            vec![term(vec![req("zone", "in", &["a"])])],
            false,
        ),
        case(
            "an_invalid_requirement_fails_the_term_even_after_a_matching_one",
            &[("zone", "a")],
            vec![term(vec![
                req("zone", "In", &["a"]),
                req("zone", "NotIn", &[]),
            ])],
            false,
        ),
        case(
            "an_invalid_field_requirement_fails_a_term_whose_expressions_match",
            &[("zone", "a")],
            vec![NodeSelectorTerm {
                match_expressions: vec![req("zone", "In", &["a"])],
                match_fields: vec![req("metadata.name", "In", &[])],
            }],
            false,
        ),
    ]);
}

#[test]
fn valid_edge_cases_of_keys_and_values() {
    run(vec![
        case(
            "key_name_of_63_characters",
            &[(LONG_63, "x")],
            vec![term(vec![req(LONG_63, "Exists", &[])])],
            true,
        ),
        case(
            "value_of_63_characters",
            &[("zone", LONG_63)],
            vec![term(vec![req("zone", "In", &[LONG_63])])],
            true,
        ),
        case(
            "prefixed_key",
            &[("topology.kubernetes.io/zone", "a")],
            vec![term(vec![req("topology.kubernetes.io/zone", "In", &["a"])])],
            true,
        ),
        case(
            "key_with_dots_dashes_and_underscores",
            &[("a.b-c_d", "x")],
            vec![term(vec![req("a.b-c_d", "Exists", &[])])],
            true,
        ),
        case(
            "uppercase_name_part",
            &[("example.com/MyName", "x")],
            vec![term(vec![req("example.com/MyName", "Exists", &[])])],
            true,
        ),
        case(
            "single_character_key_and_value",
            &[("a", "b")],
            vec![term(vec![req("a", "In", &["b"])])],
            true,
        ),
    ]);
}
