//! The budget: refusals, the Events about them, and the counts kept from
//! the change feed.

use super::*;
use crate::rules::selector::LabelSelector;
use crate::vocab::config::Scope;

fn refused(effects: &[Effect]) -> usize {
    count(effects, &Tally::RegateBudgetExhausted)
}

#[test]
fn an_exhausted_budget_is_counted_each_time_and_announced_every_ten_minutes() {
    let mut r = run();
    let mut g = Closing::default();
    upsert(&mut r, &mut g, regated("n0", "1"));
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert!(reads(&out).is_empty() && writes(&out).is_empty(), "{out:?}");
    assert_eq!(refused(&out), 1);
    assert_eq!(reasons(&out), ["RegateBudgetExhausted"]);
    let note = notes(&out)[0];
    assert!(
        note.starts_with("Not re-gated although without a Ready pod for the grace: infra/cni ("),
        "{note}"
    );
    assert!(
        note.ends_with(
            ": 1 of the 1 re-gated nodes --regate-max-unavailable 1 allows (2 managed nodes) are already re-gated"
        ),
        "{note}"
    );
    assert_eq!(logs(&out, Level::Warn).len(), 1);
    // Looked at again ten seconds later, not every second: a refusal is
    // not retried in a tight loop.
    assert_eq!(asked(&out), [ts(NOW + 10)]);
    r.now = ts(NOW + 9);
    assert_eq!(refused(&r.step(&mut g, Input::Tick)), 0);
    for later in [10, 590] {
        r.now = ts(NOW + later);
        let out = r.step(&mut g, Input::Tick);
        assert_eq!(refused(&out), 1, "{later}: {out:?}");
        assert!(reasons(&out).is_empty(), "{later}: {out:?}");
        assert!(logs(&out, Level::Warn).is_empty(), "{later}: {out:?}");
    }
    r.now = ts(NOW + 600);
    let out = r.step(&mut g, Input::Tick);
    assert_eq!(refused(&out), 1);
    assert_eq!(reasons(&out), ["RegateBudgetExhausted"]);
    assert!(reads(&out).is_empty());
}

#[test]
fn two_nodes_due_at_once_take_one_place_in_the_budget() {
    let mut r = run();
    let mut g = Closing::default();
    for name in ["n1", "n2"] {
        r.index.pods.push(broken_pod(name, NOW - GRACE - 5));
        r.index.upsert(node(name));
    }
    let out = r.step(&mut g, Input::Changed(Change::Everything));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
    // Held for n1's read, not refused.
    assert_eq!(refused(&out), 0);
    assert!(reasons(&out).is_empty());
    let out = r.step(&mut g, fresh(node("n1")));
    let write = writes(&out)[0].clone();
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    // n1 took the place: n2 is refused now.
    assert_eq!(
        reasons(&out),
        ["NodeRegated (own write)", "RegateBudgetExhausted"]
    );
    assert_eq!(refused(&out), 1);
    assert!(reads(&out).is_empty());
}

#[test]
fn a_node_held_for_a_read_that_writes_nothing_is_read_at_once() {
    let mut r = run();
    let mut g = Closing::default();
    for name in ["n1", "n2"] {
        r.index.pods.push(broken_pod(name, NOW - GRACE - 5));
        r.index.upsert(node(name));
    }
    r.step(&mut g, Input::Changed(Change::Everything));
    let gated = NodeInfo {
        taints: vec![taint("nodegate.dev/initializing", "NoSchedule")],
        ..at_version(node("n1"), "2")
    };
    let out = r.step(&mut g, fresh(gated));
    assert!(writes(&out).is_empty(), "{out:?}");
    assert_eq!(reads(&out), ["n2"], "{out:?}");
    assert_eq!(refused(&out), 0);
}

