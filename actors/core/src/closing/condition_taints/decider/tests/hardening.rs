//! The rules decider's hardening: a rule the API
//! server refuses backs off, `whenCleared` takes off only what it put on, and
//! the global cap counts re-gated nodes too.

use super::*;

/// Hardening: a rule whose writes the API server refuses (a
/// policy's 403, an invalid taint's 422) was retried on every node every
/// second. Now the rule waits 2 s, 4 s, 8 s ... after each refusal in a
/// row, one write goes out alone when the wait is over, and a success lets
/// the others follow.
#[test]
fn a_rule_the_api_server_refuses_backs_off() {
    let mut rule = rule("foreign", "Broken", "example.com/broken", "NoSchedule");
    rule.max_unavailable = None;
    let mut r = run(vec![rule]);
    let mut t = Closing::default();
    for n in ["n1", "n2", "n3"] {
        r.index
            .upsert(node(n, 1, &[("Broken", "True", Some(0))], vec![]));
    }
    let sent: Vec<TaintWrite> = writes(&r.step(&mut t, everything()))
        .into_iter()
        .cloned()
        .collect();
    assert_eq!(sent.len(), 3);
    let forbidden = || PatchOutcome::Failed("403 Forbidden: nodegate.dev taints only".into());
    let mut asked_at = Vec::new();
    for w in &sent {
        let out = r.step(&mut t, answer(w, forbidden()));
        assert!(writes(&out).is_empty(), "{out:?}");
        asked_at.extend(asked(&out));
    }
    // One refusal round: the rule waits 2 s (not the usual 1 s).
    assert_eq!(asked_at, [ts(102)]);
    r.now = retry_after(ts(100));
    assert!(
        writes(&r.step(&mut t, Input::Tick)).is_empty(),
        "still waiting"
    );
    // A change of a node does not cut the wait short.
    let change = r
        .index
        .upsert(node("n1", 2, &[("Broken", "True", Some(0))], vec![]));
    let out = r.step(&mut t, change);
    assert!(writes(&out).is_empty(), "{out:?}");
    // The wait is over: one write probes.
    r.now = ts(102);
    let out = r.step(&mut t, Input::Tick);
    let probe = writes(&out);
    assert_eq!(probe.len(), 1, "one write alone: {out:?}");
    let probe = probe[0].clone();
    // Refused again: 4 s this time.
    let out = r.step(&mut t, answer(&probe, forbidden()));
    assert!(writes(&out).is_empty());
    for at in [103, 105] {
        r.now = ts(at);
        assert!(writes(&r.step(&mut t, Input::Tick)).is_empty(), "at {at}");
    }
    r.now = ts(106);
    let probe = writes(&r.step(&mut t, Input::Tick))[0].clone();
    // The policy is fixed: the probe is applied and the others follow at
    // the usual pace.
    let out = r.step(&mut t, answer(&probe, PatchOutcome::Applied));
    let names =
        |out: &[Effect]| -> Vec<String> { writes(out).iter().map(|w| w.node.clone()).collect() };
    let mut rest = names(&out);
    if rest.is_empty() {
        r.now = retry_after(ts(106));
        rest = names(&r.step(&mut t, Input::Tick));
    }
    assert_eq!(rest.len(), 2, "the other nodes follow: {rest:?}");
    assert!(!rest.contains(&probe.node));
    // The waits double up to five minutes.
    assert_eq!(REFUSED.ceiling(1), Duration::from_secs(2));
    assert_eq!(REFUSED.ceiling(3), Duration::from_secs(8));
    assert_eq!(REFUSED.ceiling(40), REFUSED.most);
}

/// Hardening: with `remove: whenCleared`, an out-of-service taint
/// an operator put on by hand (the upstream non-graceful-shutdown runbook)
/// on a node that does not match was taken off within a second. Only a
/// taint nodegate recorded putting on comes off now; the add records it.
#[test]
fn when_cleared_leaves_a_taint_nodegate_did_not_put_on() {
    // (A taint put on by hand counts in the budget like any other.)
    let mut rule = oos();
    rule.max_unavailable = Some(MaxUnavailable::Count(5));
    let mut r = run(vec![rule]);
    let mut t = Closing::default();
    let by_hand = vec![taint_v(OOS, "nodeshutdown", "NoExecute")];
    r.index.upsert(node("dead", 1, &[], by_hand.clone()));
    assert!(writes(&r.step(&mut t, everything())).is_empty());
    r.now = retry_after(ts(100));
    assert!(writes(&r.step(&mut t, Input::Tick)).is_empty());
    // Another rule's record does not make it this rule's.
    let change = r
        .index
        .upsert(owned(node("dead", 2, &[], by_hand), "kaput"));
    assert!(writes(&r.step(&mut t, change)).is_empty());
    // nodegate's own add is recorded with the other rules' in one patch,
    // and its removal takes only this rule out of the record.
    let change = r.index.upsert(owned(shut("n2", 1), "kaput"));
    let w = writes(&r.step(&mut t, change))[0].clone();
    let TaintChange::Add { annotations, .. } = &w.change else {
        panic!("{w:?}");
    };
    assert_eq!(
        annotations,
        &[(annotations::CONDITION_TAINTS, "kaput,oos".to_string())]
    );
    r.step(&mut t, answer(&w, PatchOutcome::Applied));
    let on = node("n2", 2, &[], vec![taint(OOS, "NoExecute")]);
    let change = r.index.upsert(owned(on, "kaput,oos"));
    let w = writes(&r.step(&mut t, change))[0].clone();
    assert!(
        matches!(&w.change, TaintChange::Remove { annotations, .. }
            if annotations == &[(annotations::CONDITION_TAINTS, Some("kaput".to_string()))]),
        "{w:?}"
    );
}

/// Hardening: re-gating and each rule had budgets of their
/// own, with no cap on the nodes nodegate keeps closed altogether.
/// `--max-unavailable` counts every managed node carrying the re-gate
/// taint or a rule's taint.
#[test]
fn the_total_cap_holds_a_rule_back_with_re_gated_nodes_counted() {
    use crate::vocab::config::RegateConfig;
    let mut lenient = oos();
    lenient.max_unavailable = Some(MaxUnavailable::Count(10));
    let mut r = run(vec![lenient]);
    r.config.max_unavailable = Some(MaxUnavailable::Count(2));
    let degraded =
        crate::rules::placement::ManagedTaint::new("nodegate.dev/degraded", "NoSchedule");
    r.config.regate = Some(RegateConfig {
        after: std::time::Duration::from_secs(60),
        taint: degraded.clone(),
        timeout: None,
        on_reboot: false,
        max_unavailable: MaxUnavailable::Count(10),
    });
    let mut t = Closing::default();
    r.index
        .upsert(node("re", 1, &[], vec![degraded.to_taint()]));
    for n in ["n1", "n2", "n3"] {
        r.index.upsert(shut(n, 1));
    }
    let out = r.step(&mut t, everything());
    let w = writes(&out);
    assert_eq!(
        w.len(),
        1,
        "one place left beside the re-gated node: {out:?}"
    );
    assert_eq!(blocked(&out), 2);
    let info = logs(&out, Level::Info);
    assert!(
        info.iter().any(|l| l.contains("--max-unavailable 2")),
        "{info:?}"
    );
    // The re-gated node opens: a place for one more.
    let change = r.index.upsert(node("re", 2, &[], vec![]));
    let out = r.step(&mut t, change);
    assert_eq!(writes(&out).len(), 1, "{out:?}");
}
