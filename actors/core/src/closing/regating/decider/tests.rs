use std::time::Duration;

use jiff::SignedDuration;

use super::*;
use crate::closing::decider::Closing;
use crate::closing::regating::DEFAULT_REGATE_TAINT_KEY;
use crate::deciders::fixture::{Run, asked, logs, reasons, writes};
use crate::rules::placement::{EFFECT_NO_SCHEDULE, ManagedTaint, TOLERATION_OP_EXISTS};
use crate::testutil::{mk_ds, mk_node, mk_pod, taint, template_with_tolerations, toleration, ts};
use crate::vocab::budget::MaxUnavailable;
use crate::vocab::config::Config;
use crate::vocab::model::{PodInfo, Taint};

mod announced;
mod budget;

const GRACE: i64 = 60;
const NOW: i64 = 1000;

fn regate_taint() -> Taint {
    taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE)
}

fn config(max_unavailable: MaxUnavailable) -> Config {
    let regate = ManagedTaint::new(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE);
    let mut cfg = Config::default();
    cfg.placement.managed_taints.push(regate.clone());
    cfg.regate = Some(RegateConfig {
        after: Duration::from_secs(GRACE as u64),
        taint: regate,
        timeout: None,
        on_reboot: true,
        max_unavailable,
    });
    cfg
}

/// A DaemonSet that tolerates everything (as node agents usually do).
fn agent(name: &str) -> Arc<DaemonSetInfo> {
    Arc::new(mk_ds(
        "infra",
        name,
        template_with_tolerations(vec![toleration("", TOLERATION_OP_EXISTS, "", "")]),
    ))
}

/// At [`NOW`], with one agent (`infra/cni`) expected on every node, and a
/// budget of one node.
fn run() -> Run {
    let mut r = Run::new(config(MaxUnavailable::Count(1)), ts(NOW));
    r.index.daemonsets.push(agent("cni"));
    r
}

/// The agent's pod on `node`, not Ready since `since` (seconds).
fn broken_pod(node: &str, since: i64) -> Arc<PodInfo> {
    let ds = agent("cni");
    let mut p = mk_pod(&format!("cni-{node}"), node, &ds.uid);
    p.namespace = ds.namespace.as_str().into();
    p.ready = false;
    p.ready_since = Some(ts(since)).into();
    Arc::new(p)
}

fn ready_pod(node: &str) -> Arc<PodInfo> {
    let ds = agent("cni");
    let mut p = mk_pod(&format!("cni-{node}"), node, &ds.uid);
    p.namespace = ds.namespace.as_str().into();
    Arc::new(p)
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        annotations_present: true,
        ..mk_node(name, &[], vec![])
    }
}

fn at_version(mut n: NodeInfo, version: &str) -> NodeInfo {
    n.resource_version = version.into();
    n
}

/// `name` carrying the re-gate taint, at `version`.
fn regated(name: &str, version: &str) -> NodeInfo {
    at_version(mk_node(name, &[], vec![regate_taint()]), version)
}

fn reads(effects: &[Effect]) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ReadNode { node } => Some(node.as_str()),
            _ => None,
        })
        .collect()
}

fn count(effects: &[Effect], tally: &Tally) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e, Effect::Count(t) if t == tally))
        .count()
}

fn notes(effects: &[Effect]) -> Vec<&str> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RecordEvent(ev) => Some(ev.note.as_str()),
            _ => None,
        })
        .collect()
}

fn fresh(node: NodeInfo) -> Input {
    Input::NodeRead {
        node: node.name.clone(),
        read: Ok(Some(Box::new(node))),
    }
}

fn answer(write: &TaintWrite, outcome: PatchOutcome) -> Input {
    Input::Wrote {
        write: write.clone(),
        outcome,
    }
}

fn context(r: &Run) -> Context<'_> {
    Context {
        view: &r.index,
        config: &r.config,
        now: Now::local(r.now),
        may_write: r.may_write,
    }
}

fn gauges(r: &Run, g: &Closing) -> RegateGauges {
    g.regate_gauges(&context(r))
}

/// Puts `n` in the index and has `g` hear of it.
fn upsert(r: &mut Run, g: &mut Closing, n: NodeInfo) -> Vec<Effect> {
    let change = r.index.upsert(n);
    r.step(g, change)
}

