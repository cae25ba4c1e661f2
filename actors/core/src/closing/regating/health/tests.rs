//! `examine`, the decision for one open node: the grace and where it
//! counts from, members not watched, reboots, excused members, and the
//! budget's counts from the taints the cluster shows.

use std::collections::BTreeSet;

use super::*;
use crate::closing::regating::{DEFAULT_REGATE_TAINT_KEY, budget_allows};
use crate::rules::placement::{EFFECT_NO_SCHEDULE, TOLERATION_OP_EXISTS};
use crate::testutil::{
    mk_ds, mk_node, mk_pod, regate_config, taint, template_with_tolerations, toleration, ts,
};
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::model::{OpenedBy, OpenedByMark};

const GRACE: u64 = 60;

fn cfg() -> Config {
    regate_config(GRACE, true, MaxUnavailable::default())
}

/// A DaemonSet that tolerates everything (as node agents usually do).
fn agent(name: &str) -> Arc<DaemonSetInfo> {
    Arc::new(mk_ds(
        "infra",
        name,
        template_with_tolerations(vec![toleration("", TOLERATION_OP_EXISTS, "", "")]),
    ))
}

/// `agent`'s pod on node `n1`, not Ready since `since` (seconds).
fn broken_pod(ds: &DaemonSetInfo, since: i64) -> Arc<PodInfo> {
    let mut p = mk_pod(&format!("{}-pod", ds.name), "n1", &ds.uid);
    p.namespace = ds.namespace.as_str().into();
    p.ready = false;
    p.ready_since = Some(ts(since)).into();
    Arc::new(p)
}

fn ready_pod(ds: &DaemonSetInfo) -> Arc<PodInfo> {
    let mut p = mk_pod(&format!("{}-pod", ds.name), "n1", &ds.uid);
    p.namespace = ds.namespace.as_str().into();
    Arc::new(p)
}

fn node() -> NodeInfo {
    mk_node("n1", &[], vec![])
}

fn look(
    node: &NodeInfo,
    ds: &[Arc<DaemonSetInfo>],
    pods: &[Arc<PodInfo>],
    memory: &mut Watched,
    now: i64,
) -> Health {
    examine(node, ds, pods, &cfg(), memory, ts(now))
}

/// When a broken node is due, if it is only broken.
fn regate_at(h: &Health) -> Option<Timestamp> {
    match h {
        Health::Broken { regate_at, .. } => Some(*regate_at),
        _ => None,
    }
}

fn members(h: &Health) -> BTreeSet<String> {
    match h {
        Health::Regate(Trigger::Members(m)) | Health::Broken { members: m, .. } => {
            m.iter().map(|b| b.member.clone()).collect()
        }
        _ => BTreeSet::new(),
    }
}

#[test]
fn a_healthy_node_is_healthy_and_remembers_nothing_but_its_boot() {
    let ds = agent("cni");
    let mut m = Watched::default();
    assert_eq!(
        look(
            &node(),
            std::slice::from_ref(&ds),
            &[ready_pod(&ds)],
            &mut m,
            1000
        ),
        Health::Healthy
    );
    assert!(m.is_empty(), "{m:?}");
}

#[test]
fn grace_counts_from_the_ready_condition_and_is_inclusive() {
    let ds = agent("cni");
    let pods = [broken_pod(&ds, 1000)];
    let mut m = Watched::default();
    let just_before = look(
        &node(),
        std::slice::from_ref(&ds),
        &pods,
        &mut m,
        1000 + GRACE as i64 - 1,
    );
    assert_eq!(
        just_before,
        Health::Broken {
            members: vec![Broken {
                member: "infra/cni".into(),
                since: ts(1000),
                source: Since::PodCondition,
                waiting: "pod cni-pod is not Ready".into(),
            }],
            regate_at: ts(1000 + GRACE as i64),
        }
    );
    // Exactly at the grace: re-gated.
    let at = look(
        &node(),
        std::slice::from_ref(&ds),
        &pods,
        &mut m,
        1000 + GRACE as i64,
    );
    assert!(matches!(at, Health::Regate(Trigger::Members(_))), "{at:?}");
    assert_eq!(members(&at), BTreeSet::from(["infra/cni".to_string()]));
    // Cluster time: nothing remembered, so a restart changes nothing.
    assert!(m.is_empty());
}

