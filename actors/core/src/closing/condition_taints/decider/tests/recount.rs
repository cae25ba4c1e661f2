//! The counts kept change by change equal the counts a full pass over the
//! index makes, whatever the sequence of changes.

use std::time::Duration;

use super::*;
use crate::closing::condition_taints::{carries, evaluate};
use crate::deciders::ClusterView;

type Gauge = Vec<(String, usize)>;

/// The counts as a full pass over the index makes them.
fn recount(r: &Run) -> (usize, Gauge, Gauge) {
    let nodes: Vec<_> = r
        .index
        .nodes()
        .into_iter()
        .filter(|n| r.config.scope.includes(&n.labels))
        .collect();
    let rules = &r.config.condition_taints;
    let count = |f: &dyn Fn(&ConditionTaintRule, &NodeInfo) -> bool| {
        rules
            .iter()
            .map(|rule| {
                (
                    rule.name.clone(),
                    nodes.iter().filter(|n| f(rule, n)).count(),
                )
            })
            .collect::<Vec<_>>()
    };
    let matching = count(&|rule, n| evaluate(rule, n, r.now).matches);
    let tainted = count(&|rule, n| carries(n, rule));
    (nodes.len(), matching, tainted)
}

#[test]
fn incremental_counts_equal_a_full_recount() {
    let mut slow = oos();
    slow.conditions[0].for_ = Some(Duration::from_secs(20));
    let net = rule("net", "NetworkDown", "example.com/net", "NoSchedule");
    let mut r = run(vec![slow, net.clone()]);
    r.may_write = false;
    let mut t = Closing::default();
    assert!(r.step(&mut t, everything()).is_empty());
    let mut seed: u64 = 7;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    for step in 0..400u32 {
        let name = format!("n{}", next(6));
        let input = if next(8) == 0 {
            r.index.delete(&name)
        } else {
            // Shutdown may have held for less than its `for` yet.
            let recent = r.now.as_second() - next(30) as i64;
            let mut conds: Vec<(&str, &str, Option<i64>)> = Vec::new();
            for (c, since) in [("Shutdown", recent), ("NetworkDown", 0)] {
                if next(3) > 0 {
                    let status = if next(2) == 0 { "True" } else { "False" };
                    conds.push((c, status, Some(since)));
                }
            }
            let mut taints = Vec::new();
            if next(2) == 0 {
                taints.push(taint(OOS, "NoExecute"));
            }
            if next(2) == 0 {
                taints.push(taint("example.com/net", "NoSchedule"));
            }
            let mut n = node(&name, step + 2, &conds, taints);
            if next(5) == 0 {
                n.labels.insert("pool".into(), "b".into());
            }
            r.index.upsert(n)
        };
        if next(10) == 0 {
            r.now += jiff::SignedDuration::from_secs(3);
            r.step(&mut t, Input::Tick);
        }
        r.step(&mut t, input);
        let (managed, matching, tainted) = recount(&r);
        assert_eq!(t.rules().managed(), managed, "step {step}");
        assert_eq!(t.rules().matching(), matching, "step {step}");
        assert_eq!(t.rules().tainted(), tainted, "step {step}");
        if step == 200 {
            // The configuration changes: a rule goes, another comes, the
            // scope narrows.
            let mut renamed = net.clone();
            renamed.name = "network".into();
            r.config.condition_taints = vec![renamed];
            r.config.scope = Scope {
                node_selector: Some(LabelSelector::parse("pool=a").unwrap()),
            };
            r.step(&mut t, everything());
            assert_eq!(t.rules().matching(), recount(&r).1);
            assert_eq!(t.rules().matching()[0].0, "network");
        }
    }
}
