use std::time::Duration;

use super::*;
use crate::rules::placement::EFFECT_NO_SCHEDULE;
use crate::testutil::{mk_node, regate_config, taint, ts};
use crate::vocab::config::Config;
use crate::vocab::model::Taint;

const GRACE: u64 = 60;

fn cfg() -> Config {
    regate_config(GRACE, true, MaxUnavailable::default())
}

fn node() -> NodeInfo {
    mk_node("n1", &[], vec![])
}

#[test]
fn the_budget_holds_at_its_limit() {
    let mut rc = cfg().regate.expect("regate");
    rc.max_unavailable = MaxUnavailable::Count(3);
    assert_eq!(budget_allows(&rc, 20, 2), Ok(()));
    let e = budget_allows(&rc, 20, 3).unwrap_err();
    assert_eq!((e.allowed, e.in_use, e.managed), (3, 3, 20));
    assert!(e.to_string().contains("--regate-max-unavailable 3"), "{e}");
    // The default 10 %: at least one, even in a small cluster, and counted
    // from the nodes that carry the taint now (so across restarts).
    rc.max_unavailable = MaxUnavailable::default();
    assert_eq!(budget_allows(&rc, 5, 0), Ok(()));
    assert!(budget_allows(&rc, 5, 1).is_err());
    assert_eq!(budget_allows(&rc, 40, 3), Ok(()));
    assert!(budget_allows(&rc, 40, 4).is_err());
}

#[test]
fn regated_nodes_get_the_regate_timeout_and_new_nodes_the_startup_one() {
    let mut c = cfg();
    c.timeout = Some(Duration::from_secs(120));
    if let Some(rc) = c.regate.as_mut() {
        rc.timeout = Some(Duration::from_secs(900));
    }
    let mut n = node();
    n.taints = vec![taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE)];
    assert_eq!(c.timeout_for(&n), Some(Duration::from_secs(900)));
    n.taints
        .push(taint("nodegate.dev/initializing", EFFECT_NO_SCHEDULE));
    assert_eq!(c.timeout_for(&n), Some(Duration::from_secs(120)));
    n.taints = vec![Taint::new("other", "", EFFECT_NO_SCHEDULE)];
    assert_eq!(c.timeout_for(&n), Some(Duration::from_secs(120)));
}

#[test]
fn the_annotation_names_the_members_or_the_reboot() {
    let b = |m: &str| Broken {
        member: m.into(),
        since: ts(0),
        source: Since::FirstSeen,
        waiting: "no pod".into(),
    };
    assert_eq!(
        Trigger::Members(vec![b("infra/a"), b("infra/b")]).annotation(),
        "infra/a,infra/b"
    );
    assert_eq!(
        Trigger::Reboot {
            from: "x".into(),
            to: "y".into()
        }
        .annotation(),
        "reboot"
    );
    assert_eq!(
        describe(&[b("infra/a")], ts(90)),
        "infra/a (no pod; for 90s)"
    );
}
