use super::*;
use crate::testutil::{mk_ds, mk_node, mk_pod, ts};
use crate::vocab::config::{DEFAULT_KURED_DAEMONSET, DEFAULT_REBOOT_TIMEOUT};

fn kured_ds(lock: Option<&str>) -> Arc<DaemonSetInfo> {
    let mut ds = mk_ds("kube-system", "kured", Default::default());
    if let Some(lock) = lock {
        ds.annotations.insert(
            crate::closing::regating::reboot::KURED_NODE_LOCK.into(),
            lock.into(),
        );
    }
    Arc::new(ds)
}

fn all_sources() -> AnnouncedReboots {
    AnnouncedReboots {
        sources: Source::ALL.to_vec(),
        kured_daemonset: DEFAULT_KURED_DAEMONSET.into(),
        kured_max_holders: 1,
        timeout: Some(DEFAULT_REBOOT_TIMEOUT),
    }
}

fn only(source: Source) -> AnnouncedReboots {
    AnnouncedReboots {
        sources: vec![source],
        ..all_sources()
    }
}

const SINGLE: &str = r#"{"nodeID":"n1","metadata":{"unschedulable":false},"created":"1970-01-01T00:16:40.123456789Z","TTL":0}"#;

#[test]
fn kureds_lock_is_read_in_both_of_its_forms_and_expires_by_its_ttl() {
    assert_eq!(
        kured_lock_holders(SINGLE, ts(1_000_000), 1),
        Ok(vec!["n1".into()])
    );
    // --concurrency 2: a list; an entry past its TTL (in nanoseconds, as Go
    // writes a duration) is expired, as kured judges it.
    let multi = r#"{"maxOwners":2,"locks":[
        {"nodeID":"n1","created":"1970-01-01T00:16:40Z","TTL":60000000000},
        {"nodeID":"n2","created":"1970-01-01T00:16:40Z","TTL":0}]}"#;
    assert_eq!(
        kured_lock_holders(multi, ts(1059), 2),
        Ok(vec!["n1".into(), "n2".into()])
    );
    assert_eq!(
        kured_lock_holders(multi, ts(1060), 2),
        Ok(vec!["n2".into()])
    );
    assert_eq!(
        kured_lock_holders(r#"{"maxOwners":2}"#, ts(0), 2),
        Ok(vec![])
    );
    let bad = kured_lock_holders("n1", ts(0), 1).unwrap_err();
    assert!(bad.contains("weave.works/kured-node-lock"), "{bad}");
}