#[test]
fn a_pod_flapping_ready_inside_the_grace_starts_it_again() {
    let ds = agent("cni");
    let mut m = Watched::default();
    // Broken since 1000, Ready again at 1050, broken again since 1055.
    assert!(matches!(
        look(
            &node(),
            std::slice::from_ref(&ds),
            &[broken_pod(&ds, 1000)],
            &mut m,
            1050
        ),
        Health::Broken { .. }
    ));
    assert_eq!(
        look(
            &node(),
            std::slice::from_ref(&ds),
            &[ready_pod(&ds)],
            &mut m,
            1050
        ),
        Health::Healthy
    );
    let again = look(
        &node(),
        std::slice::from_ref(&ds),
        &[broken_pod(&ds, 1055)],
        &mut m,
        1100,
    );
    assert_eq!(
        regate_at(&again),
        Some(ts(1055 + GRACE as i64)),
        "{again:?}"
    );
}

#[test]
fn a_replaced_pod_counts_from_the_replacement() {
    let ds = agent("cni");
    let mut old = (*broken_pod(&ds, 0)).clone();
    old.terminating = true;
    old.uid = "old".into();
    let new = broken_pod(&ds, 990);
    let h = look(
        &node(),
        std::slice::from_ref(&ds),
        &[Arc::new(old), new],
        &mut Watched::default(),
        1000,
    );
    assert_eq!(regate_at(&h), Some(ts(990 + GRACE as i64)), "{h:?}");
}

#[test]
fn a_member_with_no_pod_counts_from_when_it_was_first_seen_missing() {
    let ds = agent("csi");
    let mut m = Watched::default();
    let first = look(&node(), std::slice::from_ref(&ds), &[], &mut m, 500);
    assert_eq!(regate_at(&first), Some(ts(500 + GRACE as i64)), "{first:?}");
    assert_eq!(m.missing_since, vec![("infra/csi".into(), ts(500))]);
    // Later looks keep the first time; at the grace it is due.
    assert!(matches!(
        look(&node(), std::slice::from_ref(&ds), &[], &mut m, 559),
        Health::Broken { .. }
    ));
    let due = look(&node(), std::slice::from_ref(&ds), &[], &mut m, 560);
    match due {
        Health::Regate(Trigger::Members(b)) => {
            assert_eq!(b[0].source, Since::FirstSeen);
            assert_eq!(b[0].since, ts(500));
        }
        other => panic!("{other:?}"),
    }
    // Once it has a Ready pod, it is forgotten.
    assert_eq!(
        look(
            &node(),
            std::slice::from_ref(&ds),
            &[ready_pod(&ds)],
            &mut m,
            600
        ),
        Health::Healthy
    );
    assert!(m.missing_since.is_empty());
}

#[test]
fn a_member_that_does_not_tolerate_the_regate_taint_never_regates() {
    let picky = Arc::new(mk_ds("infra", "picky", template_with_tolerations(vec![])));
    let h = look(
        &node(),
        std::slice::from_ref(&picky),
        &[broken_pod(&picky, 0)],
        &mut Watched::default(),
        10_000,
    );
    assert_eq!(h, Health::Healthy);
    // A toleration of exactly the re-gate taint is enough.
    let tolerant = Arc::new(mk_ds(
        "infra",
        "tolerant",
        template_with_tolerations(vec![toleration(
            DEFAULT_REGATE_TAINT_KEY,
            TOLERATION_OP_EXISTS,
            "",
            "",
        )]),
    ));
    let h = look(
        &node(),
        &[picky.clone(), tolerant.clone()],
        &[broken_pod(&picky, 0), broken_pod(&tolerant, 0)],
        &mut Watched::default(),
        10_000,
    );
    assert_eq!(members(&h), BTreeSet::from(["infra/tolerant".to_string()]));
}

#[test]
fn a_member_not_expected_on_the_node_is_not_watched() {
    let mut elsewhere = mk_ds(
        "infra",
        "gpu",
        template_with_tolerations(vec![toleration("", TOLERATION_OP_EXISTS, "", "")]),
    );
    elsewhere
        .template
        .node_selector
        .insert("gpu".into(), "true".into());
    let h = look(
        &node(),
        &[Arc::new(elsewhere)],
        &[],
        &mut Watched::default(),
        10_000,
    );
    assert_eq!(h, Health::Healthy);
}

