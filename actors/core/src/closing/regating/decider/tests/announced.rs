//! Re-gating before an announced reboot (semantics.md §6.10): each source,
//! the budget (kured's lock goes around it, a person's annotation does
//! not), the record of the boot id, its removal on withdrawal, and a
//! replica that starts (or starts leading) while a reboot is announced.

use super::*;
use crate::vocab::config::{AnnouncedReboots, DEFAULT_KURED_DAEMONSET, Source};

const LOCK_N1: &str = r#"{"nodeID":"n1","metadata":{"unschedulable":false},"created":"1970-01-01T00:16:00Z","TTL":0}"#;

/// [`run`] listening to every source, with kured's DaemonSet holding
/// `lock` (if any).
fn announced_run(lock: Option<&str>) -> Run {
    let mut r = run();
    r.config.reboots = AnnouncedReboots {
        sources: Source::ALL.to_vec(),
        kured_daemonset: DEFAULT_KURED_DAEMONSET.into(),
        kured_max_holders: 1,
        timeout: None,
    };
    let mut kured = mk_ds("kube-system", "kured", Default::default());
    if let Some(lock) = lock {
        kured.annotations.insert(
            crate::closing::regating::reboot::KURED_NODE_LOCK.into(),
            lock.into(),
        );
    }
    r.index.daemonsets.push(Arc::new(kured));
    r
}

/// `name`, healthy (its agent Ready), booted as `boot`.
fn booted(r: &mut Run, name: &str, boot: &str) -> NodeInfo {
    r.index.pods.push(ready_pod(name));
    NodeInfo {
        boot_id: Some(boot.into()),
        ..node(name)
    }
}

fn annotations_of(write: &TaintWrite) -> Vec<(&'static str, String)> {
    match &write.change {
        TaintChange::Add { annotations, .. } => annotations.clone(),
        other => panic!("not an add: {other:?}"),
    }
}

/// The budget of one node is used up by `n0`: a person's announcement is
/// refused, kured's lock is not (kured lets one node reboot at a time).
#[test]
fn kureds_lock_regates_outside_the_budget_and_records_the_boot_id() {
    let mut r = announced_run(Some(LOCK_N1));
    let mut g = Closing::default();
    upsert(&mut r, &mut g, regated("n0", "1"));
    let n1 = booted(&mut r, "n1", "boot-1");
    let out = upsert(&mut r, &mut g, n1.clone());
    assert_eq!(reads(&out), ["n1"], "{out:?}");
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 0);
    let out = r.step(&mut g, fresh(at_version(n1, "2")));
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    let write = w[0].clone();
    let notes_written = annotations_of(&write);
    assert!(
        notes_written.contains(&("nodegate.dev/awaiting-reboot", "boot-1".into())),
        "{notes_written:?}"
    );
    assert!(
        notes_written.contains(&(
            "nodegate.dev/regated-for",
            "announced-reboot:kured-lock".into()
        )),
        "{notes_written:?}"
    );
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert_eq!(reasons(&out), ["NodeRegated (own write)"]);
    assert_eq!(count(&out, &Tally::Regated("announced")), 1);
    let note = notes(&out)[0];
    assert!(note.contains("before its reboot"), "{note}");
    assert!(note.contains("kured's lock"), "{note}");
}

/// kured's lock goes around `--regate-max-unavailable`, not around
/// `--max-unavailable`: with the one place of the cap taken, the node the
/// lock names is refused too.
#[test]
fn kureds_lock_stays_within_max_unavailable() {
    let mut r = announced_run(Some(LOCK_N1));
    r.config.max_unavailable = Some(crate::vocab::budget::MaxUnavailable::Count(1));
    let mut g = Closing::default();
    upsert(&mut r, &mut g, regated("n0", "1"));
    let n1 = booted(&mut r, "n1", "boot-1");
    let out = upsert(&mut r, &mut g, n1);
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1, "{out:?}");
    let note = notes(&out)[0];
    assert!(note.contains("--max-unavailable"), "{note}");
}

