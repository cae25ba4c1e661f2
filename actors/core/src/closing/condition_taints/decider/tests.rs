use std::time::Duration;

use super::*;
use crate::closing::decider::Closing;
use crate::deciders::Decider;
use crate::deciders::Level;
use crate::deciders::fixture::{Run, asked, logs, reasons, writes};
use crate::gate::EventType;
use crate::rules::conditions::taints::{
    ConditionTaintRule, MatchMode, RemovePolicy, Requirement, StatusPattern, validate_rules,
};
use crate::rules::selector::LabelSelector;
use crate::testutil::{mk_node, taint, taint_v, ts};
use crate::vocab::annotations;
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::config::{Config, Scope};
use crate::vocab::model::{NodeCondition, Taint};

const OOS: &str = "node.kubernetes.io/out-of-service";

/// Rule `name`: condition `cond` is `True` → taint `key:effect`.
fn rule(name: &str, cond: &str, key: &str, effect: &str) -> ConditionTaintRule {
    ConditionTaintRule {
        name: name.into(),
        conditions: vec![Requirement {
            type_: cond.into(),
            status: StatusPattern::new("True").unwrap(),
            for_: None,
            match_absent: false,
        }],
        match_mode: MatchMode::AllOf,
        node_selector: None,
        taint: taint(key, effect),
        remove: RemovePolicy::WhenCleared,
        max_unavailable: None,
    }
}

fn oos() -> ConditionTaintRule {
    rule("oos", "Shutdown", OOS, "NoExecute")
}

fn run(rules: Vec<ConditionTaintRule>) -> Run {
    validate_rules(&rules, |k| k.starts_with("nodegate.dev/")).unwrap();
    let config = Config {
        condition_taints: rules,
        ..Config::default()
    };
    Run::new(config, ts(100))
}

/// Node `name` at resourceVersion `rv` reporting `conds` (type, status,
/// lastTransitionTime) and carrying `taints`.
fn node(name: &str, rv: u32, conds: &[(&str, &str, Option<i64>)], taints: Vec<Taint>) -> NodeInfo {
    let mut n = mk_node(name, &[("pool", "a")], taints);
    n.resource_version = rv.to_string();
    n.annotations_present = true;
    for (t, s, since) in conds {
        let c = NodeCondition {
            status: s.to_string().into(),
            since: since.map(ts),
        };
        n.conditions.insert(t.to_string().into(), c);
    }
    n
}

/// `n` as nodegate records it after putting rule `rule`'s taint on.
fn owned(mut n: NodeInfo, rule: &str) -> NodeInfo {
    n.rule_taints = Some(rule.into());
    n
}

fn shut(name: &str, rv: u32) -> NodeInfo {
    node(name, rv, &[("Shutdown", "True", Some(0))], vec![])
}

/// Shut down and carrying the rule's taint.
fn shut_tainted(name: &str, rv: u32) -> NodeInfo {
    let taints = vec![taint(OOS, "NoExecute")];
    node(name, rv, &[("Shutdown", "True", Some(0))], taints)
}

/// `oos` with `maxUnavailable: 1`.
fn limited() -> ConditionTaintRule {
    let mut rule = oos();
    rule.max_unavailable = Some(MaxUnavailable::Count(1));
    rule
}

fn answer(write: &TaintWrite, outcome: PatchOutcome) -> Input {
    Input::Wrote {
        write: write.clone(),
        outcome,
    }
}

fn everything() -> Input {
    Input::Changed(Change::Everything)
}

fn blocked(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::Count(Tally::RuleBudgetBlocked(_))))
        .count()
}

fn one(rule: &str, n: usize) -> Vec<(String, usize)> {
    vec![(rule.to_string(), n)]
}