#[test]
fn gated_ignored_out_of_scope_and_not_ready_nodes_are_not_watched() {
    let ds = agent("cni");
    let pods = [broken_pod(&ds, 0)];
    let mut m = Watched {
        boot_id: Some("b".into()),
        missing_since: vec![("x".into(), ts(1))],
        ..Watched::default()
    };
    let mut gated = node();
    gated
        .taints
        .push(taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE));
    assert_eq!(
        look(&gated, std::slice::from_ref(&ds), &pods, &mut m, 10_000),
        Health::NotWatched(NotWatched::Gated)
    );
    assert!(m.is_empty(), "a gated node is forgotten");
    let mut ignored = node();
    ignored.ignored = true;
    assert_eq!(
        look(&ignored, std::slice::from_ref(&ds), &pods, &mut m, 10_000),
        Health::NotWatched(NotWatched::Ignored)
    );
    let mut down = node();
    down.ready = NodeReady::False;
    assert_eq!(
        look(&down, std::slice::from_ref(&ds), &pods, &mut m, 10_000),
        Health::NotWatched(NotWatched::NodeNotReady)
    );
    let mut scoped = cfg();
    scoped.scope.node_selector = Some("pool=gpu".parse().expect("selector"));
    assert_eq!(
        examine(
            &node(),
            std::slice::from_ref(&ds),
            &pods,
            &scoped,
            &mut m,
            ts(10_000)
        ),
        Health::NotWatched(NotWatched::OutOfScope)
    );
    let mut off = cfg();
    off.regate = None;
    assert_eq!(
        examine(&node(), &[ds], &pods, &off, &mut m, ts(10_000)),
        Health::NotWatched(NotWatched::Off)
    );
}

#[test]
fn a_new_boot_id_regates_at_once_and_only_with_regate_on_reboot() {
    let ds = agent("cni");
    let pods = [ready_pod(&ds)];
    let mut m = Watched::default();
    let mut n = node();
    n.boot_id = Some("boot-1".into());
    assert_eq!(
        look(&n, std::slice::from_ref(&ds), &pods, &mut m, 100),
        Health::Healthy
    );
    assert_eq!(m.boot_id.as_deref(), Some("boot-1"));
    n.boot_id = Some("boot-2".into());
    assert_eq!(
        look(&n, std::slice::from_ref(&ds), &pods, &mut m, 101),
        Health::Regate(Trigger::Reboot {
            from: "boot-1".into(),
            to: "boot-2".into()
        })
    );
    // Without --regate-on-reboot a new boot id is nothing.
    let mut m = Watched::default();
    let mut no_reboot = cfg();
    if let Some(rc) = no_reboot.regate.as_mut() {
        rc.on_reboot = false;
    }
    for (at, boot) in [(103, "boot-3"), (104, "boot-4")] {
        n.boot_id = Some(boot.into());
        assert_eq!(
            examine(
                &n,
                std::slice::from_ref(&ds),
                &pods,
                &no_reboot,
                &mut m,
                ts(at)
            ),
            Health::Healthy
        );
    }
}

/// The closing ledger's count over `nodes`: (in scope, carrying the
/// re-gate taint).
fn budget_counts(nodes: &[NodeInfo], cfg: &Config) -> (usize, usize) {
    let nodes: Vec<Arc<NodeInfo>> = nodes.iter().cloned().map(Arc::new).collect();
    let counts = crate::closing::ledger::Counts::of(cfg, &nodes);
    (counts.managed.len(), counts.regated.len())
}

#[test]
fn the_budget_is_counted_from_the_taints_the_cluster_shows() {
    let c = cfg();
    let mut rc = c.regate.clone().expect("regate");
    rc.max_unavailable = MaxUnavailable::Count(2);
    let degraded = || taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE);
    let mut nodes: Vec<NodeInfo> = (0..10)
        .map(|i| mk_node(&format!("n{i}"), &[("pool", "a")], vec![]))
        .collect();
    nodes[0].taints.push(degraded());
    nodes[1].taints.push(degraded());
    // What a replica that just started (or just became leader) sees: two
    // nodes re-gated by its predecessor, so the budget is already used up.
    let (managed, in_use) = budget_counts(&nodes, &c);
    assert_eq!((managed, in_use), (10, 2));
    assert!(budget_allows(&rc, managed, in_use).is_err());
    // One reopens: room for one more.
    nodes[1].taints.clear();
    let (managed, in_use) = budget_counts(&nodes, &c);
    assert_eq!(budget_allows(&rc, managed, in_use), Ok(()));
    // Nodes outside the scope count for neither side.
    let mut scoped = c.clone();
    scoped.scope.node_selector = Some("pool=b".parse().expect("selector"));
    nodes.push(mk_node("other", &[("pool", "b")], vec![degraded()]));
    assert_eq!(budget_counts(&nodes, &scoped), (1, 1));
}