#[test]
fn a_persons_announcement_goes_through_the_budget() {
    let mut r = announced_run(None);
    let mut g = Closing::default();
    upsert(&mut r, &mut g, regated("n0", "1"));
    let mut n1 = booted(&mut r, "n1", "boot-1");
    n1.reboot_pending = Some("firmware".into());
    let out = upsert(&mut r, &mut g, n1.clone());
    assert!(reads(&out).is_empty(), "{out:?}");
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1);
    assert_eq!(reasons(&out), ["RegateBudgetExhausted"]);
    assert!(notes(&out)[0].contains("firmware"), "{out:?}");
    // A place frees up: re-gated, within the budget.
    let out = upsert(&mut r, &mut g, at_version(node("n0"), "2"));
    assert_eq!(reads(&out), ["n1"], "{out:?}");
    // kured's node annotation counts the same way.
    let mut r = announced_run(None);
    let mut g = Closing::default();
    upsert(&mut r, &mut g, regated("n0", "1"));
    let mut n2 = booted(&mut r, "n2", "boot-1");
    n2.kured_rebooting = true;
    let out = upsert(&mut r, &mut g, n2);
    assert_eq!(count(&out, &Tally::RegateBudgetExhausted), 1, "{out:?}");
}

#[test]
fn announcements_are_nothing_unless_listened_to() {
    let mut r = announced_run(Some(LOCK_N1));
    r.config.reboots = AnnouncedReboots::default();
    let mut g = Closing::default();
    let mut n1 = booted(&mut r, "n1", "boot-1");
    n1.reboot_pending = Some("x".into());
    n1.kured_rebooting = true;
    let out = upsert(&mut r, &mut g, n1);
    assert!(reads(&out).is_empty() && writes(&out).is_empty(), "{out:?}");
}

/// Gated before the reboot, the announcement goes without one: the record
/// is removed (one conditional write), and not again while the index still
/// shows the version it was removed from.
#[test]
fn a_withdrawn_announcement_removes_the_record_once() {
    let mut r = announced_run(None);
    let mut g = Closing::default();
    let mut n1 = booted(&mut r, "n1", "boot-1");
    n1.taints.push(regate_taint());
    n1.awaiting_reboot = Some("boot-1".into());
    n1.reboot_pending = Some("x".into());
    // While it stands: nothing.
    let out = upsert(&mut r, &mut g, n1.clone());
    assert!(writes(&out).is_empty(), "{out:?}");
    n1.reboot_pending = None;
    n1.resource_version = "2".into();
    let out = upsert(&mut r, &mut g, n1.clone());
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    let write = w[0].clone();
    assert_eq!(write.resource_version, "2");
    assert_eq!(
        write.change,
        TaintChange::Annotate {
            annotations: vec![("nodegate.dev/awaiting-reboot", None)]
        }
    );
    // Its pods change before the answer, and after it: no second write
    // while the index shows version 2.
    assert!(writes(&r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }))).is_empty());
    let out = r.step(&mut g, answer(&write, PatchOutcome::Applied));
    assert!(writes(&out).is_empty(), "{out:?}");
    assert!(writes(&r.step(&mut g, Input::Changed(Change::Pods { node: "n1".into() }))).is_empty());
    // Rebooted and still gated: the record stays for the gate.
    let mut rebooted = n1.clone();
    rebooted.boot_id = Some("boot-2".into());
    rebooted.resource_version = "3".into();
    assert!(writes(&upsert(&mut r, &mut g, rebooted)).is_empty());
}

/// A replica that starts, or starts leading, while a node is re-gated for
/// an announced reboot decides from what the cluster shows: the record on
/// the node says it was acted on, so nothing is written twice; a record
/// left by a withdrawal is removed once this replica leads.
#[test]
fn a_new_leader_finds_the_announcement_acted_on_and_removes_a_withdrawn_one() {
    let mut r = announced_run(Some(LOCK_N1));
    r.may_write = false;
    let mut g = Closing::default();
    let mut n1 = booted(&mut r, "n1", "boot-1");
    n1.taints.push(regate_taint());
    n1.awaiting_reboot = Some("boot-1".into());
    r.index.upsert(n1);
    let mut n2 = booted(&mut r, "n2", "boot-7");
    n2.taints.push(regate_taint());
    n2.awaiting_reboot = Some("boot-7".into());
    r.index.upsert(n2);
    let out = r.step(&mut g, Input::Changed(Change::Everything));
    assert!(writes(&out).is_empty() && reads(&out).is_empty(), "{out:?}");
    r.may_write = true;
    let out = r.step(&mut g, Input::MayWrite);
    let w = writes(&out);
    assert_eq!(w.len(), 1, "{out:?}");
    assert_eq!(w[0].node, "n2", "kured's lock still names n1");
    assert!(matches!(w[0].change, TaintChange::Annotate { .. }));
}