#[test]
fn a_matching_node_gets_the_rules_taint_and_an_event() {
    let mut r = run(vec![oos()]);
    let mut t = Closing::default();
    let change = r.index.upsert(shut("n1", 1));
    assert!(
        r.step(&mut t, change).is_empty(),
        "nothing before the lists are in"
    );
    let ds = Input::Changed(Change::DaemonSet { uid: "ds".into() });
    assert!(
        r.step(&mut t, ds).is_empty(),
        "a DaemonSet seen before the lists are in is no sign that they are"
    );
    let out = r.step(&mut t, everything());
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    let write = w[0].clone();
    assert_eq!(write.origin, Origin::Rules);
    assert_eq!(write.tag.as_deref(), Some("oos"));
    assert_eq!((write.node.as_str(), write.uid.as_str()), ("n1", "uid-n1"));
    assert_eq!(write.resource_version, "1");
    assert_eq!(
        write.change,
        TaintChange::Add {
            taint: taint(OOS, "NoExecute"),
            existing: 0,
            annotations: vec![(annotations::CONDITION_TAINTS, "oos".into())],
            annotations_present: true,
            at: ts(100),
        }
    );
    assert!(reasons(&out).is_empty(), "no Event before the answer");
    assert_eq!(t.rules().tainted(), one("oos", 1), "the write out counts");
    let out = r.step(&mut t, answer(&write, PatchOutcome::Applied));
    assert!(out.contains(&Effect::Count(Tally::RuleAdded("oos".into()))));
    assert_eq!(reasons(&out), ["ConditionTaintAdded (own write)"]);
    let Some(Effect::RecordEvent(ev)) = out.iter().find(|e| matches!(e, Effect::RecordEvent(_)))
    else {
        panic!("no Event: {out:?}");
    };
    assert_eq!(ev.type_, EventType::Normal);
    let why = "allOf: Shutdown=True matches \"True\"";
    let note = format!("Rule oos matches ({why}): nodegate put {OOS}:NoExecute on the node");
    assert_eq!(ev.note, note);
    let info = logs(&out, Level::Info);
    assert!(
        info[0].starts_with("condition taint put on (rule oos"),
        "{info:?}"
    );
    assert!(writes(&out).is_empty());
    assert_eq!(t.rules().matching(), one("oos", 1));
    // The watch shows the taint: nothing more to do.
    let change = r.index.upsert(shut_tainted("n1", 2));
    assert!(writes(&r.step(&mut t, change)).is_empty());
    assert_eq!(t.rules().tainted(), one("oos", 1));
}

#[test]
fn an_applied_write_counts_against_the_budget_until_the_index_shows_a_new_version() {
    let mut r = run(vec![limited()]);
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    r.index.upsert(node("n2", 1, &[], vec![]));
    let out = r.step(&mut t, everything());
    let write = writes(&out)[0].clone();
    assert_eq!(write.node, "n1");
    assert!(r.step(&mut t, answer(&write, PatchOutcome::Applied)).len() >= 3);
    // n2 starts matching while the index still shows n1 untainted.
    let change = r.index.upsert(shut("n2", 2));
    let out = r.step(&mut t, change);
    assert!(writes(&out).is_empty(), "{out:?}");
    assert_eq!(blocked(&out), 1);
    assert_eq!(
        logs(&out, Level::Info),
        [
            "condition taint held back: the rule's maxUnavailable is used up (rule oos, taint node.kubernetes.io/out-of-service:NoExecute)"
        ]
    );
    assert_eq!(
        asked(&out),
        [retry_after(ts(100))],
        "tried again while held"
    );
    // A resync of n1 at the version the write tested changes nothing.
    let change = r.index.upsert(shut("n1", 1));
    assert!(r.step(&mut t, change).is_empty());
    // Still held a second later: neither logged nor counted again.
    r.now = retry_after(ts(100));
    let out = r.step(&mut t, Input::Tick);
    assert!(writes(&out).is_empty() && blocked(&out) == 0, "{out:?}");
    assert!(logs(&out, Level::Info).is_empty());
    // The index shows n1 tainted: it counts from the index now.
    let change = r.index.upsert(shut_tainted("n1", 2));
    assert!(writes(&r.step(&mut t, change)).is_empty());
    assert_eq!(t.rules().tainted(), one("oos", 1));
    // Someone takes n1's taint off and its condition clears: room for n2.
    let change = r.index.upsert(node("n1", 3, &[], vec![]));
    let out = r.step(&mut t, change);
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert_eq!(
        (w[0].node.as_str(), w[0].resource_version.as_str()),
        ("n2", "2")
    );
    assert_eq!(blocked(&out), 0);
}

