//! Label selectors: the kubectl string form (upstream `labels.Parse`), the
//! structured form from YAML (`metav1.LabelSelector`), matching, validation
//! and the errors a person reads.

use nodegate_core::rules::selector::{
    LabelSelector, LabelSelectorRequirement, SelectorError, check_label_key, check_label_value,
};
use nodegate_core::testutil::labels;
use nodegate_core::vocab::model::Labels;
use proptest::prelude::*;

fn sel(match_labels: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> LabelSelector {
    LabelSelector {
        match_labels: match_labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        match_expressions: exprs,
    }
}

fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
    LabelSelectorRequirement::new(key, op, values.iter().copied())
}

#[test]
fn parses_the_kubectl_forms() {
    let cases: Vec<(&str, LabelSelector)> = vec![
        ("", sel(&[], vec![])),
        ("   ", sel(&[], vec![])),
        ("a=b", sel(&[("a", "b")], vec![])),
        ("a==b", sel(&[("a", "b")], vec![])),
        ("  a  =  b  ", sel(&[("a", "b")], vec![])),
        ("a=", sel(&[("a", "")], vec![])),
        ("a!=b", sel(&[], vec![expr("a", "NotIn", &["b"])])),
        ("a!=", sel(&[], vec![expr("a", "NotIn", &[""])])),
        ("a in (x,y)", sel(&[], vec![expr("a", "In", &["x", "y"])])),
        (
            "a in ( x , y )",
            sel(&[], vec![expr("a", "In", &["x", "y"])]),
        ),
        ("a in(x)", sel(&[], vec![expr("a", "In", &["x"])])),
        ("a\tin\t(x)", sel(&[], vec![expr("a", "In", &["x"])])),
        ("a notin (x)", sel(&[], vec![expr("a", "NotIn", &["x"])])),
        ("a in (x,x,y)", sel(&[], vec![expr("a", "In", &["x", "y"])])),
        ("a", sel(&[], vec![expr("a", "Exists", &[])])),
        ("!a", sel(&[], vec![expr("a", "DoesNotExist", &[])])),
        ("! a", sel(&[], vec![expr("a", "DoesNotExist", &[])])),
        (
            "a,b",
            sel(
                &[],
                vec![expr("a", "Exists", &[]), expr("b", "Exists", &[])],
            ),
        ),
        (
            "a , !b",
            sel(
                &[],
                vec![expr("a", "Exists", &[]), expr("b", "DoesNotExist", &[])],
            ),
        ),
        (
            "tier=infra,zone in (a,b),!spot,team!=x,gpu",
            sel(
                &[("tier", "infra")],
                vec![
                    expr("zone", "In", &["a", "b"]),
                    expr("spot", "DoesNotExist", &[]),
                    expr("team", "NotIn", &["x"]),
                    expr("gpu", "Exists", &[]),
                ],
            ),
        ),
        // Upstream's own example: empty items and `()` are the empty value.
        (
            "x in (foo,,baz),y,z notin ()",
            sel(
                &[],
                vec![
                    expr("x", "In", &["foo", "", "baz"]),
                    expr("y", "Exists", &[]),
                    expr("z", "NotIn", &[""]),
                ],
            ),
        ),
        ("a in (,x)", sel(&[], vec![expr("a", "In", &["", "x"])])),
        ("a in (x,)", sel(&[], vec![expr("a", "In", &["x", ""])])),
        ("a in (,)", sel(&[], vec![expr("a", "In", &[""])])),
        ("a=b,a=c", sel(&[("a", "b")], vec![expr("a", "In", &["c"])])),
        ("a=b,a=b", sel(&[("a", "b")], vec![])),
        (
            "example.com/tier=infra",
            sel(&[("example.com/tier", "infra")], vec![]),
        ),
        (
            "app.kubernetes.io/name in (cilium)",
            sel(&[], vec![expr("app.kubernetes.io/name", "In", &["cilium"])]),
        ),
        // `in` and `notin` are words anywhere but the operator position.
        ("in in (in)", sel(&[], vec![expr("in", "In", &["in"])])),
        ("notin=notin", sel(&[("notin", "notin")], vec![])),
        ("a=in", sel(&[("a", "in")], vec![])),
    ];
    let mut failures = Vec::new();
    for (input, want) in cases {
        match LabelSelector::parse(input) {
            Ok(got) if got == want => {}
            other => failures.push(format!("{input:?}: want {want:?}, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn parse_errors_say_what_is_wrong() {
    let cases: Vec<(&str, &str)> = vec![
        ("tier in (a", r#"missing ")" after the values of "tier""#),
        ("tier in (a,", r#"missing ")" after the values of "tier""#),
        ("tier in", r#"expected "(" after "tier in", found the end"#),
        ("tier in a", r#"expected "(" after "tier in", found "a""#),
        (
            "tier in (a b)",
            r#"expected "," or ")" between the values of "tier", found "b""#,
        ),
        (
            "tier in (=)",
            r#"expected a value, "," or ")" in the values of "tier", found "=""#,
        ),
        (
            "a=b c",
            r#"expected "," or the end after a requirement, found "c""#,
        ),
        (
            "a=b=c",
            r#"expected "," or the end after a requirement, found "=""#,
        ),
        (
            "a b",
            r#"expected an operator (=, ==, !=, in, notin), "," or the end after "a", found "b""#,
        ),
        (
            "a!b",
            r#"expected an operator (=, ==, !=, in, notin), "," or the end after "a", found "!""#,
        ),
        ("a,", r#"expected a requirement after the last ",""#),
        (",a", r#"expected a label key, found ",""#),
        ("a,,b", r#"expected a label key, found ",""#),
        ("=b", r#"expected a label key, found "=""#),
        ("(a)", r#"expected a label key, found "(""#),
        ("!", r#"expected a label key after "!", found the end"#),
        ("!!a", r#"expected a label key after "!", found "!""#),
        (
            "!a=b",
            r#""!a" means the label is absent and takes no operator or value, found "=""#,
        ),
        (
            "a>1",
            r#""a": > and < (Gt, Lt) are not supported in a label selector"#,
        ),
        ("a<1", r#""a": > and < (Gt, Lt) are not supported"#),
        ("a=(b)", r#"expected a value after "a=", found "(""#),
        ("a!=(b)", r#"expected a value after "a!=", found "(""#),
        (
            "a/b/c=d",
            r#"invalid key "a/b/c": a key has at most one "/""#,
        ),
        (
            "/a=d",
            r#"invalid key "/a": the prefix before "/" must not be empty"#,
        ),
        (
            "Example.com/a=d",
            r#"invalid key "Example.com/a": the prefix "Example.com" must be a DNS subdomain"#,
        ),
        (
            "-a=b",
            r#"invalid key "-a": the name part must consist of letters, digits"#,
        ),
        (
            "a=b$",
            r#"invalid value "b$": a label value must consist of letters, digits"#,
        ),
        ("a=-b", r#"invalid value "-b""#),
        (
            "a in (x,y$)",
            r#"invalid value "y$": a label value must consist of letters, digits, '-', '_' or '.', and start and end with a letter or digit (a value of "a")"#,
        ),
        ("a=b$", r#"(the value of "a")"#),
    ];
    let mut failures = Vec::new();
    for (input, want) in cases {
        match LabelSelector::parse(input) {
            Err(e @ SelectorError::Parse { .. }) => {
                let text = e.to_string();
                let prefix = format!("label selector {input:?}: ");
                if !text.starts_with(&prefix) || !text.contains(want) {
                    failures.push(format!("{input:?}: {text:?} lacks {want:?}"));
                }
            }
            other => failures.push(format!("{input:?}: want a parse error, got {other:?}")),
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn the_documented_error_reads_exactly() {
    assert_eq!(
        LabelSelector::parse("tier in (a").unwrap_err().to_string(),
        r#"label selector "tier in (a": missing ")" after the values of "tier""#
    );
}

#[test]
fn long_keys_and_values_are_refused_with_their_length() {
    let name64 = "a".repeat(64);
    let err = LabelSelector::parse(&format!("{name64}=x"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the name part must be at most 63 characters, got 64"),
        "{err}"
    );
    let err = LabelSelector::parse(&format!("k={name64}"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("a label value must be at most 63 characters, got 64"),
        "{err}"
    );
    let prefix254 = format!("{}.com", "a".repeat(250));
    let err = LabelSelector::parse(&format!("{prefix254}/k"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("the prefix must be at most 253 characters, got 254"),
        "{err}"
    );
    assert!(LabelSelector::parse(&format!("{}=x", "a".repeat(63))).is_ok());
    assert!(LabelSelector::parse(&format!("{}.com/k", "a".repeat(249))).is_ok());
}

#[test]
fn label_key_rules() {
    let valid = [
        "a",
        "A",
        "0",
        "a.b",
        "a-b_c.d",
        "MyName",
        "123-abc",
        "example.com/MyName",
        "a/b",
        "a-1.b-2/c",
    ];
    for k in valid {
        assert_eq!(check_label_key(k), Ok(()), "{k:?}");
    }
    let invalid = [
        "", "a b", "-a", "a-", "_a", "a_", ".a", "a/", "/a", "a/b/c", "A/b", "a_b/c", "-a.com/b",
        "a..b/c", "ä", "a:b",
    ];
    for k in invalid {
        assert!(check_label_key(k).is_err(), "{k:?}");
    }
}

#[test]
fn label_value_rules() {
    for v in ["", "a", "A-b_c.d", "0", "08", "v1.2.3"] {
        assert_eq!(check_label_value(v), Ok(()), "{v:?}");
    }
    for v in ["-a", "a-", "a b", "a/b", "+5", "-5", ".", "é"] {
        assert!(check_label_value(v).is_err(), "{v:?}");
    }
    assert!(check_label_value(&"a".repeat(63)).is_ok());
    assert!(check_label_value(&"a".repeat(64)).is_err());
}

#[test]
fn matching() {
    let l = |pairs: &[(&str, &str)]| labels(pairs);
    let cases: Vec<(&str, Labels, bool)> = vec![
        ("", l(&[]), true),
        ("", l(&[("a", "b")]), true),
        ("a=b", l(&[("a", "b")]), true),
        ("a=b", l(&[("a", "c")]), false),
        ("a=b", l(&[]), false),
        ("a=", l(&[("a", "")]), true),
        ("a=", l(&[]), false),
        ("a!=b", l(&[]), true),
        ("a!=b", l(&[("a", "c")]), true),
        ("a!=b", l(&[("a", "b")]), false),
        ("a in (x,y)", l(&[("a", "y")]), true),
        ("a in (x,y)", l(&[("a", "z")]), false),
        ("a in (x,y)", l(&[]), false),
        ("a notin (x,y)", l(&[]), true),
        ("a notin (x,y)", l(&[("a", "x")]), false),
        ("a", l(&[("a", "")]), true),
        ("a", l(&[]), false),
        ("!a", l(&[]), true),
        ("!a", l(&[("a", "x")]), false),
        ("a=b,c", l(&[("a", "b"), ("c", "d")]), true),
        ("a=b,c", l(&[("a", "b")]), false),
        ("a=b,a=c", l(&[("a", "b")]), false),
        ("a in ()", l(&[("a", "")]), true),
        ("a in ()", l(&[("a", "x")]), false),
    ];
    for (input, node, want) in cases {
        let s = LabelSelector::parse(input).unwrap();
        assert_eq!(s.matches(&node), want, "{input:?} on {node:?}");
    }
}

#[test]
fn an_invalid_structured_selector_matches_nothing() {
    let anything = labels(&[("a", "x"), ("zone", "b")]);
    let invalid = [
        sel(&[], vec![expr("zone", "NotIn", &[])]),
        sel(&[], vec![expr("zone", "Gt", &["1"])]),
        sel(&[], vec![expr("zone", "in", &["b"])]),
        sel(&[], vec![expr("a", "Exists", &["x"])]),
        sel(&[], vec![expr("", "DoesNotExist", &[])]),
        sel(&[("bad key", "x")], vec![]),
        sel(&[("a", "x")], vec![expr("zone", "In", &["b$"])]),
    ];
    for s in invalid {
        assert!(s.validate().is_err(), "{s:?}");
        assert!(!s.matches(&anything), "{s:?}");
        assert!(!s.matches(&Labels::new()), "{s:?}");
    }
}

#[test]
fn validation_errors_locate_the_entry() {
    let cases = vec![
        (
            sel(&[("a b", "x")], vec![]),
            r#"label selector: matchLabels["a b"]: invalid key "a b""#,
        ),
        (
            sel(&[("a", "x y")], vec![]),
            r#"label selector: matchLabels["a"]: invalid value "x y""#,
        ),
        (
            sel(
                &[],
                vec![expr("ok", "Exists", &[]), expr("tier", "In", &[])],
            ),
            r#"label selector: matchExpressions[1] (key "tier"): In needs at least one value, got none"#,
        ),
        (
            sel(&[], vec![expr("tier", "Exists", &["a"])]),
            r#"label selector: matchExpressions[0] (key "tier"): Exists takes no values, got ["a"]"#,
        ),
        (
            sel(&[], vec![expr("tier", "Gt", &["1"])]),
            r#"label selector: matchExpressions[0] (key "tier"): operator "Gt" is not one of In, NotIn, Exists, DoesNotExist"#,
        ),
        (
            sel(&[], vec![expr("", "Exists", &[])]),
            r#"label selector: matchExpressions[0] (key ""): key must not be empty"#,
        ),
    ];
    for (s, want) in cases {
        let got = s.validate().unwrap_err().to_string();
        assert!(got.starts_with(want), "{got:?} should start with {want:?}");
    }
    assert_eq!(
        sel(&[("a", "")], vec![expr("b", "NotIn", &[""])]).validate(),
        Ok(())
    );
}

#[test]
fn is_empty_and_everything() {
    assert!(LabelSelector::everything().is_empty());
    assert!(LabelSelector::parse("").unwrap().is_empty());
    assert!(!LabelSelector::parse("a").unwrap().is_empty());
    assert!(LabelSelector::everything().matches(&Labels::new()));
}

#[test]
fn display_writes_the_kubectl_form() {
    let s = sel(
        &[("tier", "infra"), ("app", "x")],
        vec![
            expr("zone", "In", &["a", "b"]),
            expr("team", "NotIn", &["x"]),
            expr("gpu", "Exists", &[]),
            expr("spot", "DoesNotExist", &[]),
            expr("edge", "In", &[""]),
        ],
    );
    assert_eq!(
        s.to_string(),
        "app=x,tier=infra,zone in (a,b),team notin (x),gpu,!spot,edge in ()"
    );
    assert_eq!(LabelSelector::parse(&s.to_string()).unwrap(), s);
    assert_eq!(LabelSelector::default().to_string(), "");
    assert_eq!(
        "a=b".parse::<LabelSelector>().unwrap(),
        sel(&[("a", "b")], vec![])
    );
}

#[test]
fn parse_then_display_then_parse_is_stable_for_every_table_input() {
    for input in [
        "a=b,a=c",
        "x in (foo,,baz),y,z notin ()",
        "a in (,x)",
        "a!=",
        "in in (in)",
        "tier=infra,zone in (a,b),!spot,team!=x,gpu",
    ] {
        let once = LabelSelector::parse(input).unwrap();
        assert_eq!(
            LabelSelector::parse(&once.to_string()).unwrap(),
            once,
            "{input:?} -> {once}"
        );
    }
}

#[test]
fn structured_selectors_read_camel_case_json() {
    let json = serde_json::json!({
        "matchLabels": {"app": "cilium"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "spot", "operator": "DoesNotExist"}
        ]
    });
    let s: LabelSelector = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(
        s,
        sel(
            &[("app", "cilium")],
            vec![
                expr("tier", "In", &["a", "b"]),
                expr("spot", "DoesNotExist", &[])
            ]
        )
    );
    assert_eq!(serde_json::to_value(&s).unwrap(), json);
    let empty: LabelSelector = serde_json::from_value(serde_json::json!({})).unwrap();
    assert!(empty.is_empty());
    assert_eq!(serde_json::to_value(&empty).unwrap(), serde_json::json!({}));
}

// --- properties ----------------------------------------------------------

fn name_part() -> impl Strategy<Value = String> {
    "[A-Za-z0-9]([A-Za-z0-9._-]{0,6}[A-Za-z0-9])?"
}

fn key() -> impl Strategy<Value = String> {
    (
        proptest::option::of("[a-z0-9]{1,4}(\\.[a-z0-9]{1,4}){0,2}"),
        name_part(),
    )
        .prop_map(|(prefix, name)| match prefix {
            Some(p) => format!("{p}/{name}"),
            None => name,
        })
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        name_part(),
        Just("in".to_string()),
        Just("notin".to_string())
    ]
}

fn requirement() -> impl Strategy<Value = LabelSelectorRequirement> {
    (
        key(),
        proptest::sample::select(&["In", "NotIn", "Exists", "DoesNotExist"][..]),
        proptest::collection::btree_set(value(), 1..4),
    )
        .prop_map(|(key, op, values)| {
            let values = if op == "In" || op == "NotIn" {
                values.into_iter().collect()
            } else {
                vec![]
            };
            LabelSelectorRequirement {
                key,
                operator: op.to_string(),
                values,
            }
        })
}

fn selector() -> impl Strategy<Value = LabelSelector> {
    (
        proptest::collection::btree_map(key(), value(), 0..3),
        proptest::collection::vec(requirement(), 0..4),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

fn some_labels() -> impl Strategy<Value = nodegate_core::vocab::model::Labels> {
    proptest::collection::btree_map(key(), value(), 0..4)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
}

proptest! {
    #[test]
    fn display_then_parse_round_trips(s in selector()) {
        prop_assert_eq!(s.validate(), Ok(()));
        let text = s.to_string();
        let back = LabelSelector::parse(&text);
        prop_assert_eq!(back, Ok(s), "text {:?}", text);
    }

    #[test]
    fn a_selector_and_its_string_form_select_the_same_labels(s in selector(), l in some_labels()) {
        let back = LabelSelector::parse(&s.to_string()).unwrap();
        prop_assert_eq!(back.matches(&l), s.matches(&l));
        // Also with the selector's own keys set, so matches are not all trivial.
        let mut own = l.clone();
        own.extend(s.match_labels.iter().map(|(k, v)| (k.into(), v.into())));
        prop_assert_eq!(back.matches(&own), s.matches(&own));
    }

    #[test]
    fn parse_never_panics(input in ".{0,40}") {
        let _ = LabelSelector::parse(&input);
    }

    #[test]
    fn parse_never_panics_on_selector_alphabet(input in "[a-c=!(), in]{0,24}") {
        if let Ok(s) = LabelSelector::parse(&input) {
            // Whatever parses is valid and prints back to itself.
            prop_assert_eq!(s.validate(), Ok(()));
            prop_assert_eq!(LabelSelector::parse(&s.to_string()), Ok(s));
        }
    }

    #[test]
    fn match_labels_alone_match_exactly_their_superset(ml in proptest::collection::btree_map(key(), value(), 0..3), l in some_labels()) {
        let s = LabelSelector { match_labels: ml.clone(), match_expressions: vec![] };
        let want = ml.iter().all(|(k, v)| l.get(k.as_str()).is_some_and(|x| *x == *v));
        prop_assert_eq!(s.matches(&l), want);
    }
}