#[test]
fn a_reboot_stays_due_until_the_node_is_regated() {
    let ds = agent("cni");
    let pods = [ready_pod(&ds)];
    let mut m = Watched::default();
    let mut n = node();
    n.boot_id = Some("boot-1".into());
    assert_eq!(
        look(&n, std::slice::from_ref(&ds), &pods, &mut m, 100),
        Health::Healthy
    );
    n.boot_id = Some("boot-2".into());
    let due = Health::Regate(Trigger::Reboot {
        from: "boot-1".into(),
        to: "boot-2".into(),
    });
    // The write was refused (budget, conflict, leadership): still due at
    // every look, not forgotten because the new id is now the reference.
    for at in [101, 102, 500] {
        assert_eq!(look(&n, std::slice::from_ref(&ds), &pods, &mut m, at), due);
    }
    // Re-gated: the gate's business; then open again and healthy.
    let mut gated = n.clone();
    gated
        .taints
        .push(taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE));
    assert_eq!(
        look(&gated, std::slice::from_ref(&ds), &pods, &mut m, 501),
        Health::NotWatched(NotWatched::Gated)
    );
    assert_eq!(
        look(&n, std::slice::from_ref(&ds), &pods, &mut m, 600),
        Health::Healthy
    );
}

#[test]
fn members_broken_when_a_node_was_opened_by_its_deadline_are_excused_until_ready_once() {
    let ds = agent("cni");
    let other = agent("csi");
    let both = [ds.clone(), other.clone()];
    let mut n = node();
    n.opened_at = Some(ts(1000));
    n.opened_by = Some(OpenedByMark::Nodegate(OpenedBy::Timeout));
    let mut m = Watched::default();
    // Opened by the deadline with cni broken since long before: not
    // re-gated for it, however long it stays broken.
    let pods = [broken_pod(&ds, 0), ready_pod(&other)];
    assert_eq!(look(&n, &both, &pods, &mut m, 1001), Health::Healthy);
    assert_eq!(look(&n, &both, &pods, &mut m, 5000), Health::Healthy);
    // Another member breaking after the opening is not excused.
    let later = [broken_pod(&ds, 0), broken_pod(&other, 5000)];
    assert_eq!(
        members(&look(&n, &both, &later, &mut m, 5000 + GRACE as i64)),
        BTreeSet::from(["infra/csi".to_string()])
    );
    // cni Ready once, then broken again: it counts from then.
    let _ = look(
        &n,
        &both,
        &[ready_pod(&ds), ready_pod(&other)],
        &mut m,
        6000,
    );
    let again = look(
        &n,
        &both,
        &[broken_pod(&ds, 6001), ready_pod(&other)],
        &mut m,
        6001 + GRACE as i64,
    );
    assert_eq!(members(&again), BTreeSet::from(["infra/cni".to_string()]));
    // Opened by request or by someone else: excused the same way; by
    // readiness, or with no `opened-by` nodegate reads: nothing is.
    let broken_since_before = [broken_pod(&ds, 0), ready_pod(&other)];
    for (by, excused) in [
        (Some(OpenedByMark::Nodegate(OpenedBy::Manual)), true),
        (Some(OpenedByMark::External), true),
        (Some(OpenedByMark::Nodegate(OpenedBy::Ready)), false),
        (None, false),
    ] {
        n.opened_by = by;
        let mut fresh = Watched::default();
        let h = look(&n, &both, &broken_since_before, &mut fresh, 1001);
        let expected = if excused {
            BTreeSet::new()
        } else {
            BTreeSet::from(["infra/cni".to_string()])
        };
        assert_eq!(members(&h), expected, "opened-by {by:?}");
    }
}

/// Hardening: an operator takes `nodegate.dev/degraded` off a
/// re-gated node by hand to put it back in service while the broken agent
/// is fixed. The member's grace counts from its pod's old transition, so
/// the node was re-gated again at the next look. The removal is respected
/// until the member has been Ready once.
#[test]
fn a_re_gate_taint_taken_off_by_hand_is_respected_until_the_member_recovers() {
    let ds = agent("cni");
    let both = [ds.clone()];
    let mut n = node();
    n.opened_at = Some(ts(100));
    n.gated_since = Some(ts(1000));
    n.regated_for = Some("infra/cni".into());
    let mut m = Watched::default();
    let broken = [broken_pod(&ds, 500)];
    for at in [1001, 5000] {
        assert_eq!(
            look(&n, &both, &broken, &mut m, at),
            Health::Healthy,
            "{at}"
        );
    }
    // Ready once, broken again: re-gated after the grace as usual.
    let _ = look(&n, &both, &[ready_pod(&ds)], &mut m, 6000);
    let again = look(
        &n,
        &both,
        &[broken_pod(&ds, 6001)],
        &mut m,
        6001 + GRACE as i64,
    );
    assert_eq!(members(&again), BTreeSet::from(["infra/cni".to_string()]));
    // Opened by nodegate's own gate after the re-gate (opened-at newer than
    // gated-since, by readiness): nothing is excused.
    n.opened_at = Some(ts(1500));
    let mut fresh = Watched::default();
    let h = look(&n, &both, &broken, &mut fresh, 1501);
    assert_eq!(members(&h), BTreeSet::from(["infra/cni".to_string()]));
}