/// Whoever may write kured's DaemonSet annotations could name every node
/// in the lock: only the first `maxOwners` and `--kured-max-holders` count.
#[test]
fn kureds_lock_names_at_most_max_owners_and_kured_max_holders_nodes() {
    let entries: Vec<String> = (0..10)
        .map(|i| format!(r#"{{"nodeID":"n{i}","created":"1970-01-01T00:16:40Z","TTL":0}}"#))
        .collect();
    let lock = |max_owners: i64| {
        format!(
            r#"{{"maxOwners":{max_owners},"locks":[{}]}}"#,
            entries.join(",")
        )
    };
    let at = ts(2000);
    assert_eq!(kured_lock_holders(&lock(1), at, 5), Ok(vec!["n0".into()]));
    assert_eq!(
        kured_lock_holders(&lock(10), at, 1),
        Ok(vec!["n0".into()]),
        "--kured-max-holders 1 caps a lock whose maxOwners is 10"
    );
    assert_eq!(
        kured_lock_holders(&lock(3), at, 5),
        Ok(vec!["n0".into(), "n1".into(), "n2".into()])
    );
    // 0 or less is read as 1.
    assert_eq!(kured_lock_holders(&lock(0), at, 0), Ok(vec!["n0".into()]));
}

#[test]
fn each_source_announces_only_when_listened_to() {
    let locked = kured_ds(Some(SINGLE));
    let mut n = mk_node("n1", &[], vec![]);
    let at = ts(2000);
    // kured's lock, on the DaemonSet named by --kured-daemonset only.
    let a = announced(&n, &only(Source::KuredLock), [&locked], at);
    assert_eq!(a.map(|a| a.source), Some(Source::KuredLock));
    let elsewhere = AnnouncedReboots {
        kured_daemonset: "kured/kured".into(),
        ..only(Source::KuredLock)
    };
    assert_eq!(announced(&n, &elsewhere, [&locked], at), None);
    assert_eq!(
        announced(&n, &only(Source::Annotation), [&locked], at),
        None
    );
    // Another node holds the lock: nothing for n1.
    let other = mk_node("n2", &[], vec![]);
    assert_eq!(announced(&other, &all_sources(), [&locked], at), None);
    // The node annotations.
    n.reboot_pending = Some("kernel 6.8".into());
    let a = announced(&n, &only(Source::Annotation), [], at);
    assert_eq!(a.as_ref().map(|a| a.source), Some(Source::Annotation));
    assert!(a.is_some_and(|a| a.detail.contains("kernel 6.8")));
    assert_eq!(announced(&n, &only(Source::KuredAnnotation), [], at), None);
    n.kured_rebooting = true;
    let a = announced(&n, &only(Source::KuredAnnotation), [], at);
    assert_eq!(a.map(|a| a.source), Some(Source::KuredAnnotation));
    // Off by default.
    assert_eq!(
        announced(&n, &AnnouncedReboots::default(), [&locked], at),
        None
    );
    // Only kured's lock goes around the budget.
    let bypass: Vec<Source> = Source::ALL
        .into_iter()
        .filter(|s| s.bypasses_budget())
        .collect();
    assert_eq!(bypass, [Source::KuredLock]);
}

#[test]
fn the_gate_waits_for_a_new_boot_id_and_for_readiness_after_the_taint() {
    let ds = mk_ds("infra", "cni", Default::default());
    let mut n = mk_node("n1", &[], vec![]);
    n.boot_id = Some("b1".into());
    n.gated_since = Some(ts(1000) + SignedDuration::from_millis(400));
    let ready = |since: i64| {
        let mut p = mk_pod("cni-1", "n1", &ds.uid);
        p.namespace = "infra".into();
        p.ready_since = Some(ts(since)).into();
        Arc::new(p)
    };
    // Not re-gated before a reboot: no hold at all.
    assert_eq!(reboot_wait(&n, [&ds], &[ready(10)]), None);
    n.awaiting_reboot = Some("b1".into());
    // A record left from an earlier announcement on a node re-gated since
    // for its members: not held by it.
    n.regated_for = Some("infra/csi".into());
    assert_eq!(reboot_wait(&n, [&ds], &[ready(10)]), None);
    n.regated_for = Some("announced-reboot:annotation".into());
    // The same boot: held, whatever the pods show.
    let why = reboot_wait(&n, [&ds], &[ready(2000)]).unwrap_or_default();
    assert!(why.contains("boot id b1"), "{why}");
    // Rebooted, the pod Ready since before the taint: held.
    n.boot_id = Some("b2".into());
    let why = reboot_wait(&n, [&ds], &[ready(999)]).unwrap_or_default();
    assert!(why.contains("infra/cni"), "{why}");
    // Ready in the taint's own second (the kubelet writes whole seconds):
    // it cannot be told from before, and holds.
    assert!(reboot_wait(&n, [&ds], &[ready(1000)]).is_some());
    // Ready again in a later second: open.
    assert_eq!(reboot_wait(&n, [&ds], &[ready(1001)]), None);
    assert_eq!(reboot_wait(&n, [&ds], &[ready(1500)]), None);
    // A node that reported no boot id when re-gated: any id is a reboot.
    n.awaiting_reboot = Some("".into());
    n.boot_id = None;
    assert!(reboot_wait(&n, [&ds], &[ready(1500)]).is_some());
    n.boot_id = Some("b3".into());
    assert_eq!(reboot_wait(&n, [&ds], &[ready(1500)]), None);
}
