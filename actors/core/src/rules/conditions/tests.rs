use std::time::Duration;

use jiff::Timestamp;

use super::taints::{
    self, ConditionTaintRule, MatchMode, RemovePolicy, Requirement, RuleError, StatusPattern,
    validate_rules,
};
// How a node is judged against a rule lives with the controller that acts
// on it; these tests check it together with the rules it reads.
use super::*;
use crate::closing::condition_taints::{RuleAction, decide, evaluate};
use crate::testutil::mk_node;
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::model::{NodeCondition, Taint};

fn ts(s: i64) -> Timestamp {
    Timestamp::from_second(s).unwrap()
}

fn node_with(conds: &[(&str, &str, Option<i64>)]) -> NodeInfo {
    let mut n = mk_node("n", &[("pool", "spot")], vec![]);
    for (t, s, since) in conds {
        n.conditions.insert(
            t.to_string().into(),
            NodeCondition {
                status: s.to_string().into(),
                since: since.map(ts),
            },
        );
    }
    n
}

fn req(type_: &str, status: &str, for_s: Option<u64>) -> Requirement {
    Requirement {
        type_: type_.into(),
        status: StatusPattern::new(status).unwrap(),
        for_: for_s.map(Duration::from_secs),
        match_absent: false,
    }
}

fn rule(conditions: Vec<Requirement>) -> ConditionTaintRule {
    ConditionTaintRule {
        name: "r".into(),
        conditions,
        match_mode: MatchMode::AllOf,
        node_selector: None,
        taint: Taint::new("node.kubernetes.io/out-of-service", "", "NoExecute"),
        remove: RemovePolicy::WhenCleared,
        max_unavailable: None,
    }
}

#[test]
fn a_status_pattern_matches_the_whole_status() {
    let p = StatusPattern::new("Kaput").unwrap();
    assert!(p.matches("Kaput"));
    assert!(!p.matches("NotKaput"));
    assert!(!p.matches("Kaputt"));
    let alt = StatusPattern::new("True|Unknown").unwrap();
    assert!(alt.matches("True") && alt.matches("Unknown"));
    assert!(
        !alt.matches("TrueUnknown"),
        "alternation is anchored as a whole"
    );
    assert!(!alt.matches("False"));
    assert!(StatusPattern::new("(").is_err());
}

#[test]
fn an_absent_condition_reads_as_unknown() {
    let n = node_with(&[]);
    assert_eq!(status_of(&n, "NetworkReady"), "Unknown");
    let unknown = rule(vec![req("Preempted", "Unknown", None)]);
    let v = evaluate(&unknown, &n, ts(100));
    assert!(v.matches, "{v:?}");
    assert!(v.why.contains("not reported"), "{}", v.why);
    let c = CriticalCondition {
        type_: "NetworkReady".into(),
        status: "True".into(),
        node_selector: None,
    };
    let why = c.waiting(&n).unwrap();
    assert!(
        why.contains("does not report") && why.contains("Unknown"),
        "{why}"
    );
    assert_eq!(
        c.waiting(&node_with(&[("NetworkReady", "True", None)])),
        None
    );
    let why = c
        .waiting(&node_with(&[("NetworkReady", "False", None)]))
        .unwrap();
    assert_eq!(why, "condition NetworkReady is False, waiting for True");
}

#[test]
fn for_counts_from_last_transition_time_inclusive() {
    let r = rule(vec![req("Preempted", "True", Some(30))]);
    let n = node_with(&[("Preempted", "True", Some(100))]);
    let early = evaluate(&r, &n, ts(129));
    assert!(!early.matches);
    assert_eq!(early.recheck_at, Some(ts(130)), "{early:?}");
    assert!(
        evaluate(&r, &n, ts(130)).matches,
        "exactly `for` later holds"
    );
    assert!(evaluate(&r, &n, ts(500)).matches);
    // No transition time: `for` cannot be counted, and there is no moment
    // to look again.
    let n = node_with(&[("Preempted", "True", None)]);
    let v = evaluate(&r, &n, ts(10_000));
    assert!(!v.matches && v.recheck_at.is_none(), "{v:?}");
    // A status that does not match never holds, however long.
    let n = node_with(&[("Preempted", "False", Some(0))]);
    assert!(!evaluate(&r, &n, ts(10_000)).matches);
}

#[test]
fn all_of_needs_every_condition_any_of_one() {
    let mut r = rule(vec![req("A", "True", None), req("B", "True", None)]);
    let one = node_with(&[("A", "True", None), ("B", "False", None)]);
    let both = node_with(&[("A", "True", None), ("B", "True", None)]);
    let none = node_with(&[]);
    assert!(!evaluate(&r, &one, ts(0)).matches);
    assert!(evaluate(&r, &both, ts(0)).matches);
    r.match_mode = MatchMode::AnyOf;
    assert!(evaluate(&r, &one, ts(0)).matches);
    assert!(evaluate(&r, &both, ts(0)).matches);
    assert!(!evaluate(&r, &none, ts(0)).matches);
}

