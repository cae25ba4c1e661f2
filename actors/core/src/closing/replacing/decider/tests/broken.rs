//! A member failing on too many gated nodes is broken cluster-wide: the
//! node's gate takes the fallback (`--on-timeout-fallback`) instead of a
//! replace, whatever kind of member it is, and a node whose members fail
//! only there is still replaced.

use super::*;

/// Three stuck nodes beside the ten healthy ones: 3 of 13 failing is
/// more than 20 % (2 nodes): broken cluster-wide.
fn broken_run(fallback: Fallback) -> (Run, Vec<Effect>) {
    let mut r = run(config(5, 5, fallback));
    let mut d = Replacer::default();
    for name in ["s1", "s2"] {
        let mut n = stuck(name);
        n.replace.timed_out = None; // still within their deadline
        add_stuck(&mut r, n);
    }
    let input = add_stuck(&mut r, karpenter("k1"));
    let out = r.step(&mut d, input);
    (r, out)
}

#[test]
fn a_member_broken_cluster_wide_keeps_the_node_with_fallback_keep() {
    let (r, out) = broken_run(Fallback::Keep);
    assert!(requests(&out).is_empty(), "{out:?}");
    let w = replace_writes(&out);
    assert_eq!(w.len(), 1);
    let ReplaceAction::Fallback { fallback, note, .. } = &w[0].action else {
        panic!("{w:?}")
    };
    assert_eq!(*fallback, Fallback::Keep);
    assert!(
        note.contains("infra/cni is broken cluster-wide (not Ready on 3 of the 13 nodes"),
        "{note}"
    );
    let mut d = Replacer::default();
    let out = r.step(&mut d, done(w[0], None));
    assert_eq!(reasons(&out), ["ReplaceSkipped (own write)"]);
    assert!(out.contains(&Effect::Count(Tally::ReplaceSkipped("keep"))));
}

#[test]
fn a_member_broken_cluster_wide_opens_the_node_with_fallback_open() {
    let (_, out) = broken_run(Fallback::Open);
    let w = replace_writes(&out);
    assert!(
        matches!(
            &w[..],
            [ReplaceWrite {
                action: ReplaceAction::Fallback {
                    fallback: Fallback::Open,
                    ..
                },
                ..
            }]
        ),
        "{w:?}"
    );
}

#[test]
fn a_fallback_recorded_for_this_gate_is_not_decided_again() {
    let mut r = run(config(5, 5, Fallback::Keep));
    let mut d = Replacer::default();
    let mut n = stuck("n1");
    n.replace.fallback = Some((Fallback::Keep, ts(CREATED + 130)));
    let input = add_stuck(&mut r, n);
    assert!(replace_writes(&r.step(&mut d, input)).is_empty());
}

/// A DaemonSet whose pods cannot be made on new nodes (a quota, an
/// admission refusal) has no pod there at all: each node where it is
/// expected without a pod counts as one it fails on, so three stuck nodes
/// of thirteen make it broken cluster-wide and none is replaced.
#[test]
fn an_expected_member_with_no_pod_counts_as_failing() {
    let mut r = run(config(5, 5, Fallback::Keep));
    let mut d = Replacer::default();
    for name in ["s1", "s2"] {
        let mut n = stuck(name);
        n.replace.timed_out = None; // still within their deadline
        r.index.upsert(n);
    }
    let input = r.index.upsert(karpenter("k1"));
    let out = r.step(&mut d, input);
    assert!(requests(&out).is_empty(), "{out:?}");
    let w = replace_writes(&out);
    let [
        ReplaceWrite {
            action: ReplaceAction::Fallback { note, .. },
            ..
        },
    ] = &w[..]
    else {
        panic!("one fallback: {out:?}")
    };
    assert!(
        note.contains("not Ready on 3 of the 13 nodes it has a pod on or is expected on"),
        "{note}"
    );
}

/// The only fallback write in `out`, with its note.
fn the_fallback(out: &[Effect]) -> (Fallback, String) {
    let w = replace_writes(out);
    let [
        ReplaceWrite {
            action: ReplaceAction::Fallback { fallback, note, .. },
            ..
        },
    ] = &w[..]
    else {
        panic!("one fallback: {out:?}")
    };
    (*fallback, note.clone())
}