/// `name` (at version 1, in the index) due and read: the write.
fn due_and_read(r: &mut Run, g: &mut Closing, name: &str) -> TaintWrite {
    r.index.pods.push(broken_pod(name, NOW - GRACE - 5));
    let out = upsert(r, g, node(name));
    assert_eq!(reads(&out), [name], "{out:?}");
    let out = r.step(g, fresh(node(name)));
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    w[0].clone()
}

#[test]
fn a_member_broken_past_the_grace_is_read_written_and_reported() {
    let mut r = run();
    r.now = ts(NOW) + SignedDuration::from_nanos(1_234_567);
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert_eq!(reads(&out), ["n1"]);
    assert!(writes(&out).is_empty());
    let out = r.step(&mut g, fresh(at_version(node("n1"), "2")));
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    let write = w[0].clone();
    assert_eq!(write.origin, Origin::Regate);
    assert_eq!(
        (write.uid.as_str(), write.resource_version.as_str()),
        ("uid-n1", "2")
    );
    let TaintChange::Add {
        taint: t,
        existing,
        annotations,
        annotations_present,
        at,
    } = &write.change
    else {
        panic!("not an add: {write:?}");
    };
    assert_eq!(*t, regate_taint());
    assert_eq!(*existing, 0);
    assert!(*annotations_present);
    assert_eq!(*at, r.now);
    // Milliseconds, as every annotation time nodegate writes.
    let expected = [
        (
            "nodegate.dev/gated-since",
            "1970-01-01T00:16:40.001Z".to_string(),
        ),
        ("nodegate.dev/regated-for", "infra/cni".to_string()),
    ];
    assert_eq!(annotations[..], expected);
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert_eq!(reasons(&out), ["NodeRegated (own write)"]);
    assert_eq!(count(&out, &Tally::Regated("members")), 1);
    let note = notes(&out)[0];
    assert!(
        note.starts_with(
            "nodegate put nodegate.dev/degraded:NoSchedule on the node: without a Ready pod for the grace: infra/cni ("
        ),
        "{note}"
    );
    assert_eq!(logs(&out, Level::Warn).len(), 1, "{out:?}");
}

#[test]
fn a_pending_write_counts_in_the_budget_until_the_index_shows_another_version() {
    let mut r = run();
    let mut g = Closing::default();
    let write = due_and_read(&mut r, &mut g, "n1");
    r.step(&mut g, answer(&write, PatchOutcome::Applied));
    // The index still shows version 1, without the taint.
    assert_eq!(g.counted(), Some((1, 0)));
    assert_eq!(gauges(&r, &g).regated, 1);
    // Not looked at meanwhile: nothing at all about n1.
    let out = r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(out.is_empty(), "{out:?}");
    // Another due node: the budget (one node) is used by the pending write.
    r.index.pods.push(broken_pod("n2", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n2"));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1);
    // The index shows the write: counted once, as shown.
    upsert(&mut r, &mut g, regated("n1", "2"));
    assert_eq!(g.counted(), Some((2, 1)));
    assert_eq!(gauges(&r, &g).regated, 1);
    // Its gate opens it again, its member Ready: the budget has room, and
    // the node refused is looked at at once.
    r.index.pods[0] = ready_pod("n1");
    let out = upsert(&mut r, &mut g, at_version(node("n1"), "3"));
    assert_eq!(reads(&out), ["n2"], "{out:?}");
    assert_eq!(gauges(&r, &g).regated, 0);
}

#[test]
fn a_pending_write_the_index_moved_past_stops_counting() {
    let mut r = run();
    let mut g = Closing::default();
    let write = due_and_read(&mut r, &mut g, "n1");
    r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert_eq!(gauges(&r, &g).regated, 1);
    // Another version without the taint (its gate already opened it).
    upsert(&mut r, &mut g, at_version(node("n1"), "5"));
    assert_eq!(gauges(&r, &g).regated, 0);
}

#[test]
fn a_pending_write_counts_while_the_index_shows_versions_older_than_the_read() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, at_version(node("n1"), "10"));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
    // The fresh read is five heartbeats ahead of the index.
    let out = r.step(&mut g, fresh(at_version(node("n1"), "15")));
    let write = writes(&out)[0].clone();
    r.step(&mut g, answer(&write, PatchOutcome::Applied));
    r.index.pods.push(broken_pod("n2", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n2"));
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1, "{out:?}");
    // The index catches up through the heartbeats before the write: n1
    // still holds the one place, and n2 is not read.
    for version in ["12", "14"] {
        let out = upsert(&mut r, &mut g, at_version(node("n1"), version));
        assert!(reads(&out).is_empty(), "{version}: {out:?}");
        assert_eq!(gauges(&r, &g).regated, 1, "{version}");
    }
    // The write itself: counted as shown, once.
    let out = upsert(&mut r, &mut g, regated("n1", "16"));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(gauges(&r, &g).regated, 1);
}

#[test]
fn broken_within_the_grace_is_looked_at_again_when_it_ends() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - 10));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert!(reads(&out).is_empty() && writes(&out).is_empty(), "{out:?}");
    assert_eq!(asked(&out), [ts(NOW - 10 + GRACE)]);
    assert_eq!(gauges(&r, &g).broken, 1);
    // Asked once: another look with the same end asks nothing more.
    let out = r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(asked(&out).is_empty(), "{out:?}");
    // Too early: nothing, and the time is asked for again.
    r.now = ts(NOW + 5);
    let out = r.step(&mut g, Input::Tick);
    assert!(reads(&out).is_empty());
    assert_eq!(asked(&out), [ts(NOW - 10 + GRACE)]);
    r.now = ts(NOW - 10 + GRACE);
    let out = r.step(&mut g, Input::Tick);
    assert_eq!(reads(&out), ["n1"]);
    assert!(asked(&out).is_empty(), "{out:?}");
}