#[test]
fn when_cleared_takes_the_rules_taint_off_at_its_index() {
    let mut r = run(vec![oos()]);
    let mut t = Closing::default();
    let other = taint("example.com/other", "NoSchedule");
    let ours = taint_v(OOS, "nodeshutdown", "NoExecute");
    let carried = vec![other.clone(), taint(OOS, "NoSchedule"), ours.clone()];
    let cleared = || {
        owned(
            node("n1", 4, &[("Shutdown", "False", Some(0))], carried.clone()),
            "oos",
        )
    };
    r.index.upsert(cleared());
    let out = r.step(&mut t, everything());
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    let write = w[0].clone();
    assert_eq!(
        write.change,
        TaintChange::Remove {
            index: 2,
            taint: ours,
            annotations: vec![(annotations::CONDITION_TAINTS, None)],
        }
    );
    assert_eq!(write.resource_version, "4");
    let out = r.step(&mut t, answer(&write, PatchOutcome::Applied));
    assert!(out.contains(&Effect::Count(Tally::RuleRemoved("oos".into()))));
    assert_eq!(reasons(&out), ["ConditionTaintRemoved (own write)"]);
    assert_eq!(
        t.rules().tainted(),
        one("oos", 0),
        "counts as removed at once"
    );
    // The watch lags: the index still shows the taint, and no second
    // removal goes out.
    let change = r.index.upsert(cleared());
    assert!(writes(&r.step(&mut t, change)).is_empty());
    assert_eq!(t.rules().tainted(), one("oos", 0));
    // `remove: never` keeps it.
    let mut never = oos();
    never.remove = RemovePolicy::Never;
    let mut r = run(vec![never]);
    let mut t = Closing::default();
    let tainted = vec![taint(OOS, "NoExecute")];
    r.index.upsert(node("n1", 1, &[], tainted));
    assert!(writes(&r.step(&mut t, everything())).is_empty());
}

#[test]
fn a_removal_applied_makes_room_for_a_held_node() {
    let mut r = run(vec![limited()]);
    let mut t = Closing::default();
    let tainted = node("n1", 1, &[], vec![taint(OOS, "NoExecute")]);
    r.index.upsert(owned(tainted, "oos"));
    r.index.upsert(shut("n2", 1));
    let out = r.step(&mut t, everything());
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert!(matches!(w[0].change, TaintChange::Remove { index: 0, .. }));
    assert_eq!(blocked(&out), 1, "n2 waits for n1's removal");
    let removal = w[0].clone();
    let out = r.step(&mut t, answer(&removal, PatchOutcome::Applied));
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert_eq!(w[0].node, "n2");
    assert!(matches!(w[0].change, TaintChange::Add { .. }));
}

#[test]
fn nodes_joining_or_leaving_make_room_for_a_held_node() {
    let mut half = oos();
    half.max_unavailable = Some(MaxUnavailable::Percent(50));
    let mut r = run(vec![half]);
    let mut t = Closing::default();
    r.index.upsert(shut_tainted("n1", 1));
    r.index.upsert(shut("n2", 1));
    let out = r.step(&mut t, everything());
    assert!(writes(&out).is_empty() && blocked(&out) == 1, "{out:?}");
    // Three managed nodes allow one; four allow two.
    let change = r.index.upsert(node("n3", 1, &[], vec![]));
    assert!(writes(&r.step(&mut t, change)).is_empty());
    let change = r.index.upsert(node("n4", 1, &[], vec![]));
    let out = r.step(&mut t, change);
    assert_eq!(writes(&out)[0].node, "n2", "{out:?}");
    // A tainted node deleted makes room as well.
    let mut r = run(vec![limited()]);
    let mut t = Closing::default();
    r.index.upsert(shut_tainted("n1", 1));
    r.index.upsert(shut("n2", 1));
    assert!(writes(&r.step(&mut t, everything())).is_empty());
    let change = r.index.delete("n1");
    let out = r.step(&mut t, change);
    assert_eq!(writes(&out)[0].node, "n2", "{out:?}");
    assert_eq!(
        (t.rules().managed(), t.rules().tainted()),
        (1, one("oos", 1))
    );
}