#[test]
fn a_node_selector_limits_the_rule() {
    let mut r = rule(vec![req("Preempted", "True", None)]);
    r.node_selector = Some(LabelSelector::parse("pool=ondemand").unwrap());
    let n = node_with(&[("Preempted", "True", None)]);
    let v = evaluate(&r, &n, ts(0));
    assert!(!v.matches && v.why.contains("node selector"), "{v:?}");
}

#[test]
fn when_cleared_removes_never_keeps() {
    let mut r = rule(vec![req("Preempted", "True", None)]);
    let mut n = node_with(&[("Preempted", "True", None)]);
    let v = evaluate(&r, &n, ts(0));
    assert_eq!(decide(&r, &n, &v, 0, 10), Some(RuleAction::Add));
    n.taints.push(r.taint.clone());
    assert_eq!(decide(&r, &n, &v, 1, 10), None, "already on");
    n.conditions.get_mut("Preempted").unwrap().status = "False".into();
    let v = evaluate(&r, &n, ts(0));
    // Hardening: only a taint nodegate recorded putting on comes
    // off; the same taint put on by someone else stays.
    assert_eq!(decide(&r, &n, &v, 1, 10), None, "not nodegate's");
    n.rule_taints = Some("other,r".into());
    assert_eq!(decide(&r, &n, &v, 1, 10), Some(RuleAction::Remove));
    n.rule_taints = Some("other,rr".into());
    assert_eq!(decide(&r, &n, &v, 1, 10), None, "another rule's record");
    n.rule_taints = Some("r".into());
    r.remove = RemovePolicy::Never;
    assert_eq!(decide(&r, &n, &v, 1, 10), None, "never: it stays");
    // Another taint of the same key but another effect is not the rule's.
    let mut other = node_with(&[]);
    other
        .taints
        .push(Taint::new(&r.taint.key, "", "NoSchedule"));
    r.remove = RemovePolicy::WhenCleared;
    let v = evaluate(&r, &other, ts(0));
    assert_eq!(decide(&r, &other, &v, 0, 10), None);
}

#[test]
fn the_budget_holds_back_new_taints_only() {
    let mut r = rule(vec![req("Preempted", "True", None)]);
    r.max_unavailable = Some(MaxUnavailable::Count(2));
    let n = node_with(&[("Preempted", "True", None)]);
    let v = evaluate(&r, &n, ts(0));
    assert_eq!(decide(&r, &n, &v, 1, 10), Some(RuleAction::Add));
    assert_eq!(decide(&r, &n, &v, 2, 10), Some(RuleAction::BudgetBlocked));
    let mut tainted = n.clone();
    tainted.taints.push(r.taint.clone());
    tainted.rule_taints = Some("r".into());
    tainted.conditions.clear();
    let v = evaluate(&r, &tainted, ts(0));
    assert_eq!(
        decide(&r, &tainted, &v, 5, 10),
        Some(RuleAction::Remove),
        "removing is never held back"
    );
}

#[test]
fn invalid_rules_are_named_with_their_field() {
    let managed = |k: &str| k == "nodegate.dev/initializing";
    let ok = rule(vec![req("Preempted", "True", None)]);
    assert_eq!(validate_rules(std::slice::from_ref(&ok), managed), Ok(()));
    let mut bad_effect = ok.clone();
    bad_effect.taint.effect = "NoEntry".into();
    let e = validate_rules(&[bad_effect], managed).unwrap_err();
    assert!(matches!(e, RuleError::Effect { .. }), "{e}");
    assert!(e.to_string().contains("\"r\"") && e.to_string().contains("taint.effect"));
    let mut ours = ok.clone();
    ours.taint.key = "nodegate.dev/initializing".into();
    let e = validate_rules(&[ours], managed).unwrap_err();
    assert!(e.to_string().contains("managed"), "{e}");
    let e = validate_rules(&[ok.clone(), ok.clone()], managed).unwrap_err();
    assert_eq!(e, RuleError::Duplicate { name: "r".into() });
    let mut twin = ok.clone();
    twin.name = "s".into();
    let e = validate_rules(&[ok.clone(), twin], managed).unwrap_err();
    assert!(matches!(e, RuleError::SameTaint { .. }), "{e}");
    let e = validate_rules(&[rule(vec![])], managed).unwrap_err();
    assert!(matches!(e, RuleError::NoConditions { .. }), "{e}");
}

#[test]
fn critical_conditions_are_checked() {
    let c = |t: &str, s: &str| CriticalCondition {
        type_: t.into(),
        status: s.into(),
        node_selector: None,
    };
    assert_eq!(validate_critical(&[c("NetworkReady", "True")]), Ok(()));
    assert!(matches!(
        validate_critical(&[c("A", "True"), c("A", "False")]),
        Err(CriticalConditionError::Duplicate { .. })
    ));
    assert!(matches!(
        validate_critical(&[c("", "True")]),
        Err(CriticalConditionError::NoType { index: 0 })
    ));
    assert!(matches!(
        validate_critical(&[c("A", "")]),
        Err(CriticalConditionError::NoStatus { .. })
    ));
}