#[test]
fn a_healthy_node_is_not_remembered_without_on_reboot() {
    let mut r = run();
    if let Some(rc) = r.config.regate.as_mut() {
        rc.on_reboot = false;
    }
    let mut g = Closing::default();
    r.index.pods.push(ready_pod("n1"));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert!(out.is_empty(), "{out:?}");
    assert!(g.regater().watched("n1").is_none());
}

/// `n1`, with its member Ready, in boot `id`.
fn in_boot(id: &str) -> NodeInfo {
    NodeInfo {
        boot_id: Some(id.into()),
        ..node("n1")
    }
}

/// `n1` seen in boot a, then in boot b (version 2) and read afresh: the
/// re-gate write for the reboot.
fn rebooted_and_read(r: &mut Run, g: &mut Closing) -> TaintWrite {
    r.index.pods.push(ready_pod("n1"));
    let out = upsert(r, g, in_boot("a"));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(
        g.regater().watched("n1").and_then(|w| w.boot_id.as_deref()),
        Some("a")
    );
    let out = upsert(r, g, at_version(in_boot("b"), "2"));
    assert_eq!(reads(&out), ["n1"]);
    let out = r.step(g, fresh(at_version(in_boot("b"), "2")));
    writes(&out)[0].clone()
}

#[test]
fn a_reboot_re_gates() {
    let mut r = run();
    let mut g = Closing::default();
    let write = rebooted_and_read(&mut r, &mut g);
    let TaintChange::Add { annotations, .. } = &write.change else {
        panic!("not an add: {write:?}");
    };
    assert_eq!(
        annotations[1],
        ("nodegate.dev/regated-for", "reboot".into())
    );
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert_eq!(count(&out, &Tally::Regated("reboot")), 1);
    assert!(notes(&out)[0].contains("the node rebooted (boot id a is now b)"));
}

/// The gate may open the re-gated node again before the index ever shows
/// the taint (its members are still Ready; the watch may coalesce the two
/// versions): the reboot was acted on once, and is not acted on again.
#[test]
fn a_reboot_acted_on_is_not_acted_on_again_when_the_taint_was_never_seen() {
    let mut r = run();
    let mut g = Closing::default();
    let write = rebooted_and_read(&mut r, &mut g);
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert_eq!(count(&out, &Tally::Regated("reboot")), 1);
    // The next version the index shows is already open again, in boot b.
    let out = upsert(&mut r, &mut g, at_version(in_boot("b"), "4"));
    assert!(
        reads(&out).is_empty(),
        "re-gated twice for one reboot: {out:?}"
    );
    assert!(writes(&out).is_empty(), "{out:?}");
    assert_eq!(
        g.regater().watched("n1").and_then(|w| w.boot_id.as_deref()),
        Some("b")
    );
    // A later reboot still counts.
    let out = upsert(&mut r, &mut g, at_version(in_boot("c"), "5"));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
}