#[test]
fn a_rule_with_for_writes_once_it_has_held_long_enough() {
    let mut waiting = oos();
    waiting.conditions[0].for_ = Some(Duration::from_secs(30));
    let mut r = run(vec![waiting]);
    let mut t = Closing::default();
    r.index
        .upsert(node("n1", 1, &[("Shutdown", "True", Some(90))], vec![]));
    let out = r.step(&mut t, everything());
    assert!(writes(&out).is_empty());
    assert_eq!(asked(&out), [ts(120)]);
    assert_eq!(t.rules().matching(), one("oos", 0));
    // Only an earlier look is asked for again.
    let later = node("n2", 1, &[("Shutdown", "True", Some(95))], vec![]);
    let change = r.index.upsert(later);
    assert!(r.step(&mut t, change).is_empty());
    let sooner = node("n3", 1, &[("Shutdown", "True", Some(80))], vec![]);
    let change = r.index.upsert(sooner);
    assert_eq!(asked(&r.step(&mut t, change)), [ts(110)]);
    r.now = ts(110);
    assert_eq!(writes(&r.step(&mut t, Input::Tick))[0].node, "n3");
    let change = r.index.delete("n3");
    r.step(&mut t, change);
    // An early tick (another node's, say) changes nothing.
    r.now = ts(119);
    let out = r.step(&mut t, Input::Tick);
    assert!(writes(&out).is_empty());
    assert_eq!(asked(&out), [ts(120)]);
    let change = r.index.delete("n2");
    r.step(&mut t, change);
    r.now = ts(120);
    let out = r.step(&mut t, Input::Tick);
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert!(matches!(w[0].change, TaintChange::Add { at, .. } if at == ts(120)));
    assert_eq!(t.rules().matching(), one("oos", 1));
    assert!(asked(&out).is_empty());
}

#[test]
fn nodes_outside_the_scope_or_the_rules_selector_are_left_alone() {
    let mut picky = oos();
    picky.node_selector = Some(LabelSelector::parse("zone=b").unwrap());
    let mut r = run(vec![picky]);
    r.config.scope = Scope {
        node_selector: Some(LabelSelector::parse("pool=a").unwrap()),
    };
    let mut t = Closing::default();
    let mut outside = shut("outside", 1);
    outside.labels.insert("pool".into(), "b".into());
    outside.labels.insert("zone".into(), "b".into());
    r.index.upsert(outside.clone());
    r.index.upsert(shut("elsewhere", 1));
    let mut inside = shut("inside", 1);
    inside.labels.insert("zone".into(), "b".into());
    r.index.upsert(inside);
    let out = r.step(&mut t, everything());
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert_eq!(w[0].node, "inside");
    assert_eq!(t.rules().managed(), 2);
    assert_eq!(t.rules().matching(), one("oos", 1));
    // Out of scope, even carrying the taint, it is not the rules' business.
    outside.taints.push(taint(OOS, "NoExecute"));
    outside.conditions.clear();
    outside.resource_version = "2".into();
    let change = r.index.upsert(outside);
    assert!(r.step(&mut t, change).is_empty());
    assert_eq!(t.rules().managed(), 2);
}

#[test]
fn a_dry_run_logs_each_write_once_and_writes_nothing() {
    let mut r = run(vec![oos()]);
    r.config.dry_run = true;
    r.may_write = false;
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    let out = r.step(&mut t, everything());
    assert!(
        writes(&out).is_empty() && reasons(&out).is_empty(),
        "{out:?}"
    );
    let info = logs(&out, Level::Info);
    assert_eq!(info.len(), 1, "{out:?}");
    assert!(
        info[0].starts_with("dry run: would put the condition taint on (rule oos"),
        "{info:?}"
    );
    let change = r.index.upsert(shut("n1", 2));
    assert!(r.step(&mut t, change).is_empty(), "logged once");
    assert_eq!(
        t.rules().tainted(),
        one("oos", 0),
        "a dry run counts nothing written"
    );
    // No longer due, then due again: logged again.
    let change = r.index.upsert(node("n1", 3, &[], vec![]));
    assert!(r.step(&mut t, change).is_empty());
    let change = r.index.upsert(shut("n1", 4));
    assert_eq!(logs(&r.step(&mut t, change), Level::Info).len(), 1);
    let tainted = node("n1", 5, &[], vec![taint(OOS, "NoExecute")]);
    let change = r.index.upsert(owned(tainted, "oos"));
    let out = r.step(&mut t, change);
    assert!(writes(&out).is_empty());
    assert!(
        logs(&out, Level::Info)[0].starts_with("dry run: would take the condition taint off"),
        "{out:?}"
    );
}