/// Hardening: `status: "False|Unknown"` with no `for` matched every
/// node that does not report the condition (a typo in the type is enough),
/// at once. Refused unless the rule says `matchAbsent: true`.
#[test]
fn a_pattern_matching_unknown_needs_for_or_match_absent() {
    let managed = |_: &str| false;
    let typo = rule(vec![
        req("Preempted", "True", None),
        req("GPUDriverReadyy", "False|Unknown", None),
    ]);
    let e = validate_rules(std::slice::from_ref(&typo), managed).unwrap_err();
    assert!(
        matches!(e, RuleError::UnknownWithoutFor { index: 1, .. }),
        "{e}"
    );
    let words = e.to_string();
    for w in [
        "\"r\"",
        "conditions[1]",
        "GPUDriverReadyy",
        "for",
        "matchAbsent: true",
    ] {
        assert!(words.contains(w), "{words} lacks {w}");
    }
    for status in ["Unknown", ".*", "Unk.*"] {
        let e = validate_rules(&[rule(vec![req("A", status, None)])], managed);
        assert!(e.is_err(), "{status} matches Unknown");
    }
    let mut with_for = typo.clone();
    with_for.conditions[1].for_ = Some(Duration::from_secs(300));
    assert_eq!(validate_rules(&[with_for], managed), Ok(()));
    let mut explicit = typo.clone();
    explicit.conditions[1].match_absent = true;
    assert_eq!(validate_rules(&[explicit], managed), Ok(()));
    let not_unknown = rule(vec![req("A", "False|Kaput", None)]);
    assert_eq!(validate_rules(&[not_unknown], managed), Ok(()));
}

/// Hardening: a taint the API server refuses (a value with a
/// space, a key that is not a qualified name) was retried for ever.
#[test]
fn a_rule_taint_must_be_one_the_api_accepts() {
    let managed = |_: &str| false;
    let with = |key: &str, value: &str| {
        let mut r = rule(vec![req("Preempted", "True", None)]);
        r.taint = Taint::new(key, value, "NoSchedule");
        validate_rules(&[r], managed)
    };
    assert_eq!(with("example.com/broken", "yes.1_a-b"), Ok(()));
    assert_eq!(with("broken", ""), Ok(()));
    let long = "v".repeat(64);
    for (key, value, field) in [
        ("example.com/broken", "not valid", "taint.value"),
        ("example.com/broken", long.as_str(), "taint.value"),
        ("example.com/broken", "-x", "taint.value"),
        ("Example.com/broken", "", "taint.key"),
        ("example.com/bro ken", "", "taint.key"),
        ("a/b/c", "", "taint.key"),
    ] {
        let e = with(key, value).unwrap_err();
        let words = e.to_string();
        assert!(
            words.contains("\"r\"") && words.contains(field) && words.contains("API server"),
            "{key:?}={value:?}: {words}"
        );
    }
}

/// Hardening: a `NoExecute` rule without `maxUnavailable` had no
/// limit; it now takes one node at a time.
#[test]
fn a_no_execute_rule_without_a_budget_takes_one_node_at_a_time() {
    let mut r = rule(vec![req("Preempted", "True", None)]);
    assert_eq!(r.taint.effect, "NoExecute");
    assert_eq!(r.budget(), Some(taints::NO_EXECUTE_DEFAULT_BUDGET));
    let n = node_with(&[("Preempted", "True", None)]);
    let v = evaluate(&r, &n, ts(0));
    assert_eq!(decide(&r, &n, &v, 0, 10), Some(RuleAction::Add));
    assert_eq!(decide(&r, &n, &v, 1, 10), Some(RuleAction::BudgetBlocked));
    r.max_unavailable = Some(MaxUnavailable::Count(3));
    assert_eq!(decide(&r, &n, &v, 1, 10), Some(RuleAction::Add));
    r.max_unavailable = None;
    r.taint.effect = "NoSchedule".into();
    assert_eq!(r.budget(), None);
    assert_eq!(decide(&r, &n, &v, 9, 10), Some(RuleAction::Add));
}

/// A rule's name is recorded on the nodes it taints (a comma-separated
/// annotation), so it must be a label value.
#[test]
fn a_rule_name_is_a_label_value() {
    let managed = |_: &str| false;
    let mut r = rule(vec![req("Preempted", "True", None)]);
    for bad in ["a,b", "two words", "-x", &"n".repeat(64)] {
        r.name = bad.to_string();
        let e = validate_rules(std::slice::from_ref(&r), managed).unwrap_err();
        assert!(matches!(e, RuleError::Name { .. }), "{bad}: {e}");
    }
    r.name = "preempted-spot.v2".into();
    assert_eq!(validate_rules(&[r], managed), Ok(()));
}