#[test]
fn suspended_by_config_or_annotation_writes_nothing() {
    for by_config in [true, false] {
        let mut r = run();
        r.config.suspend = by_config;
        let mut g = Closing::default();
        r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
        let n = NodeInfo {
            suspended: !by_config,
            ..node("n1")
        };
        let out = upsert(&mut r, &mut g, n);
        assert!(reads(&out).is_empty(), "{out:?}");
        assert_eq!(
            logs(&out, Level::Debug),
            ["re-gating suspended: would re-gate"]
        );
        assert_eq!(asked(&out), [retry_after(ts(NOW))]);
        assert_eq!(gauges(&r, &g).suspended, 1);
        r.now = ts(NOW + 1);
        assert!(reads(&r.step(&mut g, Input::Tick)).is_empty());
    }
}

#[test]
fn a_dry_run_logs_once_and_writes_nothing() {
    let mut r = run();
    r.config.dry_run = true;
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert!(
        reads(&out).is_empty() && reasons(&out).is_empty(),
        "{out:?}"
    );
    let info = logs(&out, Level::Info);
    assert_eq!(info.len(), 1);
    assert!(info[0].starts_with("dry run: would re-gate: without a Ready pod"));
    let out = r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(out.is_empty(), "{out:?}");
    // Healthy again, then broken again: logged again.
    r.index.pods = vec![ready_pod("n1")];
    r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    r.index.pods = vec![broken_pod("n1", NOW - GRACE - 5)];
    let out = r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    assert_eq!(logs(&out, Level::Info).len(), 1, "{out:?}");
}

#[test]
fn a_follower_reads_nothing_until_it_may_write() {
    let mut r = run();
    r.may_write = false;
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    let out = upsert(&mut r, &mut g, node("n1"));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(asked(&out), [retry_after(ts(NOW))]);
    r.now = ts(NOW + 1);
    let out = r.step(&mut g, Input::Tick);
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(asked(&out), [retry_after(ts(NOW + 1))]);
    r.may_write = true;
    let out = r.step(&mut g, Input::MayWrite);
    assert_eq!(reads(&out), ["n1"]);
    // In flight: not read twice.
    let out = r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    assert!(reads(&out).is_empty(), "{out:?}");
}

#[test]
fn a_node_gated_meanwhile_is_not_written() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    upsert(&mut r, &mut g, node("n1"));
    let gated = NodeInfo {
        taints: vec![taint("nodegate.dev/initializing", "NoSchedule")],
        ..at_version(node("n1"), "2")
    };
    let out = r.step(&mut g, fresh(gated));
    assert!(writes(&out).is_empty(), "{out:?}");
    assert!(logs(&out, Level::Debug)[0].starts_with("re-gate: not open any more"));
}

#[test]
fn a_conflict_decides_again_at_once() {
    let mut r = run();
    let mut g = Closing::default();
    let write = due_and_read(&mut r, &mut g, "n1");
    let out = r.step(&mut g, answer(&write, PatchOutcome::Conflict));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
    let out = r.step(&mut g, fresh(at_version(node("n1"), "2")));
    let write = writes(&out)[0].clone();
    assert_eq!(write.resource_version, "2");
    // Not leading any more: waits for MayWrite.
    let out = r.step(&mut g, answer(&write, PatchOutcome::NotLeader));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
}