/// A stuck node whose agent is Ready: it waits only for members of other
/// kinds.
fn add_stuck_agent_ready(r: &mut Run, n: NodeInfo) -> Input {
    r.index.pods.push(pod(&n.name, true));
    r.index.upsert(n)
}

#[test]
fn the_canary_failing_on_every_gated_node_is_broken_and_nothing_is_replaced() {
    let mut cfg = config(5, 5, Fallback::Keep);
    cfg.canary = Some(crate::vocab::config::CanaryConfig {
        namespace: "nodegate".into(),
        probe: false,
        max_in_flight: 50,
    });
    let mut r = run(cfg);
    let mut d = Replacer::default();
    // Two gated nodes within their deadline, no canary could start on
    // either (an image nobody can pull, no pod IP left).
    for name in ["s1", "s2"] {
        let mut n = stuck(name);
        n.replace.timed_out = None;
        add_stuck_agent_ready(&mut r, n);
    }
    let input = add_stuck_agent_ready(&mut r, karpenter("k1"));
    let out = r.step(&mut d, input);
    assert!(requests(&out).is_empty(), "{out:?}");
    let (fallback, note) = the_fallback(&out);
    assert_eq!(fallback, Fallback::Keep);
    assert!(
        note.contains("canary is broken cluster-wide")
            && note.contains("not Ready on 3 of the 3 nodes"),
        "{note}"
    );
}

#[test]
fn a_critical_condition_failing_on_the_gated_nodes_is_broken() {
    let mut cfg = config(5, 5, Fallback::Keep);
    cfg.conditions = vec![crate::rules::conditions::CriticalCondition {
        type_: "NetworkReady".into(),
        status: "True".into(),
        node_selector: None,
    }];
    let mut r = run(cfg);
    let mut d = Replacer::default();
    for name in ["s1", "s2"] {
        let mut n = stuck(name);
        n.replace.timed_out = None;
        add_stuck_agent_ready(&mut r, n);
    }
    let input = add_stuck_agent_ready(&mut r, stuck("n1"));
    let out = r.step(&mut d, input);
    assert!(requests(&out).is_empty(), "{out:?}");
    let (_, note) = the_fallback(&out);
    assert!(
        note.contains("condition:NetworkReady is broken cluster-wide"),
        "{note}"
    );
}

#[test]
fn a_member_failing_on_one_gated_node_only_is_not_broken() {
    let mut cfg = config(5, 5, Fallback::Keep);
    cfg.conditions = vec![crate::rules::conditions::CriticalCondition {
        type_: "NetworkReady".into(),
        status: "True".into(),
        node_selector: None,
    }];
    let mut r = run(cfg);
    let mut d = Replacer::default();
    // Two other gated nodes report the condition.
    for name in ["g1", "g2"] {
        let mut n = stuck(name);
        n.replace.timed_out = None;
        n.conditions.insert(
            "NetworkReady".into(),
            crate::vocab::model::NodeCondition {
                status: "True".into(),
                ..Default::default()
            },
        );
        add_stuck_agent_ready(&mut r, n);
    }
    let input = add_stuck_agent_ready(&mut r, stuck("n1"));
    let out = r.step(&mut d, input);
    assert_eq!(requests(&out), [("n1", &Owner::None)]);
}

#[test]
fn due_nodes_sharing_a_blocker_fall_back_instead_of_being_replaced_one_by_one() {
    // 2 failing of 12 is within 20 %: by its share the agent is not broken,
    // but both failing nodes are due and wait for it.
    let mut r = run(config(5, 5, Fallback::Keep));
    let mut d = Replacer::default();
    r.may_write = false;
    let a = add_stuck(&mut r, stuck("n1"));
    r.step(&mut d, a);
    let b = add_stuck(&mut r, stuck("n2"));
    r.step(&mut d, b);
    r.may_write = true;
    let out = r.step(&mut d, Input::MayWrite);
    assert!(requests(&out).is_empty(), "{out:?}");
    let w = replace_writes(&out);
    assert_eq!(w.len(), 2, "{out:?}");
    for w in w {
        let ReplaceAction::Fallback { fallback, note, .. } = &w.action else {
            panic!("{w:?}")
        };
        assert_eq!(*fallback, Fallback::Keep);
        assert!(
            note.contains("infra/cni is broken cluster-wide")
                && note.contains("2 nodes past their deadline wait for it"),
            "{note}"
        );
    }
}