/// What a full count over the index says: (in scope, carrying the re-gate
/// taint), the suspended ones, and the names carrying the taint.
fn recount(r: &Run) -> ((usize, usize), usize, Vec<String>) {
    let cfg = &r.config;
    let Some(rc) = cfg.regate.as_ref() else {
        panic!("re-gating is off");
    };
    let nodes: Vec<&Arc<NodeInfo>> = r.index.nodes.values().collect();
    let in_scope = |n: &&&Arc<NodeInfo>| cfg.scope.includes(&n.labels);
    let suspended = nodes
        .iter()
        .filter(in_scope)
        .filter(|n| cfg.suspend || n.suspended)
        .count();
    let names: Vec<String> = nodes
        .iter()
        .filter(in_scope)
        .filter(|n| regating::carries(n, rc))
        .map(|n| n.name.clone())
        .collect();
    let counts = (nodes.iter().filter(in_scope).count(), names.len());
    (counts, suspended, names)
}

fn kept(r: &Run, g: &Closing) -> ((usize, usize), usize, Vec<String>) {
    let cx = context(r);
    let names = g.regated_ages(&cx).into_iter().map(|(n, _)| n).collect();
    let counted = g.counted().unwrap_or((usize::MAX, usize::MAX));
    (counted, g.regate_gauges(&cx).suspended, names)
}