#[test]
fn an_unreadable_lock_announces_nothing_and_is_warned_about_once() {
    let mut r = announced_run(Some("k1"));
    let mut g = Closing::default();
    let n1 = booted(&mut r, "n1", "boot-1");
    let out = upsert(&mut r, &mut g, n1.clone());
    assert!(reads(&out).is_empty(), "{out:?}");
    let warned = logs(&out, Level::Warn);
    assert_eq!(warned.len(), 1, "{out:?}");
    assert!(warned[0].contains("kube-system/kured"), "{warned:?}");
    let out = upsert(&mut r, &mut g, at_version(n1, "2"));
    assert!(logs(&out, Level::Warn).is_empty(), "{out:?}");
}

/// Re-gating on and every source listened to, for [`before_reboot`] alone.
fn reboot_config() -> Config {
    let regate = ManagedTaint::new(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE);
    let mut cfg = Config::default();
    cfg.placement.managed_taints.push(regate.clone());
    cfg.regate = Some(RegateConfig {
        after: Duration::from_secs(60),
        taint: regate,
        timeout: None,
        on_reboot: false,
        max_unavailable: Default::default(),
    });
    cfg.reboots = AnnouncedReboots {
        sources: Source::ALL.to_vec(),
        kured_daemonset: DEFAULT_KURED_DAEMONSET.into(),
        kured_max_holders: 1,
        timeout: Some(crate::vocab::config::DEFAULT_REBOOT_TIMEOUT),
    };
    cfg
}

#[test]
fn an_announcement_regates_an_open_node_once_and_its_record_is_forgotten_when_it_goes() {
    let c = reboot_config();
    let a = Announcement {
        source: Source::Annotation,
        detail: "x".into(),
    };
    let mut n = mk_node("n1", &[], vec![]);
    n.boot_id = Some("b1".into());
    assert_eq!(
        before_reboot(&n, &c, Some(a.clone())),
        BeforeReboot::Regate(a.clone())
    );
    assert_eq!(before_reboot(&n, &c, None), BeforeReboot::Nothing);
    // Re-gated: the record is there; nothing more while it stands.
    let mut gated = n.clone();
    gated.awaiting_reboot = Some("b1".into());
    gated
        .taints
        .push(taint(DEFAULT_REGATE_TAINT_KEY, EFFECT_NO_SCHEDULE));
    assert_eq!(
        before_reboot(&gated, &c, Some(a.clone())),
        BeforeReboot::Nothing
    );
    // Withdrawn before any reboot: the record goes, the gate opens by ready.
    assert_eq!(before_reboot(&gated, &c, None), BeforeReboot::Forget);
    // Rebooted and still gated: the gate needs the record.
    gated.boot_id = Some("b2".into());
    assert_eq!(before_reboot(&gated, &c, None), BeforeReboot::Nothing);
    // Open again (after the reboot, or by its deadline) with the
    // announcement still showing: not re-gated for it again.
    let mut open = gated.clone();
    open.taints.clear();
    assert_eq!(
        before_reboot(&open, &c, Some(a.clone())),
        BeforeReboot::Nothing
    );
    // It went: the record is forgotten, so the next announcement counts.
    assert_eq!(before_reboot(&open, &c, None), BeforeReboot::Forget);
    // Ignored, out of scope or re-gating off: nothing.
    n.ignored = true;
    assert_eq!(
        before_reboot(&n, &c, Some(a.clone())),
        BeforeReboot::Nothing
    );
    n.ignored = false;
    let mut off = c.clone();
    off.regate = None;
    assert_eq!(before_reboot(&n, &off, Some(a)), BeforeReboot::Nothing);
}