#[test]
fn a_failed_read_or_write_is_tried_again_after_a_moment() {
    let mut r = run();
    let mut g = Closing::default();
    let write = due_and_read(&mut r, &mut g, "n1");
    let out = r.step(&mut g, answer(&write, PatchOutcome::Failed("boom".into())));
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(asked(&out), [retry_after(ts(NOW))]);
    assert_eq!(logs(&out, Level::Warn).len(), 1);
    r.now = ts(NOW + 1);
    let out = r.step(&mut g, Input::Tick);
    assert_eq!(reads(&out), ["n1"]);
    let failed = Input::NodeRead {
        node: "n1".into(),
        read: Err("timeout".into()),
    };
    let out = r.step(&mut g, failed);
    assert_eq!(asked(&out), [retry_after(ts(NOW + 1))]);
    assert!(logs(&out, Level::Warn)[0].contains("timeout"));
}

#[test]
fn a_deleted_node_is_forgotten() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - 10));
    let n = NodeInfo {
        boot_id: Some("a".into()),
        ..node("n1")
    };
    upsert(&mut r, &mut g, n);
    assert!(g.regater().watched("n1").is_some());
    let change = r.index.delete("n1");
    let out = r.step(&mut g, change);
    assert!(out.is_empty(), "{out:?}");
    assert!(g.regater().watched("n1").is_none());
    let after = gauges(&r, &g);
    assert_eq!((after.regated, after.broken, after.suspended), (0, 0, 0));
    // Gone when read, or when written.
    let write = due_and_read(&mut r, &mut g, "n2");
    r.step(&mut g, answer(&write, PatchOutcome::NotFound));
    assert_eq!(gauges(&r, &g).broken, 0);
    r.index.pods.push(broken_pod("n3", NOW - GRACE - 5));
    let n3 = NodeInfo {
        boot_id: Some("a".into()),
        ..node("n3")
    };
    upsert(&mut r, &mut g, n3);
    assert!(g.regater().watched("n3").is_some());
    let gone = Input::NodeRead {
        node: "n3".into(),
        read: Ok(None),
    };
    assert!(r.step(&mut g, gone).is_empty());
    assert!(g.regater().watched("n3").is_none());
}

#[test]
fn with_re_gating_off_nothing_happens_and_nothing_is_kept() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - 10));
    let n1 = NodeInfo {
        boot_id: Some("a".into()),
        ..node("n1")
    };
    upsert(&mut r, &mut g, n1);
    assert!(g.regater().watched("n1").is_some());
    assert_eq!(gauges(&r, &g).broken, 1);
    r.config.regate = None;
    r.index.pods.push(broken_pod("n2", NOW - GRACE - 5));
    let inputs = [
        r.index.clone().upsert(node("n2")),
        Input::Changed(Change::Everything),
        Input::Tick,
        Input::MayWrite,
        fresh(node("n2")),
    ];
    for input in inputs {
        let out = r.step(&mut g, input);
        assert!(out.is_empty(), "{out:?}");
    }
    assert!(g.regater().watched("n1").is_none());
    let gauges = gauges(&r, &g);
    assert_eq!((gauges.regated, gauges.broken), (0, 0));
}

#[test]
fn look_again_times_follow_this_machines_clock() {
    let server = Now {
        local: ts(NOW + 7),
        server: Some(ts(NOW)),
    };
    let local_time = |at, now: Now| now.to_local(now.for_grace(), at);
    assert_eq!(local_time(ts(NOW + 60), server), ts(NOW + 67));
    assert_eq!(local_time(ts(NOW + 60), Now::local(ts(NOW))), ts(NOW + 60));
}

#[test]
fn a_node_healthy_again_while_its_read_is_out_is_not_written() {
    let mut r = run();
    let mut g = Closing::default();
    r.index.pods.push(broken_pod("n1", NOW - GRACE - 5));
    upsert(&mut r, &mut g, node("n1"));
    r.index.pods = vec![ready_pod("n1")];
    r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }));
    let out = r.step(&mut g, fresh(node("n1")));
    assert!(out.is_empty(), "{out:?}");
}

#[test]
fn a_write_applied_after_re_gating_was_turned_off_is_still_reported() {
    let mut r = run();
    let mut g = Closing::default();
    let write = due_and_read(&mut r, &mut g, "n1");
    r.config.regate = None;
    r.step(&mut g, Input::Changed(Change::Everything));
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert_eq!(reasons(&out), ["NodeRegated (own write)"]);
    assert_eq!(count(&out, &Tally::Regated("members")), 1);
}