fn scope(selector: &str) -> Scope {
    match LabelSelector::parse(selector) {
        Ok(s) => Scope {
            node_selector: Some(s),
        },
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn the_counts_kept_from_the_feed_equal_a_full_count() {
    let mut r = Run::new(config(MaxUnavailable::Percent(50)), ts(NOW));
    r.config.scope = scope("pool=a");
    let mut g = Closing::default();
    let mut seed: u64 = 42;
    let mut regated_seen = 0;
    for step in 0..400 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let x = seed >> 33;
        let name = format!("n{}", x % 12);
        // The configuration changes now and then (the next change counts
        // afresh), and everything is offered once.
        match step {
            120 => r.config.scope = scope("pool in (a, b)"),
            200 => r.config.suspend = true,
            280 => {
                r.config.scope = scope("pool=b");
                r.config.suspend = false;
                r.step(&mut g, Input::Changed(Change::Everything));
            }
            _ => {}
        }
        let input = if x.is_multiple_of(7) {
            r.index.delete(&name)
        } else {
            let pool = if x & 8 != 0 { "a" } else { "b" };
            let mut n = mk_node(&name, &[("pool", pool)], vec![]);
            if x & 16 != 0 {
                n.taints.push(regate_taint());
            }
            if x & 32 != 0 {
                n.taints.insert(0, taint("example.com/other", "NoExecute"));
            }
            n.suspended = x & 64 != 0;
            n.resource_version = step.to_string();
            r.index.upsert(n)
        };
        r.step(&mut g, input);
        let (expected, kept) = (recount(&r), kept(&r, &g));
        assert_eq!(kept, expected, "step {step}");
        regated_seen += expected.0.1;
    }
    // The sequence did exercise the taint.
    assert!(regated_seen > 100, "{regated_seen}");
}

#[test]
fn a_count_made_from_an_index_ahead_of_the_feed_counts_each_node_once() {
    let mut r = run();
    let mut g = Closing::default();
    let late_n1 = r.index.upsert(regated("n1", "1"));
    let late_n2 = r.index.upsert(node("n2"));
    r.step(&mut g, Input::Changed(Change::Everything));
    assert_eq!(g.counted(), Some((2, 1)));
    r.step(&mut g, late_n1);
    r.step(&mut g, late_n2);
    assert_eq!(g.counted(), Some((2, 1)));
    let gone = r.index.delete("n1");
    r.step(&mut g, gone);
    assert_eq!(g.counted(), Some((1, 0)));
}

/// The fresh read may return a version the index has not shown yet: the
/// write counts in the budget while the index shows either the version it
/// held or the one the read returned, until it shows the write (found by
/// the e2e test of a bad rollout, where every node was re-gated at once).
#[test]
fn a_write_counts_while_the_index_lags_behind_the_fresh_read() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert_eq!(reads(&out), ["n1"]);
    let out = r.step(&mut g, fresh(at_version(node("n1"), "2")));
    let write = writes(&out)[0].clone();
    assert_eq!(write.resource_version, "2");
    r.step(&mut g, answer(&write, PatchOutcome::Applied));
    // The index still shows version 1: the write counts.
    assert_eq!(gauges(&r, &g).regated, 1);
    r.index.pods.push(broken_pod("n2", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n2"));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1);
    // The index catches up with the read's version, still without the
    // taint: the write still counts.
    upsert(&mut r, &mut g, at_version(node("n1"), "2"));
    assert_eq!(gauges(&r, &g).regated, 1);
    let out = r.step(&mut g, Input::Changed(Change::Pods { node: "n2".into() }));
    assert!(reads(&out).is_empty(), "{out:?}");
    // Then the write itself: counted once, as shown.
    upsert(&mut r, &mut g, regated("n1", "3"));
    assert_eq!(g.counted(), Some((2, 1)));
    assert_eq!(gauges(&r, &g).regated, 1);
}

/// The index is read directly, the counts from the feed: when the index
/// already holds the written version but its change is still on its way,
/// the write counts once all the same.
#[test]
fn a_write_counts_while_its_change_is_still_on_the_feed() {
    let mut r = run();
    let mut g = Closing::default();
    let write = due_and_read(&mut r, &mut g, "n1");
    r.step(&mut g, answer(&write, PatchOutcome::Applied));
    // The index holds the tainted version; the feed has not delivered it.
    let change = r.index.upsert(regated("n1", "9"));
    r.index.pods.push(broken_pod("n2", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n2"));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1);
    assert_eq!(gauges(&r, &g).regated, 1);
    // Delivered: counted once, as shown.
    r.step(&mut g, change);
    assert_eq!(g.counted(), Some((2, 1)));
    assert_eq!(gauges(&r, &g).regated, 1);
}

/// Hardening: with the budget used up, every due node was looked
/// at again every second. Refused nodes wait ten seconds; a place freed
/// wakes as many of them as places freed, at once.
#[test]
fn refused_nodes_wait_and_a_freed_place_wakes_one() {
    let mut r = run();
    let mut g = Closing::default();
    upsert(&mut r, &mut g, regated("n0", "1"));
    for n in ["n1", "n2", "n3"] {
        r.index.pods.push(broken_pod(n, NOW - GRACE - 5));
        let out = upsert(&mut r, &mut g, node(n));
        assert_eq!(refused(&out), 1, "{n}: {out:?}");
    }
    for later in 1..10 {
        r.now = ts(NOW + later);
        let out = r.step(&mut g, Input::Tick);
        assert_eq!(refused(&out), 0, "looked at again after {later}s: {out:?}");
    }
    // n0's gate opens it: one place, one node read at once.
    r.index.pods.push(ready_pod("n0"));
    let out = upsert(&mut r, &mut g, node("n0"));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
    assert_eq!(refused(&out), 0, "the others are not looked at: {out:?}");
    // Ten seconds on, the others wait for n1's read (the place it may take).
    r.now = ts(NOW + 10);
    let out = r.step(&mut g, Input::Tick);
    assert!(reads(&out).is_empty(), "{out:?}");
}

/// Hardening: the nodes a condition rule keeps tainted count
/// against `--max-unavailable` together with the re-gated ones.
#[test]
fn the_total_cap_counts_the_rules_taints() {
    let mut cfg = config(MaxUnavailable::Count(5));
    cfg.max_unavailable = Some(MaxUnavailable::Count(1));
    cfg.condition_taints = vec![crate::testutil::condition_rule(
        "kaput",
        "Kaput",
        "example.com/kaput",
        None,
    )];
    let mut r = Run::new(cfg, ts(NOW));
    r.index.daemonsets.push(agent("cni"));
    let mut g = Closing::default();
    let kaput = mk_node("k", &[], vec![taint("example.com/kaput", "NoSchedule")]);
    upsert(&mut r, &mut g, kaput);
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(refused(&out), 1);
    let note = notes(&out)[0];
    assert!(note.contains("--max-unavailable 1"), "{note}");
    // The rule's taint comes off: the place is free.
    let out = upsert(&mut r, &mut g, at_version(mk_node("k", &[], vec![]), "2"));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
}