#[test]
fn a_follower_writes_and_logs_nothing_until_it_may_write() {
    let mut r = run(vec![limited()]);
    r.may_write = false;
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    r.index.upsert(shut("n2", 1));
    assert!(r.step(&mut t, everything()).is_empty());
    let change = r.index.upsert(shut("n2", 2));
    assert!(r.step(&mut t, change).is_empty());
    assert_eq!(
        t.rules().matching(),
        one("oos", 2),
        "a follower counts all the same"
    );
    r.may_write = true;
    let out = r.step(&mut t, Input::MayWrite);
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert_eq!(w[0].node, "n1");
    assert_eq!(blocked(&out), 1, "n2: the budget is used up");
    // The lease is lost before the write goes out: nothing said, and the
    // node waits for the lease.
    let write = w[0].clone();
    r.may_write = false;
    let out = r.step(&mut t, answer(&write, PatchOutcome::NotLeader));
    assert!(
        writes(&out).is_empty() && logs(&out, Level::Info).is_empty(),
        "{out:?}"
    );
    assert_eq!(t.rules().tainted(), one("oos", 0));
    r.may_write = true;
    let out = r.step(&mut t, Input::MayWrite);
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert_eq!(w[0].node, "n1");
}

#[test]
fn a_conflict_is_decided_again_on_the_indexs_next_view() {
    let mut r = run(vec![oos()]);
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    let write = writes(&r.step(&mut t, everything()))[0].clone();
    let out = r.step(&mut t, answer(&write, PatchOutcome::Conflict));
    assert_eq!(logs(&out, Level::Debug).len(), 1, "{out:?}");
    assert!(
        writes(&out).is_empty(),
        "the index still shows the refused version"
    );
    assert!(reasons(&out).is_empty());
    assert_eq!(t.rules().tainted(), one("oos", 0));
    let change = r.index.upsert(shut("n1", 2));
    let w = writes(&r.step(&mut t, change))
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].resource_version, "2");
    // The index showed the newer version before the answer came: decided
    // again at once.
    let out = r.step(&mut t, answer(&w[0], PatchOutcome::Applied));
    assert!(writes(&out).is_empty());
    let change = r.index.upsert(shut("n1", 3));
    let w = writes(&r.step(&mut t, change))[0].clone();
    r.index.upsert(shut("n1", 4));
    let out = r.step(&mut t, answer(&w, PatchOutcome::Conflict));
    assert_eq!(writes(&out)[0].resource_version, "4");
}

#[test]
fn an_unanswered_write_is_tried_again_a_moment_later() {
    let mut r = run(vec![oos()]);
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    let write = writes(&r.step(&mut t, everything()))[0].clone();
    let out = r.step(
        &mut t,
        answer(&write, PatchOutcome::Ambiguous("boom".into())),
    );
    let warn = logs(&out, Level::Warn);
    assert_eq!(
        warn,
        ["condition taint: could not put on the taint; trying again (rule oos): boom"]
    );
    assert!(writes(&out).is_empty());
    assert_eq!(asked(&out), [retry_after(ts(100))]);
    r.now = retry_after(ts(100));
    assert_eq!(writes(&r.step(&mut t, Input::Tick)).len(), 1);
}

#[test]
fn without_rules_nothing_happens() {
    let mut r = run(vec![]);
    let mut t = Closing::default();
    r.index.upsert(shut("n1", 1));
    assert!(r.step(&mut t, everything()).is_empty());
    let change = r.index.upsert(shut("n1", 2));
    assert!(r.step(&mut t, change).is_empty());
    assert!(r.step(&mut t, Input::Tick).is_empty());
    assert!(r.step(&mut t, Input::MayWrite).is_empty());
    assert!(t.rules().matching().is_empty());
}

#[test]
fn the_window_clock_stamps_and_the_local_clock_wakes() {
    let mut waiting = oos();
    waiting.conditions[0].for_ = Some(Duration::from_secs(30));
    let r = run(vec![
        waiting,
        rule("net", "NetworkDown", "example.com/net", "NoSchedule"),
    ]);
    let mut index = r.index.clone();
    index.upsert(node(
        "n1",
        1,
        &[
            ("Shutdown", "True", Some(90)),
            ("NetworkDown", "True", None),
        ],
        vec![],
    ));
    let mut t = Closing::default();
    // The API server's clock is 5 s ahead of this machine's.
    let cx = Context {
        view: &index,
        config: &r.config,
        now: Now {
            local: ts(100),
            server: Some(ts(105)),
        },
        may_write: true,
    };
    let out = t.decide(everything(), &cx);
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert!(matches!(w[0].change, TaintChange::Add { at, .. } if at == ts(105)));
    assert_eq!(asked(&out), [ts(115)], "120 on the server's clock");
}

mod hardening;
mod recount;
mod suspend;
